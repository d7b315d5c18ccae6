"""Step 7 of the matmul ladder, ``double_buffered``.

Two copies of each tile: the next tiles' global loads are in flight while the current ones are multiplied, and
one barrier per tile suffices.
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check
from .k05_regblock_2d import B2_BM, B2_BN, B2_THREADS, B2_TM, B2_TN
from .k06_conflict_free import CF_ROW

DB_BK = 16
DB_A_LOADS = B2_BM * DB_BK // B2_THREADS  # 8
DB_B_LOADS = DB_BK * B2_BN // B2_THREADS  # 8


@cuda.jit
def double_buffered_kernel(a, b, c):
    # Two copies of each shared tile. While the block multiplies tile t from one copy, each thread has already
    # issued the global loads of tile t + 1 into registers; after the FMAs it stores them into the other copy.
    # The ~600-cycle DRAM/L2 latency is hidden behind 16 * 64 FMAs per thread, and one barrier per tile
    # suffices (writers and readers of a copy are always separated by a barrier).
    a_tile = cuda.shared.array((2, DB_BK, CF_ROW), float32)
    b_tile = cuda.shared.array((2, DB_BK, B2_BN), float32)
    acc = cuda.local.array((B2_TM, B2_TN), float32)
    a_reg = cuda.local.array(B2_TM, float32)
    b_reg = cuda.local.array(B2_TN, float32)
    a_next = cuda.local.array(DB_A_LOADS, float32)
    b_next = cuda.local.array(DB_B_LOADS, float32)
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
    # Thread t loads A elements (r, kk) = divmod(t + l*256, 16) and B elements (kk, cc) = divmod(t + l*256, 128).
    for l in range(DB_A_LOADS):
        r, kk = (t + l * B2_THREADS) // DB_BK, (t + l * B2_THREADS) % DB_BK
        a_tile[0, kk, r] = a[row0 + r, kk] if row0 + r < m and kk < kdim else float32(0.0)
    for l in range(DB_B_LOADS):
        kk, cc = (t + l * B2_THREADS) // B2_BN, (t + l * B2_THREADS) % B2_BN
        b_tile[0, kk, cc] = b[kk, col0 + cc] if kk < kdim and col0 + cc < n else float32(0.0)
    cuda.syncthreads()
    cur = 0
    for k0 in range(0, kdim, DB_BK):
        k1 = k0 + DB_BK
        if k1 < kdim:  # same for every thread of the block: no divergence around the barrier below
            for l in range(DB_A_LOADS):
                r, kk = (t + l * B2_THREADS) // DB_BK, (t + l * B2_THREADS) % DB_BK
                a_next[l] = a[row0 + r, k1 + kk] if row0 + r < m and k1 + kk < kdim else float32(0.0)
            for l in range(DB_B_LOADS):
                kk, cc = (t + l * B2_THREADS) // B2_BN, (t + l * B2_THREADS) % B2_BN
                b_next[l] = b[k1 + kk, col0 + cc] if k1 + kk < kdim and col0 + cc < n else float32(0.0)
        for kk in range(DB_BK):
            for i in range(B2_TM):
                a_reg[i] = a_tile[cur, kk, trow + 16 * i]
            for j in range(B2_TN):
                b_reg[j] = b_tile[cur, kk, tcol + 16 * j]
            for i in range(B2_TM):
                for j in range(B2_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        if k1 < kdim:
            for l in range(DB_A_LOADS):
                r, kk = (t + l * B2_THREADS) // DB_BK, (t + l * B2_THREADS) % DB_BK
                a_tile[1 - cur, kk, r] = a_next[l]
            for l in range(DB_B_LOADS):
                kk, cc = (t + l * B2_THREADS) // B2_BN, (t + l * B2_THREADS) % B2_BN
                b_tile[1 - cur, kk, cc] = b_next[l]
        cuda.syncthreads()
        cur = 1 - cur
    for i in range(B2_TM):
        row = row0 + trow + 16 * i
        for j in range(B2_TN):
            col = col0 + tcol + 16 * j
            if row < m and col < n:
                c[row, col] = acc[i, j]


@version("matmul", check, kernels=[double_buffered_kernel])
def double_buffered(a, b, c):
    """Double buffering: the next tiles are loaded into registers while the current ones are multiplied."""
    m, n = c.shape
    return [Launch(double_buffered_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]

