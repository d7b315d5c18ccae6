"""Step 11 of the attention lesson, ``ping_pong``: step 10 with FlashAttention-3's scheduling of its two consumer
warpgroups -- they take turns at the tensor cores (*ping-pong*), so that one warpgroup's softmax runs while the other's
products run, and within a warpgroup the softmax of a tile runs while the tensor cores still multiply the tile before.

In step 10 each consumer warpgroup walks its tiles as step 9 does: S = Q K^T, wait, softmax, O += P V, wait. While
it computes the softmax -- an exp2 per score on the SM's special-function units, shuffles, rescales -- its own
products are done, and the tensor cores have only the other warpgroup's work, if the other happens to be at its
products just then. Nothing arranges that: both warpgroups start together, issue their products together, and then
compute their softmax together while the tensor cores wait. And the softmax is not small beside the products: an H100
SXM5 does 989 TFLOP/s of float16 matrix multiply-add but 3.9 TFLOP/s of exponentials (its special functions), so at
D = 128, with 512 times more multiply-add FLOPs than exponentials (4 D per score), the exponentials alone take half as
long as the products (FlashAttention-3's paper). Run one after the other, the loop takes about their sum; overlapped,
about the longer.

**Ping-pong.** Two named barriers (`gpukernels._named_barrier`), each counting both consumer warpgroups' 256
threads, hand a *turn* back and forth: warpgroup w waits at its own barrier (``named_barrier_sync(w, 256)``) before
it issues its products, and when they are issued -- not done -- it arrives at the other's
(``named_barrier_arrive(3 - w, 256)``). At the start warpgroup 2 arrives at barrier 1, so warpgroup 1 takes the first
turn. The tensor cores run the products in the order they were issued, so the turns order them: warpgroup 1's, then
warpgroup 2's, then warpgroup 1's, ... and each warpgroup's softmax falls under the other's products::

    tensor cores  | WG1: S(i) PV(i-1) | WG2: S(i) PV(i-1) | WG1: S(i+1) PV(i) | WG2: S(i+1) PV(i) |
    warpgroup 1   |   issue, wait     | softmax(i)        |   issue, wait     | softmax(i+1)      |
    warpgroup 2   | (softmax)         |   issue, wait     | softmax(i)        |   issue, wait     |

**One turn per tile, two products in it.** For the turns to alternate once per tile, a warpgroup issues both its
products in one turn, so the tile loop is *rotated*: turn ``it`` issues S(it) = Q K(it)^T and, beside it, O +=
P(it - 1) V(it - 1) -- the product of the tile before, whose P the softmax made at the end of the last turn. Turn 0
has no P V yet (a branch on the turn number, the same in every thread), and one more turn after the loop issues the
last tile's P V alone: ``tiles + 1`` turns for ``tiles`` tiles. (That last turn is written out after the loop rather
than as a branch around S inside it: with S's wgmmas under a branch, ptxas cannot tell that the softmax writes S's
registers only after S's wait, and serializes every wgmma of the kernel -- warning C7515.)

**Within a warpgroup** (FlashAttention-3's "intra-warpgroup overlap"): S(it) and P V(it - 1) are committed as two
groups, S first, so ``wgmma_wait(1)`` returns when S is in its accumulators while P V still runs. The softmax of tile
it runs then, under this warpgroup's own P V -- with two things kept apart that step 10 could share:

* P has registers of its own (``p``: the A words of the next P V), because the scores' registers receive S(it+1)
  while P V(it) still reads P(it); P is packed there after ``wgmma_wait(0)``, once P V(it - 1) has read the last one.
* O is rescaled only after ``wgmma_wait(0)``: the softmax finds the new row maxima and rescales the sums l at once
  (step 5's softmax, given no accumulators to touch), but O's accumulators belong to the P V in flight until then.

K's stage is released after ``wgmma_wait(1)`` (S has read it), V's after ``wgmma_wait(0)``; the producer and both rings
are step 10's.

**Registers.** O (D / 2 floats), S (32) and P's 16 words are all live at once in a consumer thread: 112 at D = 128,
within the 232 that ``setmaxnreg`` gives it. The named barriers' ids are computed from the warpgroup (``bar.sync``
takes them from a register); their count, 256, is an immediate. Warpgroup 2's last arrival at barrier 1 -- the turn
after the last, which warpgroup 1 never takes -- is left when the block ends, which does no harm: a block's barriers
start fresh.

In the simulator the named barriers are checked (`gpukernels.sim._named_barrier`): a count that does not match the
threads taking part (384, say, counting the producer too), or a turn handed back by no one (a missing arrive), is a
deadlock naming the line the warpgroups wait at and where every other warp is. Everything else is step 10's:
the tensor maps, the rings and their barriers, the producer, ``setmaxnreg``, the block of 128 queries and its order,
the softmax, the epilogue, and the fallback to step 9's path where a tensor map cannot describe the arrays. Checked
in the simulator (against float64 of the float16 inputs at odd shapes, several trips round both rings) and compiled
for sm_90a (its PTX holds both named-barrier instructions with their ids and count, the bulk tensor copies, both
wgmma forms, setmaxnreg honoured and no local memory, and ptxas serializes no wgmma); not yet timed on a GPU, so
``optimized`` does not choose it (`gpukernels.attention.k12_optimized`).
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32, types, uint32

from .._launch import Launch, ceil_div, version
from .._mma import align1024, wgmma_commit, wgmma_fence, wgmma_wait
from .._named_barrier import named_barrier_arrive, named_barrier_sync
from .._tma import (TENSOR_MAPS, fence_mbarrier_init, fence_proxy_tensormap_acquire, mbarrier_arrive_expect_tx,
                    mbarrier_init, mbarrier_wait, setmaxnreg_dec, setmaxnreg_inc)
from .._wgmma_rs import wgmma_rs, wgmma_ss_k
from ..tensor_core._ring import release, ring_init, stage_of, wait_empty, wait_full
from ..tensor_core.k08_warp_specialized import CONSUMER_REGS, PRODUCER_REGS
from ._common import MAX_D, check_half, heads
from .k04_mma import fragment_steps, p_fragment
from .k05_pipelined import softmax_step
from .k09_wgmma import ATOM, KEYS, ROWS, block_tile32, require_hopper, wgmma_launches
from .k10_warp_specialized import CONSUMERS, STAGES, THREADS, load_tile, tma_launch, tma_ready

TURN = 128 * CONSUMERS  # threads that count at each named barrier: both consumer warpgroups


def ping_pong_kernel_for(d: int, keys: int = KEYS, stages: int = STAGES):
    """The kernel for head dimension ``d`` (a multiple of 16), K/V tiles of ``keys`` keys and rings of ``stages``
    stages (benchmarks may time other tiles and rings)."""
    return _kernel(int(d), int(keys), int(stages))


@functools.cache
def _kernel(d: int, keys: int, stages: int):
    nd, no, ns = d // 16, d // 8, keys // 8  # k16 slices of a row of Q; 8-wide n-tiles of O; 8-key n-tiles of S
    nk = keys // 16  # k16 slices of a tile's keys: P V's wgmmas
    atoms = ceil_div(d, ATOM)
    q_atom, kv_atom = ROWS * ATOM, keys * ATOM  # halves between the 64-column atoms of a tile
    q_tile, kv_tile = atoms * q_atom, atoms * kv_atom  # halves of Q's tile, of a K or V stage
    q_off, k_off = 0, q_tile  # in the dynamic shared memory: Q's tile, K's ring, V's ring
    v_off = k_off + stages * kv_tile
    lbo = kv_atom * 2  # bytes between V's atoms: the descriptor's leading byte offset (MN-major B)
    softmax = softmax_step(keys, 0)  # step 5's softmax, O left alone: it is rescaled once P V(it - 1) is done
    store_rows = fragment_steps(d)[2]

    @cuda.jit(device=True, forceinline=True)
    def add_values(acc, p, smem, v_at):
        # O += P V for one tile: a k16 slice of keys per wgmma, P's words from registers, V's rows from its stage
        for kk in range(nk):
            wgmma_rs(acc, d, p[kk, 0], p[kk, 1], p[kk, 2], p[kk, 3], smem, v_at + kk * 16 * ATOM, lbo)

    # launch_bounds: at most 384 threads, 1 block per SM -- the register cap at entry that setmaxnreg needs
    @cuda.jit(extensions=[TENSOR_MAPS], launch_bounds=(THREADS, 1), fastmath=True)
    def ping_pong_kernel(q, k, v, out, tq, tk, tv, scale2, causal):
        # q, k, v: (BH, S, D) float16, out: (BH, Sq, D) float32; tq, tk, tv: their tensor maps, as (BH * S, D) with
        # boxes of (128 or 64) x 64 halves; scale2 = scale * log2(e). Warpgroup 0 copies, 1 and 2 compute in turns.
        smem = cuda.shared.array(0, types.float16)  # dynamic: Q's tile, K's ring, V's ring (the launch gives its size)
        q_full = cuda.shared.array(1, types.uint64)  # Q's tile has landed
        k_full = cuda.shared.array(stages, types.uint64)  # an mbarrier per stage of K's ring: its tile has landed ...
        k_empty = cuda.shared.array(stages, types.uint64)  # ... and one: the consumers are done with it
        v_full = cuda.shared.array(stages, types.uint64)  # the same for V's ring
        v_empty = cuda.shared.array(stages, types.uint64)
        tid = cuda.threadIdx.x
        wg = tid >> 7  # the warpgroup: 0 the producer, 1 and 2 the consumers
        bhs, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        bh, qi = block_tile32(cuda.blockIdx.x, (sq + ROWS - 1) // ROWS, bhs)
        q0 = qi * ROWS
        seen = min(sk, q0 + ROWS) if causal else sk  # causal: the tiles after the block's last query are skipped
        tiles = (seen + keys - 1) // keys  # both roles walk the same tiles
        base = align1024(smem)  # the 128-byte swizzle repeats every 1024 bytes: tiles start on such a boundary
        if tid == 0:
            fence_proxy_tensormap_acquire(tq)  # the maps were written by the host: acquire them for the copy engine
            fence_proxy_tensormap_acquire(tk)
            fence_proxy_tensormap_acquire(tv)
            mbarrier_init(q_full, 0, 1)
            ring_init(k_full, k_empty, stages, 4 * CONSUMERS)  # full: the producer's arrival; empty: each consumer
            ring_init(v_full, v_empty, stages, 4 * CONSUMERS)  # warp's
            fence_mbarrier_init()  # ... visible to the copy engine
        cuda.syncthreads()  # the barriers are initialised for every thread: the last barrier of the whole block

        if wg == 0:  # the producer: one thread issues every copy, the others give their registers back and end
            setmaxnreg_dec(PRODUCER_REGS)
            if tid == 0:
                mbarrier_arrive_expect_tx(q_full, 0, 2 * q_tile)  # Q's boxes, zeros past D included
                load_tile(smem, base + q_off, q_atom, tq, bh * sq + q0, atoms, q_full, 0)
                for it in range(tiles):
                    s = stage_of(it, stages)
                    row = bh * sk + it * keys  # key it * keys of head bh (the last box may run into the next head)
                    wait_empty(k_empty, it, stages)  # the consumers released tile it - stages's stage of K
                    mbarrier_arrive_expect_tx(k_full, s, 2 * kv_tile)
                    load_tile(smem, base + k_off + s * kv_tile, kv_atom, tk, row, atoms, k_full, s)
                    wait_empty(v_empty, it, stages)  # ... and of V
                    mbarrier_arrive_expect_tx(v_full, s, 2 * kv_tile)
                    load_tile(smem, base + v_off + s * kv_tile, kv_atom, tv, row, atoms, v_full, s)
        else:  # the consumers: 64 query rows each, taking turns at the tensor cores
            setmaxnreg_inc(CONSUMER_REGS)
            s_acc = cuda.local.array((ns, 4), float32)  # S, then P: accumulator 4 j + e = element e of n-tile j
            p = cuda.local.array((nk, 4), uint32)  # P(it - 1)'s words: the A operand of the next turn's P V
            acc = cuda.local.array((no, 4), float32)  # O, the same layout over D
            c = wg - 1  # this consumer's rows of the block's 128: 64 c ..
            mine, other = wg, 3 - wg  # named barriers: 1 is warpgroup 1's turn, 2 warpgroup 2's
            warp, lane = (tid >> 5) & 3, tid & 31
            t = lane & 3
            w0 = q0 + 64 * c + 16 * warp  # the warp's first query
            row = w0 + (lane >> 2)  # this thread's rows: row and row + 8
            releases = lane == 0  # lane 0 of each warp arrives on the empty barriers (worked out once, outside the
            # loop: computed inside it, ptxas serializes the wgmmas)
            for n in range(no):
                for e in range(4):
                    acc[n, e] = float32(0.0)
            m0 = m1 = float32(-math.inf)  # running max (log2 units) of rows row and row + 8
            l0 = l1 = float32(0.0)  # this thread's part of their running sums
            q_at = base + q_off + c * 64 * ATOM  # this warpgroup's 64 rows of Q's tile

            mbarrier_wait(q_full, 0, 0)  # Q's tile landed (the barrier's only phase)
            if wg == 2:
                named_barrier_arrive(1, TURN)  # warpgroup 1 takes the first turn
            for it in range(tiles):  # turn it: S(it) = Q K(it)^T and O += P(it - 1) V(it - 1)
                wait_full(k_full, it, stages)  # K(it) landed
                if it > 0:
                    wait_full(v_full, it - 1, stages)  # V(it - 1) landed
                named_barrier_sync(mine, TURN)  # this warpgroup's turn at the tensor cores
                wgmma_fence()  # O (rescaled) and P's words written by the threads, before the tensor cores read them
                # 1. S = Q K^T: a k16 slice of D per wgmma, the first one starting the sum (accumulate = 0)
                k_at = base + k_off + stage_of(it, stages) * kv_tile
                for kd in range(nd):
                    wgmma_ss_k(s_acc, keys, smem, q_at + (kd >> 2) * q_atom + (kd & 3) * 16,
                               smem, k_at + (kd >> 2) * kv_atom + (kd & 3) * 16, kd > 0)
                wgmma_commit()  # the group of S(it)
                if it > 0:  # 2. O += P V of the tile before (none in the first turn)
                    add_values(acc, p, smem, base + v_off + stage_of(it - 1, stages) * kv_tile)
                wgmma_commit()  # the group of P V(it - 1) (empty in the first turn)
                named_barrier_arrive(other, TURN)  # issued: the other warpgroup's turn, its products queue behind
                wgmma_wait(1)  # S(it) is in the accumulators; P V(it - 1) may still run
                release(k_empty, it, stages, releases)  # the tensor cores are done with K(it)
                # 3. the online softmax of tile it, under this warpgroup's own P V: S -> P in place, l rescaled
                m0_old, m1_old = m0, m1
                m0, m1, l0, l1 = softmax(s_acc, acc, it * keys, sk, w0, row, t, causal, scale2, m0, m1, l0, l1)
                wgmma_wait(0)  # O += P V(it - 1) is done: O may be rescaled, P's words rewritten
                if it > 0:
                    release(v_empty, it - 1, stages, releases)  # the tensor cores are done with V(it - 1)
                # 4. O rescaled for tile it's maxima (the softmax's own factors), P(it) packed for the next turn
                alpha0 = math.exp2(m0_old - (m0 if m0 != -math.inf else float32(0.0)))
                alpha1 = math.exp2(m1_old - (m1 if m1 != -math.inf else float32(0.0)))
                if alpha0 != 1 or alpha1 != 1:
                    for n in range(no):
                        acc[n, 0] *= alpha0
                        acc[n, 1] *= alpha0
                        acc[n, 2] *= alpha1
                        acc[n, 3] *= alpha1
                for kk in range(nk):
                    p[kk, 0], p[kk, 1], p[kk, 2], p[kk, 3] = p_fragment(s_acc, kk)
            # the last turn: O += P V of the last tile
            wait_full(v_full, tiles - 1, stages)
            named_barrier_sync(mine, TURN)
            wgmma_fence()
            add_values(acc, p, smem, base + v_off + stage_of(tiles - 1, stages) * kv_tile)
            wgmma_commit()
            named_barrier_arrive(other, TURN)
            wgmma_wait(0)
            release(v_empty, tiles - 1, stages, releases)

            # The rows' sums over their 4 lanes, then O / l (step 4's epilogue; rows past Sq are not stored)
            store_rows(out, acc, l0, l1, bh, row, t, sq)

    ping_pong_kernel.tile = (ROWS, keys, d)
    ping_pong_kernel.threads = THREADS
    ping_pong_kernel.stages = stages
    ping_pong_kernel.target = "sm_90a"  # wgmma and setmaxnreg are Hopper's architecture-specific instructions
    ping_pong_kernel.shared_bytes = 2 * (v_off + stages * kv_tile) + 1024  # + up to 1 KB to a 1 KB boundary
    return ping_pong_kernel


#: One kernel per head dimension: D = 16, 32, ..., 128.
PING_PONG_KERNELS = [ping_pong_kernel_for(d) for d in range(16, MAX_D + 1, 16)]


def ping_pong_launches(q, k, v, out, causal: bool, scale: float, keys: int = KEYS,
                       stages: int = STAGES) -> list[Launch]:
    """This step's kernel by step 10's `tma_launch`; arrays a tensor map cannot describe: step 9's path."""
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    if not tma_ready(q3, k3, v3):
        return wgmma_launches(q, k, v, out, causal, scale)
    return tma_launch(ping_pong_kernel_for(q3.shape[2], keys, stages), q3, k3, v3, o3, causal, scale, keys)


@version("attention", check_half, kernels=PING_PONG_KERNELS)
def ping_pong(q, k, v, out, causal=False, scale=None):
    """FlashAttention-3's schedule: the consumer warpgroups take turns at the tensor cores (two named barriers), each
    one's softmax under the other's products and under its own P V of the tile before."""
    require_hopper("ping_pong")
    return ping_pong_launches(q, k, v, out, causal, scale)
