"""Step 8 of the matmul ladder, ``vectorized``.

16-byte aligned tiles and 4 consecutive values per thread, so NVVM emits 128-bit shared loads: 4 load
instructions per 64 FMAs instead of 16.
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check
from .k05_regblock_2d import B2_BM, B2_BN, B2_THREADS

V_BK = 8
V_ROW = B2_BM + 4  # a_tile row: 132 floats = 528 bytes, a multiple of 16 (aligned rows) that spreads the stores


@cuda.jit(device=True, forceinline=True)
def _v_load(a, b, a_next, b_next, k, row0, col0, ar, ak, bk, bc):
    # Thread t fetches 4 consecutive k of one row of A (one 16-byte run) and 4 consecutive columns of one row
    # of B (a warp reads 512 contiguous bytes). Out-of-range elements become 0.
    m, kdim = a.shape
    n = b.shape[1]
    gr = row0 + ar
    for q in range(4):
        a_next[q] = a[gr, k + ak + q] if gr < m and k + ak + q < kdim else float32(0.0)
    for q in range(4):
        b_next[q] = b[k + bk, col0 + bc + q] if k + bk < kdim and col0 + bc + q < n else float32(0.0)


@cuda.jit
def vectorized_kernel(a, b, c):
    # double_buffered issues 16 scalar shared loads (LDS.32) per k step for 64 FMAs. Here each thread owns
    # two 4 x 4 sub-blocks per dimension (rows ty*4 + i and 64 + ty*4 + i, columns likewise), so its 8 A and
    # 8 B values per k step are 4 runs of 4 consecutive floats. With the tiles declared 16-byte aligned
    # (alignment=16), NVVM merges each run into one 128-bit load (ld.shared.v4.f32): 4 load instructions per
    # 64 FMAs. A warp's B loads cover 256 contiguous bytes (no conflict), its A loads 2 addresses (broadcast).
    a_tile = cuda.shared.array((2, V_BK, V_ROW), float32, alignment=16)
    b_tile = cuda.shared.array((2, V_BK, B2_BN), float32, alignment=16)
    acc = cuda.local.array((8, 8), float32)
    a_frag = cuda.local.array(8, float32)
    b_frag = cuda.local.array(8, float32)
    a_next = cuda.local.array(4, float32)
    b_next = cuda.local.array(4, float32)
    # Indices are built with & and >> from threadIdx (never negative): with % and // on signed ints NVVM keeps
    # Numba's negative-index wraparound in every address, which hides the 16-byte alignment from the
    # vectorizer (measured: 1 of 16 shared loads merged instead of 16).
    t = cuda.threadIdx.x
    tx, ty = t & 15, t >> 4
    ar, ak = t >> 1, (t & 1) * 4  # this thread's A element run: row ar, k offsets ak .. ak + 3
    bk, bc = t >> 5, (t & 31) * 4  # this thread's B run: k row bk, columns bc .. bc + 3
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(8):
        for j in range(8):
            acc[i, j] = 0.0
    _v_load(a, b, a_next, b_next, 0, row0, col0, ar, ak, bk, bc)
    for q in range(4):
        a_tile[0, ak + q, ar] = a_next[q]
        b_tile[0, bk, bc + q] = b_next[q]
    cuda.syncthreads()
    step = 0
    for k0 in range(0, kdim, V_BK):
        cur = step & 1
        k1 = k0 + V_BK
        if k1 < kdim:  # block-uniform: no divergence around the barrier
            _v_load(a, b, a_next, b_next, k1, row0, col0, ar, ak, bk, bc)
        for kk in range(V_BK):
            for i in range(4):
                a_frag[i] = a_tile[cur, kk, ty * 4 + i]
                a_frag[4 + i] = a_tile[cur, kk, 64 + ty * 4 + i]
                b_frag[i] = b_tile[cur, kk, tx * 4 + i]
                b_frag[4 + i] = b_tile[cur, kk, 64 + tx * 4 + i]
            for i in range(8):
                for j in range(8):
                    acc[i, j] += a_frag[i] * b_frag[j]
        if k1 < kdim:
            for q in range(4):
                a_tile[cur ^ 1, ak + q, ar] = a_next[q]
                b_tile[cur ^ 1, bk, bc + q] = b_next[q]
        cuda.syncthreads()
        step += 1
    for i in range(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        for j in range(8):
            col = col0 + (j // 4) * 64 + tx * 4 + j % 4
            if row < m and col < n:
                c[row, col] = acc[i, j]


@version("matmul", check, kernels=[vectorized_kernel])
def vectorized(a, b, c):
    """128-bit shared loads: 16-byte aligned tiles, 4 consecutive values per load (4 loads per 64 FMAs)."""
    m, n = c.shape
    return [Launch(vectorized_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]

