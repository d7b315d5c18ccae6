"""Step 6 of the matmul ladder, ``conflict_free``.

The same blocking with each thread owning strided rows and columns, and a padded A tile: no shared-memory bank
conflicts (regblock_2d's B reads were 4-way conflicts).
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check
from .k05_regblock_2d import B2_A_LOADS, B2_B_LOADS, B2_BK, B2_BM, B2_BN, B2_THREADS, B2_TM, B2_TN

CF_PAD = 4  # a_tile row length BM + 4: the transposed stores of A land in 32 different banks
CF_ROW = B2_BM + CF_PAD


@cuda.jit
def conflict_free_kernel(a, b, c):
    # In regblock_2d thread (trow, tcol) owns columns tcol*8 .. tcol*8+7: in one load b_tile[kk, tcol*8 + j]
    # the 16 distinct tcol of a warp hit addresses 8 apart, i.e. only 4 distinct banks -> a 4-way conflict
    # (4 shared-memory wavefronts per load). Here the thread owns columns tcol + 16*j and rows trow + 16*i:
    # lanes read 16 consecutive words (conflict-free; the other half-warp reads the same words, a broadcast).
    # The transposed store a_tile[kk, r] had 8 lanes with the same r and different kk writing one bank; a row
    # length of BM + 4 spreads them over 8 banks.
    a_tile = cuda.shared.array((B2_BK, CF_ROW), float32)
    b_tile = cuda.shared.array((B2_BK, B2_BN), float32)
    acc = cuda.local.array((B2_TM, B2_TN), float32)
    a_reg = cuda.local.array(B2_TM, float32)
    b_reg = cuda.local.array(B2_TN, float32)
    t = cuda.threadIdx.x
    trow = t // (B2_BN // B2_TN)
    tcol = t % (B2_BN // B2_TN)
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(B2_TM):
        for j in range(B2_TN):
            acc[i, j] = 0.0
    for k0 in range(0, kdim, B2_BK):
        for l in range(B2_A_LOADS):
            idx = t + l * B2_THREADS
            r, kk = idx // B2_BK, idx % B2_BK
            a_tile[kk, r] = a[row0 + r, k0 + kk] if row0 + r < m and k0 + kk < kdim else float32(0.0)
        for l in range(B2_B_LOADS):
            idx = t + l * B2_THREADS
            kk, cc = idx // B2_BN, idx % B2_BN
            b_tile[kk, cc] = b[k0 + kk, col0 + cc] if k0 + kk < kdim and col0 + cc < n else float32(0.0)
        cuda.syncthreads()
        for kk in range(B2_BK):
            for i in range(B2_TM):
                a_reg[i] = a_tile[kk, trow + 16 * i]
            for j in range(B2_TN):
                b_reg[j] = b_tile[kk, tcol + 16 * j]
            for i in range(B2_TM):
                for j in range(B2_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    for i in range(B2_TM):
        row = row0 + trow + 16 * i
        for j in range(B2_TN):
            col = col0 + tcol + 16 * j
            if row < m and col < n:
                c[row, col] = acc[i, j]


@version("matmul", check, kernels=[conflict_free_kernel])
def conflict_free(a, b, c):
    """No bank conflicts: threads own strided rows/columns (tcol + 16*j) and the A tile is padded."""
    m, n = c.shape
    return [Launch(conflict_free_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]

