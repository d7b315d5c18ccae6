"""Exercise 06 -- tiled matmul in shared memory. Read README.md, then: gpukernels grade 06"""

from numba import cuda, float32  # noqa: F401

TILE = 16  # tile and block size, fixed by the launch contract


@cuda.jit
def matmul_tiled(a, b, c):
    # a: (M, K), b: (K, N), c: (M, N), float32.
    # Launched with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
    # TODO: two shared TILE x TILE tiles, one for a and one for b.
    # TODO: this thread's row and column of c.
    # TODO: for each step k0 of TILE along K: load one element of each tile (0 outside the matrices), wait,
    #       accumulate TILE products from the tiles, wait again.
    # TODO: store the result if (row, col) is inside c.
    pass
