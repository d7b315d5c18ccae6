"""Step 8 of the attention lesson, ``split_keys_f16``: decoding in float16 -- few queries against a long cache of keys
-- with the keys split into slices, each slice's partial softmax state computed on the tensor cores, and the states
merged: ``split_keys`` (step 7) done with ``pipelined``'s (step 5) tile loop.

``pipelined`` gives each (query tile, head) one block that walks all the keys. At decoding shapes -- 1 to 4 queries
per head, thousands of keys -- that is one block per head: (B, H, Sq, Sk, D) = (1, 32, 1, 8192, 128) launches 32
blocks for an H100's 132 SMs, and each walks 128 K/V tiles with one tile's copy in flight at a time. Decoding reads
K and V once and does 4 FLOPs per key and dimension of a query against the 4 bytes of K and V (float16): 1 FLOP per
byte for one query. It should run at the memory's speed, and 32 SMs with one tile in flight each cannot pull that.

So the keys of each head are cut into ``splits`` slices of ``chunk`` keys, a whole number of K/V tiles, and a block
per (query tile, head, slice) -- the grid's y -- walks its slice with ``pipelined``'s loop
(`gpukernels.attention.k05_pipelined.tile_walk`: K and V copied by cp.async, S = Q K^T and O += P V by mma.sync,
the online softmax on the fragments). Instead of O / l it writes its *partial state*, as ``split_keys``' warps do:
the rows' max m, their sums l and the unnormalised accumulators acc. ``split_keys``' merge kernel then merges each
row's states by the online softmax's rescale (`gpukernels.attention.k07_split_keys.merge_kernel_for`)::

    M = max_s m_s,   L = sum_s l_s exp(m_s - M),   out = sum_s acc_s exp(m_s - M) / L

The tile loop keeps m in log2 units (its weights are 2^(s scale log2 e - m)), so m is written times ln 2: the merge's
exp(m_s - M) is then 2^(m_s / ln 2 - M / ln 2), the same rescale.

A block holds one warp, 16 query rows: with few queries the other warps of ``pipelined``'s block (4, or 8 past D =
96) would only copy, and each thread holds 220 registers at D = 128 (ptxas for sm_90, 2026-12-07) -- one such block
per SM. A block of one warp holds one K and one V tile in shared memory (35 KB at D = 128), so an SM runs several
(`gpukernels resources` reports how many), each with its own copies in flight. ``slices_for`` picks enough slices
for SLICE_BLOCKS blocks per SM, each slice at least MIN_TILES K/V tiles (MIN_CHUNK keys, as ``split_keys``' runs).

A slice with no key for some row -- under the causal mask, past that query's last key, or a block's whole slice past
its queries (a query tile of an early query sees few keys) -- has m = -inf, l = 0 and acc = 0: weight exp(-inf - M) = 0
in the merge. A block whose slice starts past its last visible key walks nothing and writes that empty state. Every
query sees key 0, which is in slice 0, so M is finite and L > 0. The partial states are B*H*Sq*splits*(D + 2) floats:
at 1 x 32 x 1 x 8192 x 128 in 16 slices, 266 KB beside the 134 MB of K and V.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types, uint32

from .._intrinsics import address
from .._launch import Launch, ceil_div, version
from ._common import MAX_D, check_half, heads
from .k04_mma import fragment_steps
from .k05_pipelined import KEYS, LOG2E, block_place, pipelined_launches, tile_walk
from .k07_split_keys import MIN_CHUNK, merge_kernel_for, merge_launch, partial_states, splits_for

SPLIT_WARPS = 1  # warps per block: 16 query rows, all a decoding step has (the m16 tile of the mma)
MIN_TILES = MIN_CHUNK // KEYS  # K/V tiles per slice at least: 4 of 64 keys, split_keys' runs of 256
#: blocks of one warp per SM that the slices aim for. Each has one K or V tile's copy in flight (16 KB at D = 128);
#: Hopper's 228 KB of shared memory holds 6 of their 35 KB at D = 128. A prediction until a GPU run times this step.
SLICE_BLOCKS = 4
LN2 = math.log(2.0)


def slices_for(blocks: int, tiles: int, sms: int | None = None) -> int:
    """Slices of a head's keys: enough (query tile, head, slice) blocks to give every SM SLICE_BLOCKS, but no slice
    shorter than MIN_TILES K/V tiles (`split_keys.splits_for`, with blocks for warps and tiles for keys); 1 when the
    blocks fill the GPU by themselves."""
    return splits_for(blocks, tiles, sms, per_sm=SLICE_BLOCKS, least=MIN_TILES)


@functools.cache
def split_keys_f16_kernel_for(d: int):
    """The partial-state kernel for head dimension ``d`` (a multiple of 16): ``pipelined``'s tile loop over one slice
    of the keys, then the state written out."""
    nd, no, ns = d // 16, d // 8, KEYS // 8  # k16 slices of a row; 8-wide n-tiles of O; 8-key n-tiles of S
    tile = KEYS * (d + 8)  # a K or V tile: KEYS rows of d halves + 16 bytes (`pipelined`)
    rows, threads = 16 * SPLIT_WARPS, 32 * SPLIT_WARPS
    load_q, _, _ = fragment_steps(d)
    walk = tile_walk(d, SPLIT_WARPS)
    place = block_place(d, rows, threads)

    @cuda.jit(fastmath=True)
    def split_keys_f16_kernel(q, k, v, pm, pl, pacc, scale2, causal, chunk):
        # q, k, v: (BH, S, D) float16; pm, pl: (BH * Sq, splits), pacc: (BH * Sq, splits, D) float32; scale2 = scale *
        # log2(e). Block (x, y): the query tile and head of `block_tile`, keys y * chunk .. + chunk - 1 (chunk a
        # multiple of KEYS); lane 4 g + t rows g, g + 8 of the tile.
        ks = cuda.shared.array(tile, types.float16, alignment=16)
        vs = cuda.shared.array(tile, types.float16, alignment=16)
        qf = cuda.local.array((nd, 4), uint32)
        s = cuda.local.array((ns, 4), float32)
        acc = cuda.local.array((no, 4), float32)
        warp, g, t, j8, r8, sq, sk, bh, q0, cr, cc = place(q, k)
        w0 = q0 + 16 * warp  # the warp's first query
        row = w0 + g
        base = bh * sk * d + cc
        run = cuda.blockIdx.y
        j0 = run * chunk
        j1 = min(min(sk, q0 + rows) if causal else sk, j0 + chunk)  # the slice, cut at the block's last visible key

        load_q(q, bh, row, t, qf, acc)
        m0 = m1 = float32(-math.inf)  # a slice past every key the block sees: the empty state, weight 0 in the merge
        l0 = l1 = float32(0.0)
        if j0 < j1:  # the same for the whole block: its barriers are reached by every thread or by none
            m0, m1, l0, l1 = walk(k, v, ks, vs, qf, s, acc, base, j0, j1, sq, sk, w0, row, t, j8, r8, cr, cc, causal,
                                  scale2)

        # The state: each row's sum over its 4 lanes, its max in natural units (the merge takes exp(m_s - M)), and
        # the unnormalised accumulators -- element e of n-tile n is (row + 8 (e >> 1), 8 n + 2t + (e & 1))
        for off in (1, 2):
            l0 += cuda.shfl_xor_sync(0xFFFFFFFF, l0, off)
            l1 += cuda.shfl_xor_sync(0xFFFFFFFF, l1, off)
        r = bh * sq + row
        if t == 0:
            if row < sq:
                pm[r, run] = m0 * LN2
                pl[r, run] = l0
            if row + 8 < sq:
                pm[r + 8, run] = m1 * LN2
                pl[r + 8, run] = l1
        for n in range(no):
            c = 8 * n + 2 * t
            if row < sq:
                pacc[r, run, c] = acc[n, 0]
                pacc[r, run, c + 1] = acc[n, 1]
            if row + 8 < sq:
                pacc[r + 8, run, c] = acc[n, 2]
                pacc[r + 8, run, c + 1] = acc[n, 3]

    split_keys_f16_kernel.tile = (rows, KEYS, d)
    split_keys_f16_kernel.threads = threads
    return split_keys_f16_kernel


#: One partial-state kernel per head dimension D = 16, 32, ..., 128 (the merge is split_keys' kernel).
SPLIT_KEYS_F16_KERNELS = [split_keys_f16_kernel_for(d) for d in range(16, MAX_D + 1, 16)]


def split_plan(heads: int, sq: int, sk: int, causal: bool, sms: int | None = None, splits: int | None = None) -> dict:
    """``{"splits": ..., "chunk": ...}`` for ``heads`` (B * H) heads of ``sq`` queries against ``sk`` keys: the keys
    the longest-seeing query tile walks (all Sk; causal, up to the last query), in `slices_for` slices (or about
    ``splits``) of a whole number of K/V tiles, none of them wholly past those keys."""
    keys = min(sk, sq) if causal else sk  # the most keys a query sees (top-left mask: query i sees i + 1)
    tiles = ceil_div(keys, KEYS)
    splits = splits or slices_for(heads * ceil_div(sq, 16 * SPLIT_WARPS), tiles, sms)
    per = ceil_div(tiles, min(splits, tiles))  # K/V tiles per slice
    return {"splits": ceil_div(tiles, per), "chunk": per * KEYS}


def split_keys_f16_launches(q, k, v, out, causal: bool, scale: float, splits: int | None = None) -> list[Launch]:
    """The partial states' launch, a block per (query tile of 16, head, slice), then the merge (``splits``: about that
    many slices instead of `split_plan`'s). K and V not on 16-byte boundaries cannot be copied by cp.async:
    ``pipelined``'s launch takes them (step 4's kernel)."""
    q3, k3, v3 = heads(q), heads(k), heads(v)
    if address(k3) % 16 or address(v3) % 16:
        return pipelined_launches(q, k, v, out, causal, scale)
    bhs, sq, dim = q3.shape
    layout = split_plan(bhs, sq, k3.shape[1], causal, splits=splits)
    pm, pl, pacc = partial_states(out, layout["splits"])
    kernel = split_keys_f16_kernel_for(dim)
    return [Launch(kernel, (bhs * ceil_div(sq, kernel.tile[0]), layout["splits"]), (kernel.threads,),
                   (q3, k3, v3, pm, pl, pacc, np.float32(scale * LOG2E), causal, np.int64(layout["chunk"]))),
            merge_launch(pm, pl, pacc, out)]


@version("attention", check_half, kernels=SPLIT_KEYS_F16_KERNELS + [merge_kernel_for(n) for n in range(1, 5)])
def split_keys_f16(q, k, v, out, causal=False, scale=None):
    """Float16 decoding: each head's keys cut into slices of whole K/V tiles, a one-warp block per (query tile, head,
    slice) running pipelined's tensor-core loop over its slice and writing its partial softmax state (m, l, acc); then
    split_keys' kernel merges each row's states."""
    return split_keys_f16_launches(q, k, v, out, causal, scale)
