"""Step 3 of the matmul ladder, ``tiled``.

Square TILE x TILE tiles of A and B are staged in shared memory; every element loaded from global memory is
reused TILE times from shared memory, so global loads drop by TILE.
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check

TILE = 16


@cuda.jit
def tiled_kernel(a, b, c):
    # The block computes a TILE x TILE tile of C. For each of ceil(K / TILE) phases, its TILE*TILE threads
    # load one TILE x TILE tile of A and one of B (one element each), then every thread does TILE FMAs from
    # shared memory. Each loaded element is used by TILE threads, so A is read ceil(N / TILE) times in total
    # instead of N times (and B ceil(M / TILE) times instead of M).
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, kdim = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, kdim, TILE):  # bounded by K, not by gridDim
        # Out-of-range elements are loaded as 0 so the inner loop needs no guard (0 * x adds nothing).
        a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < kdim else float32(0.0)
        b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < kdim and col < n else float32(0.0)
        # Wait until the whole tile is loaded before anyone reads it.
        cuda.syncthreads()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        # Wait until everyone is done reading before the next phase overwrites the tile.
        cuda.syncthreads()
    if row < m and col < n:  # the guard comes after the loop: every thread must reach both barriers
        c[row, col] = acc


@version("matmul", check, kernels=[tiled_kernel])
def tiled(a, b, c):
    """Shared-memory tiling: TILE x TILE tiles of A and B are loaded once and reused TILE times."""
    m, n = c.shape
    return [Launch(tiled_kernel, (ceil_div(n, TILE), ceil_div(m, TILE)), (TILE, TILE), (a, b, c))]

