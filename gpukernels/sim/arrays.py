"""Arrays as kernels see them on the simulator: NumPy arrays with CUDA's indexing rules.

* Every element access is bounds-checked: :class:`~gpukernels.sim.errors.OutOfBoundsError` names the array,
  the index, its shape, the thread, the block and the kernel line.
* Negative indices. A literal one (``a[-1]``, ``a[i, -2]``) counts from the end, as in Python and as Numba
  compiles it for a GPU. One computed at run time (``a[i - 1]`` at ``i = 0``) is an error by default: it is
  almost always a bug, and on a GPU it is no error at all -- Numba adds the axis length, so the thread silently
  reads or writes the other end of the array. ``gpukernels.sim.configure(negative_index="wrap")`` does what the
  GPU does instead. An index below minus the length is out of bounds either way. Slices follow Python (and
  Numba): ``s[-1::-2]`` is the odd elements backwards, and bounds are clipped to the array.
* Views (slices, ``a[:, 0]``, ``.T``, ``transpose``, ``reshape``, ``ravel``, ``view``) are arrays of the same
  kind: bounds-checked against their own shape, observed as accesses to the elements of the allocation they
  view, under its name.
* One class per number of dimensions keeps the common case (``a[i, j]`` with two non-negative ints) to a tuple
  unpack, two comparisons and the NumPy access; anything else (slices, rows of a 2-D array, negative indices,
  errors) takes the slow path.
* Observation costs nothing unless asked for: a launch that is traced (or shuffled with preemption) wraps its
  arrays in the ``Hooked*`` subclasses instead, which call ``HOOK(array, element, kind)`` after each element
  access (``element``: the flat index in the allocation; ``kind``: ``READ``, ``WRITE`` or ``ATOMIC``).
"""

from __future__ import annotations

import sys
from operator import mul

import numpy as np

from . import _ctx, _state
from ._source import describe, frame_site, literal_index, user_frame
from .errors import OutOfBoundsError

READ, WRITE, ATOMIC = 0, 1, 2
GLOBAL, SHARED, LOCAL = "global", "shared", "local"
_ACTION = {READ: "read", WRITE: "write", ATOMIC: "atomic"}
_VERB = {READ: "read", WRITE: "write", ATOMIC: "update"}

# Set by the launch while a hooked launch runs: HOOK(array, element, kind), called from kernel code; CHECK, the same
# for the asynchronous-operations model (gpukernels.sim._async) when HOOK is already the tracer's or the shuffle's.
HOOK = None
CHECK = None


