"""Step 5 of the CBR lesson, ``winograd``: Winograd's F(2 x 2, 3 x 3), a 3 x 3 convolution with 2.25 times fewer
multiplications, then F(4 x 4, 3 x 3) with 4 times fewer -- the batched regime's step (``optimized`` takes it for
3 x 3 layers of 64 channels or more).

Why: at batch 32, 256 channels, 14 x 14 images, cuDNN (0.172 ms on an H200) beats cuBLAS on the convolution's own
GEMM (0.198 ms), so it does fewer FLOPs than the GEMM has; the matmul lesson on that GEMM reaches only 0.69x cuDNN
(benchmarks/NOTES.md). Fewer FLOPs is the only way past that ceiling.

The idea, on one 4 x 4 patch d of one input channel and the 3 x 3 filter g of one (output, input) channel pair,
making a 2 x 2 tile of outputs:

    U = G g G^T   (4 x 4)       V = B^T d B   (4 x 4)       Y = A^T (sum over channels of U * V) A   (2 x 2)

with * elementwise. Direct: 2 x 2 outputs x 9 taps = 36 multiplications per channel; here 16. The elementwise product
summed over the channels is, for each of the 16 positions xi of the 4 x 4, a matrix product over the channels:

    M[xi] (K x P) = U[xi] (K x C) . V[xi] (C x P)      P = N x ceil(Ho / 2) x ceil(Wo / 2) tiles of output

so the convolution becomes four launches: the filters' transform (U), the input's (V), 16 products in one grid
(its z), and the output's transform with the bias and the ReLU (y). The transforms move bytes; the products are
a GEMM 2.25 times smaller than the implicit GEMM's.

The matrices (Lavin and Gray, 2015):

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

All three are exact in float32 (0, +-1, +-1/2), so the error is the products' rounding, a small factor above the
direct sum's. (For finite inputs: the transforms subtract, so an infinite input becomes inf - inf = NaN, spread over
the outputs of its tile, where the direct convolution gives inf.)

**F(4 x 4, 3 x 3)**: the same three steps on a 6 x 6 patch making a 4 x 4 tile of outputs, 36 products instead of 16
for four times the outputs -- 2.25 multiplications per output against F(2 x 2)'s 4 and the direct sum's 9, and
fewer bytes through the transforms (36 floats of V and M per 16 outputs, against 16 per 4). The price is accuracy:
the interpolation points 0, +-1, +-2 put 4, 5 and 8 in the matrices,

    B^T = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
           [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
    G   = [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6], [1/24, 1/12, 1/6], [1/24, -1/12, 1/6], [0, 0, 1]]
    A^T = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]

and the relative error grows from ~5e-7 to ~3e-6 (float32; the lesson's tolerance is 1e-5). ``output_tile`` takes
4 x 4 where it makes fewer multiplications for the image (not where a 4 x 4 tile would be mostly padding, an output
side of 1 or 2, nor where the two tie, 5 or 6 on both sides) and there are enough tiles (F4_MIN_TILES) for its
shorter products to show.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .._intrinsics import aligned16, store4
from .._launch import Launch, LaunchError, ceil_div, is_device_array, sm_count, version
from ._common import _check, _empty

THREADS = 256  # threads per block of the transforms
GK = 8  # input channels per k tile of the products (the kernel's shifts: t >> 3 and t & 7)
#: The products' block tile (output channels x output tiles), each thread 8 x 8 outputs: 64 x 128 (128 threads), or
#: 128 x 128 (256 threads) for K >= 128 where its grid still makes at least LARGE_TILE_WAVES blocks per SM. Measured
#: (H100, 2026-12-06, benchmarks/NOTES.md): 128 x 128 reads half the bytes per FMA and was the fastest tile with K of
#: 256 and 512 (16 x 256 x 14^2: 0.119 ms against 64 x 128's 0.126 and 64 x 64's 0.168; 128 x 128 x 28^2: 0.79 ms
#: against 0.82 and 1.30), even at 128 blocks for 132 SMs (16 x 512 x 7^2); with 32 blocks (1 x 128 x 28^2) it lost
#: 15% to 64 x 128's twice as many. 128 tiles per block beat 64 on every shape measured.
TILE_SMALL, TILE_LARGE = (64, 128), (128, 128)
LARGE_TILE_WAVES = 0.5
#: F(4 x 4, 3 x 3) needs at least this many output tiles (two columns of 128-wide product blocks): it divides the
#: tiles by 4, and where they are few its products' grid is as short as F(2 x 2)'s -- one round of blocks either way,
#: each as long -- so its fewer multiplications shorten nothing and its larger transforms cost more. Measured (H100,
#: 2026-12-06, benchmarks/NOTES.md), F(4x4) against F(2x2): 49 tiles of 4 x 4 (1 x 128 x 28^2) 0.041 against 0.034
#: ms; 64 (16 x 512 x 7^2) 0.205 against 0.148; 196 (1 x 64 x 56^2) 0.029 against 0.026; 256 (16 x 256 x 14^2) 0.107
#: against 0.117; 784 and more 25-30% faster (16 x 128 x 28^2, 128 x 128 x 28^2, 16-64 x 64 x 56^2).
F4_MIN_TILES = 256


@cuda.jit(device=True, forceinline=True)
def tile_origin(t, th, tw, m):
    # output tile t of P = N x th x tw, tiles of m x m outputs: its image and its first output row and column
    n, rest = t // (th * tw), t % (th * tw)
    return n, m * (rest // tw), m * (rest % tw)


@cuda.jit(device=True, forceinline=True)
def load_patch(x, d, c, t, th, tw, m, padding):
    # d = the (m + 2) x (m + 2) patch of channel c that output tile t of m x m reads: it starts at input row
    # m ti - padding, column m tj - padding; zeros outside the image (the padding)
    h, wd = x.shape[2], x.shape[3]
    n, r0, s0 = tile_origin(t, th, tw, m)
    r0, s0 = r0 - padding, s0 - padding
    for r in range(m + 2):
        for s in range(m + 2):
            rr, ss = r0 + r, s0 + s
            d[r, s] = x[n, c, rr, ss] if 0 <= rr < h and 0 <= ss < wd else float32(0.0)


@cuda.jit
def filter_transform_kernel(w, u):
    # w (K, C, 3, 3) -> u (16, K, C): U = G g G^T for each (k, c), one thread each
    k_, c_ = u.shape[1], u.shape[2]
    i = cuda.grid(1)
    if i >= k_ * c_:
        return
    k, c = i // c_, i % c_
    t = cuda.local.array((4, 3), float32)  # G g: rows of g combined
    for s in range(3):
        g0, g1, g2 = w[k, c, 0, s], w[k, c, 1, s], w[k, c, 2, s]
        t[0, s] = g0
        t[1, s] = float32(0.5) * (g0 + g1 + g2)
        t[2, s] = float32(0.5) * (g0 - g1 + g2)
        t[3, s] = g2
    for a in range(4):  # (G g) G^T: columns combined
        t0, t1, t2 = t[a, 0], t[a, 1], t[a, 2]
        u[4 * a, k, c] = t0
        u[4 * a + 1, k, c] = float32(0.5) * (t0 + t1 + t2)
        u[4 * a + 2, k, c] = float32(0.5) * (t0 - t1 + t2)
        u[4 * a + 3, k, c] = t2


@cuda.jit
def input_transform_kernel(x, v, padding, th, tw):
    # x (N, C, H, W) -> v (16, C, P): V = B^T d B for each (channel, output tile), one thread each; consecutive
    # threads take consecutive tiles, so the 16 stores are coalesced
    c_, p_ = x.shape[1], v.shape[2]
    i = cuda.grid(1)
    if i >= c_ * p_:
        return
    c, t = i // p_, i % p_
    d = cuda.local.array((4, 4), float32)
    load_patch(x, d, c, t, th, tw, 2, padding)
    e = cuda.local.array((4, 4), float32)  # B^T d: rows combined
    for s in range(4):
        e[0, s] = d[0, s] - d[2, s]
        e[1, s] = d[1, s] + d[2, s]
        e[2, s] = d[2, s] - d[1, s]
        e[3, s] = d[1, s] - d[3, s]
    for a in range(4):  # (B^T d) B: columns combined
        v[4 * a, c, t] = e[a, 0] - e[a, 2]
        v[4 * a + 1, c, t] = e[a, 1] + e[a, 2]
        v[4 * a + 2, c, t] = e[a, 2] - e[a, 1]
        v[4 * a + 3, c, t] = e[a, 1] - e[a, 3]


def _make_products(bm: int, bn: int):
    """The products kernel with BM x BN block tiles (64 or 128 each): (BM / 8) x (BN / 8) threads of 8 x 8
    outputs. 64 x 64 makes 4 times the blocks, for small products; 128 x 128 reads half the bytes per FMA from L2."""
    assert bm in (64, 128) and bn in (64, 128)
    tx_n, ty_n = bn // 8, bm // 8  # threads along the columns and along the rows of the block tile
    threads = tx_n * ty_n
    tx_bits, bn_bits = tx_n.bit_length() - 1, bn.bit_length() - 1
    a_row = bm + 4  # the shared A tile's row: padded by 4 floats (below)
    a_step, a_loads = threads // GK, bm * GK // threads  # A tile: a thread's rows, a_step apart
    b_step, b_loads = threads // bn, GK * bn // threads  # B tile: a thread's channels, b_step apart
    half_m, half_n = bm // 2, bn // 2

    @cuda.jit
    def products_kernel(u, v, m):
        # m[z] = u[z] @ v[z] for the 16 positions z = blockIdx.z: u (16, K, C), v (16, C, P), m (16, K, P). A block
        # tile of BM x BN, each thread 8 x 8 outputs: rows 4 ty .. 4 ty + 3 and BM/2 + 4 ty .. BM/2 + 4 ty + 3, the
        # columns likewise by tx, so that a thread's 8 values of a channel are two 16-byte shared loads and the 8
        # threads of a quarter warp read 128 contiguous bytes (no bank conflict; 8 x 8 consecutive columns would put
        # threads tx and tx + 4 on the same banks). GK channels per k tile, the next tile loaded into registers
        # while this one is multiplied.
        # A transposed (a_s[buf, kk, row]), rows padded by 4: a warp's stores of 4 rows x 8 channels land on 32 banks
        a_s = cuda.shared.array((2, GK, a_row), float32, alignment=16)
        b_s = cuda.shared.array((2, GK, bn), float32, alignment=16)
        acc = cuda.local.array((8, 8), float32)
        a_r = cuda.local.array(a_loads, float32)
        b_r = cuda.local.array(b_loads, float32)
        af = cuda.local.array(8, float32)
        bf = cuda.local.array(8, float32)
        z = cuda.blockIdx.z
        k_, c_, p_ = u.shape[1], u.shape[2], v.shape[2]
        row0, col0 = cuda.blockIdx.y * bm, cuda.blockIdx.x * bn
        # indices from threadIdx by & and >> (as matmul's kernels build them): with % and // on signed ints NVVM
        # keeps Numba's negative-index wraparound in the shared addresses
        t = cuda.threadIdx.x
        tx, ty = t & (tx_n - 1), (t >> tx_bits) & (ty_n - 1)
        for i in range(8):
            for j in range(8):
                acc[i, j] = float32(0.0)
        # loads: A tile (BM rows x GK channels): thread t, element e: row t // GK + a_step e, channel t % GK;
        #        B tile (GK channels x BN tiles): thread t, element e: channel t // BN + b_step e, column t % BN
        ar, ac = t >> 3, t & (GK - 1)
        bc, bt = t >> bn_bits, t & (bn - 1)
        tiles = (c_ + GK - 1) // GK
        for e in range(a_loads):
            row = row0 + ar + a_step * e
            a_r[e] = u[z, row, ac] if row < k_ and ac < c_ else float32(0.0)
        for e in range(b_loads):
            ch, col = bc + b_step * e, col0 + bt
            b_r[e] = v[z, ch, col] if ch < c_ and col < p_ else float32(0.0)
        for it in range(tiles):
            buf = it & 1
            for e in range(a_loads):
                a_s[buf, ac, ar + a_step * e] = a_r[e]
            for e in range(b_loads):
                b_s[buf, bc + b_step * e, bt] = b_r[e]
            cuda.syncthreads()  # the tile is in; (two buffers: the previous tile's readers are past the last barrier)
            if it + 1 < tiles:
                k0 = (it + 1) * GK
                for e in range(a_loads):
                    row, ch = row0 + ar + a_step * e, k0 + ac
                    a_r[e] = u[z, row, ch] if row < k_ and ch < c_ else float32(0.0)
                for e in range(b_loads):
                    ch, col = k0 + bc + b_step * e, col0 + bt
                    b_r[e] = v[z, ch, col] if ch < c_ and col < p_ else float32(0.0)
            for kk in range(GK):
                for i in range(8):
                    af[i] = a_s[buf, kk, 4 * ty + (i & 3) + half_m * (i >> 2)]
                    bf[i] = b_s[buf, kk, 4 * tx + (i & 3) + half_n * (i >> 2)]
                for i in range(8):
                    for j in range(8):
                        acc[i, j] += af[i] * bf[j]
        for i in range(8):
            row = row0 + 4 * ty + (i & 3) + half_m * (i >> 2)
            if row < k_:
                for j in range(8):
                    col = col0 + 4 * tx + (j & 3) + half_n * (j >> 2)
                    if col < p_:
                        m[z, row, col] = acc[i, j]

    products_kernel.tile = (bm, bn)
    products_kernel.threads = threads
    return products_kernel


products_kernel = _make_products(*TILE_SMALL)  # 64 x 128 tiles, 128 threads
products_kernel_large = _make_products(*TILE_LARGE)  # 128 x 128 tiles, 256 threads
_PRODUCTS = {TILE_SMALL: products_kernel, TILE_LARGE: products_kernel_large}


def products_kernel_for(tile: tuple[int, int]):
    """The products kernel with this (BM, BN) block tile, each 64 or 128 (the two above, or another, built once)."""
    if tile not in _PRODUCTS:
        _PRODUCTS[tile] = _make_products(*tile)
    return _PRODUCTS[tile]


def products_tile(k: int, p: int, sms: int | None = None, positions: int = 16) -> tuple[int, int]:
    """The products' block tile for K output channels and P output tiles: TILE_LARGE (128 x 128) where K >= 128 and
    its positions x ceil(K / 128) x ceil(P / 128) blocks (16 positions for F(2 x 2), 36 for F(4 x 4)) number at least
    LARGE_TILE_WAVES per SM, else TILE_SMALL."""
    sms = sms or sm_count()
    large = positions * ceil_div(k, TILE_LARGE[0]) * ceil_div(p, TILE_LARGE[1])
    return TILE_LARGE if k >= TILE_LARGE[0] and large >= LARGE_TILE_WAVES * sms else TILE_SMALL


@cuda.jit
def output_transform_kernel(m, b, y, th, tw):
    # m (16, K, P) -> y (N, K, Ho, Wo): Y = A^T M A, plus the bias, then the ReLU, for each (channel, tile); the
    # tile's outputs past Ho or Wo (odd sizes) are not stored
    n_, k_, ho, wo = y.shape
    p_ = m.shape[2]
    i = cuda.grid(1)
    if i >= k_ * p_:
        return
    k, t = i // p_, i % p_
    n, r0, s0 = tile_origin(t, th, tw, 2)
    e = cuda.local.array((2, 4), float32)  # A^T M: rows combined
    for s in range(4):
        m0, m1, m2, m3 = m[s, k, t], m[4 + s, k, t], m[8 + s, k, t], m[12 + s, k, t]
        e[0, s] = m0 + m1 + m2
        e[1, s] = m1 - m2 - m3
    bias = b[k]
    for r in range(2):
        if r0 + r < ho:
            y0 = bias + e[r, 0] + e[r, 1] + e[r, 2]
            y[n, k, r0 + r, s0] = max(y0, float32(0.0))
            if s0 + 1 < wo:
                y1 = bias + e[r, 1] - e[r, 2] - e[r, 3]
                y[n, k, r0 + r, s0 + 1] = max(y1, float32(0.0))


# F(4 x 4, 3 x 3): the same three transforms on 6 x 6 patches, each one-dimensional step a device function applied to
# the columns, then to the rows.


@cuda.jit(device=True, forceinline=True)
def g6(g0, g1, g2):
    # G g for one column of a 3 x 3 filter (6 values)
    q, r = float32(1 / 6) * (g0 + g2), float32(1 / 24) * g0 + float32(1 / 6) * g2
    return (float32(0.25) * g0, float32(-1 / 6) * g1 - q, float32(1 / 6) * g1 - q,
            r + float32(1 / 12) * g1, r - float32(1 / 12) * g1, g2)


@cuda.jit(device=True, forceinline=True)
def bt6(d0, d1, d2, d3, d4, d5):
    # B^T d for one column of a 6 x 6 patch
    return (float32(4.0) * d0 - float32(5.0) * d2 + d4,
            d3 + d4 - float32(4.0) * (d1 + d2),
            d4 - d3 + float32(4.0) * (d1 - d2),
            d4 - d2 + float32(2.0) * (d3 - d1),
            d4 - d2 + float32(2.0) * (d1 - d3),
            float32(4.0) * d1 - float32(5.0) * d3 + d5)


@cuda.jit(device=True, forceinline=True)
def at6(m0, m1, m2, m3, m4, m5):
    # A^T m for one column of the 6 x 6 products (4 values)
    p, q, s, d = m1 + m2, m1 - m2, m3 + m4, m3 - m4
    return m0 + p + s, q + float32(2.0) * d, p + float32(4.0) * s, q + float32(8.0) * d + m5


@cuda.jit
def filter_transform_4x4_kernel(w, u):
    # w (K, C, 3, 3) -> u (36, K, C): U = G g G^T for each (k, c), one thread each
    k_, c_ = u.shape[1], u.shape[2]
    i = cuda.grid(1)
    if i >= k_ * c_:
        return
    k, c = i // c_, i % c_
    t = cuda.local.array((6, 3), float32)  # G g
    for s in range(3):
        t[0, s], t[1, s], t[2, s], t[3, s], t[4, s], t[5, s] = g6(w[k, c, 0, s], w[k, c, 1, s], w[k, c, 2, s])
    for a in range(6):  # (G g) G^T
        r0, r1, r2, r3, r4, r5 = g6(t[a, 0], t[a, 1], t[a, 2])
        u[6 * a, k, c], u[6 * a + 1, k, c], u[6 * a + 2, k, c] = r0, r1, r2
        u[6 * a + 3, k, c], u[6 * a + 4, k, c], u[6 * a + 5, k, c] = r3, r4, r5


@cuda.jit
def input_transform_4x4_kernel(x, v, padding, th, tw):
    # x (N, C, H, W) -> v (36, C, P): V = B^T d B for each (channel, output tile of 4 x 4), one thread each
    c_, p_ = x.shape[1], v.shape[2]
    i = cuda.grid(1)
    if i >= c_ * p_:
        return
    c, t = i // p_, i % p_
    d = cuda.local.array((6, 6), float32)
    load_patch(x, d, c, t, th, tw, 4, padding)
    for s in range(6):  # B^T d, in place
        d[0, s], d[1, s], d[2, s], d[3, s], d[4, s], d[5, s] = bt6(d[0, s], d[1, s], d[2, s], d[3, s], d[4, s],
                                                                   d[5, s])
    for a in range(6):  # (B^T d) B
        e0, e1, e2, e3, e4, e5 = bt6(d[a, 0], d[a, 1], d[a, 2], d[a, 3], d[a, 4], d[a, 5])
        v[6 * a, c, t], v[6 * a + 1, c, t], v[6 * a + 2, c, t] = e0, e1, e2
        v[6 * a + 3, c, t], v[6 * a + 4, c, t], v[6 * a + 5, c, t] = e3, e4, e5


@cuda.jit(device=True, forceinline=True)
def left_at(m, k, t, e):
    # e (4, 6) = A^T M for channel k's tile t: the first half of the output transform, which both of its kernels share
    for s in range(6):
        e[0, s], e[1, s], e[2, s], e[3, s] = at6(m[s, k, t], m[6 + s, k, t], m[12 + s, k, t], m[18 + s, k, t],
                                                 m[24 + s, k, t], m[30 + s, k, t])


@cuda.jit
def output_transform_4x4_kernel(m, b, y, th, tw):
    # m (36, K, P) -> y (N, K, Ho, Wo): Y = A^T M A, plus the bias, then the ReLU, for each (channel, tile of 4 x 4);
    # the tile's outputs past Ho or Wo are not stored
    n_, k_, ho, wo = y.shape
    p_ = m.shape[2]
    i = cuda.grid(1)
    if i >= k_ * p_:
        return
    k, t = i // p_, i % p_
    n, r0, s0 = tile_origin(t, th, tw, 4)
    e = cuda.local.array((4, 6), float32)
    left_at(m, k, t, e)
    bias = b[k]
    for r in range(4):
        if r0 + r < ho:
            out = at6(e[r, 0], e[r, 1], e[r, 2], e[r, 3], e[r, 4], e[r, 5])  # (A^T M) A: one row of outputs
            for q in range(4):
                if s0 + q < wo:
                    y[n, k, r0 + r, s0 + q] = max(bias + out[q], float32(0.0))


@cuda.jit
def output_transform_4x4_rows_kernel(m, b, y, th, tw, ho):
    # the same, with y as rows (N K Ho, Wo), Wo a multiple of 4 and every row 16-byte aligned: a row of the tile's 4
    # outputs is one 16-byte store. Neighbouring threads hold neighbouring tiles of a row, so a warp's 32 stores are
    # 512 contiguous bytes -- where four 4-byte stores, 16 bytes apart between threads, fill a quarter of each
    # 32-byte sector they touch, and the store unit, not DRAM, limits the transform (Nsight Compute: 73% against 42%)
    k_, p_ = b.shape[0], m.shape[2]
    i = cuda.grid(1)
    if i >= k_ * p_:
        return
    k, t = i // p_, i % p_
    n, r0, s0 = tile_origin(t, th, tw, 4)
    e = cuda.local.array((4, 6), float32)
    left_at(m, k, t, e)
    bias, zero = b[k], float32(0.0)
    row = (n * k_ + k) * ho + r0
    for r in range(4):
        if r0 + r < ho:
            o0, o1, o2, o3 = at6(e[r, 0], e[r, 1], e[r, 2], e[r, 3], e[r, 4], e[r, 5])
            store4(y, row + r, s0, max(bias + o0, zero), max(bias + o1, zero), max(bias + o2, zero),
                   max(bias + o3, zero))


def _as_rows(y):
    """y (N, K, Ho, Wo) as its rows (N K Ho, Wo) -- the same memory -- when the 4 x 4 tiles' rows can be 16-byte
    stores (C-contiguous, Wo a multiple of 4, 16-byte aligned), else None."""
    contiguous = y.is_c_contiguous() if hasattr(y, "is_c_contiguous") else y.flags.c_contiguous
    if not contiguous or y.shape[3] % 4:
        return None
    rows = y.reshape(y.shape[0] * y.shape[1] * y.shape[2], y.shape[3])
    return rows if aligned16(rows) else None


KERNELS = [filter_transform_kernel, input_transform_kernel, products_kernel, products_kernel_large,
           output_transform_kernel, filter_transform_4x4_kernel, input_transform_4x4_kernel,
           output_transform_4x4_kernel, output_transform_4x4_rows_kernel]
#: The transforms of F(m x m, 3 x 3), by m: (filter, input, output) kernels.
TRANSFORMS = {2: (filter_transform_kernel, input_transform_kernel, output_transform_kernel),
              4: (filter_transform_4x4_kernel, input_transform_4x4_kernel, output_transform_4x4_kernel)}


def output_tile(n: int, ho: int, wo: int) -> int:
    """F(m x m, 3 x 3)'s m for N images of Ho x Wo outputs: 4 where its 36 products per 4 x 4 tile make fewer
    multiplications than 16 per 2 x 2 tile and there are at least F4_MIN_TILES of its tiles (two columns of the
    products' 128-wide blocks); else 2 (exact matrices, a few times less rounding error)."""
    fewer = 36 * ceil_div(ho, 4) * ceil_div(wo, 4) < 16 * ceil_div(ho, 2) * ceil_div(wo, 2)
    return 4 if fewer and n * ceil_div(ho, 4) * ceil_div(wo, 4) >= F4_MIN_TILES else 2


def tiles(ho: int, wo: int, m: int = 2) -> tuple[int, int]:
    """Output tiles of m x m along each side (the last one partly outside where m does not divide Ho or Wo)."""
    return ceil_div(ho, m), ceil_div(wo, m)


def winograd_plan(n: int, ho: int, wo: int, k: int, sms: int | None = None, m: int | None = None):
    """(m, P, tile) for N images of Ho x Wo outputs and K output channels: the output tile (``output_tile``'s unless
    given), the P output tiles of m x m, and the products' block tile for their (m + 2)^2 positions
    (``products_tile``)."""
    m = m or output_tile(n, ho, wo)
    p = n * ceil_div(ho, m) * ceil_div(wo, m)
    return m, p, products_tile(k, p, sms, (m + 2) ** 2)


def winograd_launches(x, w, b, y, padding: int = 1, tile: tuple[int, int] | None = None,
                      m: int | None = None) -> list[Launch]:
    """The four launches of F(m x m, 3 x 3) for a 3 x 3 filter, stride 1 (the lesson's convolution), and the
    transformed arrays they pass along, with a = m + 2: U (a^2 K C floats), V (a^2 C P) and M (a^2 K P), on the device
    when y is. ``m``: 2 or 4, by default ``output_tile``'s choice; ``tile``: the products' (BM, BN) block tile, by
    default ``products_tile``'s. F(4 x 4)'s output transform stores each row of a tile's outputs as one 16-byte
    store where y's rows allow it (C-contiguous, Wo a multiple of 4: `_as_rows`)."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    if (r, s) != (3, 3):
        raise LaunchError(f"Winograd F(m x m, 3 x 3) needs a 3 x 3 filter (R, S) = (3, 3); got ({r}, {s})")
    _, _, ho, wo = y.shape
    if m is not None and m not in TRANSFORMS:
        raise LaunchError(f"Winograd's output tile m must be one of {sorted(TRANSFORMS)}; got {m!r}")
    m, p, planned = winograd_plan(n, ho, wo, k, m=m)
    th, tw, a2 = *tiles(ho, wo, m), (m + 2) ** 2
    tile = tile or planned
    prod = products_kernel_for(tile)
    filt, inp, outp = TRANSFORMS[m]
    alloc = cuda.device_array if is_device_array(y) else np.empty
    u, v, mm = alloc((a2, k, c), np.float32), alloc((a2, c, p), np.float32), alloc((a2, k, p), np.float32)
    rows = _as_rows(y) if m == 4 else None
    out = (Launch(output_transform_4x4_rows_kernel, (ceil_div(k * p, THREADS),), (THREADS,), (mm, b, rows, th, tw, ho))
           if rows is not None else Launch(outp, (ceil_div(k * p, THREADS),), (THREADS,), (mm, b, y, th, tw)))
    return [
        Launch(filt, (ceil_div(k * c, THREADS),), (THREADS,), (w, u)),
        Launch(inp, (ceil_div(c * p, THREADS),), (THREADS,), (x, v, padding, th, tw)),
        Launch(prod, (ceil_div(p, tile[1]), ceil_div(k, tile[0]), a2), (prod.threads,), (u, v, mm)),
        out,
    ]


def flops_done(shape, padding: int = 1, m: int | None = None) -> int:
    """The multiply-adds the products do, as FLOPs (2 per multiply-add): (m + 2)^2 positions x K x C x P, with m
    ``output_tile``'s by default; the direct convolution's count over this is the saving (2.25 for m = 2 and 4 for
    m = 4, where m divides Ho and Wo)."""
    n, c, h, wd, k, r, s = shape
    ho, wo = h + 2 * padding - r + 1, wd + 2 * padding - s + 1
    m = m or output_tile(n, ho, wo)
    th, tw = tiles(ho, wo, m)
    return 2 * (m + 2) ** 2 * k * c * n * th * tw


def _check_3x3(x, w, b, padding=1):
    """The lesson's argument check, and a 3 x 3 filter: the transforms' matrices are F(m x m, 3 x 3)'s."""
    checked = _check(x, w, b, padding)
    r, s = checked[0][1].shape[2:]
    if (r, s) != (3, 3):
        raise LaunchError(f"winograd: w must be (K, C, 3, 3) -- F(m x m, 3 x 3) takes 3 x 3 filters only; got "
                          f"(R, S) = ({r}, {s}) (the other steps take any filter)")
    return checked


@version("cbr", _check_3x3, KERNELS, empty=_empty)
def winograd(x, w, b, y, padding=1):
    """Winograd's F(4 x 4, 3 x 3) (F(2 x 2, 3 x 3) on few or small images), 3 x 3 filters only: the filters' and the
    input's 6 x 6 transforms, 36 matrix products over the channels (one per position of the 6 x 6), the output's
    transform with the bias and the ReLU."""
    return winograd_launches(x, w, b, y, padding)
