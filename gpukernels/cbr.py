"""Lesson 3 -- fused convolution + bias + ReLU ("CBR"), the building block of every CNN.

    x: (N, C, H, W)   w: (K, C, R, S)   b: (K,)   stride 1, zero padding p
    y: (N, K, Ho, Wo) with Ho = H + 2p - R + 1, Wo = W + 2p - S + 1
    y[n, k, i, j] = relu(b[k] + sum_{c, r, s} x[n, c, i + r - p, j + s - p] * w[k, c, r, s])

What you will learn
-------------------
1. ``naive``      the unfused baseline a framework runs without fusion: three kernels, each one full pass
                  through global memory. (a) convolution, one thread per output, every input read straight from
                  global memory (C*R*S loads of x and of w per output); (b) bias add: read y, read b, write y;
                  (c) ReLU: read y, write y. Passes (b) and (c) alone move 16 bytes per output element that a
                  fused kernel never moves: 2 extra reads + 2 extra writes of y (plus one load of b each).
2. ``optimized``  one fused kernel. A block computes a TH x TW = 16 x 64 tile of output pixels for KB = 16
                  output channels. For each chunk of CB input channels it stages the input tile *with its halo*
                  (CB x (TH + R - 1) x (TW + S - 1) values) and the chunk's weights (KB x CB x R x S) in shared
                  memory; each staged input value is then reused up to R*S*KB times. Each thread owns PX = 4
                  pixels x KB channels in registers, so every weight read from shared memory feeds 4 FMAs and
                  every input value 16. Bias and ReLU are applied in registers before the single store of y.

Global traffic, counted in elements (what ``gpukernels trace cbr`` measures):
  naive:      conv loads x and w once per in-bounds tap of every output (up to N*K*Ho*Wo*C*R*S each: padding
              taps are skipped), stores y once; bias pass loads y and b and stores y; ReLU loads and stores y.
  optimized:  each block loads its CB-chunks of input tile + halo (in-bounds elements only) and of weights,
              loads one bias per output, and stores its outputs once. ``global_loads`` computes the exact counts.

Count the work first: 2*N*K*C*R*S*Ho*Wo FLOPs. For N32 C64 56x56 K64 3x3 that is 7.4 GFLOP over at least
4*(N*C*H*W + K*C*R*S + N*K*Ho*Wo) = 51 MB: ~145 FLOP/byte, arithmetic-bound on an H200.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

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


# ----------------------------------------------------------------------------------------------------------
# 2. optimized: one fused kernel, input tile + halo and weights staged in shared memory
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
def optimized(x, w, b, y, padding=1):
    """Fused: input tile + halo and weights staged in shared memory; bias and ReLU before the single store."""
    n, k, ho, wo = y.shape
    r, s = w.shape[2], w.shape[3]
    grid = (ceil_div(ho, TH) * ceil_div(wo, TW), ceil_div(k, KB), n)
    return [Launch(fused_kernel(r, s), grid, (TX, TY), (x, w, b, y, padding))]


#: Every version, naive first and fastest last.
VERSIONS = {v.name: v for v in (naive, optimized)}


def global_loads(version: str, x_shape, w_shape, padding: int = 1) -> dict:
    """Exact global-memory element loads and stores of a version, per array, as the tracer counts them.

    naive:      conv loads x and w once per in-bounds tap of every output (at most C*R*S); the bias pass
                loads y and b once per output; the ReLU pass loads y once; y is stored three times.
    optimized:  every block loads the in-bounds elements of its CB-channel input tiles (with halo) and the
                in-range weights of its KB channels, then one bias per output it writes; y is stored once.
    """
    n, c, h, wd = x_shape
    k, _, r, s = w_shape
    _, _, ho, wo = out_shape(x_shape, w_shape, padding)
    outputs = n * k * ho * wo
    if version == "naive":
        # in-bounds taps per output pixel: product of the in-bounds row taps and column taps
        rows = sum(sum(1 for rr in range(r) if 0 <= i + rr - padding < h) for i in range(ho))
        cols = sum(sum(1 for ss in range(s) if 0 <= j + ss - padding < wd) for j in range(wo))
        taps = n * k * c * rows * cols
        return {"x": taps, "w": taps, "b": outputs,
                "y_loads": 2 * outputs, "y_stores": 3 * outputs}
    if version == "optimized":
        tiles_h, tiles_w, kblocks = ceil_div(ho, TH), ceil_div(wo, TW), ceil_div(k, KB)
        rows = sum(sum(1 for ii in range(TH + r - 1) if 0 <= ti * TH + ii - padding < h) for ti in range(tiles_h))
        cols = sum(sum(1 for jj in range(TW + s - 1) if 0 <= tj * TW + jj - padding < wd) for tj in range(tiles_w))
        x_loads = n * kblocks * c * rows * cols  # each (tile, k-block) stages every channel once
        w_loads = n * tiles_h * tiles_w * k * c * r * s  # each (tile, image) stages every weight once
        return {"x": x_loads, "w": w_loads, "b": outputs, "y_loads": 0, "y_stores": outputs}
    raise ValueError(f"no traffic formula for version {version!r}")
