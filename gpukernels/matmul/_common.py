"""What the matmul steps share: the argument check, the SM count they plan for (`gpukernels._launch.sm_count`),
the launch of a tiled kernel, the zero fill that steps adding into C (split-K) start from, and the launch of a split
whose slices meet in a workspace instead."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .._launch import (Launch, LaunchError, ceil_div, check_array, is_device_array,  # noqa: F401
                       sm_count)  # (steps call _common.sm_count)


def check(a, b):
    """``(a, b)`` as (M, K) and (K, N) float32 arrays; the result is (M, N)."""
    a = check_array("a", a, 2, "(M, K)")
    b = check_array("b", b, 2, "(K, N)")
    if a.shape[1] != b.shape[0]:
        raise LaunchError(
            f"inner dimensions must match: a is (M, K) = {tuple(a.shape)} and b is (K, N) = {tuple(b.shape)}, "
            f"so K is {a.shape[1]} for a but {b.shape[0]} for b"
        )
    return (a, b), {}, (a.shape[0], b.shape[1])


def tiled_launch(kernel, c, args, splits: int = 1):
    """One block per ``kernel.tile`` of C, times ``splits`` slices of K along the grid's z (a split kernel adds
    its slice into C, so C is zeroed first)."""
    m, n = c.shape
    bm, bn = kernel.tile
    if not getattr(kernel, "split_k", False):
        return [Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm)), (kernel.threads,), args)]
    return zero_launches(c) + [Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm), splits), (kernel.threads,), args)]


def fixup_launch(kernel, c, args, splits: int):
    """A ``fixup=True`` kernel (see `make_interior_kernel`) over ``splits`` slices of K: no zero pass; its workspace
    holds each slice's partial tile and a count per tile, zero before the first launch (the kernel leaves it zero).
    A plan made for host arrays gets host arrays of the same shapes."""
    m, n = c.shape
    bm, bn = kernel.tile
    gx, gy = ceil_div(n, bn), ceil_div(m, bm)
    ws, cnt = workspace(c, (gx * gy, splits, kernel.rows * 8, kernel.threads), gx * gy)
    return [Launch(kernel, (gx, gy, splits), (kernel.threads,), (*args, ws, cnt))]


def workspace(c, shape: tuple, counts: int):
    """Partial tiles (float32, ``shape``) and ``counts`` arrival counts, zero, where C is: on the device, or host
    arrays of the same shapes for a plan made from host arrays (a process that only compiles or reports)."""
    if is_device_array(c):
        return cuda.device_array(shape, np.float32), cuda.to_device(np.zeros(counts, np.int32))
    return np.empty(shape, np.float32), np.zeros(counts, np.int32)


ZERO_BLOCK = (32, 8)


@cuda.jit
def zero_kernel(c):
    # C = 0, one element per thread (a warp writes 32 consecutive floats): the start for kernels that add into C.
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = float32(0.0)


def zero_launches(c) -> list[Launch]:
    m, n = c.shape
    return [Launch(zero_kernel, (ceil_div(n, ZERO_BLOCK[0]), ceil_div(m, ZERO_BLOCK[1])), ZERO_BLOCK, (c,))]
