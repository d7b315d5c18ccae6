"""What the matmul steps share: the argument check, the SM count they plan for (`gpukernels._launch.sm_count`),
the launch of a tiled kernel, and the zero fill that steps adding into C (split-K) start from."""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, LaunchError, ceil_div, check_array, sm_count  # noqa: F401  (steps call _common.sm_count)


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
