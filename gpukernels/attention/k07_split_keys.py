"""Step 7 of the attention lesson, ``split_keys``: decoding -- few queries against a long cache of keys -- with the keys
split across warps and the parts merged (FlashAttention's "flash-decoding").

When a model generates text it attends with one new query per head (Sq = 1) to every key so far. ``fused_rows``
gives that query row one warp, and the warp walks all the keys alone: at 8 x 32 heads, 256 warps for an H200 that
holds 132 x 24 of them -- 2 per SM, each waiting on one key's loads at a time. Decoding reads K and V once and does
4 FLOPs per byte: it should run at the memory's speed, and a hundredth of the GPU cannot pull that.

So the keys of each row are split into ``splits`` runs of ``chunk`` keys, one warp per (row, run): enough warps to
fill every SM (`splits_for`). Each warp runs ``fused_rows``' loop (`k02_fused_rows.key_walk`) over its run and
writes its *partial state* instead of an output row: its running max m_s, its sum l_s = sum_j exp(s_j - m_s) and
its unnormalised acc_s = sum_j exp(s_j - m_s) v[j, :]. A second kernel merges a row's states, a warp per row:

    M = max_s m_s,   L = sum_s l_s exp(m_s - M),   out = sum_s acc_s exp(m_s - M) / L

-- the online softmax's rescale once more, now between warps instead of between keys (the exercise
``11_softmax_merge`` asks for exactly this merge). A run with no key (past a query's last key under the causal mask)
has m = -inf, l = 0 and acc = 0, so exp(m_s - M) = 0 drops it; M is finite, as every query sees key 0, which is in
run 0. The partial states are B*H*Sq*splits*(D + 2) floats: at 8 x 32 x 1 x 32768 x 128 with 13 runs, 1.7 MB
written and read back beside the 8.6 GB of K and V.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .._launch import Launch, ceil_div, is_device_array, sm_count, version
from ..softmax import WARP
from ._common import check, heads
from .k02_fused_rows import FUSED_WARPS, dims_per_lane, key_walk

ROW_WARPS = 24  # warps an SM holds of fused_rows' loop (76 registers: 6 blocks of 4 warps)
MIN_CHUNK = 256  # keys per run at least: a shorter run is mostly the partial state's write and merge


def splits_for(rows: int, keys: int, sms: int | None = None, per_sm: int = ROW_WARPS, least: int = MIN_CHUNK) -> int:
    """Runs of keys per query row: enough (row, run) warps to fill the GPU's SMs with ``per_sm`` (ROW_WARPS) each, but
    no run shorter than ``least`` (MIN_CHUNK) keys; 1 when the rows fill the GPU by themselves. (``split_keys_f16``
    asks the same of its blocks and K/V tiles.)"""
    sms = sms or sm_count()
    return max(1, min(ceil_div(sms * per_sm, max(rows, 1)), keys // least))


@functools.cache
def split_keys_kernel_for(dpl: int):
    """The partial-state kernel for rows of up to 32 * ``dpl`` dimensions."""
    walk = key_walk(dpl)

    @cuda.jit
    def split_keys_kernel(q, k, v, pm, pl, pacc, scale, causal, chunk):
        # q: (BH, Sq, D), k, v: (BH, Sk, D); pm, pl: (rows, splits), pacc: (rows, splits, D). Warp y of block b owns
        # pair p = b * FUSED_WARPS + y: row p // splits, its keys (p % splits) * chunk .. + chunk - 1
        acc = cuda.local.array(dpl, float32)
        lane = cuda.threadIdx.x
        splits = pm.shape[1]
        p = cuda.blockIdx.x * FUSED_WARPS + cuda.threadIdx.y
        bhs, sq, dim = q.shape
        if p >= bhs * sq * splits:
            return  # a whole warp past the last pair: no barrier, and its lanes shuffle only with each other
        r = p // splits
        run = p - r * splits
        bh = r // sq
        i = r - bh * sq
        keys = min(k.shape[1], i + 1) if causal else k.shape[1]
        j0 = run * chunk
        m, l = walk(q, k, v, bh, i, scale, j0, min(keys, j0 + chunk), lane, dim, acc)
        if lane == 0:
            pm[r, run] = m
            pl[r, run] = l
        for e in range(dpl):
            d = lane + WARP * e
            if d < dim:
                pacc[r, run, d] = acc[e]

    return split_keys_kernel


@functools.cache
def merge_kernel_for(dpl: int):
    """The kernel that merges each row's partial states into its output row, a warp per row."""

    @cuda.jit
    def merge_kernel(pm, pl, pacc, out):
        acc = cuda.local.array(dpl, float32)
        lane = cuda.threadIdx.x
        r = cuda.blockIdx.x * FUSED_WARPS + cuda.threadIdx.y
        bhs, sq, dim = out.shape
        if r >= bhs * sq:
            return
        splits = pm.shape[1]
        top = float32(-math.inf)
        for s in range(splits):
            top = max(top, pm[r, s])
        total = float32(0.0)
        for e in range(dpl):
            acc[e] = float32(0.0)
        for s in range(splits):
            w = math.exp(pm[r, s] - top)  # 0 for a run without keys (m = -inf)
            total += pl[r, s] * w
            for e in range(dpl):
                d = lane + WARP * e
                if d < dim:
                    acc[e] += pacc[r, s, d] * w
        inv = float32(1.0) / total
        bh = r // sq
        i = r - bh * sq
        for e in range(dpl):
            d = lane + WARP * e
            if d < dim:
                out[bh, i, d] = acc[e] * inv

    return merge_kernel


