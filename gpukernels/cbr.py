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
5. ``optimized``     the dispatcher: ``optimized.choose(N, C, H, W, K)`` picks the pixels per block (256 or 128)
                     and the number of slices -- the fewest that fill the SMs once -- and says why.

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

Count the work first: 2*N*K*C*R*S*Ho*Wo FLOPs. For N32 C64 56x56 K64 3x3 that is 7.4 GFLOP over at least
4*(N*C*H*W + K*C*R*S + N*K*Ho*Wo) = 51 MB: ~145 FLOP/byte, arithmetic-bound on an H200.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, types

from ._launch import Launch, LaunchError, ceil_div, check_array, version

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def out_shape(x_shape, w_shape, padding: int = 1) -> tuple:
    n, _, h, wd = x_shape
    k, _, r, s = w_shape
    return (n, k, h + 2 * padding - r + 1, wd + 2 * padding - s + 1)


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, padding: int = 1) -> np.ndarray:
    """relu(conv2d(x, w, padding) + b) accumulated in float64, returned as float32."""
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
    y += np.asarray(b, np.float64)[None, :, None, None]
    return np.maximum(y, 0.0).astype(np.float32)


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
             (1, 2, 7, 5, 3, 5, 5), (1, 3, 8, 19, 17, 2, 3)],
    "test_gpu": [(32, 64, 56, 56, 64, 3, 3), (8, 3, 224, 224, 64, 3, 3), (3, 7, 31, 33, 19, 5, 5),
                 (1, 1, 1, 1, 1, 1, 1)],
    "trace": (1, 4, 16, 16, 8, 3, 3),
    "demo_sim": (1, 4, 16, 16, 8, 3, 3),
    "demo_gpu": (32, 64, 56, 56, 64, 3, 3),
    "bench": [(32, 64, 56, 56, 64, 3, 3), (8, 3, 224, 224, 64, 3, 3)],
    # The public suite (issue 16), by regime: ResNet-18's four 3x3 stages at batch 1 and 16, its stem-sized input,
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


def _check(x, w, b, padding=1):
    x = check_array("x", x, 4, "(N, C, H, W)")
    w = check_array("w", w, 4, "(K, C, R, S)")
    b = check_array("b", b, 1, "(K,)")
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)):
        raise LaunchError(f"padding must be a non-negative int; got {padding!r}")
    padding = int(padding)
    if padding < 0:
        raise LaunchError(f"padding must be >= 0; got {padding}")
    n, c, h, wd = x.shape
    k, cw, r, s = w.shape
    if cw != c:
        raise LaunchError(
            f"channel mismatch: x has C = {c} channels (x.shape = {tuple(x.shape)}) but w expects "
            f"C = {cw} (w.shape = (K, C, R, S) = {tuple(w.shape)})"
        )
    if b.shape[0] != k:
        raise LaunchError(f"b must have one value per output channel, shape ({k},); got shape {tuple(b.shape)}")
    if r > h + 2 * padding or s > wd + 2 * padding:
        raise LaunchError(
            f"the kernel (R, S) = ({r}, {s}) is larger than the padded input (H + 2p, W + 2p) = "
            f"({h + 2 * padding}, {wd + 2 * padding}); use a smaller kernel or more padding"
        )
    return (x, w, b), {"padding": padding}, out_shape(x.shape, w.shape, padding)


def _empty(x, w, b, shape, padding=1):
    # A zero-size dimension. With no input channels (C = 0) the convolution is an empty sum, so y = relu(b).
    y = np.zeros(shape, dtype=np.float32)
    if x.shape[1] == 0 and y.size:
        y[...] = np.maximum(np.asarray(b, np.float32), 0)[None, :, None, None]
    return y


# ----------------------------------------------------------------------------------------------------------
# 1. naive: three kernels, three passes through global memory
# ----------------------------------------------------------------------------------------------------------
NAIVE_THREADS = 256


