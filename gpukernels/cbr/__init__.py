"""Lesson 3 -- fused convolution + bias + ReLU ("CBR"), the building block of every CNN.

    x: (N, C, H, W)   w: (K, C, R, S)   b: (K,)   stride 1, zero padding p
    y: (N, K, Ho, Wo) with Ho = H + 2p - R + 1, Wo = W + 2p - S + 1
    y[n, k, i, j] = relu(b[k] + sum_{c, r, s} x[n, c, i + r - p, j + s - p] * w[k, c, r, s])

What you will learn
-------------------
1. ``naive``         the unfused baseline a framework runs without fusion: three kernels, each one full pass
                     through global memory. (a) convolution, one thread per output, every input read straight
                     from global memory (C*R*S loads of x and of w per output); (b) bias add: read y, read b,
                     write y; (c) ReLU: read y, write y. Passes (b) and (c) alone move 16 bytes per output element
                     that a fused kernel never moves: 2 extra reads + 2 extra writes of y (plus one load of b each).
2. ``fused_direct``  one fused kernel. A block computes a TH x TW = 16 x 64 tile of output pixels for KB = 16
                     output channels. For each chunk of CB input channels it stages the input tile *with its
                     halo* (CB x (TH + R - 1) x (TW + S - 1) values) and the chunk's weights (KB x CB x R x S) in
                     shared memory; each staged input value is then reused up to R*S*KB times. Each thread owns
                     PX = 4 pixels x KB channels in registers, so every weight read from shared memory feeds 4 FMAs
                     and every input value 16. Bias and ReLU are applied in registers before the single store of
                     y. Global traffic drops from 29 GB to 184 MB (N32 C64 56x56 K64), but the inner loop does 64
                     FMAs per 20 scalar shared loads: on the H200 it runs at 0.77 ms, cuDNN at 0.27.
3. ``implicit_gemm`` an implicit GEMM: the convolution *is* a matrix product, y^T[k, p] = sum_q W[k, q] X[q, p]
                     over output pixels p = (n, i, j) and filter taps q = (c, r, s), with W = w.reshape(K, Q)
                     and X[q, p] = x[n, c, i + r - p, j + s - p]. So it runs matmul's fastest kernel (64 x 256
                     output tile per block, 8 x 8 outputs per thread, 16-byte shared loads: 64 FMAs per 4 loads,
                     register-prefetched double buffers, one barrier per k tile), except that the B tile is
                     *gathered* from x on the fly (no im2col buffer) and the epilogue adds the bias, applies the
                     ReLU and stores y once. A k tile is a whole number of filter taps (3x3: one channel, BK = 9),
                     so each gathered element costs one add and one predicated load. It reads *more* from global
                     memory than fused_direct (x once per tap instead of once per halo tile: 370 MB at N32 C64
                     56x56 K64, nearly all of it L1/L2 hits), and is built to win on what bounds this shape:
                     FMAs per shared-memory load, 16 instead of 3 (benchmarks/cbr_variants.py measures it).
4. ``split_c``       slices of the input channels over the grid's z. At batch 1 a deep layer is a short, deep GEMM
                     ((1, 512, 7x7, 512): 49 pixels x 512 channels x 4608 taps -- 8 tiles for 132 SMs); S slices
                     make S times the blocks. y starts at the bias, the slices add into it with atomics, and a
                     last pass applies the ReLU: two small passes given back for a full GPU (matmul's split-K).
5. ``winograd``      fewer multiplications instead of a faster GEMM, for 3 x 3 filters: Winograd's F(2x2, 3x3)
                     turns each 4 x 4 input patch (d) and each filter (g) into 4 x 4 transforms, V = B^T d B and
                     U = G g G^T, whose elementwise product summed over the channels gives a 2 x 2 output tile
                     after one more transform, Y = A^T M A. Per channel, a 2 x 2 tile costs 16 multiplications
                     instead of 2 x 2 x 9 = 36: 2.25 times fewer. Summed over the channels, each of the 16
                     positions of the 4 x 4 is a matrix product (K x C) . (C x P) over the P output tiles. Four
                     launches: the two transforms, the 16 products in one grid, the output's transform with the
                     bias and the ReLU. It pays in bytes (V and M, 16 floats per tile and channel, written and read
                     once more) for the FLOPs it saves, which wins where the channels are deep. F(4x4, 3x3), the
                     same on 6 x 6 patches and 4 x 4 output tiles, makes 36 products for 16 outputs: 4 times fewer
                     multiplications than the direct sum and 2.25 floats of V and M per output instead of 4, for
                     a few times F(2x2)'s rounding error; the step takes it wherever its tiles are many.
6. ``optimized``     the dispatcher: ``optimized.choose(N, C, H, W, K)`` picks Winograd for 3 x 3 filters on 64
                     channels or more (and at least 128 output tiles of 2 x 2), otherwise the implicit GEMM's
                     pixels per block (256 or 128) and the number of slices -- the fewest that fill the SMs once --
                     and says why.

Regimes: a convolution is a GEMM of P = N*Ho*Wo pixels by K channels by Q = C*R*S taps. Large batches (P in the
tens of thousands) fill the GPU with 64 x 256 tiles and are bound by arithmetic; batch 1 and the deep, small
images of late layers give a handful of tiles (P*K / 16384 blocks) however fast each is, and only slicing Q fills
the SMs; few channels (C = 3) make Q tiny and y's store the cost.

Global traffic, counted in elements (what ``gpukernels trace cbr`` measures; ``global_loads`` computes it):
  naive:         conv loads x and w once per in-bounds tap of every output (up to N*K*Ho*Wo*C*R*S each:
                 padding taps are skipped), stores y once; bias pass loads y and b and stores y; ReLU loads and
                 stores y.
  fused_direct:  each block loads its CB-chunks of input tile + halo (in-bounds elements only) and of weights,
                 loads one bias per output, and stores its outputs once.
  implicit_gemm: x once per in-bounds tap of every pixel per block of 64 output channels; all of W once per
                 block of 256 pixels; each thread the bias of its 8 channels; y stored once.
  winograd:      x once per in-bounds element of each 2 x 2 tile's 4 x 4 patch per channel (the patches overlap
                 by 2: about 4x); w once; U, V, M stored once; U read once per block of 64 tiles, V once per block
                 of 64 output channels, M once; one bias per (channel, tile); y stored once.

Count the work first: 2*N*K*C*R*S*Ho*Wo FLOPs. For N32 C64 56x56 K64 3x3 that is 7.4 GFLOP over at least
4*(N*C*H*W + K*C*R*S + N*K*Ho*Wo) = 51 MB: ~145 FLOP/byte, arithmetic-bound on an H200.
"""

