"""Arrays as kernels see them on the simulator: NumPy arrays with CUDA's indexing rules.

* Every element access is bounds-checked, and a negative index is an error (CUDA has no wrap-around):
  :class:`~gpukernels.sim.errors.OutOfBoundsError` names the array, the index, its shape, the thread, the block
  and the kernel line.
* One class per number of dimensions keeps the common case (``a[i, j]`` with two non-negative ints) to a tuple
  unpack, two comparisons and the NumPy access; anything else (slices, rows of a 2-D array, errors) takes the
  slow path.
* Observation costs nothing unless asked for: a launch that is traced (or shuffled with preemption) wraps its
  arrays in the ``Hooked*`` subclasses instead, which call ``HOOK(array, element, kind)`` after each element
  access (``element``: the flat index in the allocation; ``kind``: ``READ``, ``WRITE`` or ``ATOMIC``).
"""

from __future__ import annotations

import sys
from operator import mul

import numpy as np

from . import _ctx
from ._source import describe, frame_site
from .errors import OutOfBoundsError

READ, WRITE, ATOMIC = 0, 1, 2
GLOBAL, SHARED, LOCAL = "global", "shared", "local"

# Set by the launch while a hooked launch runs: HOOK(array, element, kind), called from kernel code.
HOOK = None


class Shape(tuple):
    """A shape that refuses negative indices (``a.shape[-1]`` is not valid in a CUDA kernel)."""

    def __getitem__(self, k):
        if k.__class__ is int and k < 0:
            raise IndexError(f"negative index {k} into a shape: CUDA kernels cannot index shapes from the end")
        return tuple.__getitem__(self, k)


class SimArray:
    """Base class; instances are of the per-ndim subclasses made by :func:`wrap`."""

    __slots__ = ("_a", "shape", "size", "ndim", "dtype", "name", "space", "root", "offset", "aid", "st", "isz")

    def __init__(self, a: np.ndarray, name: str, space: str, root=None, offset: int = 0, aid: int = -1):
        self._a = a
        self.shape = Shape(a.shape)
        self.size = a.size
        self.ndim = a.ndim
        self.dtype = a.dtype
        self.name = name
        self.space = space
        self.root = a if root is None else root  # the allocation this is a view of
        self.offset = offset  # byte offset of a[0, ...] from the start of ``root``
        self.aid = aid  # the tracer's id for ``root``
        self.st = a.strides  # for the tracer's element index: (offset + sum(index * st)) // isz
        self.isz = a.itemsize

    # -- the slow path: anything that is not "ndim non-negative ints", and every error ---------------------
    def _index(self, idx, kind):
        comps = idx if idx.__class__ is tuple else (idx,)
        if len(comps) > self.ndim:
            raise IndexError(f"too many indices for {self.ndim}-dimensional array {self.name!r}: {idx!r}")
        for axis, c in enumerate(comps):
            if isinstance(c, (int, np.integer)):
                if c < 0 or c >= self.shape[axis]:
                    raise self._oob(idx, axis, kind)
            elif isinstance(c, slice):
                if (c.start is not None and c.start < 0) or (c.stop is not None and c.stop < 0):
                    raise self._oob(idx, axis, kind)
            else:
                raise TypeError(
                    f"array index must be an integer or a slice, got {type(c).__name__} {c!r} "
                    f"(indexing {self.name!r})"
                )
        if kind == WRITE:
            return None
        out = self._a[idx]
        if isinstance(out, np.ndarray):
            return self._view(out)
        return out

    def _view(self, sub: np.ndarray):
        offset = self.offset + (sub.__array_interface__["data"][0] - self._a.__array_interface__["data"][0])
        return wrap_like(self, sub, offset)

    def _oob(self, idx, axis, kind):
        ctx = _ctx.LAUNCH
        who = ctx.who() if ctx is not None else {}
        site = frame_site(sys._getframe(2))
        action = {READ: "read", WRITE: "write", ATOMIC: "atomic"}[kind]
        comps = idx if idx.__class__ is tuple else (idx,)
        bad = comps[axis]
        if isinstance(bad, slice):
            why = f"slice {bad.start}:{bad.stop} has a negative bound"
        elif bad < 0:
            why = f"index {bad} on axis {axis} is negative (CUDA has no wrap-around)"
        else:
            why = f"index {bad} on axis {axis} is >= its length {self.shape[axis]}"
        shown = tuple(int(c) if isinstance(c, (int, np.integer)) else c for c in comps)
        shown = shown[0] if len(shown) == 1 else shown
        msg = (
            f"out-of-bounds {action} of {self.space} array {self.name!r} at index {shown!r} "
            f"(shape {tuple(self.shape)}): {why}; {who.get('thread_text', 'outside a kernel')} at "
            f"{describe(site)}"
        )
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
        self._index(idx, WRITE)
        self._a[idx] = value

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


