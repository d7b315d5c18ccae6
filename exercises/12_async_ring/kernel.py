"""Exercise 12 -- a two-stage cp.async ring for tiled matmul. Read README.md, then: gpukernels grade 12"""

from numba import cuda, float32  # noqa: F401

from gpukernels._intrinsics import async_commit, async_wait, copy_async  # noqa: F401

TILE = 16  # tile and block size, fixed by the launch contract
STAGES = 2  # tiles of a (and of b) in the shared ring
IN_FLIGHT = STAGES - 1  # groups a thread may leave in flight when it uses a tile: async_wait(IN_FLIGHT)


@cuda.jit
def matmul_async(a, b, c):
    # a: (M, K), b: (K, N), c: (M, N), float32.
    # Launched with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
    # TODO: two shared rings, (STAGES, TILE, TILE) floats each, for the tiles of a and of b.
    # TODO: before the loop, issue the copies of k tile 0 into stage 0 and commit them (one group).
    # TODO: for each k tile t: issue the copies of tile t + 1 into the other stage (if there is one) and commit
    #       (one group per tile, empty or not); wait until tile t has landed; barrier; 16 multiply-adds from
    #       stage t % STAGES; barrier before that stage is refilled.
    # TODO: store the result if (row, col) is inside c.
    pass
