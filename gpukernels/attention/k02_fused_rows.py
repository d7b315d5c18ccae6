"""Step 2 of the attention lesson, ``fused_rows``: one kernel, one warp per query row, the online softmax -- the
scores are never stored.

``naive`` stores all of S because the softmax of a row needs the row's maximum and sum before any probability is
known. The softmax lesson's step 3 showed it does not: keep a running max m and a running sum l of exp(s - m), and
when a new score raises the max, rescale what was summed so far by exp(m_old - m_new). Attention adds one thing: the
output row is itself a sum weighted by those exponentials, acc = sum_j exp(s_j - m) * v[j, :], so it is rescaled by
the same factor. After the last key, out = acc / l. Per key j, with s = scale * q . k[j]:

    if s > m:  alpha = exp(m - s); p = 1;  m = s      (a new max: everything so far shrinks)
    else:      alpha = 1;          p = exp(s - m)
    l   = l * alpha + p
    acc = acc * alpha + p * v[j, :]

One exp per key either way. Scores far apart are safe: a score 80 below the max gives exp(-80) = 1.8e-35, and one
far below (past ~100) underflows to 0 -- the right answer, as its weight is below float32's resolution next to the
max's 1; no exp() ever sees a positive argument, so nothing overflows. The first key meets m = -inf: exp(-inf) = 0
clears the empty l and acc (0 * 0, never inf * 0).

A warp owns a query row; lane t owns dimensions t, t + 32, t + 64, t + 96 of it (``dims_per_lane`` = ceil(D / 32),
at most 4 registers each for q and acc). Per key the lanes multiply their pieces of q and k[j] and add them across
the warp by ``warp_sum`` (the softmax lesson's butterfly of 5 shuffles), after which every lane holds the same
score: the branch above is taken by the whole warp alike. Under the causal mask, query i stops at key i: masked keys
are never visited.

Traffic: q read once and out written once; k and v streamed from global memory once per *query row* -- Sq times
per head (mostly from L2). The loads of a key's row are coalesced (32 lanes, 32 consecutive floats). What limits it:
5 shuffles, an exp and a dependent chain per key for at most 4 + 4 FMAs per lane, and each row reads all of K and V by
itself; ``tiled`` shares them between rows.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ..softmax import WARP, warp_sum
from ._common import MAX_D, check, heads

FUSED_WARPS = 4  # query rows (warps) per block: 128 threads


def dims_per_lane(d: int) -> int:
    """Dimensions of a row each lane owns: ceil(D / 32), 1 to 4."""
    return ceil_div(d, WARP)


@functools.cache
def key_walk(dpl: int):
    """Query row ``i`` of head ``bh`` against keys j0 .. j1 - 1, as a device function (``fused_rows`` and ``split_keys``
    share it): ``m, l = walk(q, k, v, bh, i, scale, j0, j1, lane, dim, acc)`` sets the lane's ``acc`` (its dimensions
    lane, lane + 32, ... of the row) to sum_j exp(s_j - m) v[j, :] by the online softmax above and returns the
    running max m and sum l (-inf and 0 when j1 <= j0)."""

    @cuda.jit(device=True, forceinline=True)
    def walk(q, k, v, bh, i, scale, j0, j1, lane, dim, acc):
        qr = cuda.local.array(dpl, float32)  # this lane's dimensions of the query row, times scale
        for e in range(dpl):
            d = lane + WARP * e
            qr[e] = q[bh, i, d] * scale if d < dim else float32(0.0)
            acc[e] = float32(0.0)
        m = float32(-math.inf)  # running max of the scores
        l = float32(0.0)  # running sum of exp(s_j - m)
        for j in range(j0, j1):
            part = float32(0.0)
            for e in range(dpl):
                d = lane + WARP * e
                if d < dim:
                    part += qr[e] * k[bh, j, d]
            s = warp_sum(part)  # the score, in every lane
            if s > m:  # a new max: rescale what was summed so far (on the first key exp(-inf) = 0)
                alpha = math.exp(m - s)
                p = float32(1.0)
                m = s
            else:
                alpha = float32(1.0)
                p = math.exp(s - m)
            l = l * alpha + p
            for e in range(dpl):
                d = lane + WARP * e
                if d < dim:
                    acc[e] = acc[e] * alpha + p * v[bh, j, d]
        return m, l

    return walk


@functools.cache
def fused_rows_kernel_for(dpl: int):
    """The kernel for rows of up to 32 * ``dpl`` dimensions: ``dpl`` is a compile-time constant, so the lane's pieces
    of q and acc are arrays of registers."""
    walk = key_walk(dpl)

    @cuda.jit
    def fused_rows_kernel(q, k, v, out, scale, causal):
        # q, out: (BH, Sq, D), k, v: (BH, Sk, D). Warp y of block b owns query row r = b * FUSED_WARPS + y.
        acc = cuda.local.array(dpl, float32)  # this lane's dimensions of sum_j exp(s_j - m) v[j, :]
        lane = cuda.threadIdx.x
        r = cuda.blockIdx.x * FUSED_WARPS + cuda.threadIdx.y
        bhs, sq, dim = q.shape
        if r >= bhs * sq:
            return  # a whole warp past the last row: there is no barrier, and its lanes shuffle only with each other
        bh = r // sq
        i = r - bh * sq
        keys = min(k.shape[1], i + 1) if causal else k.shape[1]  # causal: query i sees keys 0..i
        m, l = walk(q, k, v, bh, i, scale, 0, keys, lane, dim, acc)
        inv = float32(1.0) / l
        for e in range(dpl):
            d = lane + WARP * e
            if d < dim:
                out[bh, i, d] = acc[e] * inv

    return fused_rows_kernel


#: One kernel per dims_per_lane: D of 1-32, 33-64, 65-96, 97-128.
FUSED_ROWS_KERNELS = [fused_rows_kernel_for(n) for n in range(1, MAX_D // WARP + 1)]


def fused_rows_launches(q, k, v, out, causal: bool, scale: float) -> list[Launch]:
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    bhs, sq, dim = q3.shape
    kernel = fused_rows_kernel_for(dims_per_lane(dim))
    return [Launch(kernel, (ceil_div(bhs * sq, FUSED_WARPS),), (WARP, FUSED_WARPS),
                   (q3, k3, v3, o3, np.float32(scale), causal))]


@version("attention", check, kernels=FUSED_ROWS_KERNELS)
def fused_rows(q, k, v, out, causal=False, scale=None):
    """One kernel, a warp per query row: the online softmax keeps a running max, a running sum and the output row,
    rescaled when the max grows, so no score is ever stored."""
    return fused_rows_launches(q, k, v, out, causal, scale)
