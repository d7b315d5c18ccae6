"""Step 3 of the attention lesson, ``tiled``: FlashAttention's tiling -- a block of 32 query rows, K and V staged
through shared memory a tile of keys at a time, each tile used by all 32 rows.

``fused_rows`` reads all of K and V once per query row. Here a block owns TILE_ROWS = 32 query rows of one head and
walks the keys in tiles of ``tile_keys(D)`` (32, or 16 for D > 64 so that the tiles fit in 48 KB): the block's
threads copy a K tile and a V tile into shared memory together (coalesced: consecutive threads, consecutive floats
of a key's row), and all 32 rows read them there. K and V now come from global memory Sq / 32 times per head instead
of Sq times. Per tile, for each row:

    S = Q K_tile^T               scores of the row against the tile's keys, in registers
    m_new = max(m, max(S))       the online softmax of ``fused_rows``, a tile at a time:
    P = exp(S - m_new)           one rescale per tile, not per key
    l   = l   * exp(m - m_new) + sum(P)
    acc = acc * exp(m - m_new) + P V_tile

Who does what: 128 threads, ROW_THREADS = 4 per query row (4 consecutive lanes of one warp). For the scores, thread
``sub`` of a row takes keys sub, sub + 4, ... of the tile (``keys / 4`` scores in registers), reading Q from the
block's Q tile (staged once, times scale) and K from the K tile: 1 + keys / 4 shared loads per keys / 4 FMAs. The
row's max and sum over its 4 threads take 2 shuffles each (the softmax lesson's butterfly, ``reductions(4)``). For
P V, each thread owns dimensions sub, sub + 4, ... of the output row (D / 4 accumulators) and needs the whole row of
P: the 4 threads put their probabilities in a shared P tile, ``cuda.syncwarp()`` (the 4 are in one warp), and read it
back. Rows of the Q and K tiles are padded by one float, so the 8 rows a warp reads at one dimension sit in 8 banks.

Masking: keys past Sk and, under the causal mask, keys after the row's query score -inf (weight 0). A row can meet a
tile with nothing but such keys (under the causal mask, the block's last tile for its first rows); its max is
already finite then, as every row sees key 0 in the first tile. Should a row ever start with such a tile (a mask
aligned otherwise), its max would still be -inf and exp(-inf - (-inf)) NaN, so the exponentials are taken against
0 instead -- every weight 0, nothing added -- rather than rely on the alignment.
K/V tiles that are masked for *every* row of the block -- all keys after the block's last query -- are not loaded
at all: under the causal mask the block of queries 32t .. 32t + 31 walks keys 0 .. 32t + 31 only, so at Sq = Sk
the blocks do about half the work of the unmasked product. Blocks are numbered last query tile first, so that the
longest walks start first.

Every barrier is reached by all 128 threads: rows past Sq compute (on zeros) and only skip the final store.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ..softmax import reductions
from ._common import MAX_D, check, heads

TILE_ROWS = 32  # query rows per block
ROW_THREADS = 4  # threads per query row: 4 consecutive lanes of one warp
TILED_THREADS = TILE_ROWS * ROW_THREADS  # 128
row_reduce, _ = reductions(ROW_THREADS)  # butterfly over the 4 lanes of a row: 2 shuffles


def padded_dims(d: int) -> int:
    """The tiles' width for rows of D values: the power of two >= D, at least 16 (16, 32, 64 or 128). Loops over the
    dimensions of the scores stop at D; the padding is zeros written into the tiles (never read from global memory),
    and the accumulators of padded dimensions are never stored."""
    return max(16, 1 << (d - 1).bit_length())


def tile_keys(dp: int) -> int:
    """Keys per K/V tile for tiles ``dp`` wide: 32, or 16 at dp = 128, where Q (32 x 129), K (32 x 129), V (32 x 128)
    and P (32 x 33) tiles of floats would take 53,632 bytes, past the 49,152 (48 KB) of static shared memory a block
    may have; with 16 keys they take 35,136."""
    return 32 if dp <= 64 else 16


@functools.cache
def tiled_kernel_for(dp: int):
    """The tiled kernel for tiles ``dp`` wide (a compile-time constant, as is everything derived from it)."""
    bk = tile_keys(dp)
    kpt = bk // ROW_THREADS  # scores per thread per tile
    dpt = dp // ROW_THREADS  # output dimensions per thread
    pitch, p_pitch = dp + 1, bk + 1  # padded rows of the Q and K tiles, and of the P tile (plain ints: constants)

    @cuda.jit
    def tiled_kernel(q, k, v, out, scale, causal):
        # q, out: (BH, Sq, D), k, v: (BH, Sk, D). Block x owns TILE_ROWS query rows of head bh.
        qs = cuda.shared.array((TILE_ROWS, pitch), float32)  # the block's queries, times scale
        ks = cuda.shared.array((bk, pitch), float32)  # a tile of keys
        vs = cuda.shared.array((bk, dp), float32)  # their values
        ps = cuda.shared.array((TILE_ROWS, p_pitch), float32)  # the rows' probabilities for the tile
        s = cuda.local.array(kpt, float32)  # this thread's scores (then probabilities) of the tile
        acc = cuda.local.array(dpt, float32)  # this thread's dimensions of sum_j exp(s_j - m) v[j, :]
        t = cuda.threadIdx.x
        row, sub = t // ROW_THREADS, t % ROW_THREADS
        bhs, sq, dim = q.shape
        sk = k.shape[1]
        bh = cuda.blockIdx.x % bhs
        q_tiles = (sq + TILE_ROWS - 1) // TILE_ROWS
        q0 = (q_tiles - 1 - cuda.blockIdx.x // bhs) * TILE_ROWS  # the last query tile first
        i = q0 + row  # this thread's query

        for e in range(t, TILE_ROWS * dp, TILED_THREADS):  # stage Q (zeros past Sq and D)
            rr, d = e // dp, e % dp
            qs[rr, d] = q[bh, q0 + rr, d] * scale if q0 + rr < sq and d < dim else float32(0.0)
        for e in range(dpt):
            acc[e] = float32(0.0)
        m = float32(-math.inf)
        l = float32(0.0)
        # Under the causal mask the block's last query, q0 + TILE_ROWS - 1, sees keys up to itself: tiles after
        # that are masked for every row of the block and are skipped.
        keys = min(sk, q0 + TILE_ROWS) if causal else sk
        for k0 in range(0, keys, bk):
            cuda.syncthreads()  # every thread is done with the previous tile (and, the first time, Q is staged)
            for e in range(t, bk * dp, TILED_THREADS):  # stage the K and V tiles (zeros past Sk and D)
                jj, d = e // dp, e % dp
                inside = k0 + jj < sk and d < dim
                ks[jj, d] = k[bh, k0 + jj, d] if inside else float32(0.0)
                vs[jj, d] = v[bh, k0 + jj, d] if inside else float32(0.0)
            cuda.syncthreads()

            # S = Q K^T for this thread's keys sub, sub + 4, ...: per dimension one load of Q (shared by the 4
            # threads of the row) and kpt loads of K
            for c in range(kpt):
                s[c] = float32(0.0)
            for d in range(dim):
                qd = qs[row, d]
                for c in range(kpt):
                    s[c] += qd * ks[sub + ROW_THREADS * c, d]
            tile_max = float32(-math.inf)
            for c in range(kpt):
                j = k0 + sub + ROW_THREADS * c
                if j >= sk or (causal and j > i):
                    s[c] = float32(-math.inf)  # past the keys, or masked: weight exp(-inf) = 0
                tile_max = max(tile_max, s[c])
            m_new = max(m, row_reduce(tile_max, True))
            # A row that has seen no visible key would keep m = -inf: exp(-inf - (-inf)) is NaN, exp(-inf - 0) is 0.
            base = m_new if m_new != -math.inf else float32(0.0)
            alpha = math.exp(m - base)  # rescales what was summed so far; 0 before the first key
            tile_sum = float32(0.0)
            for c in range(kpt):
                s[c] = math.exp(s[c] - base)
                tile_sum += s[c]
                ps[row, sub + ROW_THREADS * c] = s[c]
            l = l * alpha + row_reduce(tile_sum, False)
            m = m_new
            cuda.syncwarp()  # the row's 4 threads (one warp) have written their probabilities

            # acc = acc * alpha + P V: every key of the tile, for this thread's dimensions sub, sub + 4, ...
            for e in range(dpt):
                acc[e] *= alpha
            for jj in range(bk):
                p = ps[row, jj]
                for e in range(dpt):
                    acc[e] += p * vs[jj, sub + ROW_THREADS * e]

        if i < sq:
            inv = float32(1.0) / l
            for e in range(dpt):
                d = sub + ROW_THREADS * e
                if d < dim:
                    out[bh, i, d] = acc[e] * inv

    tiled_kernel.tile = (TILE_ROWS, bk, dp)
    return tiled_kernel


#: One kernel per tile width: D of 1-16, 17-32, 33-64, 65-128.
TILED_KERNELS = [tiled_kernel_for(dp) for dp in (16, 32, 64, MAX_D)]


def tiled_launches(q, k, v, out, causal: bool, scale: float) -> list[Launch]:
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    bhs, sq, dim = q3.shape
    kernel = tiled_kernel_for(padded_dims(dim))
    # one block per (query tile, head), heads fastest: block x is head x % BH of query tile (last first) x // BH
    return [Launch(kernel, (bhs * ceil_div(sq, TILE_ROWS),), (TILED_THREADS,),
                   (q3, k3, v3, o3, np.float32(scale), causal))]


@version("attention", check, kernels=TILED_KERNELS)
def tiled(q, k, v, out, causal=False, scale=None):
    """FlashAttention's tiling: a block of 32 query rows walks the keys in tiles staged in shared memory, each tile
    read from global memory once and used by all 32 rows, with the online softmax a tile at a time."""
    return tiled_launches(q, k, v, out, causal, scale)
