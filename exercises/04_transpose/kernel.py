"""Exercise 04 -- transpose through shared memory. Read README.md, then: gpukernels grade 04"""

from numba import cuda, float32  # noqa: F401

TILE = 16  # the tile and the block are TILE x TILE, fixed by the launch contract


@cuda.jit
def transpose(a, out):
    # a: (M, N) float32; out: (N, M) float32.
    # Launched with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
    # TODO: a shared tile (pad it: think about banks).
    # TODO: load a[by*TILE + ty, bx*TILE + tx] into the tile (coalesced: tx walks along a row of a).
    # TODO: wait until the whole tile is loaded.
    # TODO: write the transposed tile to out, again with tx walking along a row (of out).
    pass
