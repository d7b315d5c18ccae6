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
   from L2: K and V come from DRAM once per query tile. Here the query tiles of one head are consecutive blocks,
   which run together and read the same K and V: from L2, after the first. (Under the causal mask the tiles of a head
   still run last first: the longest walks start first.)
3. **The softmax's instructions.** Each score becomes its weight in one multiply-add and one ``exp2`` (the
   hardware's ``ex2``: exp(x) = 2^(x log2 e), so the scale is folded into scale * log2(e), and ``fastmath`` lets
   Numba emit ex2.approx); the mask is tested only in the tiles that have a masked key (the last tile past Sk, the
   tiles on the causal diagonal); a warp skips a tile whose keys all come after its 16 queries (causal) -- the
   barriers and copies it still shares with the block; and the accumulators are rescaled only when some row's max
   moved, which after the first tiles is rare.

With these, on the H200 the step runs at 190-220 TFLOP/s (0.6-0.74x FlashAttention-2 without the mask, 0.53x with
it at D = 128; benchmarks/NOTES.md). Profiling the first version of this step (Nsight Compute) found its busiest
pipe to be the integer ALU, not the tensor cores: the copy loop's index arithmetic. So each thread's copies now
step by constants (``copy_tile``). The Q load, the P V product and the epilogue are step 4's
(`gpukernels.attention.k04_mma.fragment_steps`).

