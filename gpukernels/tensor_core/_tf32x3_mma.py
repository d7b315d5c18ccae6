"""3xTF32 with ``mma.sync``: `tensor_core.tf32x3`'s kernel for GPUs without ``wgmma`` (before Hopper: an A100, say).

Step 11 (``k11_tf32x3``) explains the split, x = big + small, and why each k step's products are summed from zero
by the tensor core and added to the running sum by float32 adds. This kernel does the same with the warp-level
``mma.sync.m16n8k8`` on TF32, and splits the inputs itself as it reads its fragments:

128 x 128 block tiles of 8 warps (2 x 4, 64 x 32 each: 4 x 4 mma tiles of 16 x 8), 16-deep k tiles of float32 in two
shared buffers, the next tile's global loads in registers while the current one is multiplied (matmul's double
buffering: any alignment, so any M, N, K). A is stored row-major and B transposed (n-major), each row of 16 floats
swizzled as step 3's A tile is; ``ldmatrix`` on float32 rows hands each lane whole floats, and a non-transposed 8 x
4-float matrix is exactly the TF32 fragment (lane 4 g + t: row g, column t) -- of A, and of B stored transposed.
float16 inputs work too (they convert exactly: big is x, small is 0). On an H200 it ran 4096^3 in 6.4 ms, 0.43x
cuBLAS SGEMM: three mma.sync of TF32 per product are slower than the SIMT cores' FMAs; wgmma is what makes 3xTF32
fast (step 11).
"""

from __future__ import annotations

from numba import cuda, float32

from .._mma import ldmatrix_x4, mma_tf32, split_tf32
from ._common import store

BM, BN, BK = 128, 128, 16
WARPS_M, WARPS_N = 2, 4  # 8 warps, each a 64 x 32 tile of C
THREADS = 32 * WARPS_M * WARPS_N
WM, WN = BM // WARPS_M, BN // WARPS_N
MI, NJ = WM // 16, WN // 8  # 4 x 4 mma tiles of 16 x 8 per warp
A_TILE, B_TILE = BM * BK, BK * BN  # floats per buffer
A_RING, B_RING = 2 * A_TILE, 2 * B_TILE
A_LOADS, B_LOADS = A_TILE // THREADS, B_TILE // THREADS  # elements each thread loads per k tile (8 and 8)


@cuda.jit(device=True, forceinline=True)
def at(row, col):
    # element (row, col) of a tile stored with rows of BK = 16 floats (64 bytes, 4 chunks of 4 floats): chunk
    # col / 4 is stored at chunk (col / 4) ^ ((row / 2) % 4), so the 8 rows an ldmatrix phase reads fall in 8
    # different 16-byte slots of the 128-byte lines (step 3's A tile, in floats)
    return row * BK + ((((col >> 2) ^ (row >> 1)) & 3) << 2) + (col & 3)


@cuda.jit(device=True, forceinline=True)
def float_at(x, i, j):
    # x[i, j] as float32 (x: float32 or float16), 0 past the edge
    if i < x.shape[0] and j < x.shape[1]:
        return float32(x[i, j])
    return float32(0.0)


@cuda.jit(device=True, forceinline=True)
def load_tile(a, b, ra, rb, k0, row0, col0, tid):
    # global -> registers: A's tile row by row (16 consecutive k: 64 bytes), B's row by row (128 consecutive n)
    for q in range(A_LOADS):
        e = tid + q * THREADS
        ra[q] = float_at(a, row0 + (e >> 4), k0 + (e & 15))
    for q in range(B_LOADS):
        e = tid + q * THREADS
        rb[q] = float_at(b, k0 + (e >> 7), col0 + (e & 127))


@cuda.jit(device=True, forceinline=True)
def store_tile(sa, sb, ra, rb, buf, tid):
    # registers -> shared buffer `buf`: A as it is, B transposed (row n, column k) so that ldmatrix gives B fragments
    for q in range(A_LOADS):
        e = tid + q * THREADS
        sa[buf * A_TILE + at(e >> 4, e & 15)] = ra[q]
    for q in range(B_LOADS):
        e = tid + q * THREADS
        sb[buf * B_TILE + at(e & 127, e >> 7)] = rb[q]