class SimArray:
    """Base class; instances are of the per-ndim subclasses made by :func:`wrap`."""

    __slots__ = ("_a", "shape", "size", "ndim", "dtype", "name", "space", "root", "offset", "aid", "st", "isz")

    def __init__(self, a: np.ndarray, name: str, space: str, root=None, offset: int = 0, aid: int = -1):
        self._a = a
        self.shape = a.shape  # a plain tuple: ``a.shape[-1]`` is valid in a CUDA kernel
        self.size = a.size
        self.ndim = a.ndim
        self.dtype = a.dtype
        self.name = name
        self.space = space
        self.root = a if root is None else root  # the allocation this is a view of
        self.offset = offset  # byte offset of a[0, ...] from the start of ``root``
        self.aid = aid  # the tracer's id for ``root``
        self.st = a.strides  # for the tracer's element index: (offset + sum(index * st)) // isz
        self.isz = self.root.itemsize  # elements are counted in the allocation's own items

    # -- the slow path: anything that is not "ndim non-negative ints", and every error ---------------------
    def _check(self, idx, kind, depth=2):
        """``idx`` after the checks (negative literals counted from the end), or an OutOfBoundsError.
        ``depth``: frames from here up to the kernel's code, for the error's line."""
        comps = idx if idx.__class__ is tuple else (idx,)
        if len(comps) > self.ndim:
            raise IndexError(f"too many indices for {self.ndim}-dimensional array {self.name!r}: {idx!r}")
        fixed = None
        for axis, c in enumerate(comps):
            if isinstance(c, (int, np.integer)):
                if c < 0:
                    n = self.shape[axis]
                    if c < -n or not self._may_wrap(axis, depth + 1):
                        raise self._oob(idx, axis, kind, depth + 1)
                    if fixed is None:
                        fixed = list(comps)
                    fixed[axis] = int(c) + n
                elif c >= self.shape[axis]:
                    raise self._oob(idx, axis, kind, depth + 1)
            elif not isinstance(c, slice):
                raise TypeError(
                    f"array index must be an integer or a slice, got {type(c).__name__} {c!r} "
                    f"(indexing {self.name!r})"
                )
        if fixed is None:
            return idx
        return tuple(fixed) if idx.__class__ is tuple else fixed[0]

    @staticmethod
    def _may_wrap(axis, depth) -> bool:
        """A negative index counts from the end when the configuration says so or the source has a literal."""
        if _state.CONFIG.negative_index == "wrap":
            return True
        frame = user_frame(sys._getframe(depth))
        literal = literal_index(frame) if frame is not None else None
        return bool(literal) and axis < len(literal) and literal[axis]

    def _get_slow(self, idx):
        """(value or view, index after the checks)."""
        idx = self._check(idx, READ, 3)
        out = self._a[idx]
        if isinstance(out, np.ndarray):
            return self._view(out), idx
        return out, idx

    def _view(self, sub: np.ndarray):
        if sub.size and not np.may_share_memory(sub, self._a):
            raise NotImplementedError(
                f"this would copy {self.space} array {self.name!r} (shape {self._a.shape}, strides "
                f"{self._a.strides}) inside a kernel, which Numba's CUDA target cannot do: reshape and ravel "
                "need a contiguous array"
            )
        offset = self.offset + (sub.__array_interface__["data"][0] - self._a.__array_interface__["data"][0])
        return wrap_like(self, sub, offset)

    def _oob(self, idx, axis, kind, depth=2):
        ctx = _ctx.LAUNCH
        who = ctx.who() if ctx is not None else {}
        site = frame_site(sys._getframe(depth))
        action = _ACTION[kind]
        comps = idx if idx.__class__ is tuple else (idx,)
        bad = comps[axis]
        n = self.shape[axis]
        shown = tuple(int(c) if isinstance(c, (int, np.integer)) else c for c in comps)
        shown = shown[0] if len(shown) == 1 else shown
        where = f"{who.get('thread_text', 'outside a kernel')} at {describe(site)}"
        if bad >= 0:
            why = f"index {bad} on axis {axis} is >= its length {n}; {where}"
        elif bad < -n:
            why = (f"index {bad} on axis {axis} is below minus its length {n}; {where}. On a GPU Numba would add "
                   f"{n} and still touch memory outside the array (undefined behaviour)")
        else:
            wrapped = list(shown) if isinstance(shown, tuple) else [shown]
            wrapped[axis] += n
            other = wrapped[0] if len(wrapped) == 1 else tuple(wrapped)
            why = (
                f"index {bad} on axis {axis} is negative, computed at run time; {where}. That is almost always a "
                f"bug (an `i - 1` at i = 0). On a GPU it is not even an error: Numba adds the axis length, so this "
                f"thread would silently {_VERB[kind]} {self.name}[{other}], the other end of the array. If that is "
                "what you mean, write the index so that it is not negative, or run "
                "gpukernels.sim.configure(negative_index='wrap') to do what the GPU does"
            )
        view = "" if self.root is self._a else f", a view of an array of shape {tuple(self.root.shape)}"
        msg = (f"out-of-bounds {action} of {self.space} array {self.name!r} at index {shown!r} "
               f"(shape {tuple(self.shape)}{view}): {why}")
        return OutOfBoundsError(
            msg,
            array=self.name,
            index=shown,
            shape=tuple(self.shape),
            space=self.space,
            kernel=who.get("kernel"),
            block=who.get("block"),
            thread=who.get("thread"),
            location=describe(site).split(" ")[0],
        )

    def _set_slow(self, idx, value):
        idx = self._check(idx, WRITE, 3)
        self._a[idx] = value
        return idx

    # -- views a kernel can make (Numba's CUDA target supports these; each is an array of the same kind) -----
    @property
    def T(self):
        return self._view(self._a.T)

    def transpose(self, *axes):
        return self._view(self._a.transpose(*axes))

    def reshape(self, *shape):
        return self._view(self._a.reshape(*shape))

    def ravel(self):
        return self._view(self._a.ravel())

    def view(self, dtype):
        return self._view(self._a.view(dtype))

    # -- everything else a kernel may ask of an array ------------------------------------------------------
    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for i in range(len(self._a)):
            yield self[i]

    def __getattr__(self, name):  # e.g. itemsize, strides, T (rare in kernels)
        return getattr(self._a, name)

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)

    def __repr__(self):
        return f"<{self.space} array {self.name!r} shape={tuple(self.shape)} dtype={self.dtype}>"

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """A NumPy ufunc on whole arrays in a kernel (``np.sin(x, out)``, which Numba's CUDA target compiles):
        applied to the arrays behind them; a traced launch sees every element of each read and written."""
        def plain(x):
            return x._a if isinstance(x, SimArray) else x

        if "out" in kwargs:
            outs = kwargs["out"] if isinstance(kwargs["out"], tuple) else (kwargs["out"],)
            kwargs["out"] = tuple(map(plain, outs))
        else:
            outs = inputs[ufunc.nin:]
            inputs = inputs[: ufunc.nin]
            if outs:
                kwargs["out"] = tuple(map(plain, outs))
        result = getattr(ufunc, method)(*map(plain, inputs), **kwargs)
        if HOOK is not None:  # called from here, so that the kernel's frame is the hook's sys._getframe(2)
            for arrays, kind in ((inputs, READ), (outs, WRITE)):
                for x in arrays:
                    if isinstance(x, _HOOKED_TYPES):
                        for element in _elements(x, ()):
                            HOOK(x, element, kind)
        return result


