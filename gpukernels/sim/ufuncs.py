"""``@vectorize`` and ``@guvectorize`` with ``target="cuda"``, run as kernels on the gpukernels simulator.

numba-cuda compiles the function as a device function and launches it over the elements; its stock simulator
cannot do that (``FakeOverload`` has no signature, so ``cuda.vectorize`` fails at decoration). Here the
function becomes a device function too, and a kernel launched on this simulator applies it: one thread per
element (``vectorize``) or per loop index over the core dimensions (``guvectorize``). Inputs broadcast as in
NumPy, each call picks the first signature the inputs can be cast to safely, ``out=`` (or extra positional
outputs for a gufunc) is written in place, and device arrays in give a device array out.
"""

from __future__ import annotations

import re

import numpy as np
from numba import cuda  # the kernels below see the simulator's ``cuda`` once launched, like any kernel

from .api import as_dtype

_THREADS = 128  # threads per block of the launches below


def _signature(sig):
    """(argument types, return type) of a numba signature (string or object)."""
    try:  # numba-cuda
        from numba.cuda.core import sigutils
    except ImportError:  # Numba's built-in simulator
        from numba.core import sigutils

    return sigutils.normalize_signature(sig)


def _host(x):
    """(NumPy array or scalar behind ``x``, whether it was a device array)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    if isinstance(x, FakeCUDAArray):
        return x._ary, True
    return x, False


def _fits(x, dtype: np.dtype) -> bool:
    """Whether ``x`` casts to ``dtype`` safely; a Python number only needs a wide enough kind (NumPy 2)."""
    if isinstance(x, bool):
        return True
    if isinstance(x, int):
        return dtype.kind in "iufc"
    if isinstance(x, float):
        return dtype.kind in "fc"
    if isinstance(x, complex):
        return dtype.kind == "c"
    return np.can_cast(np.asarray(x).dtype, dtype, "safe")


def _choose(name, sigs, inputs):
    """The first signature (argument dtypes, argument types) that takes ``inputs`` safely."""
    for argtypes, ret in sigs:
        dtypes = [as_dtype(getattr(t, "dtype", t)) for t in argtypes]
        if all(_fits(x, d) for x, d in zip(inputs, dtypes)):
            return dtypes, argtypes, ret
    given = ", ".join(np.asarray(x).dtype.name for x in inputs)
    known = "; ".join(str(s) for s in sigs)
    raise TypeError(f"{name}: no signature takes inputs of types ({given}); signatures: {known}")


def _deliver(results, outs, on_device):
    """Write into the given outputs, or return new arrays (device arrays if an input was one)."""
    for i, r in enumerate(results):
        if i < len(outs) and outs[i] is not None:
            host, _ = _host(outs[i])
            host[...] = r
            results[i] = outs[i]
        elif on_device:
            results[i] = cuda.to_device(r)
        elif r.shape == ():
            results[i] = r[()]
    return results[0] if len(results) == 1 else tuple(results)


# -- vectorize ------------------------------------------------------------------------------------------------


def _elementwise(fn):
    @cuda.jit
    def elementwise(*arrays):  # inputs..., output: 1-D, of one length
        i = cuda.grid(1)
        out = arrays[-1]
        if i < out.size:
            out[i] = fn(*[a[i] for a in arrays[:-1]])

    return elementwise


class SimUFunc:
    """What ``@vectorize(..., target="cuda")`` returns on the simulator: call it like a NumPy ufunc."""

    def __init__(self, pyfunc, sigs, identity=None):
        self.pyfunc = pyfunc
        self.__name__ = getattr(pyfunc, "__name__", "ufunc")
        self.__doc__ = getattr(pyfunc, "__doc__", None)
        self.identity = identity
        self.sigs = [_signature(s) for s in sigs]
        self.nin = len(self.sigs[0][0]) if self.sigs else None
        self.nout = 1
        self._kernel = _elementwise(cuda.jit(device=True)(pyfunc))

    def __call__(self, *args, out=None, stream=0):
        if self.nin is not None and len(args) not in (self.nin, self.nin + 1):
            raise TypeError(f"{self.__name__} takes {self.nin} inputs (and an optional output), got {len(args)}")
        if self.nin is not None and len(args) == self.nin + 1:
            *args, out = args
        hosts = [_host(a) for a in args]
        inputs = [h for h, _ in hosts]
        on_device = any(d for _, d in hosts) or (out is not None and _host(out)[1])
        if self.sigs:
            dtypes, _, ret = _choose(self.__name__, self.sigs, inputs)
            ret = as_dtype(ret)
        else:  # no signatures: NumPy's promotion decides
            dtypes = [np.result_type(x) for x in inputs]
            ret = np.result_type(*inputs)
        shape = np.broadcast_shapes(*(np.shape(x) for x in inputs))
        flat = [np.ascontiguousarray(np.broadcast_to(np.asarray(x, d), shape)).ravel() for x, d in zip(inputs, dtypes)]
        result = np.empty(int(np.prod(shape)), ret)
        if result.size:
            self._kernel[(result.size + _THREADS - 1) // _THREADS, _THREADS](*flat, result)
        return _deliver([result.reshape(shape)], [out], on_device)

    def reduce(self, arr, stream=0):
        """Fold a 1-D array with the binary function, as numba-cuda's ``ufunc.reduce`` does."""
        host, _ = _host(arr)
        host = np.asarray(host).ravel()
        if host.size == 0:
            if self.identity is None:
                raise TypeError(f"{self.__name__}.reduce of an empty array needs an identity")
            return self.identity
        acc = host[0]
        for x in host[1:]:
            acc = self(acc, x)
        return acc

    def __repr__(self):
        return f"<gpukernels simulator ufunc {self.__name__!r}>"