from __future__ import annotations

import numpy as np

from .._launch import ceil_div
from ._common import _check, _empty, out_shape  # noqa: F401

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------




def _conv_bias(x, w, b, padding: int) -> np.ndarray:
    """conv2d(x, w, padding) + b, accumulated in float64, before the ReLU."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    _, _, ho, wo = out_shape(x.shape, w.shape, padding)
    xp = np.zeros((n, c, h + 2 * padding, wd + 2 * padding))
    xp[:, :, padding:padding + h, padding:padding + wd] = x
    y = np.zeros((n, k, ho, wo))
    for rr in range(r):  # one (C x K) matrix product per filter tap
        for ss in range(s):
            patch = xp[:, :, rr:rr + ho, ss:ss + wo]  # (N, C, Ho, Wo)
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, rr, ss])
    return y + np.asarray(b, np.float64)[None, :, None, None]


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, padding: int = 1) -> np.ndarray:
    """relu(conv2d(x, w, padding) + b) accumulated in float64, returned as float32."""
    return np.maximum(_conv_bias(x, w, b, padding), 0.0).astype(np.float32)


def error_scale(x: np.ndarray, w: np.ndarray, b: np.ndarray, padding: int = 1) -> np.ndarray:
    """The magnitude each output's float32 rounding error is proportional to: conv2d(|x|, |w|) + |b|. An output
    whose terms nearly cancel (one tap and the bias, at 1 x 1 with padding) is off by a few ulps of its terms,
    which is many of its own."""
    return _conv_bias(np.abs(x), np.abs(w), np.abs(b), padding)


def input_shapes(shape):
    """The (shape, dtype) of each array `make_inputs` returns: what a launch plan needs, without the values."""
    n, c, h, wd, k, r, s = shape
    return [((n, c, h, wd), np.float32), ((k, c, r, s), np.float32), ((k,), np.float32)]


def make_inputs(shape, seed=None):
    """Fresh random (x, w, b) for ``shape = (N, C, H, W, K, R, S)``, with outliers in x and a bias that makes
    about half of the outputs negative before the ReLU (so the ReLU really has work to do)."""
    n, c, h, wd, k, r, s = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd), dtype=np.float32)
    if x.size:
        x.flat[rng.integers(0, x.size, size=max(1, x.size // 100))] *= 50.0
    w = (rng.standard_normal((k, c, r, s)) / np.sqrt(max(1, c * r * s))).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    return x, w, b


def flops(shape, padding: int = 1) -> int:
    n, c, h, wd, k, r, s = shape
    _, _, ho, wo = out_shape((n, c, h, wd), (k, c, r, s), padding)
    return 2 * n * k * c * r * s * ho * wo


def min_bytes(shape, padding: int = 1) -> int:
    n, c, h, wd, k, r, s = shape
    _, _, ho, wo = out_shape((n, c, h, wd), (k, c, r, s), padding)
    return 4 * (n * c * h * wd + k * c * r * s + k + n * k * ho * wo)


#: Shapes (N, C, H, W, K, R, S) for the tests, the demo, the tracer and the benchmark (padding 1 unless
#: the test says otherwise).
SHAPES = {
    "test": [(1, 1, 1, 1, 1, 1, 1), (1, 3, 5, 7, 2, 3, 3), (2, 2, 9, 17, 3, 3, 3), (1, 5, 6, 4, 9, 1, 1),
             (1, 2, 7, 5, 3, 5, 5), (1, 3, 8, 19, 17, 2, 3),
             # 3 x 3 ones last (winograd takes only these): a one-pixel image; 70 output channels, two block rows
             (1, 1, 1, 1, 1, 3, 3), (1, 9, 7, 6, 70, 3, 3)],
    "test_gpu": [(32, 64, 56, 56, 64, 3, 3), (8, 3, 224, 224, 64, 3, 3), (3, 7, 31, 33, 19, 5, 5),
                 (1, 1, 1, 1, 1, 1, 1)],
    "trace": (1, 4, 16, 16, 8, 3, 3),
    "demo_sim": (1, 4, 16, 16, 8, 3, 3),
    "demo_gpu": (32, 64, 56, 56, 64, 3, 3),
    "bench": [(32, 64, 56, 56, 64, 3, 3), (8, 3, 224, 224, 64, 3, 3)],
    # The public suite, by regime: ResNet-18's four 3x3 stages at batch 1 and 16, its stem-sized input,
    # the benchmark's shape and a ragged one. `gpukernels bench --suite` measures every one of them.
    "suite": {
        "batch1": [(1, 64, 56, 56, 64, 3, 3), (1, 128, 28, 28, 128, 3, 3), (1, 256, 14, 14, 256, 3, 3),
                   (1, 512, 7, 7, 512, 3, 3)],
        "batch16": [(16, 64, 56, 56, 64, 3, 3), (16, 128, 28, 28, 128, 3, 3), (16, 256, 14, 14, 256, 3, 3),
                    (16, 512, 7, 7, 512, 3, 3)],
        "benchmark": [(32, 64, 56, 56, 64, 3, 3), (8, 3, 224, 224, 64, 3, 3)],
        "ragged": [(3, 20, 37, 41, 24, 3, 3)],
    },
}


# ----------------------------------------------------------------------------------------------------------
# The steps, one file each (kernel beside its launch plan)
# ----------------------------------------------------------------------------------------------------------
from .k01_naive import NAIVE_THREADS, bias_fill_kernel, bias_kernel, conv_kernel, naive, relu_kernel  # noqa: E402,F401
from .k02_fused_direct import CB, KB, PX, TH, TW, TX, TY, fused_direct, fused_kernel  # noqa: E402,F401
from .k03_implicit_gemm import (IG_BM, IG_BMS, IG_BN, IG_BNS, IG_MIN_BLOCKS, IG_ROW, IG_SMEM, igemm_bk_max,  # noqa: E402,F401
                                igemm_kernel, igemm_launches, igemm_tiling, implicit_gemm)
from .k04_split_c import SPLIT_C_MAX, split_c  # noqa: E402,F401
from .k05_winograd import (F4_MIN_TILES, output_tile, products_tile, winograd, winograd_launches,  # noqa: E402,F401
                           winograd_plan)
from .k06_optimized import (CBR_SMALL_SMS, CBR_SPLIT_IDLE, WINOGRAD_MIN_CHANNELS,  # noqa: E402,F401
                            WINOGRAD_MIN_TILES, Choice, choice_for, choose, optimized)

#: Every version, naive first and the dispatcher last.
VERSIONS = {v.name: v for v in (naive, fused_direct, implicit_gemm, split_c, winograd, optimized)}


def supports(name: str, shape) -> bool:
    """Whether ``VERSIONS[name]`` runs at ``shape = (N, C, H, W, K, R, S)``: ``winograd`` takes 3 x 3 filters only,
    every other step any filter. Called where it does not run, ``winograd`` raises a LaunchError that says why."""
    return name != "winograd" or tuple(shape[5:7]) == (3, 3)


def global_loads(version: str, x_shape, w_shape, padding: int = 1) -> dict:
    """Exact global-memory element loads and stores of a version, per array, as the tracer counts them.

    naive:         conv loads x and w once per in-bounds tap of every output (at most C*R*S); the bias pass
                   loads y and b once per output; the ReLU pass loads y once; y is stored three times.
    fused_direct:  every block loads the in-bounds elements of its CB-channel input tiles (with halo) and the
                   in-range weights of its KB channels, then one bias per output it writes; y is stored once.
    implicit_gemm: every (pixel block, channel block) gathers each in-bounds tap of each of its pixels once
                   (the k tiles partition the taps), so x is read once per block of 64 output channels; each
                   pixel block reads all of W once; each thread loads the bias of its 8 channels once (BN/8
                   threads share a channel); y is stored once.
    winograd:      F(m x m, 3 x 3) with m = output_tile(N, Ho, Wo), a = m + 2: the input transform loads
                   each tile's a x a patch (in-bounds elements) once per channel, the filter transform w once;
                   the a^2 products read U once per block of BN tiles and V once per block of BM output channels
                   (the tile products_tile picks); the output transform reads M once and one bias per (channel,
                   tile). The transforms' own arrays count as u, v and m (loads and stores); optimized counts as the
                   step it picks.
    """
    n, c, h, wd = x_shape
    k, _, r, s = w_shape
    _, _, ho, wo = out_shape(x_shape, w_shape, padding)
    outputs = n * k * ho * wo
    # in-bounds taps per output pixel, summed over an image: (in-bounds row taps) x (in-bounds column taps)
    rows = sum(sum(1 for rr in range(r) if 0 <= i + rr - padding < h) for i in range(ho))
    cols = sum(sum(1 for ss in range(s) if 0 <= j + ss - padding < wd) for j in range(wo))
    if version == "naive":
        taps = n * k * c * rows * cols
        return {"x": taps, "w": taps, "b": outputs,
                "y_loads": 2 * outputs, "y_stores": 3 * outputs}
    if version == "fused_direct":
        tiles_h, tiles_w, kblocks = ceil_div(ho, TH), ceil_div(wo, TW), ceil_div(k, KB)
        rows = sum(sum(1 for ii in range(TH + r - 1) if 0 <= ti * TH + ii - padding < h) for ti in range(tiles_h))
        cols = sum(sum(1 for jj in range(TW + s - 1) if 0 <= tj * TW + jj - padding < wd) for tj in range(tiles_w))
        x_loads = n * kblocks * c * rows * cols  # each (tile, k-block) stages every channel once
        w_loads = n * tiles_h * tiles_w * k * c * r * s  # each (tile, image) stages every weight once
        return {"x": x_loads, "w": w_loads, "b": outputs, "y_loads": 0, "y_stores": outputs}
    if version == "optimized" and choice_for(x_shape, w_shape, padding).step == "winograd":
        version = "winograd"
    if version == "winograd":
        if (r, s) != (3, 3):
            raise ValueError(f"winograd takes 3 x 3 filters only; got (R, S) = ({r}, {s})")
        m, p, (bm, bn) = winograd_plan(n, ho, wo, k)
        a, th, tw = m + 2, -(-ho // m), -(-wo // m)
        # in-bounds elements of every tile's a x a patch, which starts at row m ti - padding, column m tj - padding
        rows = sum(sum(1 for rr in range(a) if 0 <= m * ti + rr - padding < h) for ti in range(th))
        cols = sum(sum(1 for ss in range(a) if 0 <= m * tj + ss - padding < wd) for tj in range(tw))
        return {"x": n * c * rows * cols, "w": k * c * r * s, "b": k * p, "y_loads": 0, "y_stores": outputs,
                "u_loads": a * a * ceil_div(p, bn) * k * c, "u_stores": a * a * k * c,
                "v_loads": a * a * ceil_div(k, bm) * c * p, "v_stores": a * a * c * p,
                "m_loads": a * a * k * p, "m_stores": a * a * k * p}
    if version in ("implicit_gemm", "split_c", "optimized"):
        launches = VERSIONS[version].launches(*(np.zeros(sh, np.float32) for sh in (x_shape, w_shape, (k,))),
                                              padding=padding)
        conv = next(la for la in launches if la.kernel not in (bias_fill_kernel, relu_kernel))
        bn, splits = conv.block[0], conv.grid[2]
        pblocks, kblocks = ceil_div(n * ho * wo, bn), ceil_div(k, IG_BM)
        xw = {"x": kblocks * n * c * rows * cols, "w": pblocks * k * c * r * s}
        if splits == 1:
            return {**xw, "b": pblocks * (bn // 8) * k, "y_loads": 0, "y_stores": outputs}
        # bias fill (b loaded, y stored once), an atomic add per slice (a load and a store), the ReLU pass
        return {**xw, "b": outputs, "y_loads": splits * outputs + outputs, "y_stores": outputs + splits * outputs + outputs}
    raise ValueError(f"no traffic formula for version {version!r}")
