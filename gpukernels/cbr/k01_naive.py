"""Step 1 of the CBR lesson, ``naive``: convolution, bias add and ReLU as three kernels, three passes through
global memory -- the unfused baseline a framework runs without fusion. (``bias_fill_kernel`` is split_c's start.)"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import _check, _empty

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
