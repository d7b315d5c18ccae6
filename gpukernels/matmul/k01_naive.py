"""Step 1 of the matmul ladder, ``naive``.

One thread per output element, straight from global memory. Consecutive threads of a warp walk down a *column*
of C, so their loads of A and stores of C are 4*K bytes apart: every lane touches its own 32-byte sector
(uncoalesced).
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check

NAIVE_BLOCK = (32, 8)  # 32 lanes along x = one warp per row of the block


@cuda.jit
def naive_kernel(a, b, c):
    # Thread (x, y) of the grid computes C[x, y]. The 32 lanes of a warp have consecutive x, i.e. consecutive
    # *rows*: their reads a[i, k] are K floats apart and their writes c[i, j] N floats apart -> one 32-byte
    # sector per lane. Global traffic: every C element reads a full row of A and column of B: 2*K loads,
    # so A is read N times and B M times in total.
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@version("matmul", check, kernels=[naive_kernel])
def naive(a, b, c):
    """One thread per output element, global memory only; threadIdx.x walks down a column (uncoalesced)."""
    m, n = c.shape
    grid = (ceil_div(m, NAIVE_BLOCK[0]), ceil_div(n, NAIVE_BLOCK[1]))
    return [Launch(naive_kernel, grid, NAIVE_BLOCK, (a, b, c))]