class SimArray1(SimArray):
    __slots__ = ()

    def __getitem__(self, i):
        try:
            if i >= 0:
                return self._a[i]
        except Exception:
            pass
        return self._get_slow(i)[0]

    def __setitem__(self, i, value):
        try:
            if i >= 0:
                self._a[i] = value
                return
        except (IndexError, TypeError):
            pass
        self._set_slow(i, value)


class SimArray2(SimArray):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            i, j = idx
            if i >= 0 and j >= 0:
                return self._a[idx]
        except Exception:
            pass
        return self._get_slow(idx)[0]

    def __setitem__(self, idx, value):
        try:
            i, j = idx
            if i >= 0 and j >= 0:
                self._a[idx] = value
                return
        except (IndexError, TypeError, ValueError):
            pass
        self._set_slow(idx, value)


class SimArray3(SimArray):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            i, j, k = idx
            if i >= 0 and j >= 0 and k >= 0:
                return self._a[idx]
        except Exception:
            pass
        return self._get_slow(idx)[0]

    def __setitem__(self, idx, value):
        try:
            i, j, k = idx
            if i >= 0 and j >= 0 and k >= 0:
                self._a[idx] = value
                return
        except (IndexError, TypeError, ValueError):
            pass
        self._set_slow(idx, value)


class SimArrayN(SimArray):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            if len(idx) == self.ndim and min(idx) >= 0:
                return self._a[idx]
        except Exception:
            pass
        return self._get_slow(idx)[0]

    def __setitem__(self, idx, value):
        try:
            if len(idx) == self.ndim and min(idx) >= 0:
                self._a[idx] = value
                return
        except (IndexError, TypeError, ValueError):
            pass
        self._set_slow(idx, value)


def _flat(arr: SimArray, idx) -> int:
    """Flat element index of ``arr[idx]`` within the allocation ``arr`` views."""
    if idx.__class__ is tuple:
        return (arr.offset + sum(map(mul, idx, arr.st))) // arr.isz
    return (arr.offset + int(idx) * arr.st[0]) // arr.isz