class _Builder:
    """What numba's decorators drive: ``add`` each signature, then ``build_ufunc``."""

    sigs: list

    def add(self, sig):
        self.sigs.append(sig)

    def disable_compile(self):
        pass


class SimVectorize(_Builder):
    def __init__(self, func, identity=None, cache=False, targetoptions=None):
        self.pyfunc, self.identity, self.sigs = func, identity, []

    def build_ufunc(self):
        return SimUFunc(self.pyfunc, self.sigs, self.identity)


# -- guvectorize ----------------------------------------------------------------------------------------------


def _parse_layout(layout: str):
    """"(m,n),(n)->(m)" -> ([("m", "n"), ("n",)], [("m",)])."""
    text = layout.replace(" ", "")
    if "->" not in text:
        raise ValueError(f"gufunc signature {layout!r} has no '->'")
    sides = text.split("->")

    def groups(side):
        found = re.findall(r"\(([^()]*)\)", side)
        return [tuple(d for d in g.split(",") if d) for g in found]

    return groups(sides[0]), groups(sides[1])


def _per_index(fn):
    @cuda.jit
    def per_index(n, *arrays):  # arrays: (n, core...) each, or (n,) for a scalar argument
        i = cuda.grid(1)
        if i < n:
            fn(*[a[i] for a in arrays])

    return per_index


