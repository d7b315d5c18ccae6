"""Step 5 of the tensor-core ladder, ``block_tiles``: step 4's pipeline with 128 x 128 block tiles and 64 x 64 warp
tiles.

Per 16 of K a warp of step 4 loads 2 A fragments and 4 B fragments (2 + 2 ldmatrix.x4) for 2 x 4 = 8 mmas; with a
64 x 64 tile it loads 4 + 4 for 4 x 8 = 32 mmas: 4 mmas per ldmatrix instead of 2, so shared-memory bandwidth stops
limiting the tensor cores. The block's 128 x 128 tile halves the global (L2) traffic per FLOP again: A is read
N / 128 times, B M / 128 times. The sizes are fitted to an SM: 4 warps x 32 threads x ~240 registers (the 128
float32 accumulators of 32 mma tiles, the fragments and addresses) leave room for 2 blocks per SM in 64 K registers.
A ring of 3 stages would be 3 x (8 + 8) KB = 48 KB, the most shared memory a block may declare statically; 2 stages
(32 KB, one tile in flight while one is multiplied) measured as fast or faster on an H200 (2026-12-04,
benchmarks/tensor_core_variants.py; 4096^3: 0.558 vs 0.567 ms, and 0.57 vs 0.63 in another run; 8192^3: 3.78 vs
3.91 ms), so the step keeps 2: with 4x the mmas per tile, one tile ahead covers the copies.

A 128 x 128 tile also means 4x fewer blocks: at 1024^2 that is 64 blocks for 132 SMs. Step 12 (``optimized``)
chooses between the tile sizes per shape.
"""

from __future__ import annotations

from .._launch import version
from ._common import check, rows_aligned16, tiled_launch
from .k04_pipelined import make_pipelined_kernel

block_tiles_kernel = make_pipelined_kernel(128, 128, 2, 2, stages=2)
block_tiles_sync_kernel = make_pipelined_kernel(128, 128, 2, 2, stages=2, async_copy=False)


@version("tensor_core", check, kernels=[block_tiles_kernel, block_tiles_sync_kernel])
def block_tiles(a, b, c):
    """128 x 128 block tiles of 4 warps, 64 x 64 per warp: 32 mmas per 8 ldmatrix per 16 of K (step 4: 8 per 4)."""
    kernel = block_tiles_kernel if rows_aligned16(a, b) else block_tiles_sync_kernel
    return tiled_launch(kernel, a, b, c, kernel.threads)
