"""Step 9 of the attention lesson, ``wgmma``: FlashAttention-3's first idea -- both products of the tile loop, S = Q K^T
and O += P V, as Hopper's warpgroup MMA (``wgmma``), with the online softmax on the wgmma's accumulators in registers.

Steps 4 and 5 (``mma``, ``pipelined``) run the tile loop on ``mma.sync``: each warp multiplies 16 query rows by
16 x 8 x 16 products, and reads every fragment of K and V out of shared memory into its registers first
(``ldmatrix``). On an H200 step 5 reaches 0.75-0.81x FlashAttention-2, and the tensor-core lesson shows the ceiling
of that way: the registers, the ldmatrix traffic and the issue slots of small products (its ``wgmma`` step ran 1.65x
as fast as its best mma.sync step, ``block_tiles``: 2.38 against 3.92 ms at 8192^3 on an H200, the README's table).
Hopper's ``wgmma.mma_async`` multiplies a 64 x 16 tile of A by a 16 x N tile of B in
one instruction of a *warpgroup* (4 warps, 128 threads), reading its operands from shared memory through
*descriptors* -- no ldmatrix. FlashAttention-3 runs both products of attention this way; this step does that and
nothing else: the loads (cp.async, as step 5), the block order and the softmax are step 5's.

Who does what: a block of **two warpgroups** (256 threads) owns 128 query rows of one head, **each warpgroup 64
rows** -- the M of one wgmma. The block walks the keys in tiles of KEYS = 64 (step 5's), staging the K and V tiles
by cp.async; per tile, each warpgroup on its own:

1. **S = Q K^T** (64 x 64 per warpgroup, float32): D / 16 wgmmas ``m64n64k16``, both operands from shared memory
   (`gpukernels._wgmma_rs.wgmma_ss_k`). A is the warpgroup's 64 rows of the Q tile, copied into shared memory once;
   B = K^T, whose column n is key n's D values -- a row of K, contiguous: K stored keys x D, row-major, as it comes
   from global memory, *is* K^T in the "K-major" layout the descriptor reads (``trans-b`` = 0). The first k16 slice
   starts the sum from zero (scale-d = 0), so S is never zeroed.
2. **The online softmax on the accumulators**, exactly step 5's (`gpukernels.attention.k05_pipelined.softmax_step`).
   It runs unchanged because of how a wgmma lays out its 64 x N accumulators (`gpukernels._mma.wgmma_d_coords`):
   warp w of the warpgroup holds rows 16 w .. 16 w + 15, and within them each lane holds what it holds of an
   ``mma.sync`` C fragment, repeated every 8 columns -- accumulator 4 j + e of a thread is element e of n-tile j. So
   ``s`` is kept as (KEYS / 8, 4), the shape of step 5's score fragments: a row's 64 scores live in the 4 lanes of a
   quad, its max and sum are taken by two ``shfl_xor`` (1 and 2), and everything else is per thread.
3. **P in registers, as wgmma's A operand.** wgmma can take A from registers (the "RS" form,
   `gpukernels._wgmma_rs.wgmma_rs`): each thread hands in four 32-bit words of two halves, warp w rows 16 w ..
   16 w + 15 laid out as mma.sync's A fragment (`gpukernels._wgmma_rs.wgmma_a_coords`). The C layout of two adjacent
   8-key n-tiles is that A layout of their 16 keys -- step 4's observation, per warp of the warpgroup -- so step 4's
   ``p_fragment`` packs P straight from the scores, and P never goes to shared memory.
4. **O += P V**: KEYS / 16 wgmmas ``m64n{D}k16`` with A = P from registers and B = V from shared memory. V (keys x
   D, row-major) has each key's D values contiguous: for B (k = key, n = dimension) that is the "MN-major" layout,
   read with ``trans-b`` = 1, as the tensor-core lesson's B. O's D / 2 accumulators per thread stay in registers for
   the whole walk, laid out as step 4's, so step 4's epilogue stores them (`fragment_steps`' ``store_rows``).

**The tiles, in the layout the descriptors read.** Q (128 x D), K and V (64 x D) are all stored alike: rows of 64
halves (128 bytes) in the **128-byte swizzle** -- 16-byte chunk c of row r at chunk c ^ (r % 8), the tensor-core
lesson's step 3 -- in *atoms* of 64 columns: D = 128 is two atoms one after the other, D <= 64 one (D = 16 uses a
quarter of each row; the rest is never read). Each tile is copied from global memory in 16-byte pieces by cp.async,
each piece to its swizzled place (`tile_at`); only the descriptors differ: K-major for Q and K (a k16 slice is 32
bytes of each row), MN-major for V (a k16 slice is 16 rows, its atoms ``KEYS * 128`` bytes apart).

**What a wgmma asks of the code around it**, each checked by the simulator, which names the line when one is missing:

* ``fence_proxy_async()`` after the cp.async copies have landed and before the barrier: the copies write through the
  *generic proxy*, the tensor cores read through the *async proxy*, and only the fence orders the two;
* ``wgmma_fence()`` before the first wgmma of a group (it orders the registers the wgmma reads -- P's words, O's
  accumulators after the softmax rescaled them), ``wgmma_commit()`` after the last, and ``wgmma_wait(0)`` before
  anything reads the accumulators: before the softmax reads S, and before the next tile's softmax rescales O;
* the barrier before a buffer is refilled comes after every warpgroup's ``wgmma_wait`` on the products that read it.

The loop is step 5's schedule with the products swapped::

    wait K(i), fence; barrier | copy V(i) | S = Q K(i)^T, wait | wait V(i), fence; barrier | copy K(i+1) |
    softmax, O += P V(i), wait

Each wgmma group is waited for at once: nothing overlaps the tensor cores' work but the copies. FlashAttention-3's
next ideas -- a producer warp feeding the ring by TMA (the tensor-core lesson's steps 7 and 8), the softmax of one
tile overlapping the products of the next within a warpgroup, and two warpgroups taking turns ("ping-pong") -- are
what later steps add.

**No branch around a wgmma.** Step 5's warps skip a tile whose keys their rows cannot see (causal) and rows past Sq;
here every warpgroup runs every tile of its block, on zeros past Sq, its masked scores weighing 0. A wgmma is issued
by the whole warpgroup, so a skip would have to be the warpgroup's -- but ptxas cannot prove that a branch on the
thread index is uniform across a warpgroup, and for a wgmma inside one it inserts its own ``wgmma.fence`` in the
branch and *serializes every wgmma of the kernel* (warning C7519: none may start before the one before it has
finished), which would cost more than the products a skip saves. Likewise no division may become a subroutine call (C7509): the block order is
step 5's, in 32-bit divisions (`block_tile32`). The compile test checks ptxas reports neither.

Numerics are step 4's: float16 Q, K, V, products exact and summed in float32, P rounded to float16 for the second
product (the row sums l add the unrounded P). Under the causal mask the tiles after the block's last query are not
walked, and keys past Sk are zero-filled by the copies and masked to -inf by the softmax; rows past Sq are computed
on zeros and not stored.

**Where it runs.** wgmma is sm_90a only: on any other GPU this step raises a LaunchError that names the steps to use
instead (``require_hopper``); the simulator plays an H200. D is the tensor-core steps' (a multiple of 16 up to 128;
``check_half`` refuses others). The copies need the rows of q, k and v on 16-byte boundaries (every array this toolkit
allocates is): otherwise the step falls back to step 4's kernel, which loads element by element -- what ``pipelined``
does with unaligned K and V.

Checked in the simulator (against float64 of the float16 inputs, at odd shapes, causal and not) and compiled for
sm_90a (its PTX holds both wgmma forms and no local memory); not yet timed on a GPU, so ``optimized`` does not choose
it (`gpukernels.attention.k12_optimized`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types

from .._intrinsics import address, udivmod32
from .._launch import Launch, LaunchError, ceil_div, compute_capability, version
from .._mma import align1024, async_commit, async_wait, copy_async16_f16, fence_proxy_async, wgmma_commit, wgmma_fence
from .._mma import wgmma_wait
from .._wgmma_rs import wgmma_rs, wgmma_ss_k
from ._common import MAX_D, check_half, heads
from .k04_mma import fragment_steps, mma_launches, p_fragment
from .k05_pipelined import HEAD_GROUP, LOG2E, softmax_step

WARPGROUPS = 2  # per block, 64 query rows each: the M of a wgmma
ROWS = 64 * WARPGROUPS  # 128 query rows per block
THREADS = 128 * WARPGROUPS
KEYS = 64  # keys per K/V tile, as steps 4 and 5: S is m64n64 per warpgroup, P V four k16 slices
ATOM = 64  # halves per 128-byte swizzled row: a tile's columns are cut into atoms of this many


def tile_at(r, c, rows):
    """Where element (r, c) of a tile of ``rows`` rows lies in shared memory (halves from the tile's start): atom
    c // 64 of rows x 64 halves, row r of 128 bytes, its 16-byte chunk (c % 64) // 8 swizzled by r % 8. The same
    place `gpukernels._mma.k_major_byte` (Q, K) and ``mn_major_byte`` (V, atoms ``rows * 128`` bytes apart) read."""
    return (c >> 6) * (rows * ATOM) + r * ATOM + ((((c & 63) >> 3) ^ (r & 7)) << 3) + (c & 7)


_tile_at = cuda.jit(device=True, forceinline=True)(tile_at)


@cuda.jit(device=True, forceinline=True)
def block_tile32(x, q_tiles, heads):
    """``(bh, qi)``: step 5's block order (`gpukernels.attention.k05_pipelined.block_tile`: a few heads' query tiles
    together, the last first) in 32-bit divisions -- Numba's are 64-bit, a subroutine call in SASS, and ptxas
    serializes the wgmmas of a kernel that calls one."""
    g, r = udivmod32(x, HEAD_GROUP * q_tiles)
    n = min(HEAD_GROUP, heads - g * HEAD_GROUP)  # the last group may have fewer heads
    qd, h = udivmod32(r, n)
    return g * HEAD_GROUP + h, q_tiles - 1 - qd


@functools.cache
def tile_copy(d: int, rows: int):
    """The device function with which the block's threads copy ``rows`` rows of a head (D = ``d`` halves each) into
    a swizzled tile: ``copy(src, dst, at, base, first, limit, tid)`` -- rows ``first`` .. of ``src`` (flat element
    ``base`` is the head's row 0), into ``dst`` from element ``at`` on; rows at or past ``limit`` (Sq or Sk) are
    zero-filled. Thread ``tid`` copies the 16-byte pieces tid, tid + THREADS, ... of the tile's rows x D / 8."""
    chunks = d // 8
    total = rows * chunks
    passes = ceil_div(total, THREADS)

    @cuda.jit(device=True, forceinline=True)
    def copy(src, dst, at, base, first, limit, tid):
        for i in range(passes):
            e = tid + i * THREADS
            if e < total:
                r = e // chunks
                c = (e - r * chunks) * 8
                inside = first + r < limit
                copy_async16_f16(dst, at + _tile_at(r, c, rows), src, (base + (first + r) * d + c) if inside else 0,
                                 16 if inside else 0)

    return copy


def wgmma_kernel_for(d: int, keys: int = KEYS):
    """The kernel for head dimension ``d`` (a multiple of 16) and K/V tiles of ``keys`` keys (a multiple of 16 up to
    256; benchmarks may time others than KEYS): the counts of wgmmas and accumulators are compile-time constants."""
    return _kernel(int(d), int(keys))  # one cache key per kernel, however the arguments are given


@functools.cache
def _kernel(d: int, keys: int):
    nd, no, ns = d // 16, d // 8, keys // 8  # k16 slices of a row of Q; 8-wide n-tiles of O; 8-key n-tiles of S
    atoms = ceil_div(d, ATOM)
    q_off, k_off = 0, ROWS * atoms * ATOM  # the tiles in the dynamic shared memory, in halves: Q, K, V
    v_off = k_off + keys * atoms * ATOM
    q_atom, k_atom = ROWS * ATOM, keys * ATOM  # halves between the 64-column atoms of a tile
    lbo = keys * ATOM * 2  # bytes between V's atoms: the descriptor's leading byte offset (MN-major B)
    softmax = softmax_step(keys, no)
    _, _, store_rows = fragment_steps(d)
    copy_q, copy_kv = tile_copy(d, ROWS), tile_copy(d, keys)

    @cuda.jit(fastmath=True)
    def wgmma_kernel(q, k, v, out, scale2, causal):
        # q, k, v: (BH, S, D) float16, out: (BH, Sq, D) float32; scale2 = scale * log2(e). Block x: the query tile and
        # head of `block_tile`; warpgroup wg rows q0 + 64 wg .. + 63, its warp w rows + 16 w .., lane 4 g + t rows g,
        # g + 8 of those (`wgmma_d_coords`).
        smem = cuda.shared.array(0, types.float16)  # dynamic: Q, K, V tiles (the launch gives the size)
        s = cuda.local.array((ns, 4), float32)  # S, then P: accumulator 4 j + e = element e of n-tile j
        acc = cuda.local.array((no, 4), float32)  # O, the same layout over D
        tid = cuda.threadIdx.x
        wg, warp, lane = tid >> 7, (tid >> 5) & 3, tid & 31
        t = lane & 3
        bhs, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        bh, qi = block_tile32(cuda.blockIdx.x, (sq + ROWS - 1) // ROWS, bhs)
        q0 = qi * ROWS
        w0 = q0 + 64 * wg + 16 * warp  # the warp's first query
        row = w0 + (lane >> 2)  # this thread's rows: row and row + 8
        base = align1024(smem)  # the 128-byte swizzle repeats every 1024 bytes: tiles start on such a boundary

        for n in range(no):
            for e in range(4):
                acc[n, e] = float32(0.0)
        m0 = m1 = float32(-math.inf)  # running max (log2 units) of rows row and row + 8
        l0 = l1 = float32(0.0)  # this thread's part of their running sums

        seen = min(sk, q0 + ROWS) if causal else sk  # causal: the tiles after the block's last query are skipped
        tiles = (seen + keys - 1) // keys
        copy_q(q, smem, base + q_off, bh * sq * d, q0, sq, tid)  # Q's tile once, with K(0)
        copy_kv(k, smem, base + k_off, bh * sk * d, 0, sk, tid)
        async_commit()
        for it in range(tiles):
            k0 = it * keys
            async_wait(0)
            fence_proxy_async()  # this thread's copies (generic proxy) before the tensor cores' reads (async proxy)
            cuda.syncthreads()  # K(it) (and Q) in and fenced; every warpgroup done with V(it - 1)
            copy_kv(v, smem, base + v_off, bh * sk * d, k0, sk, tid)
            async_commit()
            # 1. S = Q K^T: a k16 slice of D per wgmma, the first one starting the sum (accumulate = 0)
            wgmma_fence()
            for kd in range(nd):
                wgmma_ss_k(s, keys, smem, base + q_off + (kd >> 2) * q_atom + wg * 64 * ATOM + (kd & 3) * 16,
                           smem, base + k_off + (kd >> 2) * k_atom + (kd & 3) * 16, kd > 0)
            wgmma_commit()
            wgmma_wait(0)  # S is in the accumulators
            async_wait(0)
            fence_proxy_async()
            cuda.syncthreads()  # V(it) in and fenced; every warpgroup done with K(it)
            if it + 1 < tiles:
                copy_kv(k, smem, base + k_off, bh * sk * d, k0 + keys, sk, tid)
            async_commit()
            # 2. the online softmax on the accumulators (step 5's): S -> P in place, O and l rescaled
            m0, m1, l0, l1 = softmax(s, acc, k0, sk, w0, row, t, causal, scale2, m0, m1, l0, l1)
            # 3. + 4. O += P V, a k16 slice of keys per wgmma: P's words from registers, V's rows from shared memory
            wgmma_fence()  # O (rescaled) and P written by the threads: ordered before the tensor cores read them
            for kk in range(keys // 16):
                a0, a1, a2, a3 = p_fragment(s, kk)
                wgmma_rs(acc, d, a0, a1, a2, a3, smem, base + v_off + kk * 16 * ATOM, lbo)
            wgmma_commit()
            wgmma_wait(0)  # O is in the accumulators (the next tile's softmax rescales it)

        # The rows' sums over their 4 lanes, then O / l (step 4's epilogue; rows past Sq are not stored)
        store_rows(out, acc, l0, l1, bh, row, t, sq)

    wgmma_kernel.tile = (ROWS, keys, d)
    wgmma_kernel.threads = THREADS
    wgmma_kernel.target = "sm_90a"  # wgmma is one of Hopper's architecture-specific instructions
    wgmma_kernel.shared_bytes = 2 * (v_off + keys * atoms * ATOM) + 1024  # + up to 1 KB to a 1024-byte boundary
    return wgmma_kernel


#: One kernel per head dimension: D = 16, 32, ..., 128.
WGMMA_KERNELS = [wgmma_kernel_for(d) for d in range(16, MAX_D + 1, 16)]


def require_hopper(step: str = "wgmma") -> None:
    """wgmma exists on sm_90 (Hopper) only: a clear error, naming the ``step`` called, on any other GPU (the simulator
    plays an H200)."""
    cc = compute_capability()
    if cc != (9, 0):
        raise LaunchError(f"attention.{step} needs a Hopper GPU (compute capability 9.0, e.g. an H100 or H200); this "
                          f"one is {cc[0]}.{cc[1]}. Use attention.pipelined, or attention.optimized, which picks a "
                          "step this GPU has")


def wgmma_launches(q, k, v, out, causal: bool, scale: float, keys: int = KEYS) -> list[Launch]:
    """One block of two warpgroups per (query tile of 128, head), in `block_tile`'s order; rows of q, k or v off a
    16-byte boundary (no cp.async): step 4's kernel instead."""
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    if address(q3) % 16 or address(k3) % 16 or address(v3) % 16:
        return mma_launches(q, k, v, out, causal, scale)
    bhs, sq, dim = q3.shape
    kernel = wgmma_kernel_for(dim, keys)
    return [Launch(kernel, (bhs * ceil_div(sq, ROWS),), (THREADS,), (q3, k3, v3, o3, np.float32(scale * LOG2E), causal),
                   kernel.shared_bytes)]


@version("attention", check_half, kernels=WGMMA_KERNELS)
def wgmma(q, k, v, out, causal=False, scale=None):
    """FlashAttention-3's first idea: two warpgroups of 64 query rows, S = Q K^T and O += P V as Hopper's wgmma (Q and
    K from swizzled shared tiles, P from registers), the online softmax on the wgmma's accumulators."""
    require_hopper()
    return wgmma_launches(q, k, v, out, causal, scale)
