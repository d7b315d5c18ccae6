"""Exercise 10 -- the fragments of a tensor-core mma. Read README.md, then: gpukernels grade 10"""

import numpy as np
from numba import cuda, float32  # noqa: F401

from gpukernels._mma import mma_f16, pack_half2  # noqa: F401  (the only names a kernel may import from gpukernels)


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
    # TODO: this lane, its g = lane // 4 and t = lane % 4; its rows of A and C, its column of B.
    # TODO: four float32 accumulators d0..d3, starting at 0.
    # TODO: for each 16 of K: the 4 words of A and the 2 words of B this lane holds (pack_half2 of two
    #       half_at each; see the README's fragment tables), then d0..d3 = mma_f16(...) -- by all 32 lanes.
    # TODO: store d0..d3 at this lane's 4 elements of the C tile (store_at).
    pass
