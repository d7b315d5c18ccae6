"""Step 4 of the matmul ladder, ``regblock_1d``.

Each thread computes TM outputs of one column; a value read from shared memory is reused TM times from a
register, so shared-memory traffic per FMA drops by ~TM.
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check

B1_BM, B1_BN, B1_BK, B1_TM = 64, 64, 8, 8
B1_THREADS = (B1_BM // B1_TM) * B1_BN  # 512


@cuda.jit
def regblock_1d_kernel(a, b, c):
    # Block tile BM x BN of C, K advanced BK at a time. Thread t owns column t % BN and rows
    # (t // BN) * TM ... + TM - 1. Per k step it reads one B value from shared memory into a register and
    # reuses it TM times: TM FMAs per TM + 1 shared loads, against 2 loads per FMA in `tiled`.
    a_tile = cuda.shared.array((B1_BM, B1_BK), float32)
    b_tile = cuda.shared.array((B1_BK, B1_BN), float32)
    acc = cuda.local.array(B1_TM, float32)
    t = cuda.threadIdx.x
    tcol = t % B1_BN
    trow = t // B1_BN
    row0 = cuda.blockIdx.y * B1_BM
    col0 = cuda.blockIdx.x * B1_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(B1_TM):
        acc[i] = 0.0
    # Tile loads: BM * BK = BK * BN = 512 elements = one per thread; consecutive threads read consecutive
    # addresses of a row (A: 8 floats = one 32-byte sector per row; B: 64 floats = two 128-byte lines).
    ar, ak = t // B1_BK, t % B1_BK
    bk, bc = t // B1_BN, t % B1_BN
    for k0 in range(0, kdim, B1_BK):
        a_tile[ar, ak] = a[row0 + ar, k0 + ak] if row0 + ar < m and k0 + ak < kdim else float32(0.0)
        b_tile[bk, bc] = b[k0 + bk, col0 + bc] if k0 + bk < kdim and col0 + bc < n else float32(0.0)
        cuda.syncthreads()
        for kk in range(B1_BK):
            bv = b_tile[kk, tcol]
            for i in range(B1_TM):
                acc[i] += a_tile[trow * B1_TM + i, kk] * bv
        cuda.syncthreads()
    col = col0 + tcol
    for i in range(B1_TM):
        row = row0 + trow * B1_TM + i
        if row < m and col < n:
            c[row, col] = acc[i]


@version("matmul", check, kernels=[regblock_1d_kernel])
def regblock_1d(a, b, c):
    """1D register blocking: each thread computes TM = 8 outputs of a column, reusing each B value 8 times."""
    m, n = c.shape
    return [Launch(regblock_1d_kernel, (ceil_div(n, B1_BN), ceil_div(m, B1_BM)), (B1_THREADS,), (a, b, c))]

