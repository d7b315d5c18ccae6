"""Step 3 of the softmax lesson, ``online``: the max and the sum in one read ("online softmax").

``block_row`` reads the row once for the max and again for the sum of exp(x - max), because the sum needs the max
first. It does not: keep a running max m and a running sum s of exp(x - m), and when a new value v raises the max,
rescale what was summed so far, s * exp(m - v) -- every term exp(x - m) becomes exp(x - v). At the end each thread
holds (m_t, s_t) for its own values; the row's max M is the block's max of the m_t, and the row's sum is the block's
sum of s_t * exp(m_t - M) (``rebase``). One pass for max and sum, one to normalise: 2 loads and 1 store per element,
12 bytes instead of 16. The price is an extra exp() when the max grows, and a dependent chain: each value's update
waits for the previous one's (m, s), so a thread's loads issue one at a time. On the H200 that chain cost more than
the read it saved wherever ``block_row``'s re-reads came from L2 (1 x 2^20: 1.30 ms against 0.91; squares equal;
benchmarks/NOTES.md): fewer bytes is faster only when bytes are the bound.

Same block of 512 threads per row and the same reductions as ``block_row``. ``optimized`` runs this kernel for rows
too long to keep on chip (more than ``MAX_CACHED`` values) when there are enough rows to fill the SMs.
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32

from .._launch import Launch, version
from ._common import WARP, _check
from .k02_block_row import reductions


@cuda.jit(device=True, forceinline=True)
def online_update(m, s, v):
    # One value into a running max m and a running sum s of exp(x - m): when the max grows, the sum so far is
    # rescaled by exp(m_old - m_new) ("online softmax": max and sum in one read).
    if v > m:
        s = s * math.exp(m - v) + float32(1.0)
        m = v
    elif v != -math.inf:
        s += math.exp(v - m)
    return m, s


@cuda.jit(device=True, forceinline=True)
def rebase(m, s, new_max):
    # A sum s of exp(x - m) re-expressed as a sum of exp(x - new_max); an empty part (m = -inf) adds nothing --
    # s * 0, not 0: a part that saw only NaN (which never raises m) has s = NaN, and the row's sum must stay NaN.
    return s * math.exp(m - new_max) if m != -math.inf else s * float32(0.0)


@functools.cache
def make_online_kernel(threads: int):
    """The online kernel for a block of ``threads`` threads per row (a compile-time constant)."""
    _, block_reduce = reductions(threads)

    @cuda.jit
    def online_kernel(x, y):
        # Pass 1 keeps a running max m and a running sum s of exp(x - m), rescaling s by exp(m_old - m_new) when
        # the max grows: max and sum in one read. Pass 2 reads the row again and writes it. Traffic per element:
        # 2 loads + 1 store.
        scratch = cuda.shared.array(WARP, float32)
        i = cuda.blockIdx.x
        t = cuda.threadIdx.x
        n = x.shape[1]
        m = float32(-math.inf)
        s = float32(0.0)
        for j in range(t, n, threads):
            m, s = online_update(m, s, x[i, j])
        row_max = block_reduce(m, scratch, True)
        # Each thread's sum was relative to its own max; bring it to the row's max before adding.
        s = rebase(m, s, row_max)
        s = block_reduce(s, scratch, False)
        inv = float32(1.0) / s
        for j in range(t, n, threads):
            y[i, j] = math.exp(x[i, j] - row_max) * inv

    return online_kernel


ONLINE_THREADS = 512
online_kernel = make_online_kernel(ONLINE_THREADS)


def online_launches(x, y) -> list[Launch]:
    return [Launch(online_kernel, (x.shape[0],), (ONLINE_THREADS,), (x, y))]


@version("softmax", _check, kernels=[online_kernel])
def online(x, y):
    """Max and sum in one read (a running max, the sum rescaled when it grows), then the normalising read."""
    return online_launches(x, y)
