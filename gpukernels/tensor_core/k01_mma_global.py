"""Step 1 of the tensor-core ladder, ``mma_global``.

One warp per 16 x 8 tile of C, and one ``mma.sync`` per 16-deep slice of K: the warp's 32 lanes hold the tile of A
(16 x 16), of B (16 x 8) and of C (16 x 8) between them, each lane the elements the PTX ISA assigns it
(`gpukernels._mma.a_frag_coords` and its neighbours), and one instruction does the 2048 multiply-adds a thread of
matmul's naive kernel does one at a time. Each lane loads its fragment straight from global memory -- 8 halves of A
and 4 of B per mma, two at a time packed into one 32-bit register -- which is the index arithmetic this step is about.
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from .._mma import mma_f16, pack_half2
from ._common import check, half_at, store

WARPS = 4  # warps per block, side by side along N: a block computes a 16 x 32 strip of C


@cuda.jit
def mma_global_kernel(a, b, c):
    # Block (32, WARPS): threadIdx.x is the lane, threadIdx.y the warp. Warp w of block (bx, by) computes
    # C[16 by : 16 by + 16, 8 (WARPS bx + w) : ... + 8]. Lane = 4 g + t: it holds rows g and g + 8 of A and C,
    # columns 2t, 2t + 1 of them (+ 8 for A's second half of k), and column g of B at rows 2t, 2t + 1 (+ 8).
    # Global traffic: every warp reads its 16 rows of A and 8 columns of B in full, 2 bytes per load: A is read
    # N / 8 times and B M / 16 times (shared memory, next step, divides that).
    kdim = a.shape[1]
    lane = cuda.threadIdx.x
    g, t = lane >> 2, lane & 3
    row = cuda.blockIdx.y * 16 + g  # this lane's rows of A and C: row and row + 8
    col0 = (cuda.blockIdx.x * WARPS + cuda.threadIdx.y) * 8
    if col0 >= b.shape[1]:
        return  # the whole warp's tile is past the last column (all 32 lanes leave together)
    col = col0 + g  # this lane's column of B
    d0 = d1 = d2 = d3 = float32(0.0)
    for k0 in range(0, kdim, 16):
        k = k0 + 2 * t
        # A fragment a0..a7 as 4 words: (row, k k+1), (row+8, k k+1), (row, k+8 k+9), (row+8, k+8 k+9)
        a0 = pack_half2(half_at(a, row, k), half_at(a, row, k + 1))
        a1 = pack_half2(half_at(a, row + 8, k), half_at(a, row + 8, k + 1))
        a2 = pack_half2(half_at(a, row, k + 8), half_at(a, row, k + 9))
        a3 = pack_half2(half_at(a, row + 8, k + 8), half_at(a, row + 8, k + 9))
        # B fragment b0..b3 as 2 words: (k k+1, col), (k+8 k+9, col)
        b0 = pack_half2(half_at(b, k, col), half_at(b, k + 1, col))
        b1 = pack_half2(half_at(b, k + 8, col), half_at(b, k + 9, col))
        d0, d1, d2, d3 = mma_f16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
    # D fragment: (row, 2t), (row, 2t+1), (row+8, 2t), (row+8, 2t+1) of the tile
    c_col = col0 + 2 * t
    store(c, row, c_col, d0)
    store(c, row, c_col + 1, d1)
    store(c, row + 8, c_col, d2)
    store(c, row + 8, c_col + 1, d3)


@version("tensor_core", check, kernels=[mma_global_kernel])
def mma_global(a, b, c):
    """One warp per 16 x 8 tile of C: one mma.sync per 16 of K, each lane loading its fragment from global memory."""
    m, n = c.shape
    grid = (ceil_div(ceil_div(n, 8), WARPS), ceil_div(m, 16))
    return [Launch(mma_global_kernel, grid, (32, WARPS), (a, b, c))]