@cuda.jit
def conv_kernel(x, w, y, padding):
    # One thread per output element; consecutive threads take consecutive j (coalesced stores, and
    # neighbouring loads of x). Loads per output: C*R*S of w and up to C*R*S of x, all from global memory.
    idx = cuda.grid(1)
    n, k, ho, wo = y.shape
    if idx < n * k * ho * wo:
        j = idx % wo
        i = (idx // wo) % ho
        kk = (idx // (wo * ho)) % k
        nn = idx // (wo * ho * k)
        c_, h, wd = x.shape[1], x.shape[2], x.shape[3]
        r_, s_ = w.shape[2], w.shape[3]
        acc = float32(0.0)
        for c in range(c_):
            for r in range(r_):
                hi = i + r - padding
                if 0 <= hi < h:
                    for s in range(s_):
                        wi = j + s - padding
                        if 0 <= wi < wd:
                            acc += x[nn, c, hi, wi] * w[kk, c, r, s]
        y[nn, kk, i, j] = acc


@cuda.jit
def bias_kernel(y, b):
    # Second pass: 1 load of y, 1 load of b, 1 store of y per element.
    idx = cuda.grid(1)
    n, k, ho, wo = y.shape
    if idx < n * k * ho * wo:
        kk = (idx // (wo * ho)) % k
        j = idx % wo
        i = (idx // wo) % ho
        nn = idx // (wo * ho * k)
        y[nn, kk, i, j] = y[nn, kk, i, j] + b[kk]


@cuda.jit
def relu_kernel(y):
    # Third pass: 1 load and 1 store per element.
    idx = cuda.grid(1)
    n, k, ho, wo = y.shape
    if idx < n * k * ho * wo:
        j = idx % wo
        i = (idx // wo) % ho
        kk = (idx // (wo * ho)) % k
        nn = idx // (wo * ho * k)
        y[nn, kk, i, j] = max(y[nn, kk, i, j], float32(0.0))


@cuda.jit
def bias_fill_kernel(y, b):
    # y[n, k, i, j] = b[k]: the start of a sum that split_c's slices add into (1 load of b, 1 store per element).
    idx = cuda.grid(1)
    n, k, ho, wo = y.shape
    if idx < n * k * ho * wo:
        j = idx % wo
        i = (idx // wo) % ho
        kk = (idx // (wo * ho)) % k
        nn = idx // (wo * ho * k)
        y[nn, kk, i, j] = b[kk]


# ----------------------------------------------------------------------------------------------------------
# 2. fused_direct: one fused kernel, input tile + halo and weights staged in shared memory
# ----------------------------------------------------------------------------------------------------------
TX, TY = 16, 16  # threads per block
PX = 4  # output pixels per thread, along a row, 16 columns apart (so a warp's shared reads are consecutive)
TH, TW = TY, TX * PX  # output tile per block: 16 x 64
KB = 16  # output channels per block (each thread keeps PX * KB = 64 accumulators in registers)
CB = 4  # input channels staged per phase


def _make_fused_kernel(r_: int, s_: int):
    """The fused kernel for an R x S filter: R and S size the shared tiles, so they are compile-time
    constants; one kernel is compiled per filter size."""
    hh, hw = TH + r_ - 1, TW + s_ - 1  # input tile with halo
    tile_elems = CB * hh * hw
    w_elems = KB * CB * r_ * s_
    threads = TX * TY

    @cuda.jit
    def fused_kernel(x, w, b, y, padding):
        x_tile = cuda.shared.array((CB, hh, hw), float32)
        w_tile = cuda.shared.array((KB, CB, r_, s_), float32)
        acc = cuda.local.array((PX, KB), float32)
        wv = cuda.local.array(KB, float32)
        n_, c_, h, wd = x.shape
        k_, ho, wo = y.shape[1], y.shape[2], y.shape[3]
        tiles_w = (wo + TW - 1) // TW
        i0 = (cuda.blockIdx.x // tiles_w) * TH
        j0 = (cuda.blockIdx.x % tiles_w) * TW
        k0 = cuda.blockIdx.y * KB
        nn = cuda.blockIdx.z
        ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
        t = ty * TX + tx
        for p in range(PX):
            for kk in range(KB):
                acc[p, kk] = 0.0
        for c0 in range(0, c_, CB):
            # Stage CB channels of the input tile with its halo; zero padding and out-of-range channels are
            # written as 0, so the compute loop below needs no bounds checks. Consecutive t -> consecutive
            # columns of x: coalesced (rows of hw floats).
            for e in range(t, tile_elems, threads):
                c = e // (hh * hw)
                hi = i0 + (e // hw) % hh - padding
                wi = j0 + e % hw - padding
                inside = c0 + c < c_ and 0 <= hi < h and 0 <= wi < wd
                x_tile[c, (e // hw) % hh, e % hw] = x[nn, c0 + c, hi, wi] if inside else float32(0.0)
            for e in range(t, w_elems, threads):
                kk = e // (CB * r_ * s_)
                c = (e // (r_ * s_)) % CB
                r = (e // s_) % r_
                s = e % s_
                ok = k0 + kk < k_ and c0 + c < c_
                w_tile[kk, c, r, s] = w[k0 + kk, c0 + c, r, s] if ok else float32(0.0)
            cuda.syncthreads()  # tiles complete before anyone reads them
            for c in range(CB):
                for r in range(r_):
                    for s in range(s_):
                        # KB weights into registers (the same address for all threads: a broadcast), each
                        # reused for PX pixels; each input value reused for KB channels: PX*KB FMAs for
                        # KB + PX shared loads.
                        for kk in range(KB):
                            wv[kk] = w_tile[kk, c, r, s]
                        for p in range(PX):
                            xv = x_tile[c, ty + r, tx + TX * p + s]
                            for kk in range(KB):
                                acc[p, kk] += xv * wv[kk]
            cuda.syncthreads()  # everyone done reading before the next chunk overwrites the tiles
        i = i0 + ty
        for p in range(PX):
            j = j0 + tx + TX * p
            if i < ho and j < wo:
                for kk in range(KB):
                    if k0 + kk < k_:
                        # bias + ReLU in registers, then the only store of y
                        y[nn, k0 + kk, i, j] = max(acc[p, kk] + b[k0 + kk], float32(0.0))

    return fused_kernel


_FUSED: dict[tuple[int, int], object] = {}


def fused_kernel(r: int, s: int):
    if (r, s) not in _FUSED:
        _FUSED[(r, s)] = _make_fused_kernel(r, s)
    return _FUSED[(r, s)]


# ----------------------------------------------------------------------------------------------------------
# 3. implicit_gemm: implicit GEMM -- the convolution as matmul's fastest kernel, its B operand gathered from x
# ----------------------------------------------------------------------------------------------------------
# The GEMM view: y^T[k, p] = sum_q W[k, q] * X[q, p] with
#   p = (n, i, j) an output pixel, P = N*Ho*Wo of them (the GEMM's columns),
#   q = (c, r, s) a filter tap,    Q = C*R*S of them (the reduction),
#   W[k, q] = w.reshape(K, Q)      row-major and contiguous in q, exactly like matmul's A,
#   X[q, p] = x[n, c, i + r - p, j + s - p], 0 outside the image: matmul's B, gathered on the fly (no im2col).
# Pixels are the columns so that the 32 lanes of a warp gather 32 consecutive pixels (consecutive addresses of x,
# except where a row of the image ends), and its 4 stores of one channel cover 128 consecutive pixels of y.
# The kernel is matmul.vectorized_kernel with three changes: the B tile is gathered instead of copied, a k tile is
# a whole number of filter taps, and the epilogue adds the bias, applies ReLU and stores y once.
IG_BM = 64  # output channels per block (K = 64 in both benchmarks); with 8 x 8 per thread, BN threads per block
IG_BN = 256  # output pixels per block = threads per block; each thread gathers the column of one pixel
IG_SMEM = 48 * 1024  # static shared memory per block: 2 * BK * (BM + 4 + BN) floats must fit
IG_ROW = IG_BM + 4  # a_tile row (matmul's V_ROW): 272 bytes keeps rows 16-byte aligned and spreads the stores
# Launch bounds: at least 2 blocks of 256 threads per SM (16 warps), i.e. <= 128 registers per thread; ptxas
# fits that without spilling (sm_90). Unbounded it takes 160 registers and 1 block. With BN = 128 the same
# kernel needs 168 registers (3 blocks of 4 warps) and spills 56 bytes at 128: benchmarks/cbr_variants.py
# times these alternatives.
IG_MIN_BLOCKS = 2
IG_BNS = (64, 128, 256)  # pixels per block the kernel is built for (threads = BN, 8 x 8 outputs each)


def igemm_bk_max(bn: int = IG_BN) -> int:
    """The deepest k tile whose two W^T and two X buffers fit in static shared memory: 18 for BN = 256."""
    return IG_SMEM // (2 * 4 * (IG_ROW + bn))


def igemm_tiling(r_: int, s_: int, cb: int | None = None, bn: int = IG_BN) -> tuple[int, int]:
    """(CB, RB): the input channels and filter rows one k tile covers; its depth is BK = CB * RB * S.

    A k tile is a whole number of filter taps, so the (channel, row, column) of each of its BK rows is a
    compile-time constant and the gather needs no division. Small filters take whole channels (by default
    enough for BK >= 8: 1x1 takes 8 channels, 2x2 two, 3x3 one); a filter with more taps than fit in shared
    memory (``igemm_bk_max``) is cut into groups of RB rows of one channel (5x5 with BN = 256: RB = 3, BK = 15;
    the last group is partly empty).
    """
    rs, bk_max = r_ * s_, igemm_bk_max(bn)
    if cb is None:
        cb = max(1, 8 // rs)
    if cb * rs <= bk_max:
        return cb, r_
    return 1, min(r_, max(1, bk_max // s_))


def _unrolled(step, lo: int, hi: int):
    """A device function that calls ``step(a_tile, x_tile, cur, kk, ...)`` for kk = lo .. hi-1 in straight-line
    code. Numba has no ``#pragma unroll``, and NVVM does not unroll a k loop of 9 x 68 instructions by itself;
    as a loop it costs ~25 instructions of index arithmetic per 64 FMAs (measured in the SASS). A chain of
    inlined calls, each with its kk a compile-time constant, is the unrolled loop: every shared load becomes
    [base + constant], and ptxas can issue the loads of step kk + 1 while the FMAs of step kk run. The price
    is compile time: ~8 s for BK = 9, ~25 s for BK = 18 (Numba inlines the chain level by level; forceinline
    would be linear but needs a GPU to compile device functions, and the resource report runs without one)."""
    if hi <= lo:
        @cuda.jit(device=True, inline=True)
        def nothing(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty):
            pass

        return nothing
    first = _unrolled(step, lo, hi - 1)
    kk = hi - 1

    @cuda.jit(device=True, inline=True)
    def steps(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty):
        first(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty)
        step(a_tile, x_tile, cur, kk, acc, a_frag, b_frag, tx, ty)

    return steps


def _make_igemm_kernel(r_: int, s_: int, cb: int, rb: int, bn: int, min_blocks: int | None, sliced: bool = False):
    """The implicit-GEMM kernel for an R x S filter, CB channels and RB filter rows per k tile, BN pixels per
    block; ``min_blocks`` adds launch bounds (BN threads, at least that many blocks per SM); ``sliced``: block z
    sums one slice of the channels and adds it into y with atomics (split_c). A compile-time choice: with both
    epilogues in one kernel, the unsplit one ran 1.7x slower at N32 C64 56^2 (H200, benchmarks/NOTES.md)."""
    bm = IG_BM
    bk = cb * rb * s_  # k-tile depth
    taps = rb * s_  # filter taps of one channel in a tile: bits of the tap mask
    groups = -(-r_ // rb)  # filter-row groups per channel (1 unless the filter is cut)
    threads = bn  # (BM / 8) x (BN / 8) threads of 8 x 8 outputs
    tcols = bn // 8  # threads along the pixels (16 or 32)
    tshift = tcols.bit_length() - 1
    half = bn // 2
    # W loads: a row of the tile is read by `wlanes` consecutive lanes (BK rounded up to a power of two; the
    # lanes past BK idle), so a warp reads 32 / wlanes whole rows -- a few 32-byte sectors per request -- and
    # the row and tap of a lane are t >> wshift and t & (wlanes - 1), the same for every tile. (Numbering the
    # BM*BK elements e = t + BN*l instead needs 5 loads instead of 8 for 3x3, but its e // BK and e % BK
    # per load cost 30 registers more: 201 instead of 170.)
    wlanes = max(1 << (bk - 1).bit_length(), threads // bm)
    wshift = wlanes.bit_length() - 1
    wrows = threads // wlanes  # W rows per pass
    wpasses = bm // wrows  # W loads per thread per tile
    opts = {"launch_bounds": (threads, min_blocks)} if min_blocks else {}

    @cuda.jit(device=True, inline=True)
    def tap_mask(colmask, i, r0, padding, h):
        # Bit rr * S + s: tap (r0 + rr, s) of this thread's pixel lands inside the image (rows past R: 0).
        m = 0
        for rr in range(rb):
            if r0 + rr < r_ and 0 <= i + r0 + rr - padding < h:
                m |= colmask << (rr * s_)
        return m

    @cuda.jit(device=True, inline=True)
    def gather(x, x_next, xptr, tmask, chans, hw, wd):
        # Row kq of the tile is tap (cc, rr, s) -- constants once the loop is unrolled -- so the address of
        # x[n, c0 + cc, i + r0 + rr - p, j + s - p] is xptr + cc*H*W + rr*W + s: one add per element. Outside the
        # image (a 0 bit in the mask) or past the last channel it is 0, and nothing is loaded. The offset is
        # >= 0 whenever it is loaded; as an unsigned index Numba drops its negative-index wraparound, and the
        # guarded load becomes one predicated instruction instead of a branch.
        for kq in range(bk):
            cc, rr, s = kq // taps, (kq % taps) // s_, kq % s_
            ok = (tmask >> (rr * s_ + s)) & 1 != 0 and cc < chans
            x_next[kq] = x[types.uint64(xptr + cc * hw + rr * wd + s)] if ok else float32(0.0)

    @cuda.jit(device=True, inline=True)
    def load_w(w, w_next, wptr, q_, valid, krem, wm, wq):
        # W[k0 + wm + wrows*l, qbase + wq]: rows Q floats apart, one tap per lane. `valid` taps of the tile exist
        # (fewer in the last channel chunk or row group); rows past K are never stored, but must not be read.
        for l in range(wpasses):
            ok = wq < valid and wm + wrows * l < krem
            w_next[l] = w[types.uint64(wptr + l * wrows * q_)] if ok else float32(0.0)

    @cuda.jit(device=True, inline=True)
    def store_x(x_tile, x_next, buf, t):
        # Lane t writes column t of each row: consecutive words, conflict-free.
        for kq in range(bk):
            x_tile[buf, kq, t] = x_next[kq]

    @cuda.jit(device=True, inline=True)
    def store_w(a_tile, w_next, buf, wm, wq):
        # W is stored transposed (a_tile[kq, m]) so that 4 consecutive channels of one tap are one 16-byte load
        # in the FMA loop; lanes past BK hold nothing.
        if wq < bk:
            for l in range(wpasses):
                a_tile[buf, wq, wm + wrows * l] = w_next[l]

    @cuda.jit(device=True, inline=True)
    def mma_step(a_tile, x_tile, cur, kk, acc, a_frag, b_frag, tx, ty):
        # One k step of the tile: 4 x 16-byte shared loads feed 64 FMAs (matmul.vectorized's inner loop).
        for q in range(4):
            a_frag[q] = a_tile[cur, kk, ty * 4 + q]
            a_frag[4 + q] = a_tile[cur, kk, 32 + ty * 4 + q]
            b_frag[q] = x_tile[cur, kk, tx * 4 + q]
            b_frag[4 + q] = x_tile[cur, kk, half + tx * 4 + q]
        for ii in range(8):
            for jj in range(8):
                acc[ii, jj] += a_frag[ii] * b_frag[jj]

    # The FMA steps of a tile, in two halves: the X tile gathered before the first half is stored to shared
    # memory after it, and the W loads are issued there, so the two prefetches need not hold registers during
    # the same FMAs (ptxas decides in the end; for BN = 256 it fits 128 registers without spills).
    split = (bk + 1) // 2
    mma_first, mma_second = _unrolled(mma_step, 0, split), _unrolled(mma_step, split, bk)

    @cuda.jit(**opts)
    def igemm_kernel(x, w, b, y, n_, c_, h, wd, k_, ho, wo, padding):
        # x: (N*C*H*W,), w: (K*C*R*S,), y: (N*K*Ho*Wo,) -- flat views of the 4-D arrays, so an element's address
        # is an offset this kernel keeps up to date with one add, not four index products.
        a_tile = cuda.shared.array((2, bk, IG_ROW), float32, alignment=16)  # W^T tiles: a_tile[buf, kq, m]
        x_tile = cuda.shared.array((2, bk, bn), float32, alignment=16)  # gathered X tiles: x_tile[buf, kq, p]
        acc = cuda.local.array((8, 8), float32)
        a_frag = cuda.local.array(8, float32)
        b_frag = cuda.local.array(8, float32)
        x_next = cuda.local.array(bk, float32)
        w_next = cuda.local.array(wpasses, float32)
        ybase = cuda.local.array(8, types.int64)
        # As in matmul.vectorized_kernel, indices come from threadIdx through & and >> (never negative), so
        # NVVM sees the 16-byte alignment of the fragment loads below.
        t = cuda.threadIdx.x
        tx, ty = t & (tcols - 1), t >> tshift  # outputs: pixels tx*4 + {0..3} (+ BN/2), channels ty*4 + {0..3} (+ 32)
        p0 = cuda.blockIdx.x * bn
        k0 = cuda.blockIdx.y * bm
        hw, howo, q_ = h * wd, ho * wo, c_ * (r_ * s_)
        npix = n_ * howo
        krem = k_ - k0
        # The pixel this thread gathers: column t of the tile, decomposed once for the whole kernel.
        p = p0 + t
        pn = p // howo
        i = (p - pn * howo) // wo
        j = p - pn * howo - i * wo
        xbase = pn * c_ * hw + (i - padding) * wd + (j - padding)  # offset of tap (c, r, s) = (0, 0, 0): may be < 0
        colmask = 0  # bit s: column j + s - padding is inside the image (none for pixels past the end)
        if p < npix:
            for s in range(s_):
                if 0 <= j + s - padding < wd:
                    colmask |= 1 << s
        tmask = tap_mask(colmask, i, 0, padding, h)
        wm, wq = t >> wshift, t & (wlanes - 1)  # W loads: rows wm + wrows*l of the tile, tap wq
        wptr = (k0 + wm) * q_ + wq  # this thread's first W element, tap 0 of the filter
        for ii in range(8):
            for jj in range(8):
                acc[ii, jj] = 0.0

        # Slices of the reduction (split_c): block z sums channels [c_lo, c_hi), a whole number of k tiles; with
        # one slice (gridDim.z = 1) that is every channel. From here on channels count from c_lo.
        c_n = c_
        if sliced:
            nsplit = cuda.gridDim.z
            c_chunk = ((c_ + cb - 1) // cb + nsplit - 1) // nsplit * cb
            c_lo = cuda.blockIdx.z * c_chunk
            c_n = max(0, min(c_chunk, c_ - c_lo))  # this slice's channels (0: an empty slice adds zeros)
            xbase += c_lo * hw
            wptr += c_lo * (r_ * s_)
        ntiles = ((c_n + cb - 1) // cb) * groups  # k tiles: (channel chunk, row group), channel-major like q
        gather(x, x_next, xbase, tmask, c_n, hw, wd)
        store_x(x_tile, x_next, 0, t)
        load_w(w, w_next, wptr, q_, min(cb, c_n) * min(rb, r_) * s_, krem, wm, wq)
        store_w(a_tile, w_next, 0, wm, wq)
        cuda.syncthreads()
        for step in range(ntiles):
            cur = step & 1
            # Tile step + 1: channels c1 .., filter rows r1 ... After the last tile it is past the last channel:
            # the gather and the W loads then load nothing (chans and valid <= 0) and fill the idle buffer with
            # zeros. Unconditional on purpose: behind an `if`, NVVM sinks the loads down to their shared stores,
            # after the FMAs, and the full global latency is exposed once per tile (seen in the SASS).
            c1 = ((step + 1) // groups) * cb
            r1 = ((step + 1) % groups) * rb
            if groups > 1:
                tmask = tap_mask(colmask, i, r1, padding, h)
            # Issue the gather of the next X tile; it lands in registers while the first FMAs run. Buffer cur ^ 1
            # was last read before the previous barrier, so it can be refilled mid-tile.
            gather(x, x_next, xbase + c1 * hw + r1 * wd, tmask, c_n - c1, hw, wd)
            # A warp barrier (free: the warp is converged) pins the loads here; without it ptxas sank them to their
            # shared stores, after the FMAs, to save registers (seen in the SASS).
            cuda.syncwarp()
            mma_first(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty)
            store_x(x_tile, x_next, cur ^ 1, t)
            load_w(w, w_next, wptr + c1 * (r_ * s_) + r1 * s_, q_, max(0, min(cb, c_n - c1)) * min(rb, r_ - r1) * s_,
                   krem, wm, wq)
            cuda.syncwarp()
            mma_second(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty)
            store_w(a_tile, w_next, cur ^ 1, wm, wq)
            cuda.syncthreads()  # one barrier per tile: the other buffers are full, and everyone is done with these

        # Epilogue: y[n, k, i, j] is at (n*K + k)*Ho*Wo + (i*Wo + j). This thread's 8 pixels are two runs of 4;
        # decompose the first of each run, then step (a run may cross into the next image).
        for jh in range(2):
            pj = p0 + jh * half + tx * 4
            yn = pj // howo
            yij = pj - yn * howo
            for jq in range(4):
                ybase[jh * 4 + jq] = yn * k_ * howo + yij if pj + jq < npix else -1
                yij += 1
                if yij == howo:
                    yij = 0
                    yn += 1
        for ii in range(8):
            ch = k0 + (ii >> 2) * 32 + ty * 4 + (ii & 3)
            if ch < k_:
                if sliced:
                    # A slice holds part of the sum: add it to y (which starts at the bias); the ReLU comes after
                    # the last slice, in its own pass (split_c).
                    for jj in range(8):
                        if ybase[jj] >= 0:
                            cuda.atomic.add(y, types.uint64(ybase[jj] + ch * howo), acc[ii, jj])
                else:
                    bias = b[ch]  # one bias load per channel this thread owns, reused for its 8 pixels
                    for jj in range(8):
                        if ybase[jj] >= 0:  # bias + ReLU in registers, then the only store of y
                            y[types.uint64(ybase[jj] + ch * howo)] = max(acc[ii, jj] + bias, float32(0.0))

    return igemm_kernel


_IGEMM: dict[tuple, object] = {}


def igemm_kernel(r: int, s: int, cb: int | None = None, bn: int = IG_BN, min_blocks: int | None = IG_MIN_BLOCKS,
                 sliced: bool = False):
    """The compiled-once implicit-GEMM kernel for an R x S filter (and a tiling; the defaults are `implicit_gemm`'s)."""
    cb, rb = igemm_tiling(r, s, cb, bn)
    key = (r, s, cb, rb, bn, min_blocks, sliced)
    if key not in _IGEMM:
        _IGEMM[key] = _make_igemm_kernel(r, s, cb, rb, bn, min_blocks, sliced)
    return _IGEMM[key]


def igemm_launches(x, w, b, y, padding=1, cb=None, bn=IG_BN, min_blocks=IG_MIN_BLOCKS, splits=1) -> list[Launch]:
    """The launches of the implicit-GEMM kernel (``implicit_gemm`` uses the defaults; benchmarks/cbr_variants.py
    sweeps the rest): a grid of P / BN pixel blocks by K / 64 channel blocks (by ``splits`` slices of the
    channels), BN threads each. With slices, y starts at the bias, each slice adds its part of the sum, and a
    last pass applies the ReLU."""
    if bn not in IG_BNS:
        raise LaunchError(f"bn must be one of {IG_BNS} (one thread per pixel of a 64-channel tile); got {bn}")
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    _, _, ho, wo = y.shape
    if s > igemm_bk_max(bn):
        raise LaunchError(f"the implicit GEMM with {bn} pixels per block handles filters up to {igemm_bk_max(bn)} "
                          f"columns wide (one filter row must fit in a k tile); got S = {s}")
    splits = max(1, min(splits, ceil_div(c, igemm_tiling(r, s, cb, bn)[0])))  # no more slices than k-tile chunks
    kernel = igemm_kernel(r, s, cb, bn, min_blocks, splits > 1)
    grid = (ceil_div(n * ho * wo, bn), ceil_div(k, IG_BM), splits)  # pixels on x: gridDim.y stops at 65535
    flat = (x.reshape(x.size), w.reshape(w.size), b, y.reshape(y.size))
    conv = Launch(kernel, grid, (bn,), flat + (n, c, h, wd, k, ho, wo, padding))
    if splits == 1:
        return [conv]
    ew = (ceil_div(y.size, NAIVE_THREADS),)
    return [Launch(bias_fill_kernel, ew, (NAIVE_THREADS,), (y, b)), conv,
            Launch(relu_kernel, ew, (NAIVE_THREADS,), (y,))]


# ----------------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------------


@version("cbr", _check, kernels=[conv_kernel, bias_kernel, relu_kernel], empty=_empty)
def naive(x, w, b, y, padding=1):
    """Unfused: convolution, then bias add, then ReLU -- three kernels, three passes through global memory."""
    total = y.size
    grid = (ceil_div(total, NAIVE_THREADS),)
    block = (NAIVE_THREADS,)
    return [
        Launch(conv_kernel, grid, block, (x, w, y, padding)),
        Launch(bias_kernel, grid, block, (y, b)),
        Launch(relu_kernel, grid, block, (y,)),
    ]


@version("cbr", _check, empty=_empty)
def fused_direct(x, w, b, y, padding=1):
    """Fused: input tile + halo and weights staged in shared memory; bias and ReLU before the single store."""
    n, k, ho, wo = y.shape
    r, s = w.shape[2], w.shape[3]
    grid = (ceil_div(ho, TH) * ceil_div(wo, TW), ceil_div(k, KB), n)
    return [Launch(fused_kernel(r, s), grid, (TX, TY), (x, w, b, y, padding))]


@version("cbr", _check, empty=_empty)
def implicit_gemm(x, w, b, y, padding=1):
    """Implicit GEMM: matmul's vectorized kernel, its B operand gathered from x; a 64 x 256 tile per block."""
    return igemm_launches(x, w, b, y, padding)


# ----------------------------------------------------------------------------------------------------------
# 4. split_c: slices of the channels over the grid's z, when the image gives too few tiles for the GPU
# ----------------------------------------------------------------------------------------------------------
# At batch 1 the GEMM is short and deep: ResNet's last stage (1, 512, 7x7, 512) has P = 49 pixels, K = 512 channels
# and Q = 4608 taps -- 8 blocks of 64 x 256 for 132 SMs, each walking all 512 channels (0.26x cuDNN, issue 16).
# Slicing the channels into S parts makes S times the blocks, each summing Q / S taps -- matmul's split-K. The ReLU
# cannot come before the last slice has added its part, so the fusion gives a little back: y starts at the bias
# (one pass), the slices add into it with atomics, and a last pass applies the ReLU. Those two passes cost
# 12 bytes per output -- small exactly where splitting pays, since few pixels is what makes few tiles.
SPLIT_C_MAX = 64  # at most this many partial sums per output


@dataclass
class Choice:
    """What `choose` picked for a convolution: the step, pixels per block and slices of the channels, and why."""

    step: str
    config: dict
    why: str

    def __str__(self) -> str:
        return f"{self.step} {self.config}: {self.why}"


#: Pixels per block: 256, or 128 when 64 x 256 tiles would give fewer than one per CBR_SMALL_SMS SMs (batch 1).
CBR_SMALL_SMS = 8
#: Slice the channels only when the tiles leave more than half the SMs idle (fewer than SMs / CBR_SPLIT_IDLE tiles):
#: at (16, 128, 28^2, 128), 98 tiles of 64 x 256 for 132 SMs, unsliced ran 0.179 ms and 2 slices 0.224 ms (the bias
#: and ReLU passes, the atomics and twice the reads of w cost more than the idle quarter of the GPU).
CBR_SPLIT_IDLE = 2


def choose(n, c, h, wd, k, r=3, s=3, sms: int | None = None) -> Choice:
    """Pixels per block and slices of the channels for x (N, C, H, W) convolved with w (K, C, R, S), padding 1.

    1. **Tile**: 64 channels x 256 pixels, or x 128 pixels when the 256-pixel tiles would number fewer than one
       per CBR_SMALL_SMS SMs -- there halving the tile doubles the tiles, and each block's k loop is no longer.
    2. **Slices**, only when the tiles would leave more than half the SMs idle: the fewest (a power of two) that
       make at least one block per SM, at most SPLIT_C_MAX and no more than the channels' k tiles. On the H200
       each such suite shape's fastest measured slicing was the first to fill the 132 SMs (benchmarks/NOTES.md,
       "CBR on the suite").

    Nothing here names a shape: both thresholds are counts of tiles against SMs."""
    from ._launch import sm_count

    sms = sms or sm_count()
    ho, wo = h + 2 - r + 1, wd + 2 - s + 1
    tiles256 = ceil_div(n * ho * wo, 256) * ceil_div(k, IG_BM)
    bn = 128 if tiles256 * CBR_SMALL_SMS < sms or s > igemm_bk_max(256) else 256
    tiles = ceil_div(n * ho * wo, bn) * ceil_div(k, IG_BM)
    chunks = ceil_div(c, igemm_tiling(r, s, None, bn)[0])
    splits = 1
    if tiles * CBR_SPLIT_IDLE < sms:  # more than half the SMs would idle: slice until every SM has a block
        while tiles * splits < sms and splits * 2 <= min(SPLIT_C_MAX, chunks):
            splits *= 2
    why = (f"{tiles} tiles of 64 channels x {bn} pixels for {sms} SMs"
           + (f" (256-pixel tiles: {tiles256}, fewer than one per {CBR_SMALL_SMS} SMs)" if bn == 128 else "")
           + (f": {splits} slices of the {c} channels make {tiles * splits} blocks, one wave" if splits > 1
              else ": a full wave without slicing" if tiles >= sms
              else ": more than half the SMs busy, slicing would cost more" if tiles * CBR_SPLIT_IDLE >= sms
              else ": too few channels to slice"))
    return Choice("split_c" if splits > 1 else "implicit_gemm", {"bn": bn, "splits": splits}, why)


def _choice_launches(x, w, b, y, padding):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    if padding != 1:  # the model assumes padding 1; any other padding takes the same rule on its own output size
        h, wd = h + 2 * padding - 2, wd + 2 * padding - 2
    ch = choose(n, c, h, wd, k, r, s)
    return ch, igemm_launches(x, w, b, y, padding, bn=ch.config["bn"],
                              min_blocks=IG_MIN_BLOCKS if ch.config["bn"] == 256 else None,
                              splits=ch.config["splits"])


@version("cbr", _check, empty=_empty)
def split_c(x, w, b, y, padding=1):
    """Split-C: the channels sliced over the grid's z, summed into y (which starts at the bias) by atomics, then
    a ReLU pass -- when the image alone gives too few tiles for the SMs (batch 1, deep layers)."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    _, _, ho, wo = y.shape
    tiles = ceil_div(n * ho * wo, 128) * ceil_div(k, IG_BM)
    from ._launch import sm_count

    splits = 2
    while tiles * splits < sm_count() and splits < SPLIT_C_MAX:  # the fewest slices for a block per SM, at least 2
        splits *= 2
    return igemm_launches(x, w, b, y, padding, bn=128, min_blocks=None, splits=splits)


@version("cbr", _check, empty=_empty)
def optimized(x, w, b, y, padding=1):
    """The dispatcher: per shape, the tile and slices of the channels that `choose` estimates fastest."""
    return _choice_launches(x, w, b, y, padding)[1]


optimized.choose = choose
optimized.steps = ("implicit_gemm", "split_c")
optimized.describe = lambda x, w, b, padding=1: str(choose(*x.shape, w.shape[0], w.shape[2], w.shape[3]))

#: Every version, naive first and the dispatcher last.
VERSIONS = {v.name: v for v in (naive, fused_direct, implicit_gemm, split_c, optimized)}


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
