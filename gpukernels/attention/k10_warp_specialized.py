"""Step 10 of the attention lesson, ``warp_specialized``: step 9's wgmma tile loop fed by a *producer* warpgroup that
copies K and V with TMA into a ring of stages, while two *consumer* warpgroups only compute -- FlashAttention-3's
second idea, the tensor-core lesson's steps 7 and 8 (``tma``, ``warp_specialized``) brought to attention.

In step 9 all 256 threads load and all compute. Each K/V tile is copied by every thread in 16-byte cp.async pieces
(2 per thread at D = 64, each with its own address and swizzle arithmetic), and two ``cuda.syncthreads()`` per tile
make the pieces visible and tell the block that a buffer is free: each warpgroup waits at them for the slowest warp
of the block, and with one buffer for K and one for V, the next tile's copy starts only once the tile before is
consumed. Here the block has **three warpgroups** (384 threads), one job each, and no block-wide barrier after the
start:

* **The producer**, warpgroup 0: one thread asks the copy engine for each tile (``cp.async.bulk.tensor``,
  `gpukernels._tma.tma_load_2d`) -- Q's tile once, then, tile after tile, K's and V's into the next stage of their
  **ring**. A stage is refilled only when the consumers have released it: the thread waits on the stage's **empty**
  mbarrier, announces the bytes the copies will write on its **full** mbarrier (``arrive.expect_tx``), and issues
  the copies, which complete that barrier's phase as they land. The other 127 threads of the warpgroup have nothing
  to do and end.
* **The consumers**, warpgroups 1 and 2, 64 query rows each -- step 9's two warpgroups, with step 9's tile loop: for
  each K/V tile, wait on K's full barrier, S = Q K^T by wgmma, the online softmax, wait on V's full barrier,
  O += P V by wgmma. Once a product's ``wgmma_wait`` says the tensor cores are done with a stage, lane 0 of each of the
  8 consumer warps *releases* it: an arrival on its empty barrier (8 arrivals complete a phase).

K and V have **a ring each** (``STAGES`` = 2 stages, FlashAttention-3's number at D = 128), so that K's stage is
released as soon as S is computed, before the softmax, and V's after P V: the producer refills each as early as it
can. The ring is `gpukernels.tensor_core._ring`'s, as in the tensor-core lesson: K/V tile ``it`` lies in stage ``it %
STAGES`` and completes phase ``it // STAGES`` of that stage's barriers, so the consumers wait on full with parity
``(it // STAGES) & 1`` and the producer on empty with the opposite one (its first STAGES waits return at once).
With the copies running ahead by up to STAGES tiles and nothing waiting for the slowest warp of the block, the tensor
cores' next operands are usually in shared memory before they are asked for.

**The tensor maps.** The copy engine reads boxes of 2-D arrays, so q, k and v are viewed as (B*H*S, D): row
``bh * S + i`` is query or key i of head bh. A K or V tile is one box of 64 keys x 64 halves per 64-column atom (D =
128: two boxes) and Q's tile one box of 128 queries x 64 per atom, all with the 128-byte swizzle: TMA writes each box
exactly where step 9's ``tile_at`` put its cp.async pieces, which is where the wgmma descriptors read (D = 16 reads a
quarter of each 128-byte row; TMA fills the box's columns past D with zeros and counts them in the bytes).

**The tail of a head.** A box is 64 keys, whatever is left of the head: the last tile's box runs past the head's
Sk keys into the *next head's* first keys (past the last head, into zeros). This step keeps the 2-D view and masks
them, as step 9 masks keys past Sk: the softmax sets their scores to -inf, so their weights are exactly 0, and the next
head's values they meet in P V are multiplied by 0 -- for finite values, they add nothing. (A 3-D tensor map, (B*H,
Sk, D) with a box of 1 x 64 x 64, would zero-fill past each head instead; `gpukernels._tma` makes 2-D maps only, and
the mask is already there.) Non-finite values are not the lesson's (the ladder's docstring): an inf or NaN in the
next head's first rows of v would reach this head's last tile, as a masked NaN already does within a tile.

**Registers** as the tensor-core lesson's step 8: ``cuda.jit(launch_bounds=(384, 1))`` caps each thread at 65536 /
384 = 168 registers at entry, then ``setmaxnreg`` moves them -- the producer warpgroup gives them back
(``setmaxnreg_dec(40)``), each consumer warpgroup takes 232 (O's D / 2 accumulators, S's 32, P's words). ptxas
honours it only with the roles as the two branches of one if/else.

Everything else is step 9's: the block of 128 query rows, its order (`block_tile32`), the wgmma forms and their
descriptors, the online softmax on the accumulators, the epilogue. The copies write through the async proxy, as the
tensor cores read, so step 9's ``fence_proxy_async`` is gone; so is cp.async, and both ``cuda.syncthreads()`` of the
loop. Under the causal mask both roles walk the same tiles -- up to the block's last query, as step 9's loop.

**Where it runs.** sm_90a (wgmma, setmaxnreg), like step 9 (``require_hopper``). The arrays must start on a 16-byte
boundary, which a tensor map needs (rows D halves apart are 16-byte multiples, since D is a multiple of 16): otherwise
the step takes step 9's path, which for such arrays is step 4's kernel.

In the simulator a producer that skips the empty wait re-arms a stage whose copies no consumer has waited for -- an
"early overwrite" naming its line and the copy's; a consumer that never releases its stage hangs the producer at its
wait -- a "deadlock" naming the waits. Checked in the simulator (against float64 of the float16 inputs at odd shapes,
several trips round both rings) and compiled for sm_90a (its PTX holds the bulk tensor copies, the waits on both
barriers, both wgmma forms and setmaxnreg, honoured; no local memory); not yet timed on a GPU, so ``optimized`` does
not choose it (`gpukernels.attention.k12_optimized`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types

from .._intrinsics import address
from .._launch import Launch, ceil_div, version
from .._mma import align1024, wgmma_commit, wgmma_fence, wgmma_wait
from .._tma import (TENSOR_MAPS, TensorMap, fence_mbarrier_init, fence_proxy_tensormap_acquire,
                    mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait, setmaxnreg_dec, setmaxnreg_inc,
                    tma_load_2d)
from .._wgmma_rs import wgmma_rs, wgmma_ss_k
from ..tensor_core._ring import release, ring_init, stage_of, wait_empty, wait_full
from ..tensor_core.k08_warp_specialized import CONSUMER_REGS, PRODUCER_REGS
from ._common import MAX_D, check_half, heads
from .k04_mma import fragment_steps, p_fragment
from .k05_pipelined import LOG2E, softmax_step
from .k09_wgmma import ATOM, KEYS, ROWS, WARPGROUPS, block_tile32, require_hopper, wgmma_launches

STAGES = 2  # stages of each ring, K's and V's
CONSUMERS = WARPGROUPS  # warpgroups that compute, 64 query rows each (step 9's two)
THREADS = 128 * (1 + CONSUMERS)  # + the producer warpgroup


@cuda.jit(device=True, forceinline=True)
def load_tile(smem, at, atom, tmap, row, atoms, bars, s):
    """One thread: a tile of ``tmap``'s rows ``row``.. as ``atoms`` boxes of 64 columns, ``atom`` halves apart in
    shared memory from element ``at`` on, each completing its bytes on mbarrier ``s`` of ``bars``."""
    for a in range(atoms):
        tma_load_2d(smem, at + a * atom, tmap, row, a * ATOM, bars, s)


def tensor_maps(q3, k3, v3, keys: int = KEYS) -> tuple:
    """The tensor maps of q, k and v (each (BH, S, D)) viewed as (BH * S, D): boxes of ROWS queries (Q's tile) or
    ``keys`` keys (a K or V tile) by 64 halves, 128-byte swizzled."""
    def rows(x):
        return x.reshape(x.shape[0] * x.shape[1], x.shape[2])

    return (TensorMap(rows(q3), (ROWS, ATOM), swizzle=128), TensorMap(rows(k3), (keys, ATOM), swizzle=128),
            TensorMap(rows(v3), (keys, ATOM), swizzle=128))


def tma_ready(*arrays) -> bool:
    """Whether a tensor map can describe each array: it starts on a 16-byte boundary (its rows, D halves with D a
    multiple of 16, are 16-byte multiples apart)."""
    return all(address(x) % 16 == 0 for x in arrays)


def tma_launch(kernel, q3, k3, v3, o3, causal: bool, scale: float, keys: int = KEYS) -> list[Launch]:
    """``kernel`` (this step's, or the next one's) on one block of three warpgroups per (query tile of 128, head), in
    step 9's order, with the tensor maps of q, k and v (each (BH, S, D))."""
    bhs, sq, _ = q3.shape
    return [Launch(kernel, (bhs * ceil_div(sq, ROWS),), (THREADS,),
                   (q3, k3, v3, o3) + tensor_maps(q3, k3, v3, keys) + (np.float32(scale * LOG2E), causal),
                   kernel.shared_bytes)]


def warp_specialized_kernel_for(d: int, keys: int = KEYS, stages: int = STAGES):
    """The kernel for head dimension ``d`` (a multiple of 16), K/V tiles of ``keys`` keys and rings of ``stages``
    stages (benchmarks may time other tiles and rings)."""
    return _kernel(int(d), int(keys), int(stages))


@functools.cache
def _kernel(d: int, keys: int, stages: int):
    nd, no, ns = d // 16, d // 8, keys // 8  # k16 slices of a row of Q; 8-wide n-tiles of O; 8-key n-tiles of S
    atoms = ceil_div(d, ATOM)
    q_atom, kv_atom = ROWS * ATOM, keys * ATOM  # halves between the 64-column atoms of a tile
    q_tile, kv_tile = atoms * q_atom, atoms * kv_atom  # halves of Q's tile, of a K or V stage
    q_off, k_off = 0, q_tile  # in the dynamic shared memory: Q's tile, K's ring, V's ring
    v_off = k_off + stages * kv_tile
    lbo = kv_atom * 2  # bytes between V's atoms: the descriptor's leading byte offset (MN-major B)
    softmax = softmax_step(keys, no)
    store_rows = fragment_steps(d)[2]

    # launch_bounds: at most 384 threads, 1 block per SM -- the register cap at entry that setmaxnreg needs
    @cuda.jit(extensions=[TENSOR_MAPS], launch_bounds=(THREADS, 1), fastmath=True)
    def warp_specialized_kernel(q, k, v, out, tq, tk, tv, scale2, causal):
        # q, k, v: (BH, S, D) float16, out: (BH, Sq, D) float32; tq, tk, tv: their tensor maps, as (BH * S, D) with
        # boxes of (128 or 64) x 64 halves; scale2 = scale * log2(e). Warpgroup 0 copies, 1 and 2 compute.
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
        else:  # the consumers: 64 query rows each, step 9's tile loop on the rings
            setmaxnreg_inc(CONSUMER_REGS)
            s_acc = cuda.local.array((ns, 4), float32)  # S, then P: accumulator 4 j + e = element e of n-tile j
            acc = cuda.local.array((no, 4), float32)  # O, the same layout over D
            c = wg - 1  # this consumer's rows of the block's 128: 64 c ..
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
            for it in range(tiles):
                k0 = it * keys
                k_at = base + k_off + stage_of(it, stages) * kv_tile
                v_at = base + v_off + stage_of(it, stages) * kv_tile
                wait_full(k_full, it, stages)  # K(it) landed: phase it // stages of its stage's full barrier
                # 1. S = Q K^T: a k16 slice of D per wgmma, the first one starting the sum (accumulate = 0)
                wgmma_fence()
                for kd in range(nd):
                    wgmma_ss_k(s_acc, keys, smem, q_at + (kd >> 2) * q_atom + (kd & 3) * 16,
                               smem, k_at + (kd >> 2) * kv_atom + (kd & 3) * 16, kd > 0)
                wgmma_commit()
                wgmma_wait(0)  # S is in the accumulators: the tensor cores are done with K(it) ...
                release(k_empty, it, stages, releases)  # ... so this warp releases its stage to the producer
                # 2. the online softmax on the accumulators (step 5's): S -> P in place, O and l rescaled
                m0, m1, l0, l1 = softmax(s_acc, acc, k0, sk, w0, row, t, causal, scale2, m0, m1, l0, l1)
                # 3. + 4. O += P V, a k16 slice of keys per wgmma: P's words from registers, V's rows from the ring
                wait_full(v_full, it, stages)  # V(it) landed
                wgmma_fence()  # O (rescaled) and P written by the threads: ordered before the tensor cores read them
                for kk in range(keys // 16):
                    a0, a1, a2, a3 = p_fragment(s_acc, kk)
                    wgmma_rs(acc, d, a0, a1, a2, a3, smem, v_at + kk * 16 * ATOM, lbo)
                wgmma_commit()
                wgmma_wait(0)  # O is in the accumulators: the tensor cores are done with V(it)
                release(v_empty, it, stages, releases)

            # The rows' sums over their 4 lanes, then O / l (step 4's epilogue; rows past Sq are not stored)
            store_rows(out, acc, l0, l1, bh, row, t, sq)

    warp_specialized_kernel.tile = (ROWS, keys, d)
    warp_specialized_kernel.threads = THREADS
    warp_specialized_kernel.stages = stages
    warp_specialized_kernel.target = "sm_90a"  # wgmma and setmaxnreg are Hopper's architecture-specific instructions
    warp_specialized_kernel.shared_bytes = 2 * (v_off + stages * kv_tile) + 1024  # + up to 1 KB to a 1 KB boundary
    return warp_specialized_kernel


#: One kernel per head dimension: D = 16, 32, ..., 128.
WARP_SPECIALIZED_KERNELS = [warp_specialized_kernel_for(d) for d in range(16, MAX_D + 1, 16)]


def warp_specialized_launches(q, k, v, out, causal: bool, scale: float, keys: int = KEYS,
                              stages: int = STAGES) -> list[Launch]:
    """This step's kernel by `tma_launch`; arrays a tensor map cannot describe: step 9's path."""
    q3, k3, v3, o3 = heads(q), heads(k), heads(v), heads(out)
    if not tma_ready(q3, k3, v3):
        return wgmma_launches(q, k, v, out, causal, scale)
    return tma_launch(warp_specialized_kernel_for(q3.shape[2], keys, stages), q3, k3, v3, o3, causal, scale, keys)


@version("attention", check_half, kernels=WARP_SPECIALIZED_KERNELS)
def warp_specialized(q, k, v, out, causal=False, scale=None):
    """Step 9 fed by a producer warpgroup: its one thread copies K and V by TMA into a ring of stages each, a full and
    an empty mbarrier per stage; the two consumer warpgroups compute, with no block-wide barrier in the loop."""
    require_hopper("warp_specialized")
    return warp_specialized_launches(q, k, v, out, causal, scale)
