"""Step 5 of the CBR lesson, ``winograd``: Winograd's F(2 x 2, 3 x 3), a 3 x 3 convolution with 2.25 times fewer
multiplications -- the batched regime's step (``optimized`` takes it for deep channels on small images).

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
direct sum's.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .._launch import Launch, LaunchError, ceil_div, is_device_array, version
from ._common import _check, _empty

THREADS = 256  # threads per block of the transforms
GM = GN = 64  # the products' block tile: 64 output channels x 64 output tiles
GK = 8  # input channels per k tile
GT = 8  # threads along each side of the block tile: 8 x 8 threads of 8 x 8 outputs
A_ROW = GM + 4  # the shared A tile's row: padded by 4 floats (see products_kernel)
assert GT == GK == 8 and GM == GN == 8 * GT  # the kernel's shifts (>> 3) and its 8 x 8 outputs per thread


@cuda.jit(device=True, forceinline=True)
def tile_origin(t, th, tw):
    # output tile t of P = N x th x tw: its image and its first output row and column
    n, rest = t // (th * tw), t % (th * tw)
    return n, 2 * (rest // tw), 2 * (rest % tw)


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
    # threads take consecutive tiles, so the 16 stores are coalesced. The patch of tile (ti, tj) starts at input
    # row 2 ti - padding, column 2 tj - padding; zeros outside the image.
    n_, c_, h, wd = x.shape
    p_ = v.shape[2]
    i = cuda.grid(1)
    if i >= c_ * p_:
        return
    c, t = i // p_, i % p_
    n, r0, s0 = tile_origin(t, th, tw)
    r0, s0 = r0 - padding, s0 - padding
    d = cuda.local.array((4, 4), float32)
    for r in range(4):
        for s in range(4):
            rr, ss = r0 + r, s0 + s
            d[r, s] = x[n, c, rr, ss] if 0 <= rr < h and 0 <= ss < wd else float32(0.0)
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


@cuda.jit
def products_kernel(u, v, m):
    # m[z] = u[z] @ v[z] for the 16 positions z = blockIdx.z: u (16, K, C), v (16, C, P), m (16, K, P). A block
    # tile of GM x GN, 64 threads of 8 x 8 outputs each: rows 4 ty .. 4 ty + 3 and 32 + 4 ty .. 32 + 4 ty + 3, the
    # columns likewise by tx, so that a thread's 8 values of a channel are two 16-byte shared loads and the 8
    # threads of a quarter warp read 128 contiguous bytes (no bank conflict; 8 x 8 consecutive columns would put
    # threads tx and tx + 4 on the same banks). GK channels per k tile, the next tile loaded into registers while
    # this one is multiplied.
    # A transposed (a_s[buf, kk, row]), rows padded by 4: a warp's stores of 4 rows x 8 channels land on 32 banks
    a_s = cuda.shared.array((2, GK, A_ROW), float32, alignment=16)
    b_s = cuda.shared.array((2, GK, GN), float32, alignment=16)
    acc = cuda.local.array((8, 8), float32)
    a_r = cuda.local.array(8, float32)
    b_r = cuda.local.array(8, float32)
    af = cuda.local.array(8, float32)
    bf = cuda.local.array(8, float32)
    z = cuda.blockIdx.z
    k_, c_, p_ = u.shape[1], u.shape[2], v.shape[2]
    row0, col0 = cuda.blockIdx.y * GM, cuda.blockIdx.x * GN
    # indices from threadIdx by & and >> (as matmul's kernels build them): with % and // on signed ints NVVM keeps
    # Numba's negative-index wraparound in the shared addresses
    t = cuda.threadIdx.x
    tx, ty = t & (GT - 1), (t >> 3) & (GT - 1)
    for i in range(8):
        for j in range(8):
            acc[i, j] = float32(0.0)
    # loads: A tile (GM rows x GK channels): thread t, element e: row t // GK + 8 e, channel t % GK;
    #        B tile (GK channels x GN tiles): thread t, element e: channel e, column t
    ar, ac = (t >> 3) & 7, t & (GK - 1)
    tiles = (c_ + GK - 1) // GK
    for e in range(8):
        row, ch = row0 + ar + 8 * e, ac
        a_r[e] = u[z, row, ch] if row < k_ and ch < c_ else float32(0.0)
        col = col0 + t
        b_r[e] = v[z, e, col] if e < c_ and col < p_ else float32(0.0)
    for it in range(tiles):
        buf = it & 1
        for e in range(8):
            a_s[buf, ac, ar + 8 * e] = a_r[e]
            b_s[buf, e, t] = b_r[e]
        cuda.syncthreads()  # the tile is in; (two buffers: the previous tile's readers are past the last barrier)
        if it + 1 < tiles:
            k0 = (it + 1) * GK
            for e in range(8):
                row, ch = row0 + ar + 8 * e, k0 + ac
                a_r[e] = u[z, row, ch] if row < k_ and ch < c_ else float32(0.0)
                col, ch = col0 + t, k0 + e
                b_r[e] = v[z, ch, col] if ch < c_ and col < p_ else float32(0.0)
        for kk in range(GK):
            for i in range(8):
                af[i] = a_s[buf, kk, 4 * ty + (i & 3) + 32 * (i >> 2)]
                bf[i] = b_s[buf, kk, 4 * tx + (i & 3) + 32 * (i >> 2)]
            for i in range(8):
                for j in range(8):
                    acc[i, j] += af[i] * bf[j]
    for i in range(8):
        row = row0 + 4 * ty + (i & 3) + 32 * (i >> 2)
        if row < k_:
            for j in range(8):
                col = col0 + 4 * tx + (j & 3) + 32 * (j >> 2)
                if col < p_:
                    m[z, row, col] = acc[i, j]


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
    n, r0, s0 = tile_origin(t, th, tw)
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


KERNELS = [filter_transform_kernel, input_transform_kernel, products_kernel, output_transform_kernel]


def tiles(ho: int, wo: int) -> tuple[int, int]:
    """Output tiles of 2 x 2 along each side (the last one partly outside where Ho or Wo is odd)."""
    return ceil_div(ho, 2), ceil_div(wo, 2)


def winograd_launches(x, w, b, y, padding: int = 1) -> list[Launch]:
    """The four launches of F(2 x 2, 3 x 3) for a 3 x 3 filter, stride 1 (the lesson's convolution), and the
    transformed arrays they pass along: U (16 K C floats), V (16 C P) and M (16 K P), on the device when y is."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    if (r, s) != (3, 3):
        raise LaunchError(f"Winograd F(2x2, 3x3) needs a 3 x 3 filter (R, S) = (3, 3); got ({r}, {s})")
    _, _, ho, wo = y.shape
    th, tw = tiles(ho, wo)
    p = n * th * tw
    alloc = cuda.device_array if is_device_array(y) else np.empty
    u, v, m = alloc((16, k, c), np.float32), alloc((16, c, p), np.float32), alloc((16, k, p), np.float32)
    return [
        Launch(filter_transform_kernel, (ceil_div(k * c, THREADS),), (THREADS,), (w, u)),
        Launch(input_transform_kernel, (ceil_div(c * p, THREADS),), (THREADS,), (x, v, padding, th, tw)),
        Launch(products_kernel, (ceil_div(p, GN), ceil_div(k, GM), 16), (GT * GT,), (u, v, m)),
        Launch(output_transform_kernel, (ceil_div(k * p, THREADS),), (THREADS,), (m, b, y, th, tw)),
    ]


def flops_done(shape, padding: int = 1) -> int:
    """The multiply-adds the products do, as FLOPs (2 per multiply-add): 16 positions x K x C x P; the direct
    convolution's count over this is the saving (2.25 where Ho and Wo are even)."""
    n, c, h, wd, k, r, s = shape
    th, tw = tiles(h + 2 * padding - r + 1, wd + 2 * padding - s + 1)
    return 2 * 16 * k * c * n * th * tw


def _check_3x3(x, w, b, padding=1):
    """The lesson's argument check, and a 3 x 3 filter: the transforms' matrices are F(2 x 2, 3 x 3)'s."""
    checked = _check(x, w, b, padding)
    r, s = checked[0][1].shape[2:]
    if (r, s) != (3, 3):
        raise LaunchError(f"winograd: w must be (K, C, 3, 3) -- F(2x2, 3x3) takes 3 x 3 filters only; got (R, S) = "
                          f"({r}, {s}) (the other steps take any filter)")
    return checked


@version("cbr", _check_3x3, KERNELS, empty=_empty)
def winograd(x, w, b, y, padding=1):
    """Winograd's F(2 x 2, 3 x 3), 3 x 3 filters only: the filters' and the input's 4 x 4 transforms, 16 matrix
    products over the channels (one per position of the 4 x 4), the output's transform with the bias and the ReLU."""
    return winograd_launches(x, w, b, y, padding)
