"""Step 6 of the attention lesson, ``tf32x3``: float32 attention on the tensor cores -- step 5's schedule with both
products done as 3xTF32 ``mma.sync``, at float32's accuracy.

The float32 steps so far (``fused_rows``, ``tiled``) run on the CUDA cores' FMAs. torch's float32 attention does
not: its memory-efficient kernel runs on the tensor cores, splitting each float32 into two TF32 numbers (CUTLASS's
fast accurate float32; benchmarks/NOTES.md has how that was found). This step does the same, with the split of the
tensor-core lesson's step 7 (`gpukernels.tensor_core.k07_tf32x3`, `gpukernels._mma.split_tf32`):

    x = big + small,   big = tf32(x),   small = tf32(x - big)
    a b ~ a_small b_big + a_big b_small + a_big b_big            (three mma.sync m16n8k8 on TF32)

**Split once.** k and v are split by a pass of their own (``split_rows_kernel``, ``split_values_kernel``) into
[big, small] arrays, each row padded with zeros to DP = D rounded up to 16 (so that any D works, and rows are whole
16-byte pieces for cp.async): every block of a head reads all of K and V, so each element is split once instead of
once per block. Q is split by the tile loop, since one block alone reads a query tile: a pass of its own would
write q's bytes twice and read them back, which cross attention's few keys cannot hide. The tile comes in by cp.async
as it is, alongside K's first tile, and is split in shared memory (where q's rows are not whole 16-byte pieces, by
loads of one float each: correct, and slower, since each thread waits on its loads one after another).
Step 5 (``pipelined``) then gives the tile loop: cp.async copies of the K tile and the V tile, each overlapping the
other's products, a few heads' query tiles in consecutive blocks (longest first), one exp2 per score, the mask only
where a tile has one.

**Fragments from ldmatrix, on float32.** ``ldmatrix`` on a float32 tile hands lane 4 g + t the float at row g, column
t of an 8 x 4-float matrix: the TF32 A fragment's layout (rows g, g + 8 at columns t, t + 4), and B's when B is
stored n-major. So Q (rows x DP), K (keys x DP) -- which *is* K^T stored n-major -- are read by ``ldmatrix_x4`` as
they are, big and small tiles alike: two instructions give a k step's A fragments of both parts, two more the B
fragments of two 8-key n-tiles.

**P stays in registers, by numbering V's keys differently.** S = Q K^T comes out in the C layout: lane 4 g + t
holds keys 2t and 2t + 1 of rows g and g + 8. P V wants P as an A fragment, keys t and t + 4. The sum over keys does
not care in which order it runs, so V is stored *transposed and with its keys permuted* in each group of 8 (the
split pass writes it so: ``VALUE_ORDER``): position t holds key 2t, position t + 4 key 2t + 1. Then the C fragment
of S's n-tile is, register for register, the A fragment of P for that group of keys -- no shuffle, no shared memory
-- and V^T (DP x keys, n-major for the mma) is read by ``ldmatrix_x4`` like K. (The float16 steps got this for free:
an m16n8k16 C layout of two n-tiles is its A layout.)

**Where the sums run.** The tensor core's adder truncates (`gpukernels._mma`), so every three products of a k step
are summed from zero by the mma and added to the scores, or to the output's accumulators, by float32 adds -- as
step 7 of the tensor-core lesson does per k tile, here per 8-deep step, because the accumulators of a whole tile's
partial sum would not fit in registers next to O's. A chain of truncating adds into one running sum is biased: over
thousands of keys it would cost several bits.

A block is 4 warps of 16 query rows (8 past D = 96, as step 5), K/V tiles of KEYS = 32 keys; shared memory holds the
block's Q tile, one K tile and one V^T tile, each as big and small parts, rows padded by 4 floats so that the 8 rows
of an ldmatrix matrix land in different banks: 70 KB at D = 64, 201 KB at D = 128 -- on an H200, which lets a block
have 227 KB. A GPU that lets it have less gets fewer warps per block, then shorter tiles (`tf32x3_config`).

**What holds the loop back, and what was done about it.** Under Nsight Compute (H100, 2 x 16 x 4096^2 x 128) the
tensor pipe was busy 46% of the time and the schedulers issued in 42% of their cycles; the largest stall was on
fixed-latency results (2.2 cycles per instruction issued), which is where a 3-mma chain waits on its previous mma and
the float32 adds on the last (benchmarks/NOTES.md). Two options of `tf32x3_launches` keep the same products in the
same order, so the same bits:

* ``chains`` (4, the default): four n-tiles' chains issued in turn (``mma3_add4``), so that an mma's successor in
  the stream does not wait for it -- where a row of n-tiles comes in pairs of pairs (else two at a time).
  ``chains=1`` issues each n-tile's chain after the last. Measured on an H100 against chains=1: 2.5% faster at 8 x
  16 x 4096^2 x 128 (2.9% causal), 0.3-0.8% at 4 x 32 x 8192^2 x 64; 176 registers at D = 128, no spills.
* ``on_read``: Q, K or V stored as they are (one part, no split pass; K read in place where its rows are whole
  multiples of 16 floats) and split in registers as each fragment is read (`gpukernels._mma.split_tf32_clamped`,
  branch-free so the loops still unroll): half those tiles' ldmatrix traffic and shared memory. Measured 4-6% (Q)
  to 45-56% (Q, K and V) slower at D = 128, 50-62% with K and V at D = 64: shared memory is not what the loop waits
  on, and every split adds instructions to a loop that already waits on its instructions.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from .._intrinsics import address, aligned16, copy_async16, load4, store4
from .._launch import Launch, ceil_div, is_device_array, shared_per_block, version
from .._mma import async_commit, async_wait, ldmatrix_x4, mma_tf32, split_tf32, split_tf32_clamped
from ._common import MAX_D, check, heads
from .k05_pipelined import LOG2E, block_tile, softmax_step, warps_for

KEYS = 32  # keys per K/V tile: 4 n-tiles of S, 4 k steps of P V
SPLIT_THREADS = 256
SHARED_MAX = 227 * 1024  # shared memory a block may have on Hopper, the most of any GPU (`tf32x3_config` fits less)
#: VALUE_ORDER[p]: the key of a group of 8 that V^T's position p holds -- positions t and t + 4 of an A fragment are
#: keys 2t and 2t + 1, the keys that lane 4 g + t holds of S's C fragment
VALUE_ORDER = tuple(2 * (p & 3) + (p >> 2) for p in range(8))


def padded_width(d: int) -> int:
    """DP: D rounded up to a multiple of 16 -- whole pairs of 8-wide n-tiles of O, and 16-byte rows."""
    return ceil_div(d, 16) * 16


# ----------------------------------------------------------------------------------------------------------
# The split: q, k -> (2, rows, DP); v -> (2, BH, DP, SKP), transposed, keys in VALUE_ORDER
# ----------------------------------------------------------------------------------------------------------

@cuda.jit
def split_rows_kernel(x, x2, vec):
    # x (R, D) -> x2 (parts, R, DP): each thread 4 neighbouring columns of a padded row, a block DP / 4 columns of
    # blockDim.y rows (no division by DP); one 16-byte load where x's rows are whole 16-byte pieces (vec), else
    # four 4-byte loads in flight at once; 16-byte stores (DP is a multiple of 16)
    c = 4 * cuda.threadIdx.x
    r = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    if r < x2.shape[1]:
        d = x.shape[1]
        zero = float32(0.0)
        if vec and c < d:
            e0, e1, e2, e3 = load4(x, r, c)
        else:
            e0 = x[r, c] if c < d else zero
            e1 = x[r, c + 1] if c + 1 < d else zero
            e2 = x[r, c + 2] if c + 2 < d else zero
            e3 = x[r, c + 3] if c + 3 < d else zero
        if x2.shape[0] == 1:  # one part: the values as they are, padded (the tile loop splits them)
            store4(x2[0], r, c, e0, e1, e2, e3)
        else:
            b0, s0 = split_tf32(e0)
            b1, s1 = split_tf32(e1)
            b2, s2 = split_tf32(e2)
            b3, s3 = split_tf32(e3)
            store4(x2[0], r, c, b0, b1, b2, b3)
            store4(x2[1], r, c, s0, s1, s2, s3)


VALUE_KEYS, VALUE_DIMS = 32, 64  # a split_values_kernel block's tile of V: keys x dimensions, 32 x 8 threads
VALUE_TILE = (VALUE_KEYS, VALUE_DIMS + 1)  # +1: a column of it is in 32 different banks


@cuda.jit
def split_values_kernel(v, vt):
    # v (BH, Sk, D) -> vt (2, BH, DP, SKP): 32 keys x 64 dimensions of a head per block, through a shared tile (read
    # along v's rows, written along vt's); position p of each group of 8 takes key VALUE_ORDER[p]. Each thread has 8
    # loads in flight: a tile of 32 x 32 (4 each) moved 1.6 TB/s on an H100, this one 2.2 (benchmarks/NOTES.md)
    tile = cuda.shared.array(VALUE_TILE, float32)
    key_tiles = (vt.shape[3] + VALUE_KEYS - 1) // VALUE_KEYS
    bh = cuda.blockIdx.x // key_tiles
    k0, d0 = (cuda.blockIdx.x % key_tiles) * VALUE_KEYS, cuda.blockIdx.y * VALUE_DIMS
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    for i in range(ty, VALUE_KEYS, 8):
        key = k0 + i
        for j in range(0, VALUE_DIMS, 32):
            d = d0 + j + tx
            tile[i, j + tx] = v[bh, key, d] if key < v.shape[1] and d < v.shape[2] else float32(0.0)
    cuda.syncthreads()
    src = (tx & 24) + 2 * (tx & 3) + ((tx >> 2) & 1)  # VALUE_ORDER within the group of 8 at tx & 24
    pos = k0 + tx
    for i in range(ty, VALUE_DIMS, 8):
        d = d0 + i
        if d < vt.shape[2] and pos < vt.shape[3]:
            if vt.shape[0] == 1:
                vt[0, bh, d, pos] = tile[src, i]
            else:
                big, small = split_tf32(tile[src, i])
                vt[0, bh, d, pos] = big
                vt[1, bh, d, pos] = small


def split_launches(k3, v3, dp: int, like, parts: tuple = (2, 2)) -> tuple:
    """(k2, vt, launches): K and V split, on the device when ``like`` is a device array, and the launches that fill
    them. (Q is split by the tile loop itself, as it copies Q's tile in.)"""
    (bhs, sk, d) = k3.shape
    skp = ceil_div(sk, 8) * 8  # whole groups of 8 keys (VALUE_ORDER), 16-byte rows
    alloc = cuda.device_array if is_device_array(like) else np.empty
    vt = alloc((parts[1], bhs, dp, skp), np.float32)
    launches = [Launch(split_values_kernel, (bhs * ceil_div(skp, VALUE_KEYS), ceil_div(dp, VALUE_DIMS)), (32, 8),
                       (v3, vt))]
    if parts[0] == 1 and d == dp and address(k3) % 16 == 0:  # K as it is: rows of whole 16-byte pieces, no padding
        return k3.reshape(1, bhs * sk, d), vt, launches
    k2 = alloc((parts[0], bhs * sk, dp), np.float32)
    rows = max(1, SPLIT_THREADS // (dp // 4))  # a block's rows: DP / 4 threads each
    k = k3.reshape(bhs * sk, d)
    return k2, vt, [Launch(split_rows_kernel, (ceil_div(k2.shape[1], rows),), (dp // 4, rows),
                           (k, k2, aligned16(k)))] + launches


# ----------------------------------------------------------------------------------------------------------
# The tile loop
# ----------------------------------------------------------------------------------------------------------

def shared_bytes(d: int, warps: int, keys: int = KEYS, on_read: str = "") -> int:
    """Shared memory of a block: its Q tile (16 rows per warp), a K tile and a V^T tile, each big and small (one
    part, as it is, for those named in ``on_read``), rows padded by 4 floats."""
    dp = padded_width(d)
    q, k, v = ((1 if x in on_read else 2) for x in "qkv")
    return 4 * (q * 16 * warps * (dp + 4) + k * keys * (dp + 4) + v * dp * (keys + 4))


def tf32x3_config(d: int) -> tuple[int, int]:
    """(warps, keys) for head dimension ``d`` on this GPU: step 5's `warps_for` and K/V tiles of KEYS, or where that
    needs more shared memory than a block may have (an A100's 163 KB at D = 128 with 8 warps), 4 warps, then 2, then
    2 with tiles of 16 keys (at most 71 KB)."""
    limit = shared_per_block()
    for warps, keys in ((warps_for(d), KEYS), (4, KEYS), (2, KEYS), (2, 16)):
        if shared_bytes(d, warps, keys) <= limit:
            return warps, keys
    return 2, 16


def tf32x3_kernel_for(d: int, warps: int | None = None, keys: int | None = None, on_read: str = "",
                      chains: int = 4):
    """The kernel for head dimension ``d`` (any, 1 to MAX_D: it runs on rows padded to `padded_width`) with ``warps``
    warps of 16 query rows per block and K/V tiles of ``keys`` keys (a multiple of 16: pairs of 8-key n-tiles);
    by default `tf32x3_config`'s."""
    if warps is None:
        warps, default_keys = tf32x3_config(d)
        keys = keys or default_keys
    return _kernel(padded_width(d), warps, keys or KEYS, on_read, chains)


@functools.cache
def _kernel(dp: int, warps: int, KEYS: int, on_read: str = "", CHAINS: int = 4):  # noqa: N803  (constants)
    rows, threads = 16 * warps, 32 * warps
    nk = dp // 8  # 8-deep k steps of Q K^T, and 8-wide n-tiles of O
    ns = KEYS // 8  # 8-key n-tiles of S, and 8-deep k steps of P V
    pitch, vpitch = dp + 4, KEYS + 4  # floats per row of the Q and K tiles, and of the V^T tile
    q_tile, k_tile, v_tile = rows * pitch, KEYS * pitch, dp * vpitch
    FQ, FK, FV = ("q" in on_read), ("k" in on_read), ("v" in on_read)  # stored as they are, split in registers as read
    QB = 0  # each tile's big part; its small part follows it
    KB = QB + (1 if FQ else 2) * q_tile
    VB = KB + (1 if FK else 2) * k_tile
    floats = VB + (1 if FV else 2) * v_tile
    assert 4 * floats == shared_bytes(dp, warps, KEYS, on_read)
    if 4 * floats > SHARED_MAX:
        raise ValueError(f"tf32x3 with {warps} warps, K/V tiles of {KEYS} keys and rows {dp} wide needs "
                         f"{4 * floats} bytes of shared memory; a block may have {SHARED_MAX}")

    def tile_copy(n: int, width: int, dst_pitch: int, dst_part: int, parts: int = 2):
        # a copy of n rows of `width` floats (both parts, or one) into shared memory, 16 bytes per cp.async: thread
        # tid copies piece tid % pieces of rows tid // pieces, + per_pass, ... (the indices step by constants);
        # pieces outside the source's valid rows or columns are zero-filled
        pieces = width // 4
        per_pass = threads // pieces
        passes = ceil_div(n, per_pass)

        @cuda.jit(device=True, forceinline=True)
        def copy(src, part, base, src_pitch, valid_rows, valid_cols, smem, dst, tid):
            c, r0 = 4 * (tid % pieces), tid // pieces
            if r0 < per_pass:  # D = 80: 128 threads = 6 rows of 20 pieces + 8 idle
                ok_col = c < valid_cols
                for i in range(passes):
                    r = r0 + i * per_pass
                    if r < n:
                        ok = ok_col and r < valid_rows
                        s = base + r * src_pitch + c if ok else 0
                        nbytes = 16 if ok else 0
                        copy_async16(smem, dst + r * dst_pitch + c, src, s, nbytes)
                        if parts == 2:
                            copy_async16(smem, dst + dst_part + r * dst_pitch + c, src, s + part if ok else 0,
                                         nbytes)

        return copy

    softmax = softmax_step(KEYS, nk)
    q_passes = ceil_div(rows * dp, threads)

    @cuda.jit(device=True, forceinline=True)
    def split_q(q, bh, q0, sq, dim, smem, tid):
        # the block's Q tile, split into its big and small parts as it is stored, where q's rows are not whole
        # 16-byte pieces (D not a multiple of 4): consecutive threads along a row, zeros past Sq and past D
        for i in range(q_passes):
            e = tid + i * threads
            r, c = e // dp, e % dp
            if r < rows:
                x = q[bh, q0 + r, c] if q0 + r < sq and c < dim else float32(0.0)
                if FQ:
                    smem[QB + r * pitch + c] = x
                else:
                    big, small = split_tf32(x)
                    smem[QB + r * pitch + c] = big
                    smem[QB + q_tile + r * pitch + c] = small

    @cuda.jit(device=True, forceinline=True)
    def split_in_place(smem, tid):
        # the Q tile, copied in as it is (in the big part's place), split into its two parts: each thread its own
        # floats, consecutive threads along a row
        for i in range(q_passes):
            e = tid + i * threads
            r, c = e // dp, e % dp
            if r < rows:
                o = QB + r * pitch + c
                big, small = split_tf32(smem[o])
                smem[o] = big
                smem[o + q_tile] = small

    copy_q = tile_copy(rows, dp, pitch, q_tile, parts=1)
    copy_k = tile_copy(KEYS, dp, pitch, k_tile, parts=1 if FK else 2)
    copy_v = tile_copy(dp, KEYS, vpitch, v_tile, parts=1 if FV else 2)

    @cuda.jit(device=True, forceinline=True)
    def fragments(smem, o, part, split):
        # an ldmatrix_x4's 4 registers in both parts: read from the big and small tiles, or read once and split
        if split:
            x0, x1, x2, x3 = ldmatrix_x4(smem, o)
            b0, s0 = split_tf32_clamped(x0)
            b1, s1 = split_tf32_clamped(x1)
            b2, s2 = split_tf32_clamped(x2)
            b3, s3 = split_tf32_clamped(x3)
            return b0, b1, b2, b3, s0, s1, s2, s3
        b0, b1, b2, b3 = ldmatrix_x4(smem, o)
        s0, s1, s2, s3 = ldmatrix_x4(smem, o + part)
        return b0, b1, b2, b3, s0, s1, s2, s3

    @cuda.jit(device=True, forceinline=True)
    def add_to(x, n, d0, d1, d2, d3):
        x[n, 0] += d0
        x[n, 1] += d1
        x[n, 2] += d2
        x[n, 3] += d3

    @cuda.jit(device=True, forceinline=True)
    def mma3_add(x, n, ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1):
        # x[n] += a_small b_big + a_big b_small + a_big b_big: the three summed from zero by the tensor core (small
        # products first), then added by float32 adds
        zero = float32(0.0)
        d0, d1, d2, d3 = mma_tf32(as0, as1, as2, as3, bb0, bb1, zero, zero, zero, zero)
        d0, d1, d2, d3 = mma_tf32(ab0, ab1, ab2, ab3, bs0, bs1, d0, d1, d2, d3)
        d0, d1, d2, d3 = mma_tf32(ab0, ab1, ab2, ab3, bb0, bb1, d0, d1, d2, d3)
        add_to(x, n, d0, d1, d2, d3)

    @cuda.jit(device=True, forceinline=True)
    def mma3_add4(x, n, ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1, cb0, cb1, cs0, cs1,
                  db0, db1, ds0, ds1, eb0, eb1, es0, es1):
        # mma3_add for n-tiles n .. n + 3 (B = b, c, d, e), their four chains issued in turn: each mma's successor
        # in the stream does not wait for it
        zero = float32(0.0)
        d0, d1, d2, d3 = mma_tf32(as0, as1, as2, as3, bb0, bb1, zero, zero, zero, zero)
        e0, e1, e2, e3 = mma_tf32(as0, as1, as2, as3, cb0, cb1, zero, zero, zero, zero)
        f0, f1, f2, f3 = mma_tf32(as0, as1, as2, as3, db0, db1, zero, zero, zero, zero)
        g0, g1, g2, g3 = mma_tf32(as0, as1, as2, as3, eb0, eb1, zero, zero, zero, zero)
        d0, d1, d2, d3 = mma_tf32(ab0, ab1, ab2, ab3, bs0, bs1, d0, d1, d2, d3)
        e0, e1, e2, e3 = mma_tf32(ab0, ab1, ab2, ab3, cs0, cs1, e0, e1, e2, e3)
        f0, f1, f2, f3 = mma_tf32(ab0, ab1, ab2, ab3, ds0, ds1, f0, f1, f2, f3)
        g0, g1, g2, g3 = mma_tf32(ab0, ab1, ab2, ab3, es0, es1, g0, g1, g2, g3)
        d0, d1, d2, d3 = mma_tf32(ab0, ab1, ab2, ab3, bb0, bb1, d0, d1, d2, d3)
        e0, e1, e2, e3 = mma_tf32(ab0, ab1, ab2, ab3, cb0, cb1, e0, e1, e2, e3)
        f0, f1, f2, f3 = mma_tf32(ab0, ab1, ab2, ab3, db0, db1, f0, f1, f2, f3)
        g0, g1, g2, g3 = mma_tf32(ab0, ab1, ab2, ab3, eb0, eb1, g0, g1, g2, g3)
        add_to(x, n, d0, d1, d2, d3)
        add_to(x, n + 1, e0, e1, e2, e3)
        add_to(x, n + 2, f0, f1, f2, f3)
        add_to(x, n + 3, g0, g1, g2, g3)

    @cuda.jit(device=True, forceinline=True)
    def products(x, ab0, ab1, ab2, ab3, as0, as1, as2, as3, smem, base, step, pairs, part, split, four):
        # x[n] += A B_n for n-tiles n = 0 .. 2 pairs - 1, the B fragments of pair p at base + p step: each pair's two
        # chains one after the other, or (four) two pairs' four chains in turn
        if four:
            for p in range(0, pairs, 2):
                o = base + p * step
                bb0, bb1, bb2, bb3, bs0, bs1, bs2, bs3 = fragments(smem, o, part, split)
                cb0, cb1, cb2, cb3, cs0, cs1, cs2, cs3 = fragments(smem, o + step, part, split)
                mma3_add4(x, 2 * p, ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1, bb2, bb3, bs2, bs3,
                          cb0, cb1, cs0, cs1, cb2, cb3, cs2, cs3)
        else:
            for p in range(pairs):
                bb0, bb1, bb2, bb3, bs0, bs1, bs2, bs3 = fragments(smem, base + p * step, part, split)
                mma3_add(x, 2 * p, ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1)
                mma3_add(x, 2 * p + 1, ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb2, bb3, bs2, bs3)

    QK4 = CHAINS == 4 and (ns // 2) % 2 == 0  # four chains need two pairs of n-tiles (else two at a time)
    PV4 = CHAINS == 4 and (nk // 2) % 2 == 0

    @cuda.jit(fastmath=True)
    def tf32x3_kernel(q, k2, vt, out, scale2, causal, raw):
        # q (BH, Sq, D) float32, split here (raw: its rows are whole 16-byte pieces, copied by cp.async); k2 (2,
        # BH*Sk, DP), vt (2, BH, DP, SKP): [big, small]; out (BH, Sq, D); scale2 = scale * log2(e). Block x: the
        # query tile and head of `block_tile` (step 5's); warp w rows q0 + 16 w .. + 15; lane 4 g + t rows g, g + 8
        smem = cuda.shared.array(0, float32)
        s = cuda.local.array((ns, 4), float32)
        acc = cuda.local.array((nk, 4), float32)
        tid = cuda.threadIdx.x
        warp, lane = tid >> 5, tid & 31
        g, t = lane >> 2, lane & 3
        j8, r8 = lane >> 3, lane & 7  # lane 8 j8 + r8 addresses row r8 of ldmatrix's matrix j8
        bhs, skp = vt.shape[1], vt.shape[3]
        sq, sk, dim = out.shape[1], k2.shape[1] // bhs, out.shape[2]
        bh, qi = block_tile(cuda.blockIdx.x, (sq + rows - 1) // rows, bhs)
        q0 = qi * rows
        w0 = q0 + 16 * warp  # the warp's first query
        row = w0 + g
        kbase, vbase = bh * sk * dp, bh * dp * skp
        if raw:  # Q's tile by cp.async as it is, split in shared memory while K's first tile is on its way
            copy_q(q, 0, (bh * sq + q0) * dim, dim, sq - q0, dim, smem, QB, tid)
            async_commit()
        else:
            split_q(q, bh, q0, sq, dim, smem, tid)
        copy_k(k2, k2.shape[1] * dp, kbase, dp, sk, dp, smem, KB, tid)
        async_commit()
        if raw and not FQ:
            async_wait(1)
            cuda.syncthreads()  # Q's tile is in
            split_in_place(smem, tid)  # seen by every warp after the loop's first barrier
        for n in range(nk):
            for e in range(4):
                acc[n, e] = float32(0.0)
        m0 = m1 = float32(-math.inf)  # running max (in log2 units) of rows row and row + 8
        l0 = l1 = float32(0.0)
        a_off = (16 * warp + r8 + 8 * (j8 & 1)) * pitch + 4 * (j8 >> 1)  # Q: rows +0/+8, columns +0/+4
        b_off = (r8 + 8 * (j8 >> 1)) * pitch + 4 * (j8 & 1)  # K: keys +0/+8 (two n-tiles), columns +0/+4
        v_off = (r8 + 8 * (j8 >> 1)) * vpitch + 4 * (j8 & 1)  # V^T: dimensions +0/+8, positions +0/+4

        keys = min(sk, q0 + rows) if causal else sk
        tiles = (keys + KEYS - 1) // KEYS
        for it in range(tiles):
            k0 = it * KEYS
            async_wait(0)
            cuda.syncthreads()  # K(it) is in (and Q); every warp is done with V(it - 1)
            copy_v(vt, bhs * dp * skp, vbase + k0, skp, dp, skp - k0, smem, VB, tid)
            async_commit()
            live = not causal or k0 <= w0 + 15  # some key of the tile is visible to some row of the warp
            if live:
                for n in range(ns):
                    for e in range(4):
                        s[n, e] = float32(0.0)
                for kd in range(nk):
                    qb0, qb1, qb2, qb3, qs0, qs1, qs2, qs3 = fragments(smem, QB + a_off + 8 * kd, q_tile, FQ)
                    products(s, qb0, qb1, qb2, qb3, qs0, qs1, qs2, qs3, smem, KB + b_off + 8 * kd, 16 * pitch,
                             ns // 2, k_tile, FK, QK4)
            async_wait(0)
            cuda.syncthreads()  # V(it) is in; every warp is done with K(it)
            if it + 1 < tiles:
                copy_k(k2, k2.shape[1] * dp, kbase + (k0 + KEYS) * dp, dp, sk - k0 - KEYS, dp, smem, KB, tid)
            async_commit()
            if live:
                m0, m1, l0, l1 = softmax(s, acc, k0, sk, w0, row, t, causal, scale2, m0, m1, l0, l1)  # step 5's
                # O += P V, 8 keys at a time: P's A fragment is S's C fragment of n-tile kk, registers (0, 2, 1, 3)
                # -- rows g, g + 8 at positions t (key 2t) and t + 4 (key 2t + 1)
                for kk in range(ns):
                    pb0, ps0 = split_tf32(s[kk, 0])
                    pb1, ps1 = split_tf32(s[kk, 2])
                    pb2, ps2 = split_tf32(s[kk, 1])
                    pb3, ps3 = split_tf32(s[kk, 3])
                    products(acc, pb0, pb1, pb2, pb3, ps0, ps1, ps2, ps3, smem, VB + v_off + 8 * kk, 16 * vpitch,
                             nk // 2, v_tile, FV, PV4)

        # each row's sum over its 4 lanes, then O / l: element e of n-tile n is (row + 8 (e >> 1), 8 n + 2t + (e & 1))
        for off in (1, 2):
            l0 += cuda.shfl_xor_sync(0xFFFFFFFF, l0, off)
            l1 += cuda.shfl_xor_sync(0xFFFFFFFF, l1, off)
        inv0, inv1 = float32(1.0) / l0, float32(1.0) / l1
        for n in range(nk):
            c = 8 * n + 2 * t
            for e in range(4):
                r, col = row + 8 * (e >> 1), c + (e & 1)
                if r < sq and col < dim:
                    out[bh, r, col] = acc[n, e] * (inv0 if e < 2 else inv1)

    tf32x3_kernel.tile = (rows, KEYS, dp)
    tf32x3_kernel.threads = threads
    tf32x3_kernel.shared_bytes = 4 * floats
    return tf32x3_kernel


#: The split kernels, and one tile loop per padded width (D of 1-16, 17-32, ..., 113-128) as a Hopper GPU runs them
#: (`tf32x3_config` asks the GPU, so it is not called on import).
TF32X3_KERNELS = [split_rows_kernel, split_values_kernel] + [tf32x3_kernel_for(d, warps_for(d), KEYS)
                                                             for d in range(16, MAX_D + 1, 16)]


def tf32x3_launches(q, k, v, out, causal: bool, scale: float, warps: int | None = None,
                    keys: int | None = None, on_read: str = "", chains: int = 4) -> list[Launch]:
    """The split launches and the tile loop's; ``warps``, ``keys``: the block's (default `tf32x3_config`'s);
    ``on_read``: the operands among "qkv" stored as they are and split as read; ``chains``: 4 to issue four
    n-tiles' mma chains in turn, 1 to issue each n-tile's after the last (the module's docstring has what each
    measured)."""
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    bhs, sq, dim = q3.shape
    kernel = tf32x3_kernel_for(dim, warps, keys, on_read, chains)
    parts = tuple(1 if x in on_read else 2 for x in "kv")
    k2, vt, splits = split_launches(k3, v3, kernel.tile[2], out, parts)
    raw = dim % 4 == 0 and address(q3) % 16 == 0  # rows of whole 16-byte pieces: Q's tile by cp.async
    # one block per (query tile, head), the query tiles of a head consecutive (they share K and V in L2)
    return splits + [Launch(kernel, (bhs * ceil_div(sq, kernel.tile[0]),), (kernel.threads,),
                            (q3, k2, vt, o3, np.float32(scale * LOG2E), causal, raw), kernel.shared_bytes)]


@version("attention", check, kernels=TF32X3_KERNELS)
def tf32x3(q, k, v, out, causal=False, scale=None):
    """float32 on the tensor cores: k and v split once into TF32 big and small parts (each Q tile as its block reads
    it), then step 5's tile loop with each product as three mma.sync (3xTF32) and P kept in registers by storing V's
    keys in the C fragment's order."""
    return tf32x3_launches(q, k, v, out, causal, scale)
