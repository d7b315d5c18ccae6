"""Exercise 04 -- transpose through shared memory. Read README.md, then: gpukernels grade 04"""

from numba import cuda, float32  # noqa: F401

TILE = 32  # the tile is TILE x TILE, fixed by the launch contract
ROWS = 8  # the block is (TILE, ROWS): each thread handles TILE // ROWS rows of the tile


@cuda.jit
def transpose(a, out):
    # a: (M, N) float32; out: (N, M) float32.
    # Launched with block (TILE, ROWS) and grid (ceil(N / TILE), ceil(M / TILE)).
    # TODO: a shared tile (pad it: think about banks).
    # TODO: load rows ty, ty + ROWS, ... of the tile from a (coalesced: tx walks along a row of a).
    # TODO: wait until the whole tile is loaded.
    # TODO: write the transposed tile to out, again with tx walking along a row (of out).
    pass
