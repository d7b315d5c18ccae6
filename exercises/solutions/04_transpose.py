"""Exercise 04 -- transpose through shared memory. Reference solution."""

from numba import cuda, float32

TILE = 32  # the tile is TILE x TILE, fixed by the launch contract
ROWS = 8  # the block is (TILE, ROWS): each thread handles TILE // ROWS rows of the tile
PADDED = TILE + 1  # a module-level constant: `TILE + 1` inside the kernel is not a compile-time constant


@cuda.jit
def transpose(a, out):
    # a: (M, N) float32; out: (N, M) float32.
    # Launched with block (TILE, ROWS) and grid (ceil(N / TILE), ceil(M / TILE)).
    # Width 33: element (r, c) is in bank (33 r + c) % 32 = (r + c) % 32, so a row (fixed r) and a column
    # (fixed c) of the tile both cover all 32 banks -- no conflicts either way.
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    m, n = a.shape
    for r in range(ty, TILE, ROWS):
        if row0 + r < m and col0 + tx < n:
            tile[r, tx] = a[row0 + r, col0 + tx]  # coalesced: tx along a row of a
    cuda.syncthreads()  # the whole tile is loaded before anyone reads a column of it
    for r in range(ty, TILE, ROWS):
        if col0 + r < n and row0 + tx < m:
            out[col0 + r, row0 + tx] = tile[tx, r]  # coalesced: tx along a row of out
