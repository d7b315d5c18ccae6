"""``cuda`` as kernel code sees it while it runs on the gpukernels simulator.

One :class:`SimCUDA` object per launch replaces the name ``cuda`` in the kernel's globals (as Numba's stock
simulator does). It inherits the stock ``FakeCUDAModule`` of whichever simulator is active (numba-cuda's, or
Numba's built-in one) for everything we do not change -- vector types, fp16, bit tricks, ``gridsize`` -- and
replaces the parts that depend on the current thread with plain attributes the scheduler sets at each switch
(``threadIdx``, ``laneid``), so ``cuda.threadIdx.x`` costs two attribute loads.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from . import _ctx, arrays
from ._source import assigned_name, location

try:  # numba-cuda
    from numba.cuda.simulator.kernelapi import FakeCUDAModule
except ImportError:  # pragma: no cover - a numba without any CUDA simulator
    FakeCUDAModule = object

try:
    from numba.cuda.simulator.kernelapi import numpy_support  # the one the active simulator uses
except ImportError:  # pragma: no cover
    from numba.np import numpy_support

FULL_MASK = 0xFFFFFFFF

# warp operation kinds
SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, SYNCWARP, VOTE_ALL, VOTE_ANY, VOTE_EQ, BALLOT, MATCH_ANY, MATCH_ALL = (
    "shfl_sync",
    "shfl_up_sync",
    "shfl_down_sync",
    "shfl_xor_sync",
    "syncwarp",
    "all_sync",
    "any_sync",
    "eq_sync",
    "ballot_sync",
    "match_any_sync",
    "match_all_sync",
)

#: Warp-collective instructions defined outside the simulator (``gpukernels._mma``: mma.sync, ldmatrix), by name:
#: a function from ``{lane: value}`` of the whole warp to ``{lane: result}``. Every lane of the warp must call one
#: (they go through `Launch.warp_op` with the full mask, like a shuffle); a lane that has exited, or that the block
#: does not have, is a WarpMaskError instead of a result computed without it.
COLLECTIVES: dict = {}


def _gamma(x):
    # tgamma: a pole at 0 (signed infinity), NaN at the negative integers and -inf, +inf past float range
    x = float(x)
    if x == 0:
        return math.copysign(math.inf, x)
    if x < 0 and (math.isinf(x) or x == math.floor(x)):
        return math.nan
    return math.inf


def _lgamma(x):
    return math.inf  # math.lgamma fails only at its poles (0 and the negative integers), where it is +inf


def _remainder(x, y):
    return math.nan  # IEEE remainder fails only for y = 0 or x infinite: NaN


# Where Python's math raises (a domain error, an overflow) CUDA returns NaN or infinity: these compute that.
_FALLBACK = {"fabs": np.fabs, "pow": np.power, "atan2": np.arctan2, "asin": np.arcsin, "acos": np.arccos,
             "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
             "gamma": _gamma, "lgamma": _lgamma, "remainder": _remainder,
             "ldexp": lambda x, n: np.ldexp(x, int(n))}  # (the arguments arrive as float64)


class _CudaMath:
    """``math`` inside kernels: the same functions, but a result that overflows or leaves the domain is
    ``inf`` / ``nan`` as on a GPU (``math.exp(1e4)`` is inf in a CUDA kernel; Python raises OverflowError)."""

    def __init__(self):
        self._cache = {}

    def __getattr__(self, name):
        f = getattr(math, name)
        if not callable(f):
            return f
        fallback = _FALLBACK.get(name) or getattr(np, name, None)
        if fallback is None:
            setattr(self, name, f)
            return f

        def g(*args, _f=f, _np=fallback):
            try:
                return _f(*args)
            except (OverflowError, ValueError, ZeroDivisionError):
                with np.errstate(all="ignore"):
                    out = _np(*(np.float64(a) for a in args))
                return tuple(map(float, out)) if isinstance(out, tuple) else float(out)

        g.__name__ = name
        setattr(self, name, g)  # cached: __getattr__ runs once per name
        return g


sim_math = _CudaMath()


class Dim3:
    __slots__ = ("x", "y", "z")

    def __init__(self, x, y, z):
        self.x, self.y, self.z = x, y, z

    def __iter__(self):
        yield self.x
        yield self.y
        yield self.z

    def __repr__(self):
        return f"({self.x}, {self.y}, {self.z})"


_dtype_cache: dict = {}


def as_dtype(dtype) -> np.dtype:
    try:
        return _dtype_cache[dtype]
    except (KeyError, TypeError):
        pass
    try:
        out = np.dtype(dtype)
    except TypeError:
        out = numpy_support.as_dtype(dtype)
    try:
        _dtype_cache[dtype] = out
    except TypeError:
        pass
    return out


def _check_alignment(alignment, what: str) -> None:
    """Numba's rule for ``alignment=`` of local and shared arrays (a ValueError at compile time there)."""
    if alignment is None:
        return
    pointer = np.dtype(np.intp).itemsize
    if isinstance(alignment, bool) or not isinstance(alignment, (int, np.integer)):
        raise ValueError(f"{what}: alignment must be an integer, got {alignment!r}")
    if alignment <= 0 or alignment & (alignment - 1) or alignment % pointer:
        raise ValueError(f"{what}: alignment must be a positive power of 2 and a multiple of {pointer} (the size "
                         f"of a pointer), got {alignment}")


