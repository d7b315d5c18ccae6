"""Step 18 of the matmul ladder, ``narrow``: tiles shaped like C when C has few rows or few columns.

A square tile wastes what C does not have: at M = 64 a 128 x 128 tile computes 64 rows of zeros, and at N = 32
(a projection to 32 features) a 64 x 64 tile computes 32 columns of them -- half the FMAs and shared loads thrown
away, and each block's k tile still reads its full share of the long side. Tiles as narrow as C keep every
thread's 8 x 8 block useful: 64 x 256 (256 threads) for few rows, 256 x 32 (128 threads) and 128 x 32 (64 threads)
for few columns (256 x 32 measured the same as 128 x 32 at N = 32, so the dispatcher takes the smaller). With so few
tiles the grid is small, so they come with slices of K (split-K, step 17). The one
change from the factory's other tiles: the tile's shape (``bm``, ``bn``); the rest is ``split_k``'s kernel.
"""

from __future__ import annotations

from .._intrinsics import aligned16
from .._launch import ceil_div, version
from . import _common
from ._common import check, tiled_launch
from ._interior import make_interior_kernel

rows_vec_kernel = make_interior_kernel(64, 256, bk=16, vec=True, split_k=True)  # few rows: 64 x 256
rows_kernel = make_interior_kernel(64, 256, bk=16, split_k=True)
cols_vec_kernel = make_interior_kernel(256, 32, bk=16, vec=True, split_k=True)  # few columns: 256 x 32
cols_kernel = make_interior_kernel(256, 32, bk=16, split_k=True)
cols_small_vec_kernel = make_interior_kernel(128, 32, bk=16, vec=True, split_k=True)  # few columns, fewer rows
cols_small_kernel = make_interior_kernel(128, 32, bk=16, split_k=True)

NARROW_MIN_K = 256  # the shallowest slice of K for these tiles: 16 k tiles against one atomic add per output
# Slices of K: the fewest (a power of two) that put NARROW_WARPS_PER_SM warps on every SM. On the H200 that was the
# best slicing of both tiles (benchmarks/NOTES.md): M = 64, 64 x 256 x 4 slices (128 blocks of 8 warps) 0.215 ms,
# 0.87x cuBLAS; N = 32, 128 x 32 x 8 (512 blocks of 2 warps) 0.079 ms, 0.91x -- half or twice the slices were slower.
NARROW_WARPS_PER_SM = 7


def narrow_kernel(m: int, n: int, aligned: bool):
    """The tile along C's short side: 64 x 256 for few rows, 128 x 32 for few columns."""
    if m <= n:
        return rows_vec_kernel if aligned else rows_kernel
    return cols_small_vec_kernel if aligned else cols_small_kernel


def narrow_splits(m: int, n: int, k: int, kernel, sms: int | None = None) -> int:
    sms = sms or _common.sm_count()
    tiles = ceil_div(m, kernel.tile[0]) * ceil_div(n, kernel.tile[1])
    warps = tiles * (kernel.threads // 32)
    splits = 1
    while warps * splits < NARROW_WARPS_PER_SM * sms and k // (2 * splits) >= NARROW_MIN_K:
        splits *= 2
    return splits


def narrow_plan(m: int, n: int, k: int, aligned: bool, sms: int | None = None):
    """(kernel, slices): the narrow tile along C's short side and the slices of K that fill the SMs."""
    kernel = narrow_kernel(m, n, aligned)
    return kernel, narrow_splits(m, n, k, kernel, sms)


@version("matmul", check, kernels=[rows_vec_kernel, cols_vec_kernel, cols_small_vec_kernel])
def narrow(a, b, c):
    """Tiles shaped like C (64 x 256 for few rows, 256 x 32 for few columns), with slices of K to fill the GPU."""
    kernel, splits = narrow_plan(*c.shape, a.shape[1], aligned16(a, b))
    return tiled_launch(kernel, c, (a, b, c), splits)
