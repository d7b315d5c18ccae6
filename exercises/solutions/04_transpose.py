"""Exercise 04 -- transpose through shared memory. Reference solution."""

from numba import cuda, float32

TILE = 16  # the tile and the block are TILE x TILE, fixed by the launch contract
PADDED = TILE + 1  # a module-level constant: `TILE + 1` inside the kernel is not a compile-time constant


@cuda.jit
def transpose(a, out):
    # a: (M, N) float32; out: (N, M) float32.
    # Launched with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
    tile = cuda.shared.array((TILE, PADDED), float32)  # +1: a column of the tile spans all 32 banks
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    m, n = a.shape
    if row0 + ty < m and col0 + tx < n:
        tile[ty, tx] = a[row0 + ty, col0 + tx]  # coalesced: tx along a row of a
    cuda.syncthreads()  # the whole tile is loaded before anyone reads a column of it
    if col0 + ty < n and row0 + tx < m:
        out[col0 + ty, row0 + tx] = tile[tx, ty]  # coalesced: tx along a row of out
