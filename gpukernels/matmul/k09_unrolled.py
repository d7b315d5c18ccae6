"""Step 9 of the matmul ladder, ``unrolled``.

The 8 steps of the k loop written out (Numba has no unroll pragma and the compilers leave a body this large
rolled): shared addresses become constant offsets, the loop counter goes.
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check
from .k05_regblock_2d import B2_BM, B2_BN, B2_THREADS
from .k08_vectorized import V_BK, V_ROW, _v_load

@cuda.jit(device=True, forceinline=True)
def _outer_product(a_tile, b_tile, cur, kk, ty4, tx4, acc, a_frag, b_frag):
    # One k step: 4 x ld.shared.v4 (8 values of A, 8 of B) and the 8 x 8 outer product, 64 FMAs.
    for i in range(4):
        a_frag[i] = a_tile[cur, kk, ty4 + i]
        a_frag[4 + i] = a_tile[cur, kk, 64 + ty4 + i]
        b_frag[i] = b_tile[cur, kk, tx4 + i]
        b_frag[4 + i] = b_tile[cur, kk, 64 + tx4 + i]
    for i in range(8):
        for j in range(8):
            acc[i, j] += a_frag[i] * b_frag[j]


@cuda.jit(launch_bounds=(B2_THREADS, 2))
def unrolled_kernel(a, b, c):
    # vectorized's `for kk in range(8)` stays a loop in the machine code (SASS): per k step the 64 FFMAs and
    # 4 LDS.128 come with ~30 instructions of loop counter and address arithmetic (kk * 132 * 4 ...), so only
    # ~54% of the instructions the SM issues are FMAs. Neither NVVM nor ptxas unrolls a body this large, and
    # Numba has no unroll pragma, so the 8 steps are written out: kk is a constant in each call, every
    # shared address becomes register + immediate offset, and the loop body is 512 FFMAs + 32 LDS.128 + the
    # tile loads (FFMA share of the loop ~68%, counted in the SASS). The unrolled code keeps more values live
    # (130 registers: one block per SM); launch_bounds(256, 2) asks ptxas for <= 128 so that two blocks still
    # fit, which it manages without spilling.
    a_tile = cuda.shared.array((2, V_BK, V_ROW), float32, alignment=16)
    b_tile = cuda.shared.array((2, V_BK, B2_BN), float32, alignment=16)
    acc = cuda.local.array((8, 8), float32)
    a_frag = cuda.local.array(8, float32)
    b_frag = cuda.local.array(8, float32)
    a_next = cuda.local.array(4, float32)
    b_next = cuda.local.array(4, float32)
    t = cuda.threadIdx.x
    tx4, ty4 = (t & 15) * 4, (t >> 4) * 4
    ar, ak = t >> 1, (t & 1) * 4
    bk, bc = t >> 5, (t & 31) * 4
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
        if k1 < kdim:
            _v_load(a, b, a_next, b_next, k1, row0, col0, ar, ak, bk, bc)
        _outer_product(a_tile, b_tile, cur, 0, ty4, tx4, acc, a_frag, b_frag)  # V_BK = 8 steps
        _outer_product(a_tile, b_tile, cur, 1, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 2, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 3, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 4, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 5, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 6, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 7, ty4, tx4, acc, a_frag, b_frag)
        if k1 < kdim:
            for q in range(4):
                a_tile[cur ^ 1, ak + q, ar] = a_next[q]
                b_tile[cur ^ 1, bk, bc + q] = b_next[q]
        cuda.syncthreads()
        step += 1
    for i in range(8):
        row = row0 + (i >> 2) * 64 + ty4 + (i & 3)
        for j in range(8):
            col = col0 + (j >> 2) * 64 + tx4 + (j & 3)
            if row < m and col < n:
                c[row, col] = acc[i, j]


@version("matmul", check, kernels=[unrolled_kernel])
def unrolled(a, b, c):
    """Unrolled k loop: the 8 steps of a tile are written out, so shared addresses are constant offsets."""
    m, n = c.shape
    return [Launch(unrolled_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]

