"""Step 1 of the attention lesson, ``naive``: attention as three passes through global memory, the score matrix
S = Q K^T * scale written out in full.

The definition, kernel by kernel:

1. ``scores_kernel``: one thread per score, S[bh, i, j] = scale * sum_d q[bh, i, d] * k[bh, j, d], or -inf where
   the causal mask hides key j from query i. S is a scratch array of (B*H*Sq, Sk) floats in global memory.
2. the softmax lesson's dispatcher (``softmax.optimized``) over the rows of S, turning each row of scores into
   probabilities P -- in place: every softmax step reads an element and writes it from the same thread (split_row:
   in its second launch, after the first has read it), so P can overwrite S.
3. ``pv_kernel``: one thread per output element, out[bh, i, d] = sum_j P[bh, i, j] * v[bh, j, d].

S is the point of this step. It holds B*H*Sq*Sk floats: at (8, 16, 4096, 4096) that is 2^31 floats, 8.6 GB,
written once, then read and written by the softmax, then read again by the product with V -- 34 GB of traffic
against the 1.1 GB of q, k, v and out. Every later step computes the same numbers without ever storing a score.
Under the causal mask the scores kernel still visits every pair and the softmax still reads every -inf: nothing
here knows that half the matrix is masked.

Traffic in S, per score: written by the scores kernel, read and written by the softmax, read by the product (by
the D threads of its row together): 16 bytes. And the loads of the scores kernel are not coalesced: consecutive
threads take consecutive keys j, whose rows of k are 4*D bytes apart.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from .. import softmax
from .._launch import Launch, ceil_div, is_device_array, version
from ._common import check, heads

NAIVE_THREADS = 256


@cuda.jit
def scores_kernel(q, k, s, scale, causal):
    # q: (BH, Sq, D), k: (BH, Sk, D), s: (BH*Sq, Sk). Thread idx owns s[r, j], row r = bh * Sq + i. Loads per score:
    # D of q (the same for the threads of a row: a broadcast) and D of k (a row of k per thread: uncoalesced).
    idx = cuda.grid(1)
    rows, sk = s.shape
    if idx < rows * sk:
        r = idx // sk
        j = idx - r * sk
        sq = q.shape[1]
        bh = r // sq
        i = r - bh * sq
        if causal and j > i:
            s[r, j] = float32(-math.inf)  # the causal mask: query i sees keys 0..i only (exp(-inf) = 0)
        else:
            acc = float32(0.0)
            for d in range(q.shape[2]):
                acc += q[bh, i, d] * k[bh, j, d]
            s[r, j] = acc * scale


@cuda.jit
def pv_kernel(p, v, out):
    # p: (BH*Sq, Sk) probabilities, v: (BH, Sk, D), out: (BH, Sq, D). Thread idx owns out[bh, i, d]; consecutive
    # threads take consecutive d: their loads of v are coalesced, their loads of p a broadcast. Sk loads of each.
    idx = cuda.grid(1)
    bhs, sq, dim = out.shape
    if idx < bhs * sq * dim:
        r = idx // dim
        d = idx - r * dim
        bh = r // sq
        i = r - bh * sq
        acc = float32(0.0)
        for j in range(p.shape[1]):
            acc += p[r, j] * v[bh, j, d]
        out[bh, i, d] = acc


def naive_launches(q, k, v, out, causal: bool, scale: float) -> list[Launch]:
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    bh, sq, dim = q3.shape
    sk = k3.shape[1]
    # The scratch S, (B*H*Sq, Sk) float32. A plan made for host arrays (`Version.launches`, which only reports the
    # configuration) gets a host array of the same shape.
    s = (cuda.device_array if is_device_array(q) else np.empty)((bh * sq, sk), np.float32)
    n_scores, n_out = bh * sq * sk, bh * sq * dim
    return ([Launch(scores_kernel, (ceil_div(n_scores, NAIVE_THREADS),), (NAIVE_THREADS,),
                    (q3, k3, s, np.float32(scale), causal))]
            + softmax.optimized.plan(s, s)  # the softmax lesson's kernels, rows of Sk scores, in place
            + [Launch(pv_kernel, (ceil_div(n_out, NAIVE_THREADS),), (NAIVE_THREADS,), (s, v3, o3))])


@version("attention", check, kernels=[scores_kernel, pv_kernel])
def naive(q, k, v, out, causal=False, scale=None):
    """Three passes through global memory: the scores S = Q K^T * scale stored in full, the softmax lesson's kernel
    over each row of S, then P V."""
    return naive_launches(q, k, v, out, causal, scale)