@cuda.jit(device=True, forceinline=True)
def warp_product(sa, sb, buf, wr, wc, lane, acc):
    ab = cuda.local.array((MI, 4), float32)  # A fragments (a0..a3 per 16-row block), big and small parts
    asm = cuda.local.array((MI, 4), float32)
    bb = cuda.local.array((NJ, 2), float32)  # B fragments (b0, b1 per 8-column block)
    bs = cuda.local.array((NJ, 2), float32)
    j, r = lane >> 3, lane & 7  # lane 8 j + r: the address of row r of 8 x 4-float matrix j
    for kk in range(0, BK, 8):
        for i in range(MI):
            # matrices: rows +0/+8 (j & 1), k +0/+4 (j >> 1) of the 16 x 8 A block -> a0, a1, a2, a3
            x0, x1, x2, x3 = ldmatrix_x4(sa, buf * A_TILE + at(wr + 16 * i + r + 8 * (j & 1), kk + 4 * (j >> 1)))
            ab[i, 0], asm[i, 0] = split_tf32(x0)
            ab[i, 1], asm[i, 1] = split_tf32(x1)
            ab[i, 2], asm[i, 2] = split_tf32(x2)
            ab[i, 3], asm[i, 3] = split_tf32(x3)
        for p in range(NJ // 2):
            # matrices: k +0/+4 (j & 1) of columns +0, then +8 (j >> 1) of B^T -> (b0, b1) of two 8-column blocks
            y0, y1, y2, y3 = ldmatrix_x4(sb, buf * B_TILE + at(wc + 16 * p + r + 8 * (j >> 1), kk + 4 * (j & 1)))
            bb[2 * p, 0], bs[2 * p, 0] = split_tf32(y0)
            bb[2 * p, 1], bs[2 * p, 1] = split_tf32(y1)
            bb[2 * p + 1, 0], bs[2 * p + 1, 0] = split_tf32(y2)
            bb[2 * p + 1, 1], bs[2 * p + 1, 1] = split_tf32(y3)
        for i in range(MI):
            for jn in range(NJ):
                # this k step's three products, summed by the tensor core from zero (small ones first) ...
                zero = float32(0.0)
                d0, d1, d2, d3 = mma_tf32(asm[i, 0], asm[i, 1], asm[i, 2], asm[i, 3], bb[jn, 0], bb[jn, 1],
                                          zero, zero, zero, zero)  # a_small b_big
                d0, d1, d2, d3 = mma_tf32(ab[i, 0], ab[i, 1], ab[i, 2], ab[i, 3], bs[jn, 0], bs[jn, 1],
                                          d0, d1, d2, d3)  # + a_big b_small
                d0, d1, d2, d3 = mma_tf32(ab[i, 0], ab[i, 1], ab[i, 2], ab[i, 3], bb[jn, 0], bb[jn, 1],
                                          d0, d1, d2, d3)  # + a_big b_big
                # ... and added to the running sum by ordinary float32 adds, which round to nearest
                acc[i, jn, 0] += d0
                acc[i, jn, 1] += d1
                acc[i, jn, 2] += d2
                acc[i, jn, 3] += d3


@cuda.jit
def tf32x3_mma_kernel(a, b, c):
    sa = cuda.shared.array(A_RING, float32, alignment=16)
    sb = cuda.shared.array(B_RING, float32, alignment=16)
    acc = cuda.local.array((MI, NJ, 4), float32)
    ra = cuda.local.array(A_LOADS, float32)  # the next k tile, on its way from global memory
    rb = cuda.local.array(B_LOADS, float32)
    tid = cuda.threadIdx.x
    warp, lane = tid >> 5, tid & 31
    wr, wc = (warp // WARPS_N) * WM, (warp % WARPS_N) * WN
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    for i in range(MI):
        for jn in range(NJ):
            for q in range(4):
                acc[i, jn, q] = float32(0.0)
    kdim = a.shape[1]
    load_tile(a, b, ra, rb, 0, row0, col0, tid)
    store_tile(sa, sb, ra, rb, 0, tid)
    cuda.syncthreads()
    buf = 0
    for k0 in range(0, kdim, BK):
        more = k0 + BK < kdim
        if more:  # the loads of the next tile are in flight while this one is multiplied
            load_tile(a, b, ra, rb, k0 + BK, row0, col0, tid)
        warp_product(sa, sb, buf, wr, wc, lane, acc)
        if more:
            store_tile(sa, sb, ra, rb, buf ^ 1, tid)  # the other buffer: nobody reads it during this tile
        cuda.syncthreads()
        buf ^= 1
    g, t = lane >> 2, lane & 3
    for i in range(MI):
        for jn in range(NJ):
            row, col = row0 + wr + 16 * i + g, col0 + wc + 8 * jn + 2 * t
            store(c, row, col, acc[i, jn, 0])
            store(c, row, col + 1, acc[i, jn, 1])
            store(c, row + 8, col, acc[i, jn, 2])
            store(c, row + 8, col + 1, acc[i, jn, 3])


tf32x3_mma_kernel.tile = (BM, BN)
tf32x3_mma_kernel.threads = THREADS