class SimArray1(SimArray):
    __slots__ = ()

    def __getitem__(self, i):
        try:
            if i >= 0:
                return self._a[i]
        except Exception:
            pass
        return self._index(i, READ)

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
        return self._index(idx, READ)

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
        return self._index(idx, READ)

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
        return self._index(idx, READ)

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


def _is_element(arr: SimArray, idx) -> bool:
    comps = idx if idx.__class__ is tuple else (idx,)
    return len(comps) == arr.ndim and all(isinstance(c, (int, np.integer)) for c in comps)


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
                return v
        except (IndexError, TypeError):
            pass
        v = self._index(i, READ)
        if not isinstance(v, SimArray):
            HOOK(self, _flat(self, i), READ)
        return v

    def __setitem__(self, i, value):
        try:
            if i >= 0:
                self._a[i] = value
                HOOK(self, (self.offset + i * self.st[0]) // self.isz, WRITE)
                return
        except (IndexError, TypeError):
            pass
        self._set_slow(i, value)
        if _is_element(self, i):
            HOOK(self, _flat(self, i), WRITE)


class Hooked2(SimArray2):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            i, j = idx
            if i >= 0 and j >= 0:
                v = self._a[idx]
                s0, s1 = self.st
                HOOK(self, (self.offset + i * s0 + j * s1) // self.isz, READ)
                return v
        except (IndexError, TypeError, ValueError):
            pass
        v = self._index(idx, READ)
        if not isinstance(v, SimArray):
            HOOK(self, _flat(self, idx), READ)
        return v

    def __setitem__(self, idx, value):
        try:
            i, j = idx
            if i >= 0 and j >= 0:
                self._a[idx] = value
                s0, s1 = self.st
                HOOK(self, (self.offset + i * s0 + j * s1) // self.isz, WRITE)
                return
        except (IndexError, TypeError, ValueError):
            pass
        self._set_slow(idx, value)
        if _is_element(self, idx):
            HOOK(self, _flat(self, idx), WRITE)


class HookedN(SimArrayN):
    __slots__ = ()

    def __getitem__(self, idx):
        try:
            if len(idx) == self.ndim and min(idx) >= 0:
                v = self._a[idx]
                HOOK(self, (self.offset + sum(map(mul, idx, self.st))) // self.isz, READ)
                return v
        except (IndexError, TypeError, ValueError):
            pass
        v = self._index(idx, READ)
        if not isinstance(v, SimArray):
            HOOK(self, _flat(self, idx), READ)
        return v

    def __setitem__(self, idx, value):
        try:
            if len(idx) == self.ndim and min(idx) >= 0:
                self._a[idx] = value
                HOOK(self, (self.offset + sum(map(mul, idx, self.st))) // self.isz, WRITE)
                return
        except (IndexError, TypeError, ValueError):
            pass
        self._set_slow(idx, value)
        if _is_element(self, idx):
            HOOK(self, _flat(self, idx), WRITE)


_PLAIN = {1: SimArray1, 2: SimArray2, 3: SimArray3}
_HOOKED = {1: Hooked1, 2: Hooked2}
_HOOKED_N = HookedN

# Whether new arrays get the hooked classes; set per launch.
hooked = False


def array_class(ndim: int, with_hook: bool):
    if with_hook:
        return _HOOKED.get(ndim, _HOOKED_N)
    return _PLAIN.get(ndim, SimArrayN)


def wrap(a: np.ndarray, name: str, space: str, aid: int = -1) -> SimArray:
    return array_class(a.ndim, hooked)(a, name, space, None, 0, aid)


def wrap_like(parent: SimArray, sub: np.ndarray, offset: int) -> SimArray:
    cls = array_class(sub.ndim, isinstance(parent, tuple(_HOOKED.values()) + (_HOOKED_N,)))
    return cls(sub, parent.name, parent.space, parent.root, offset, parent.aid)
