"""Step 5 of the attention lesson, ``pipelined``: step 4's tensor-core kernel fed as the tensor cores need -- K and V
tiles copied by ``cp.async`` while the mmas run, blocks ordered so that K and V are read from L2, and the softmax's
work cut to what a tile needs.

Step 4 spends most of its time not on its mmas. Measured on an H200 at (B, H, S, D) = (8, 16, 4096, 128) it runs at
20 TFLOP/s, a sixteenth of torch's flash backend, for three reasons, each fixed here:

1. **Loads.** Step 4's threads stage the K and V tiles two bytes at a time, through registers, between two barriers:
   while they load, no mma runs, and while the mmas run, nothing is loaded. Here each tile is copied in 16-byte
   pieces by ``cp.async`` (as in the tensor-core lesson's ``pipelined`` step) and the copies overlap the products,
   FlashAttention-2's way, with one buffer each for K and V: the copy of V for this tile runs during S = Q K^T, and
   the copy of K for the *next* tile during the softmax and O += P V::

       wait K(i); barrier | copy V(i) | S = Q K(i)^T   | wait V(i); barrier | copy K(i+1) | softmax, O += P V(i)

   The barrier before each copy is what makes the buffer free: every warp has finished reading it.
2. **Block order.** Step 4 numbers its blocks heads first, so the blocks running at once belong to hundreds of
   different heads and each reads its head's whole K and V (2 MB at S = 4096, D = 128) while the others evict it
   from L2: K and V come from DRAM once per query tile. Here the query tiles of a few heads (HEAD_GROUP) are
   consecutive blocks, which run together and read the same K and V: from L2, after the first. Within the group
   the last tiles of its heads come first, then the tiles before them (`block_tile`): under the causal mask the
   longest walks start first, and the GPU ends on short ones.
3. **The softmax's instructions.** Each score becomes its weight in one multiply-add and one ``exp2`` (the
   hardware's ``ex2``: exp(x) = 2^(x log2 e), so the scale is folded into scale * log2(e), and ``fastmath`` lets
   Numba emit ex2.approx); the mask is tested only in the tiles that have a masked key (the last tile past Sk, the
   tiles on the causal diagonal); a warp skips a tile whose keys all come after its 16 queries (causal), and a warp
   whose queries all lie past Sq skips every tile (decoding: one query per head, so one warp of the block computes)
   -- the barriers and copies it still shares with the block; and the accumulators are rescaled only when some
   row's max moved, which after the first tiles is rare.

With these, the first version of this step ran at 190-220 TFLOP/s on the H200 (0.6-0.74x FlashAttention-2 without
the mask, 0.49-0.53x with it at D = 128; benchmarks/NOTES.md). Profiling it (Nsight Compute) found its busiest pipe to
be the integer ALU, not the tensor cores: the copy loop's index arithmetic. So each thread's copies now step by
constants (``copy_tile``). The Q load, the P V product and the epilogue are step 4's
(`gpukernels.attention.k04_mma.fragment_steps`).

**Then two m16 tiles per warp** (FlashAttention-2's layout, `_pair_kernel`). The profile's largest stall was then on
the K and V fragments that ldmatrix reads from shared memory. With 32 query rows per warp, each fragment feeds four
mmas instead of two, so a warp's shared-memory reads per mma halve. The price is registers: two sets of Q fragments,
scores and accumulators. Past D = ``Q_SHARED_D`` = 64, Q in registers would spill (116 bytes at D = 80, 1 KB at D =
128), so Q's tile moves into shared memory and each k16 slice of it is read by ldmatrix when it is needed. Measured
on the H200: 0.60 -> 0.78x FlashAttention-2 at 8 x 16 x 4096^2 x 128, 0.49 -> 0.71x causal, and +5-8% at D = 64
(benchmarks/NOTES.md). At D = 112 and 128 ptxas still spills 148 and 124 bytes; no variant that does not was faster.

``plan`` says which layout a launch takes: 32 rows per warp where the blocks of 128 rows are at least ``PAIR_FILL``
per SM, and the 16-row kernel otherwise (a few heads of short sequences: its blocks are more, and smaller; decoding,
at most 16 queries per head: the second tile of a warp would be padding). A block is 4 warps of 32 query rows; the
16-row kernel's block is 4 warps, or 8 past D = 96 (`warps_for`).

The copies need 16-byte aligned rows of K and V: D is a multiple of 16 and the data must start on a 16-byte boundary
(every array this toolkit allocates does; a view that does not takes step 4's kernel).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types, uint32

from .._intrinsics import address
from .._launch import Launch, ceil_div, sm_count, version
from .._mma import async_commit, async_wait, copy_async16_f16, ldmatrix_x4, ldmatrix_x4_trans, mma_f16
from ._common import MAX_D, check_half, heads
from .k04_mma import MMA_KEYS, fragment_steps, mma_launches, p_fragment

PIPELINED_WARPS = 4  # warps per block, 16 query rows each: 64 rows (D <= WIDE_D)
WIDE_WARPS, WIDE_D = 8, 96  # past D = 96: 8 warps, 128 rows


def warps_for(d: int) -> int:
    """Warps per block for head dimension ``d``. At D = 128 a thread holds ~230 registers, so an SM runs 8 warps
    either way -- as one block of 128 query rows, each K/V tile read from L2 once per 128 rows, not per 64: 205
    against 191 TFLOP/s on an H200 at 8 x 16 x 4096^2. At D = 64 (160 registers) three blocks of 4 warps fit, and
    blocks of 8 lose (182 against 219 TFLOP/s at 4 x 32 x 8192^2): fewer, larger blocks fill the SMs worse."""
    return WIDE_WARPS if d > WIDE_D else PIPELINED_WARPS
KEYS = MMA_KEYS  # keys per K/V tile: 64, as step 4's (the P V step they share walks that many)
ROWS_PER_WARP = 32  # query rows per warp: two m16 tiles (FlashAttention-2's layout, `_pair_kernel`) ...
Q_SHARED_D = 64  # ... with Q's tile in shared memory past this D (in registers it would spill) ...
PAIR_FILL = 1.0  # ... where its blocks of 128 rows are at least this many per SM; fewer: 16 rows per warp
LOG2E = 1.4426950408889634


@functools.cache
def softmax_step(keys: int, no: int):
    """The online softmax of one K/V tile of ``keys`` keys on a warp's score fragments, in log2 units, as a device
    function that this step and ``tf32x3`` share: ``m0, m1, l0, l1 = step(s, acc, k0, sk, w0, row, t, causal, scale2,
    m0, m1, l0, l1)``. Element e of the scores' n-tile n (``s``, keys / 8 n-tiles of the C layout) is row ``row + 8 (e
    >> 1)``, key ``k0 + 8 n + 2t + (e & 1)``; the warp's rows start at ``w0``. Masks the keys past Sk and (causal)
    after each row's query -- tested only in a tile that has some --, takes each row's max over its 4 lanes, turns the
    scores into weights 2^(s scale2 - m) in place, and rescales the running sums l and the ``no`` n-tiles of the
    accumulators ``acc`` by 2^(m_old - m_new) when a row's max moved."""
    ns = keys // 8

    @cuda.jit(device=True, forceinline=True, fastmath=True)  # as the kernels: ex2.approx
    def step(s, acc, k0, sk, w0, row, t, causal, scale2, m0, m1, l0, l1):
        edge = k0 + keys > sk or (causal and k0 + keys - 1 > w0)  # a masked key in this warp's tile
        t0 = t1 = float32(-math.inf)  # the rows' max raw score (scale > 0 keeps the order)
        for n in range(ns):
            for e in range(4):
                x = s[n, e]
                if edge:
                    j = k0 + 8 * n + 2 * t + (e & 1)
                    if j >= sk or (causal and j > row + 8 * (e >> 1)):
                        x = float32(-math.inf)
                s[n, e] = x
                if e < 2:
                    t0 = max(t0, x)
                else:
                    t1 = max(t1, x)
        for off in (1, 2):
            t0 = max(t0, cuda.shfl_xor_sync(0xFFFFFFFF, t0, off))
            t1 = max(t1, cuda.shfl_xor_sync(0xFFFFFFFF, t1, off))
        n0, n1 = max(m0, t0 * scale2), max(m1, t1 * scale2)
        base0 = n0 if n0 != -math.inf else float32(0.0)  # a row with no visible key yet: weights 0, not NaN
        base1 = n1 if n1 != -math.inf else float32(0.0)
        alpha0, alpha1 = math.exp2(m0 - base0), math.exp2(m1 - base1)
        m0, m1 = n0, n1
        l0 *= alpha0
        l1 *= alpha1
        for n in range(ns):  # p = 2^(s scale2 - m): one multiply-add and one ex2 per score
            s[n, 0] = math.exp2(s[n, 0] * scale2 - base0)
            s[n, 1] = math.exp2(s[n, 1] * scale2 - base0)
            s[n, 2] = math.exp2(s[n, 2] * scale2 - base1)
            s[n, 3] = math.exp2(s[n, 3] * scale2 - base1)
            l0 += s[n, 0] + s[n, 1]
            l1 += s[n, 2] + s[n, 3]
        if alpha0 != 1 or alpha1 != 1:  # once the rows' maxima settle, most tiles skip this
            for n in range(no):
                acc[n, 0] *= alpha0
                acc[n, 1] *= alpha0
                acc[n, 2] *= alpha1
                acc[n, 3] *= alpha1
        return m0, m1, l0, l1

    return step


