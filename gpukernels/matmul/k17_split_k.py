"""Step 17 of the matmul ladder, ``split_k``: slices of K over the grid's z when C has too few tiles for the GPU.

At M = N = 256 and K = 65536, C is 16 tiles of 64 x 64: 16 blocks for 132 SMs, each walking all 65536 of K --
88% of the GPU idles however fast a block runs (``thread_16x8`` is at 0.03x cuBLAS there). Splitting K
into S slices makes 16 * S blocks; each sums its slice and adds the result into C with an atomic add per element
(C zeroed first), S partial sums per element in all. That costs an extra M * N * S atomics and a zero pass, cheap
next to the product when M * N is small and K large -- exactly when the split is needed. The one change from the
factory's 64 x 64 and 128 x 128 tiles: ``split_k=True``.

`split_k_plan` chooses the tile and S the way ``wave_fit`` chooses a tile: the largest tile, then the fewest slices,
that give every SM a block, with slices no shallower than ``SPLIT_MIN_K``.
"""

from __future__ import annotations

from .._intrinsics import aligned16
from .._launch import ceil_div, version
from . import _common
from ._common import check, tiled_launch
from ._interior import make_interior_kernel

SPLIT_MIN_K = 32  # the shallowest slice of K worth a block: 2 tiles of 16, against one atomic add per output
SPLIT_MAX = 128  # at most this many partial sums per element of C

split_kernel = make_interior_kernel(128, 128, bk=16, split_k=True)
split_vec_kernel = make_interior_kernel(128, 128, bk=16, vec=True, split_k=True)
# The 64 x 64 split tile is 16 deep (half the barriers per k of an 8-deep one; 17 KB of shared memory, so 6 blocks
# still fit an SM). Measured against the 8-deep tile at the same slices (H200, benchmarks/results/
# h200-suite-sweep3.json): 768^3 x3 0.0413 vs 0.0421 ms, 1536^3 x4 0.2131 vs 0.2539, 128 x 128 x 32768 x128
# 0.0476 vs 0.0499, 256^3 x8 0.0090 vs 0.0089.
small_split_kernel = make_interior_kernel(64, 64, bk=16, split_k=True)
small_split_vec_kernel = make_interior_kernel(64, 64, bk=16, vec=True, split_k=True)


def split_k_kernels(aligned: bool) -> tuple:
    """The split kernels, largest tile first, with 16-byte loads when the rows are aligned."""
    return (split_vec_kernel, small_split_vec_kernel) if aligned else (split_kernel, small_split_kernel)


def split_k_plan(m: int, n: int, k: int, aligned: bool, sms: int | None = None):
    """(kernel, slices): the first tile (largest first) and the fewest slices of K that make >= one block per SM."""
    sms = sms or _common.sm_count()
    kernels = split_k_kernels(aligned)
    for kernel in kernels:
        tiles = ceil_div(m, kernel.tile[0]) * ceil_div(n, kernel.tile[1])
        splits = max(1, min(ceil_div(sms, tiles), k // SPLIT_MIN_K, SPLIT_MAX))
        if tiles * splits >= sms or kernel is kernels[-1]:
            return kernel, splits


@version("matmul", check, kernels=[split_kernel, split_vec_kernel, small_split_kernel, small_split_vec_kernel])
def split_k(a, b, c):
    """Split-K: slices of K over the grid's z, summed into C by atomics, when C alone has too few tiles."""
    kernel, splits = split_k_plan(*c.shape, a.shape[1], aligned16(a, b))
    return tiled_launch(kernel, c, (a, b, c), splits)