The copies need 16-byte aligned rows of K and V: D is a multiple of 16 and the data must start on a 16-byte boundary
(every array this toolkit allocates does; a view that does not takes step 4's kernel). A block is 4 warps of 16
query rows, or 8 past D = 96 (`warps_for`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types, uint32

from .._intrinsics import address
from .._launch import Launch, ceil_div, version
from .._mma import async_commit, async_wait, copy_async16_f16, ldmatrix_x4, mma_f16
from ._common import MAX_D, check_half, heads
from .k04_mma import MMA_KEYS, fragment_steps, mma_launches

PIPELINED_WARPS = 4  # warps per block, 16 query rows each: 64 rows (D <= WIDE_D)
WIDE_WARPS, WIDE_D = 8, 96  # past D = 96: 8 warps, 128 rows


def warps_for(d: int) -> int:
    """Warps per block for head dimension ``d``. At D = 128 a thread holds ~230 registers, so an SM runs 8 warps
    either way -- as one block of 128 query rows, each K/V tile read from L2 once per 128 rows, not per 64: 205
    against 191 TFLOP/s on an H200 at 8 x 16 x 4096^2. At D = 64 (160 registers) three blocks of 4 warps fit, and
    blocks of 8 lose (182 against 219 TFLOP/s at 4 x 32 x 8192^2): fewer, larger blocks fill the SMs worse."""
    return WIDE_WARPS if d > WIDE_D else PIPELINED_WARPS
KEYS = MMA_KEYS  # keys per K/V tile: 64, as step 4's (the P V step they share walks that many)
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


def pipelined_kernel_for(d: int, warps: int | None = None):
    """The kernel for head dimension ``d`` (a multiple of 16) with ``warps`` warps of 16 query rows per block
    (default: `warps_for`)."""
    return _kernel(d, warps or warps_for(d))  # one cache key per kernel, however the warps are given


@functools.cache
def _kernel(d: int, warps: int):
    nd, no, ns = d // 16, d // 8, KEYS // 8  # k16 slices of a row; 8-wide n-tiles of O; 8-key n-tiles of S
    pitch = d + 8  # a tile row: d halves + 16 bytes, so that the 8 rows of an ldmatrix matrix fall in different banks
    tile = KEYS * pitch
    rows, threads = 16 * warps, 32 * warps
    chunks = d // 8  # 16-byte pieces of a row
    load_q, add_pv, store_rows = fragment_steps(d)
    softmax = softmax_step(KEYS, no)

    per_pass = threads // chunks  # rows a pass of the block's threads copies (each thread: one column of pieces)
    passes = (KEYS + per_pass - 1) // per_pass

    @cuda.jit(device=True, forceinline=True)
    def copy_tile(src, dst, base, k0, sk, r, c):
        # keys k0 .. k0 + KEYS - 1 of a head (``base``: the flat index of its key 0, plus this thread's column c) into
        # dst, 16 bytes per cp.async: this thread copies the piece at column c of rows r, r + per_pass, ... The
        # indices step by constants, so a copy costs an add, a compare and the cp.async. Rows past Sk are zero-filled
        # (a copy of 0 bytes writes 16 zero bytes), so that P = 0 never meets garbage in V.
        for i in range(passes):
            row = r + i * per_pass
            if row < KEYS:
                inside = k0 + row < sk
                copy_async16_f16(dst, row * pitch + c, src, (base + (k0 + row) * d) if inside else 0,
                                 16 if inside else 0)

    @cuda.jit(fastmath=True)
    def pipelined_kernel(q, k, v, out, scale2, causal):
        # q, k, v: (BH, S, D) float16, out (BH, Sq, D) float32; scale2 = scale * log2(e). Block x: query tile
        # (x % q_tiles, last first) of head x // q_tiles; warp w rows q0 + 16 w .. + 15; lane 4 g + t rows g, g + 8.
        ks = cuda.shared.array(tile, types.float16, alignment=16)
        vs = cuda.shared.array(tile, types.float16, alignment=16)
        qf = cuda.local.array((nd, 4), uint32)
        s = cuda.local.array((ns, 4), float32)
        acc = cuda.local.array((no, 4), float32)
        tid = cuda.threadIdx.x
        warp, lane = tid >> 5, tid & 31
        g, t = lane >> 2, lane & 3
        j8, r8 = lane >> 3, lane & 7
        sq = q.shape[1]
        sk = k.shape[1]
        q_tiles = (sq + rows - 1) // rows
        bh = cuda.blockIdx.x // q_tiles
        q0 = (q_tiles - 1 - cuda.blockIdx.x % q_tiles) * rows
        w0 = q0 + 16 * warp  # the warp's first query
        row = w0 + g
        cr, cc = tid // chunks, (tid % chunks) * 8  # this thread's first row and its column in the tile copies
        if cr >= per_pass:
            cr = KEYS  # threads past the last whole row of a pass (D = 80: 128 = 12 rows of 10 pieces + 8) copy none
        base = bh * sk * d + cc

        load_q(q, bh, row, t, qf, acc)
        m0 = m1 = float32(-math.inf)  # running max (in log2 units) of rows row and row + 8
        l0 = l1 = float32(0.0)

        keys = min(sk, q0 + rows) if causal else sk
        tiles = (keys + KEYS - 1) // KEYS
        copy_tile(k, ks, base, 0, sk, cr, cc)
        async_commit()
        for it in range(tiles):
            k0 = it * KEYS
            async_wait(0)
            cuda.syncthreads()  # K(it) is in; every warp is done with V(it - 1)
            copy_tile(v, vs, base, k0, sk, cr, cc)
            async_commit()
            live = not causal or k0 <= w0 + 15  # some key of the tile is visible to some row of the warp
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

        store_rows(out, acc, l0, l1, bh, row, t, sq)

    pipelined_kernel.tile = (rows, KEYS, d)
    pipelined_kernel.threads = threads
    return pipelined_kernel


#: One kernel per head dimension: D = 16, 32, ..., 128.
PIPELINED_KERNELS = [pipelined_kernel_for(d) for d in range(16, MAX_D + 1, 16)]


def pipelined_launches(q, k, v, out, causal: bool, scale: float, warps: int | None = None) -> list[Launch]:
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    if address(k3) % 16 or address(v3) % 16:  # cp.async needs 16-byte aligned rows: step 4's loads instead
        return mma_launches(q, k, v, out, causal, scale)
    bhs, sq, dim = q3.shape
    kernel = pipelined_kernel_for(dim, warps)
    # one block per (query tile, head), the query tiles of a head consecutive (they share K and V in L2)
    return [Launch(kernel, (bhs * ceil_div(sq, kernel.tile[0]),), (kernel.threads,),
                   (q3, k3, v3, o3, np.float32(scale * LOG2E), causal))]


@version("attention", check_half, kernels=PIPELINED_KERNELS)
def pipelined(q, k, v, out, causal=False, scale=None):
    """Step 4's kernel fed as the tensor cores need: K and V tiles copied by cp.async during the mmas, a head's query
    tiles in consecutive blocks (K and V read from L2), one exp2 per score and the mask only where a tile has one."""
    return pipelined_launches(q, k, v, out, causal, scale)
