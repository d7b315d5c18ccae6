"""Step 5 of the matmul ladder, ``regblock_2d``.

Each thread computes a TM x TN block; per k step it reads TM + TN values from shared memory for TM * TN FMAs
(outer product in registers).
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check

B2_BM, B2_BN, B2_BK, B2_TM, B2_TN = 128, 128, 8, 8, 8
B2_THREADS = (B2_BM // B2_TM) * (B2_BN // B2_TN)  # 256
B2_A_LOADS = B2_BM * B2_BK // B2_THREADS  # 4 loads of A per thread per k step
B2_B_LOADS = B2_BK * B2_BN // B2_THREADS  # 4 loads of B per thread per k step


@cuda.jit
def regblock_2d_kernel(a, b, c):
    # Block tile 128 x 128, 256 threads, each owning an 8 x 8 block of C. Per k step a thread loads 8 values
    # of A and 8 of B from shared memory into registers and does 64 FMAs with them: 4 FMAs per shared load.
    # A is stored transposed in shared memory (a_tile[k, m]) so that the 8 values a thread needs are
    # consecutive. Global traffic: A is read ceil(N / 128) times, B ceil(M / 128) times.
    a_tile = cuda.shared.array((B2_BK, B2_BM), float32)
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
                a_reg[i] = a_tile[kk, trow * B2_TM + i]
            for j in range(B2_TN):
                b_reg[j] = b_tile[kk, tcol * B2_TN + j]
            for i in range(B2_TM):
                for j in range(B2_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    for i in range(B2_TM):
        row = row0 + trow * B2_TM + i
        for j in range(B2_TN):
            col = col0 + tcol * B2_TN + j
            if row < m and col < n:
                c[row, col] = acc[i, j]


@version("matmul", check, kernels=[regblock_2d_kernel])
def regblock_2d(a, b, c):
    """2D register blocking: each thread computes an 8 x 8 block as an outer product of registers."""
    m, n = c.shape
    return [Launch(regblock_2d_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]