class SimGUFunc:
    """What ``@guvectorize(..., target="cuda")`` returns on the simulator."""

    def __init__(self, pyfunc, layout, sigs):
        self.pyfunc = pyfunc
        self.__name__ = getattr(pyfunc, "__name__", "gufunc")
        self.layout = layout
        self.ins, self.outs = _parse_layout(layout)
        self.sigs = [_signature(s) for s in sigs]
        self._kernel = _per_index(cuda.jit(device=True)(pyfunc))

    def __call__(self, *args, stream=0):
        nin, nout = len(self.ins), len(self.outs)
        if len(args) not in (nin, nin + nout):
            raise TypeError(f"{self.__name__} ({self.layout}) takes {nin} inputs, or {nin} inputs and {nout} "
                            f"outputs; got {len(args)} arguments")
        hosts = [_host(a) for a in args]
        on_device = any(d for _, d in hosts)
        inputs = [np.asarray(h) for h, _ in hosts[:nin]]
        outs = list(args[nin:])
        if not self.sigs:
            raise TypeError(f"{self.__name__}: guvectorize on the simulator needs its type signatures")
        dtypes, argtypes, _ = _choose(self.__name__, [(s[0][:nin], s[1]) for s in self.sigs], inputs)
        full = next(s[0] for s in self.sigs if list(s[0][:nin]) == list(argtypes))
        sizes: dict = {}
        loops = []
        for x, core in zip(inputs, self.ins):
            if x.ndim < len(core):
                raise ValueError(f"{self.__name__}: an input of shape {x.shape} has fewer dimensions than its core "
                                 f"{core} in {self.layout!r}")
            for dim, n in zip(core, x.shape[x.ndim - len(core):]):
                if sizes.setdefault(dim, n) != n:
                    raise ValueError(f"{self.__name__}: core dimension {dim!r} is {sizes[dim]} and {n}")
            loops.append(x.shape[: x.ndim - len(core)])
        loop = np.broadcast_shapes(*loops)
        n = int(np.prod(loop))
        arrays = []
        for x, core, d, t in zip(inputs, self.ins, dtypes, argtypes):
            x = np.broadcast_to(np.asarray(x, d), loop + x.shape[x.ndim - len(core):])
            if x.shape != np.shape(hosts[len(arrays)][0]):
                x = np.ascontiguousarray(x)  # broadcast: a copy (writes to it are not seen by the caller)
            shaped = x.reshape((n,) + x.shape[len(loop):])
            arrays.append(shaped.reshape(n, 1) if not core and getattr(t, "ndim", 0) else shaped)
        results = []
        for i, (core, t) in enumerate(zip(self.outs, full[nin:])):
            missing = [dim for dim in core if dim not in sizes]
            if missing and not (i < len(outs)):
                raise ValueError(f"{self.__name__}: output core dimension(s) {missing} of {self.layout!r} appear in "
                                 "no input, so their size is unknown: pass the output")
            if i < len(outs):
                for dim, m in zip(core, np.shape(_host(outs[i])[0])[-len(core):] if core else ()):
                    sizes.setdefault(dim, m)
            r = np.zeros(loop + tuple(sizes[dim] for dim in core), as_dtype(getattr(t, "dtype", t)))
            results.append(r)
            arrays.append(r.reshape((n,) + (tuple(sizes[dim] for dim in core) or (1,))))
        if n:
            self._kernel[(n + _THREADS - 1) // _THREADS, _THREADS](n, *arrays)
        return _deliver(results, outs, on_device)

    def __repr__(self):
        return f"<gpukernels simulator gufunc {self.__name__!r} {self.layout}>"


class SimGUVectorize(_Builder):
    def __init__(self, func, signature, identity=None, cache=False, targetoptions=None, writable_args=(),
                 is_dynamic=False):
        self.pyfunc, self.layout, self.sigs = func, signature, []

    def build_ufunc(self):
        return SimGUFunc(self.pyfunc, self.layout, self.sigs)


_ORIGINAL: dict = {}  # (registry id) -> (registry, what "cuda" was), for uninstall()


def install() -> None:
    """Make ``target="cuda"`` of both decorators (numba's and numba.cuda's) build the classes above."""
    import importlib

    for module in ("numba.np.ufunc.decorators", "numba.cuda.np.ufunc.decorators"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for builder, ours in ((mod.Vectorize, SimVectorize), (mod.GUVectorize, SimGUVectorize)):
            registry = builder.target_registry
            if dict.get(registry, "cuda") is ours:
                continue
            pending = getattr(registry, "ondemand", {})
            _ORIGINAL[id(registry)] = (registry, pending.pop("cuda", None), dict.get(registry, "cuda"))
            dict.__setitem__(registry, "cuda", ours)  # the registry refuses to rebind a key the usual way


def decorators() -> dict:
    """``cuda.vectorize`` and ``cuda.guvectorize`` for a ``numba.cuda`` that lacks them (Numba's built-in
    simulator): numba's decorators with ``target="cuda"``, which :func:`install` routes here."""
    import functools

    import numba

    return {"vectorize": functools.partial(numba.vectorize, target="cuda"),
            "guvectorize": functools.partial(numba.guvectorize, target="cuda")}


def uninstall() -> None:
    for registry, pending, value in _ORIGINAL.values():
        dict.pop(registry, "cuda", None)
        if pending is not None:
            registry.ondemand["cuda"] = pending
        elif value is not None:
            dict.__setitem__(registry, "cuda", value)
    _ORIGINAL.clear()
