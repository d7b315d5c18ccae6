"""Step 4 of the attention lesson, ``mma``: FlashAttention-2 on tensor cores -- both products of the tile loop, Q K^T
and P V, as ``mma.sync`` instructions on float16, with the online softmax done on the mma's own output registers.

Inputs are float16 (``q.astype(np.float16)``), the output float32; D a multiple of 16 up to 128. The tensor-core
ladder (``gpukernels.tensor_core``) and `gpukernels._mma` explain the instructions; here they meet the online softmax
of ``tiled``.

Who does what: a block of 4 warps owns 64 query rows of one head, **each warp 16 rows** -- the M of one m16n8k16 mma.
The warp's Q rows are its A operand, 16 x D: D / 16 fragments of 4 words, loaded from global memory once and kept
in registers. The block walks the keys in tiles of 64, staging the K tile and the V tile (64 x D float16 each, rows
padded by 16 bytes) in shared memory; per tile, each warp on its own:

1. **S = Q K^T** (16 x 64, float32): 8 n-tiles of 8 keys, each the sum of D / 16 mmas. B = K^T is D x 64; its
   fragment holds B[k, n] = K[n, k] for key n = lane / 4 and dimensions 2 (lane % 4) and +1 -- two *adjacent halves of
   row n of K*. So K, row-major (keys x D), is K^T in the mma's "col" layout, and a plain ``ldmatrix.x4`` on 8-key x
   8-dimension matrices of the K tile hands out B fragments directly (two n-tiles x two halves of the k16 slice).
2. **The online softmax on the C fragments.** Lane 4 g + t holds, of every n-tile, row g at keys 2t, 2t + 1 and row
   g + 8 at the same keys (`gpukernels._mma.c_frag_coords`). Its scores are scaled, keys past Sk or after the row's
   query (causal) set to -inf, and a row's max over the tile is the max of the lane's 16 values of it and then over
   the 4 lanes of its group (``shfl_xor`` 1 and 2). With m_new, everything so far is rescaled by exp(m_old - m_new)
   -- the accumulators and the running sum l -- and P = exp(S - m_new). Each lane keeps l for its own keys only: the
   rescale is the same in the 4 lanes of a row, so their parts add up once, at the end (2 shuffles per row, not per
   tile).
3. **P as an A fragment, in registers.** P V needs P (16 x 64) as the A operand of k16 slices. The C fragment of
   n-tiles 2j and 2j + 1 gives a lane rows g, g + 8 at keys 16 j + 2t, +1 and 16 j + 8 + 2t, +1; the A fragment of the
   slice of keys 16 j .. 16 j + 15 wants (`a_frag_coords`) a0 a1 = (g, 2t..2t+1), a2 a3 = (g + 8, 2t..), a4 a5 = (g,
   8 + 2t..), a6 a7 = (g + 8, 8 + 2t..) -- **the same elements in the same lane**:

       A word 0 = pack(c0, c1) of n-tile 2j        A word 2 = pack(c0, c1) of n-tile 2j + 1
       A word 1 = pack(c2, c3) of n-tile 2j        A word 3 = pack(c2, c3) of n-tile 2j + 1

   So P never goes through shared memory (``tiled`` wrote it there for the row's 4 threads): 4 conversions to
   float16 and it is the next mma's input.
4. **O += P V**: B = V tile (keys x D), row-major, k-major for the mma. Its fragment wants two keys of one dimension
   in a word -- a column of V -- which is what ``ldmatrix.x4.trans`` gives from the V tile's rows (as ``tensor_core``
   step 2 reads B), two n-tiles of 8 dimensions per instruction.

At the end each row's l is summed over its 4 lanes and O / l stored (rows past Sq are not). Numerics: the scores,
the softmax and the accumulators are float32; P is rounded to float16 for the second mma (l sums the unrounded P):
each weight is off by up to 2^-11 relative, and the output by about 2e-4 (standard normal inputs, D = 16 to 128)
against float64 of the same float16 inputs -- the tests allow 1e-2.
Under the causal mask K/V tiles after the block's last query are skipped, as in ``tiled``. Every lane of a warp runs
every mma, ldmatrix and shuffle (they are warp-collective): warps and rows past Sq compute on zeros and only the
loads and the store are guarded.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types, uint32

from .._launch import Launch, ceil_div, version
from .._mma import ldmatrix_x4, ldmatrix_x4_trans, mma_f16, pack_half2
from ._common import MAX_D, check_half, heads

MMA_WARPS = 4  # warps per block, 16 query rows each
MMA_ROWS = 16 * MMA_WARPS  # 64 query rows per block
MMA_KEYS = 64  # keys per K/V tile: 8 n-tiles of the scores, 4 k16 slices of P V
MMA_THREADS = 32 * MMA_WARPS


@cuda.jit(device=True, forceinline=True)
def half_at(x, bh, i, d):
    # x[bh, i, d], or 0 past the last row: a zero query row scores 0 against every key and is never stored
    if i < x.shape[1]:
        return x[bh, i, d]
    return np.float16(0)


@cuda.jit(device=True, forceinline=True)
def p_fragment(s, kk):
    # P's A fragment for keys 16 kk .. 16 kk + 15: the C fragments of score n-tiles 2 kk and 2 kk + 1, rounded to
    # float16 and packed in pairs (the same elements, in the same lane: the module's docstring, 3.)
    return (pack_half2(s[2 * kk, 0], s[2 * kk, 1]), pack_half2(s[2 * kk, 2], s[2 * kk, 3]),
            pack_half2(s[2 * kk + 1, 0], s[2 * kk + 1, 1]), pack_half2(s[2 * kk + 1, 2], s[2 * kk + 1, 3]))


@functools.cache
def fragment_steps(d: int):
    """The parts of the tile loop that ``mma`` and ``pipelined`` share, for head dimension ``d``, as device functions
    (inlined: the fragments stay in registers): ``load_q`` -- Q's A fragments from global memory, and the
    accumulators zeroed; ``add_pv`` -- O += P V for one K/V tile, P's A fragments packed from the score fragments
    ``s`` and V's B fragments read by ldmatrix.x4.trans from the tile ``vs``; ``store_rows`` -- each row's sum over
    its 4 lanes, then O / l stored (rows past Sq are not)."""
    nd, no = d // 16, d // 8
    pitch = d + 8

    @cuda.jit(device=True, forceinline=True)
    def load_q(q, bh, row, t, qf, acc):
        # Q's A fragments (a_frag_coords): words (row, 2t..), (row + 8, 2t..), (row, 8 + 2t..), (row + 8, 8 + 2t..)
        for kd in range(nd):
            c = 16 * kd + 2 * t
            qf[kd, 0] = pack_half2(half_at(q, bh, row, c), half_at(q, bh, row, c + 1))
            qf[kd, 1] = pack_half2(half_at(q, bh, row + 8, c), half_at(q, bh, row + 8, c + 1))
            qf[kd, 2] = pack_half2(half_at(q, bh, row, c + 8), half_at(q, bh, row, c + 9))
            qf[kd, 3] = pack_half2(half_at(q, bh, row + 8, c + 8), half_at(q, bh, row + 8, c + 9))
        for n in range(no):
            for e in range(4):
                acc[n, e] = float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def add_pv(s, vs, acc, r8, j8):
        # a k16 slice of keys at a time: P's A fragment is the C fragments of n-tiles 2 kk and 2 kk + 1 rounded to
        # float16; V's B fragments by ldmatrix.x4.trans -- matrices: keys +0..7 and +8..15 at dims +0..7 (b0 b1 of
        # n-tile 2p of O), then at dims +8..15 (of n-tile 2p + 1)
        for kk in range(MMA_KEYS // 16):
            a0, a1, a2, a3 = p_fragment(s, kk)
            for p in range(nd):
                b00, b01, b10, b11 = ldmatrix_x4_trans(
                    vs, (16 * kk + r8 + 8 * (j8 & 1)) * pitch + 16 * p + 8 * (j8 >> 1))
                acc[2 * p, 0], acc[2 * p, 1], acc[2 * p, 2], acc[2 * p, 3] = mma_f16(
                    a0, a1, a2, a3, b00, b01, acc[2 * p, 0], acc[2 * p, 1], acc[2 * p, 2], acc[2 * p, 3])
                acc[2 * p + 1, 0], acc[2 * p + 1, 1], acc[2 * p + 1, 2], acc[2 * p + 1, 3] = mma_f16(
                    a0, a1, a2, a3, b10, b11,
                    acc[2 * p + 1, 0], acc[2 * p + 1, 1], acc[2 * p + 1, 2], acc[2 * p + 1, 3])

    @cuda.jit(device=True, forceinline=True)
    def store_rows(out, acc, l0, l1, bh, row, t, sq):
        # element e of n-tile n is (row + 8 (e >> 1), 8 n + 2t + (e & 1))
        for off in (1, 2):
            l0 += cuda.shfl_xor_sync(0xFFFFFFFF, l0, off)
            l1 += cuda.shfl_xor_sync(0xFFFFFFFF, l1, off)
        inv0, inv1 = float32(1.0) / l0, float32(1.0) / l1
        for n in range(no):
            c = 8 * n + 2 * t
            if row < sq:
                out[bh, row, c] = acc[n, 0] * inv0
                out[bh, row, c + 1] = acc[n, 1] * inv0
            if row + 8 < sq:
                out[bh, row + 8, c] = acc[n, 2] * inv1
                out[bh, row + 8, c + 1] = acc[n, 3] * inv1

    return load_q, add_pv, store_rows


@functools.cache
def mma_kernel_for(d: int):
    """The kernel for head dimension ``d`` (a multiple of 16): the fragment counts are compile-time constants."""
    nd = d // 16  # k16 slices of a Q row (QK^T), and pairs of 8-dimension n-tiles of O (P V)
    no = d // 8  # 8-dimension n-tiles of O
    ns = MMA_KEYS // 8  # 8-key n-tiles of S
    pitch = d + 8  # a tile row: d halves + 16 bytes, so the 8 rows of an ldmatrix matrix fall in different banks
    tile = MMA_KEYS * pitch  # halves per tile (a plain int: shared array sizes are constants)
    load_q, add_pv, store_rows = fragment_steps(d)

    @cuda.jit
    def mma_kernel(q, k, v, out, scale, causal):
        # q, k, v: (BH, S, D) float16, out: (BH, Sq, D) float32. Block x: query rows q0 .. q0 + 63 of head bh;
        # warp w rows q0 + 16 w .. + 15; lane 4 g + t holds rows g and g + 8 of them.
        ks = cuda.shared.array(tile, types.float16, alignment=16)  # K tile, keys x D (row pitch ``pitch``)
        vs = cuda.shared.array(tile, types.float16, alignment=16)  # V tile, keys x D
        qf = cuda.local.array((nd, 4), uint32)  # Q's A fragments, one per k16 slice of D
        s = cuda.local.array((ns, 4), float32)  # the tile's scores, then probabilities: C fragments of 8 n-tiles
        acc = cuda.local.array((no, 4), float32)  # O: C fragments of D / 8 n-tiles
        tid = cuda.threadIdx.x
        warp, lane = tid >> 5, tid & 31
        g, t = lane >> 2, lane & 3
        j8, r8 = lane >> 3, lane & 7  # ldmatrix: lane 8 j + r gives the address of row r of matrix j
        bhs, sq, dim = q.shape
        sk = k.shape[1]
        bh = cuda.blockIdx.x % bhs
        q_tiles = (sq + MMA_ROWS - 1) // MMA_ROWS
        q0 = (q_tiles - 1 - cuda.blockIdx.x // bhs) * MMA_ROWS  # the last query tile first
        row = q0 + 16 * warp + g  # this lane's rows: row and row + 8

        # Q's A fragments (a_frag_coords): words (row, 2t..), (row + 8, 2t..), (row, 8 + 2t..), (row + 8, 8 + 2t..)
        load_q(q, bh, row, t, qf, acc)
        m0 = m1 = float32(-math.inf)  # running max of rows row and row + 8
        l0 = l1 = float32(0.0)  # this lane's part of their running sums

        keys = min(sk, q0 + MMA_ROWS) if causal else sk  # causal: tiles after the block's last query are skipped
        for k0 in range(0, keys, MMA_KEYS):
            cuda.syncthreads()  # every warp is done with the previous tile
            for e in range(tid, MMA_KEYS * d, MMA_THREADS):  # stage K and V (zero rows past Sk)
                jj, c = e // d, e % d
                inside = k0 + jj < sk
                ks[jj * pitch + c] = k[bh, k0 + jj, c] if inside else np.float16(0)
                vs[jj * pitch + c] = v[bh, k0 + jj, c] if inside else np.float16(0)
            cuda.syncthreads()

            # 1. S = Q K^T: per pair of n-tiles (16 keys) and k16 slice, one ldmatrix.x4 -- matrices: keys +0..7 at
            # dims +0..7 and +8..15 (b0 b1 of n-tile 2p), then keys +8..15 (of n-tile 2p + 1) -- and two mmas
            for n in range(ns):
                for e in range(4):
                    s[n, e] = float32(0.0)
            for p in range(ns // 2):
                for kd in range(nd):
                    b00, b01, b10, b11 = ldmatrix_x4(ks, (16 * p + r8 + 8 * (j8 >> 1)) * pitch + 16 * kd + 8 * (j8 & 1))
                    s[2 * p, 0], s[2 * p, 1], s[2 * p, 2], s[2 * p, 3] = mma_f16(
                        qf[kd, 0], qf[kd, 1], qf[kd, 2], qf[kd, 3], b00, b01,
                        s[2 * p, 0], s[2 * p, 1], s[2 * p, 2], s[2 * p, 3])
                    s[2 * p + 1, 0], s[2 * p + 1, 1], s[2 * p + 1, 2], s[2 * p + 1, 3] = mma_f16(
                        qf[kd, 0], qf[kd, 1], qf[kd, 2], qf[kd, 3], b10, b11,
                        s[2 * p + 1, 0], s[2 * p + 1, 1], s[2 * p + 1, 2], s[2 * p + 1, 3])

            # 2. The online softmax on the C fragments: element e of n-tile n is row (row + 8 (e >> 1)), key
            # k0 + 8 n + 2t + (e & 1). Scale, mask, the rows' max over the lane and then its group of 4 lanes.
            t0 = t1 = float32(-math.inf)
            for n in range(ns):
                for e in range(4):
                    j = k0 + 8 * n + 2 * t + (e & 1)
                    x = s[n, e] * scale
                    if j >= sk or (causal and j > row + 8 * (e >> 1)):
                        x = float32(-math.inf)  # past the keys, or masked: weight exp(-inf) = 0
                    s[n, e] = x
                    if e < 2:
                        t0 = max(t0, x)
                    else:
                        t1 = max(t1, x)
            for off in (1, 2):
                t0 = max(t0, cuda.shfl_xor_sync(0xFFFFFFFF, t0, off))
                t1 = max(t1, cuda.shfl_xor_sync(0xFFFFFFFF, t1, off))
            n0, n1 = max(m0, t0), max(m1, t1)
            # A row with no visible key yet keeps m = -inf: exp(-inf - (-inf)) is NaN, exp(-inf - 0) is 0.
            base0 = n0 if n0 != -math.inf else float32(0.0)
            base1 = n1 if n1 != -math.inf else float32(0.0)
            alpha0, alpha1 = math.exp(m0 - base0), math.exp(m1 - base1)
            m0, m1 = n0, n1
            l0 *= alpha0
            l1 *= alpha1
            for n in range(ns):
                s[n, 0] = math.exp(s[n, 0] - base0)
                s[n, 1] = math.exp(s[n, 1] - base0)
                s[n, 2] = math.exp(s[n, 2] - base1)
                s[n, 3] = math.exp(s[n, 3] - base1)
                l0 += s[n, 0] + s[n, 1]
                l1 += s[n, 2] + s[n, 3]
            for n in range(no):
                acc[n, 0] *= alpha0
                acc[n, 1] *= alpha0
                acc[n, 2] *= alpha1
                acc[n, 3] *= alpha1

            # 3. + 4. O += P V, a k16 slice of keys at a time: P's A fragment is the C fragments of n-tiles 2 kk and
            # 2 kk + 1 rounded to float16; V's B fragments by ldmatrix.x4.trans -- matrices: keys +0..7 and +8..15
            # at dims +0..7 (b0 b1 of n-tile 2p of O), then at dims +8..15 (of n-tile 2p + 1)
            add_pv(s, vs, acc, r8, j8)

        # The rows' sums over their 4 lanes, then O / l: element e of n-tile n is (row + 8 (e >> 1), 8 n + 2t + (e & 1))
        store_rows(out, acc, l0, l1, bh, row, t, sq)

    mma_kernel.tile = (MMA_ROWS, MMA_KEYS, d)
    return mma_kernel


#: One kernel per head dimension: D = 16, 32, ..., 128.
MMA_KERNELS = [mma_kernel_for(d) for d in range(16, MAX_D + 1, 16)]


def mma_launches(q, k, v, out, causal: bool, scale: float) -> list[Launch]:
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    bhs, sq, dim = q3.shape
    # one block per (query tile of 64, head), heads fastest, the last query tile first
    return [Launch(mma_kernel_for(dim), (bhs * ceil_div(sq, MMA_ROWS),), (MMA_THREADS,),
                   (q3, k3, v3, o3, np.float32(scale), causal))]


@version("attention", check_half, kernels=MMA_KERNELS)
def mma(q, k, v, out, causal=False, scale=None):
    """FlashAttention-2 on tensor cores: float16 q, k, v, a warp per 16 query rows, Q K^T and P V by mma.sync, the
    online softmax on the mma's output registers and P handed to the second mma without leaving them."""
    return mma_launches(q, k, v, out, causal, scale)
