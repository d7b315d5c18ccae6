"""What the tensor-core steps share: the argument checks (float16 matrices; float32 too for 3xTF32), whether rows
are 16-byte aligned (cp.async's precondition), the guarded element load and store every kernel uses at the edges,
and the launch of a tiled kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from .._intrinsics import address
from .._launch import Launch, LaunchError, ceil_div, is_device_array, sm_count  # noqa: F401  (steps import them here)
from .. import _launch
from .._launch import _describe


def check_matrix(name: str, x: Any, axes: str, dtypes: tuple = (np.float16,), ndim: int = 2, purpose: str = "",
                 instead: str = "") -> Any:
    """``x`` as an ``ndim``-D array of one of ``dtypes``: a C-contiguous host array (a copy only when needed -- the
    caller's array is never modified) or a device array. `gpukernels._launch.check_array` does the same for float32.
    ``purpose`` follows the wanted dtype in the error ("for attention.mma ..."), ``instead`` ends its hint (by default,
    for float32, the tensor-core lesson's own float32 step)."""
    wanted = " or ".join(np.dtype(d).name for d in dtypes)
    if is_device_array(x):
        arr = _launch._as_device_array(x)  # looked up on the module: the same view check_array takes
    elif isinstance(x, np.ndarray):
        arr = x
    else:
        raise LaunchError(f"{name} must be a NumPy or CUDA {wanted} array {axes}; got {_describe(x)}"
                          + (f". Convert it with np.asarray({name}, dtype=np.{wanted.split()[0]})"
                             if isinstance(x, (list, tuple)) else ""))
    dtype = np.dtype(arr.dtype)
    if dtype not in [np.dtype(d) for d in dtypes]:
        hint = f"Convert it with {name}.astype(np.{np.dtype(dtypes[0]).name})"
        if "torch" in type(x).__module__:
            hint += " (or torch's .half())"
        if instead:
            hint += instead
        elif np.dtype(np.float32) not in [np.dtype(d) for d in dtypes] and dtype == np.float32:
            hint += "; tensor_core.tf32x3 multiplies float32 matrices"
        raise LaunchError(f"{name} must have dtype {wanted}{purpose}; got {dtype}. {hint}")
    if arr.ndim != ndim:
        raise LaunchError(f"{name} must be {ndim}-D {axes}; got {arr.ndim}-D with shape {tuple(arr.shape)}")
    return _launch.contiguous(name, arr)


def _check(a, b, dtypes):
    a = check_matrix("a", a, "(M, K)", dtypes)
    b = check_matrix("b", b, "(K, N)", dtypes)
    if a.shape[1] != b.shape[0]:
        raise LaunchError(
            f"inner dimensions must match: a is (M, K) = {tuple(a.shape)} and b is (K, N) = {tuple(b.shape)}, "
            f"so K is {a.shape[1]} for a but {b.shape[0]} for b"
        )
    return (a, b), {}, (a.shape[0], b.shape[1])


def check(a, b):
    """``(a, b)`` as (M, K) and (K, N) float16 arrays; the result is (M, N) float32."""
    return _check(a, b, (np.float16,))


def check_fp32(a, b):
    """``(a, b)`` as (M, K) and (K, N) float32 (or float16) arrays; the result is (M, N) float32."""
    return _check(a, b, (np.float32, np.float16))


def rows_aligned16(*arrays: Any) -> bool:
    """True when every row of every (C-contiguous) array starts on a 16-byte boundary: the data does, and a row is a
    multiple of 16 bytes long (8 halves) -- what a 16-byte cp.async of a row's pieces needs."""
    return all(address(x) % 16 == 0 and x.shape[1] * itemsize(x) % 16 == 0 for x in arrays)


def itemsize(x: Any) -> int:
    """Bytes per element of a NumPy, Numba, CuPy or torch array."""
    return x.dtype.itemsize if hasattr(x.dtype, "itemsize") else np.dtype(x.dtype).itemsize


@cuda.jit(device=True, forceinline=True)
def half_at(x, i, j):
    # x[i, j], or 0 past the edge of x: a zero adds nothing to a sum of products, so a tile that overhangs M, N or K
    # is computed as if the matrices were padded with zeros.
    if i < x.shape[0] and j < x.shape[1]:
        return x[i, j]
    return np.float16(0)


@cuda.jit(device=True, forceinline=True)
def store(c, i, j, v):
    # c[i, j] = v inside C only: the overhanging rows and columns of a tile are computed but never written.
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = v


@cuda.jit(device=True, forceinline=True)
def add_to(c, i, j, v):
    # c[i, j] += v inside C, by an atomic: the blocks of a split-K product add their parts into the same C
    if i < c.shape[0] and j < c.shape[1]:
        cuda.atomic.add(c, (i, j), v)


@cuda.jit
def zero_kernel(c):
    # C = 0 before the blocks of a split-K product add into it
    for i in range(cuda.blockIdx.y, c.shape[0], cuda.gridDim.y):
        for j in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, c.shape[1],
                       cuda.gridDim.x * cuda.blockDim.x):
            c[i, j] = 0.0


def zero_launch(c) -> Launch:
    m, n = c.shape
    return Launch(zero_kernel, (min(ceil_div(n, 256), 64), min(m, 65535)), (256,), (c,))


def tiled_launch(kernel, a, b, c, threads: int) -> list[Launch]:
    """One block of ``threads`` per ``kernel.tile`` (rows x columns) of C."""
    m, n = c.shape
    bm, bn = kernel.tile
    return [Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm)), (threads,), (a, b, c))]