@functools.cache
def tile_copy(d: int, threads: int, keys: int = KEYS):
    """``(copy_tile, per_pass)``: the device function with which a block of ``threads`` threads copies a K or V tile
    of ``keys`` rows of ``d`` halves into shared memory (rows ``d + 8`` halves apart), and the rows one pass of the
    block covers. Each thread copies one column of 16-byte pieces: the piece at column c of rows r, r + per_pass, ..."""
    pitch = d + 8
    chunks = d // 8  # 16-byte pieces of a row
    per_pass = threads // chunks  # rows a pass of the block's threads copies (each thread: one column of pieces)
    passes = (keys + per_pass - 1) // per_pass

    @cuda.jit(device=True, forceinline=True)
    def copy_tile(src, dst, base, k0, sk, r, c):
        # keys k0 .. k0 + keys - 1 of a head (``base``: the flat index of its key 0, plus this thread's column c) into
        # dst, 16 bytes per cp.async: this thread copies the piece at column c of rows r, r + per_pass, ... The
        # indices step by constants, so a copy costs an add, a compare and the cp.async. Rows past Sk are zero-filled
        # (a copy of 0 bytes writes 16 zero bytes), so that P = 0 never meets garbage in V.
        for i in range(passes):
            row = r + i * per_pass
            if row < keys:
                inside = k0 + row < sk
                copy_async16_f16(dst, row * pitch + c, src, (base + (k0 + row) * d) if inside else 0,
                                 16 if inside else 0)

    return copy_tile, per_pass