#: One kernel of each kind per dims_per_lane: D of 1-32, 33-64, 65-96, 97-128.
SPLIT_KEYS_KERNELS = [f(n) for n in range(1, 5) for f in (split_keys_kernel_for, merge_kernel_for)]


def partial_states(out, splits: int) -> tuple:
    """``(pm, pl, pacc)``: room for ``splits`` partial states of each of out's rows -- (rows, splits), (rows, splits)
    and (rows, splits, D) float32, on the device where ``out`` is."""
    b, h, sq, dim = out.shape
    alloc = cuda.device_array if is_device_array(out) else np.empty
    rows = b * h * sq
    return alloc((rows, splits), np.float32), alloc((rows, splits), np.float32), alloc((rows, splits, dim), np.float32)


def merge_launch(pm, pl, pacc, out) -> Launch:
    """The launch of `merge_kernel_for` that merges each row's states into ``out`` (B, H, Sq, D), a warp per row."""
    o3 = heads(out)
    return Launch(merge_kernel_for(dims_per_lane(o3.shape[2])), (ceil_div(pm.shape[0], FUSED_WARPS),),
                  (WARP, FUSED_WARPS), (pm, pl, pacc, o3))


def split_keys_launches(q, k, v, out, causal: bool, scale: float, splits: int | None = None) -> list[Launch]:
    q3, k3, v3 = heads(q), heads(k), heads(v)
    bhs, sq, dim = q3.shape
    rows = bhs * sq
    keys = min(k3.shape[1], sq) if causal else k3.shape[1]  # the most keys a row sees
    splits = splits or splits_for(rows, keys)
    chunk = ceil_div(keys, splits)
    pm, pl, pacc = partial_states(out, splits)
    return [Launch(split_keys_kernel_for(dims_per_lane(dim)), (ceil_div(rows * splits, FUSED_WARPS),),
                   (WARP, FUSED_WARPS), (q3, k3, v3, pm, pl, pacc, np.float32(scale), causal, np.int64(chunk))),
            merge_launch(pm, pl, pacc, out)]


@version("attention", check, kernels=SPLIT_KEYS_KERNELS)
def split_keys(q, k, v, out, causal=False, scale=None):
    """Decoding: each query row's keys split into runs, a warp per (row, run) walking its run as fused_rows does and
    writing its partial softmax state (m, l, acc); a second kernel merges each row's states."""
    return split_keys_launches(q, k, v, out, causal, scale)
