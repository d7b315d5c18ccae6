"""Exercise 06 -- tiled matmul in shared memory. Reference solution."""

from numba import cuda, float32

TILE = 16  # tile and block size, fixed by the launch contract


@cuda.jit
def matmul_tiled(a, b, c):
    # a: (M, K), b: (K, N), c: (M, N), float32.
    # Launched with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, k, TILE):  # bounded by K, not by the grid
        # One global load per thread and tile; 0 outside the matrices, so the inner loop needs no guard.
        a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < k else float32(0.0)
        b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < k and col < n else float32(0.0)
        cuda.syncthreads()  # both tiles complete before anyone reads them
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()  # everyone done reading before the next step overwrites the tiles
    if row < m and col < n:  # the guard comes after the loop: every thread reaches both barriers
        c[row, col] = acc
