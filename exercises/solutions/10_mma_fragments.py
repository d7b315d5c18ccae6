"""Exercise 10 -- the fragments of a tensor-core mma. Reference solution."""

import numpy as np
from numba import cuda, float32

from gpukernels._mma import mma_f16, pack_half2


@cuda.jit(device=True)
def half_at(x, i, j):
    # x[i, j], or 0 past the edge of x: a zero adds nothing to a product, so a tile that overhangs M, N or K is
    # multiplied as if the matrices were padded with zeros
    if i < x.shape[0] and j < x.shape[1]:
        return x[i, j]
    return np.float16(0.0)


@cuda.jit(device=True)
def store_at(c, i, j, v):
    # c[i, j] = v inside c only: the rows and columns of a tile past the edge are computed but not written
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = v


@cuda.jit
def mma_matmul(a, b, c):
    # a: (M, K) float16; b: (K, N) float16; c: (M, N) float32.
    # Launched as mma_matmul[(ceil(N / 8), ceil(M / 16)), 32](a, b, c): block (bx, by) is one warp and computes
    # the 16 x 8 tile c[16 by : 16 by + 16, 8 bx : 8 bx + 8].
    lane = cuda.threadIdx.x
    g = lane // 4  # groupID: the row of A and C (and g + 8), the column of B
    t = lane % 4  # threadID_in_group: the pair of columns of A and C, the pair of rows of B
    row = cuda.blockIdx.y * 16 + g
    col0 = cuda.blockIdx.x * 8
    col = col0 + g  # this lane's column of B
    d0 = d1 = d2 = d3 = float32(0.0)
    for k0 in range(0, a.shape[1], 16):  # one mma per 16 of K, taken by all 32 lanes
        k = k0 + 2 * t
        # A (16 x 16, row-major in the fragment): a0 a1 | a2 a3 | a4 a5 | a6 a7 at
        # (g, k k+1) | (g+8, k k+1) | (g, k+8 k+9) | (g+8, k+8 k+9), the lower column in the low half
        a0 = pack_half2(half_at(a, row, k), half_at(a, row, k + 1))
        a1 = pack_half2(half_at(a, row + 8, k), half_at(a, row + 8, k + 1))
        a2 = pack_half2(half_at(a, row, k + 8), half_at(a, row, k + 9))
        a3 = pack_half2(half_at(a, row + 8, k + 8), half_at(a, row + 8, k + 9))
        # B (16 x 8, "col": a word holds two k of one column): b0 b1 | b2 b3 at (k k+1, g) | (k+8 k+9, g)
        b0 = pack_half2(half_at(b, k, col), half_at(b, k + 1, col))
        b1 = pack_half2(half_at(b, k + 8, col), half_at(b, k + 9, col))
        d0, d1, d2, d3 = mma_f16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
    # C (16 x 8): d0 d1 at (g, 2t 2t+1), d2 d3 at (g+8, 2t 2t+1)
    ccol = col0 + 2 * t
    store_at(c, row, ccol, d0)
    store_at(c, row, ccol + 1, d1)
    store_at(c, row + 8, ccol, d2)
    store_at(c, row + 8, ccol + 1, d3)