def _poisoned(shape, dtype, alignment=None) -> np.ndarray:
    """Uninitialised memory, made deterministic: every byte 0xFF (floats read as NaN, ints as -1 / max);
    starting at a multiple of ``alignment`` bytes when one is given."""
    dtype = as_dtype(dtype)
    if alignment is None:
        a = np.empty(shape, dtype)
    else:
        count = int(np.prod(shape))
        raw = np.empty(count * dtype.itemsize + alignment, np.uint8)
        skip = -raw.__array_interface__["data"][0] % alignment
        a = raw[skip: skip + count * dtype.itemsize].view(dtype).reshape(shape)
    if a.size:
        a.view(np.uint8).fill(0xFF)
    return a


class SimShared:
    """``cuda.shared.array``: one allocation per call site per block, shared by the block's threads."""

    __slots__ = ("_allocs", "_dyn", "_dynsize", "_launch")

    def __init__(self, launch, dynshared_size):
        self._launch = launch
        self._dynsize = dynshared_size
        self.new_block()

    def new_block(self):
        self._allocs = {}
        self._dyn = None

    def array(self, shape, dtype, alignment=None):
        f = sys._getframe(1)
        key = (f.f_code, f.f_lasti)
        arr = self._allocs.get(key)
        if arr is None:
            _check_alignment(alignment, "cuda.shared.array")
            arr = self._allocate(shape, dtype, f, alignment)
            self._allocs[key] = arr
        return arr

    def _allocate(self, shape, dtype, f, alignment):
        dtype = as_dtype(dtype)
        filename, lineno = f.f_code.co_filename, f.f_lineno
        name = _site_name("shared", filename, lineno)
        if shape == 0 or shape == (0,):  # dynamic shared memory: every such array aliases one buffer
            if self._dyn is None:
                self._dyn = _poisoned(self._dynsize, np.uint8)
            count = self._dynsize // dtype.itemsize
            a = self._dyn[: count * dtype.itemsize].view(dtype)
            name = assigned_name(filename, lineno, "dynamic_shared")
            return self._launch.new_array(a, name, arrays.SHARED, key=("dyn",))
        return self._launch.new_array(_poisoned(shape, dtype, alignment), name, arrays.SHARED,
                                      key=(filename, lineno, name))


_SITE_NAMES: dict = {}  # (kind, filename, lineno) -> the name the line assigns: every thread makes its local arrays


def _site_name(kind: str, filename: str, lineno: int) -> str:
    """``acc`` for a line ``acc = cuda.local.array(...)``; otherwise ``local@file:line`` (not kept: the file is
    named relative to the working directory, which may change)."""
    name = _SITE_NAMES.get((kind, filename, lineno))
    if name is None:
        name = assigned_name(filename, lineno, None)
        if name is None:
            return f"{kind}@{location(filename, lineno)}"
        _SITE_NAMES[(kind, filename, lineno)] = name
    return name


class SimLocal:
    """``cuda.local.array``: private to the calling thread."""

    __slots__ = ("_launch",)

    def __init__(self, launch):
        self._launch = launch

    def array(self, shape, dtype, alignment=None):
        f = sys._getframe(1)
        _check_alignment(alignment, "cuda.local.array")
        filename, lineno = f.f_code.co_filename, f.f_lineno
        name = _site_name("local", filename, lineno)
        return self._launch.new_array(_poisoned(shape, dtype, alignment), name, arrays.LOCAL,
                                      key=(filename, lineno, name))


class SimConst:
    def array_like(self, ary):
        return ary


def _target(ary, idx):
    """(NumPy array behind ``ary``, ``idx`` checked against its bounds): an atomic's element. A traced launch
    records the atomic as a read and a write of that element (``ATOMIC``)."""
    if isinstance(ary, arrays.SimArray):
        idx = ary._check(idx, arrays.ATOMIC)
        if arrays.HOOK is not None and ary.__class__.__name__.startswith("Hooked"):
            arrays.HOOK(ary, arrays._flat(ary, idx), arrays.ATOMIC)
            if arrays.CHECK is not None:
                arrays.CHECK(ary, arrays._flat(ary, idx), arrays.ATOMIC)
        return ary._a, idx
    return ary, idx