def _elements(arr: SimArray, idx) -> list:
    """Flat element indices (in the allocation) that ``arr[idx]`` covers: one for an element, all of a slice's."""
    comps = idx if idx.__class__ is tuple else (idx,)
    if len(comps) == arr.ndim and all(isinstance(c, (int, np.integer)) for c in comps):
        return [_flat(arr, idx)]
    sub = arr._a[idx]
    base = arr.offset + (sub.__array_interface__["data"][0] - arr._a.__array_interface__["data"][0])
    pos = np.indices(sub.shape).reshape(sub.ndim, -1)
    return ((base + np.asarray(sub.strides) @ pos) // arr.isz).tolist()


# The hooked classes repeat the plain fast paths inline (a call less per access) and hand the hook the flat
# element index: HOOK(array, element, kind), called directly from here so that the kernel's frame is
# sys._getframe(2) inside the hook (3 for atomics, which come through ``api._target``).


class Hooked1(SimArray1):
    __slots__ = ()

    def __getitem__(self, i):
        try:
            if i >= 0:
                v = self._a[i]
                HOOK(self, (self.offset + i * self.st[0]) // self.isz, READ)
                if CHECK is not None:
                    CHECK(self, (self.offset + i * self.st[0]) // self.isz, READ)
                return v
        except (IndexError, TypeError):
            pass
        v, i = self._get_slow(i)
        if not isinstance(v, SimArray):
            HOOK(self, _flat(self, i), READ)
            if CHECK is not None:
                CHECK(self, _flat(self, i), READ)
        return v

    def __setitem__(self, i, value):
        try:
            if i >= 0:
                self._a[i] = value
                HOOK(self, (self.offset + i * self.st[0]) // self.isz, WRITE)
                if CHECK is not None:
                    CHECK(self, (self.offset + i * self.st[0]) // self.isz, WRITE)
                return
        except (IndexError, TypeError):
            pass
        i = self._set_slow(i, value)
        for element in _elements(self, i):
            HOOK(self, element, WRITE)
            if CHECK is not None:
                CHECK(self, element, WRITE)


class Hooked2(SimArray2):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            i, j = idx
            if i >= 0 and j >= 0:
                v = self._a[idx]
                s0, s1 = self.st
                HOOK(self, (self.offset + i * s0 + j * s1) // self.isz, READ)
                if CHECK is not None:
                    CHECK(self, (self.offset + i * s0 + j * s1) // self.isz, READ)
                return v
        except (IndexError, TypeError, ValueError):
            pass
        v, idx = self._get_slow(idx)
        if not isinstance(v, SimArray):
            HOOK(self, _flat(self, idx), READ)
            if CHECK is not None:
                CHECK(self, _flat(self, idx), READ)
        return v

    def __setitem__(self, idx, value):
        try:
            i, j = idx
            if i >= 0 and j >= 0:
                self._a[idx] = value
                s0, s1 = self.st
                HOOK(self, (self.offset + i * s0 + j * s1) // self.isz, WRITE)
                if CHECK is not None:
                    CHECK(self, (self.offset + i * s0 + j * s1) // self.isz, WRITE)
                return
        except (IndexError, TypeError, ValueError):
            pass
        idx = self._set_slow(idx, value)
        for element in _elements(self, idx):
            HOOK(self, element, WRITE)
            if CHECK is not None:
                CHECK(self, element, WRITE)


class HookedN(SimArrayN):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            if len(idx) == self.ndim and min(idx) >= 0:
                v = self._a[idx]
                HOOK(self, (self.offset + sum(map(mul, idx, self.st))) // self.isz, READ)
                if CHECK is not None:
                    CHECK(self, (self.offset + sum(map(mul, idx, self.st))) // self.isz, READ)
                return v
        except (IndexError, TypeError, ValueError):
            pass
        v, idx = self._get_slow(idx)
        if not isinstance(v, SimArray):
            HOOK(self, _flat(self, idx), READ)
            if CHECK is not None:
                CHECK(self, _flat(self, idx), READ)
        return v

    def __setitem__(self, idx, value):
        try:
            if len(idx) == self.ndim and min(idx) >= 0:
                self._a[idx] = value
                HOOK(self, (self.offset + sum(map(mul, idx, self.st))) // self.isz, WRITE)
                if CHECK is not None:
                    CHECK(self, (self.offset + sum(map(mul, idx, self.st))) // self.isz, WRITE)
                return
        except (IndexError, TypeError, ValueError):
            pass
        idx = self._set_slow(idx, value)
        for element in _elements(self, idx):
            HOOK(self, element, WRITE)
            if CHECK is not None:
                CHECK(self, element, WRITE)


_PLAIN = {1: SimArray1, 2: SimArray2, 3: SimArray3}
_HOOKED = {1: Hooked1, 2: Hooked2}
_HOOKED_N = HookedN
_HOOKED_TYPES = (Hooked1, Hooked2, HookedN)

# Whether new arrays get the hooked classes; set per launch.
hooked = False


def array_class(ndim: int, with_hook: bool):
    if with_hook:
        return _HOOKED.get(ndim, _HOOKED_N)
    return _PLAIN.get(ndim, SimArrayN)


def wrap(a: np.ndarray, name: str, space: str, aid: int = -1) -> SimArray:
    return array_class(a.ndim, hooked)(a, name, space, None, 0, aid)


def wrap_like(parent: SimArray, sub: np.ndarray, offset: int) -> SimArray:
    cls = array_class(sub.ndim, isinstance(parent, _HOOKED_TYPES))
    return cls(sub, parent.name, parent.space, parent.root, offset, parent.aid)