#: Heads whose query tiles are interleaved in the block order (see `block_tile`).
HEAD_GROUP = 4


@cuda.jit(device=True, forceinline=True)
def block_tile(x, q_tiles, heads):
    """``(bh, qi)``, the head and query tile of block ``x``. The heads go in groups of HEAD_GROUP; within a group the
    blocks take every head's last query tile, then every head's tile before it, and so on. Under the causal mask the
    last tile of a head has the most keys, so the blocks come longest first and the GPU, handing them out in order,
    ends with short ones (a greedy schedule of 4096 blocks of 1 to 32 tiles over 132 SMs: 3.5% longer with one head
    at a time). A group's blocks share its few heads' K and V in L2, as one head's did."""
    per = HEAD_GROUP * q_tiles
    g, r = x // per, x % per
    n = min(HEAD_GROUP, heads - g * HEAD_GROUP)  # the last group may have fewer heads
    return g * HEAD_GROUP + r % n, q_tiles - 1 - r // n


@functools.cache
def block_place(d: int, rows: int, threads: int, keys: int = KEYS):
    """The device function that places a thread of a block of ``rows`` query rows and ``threads`` threads:
    ``warp, g, t, j8, r8, sq, sk, bh, q0, cr, cc = place(q, k)`` -- its warp; lane 4 g + t of the mma fragments and
    8 j8 + r8 of ldmatrix's addresses; Sq, Sk; the block's head and first query (`block_tile`); and its first row
    and column in the tile copies (`tile_copy`) -- ``keys``, past every row a copy covers, for a thread past the last
    whole row of a pass."""
    chunks = d // 8  # 16-byte pieces of a row
    _, per_pass = tile_copy(d, threads, keys)

    @cuda.jit(device=True, forceinline=True)
    def place(q, k):
        tid = cuda.threadIdx.x
        warp, lane = tid >> 5, tid & 31
        g, t = lane >> 2, lane & 3
        j8, r8 = lane >> 3, lane & 7
        sq = q.shape[1]
        sk = k.shape[1]
        bh, qi = block_tile(cuda.blockIdx.x, (sq + rows - 1) // rows, q.shape[0])
        q0 = qi * rows
        cr, cc = tid // chunks, (tid % chunks) * 8  # this thread's first row and its column in the tile copies
        if cr >= per_pass:
            cr = keys  # threads past the last whole row of a pass (D = 80: 128 = 12 rows of 10 pieces + 8) copy none
        return warp, g, t, j8, r8, sq, sk, bh, q0, cr, cc

    return place


def pipelined_kernel_for(d: int, warps: int | None = None, rows_per_warp: int = ROWS_PER_WARP, keys: int = KEYS,
                         q_shared: bool | None = None):
    """The kernel for head dimension ``d`` (a multiple of 16) with ``warps`` warps of ``rows_per_warp`` query rows
    per block: 32 (default; `_pair_kernel`, 4 warps, ``keys`` per K/V tile, Q's tile in shared memory where
    ``q_shared`` -- by default past D = Q_SHARED_D) or 16 (`_kernel`, `warps_for` warps, 64-key tiles, Q in
    registers). benchmarks/attention_peer.py times the others as ``pipelined@W,R[,K[,Q]]``."""
    if rows_per_warp == 32:
        return _pair_kernel(d, warps or PIPELINED_WARPS, keys, d > Q_SHARED_D if q_shared is None else bool(q_shared))
    if rows_per_warp != 16:
        raise ValueError(f"rows_per_warp must be 16 or 32 (one or two m16 tiles of the mma); got {rows_per_warp}")
    if keys != KEYS or q_shared:
        raise ValueError(f"the kernel of 16 rows per warp walks tiles of {KEYS} keys with Q in registers; got "
                         f"keys={keys}, q_shared={q_shared}")
    return _kernel(d, warps or warps_for(d))  # one cache key per kernel, however the warps are given


def plan(heads: int, sq: int, d: int, sms: int | None = None) -> dict:
    """The layout for ``heads`` (B * H) heads of ``sq`` queries of width ``d`` on ``sms`` SMs (default: this GPU's):
    ``{"rows_per_warp": 32, "warps": 4, "q_shared": d > Q_SHARED_D}`` where the blocks of 128 rows are at least
    PAIR_FILL per SM and a warp's second tile has queries (Sq > 16), else ``{"rows_per_warp": 16, "warps":
    warps_for(d)}`` -- smaller blocks, more of them; and for decoding (a few queries per head) one m16 tile of
    products per query block instead of two."""
    sms = sms or sm_count()
    if sq > 16 and heads * ceil_div(sq, 32 * PIPELINED_WARPS) >= PAIR_FILL * sms:
        return {"rows_per_warp": 32, "warps": PIPELINED_WARPS, "q_shared": d > Q_SHARED_D}
    return {"rows_per_warp": 16, "warps": warps_for(d)}


@functools.cache
def tile_walk(d: int, warps: int):
    """The tile loop of the kernel of 16 rows per warp (`_kernel`), as a device function that ``split_keys_f16`` calls
    too: ``m0, m1, l0, l1 = walk(k, v, ks, vs, qf, s, acc, base, first, last, sq, sk, w0, row, t, j8, r8, cr, cc,
    causal, scale2)`` walks keys ``first`` .. ``last`` - 1 (``first`` a multiple of KEYS, ``last`` > ``first``) in
    K/V tiles through the shared buffers ``ks`` and ``vs``, from an empty state (``acc`` zeroed by ``load_q``), and
    returns the warp's rows' running max (log2 units) and this lane's part of their running sums."""
    nd, ns = d // 16, KEYS // 8  # k16 slices of a row; 8-key n-tiles of S
    pitch = d + 8  # a tile row: d halves + 16 bytes (`_kernel`)
    softmax = softmax_step(KEYS, d // 8)
    _, add_pv, _ = fragment_steps(d)
    copy_tile, _ = tile_copy(d, 32 * warps)

    @cuda.jit(device=True, forceinline=True, fastmath=True)
    def walk(k, v, ks, vs, qf, s, acc, base, first, last, sq, sk, w0, row, t, j8, r8, cr, cc, causal, scale2):
        m0 = m1 = float32(-math.inf)  # running max (in log2 units) of rows row and row + 8
        l0 = l1 = float32(0.0)
        tiles = (last - first + KEYS - 1) // KEYS
        copy_tile(k, ks, base, first, sk, cr, cc)
        async_commit()
        for it in range(tiles):
            k0 = first + it * KEYS
            async_wait(0)
            cuda.syncthreads()  # K(it) is in; every warp is done with V(it - 1)
            copy_tile(v, vs, base, k0, sk, cr, cc)
            async_commit()
            # some key of the tile is visible to some row of the warp, and the warp has a row (not past Sq)
            live = (not causal or k0 <= w0 + 15) and w0 < sq
            if live:
                for n in range(ns):
                    for e in range(4):
                        s[n, e] = float32(0.0)
                for kd in range(nd):  # k slices outside, key pairs inside: 8 independent accumulations in flight
                    for p in range(ns // 2):
                        b00, b01, b10, b11 = ldmatrix_x4(ks, (16 * p + r8 + 8 * (j8 >> 1)) * pitch + 16 * kd
                                                         + 8 * (j8 & 1))
                        s[2 * p, 0], s[2 * p, 1], s[2 * p, 2], s[2 * p, 3] = mma_f16(
                            qf[kd, 0], qf[kd, 1], qf[kd, 2], qf[kd, 3], b00, b01,
                            s[2 * p, 0], s[2 * p, 1], s[2 * p, 2], s[2 * p, 3])
                        s[2 * p + 1, 0], s[2 * p + 1, 1], s[2 * p + 1, 2], s[2 * p + 1, 3] = mma_f16(
                            qf[kd, 0], qf[kd, 1], qf[kd, 2], qf[kd, 3], b10, b11,
                            s[2 * p + 1, 0], s[2 * p + 1, 1], s[2 * p + 1, 2], s[2 * p + 1, 3])
            async_wait(0)
            cuda.syncthreads()  # V(it) is in; every warp is done with K(it)
            if it + 1 < tiles:
                copy_tile(k, ks, base, k0 + KEYS, sk, cr, cc)
            async_commit()
            if live:
                m0, m1, l0, l1 = softmax(s, acc, k0, sk, w0, row, t, causal, scale2, m0, m1, l0, l1)
                add_pv(s, vs, acc, r8, j8)
        return m0, m1, l0, l1

    return walk


@functools.cache
def _kernel(d: int, warps: int):
    nd, no, ns = d // 16, d // 8, KEYS // 8  # k16 slices of a row; 8-wide n-tiles of O; 8-key n-tiles of S
    pitch = d + 8  # a tile row: d halves + 16 bytes, so that the 8 rows of an ldmatrix matrix fall in different banks
    tile = KEYS * pitch
    rows, threads = 16 * warps, 32 * warps
    load_q, _, store_rows = fragment_steps(d)
    walk = tile_walk(d, warps)
    place = block_place(d, rows, threads)

    @cuda.jit(fastmath=True)
    def pipelined_kernel(q, k, v, out, scale2, causal):
        # q, k, v: (BH, S, D) float16, out (BH, Sq, D) float32; scale2 = scale * log2(e). Block x: the query tile
        # and head of `block_tile`; warp w rows q0 + 16 w .. + 15; lane 4 g + t rows g, g + 8.
        ks = cuda.shared.array(tile, types.float16, alignment=16)
        vs = cuda.shared.array(tile, types.float16, alignment=16)
        qf = cuda.local.array((nd, 4), uint32)
        s = cuda.local.array((ns, 4), float32)
        acc = cuda.local.array((no, 4), float32)
        warp, g, t, j8, r8, sq, sk, bh, q0, cr, cc = place(q, k)
        w0 = q0 + 16 * warp  # the warp's first query
        row = w0 + g
        base = bh * sk * d + cc

        load_q(q, bh, row, t, qf, acc)
        keys = min(sk, q0 + rows) if causal else sk  # causal: the tiles after the block's last query are skipped
        m0, m1, l0, l1 = walk(k, v, ks, vs, qf, s, acc, base, 0, keys, sq, sk, w0, row, t, j8, r8, cr, cc, causal,
                              scale2)
        store_rows(out, acc, l0, l1, bh, row, t, sq)

    pipelined_kernel.tile = (rows, KEYS, d)
    pipelined_kernel.threads = threads
    return pipelined_kernel


@cuda.jit(device=True, forceinline=True)
def mma_into(c, n, a0, a1, a2, a3, b0, b1):
    # n-tile n of the C fragments ``c`` += the m16n8k16 product of A fragment a0..a3 and B fragment b0, b1
    c[n, 0], c[n, 1], c[n, 2], c[n, 3] = mma_f16(a0, a1, a2, a3, b0, b1, c[n, 0], c[n, 1], c[n, 2], c[n, 3])


@functools.cache
def add_pv_pair(d: int, keys: int = KEYS):
    """O += P V for a warp's two m16 tiles at once (`_pair_kernel`): as `fragment_steps`' ``add_pv``, but each of V's
    B fragments (one ldmatrix.x4.trans of the tile at ``vs[voff:]``) feeds four mmas -- two n-tiles of O for each of
    the two tiles of rows."""
    nd = d // 16
    pitch = d + 8

    @cuda.jit(device=True, forceinline=True)
    def add_pv2(s0, s1, vs, voff, acc0, acc1, r8, j8):
        for kk in range(keys // 16):
            a0, a1, a2, a3 = p_fragment(s0, kk)
            c0, c1, c2, c3 = p_fragment(s1, kk)
            for p in range(nd):
                b00, b01, b10, b11 = ldmatrix_x4_trans(
                    vs, voff + (16 * kk + r8 + 8 * (j8 & 1)) * pitch + 16 * p + 8 * (j8 >> 1))
                mma_into(acc0, 2 * p, a0, a1, a2, a3, b00, b01)
                mma_into(acc1, 2 * p, c0, c1, c2, c3, b00, b01)
                mma_into(acc0, 2 * p + 1, a0, a1, a2, a3, b10, b11)
                mma_into(acc1, 2 * p + 1, c0, c1, c2, c3, b10, b11)

    return add_pv2


@functools.cache
def _pair_kernel(d: int, warps: int, keys: int = KEYS, q_shared: bool = False):
    """``pipelined`` with 32 query rows per warp -- two m16 tiles, FlashAttention-2's layout: every K fragment that
    ldmatrix reads from shared memory feeds four mmas instead of two, and every V fragment likewise, so a warp's
    shared-memory reads per mma halve. The price is registers: two sets of Q fragments, scores and accumulators --
    at D = 128 with 64-key tiles more than 255 (ptxas spills ~1 KB). Two ways back: shorter K/V tiles (``keys``, a
    multiple of 16), or ``q_shared``: the block's Q tile is copied into shared memory once and each k16 slice's Q
    fragments are read from it by ldmatrix when they are needed (FlashAttention-2's default), 8 registers instead of
    8 D / 16 -- with the K and V tiles that is more than a kernel may declare statically (48 KB), so the shared
    memory is dynamic (``shared_bytes``)."""
    nd, no, ns = d // 16, d // 8, keys // 8
    pitch = d + 8
    tile = keys * pitch
    rows, threads = 32 * warps, 32 * warps
    qoff = 0  # Q tile (q_shared), then the K tile, then the V tile, in one shared array
    koff = rows * pitch if q_shared else 0
    voff = koff + tile
    load_q, _, store_rows = fragment_steps(d)
    add_pv2 = add_pv_pair(d, keys)
    softmax = softmax_step(keys, no)
    copy_tile, _ = tile_copy(d, threads, keys)
    copy_q, _ = tile_copy(d, threads, rows)
    place = block_place(d, rows, threads, max(keys, rows))
    qn = nd if not q_shared else 1  # Q fragments held in registers: all of them, or one k16 slice at a time
    static = 0 if q_shared else 2 * tile  # halves of static shared memory: the K and V tiles, or none (dynamic)

    @cuda.jit(fastmath=True)
    def pipelined_pair_kernel(q, k, v, out, scale2, causal):
        # As pipelined_kernel, but warp w has rows q0 + 32 w .. + 31: tile 0 (rows ra, ra + 8) and tile 1 (rb, rb + 8)
        sm = cuda.shared.array(static, types.float16, alignment=16)  # size 0: dynamic, the launch gives its size
        qf0 = cuda.local.array((qn, 4), uint32)
        qf1 = cuda.local.array((qn, 4), uint32)
        s0 = cuda.local.array((ns, 4), float32)
        s1 = cuda.local.array((ns, 4), float32)
        acc0 = cuda.local.array((no, 4), float32)
        acc1 = cuda.local.array((no, 4), float32)
        warp, g, t, j8, r8, sq, sk, bh, q0, cr, cc = place(q, k)
        w0 = q0 + 32 * warp  # the warp's first query; its second tile starts at w0 + 16
        ra, rb = w0 + g, w0 + 16 + g
        base = bh * sk * d + cc

        if q_shared:  # rows q0 .. q0 + rows - 1 of Q into the Q tile (rows past Sq zero), with K(0) below
            copy_q(q, sm, bh * sq * d + cc, q0, sq, cr, qoff + cc)
            for n in range(no):
                for e in range(4):
                    acc0[n, e] = float32(0.0)
                    acc1[n, e] = float32(0.0)
        else:
            load_q(q, bh, ra, t, qf0, acc0)
            load_q(q, bh, rb, t, qf1, acc1)
        ma0 = ma1 = mb0 = mb1 = float32(-math.inf)
        la0 = la1 = lb0 = lb1 = float32(0.0)

        seen = min(sk, q0 + rows) if causal else sk
        tiles = (seen + keys - 1) // keys
        copy_tile(k, sm, base, 0, sk, cr, koff + cc)
        async_commit()
        for it in range(tiles):
            k0 = it * keys
            async_wait(0)
            cuda.syncthreads()  # K(it) (and Q) is in; every warp is done with V(it - 1)
            copy_tile(v, sm, base, k0, sk, cr, voff + cc)
            async_commit()
            # some key of the tile is visible to some row of the warp, and the warp has a row (not past Sq)
            live = (not causal or k0 <= w0 + 31) and w0 < sq
            if live:
                for n in range(ns):
                    for e in range(4):
                        s0[n, e] = float32(0.0)
                        s1[n, e] = float32(0.0)
                for kd in range(nd):
                    i = 0 if q_shared else kd
                    if q_shared:  # this k16 slice of the warp's two tiles of Q rows (a_frag_coords' order)
                        qa_at = qoff + (w0 - q0 + r8 + 8 * (j8 & 1)) * pitch + 16 * kd + 8 * (j8 >> 1)
                        qf0[0, 0], qf0[0, 1], qf0[0, 2], qf0[0, 3] = ldmatrix_x4(sm, qa_at)
                        qf1[0, 0], qf1[0, 1], qf1[0, 2], qf1[0, 3] = ldmatrix_x4(sm, qa_at + 16 * pitch)
                    for p in range(ns // 2):
                        b00, b01, b10, b11 = ldmatrix_x4(sm, koff + (16 * p + r8 + 8 * (j8 >> 1)) * pitch + 16 * kd
                                                         + 8 * (j8 & 1))
                        mma_into(s0, 2 * p, qf0[i, 0], qf0[i, 1], qf0[i, 2], qf0[i, 3], b00, b01)
                        mma_into(s1, 2 * p, qf1[i, 0], qf1[i, 1], qf1[i, 2], qf1[i, 3], b00, b01)
                        mma_into(s0, 2 * p + 1, qf0[i, 0], qf0[i, 1], qf0[i, 2], qf0[i, 3], b10, b11)
                        mma_into(s1, 2 * p + 1, qf1[i, 0], qf1[i, 1], qf1[i, 2], qf1[i, 3], b10, b11)
            async_wait(0)
            cuda.syncthreads()  # V(it) is in; every warp is done with K(it)
            if it + 1 < tiles:
                copy_tile(k, sm, base, k0 + keys, sk, cr, koff + cc)
            async_commit()
            if live:
                ma0, ma1, la0, la1 = softmax(s0, acc0, k0, sk, w0, ra, t, causal, scale2, ma0, ma1, la0, la1)
                mb0, mb1, lb0, lb1 = softmax(s1, acc1, k0, sk, w0 + 16, rb, t, causal, scale2, mb0, mb1, lb0, lb1)
                add_pv2(s0, s1, sm, voff, acc0, acc1, r8, j8)

        store_rows(out, acc0, la0, la1, bh, ra, t, sq)
        store_rows(out, acc1, lb0, lb1, bh, rb, t, sq)

    pipelined_pair_kernel.tile = (rows, keys, d)
    pipelined_pair_kernel.threads = threads
    pipelined_pair_kernel.shared_bytes = (rows + 2 * keys) * pitch * 2 if q_shared else 0
    return pipelined_pair_kernel


#: The kernels `plan` picks from, per head dimension D = 16, 32, ..., 128: 32 rows per warp, then 16.
PIPELINED_KERNELS = ([pipelined_kernel_for(d) for d in range(16, MAX_D + 1, 16)]
                     + [pipelined_kernel_for(d, rows_per_warp=16) for d in range(16, MAX_D + 1, 16)])


def pipelined_launches(q, k, v, out, causal: bool, scale: float, warps: int | None = None,
                       rows_per_warp: int | None = None, keys: int = KEYS, q_shared: bool | None = None
                       ) -> list[Launch]:
    """The launch for these inputs: `plan`'s layout, or the one the keywords give (``rows_per_warp`` 16 or 32)."""
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    if address(k3) % 16 or address(v3) % 16:  # cp.async needs 16-byte aligned rows: step 4's loads instead
        return mma_launches(q, k, v, out, causal, scale)
    bhs, sq, dim = q3.shape
    if rows_per_warp is None:
        layout = plan(bhs, sq, dim)
        rows_per_warp, warps = layout["rows_per_warp"], warps or layout["warps"]
    kernel = pipelined_kernel_for(dim, warps, rows_per_warp, keys, q_shared)
    # one block per (query tile, head), the query tiles of a head consecutive (they share K and V in L2)
    return [Launch(kernel, (bhs * ceil_div(sq, kernel.tile[0]),), (kernel.threads,),
                   (q3, k3, v3, o3, np.float32(scale * LOG2E), causal), getattr(kernel, "shared_bytes", 0))]


@version("attention", check_half, kernels=PIPELINED_KERNELS)
def pipelined(q, k, v, out, causal=False, scale=None):
    """Step 4's kernel fed as the tensor cores need: K and V tiles copied by cp.async during the mmas, a few
    heads' query tiles in consecutive blocks, longest first (K and V read from L2), one exp2 per score and the mask
    only where a tile has one, two m16 tiles of queries per warp."""
    return pipelined_launches(q, k, v, out, causal, scale)