class SimAtomic:
    """``cuda.atomic``: the scheduler never switches inside one, so each is indivisible by construction."""

    def add(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = old + val
        return old

    def sub(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = old - val
        return old

    def and_(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = old & val
        return old

    def or_(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = old | val
        return old

    def xor(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = old ^ val
        return old

    def inc(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = 0 if old >= val else old + 1
        return old

    def dec(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = val if (old == 0 or old > val) else old - 1
        return old

    def exch(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = val
        return old

    def max(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = max(old, val)
        return old

    def min(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = min(old, val)
        return old

    def nanmax(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = np.nanmax([old, val])
        return old

    def nanmin(self, ary, idx, val):
        a, idx = _target(ary, idx)
        old = a[idx]
        a[idx] = np.nanmin([old, val])
        return old

    def cas(self, ary, idx, old, val):
        a, idx = _target(ary, idx)
        loaded = a[idx]
        if loaded == old:
            a[idx] = val
        return loaded

    def compare_and_swap(self, ary, old, val):
        return self.cas(ary, (0,) * ary.ndim if ary.ndim > 1 else 0, old, val)


class _GridGroup:
    def __init__(self, launch):
        self._launch = launch

    def sync(self):
        if self._launch.nblocks != 1:
            raise NotImplementedError("grid.sync() on the simulator needs a grid of one block")
        self._launch.barrier(sys._getframe(1), "grid.sync", None)


class _CG:
    def __init__(self, launch):
        self._launch = launch

    def this_grid(self):
        return _GridGroup(self._launch)


class SimCUDA(FakeCUDAModule):
    """The ``cuda`` object inside a kernel launched on the gpukernels simulator."""

    # Plain class attributes shadow the stock class's properties so the per-thread values can be instance
    # attributes that the scheduler rebinds at every switch.
    threadIdx = blockIdx = laneid = shared = local = atomic = const = cg = None
    warpsize = 32

    def __init__(self, launch, grid_dim, block_dim, dynshared_size):
        if FakeCUDAModule is not object:
            FakeCUDAModule.__init__(self, grid_dim, block_dim, dynshared_size)
        self._L = launch
        self.gridDim = Dim3(*grid_dim)
        self.blockDim = Dim3(*block_dim)
        self.shared = SimShared(launch, dynshared_size)
        self.local = SimLocal(launch)
        self.atomic = SimAtomic()
        self.const = SimConst()
        self.cg = _CG(launch)
        self._t = None  # the running SimThread

    # -- indexing -------------------------------------------------------------------------------------------
    def grid(self, ndim):
        t = self._t
        if ndim == 1:
            return t.g1
        if ndim == 2:
            return t.g2
        if ndim == 3:
            return t.g3
        raise RuntimeError(f"Global ID has 1-3 dimensions. {ndim} requested")

    # -- block-level synchronisation ------------------------------------------------------------------------
    def syncthreads(self):
        self._L.barrier(sys._getframe(1), "syncthreads", None)

    def syncthreads_count(self, predicate):
        return self._L.barrier(sys._getframe(1), "syncthreads_count", 1 if predicate else 0)

    def syncthreads_and(self, predicate):
        return self._L.barrier(sys._getframe(1), "syncthreads_and", 1 if predicate else 0)

    def syncthreads_or(self, predicate):
        return self._L.barrier(sys._getframe(1), "syncthreads_or", 1 if predicate else 0)

    # -- warp level -----------------------------------------------------------------------------------------
    # ``width`` follows CUDA C++ (__shfl_*_sync(mask, var, arg, width)); Numba's compiled API has no width
    # argument, so a kernel that passes it runs here but not on a GPU.
    def shfl_sync(self, mask, value, src_lane, width=32):
        return self._L.warp_op(sys._getframe(1), SHFL_IDX, mask, value, src_lane, width)

    def shfl_up_sync(self, mask, value, delta, width=32):
        return self._L.warp_op(sys._getframe(1), SHFL_UP, mask, value, delta, width)

    def shfl_down_sync(self, mask, value, delta, width=32):
        return self._L.warp_op(sys._getframe(1), SHFL_DOWN, mask, value, delta, width)

    def shfl_xor_sync(self, mask, value, lane_mask, width=32):
        return self._L.warp_op(sys._getframe(1), SHFL_XOR, mask, value, lane_mask, width)

    def syncwarp(self, mask=FULL_MASK):
        self._L.warp_op(sys._getframe(1), SYNCWARP, mask, None, 0, 32)

    def all_sync(self, mask, predicate):
        return self._L.warp_op(sys._getframe(1), VOTE_ALL, mask, bool(predicate), 0, 32)

    def any_sync(self, mask, predicate):
        return self._L.warp_op(sys._getframe(1), VOTE_ANY, mask, bool(predicate), 0, 32)

    def eq_sync(self, mask, predicate):
        return self._L.warp_op(sys._getframe(1), VOTE_EQ, mask, bool(predicate), 0, 32)

    def ballot_sync(self, mask, predicate):
        return self._L.warp_op(sys._getframe(1), BALLOT, mask, bool(predicate), 0, 32)

    def match_any_sync(self, mask, value):
        return self._L.warp_op(sys._getframe(1), MATCH_ANY, mask, value, 0, 32)

    def match_all_sync(self, mask, value):
        return self._L.warp_op(sys._getframe(1), MATCH_ALL, mask, value, 0, 32)

    def activemask(self):
        """Lanes of the caller's warp that exist and have not exited (the simulator does not model
        divergence inside a warp, so a branch does not narrow this mask)."""
        return self._L.activemask()

    def lanemask_lt(self):
        return (1 << self.laneid) - 1

    # -- memory fences are no-ops: the simulator has one memory and no caches -------------------------------
    def threadfence(self):
        pass

    def threadfence_block(self):
        pass

    def threadfence_system(self):
        pass
