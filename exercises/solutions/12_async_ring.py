"""Exercise 12 -- a two-stage cp.async ring for tiled matmul. Reference solution."""

from numba import cuda, float32

from gpukernels._intrinsics import async_commit, async_wait, copy_async

TILE = 16  # tile and block size, fixed by the launch contract
STAGES = 2  # tiles of a (and of b) in the shared ring
IN_FLIGHT = STAGES - 1  # groups a thread may leave in flight when it uses a tile: async_wait(IN_FLIGHT)


@cuda.jit(device=True)
def copy_tiles(a, b, a_ring, b_ring, stage, k0, row, col, tx, ty):
    # This thread's element of each tile, global -> shared without passing through registers: flat offsets into
    # the ring and the matrices, 4 bytes each; 0 bytes outside the matrices, which writes a zero.
    m, k = a.shape
    n = b.shape[1]
    d = (stage * TILE + ty) * TILE + tx
    inside = row < m and k0 + tx < k
    copy_async(a_ring, d, a, row * k + k0 + tx if inside else 0, 4 if inside else 0)
    inside = k0 + ty < k and col < n
    copy_async(b_ring, d, b, (k0 + ty) * n + col if inside else 0, 4 if inside else 0)


@cuda.jit
def matmul_async(a, b, c):
    # a: (M, K), b: (K, N), c: (M, N), float32.
    # Launched with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
    a_ring = cuda.shared.array((STAGES, TILE, TILE), float32)
    b_ring = cuda.shared.array((STAGES, TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    tiles = (a.shape[1] + TILE - 1) // TILE
    copy_tiles(a, b, a_ring, b_ring, 0, 0, row, col, tx, ty)  # tile 0 on its way
    async_commit()
    acc = float32(0.0)
    for t in range(tiles):
        if t + 1 < tiles:  # tile t + 1 into the other stage, while tile t is used
            copy_tiles(a, b, a_ring, b_ring, (t + 1) % STAGES, (t + 1) * TILE, row, col, tx, ty)
        async_commit()  # one group per tile, empty or not, so that the count below stays right
        async_wait(IN_FLIGHT)  # all but the newest group have landed: tile t's copies by this thread
        cuda.syncthreads()  # ... and by every thread
        s = t % STAGES
        for kk in range(TILE):
            acc += a_ring[s, ty, kk] * b_ring[s, kk, tx]
        cuda.syncthreads()  # everyone is done with stage s before the next iteration refills it
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc
