"""Step 8 of the tensor-core ladder, ``warp_specialized``: step 7's TMA-fed wgmma kernel with its warps given roles
-- a *producer* warpgroup that only issues copies and *consumer* warpgroups that only issue wgmma -- talking through
a full and an empty mbarrier per stage, and ``setmaxnreg`` moving registers from the producer to the consumers.

In step 7 every thread does both jobs: thread 0 issues a stage's copies between its own wgmmas, and a
``cuda.syncthreads()`` per k tile tells it that every warpgroup is done with the stage it refills -- so the copies
wait for the slowest warp, and the multiplications wait for thread 0's copies. Here the block has three warpgroups
(384 threads), one role each, and no barrier of the whole block after the start (the *mainloop* of CUTLASS's
warp-specialized kernels, its parts in `gpukernels.tensor_core._ring`):

* **The producer**, warpgroup 0: one thread walks the k tiles and, for each, waits on the stage's **empty** barrier
  until the consumers have released it, then announces the stage's bytes on its **full** barrier
  (``arrive.expect_tx``) and asks the copy engine for A's box and B's four atoms, as step 7's thread 0 did. The
  other 127 threads of the warpgroup have nothing to do.
* **The consumers**, warpgroups 1 and 2, 64 rows of the 128 x 256 tile of C each: for each k tile, wait on the
  stage's full barrier, issue the 4 wgmmas, and once ``wgmma_wait(1)`` says the products of the tile before are
  done, *release* that tile's stage: lane 0 of each consumer warp arrives on its empty barrier (8 arrivals complete
  a phase; each warp's wait covers its own part of the warpgroup's reads, so each warp says so itself).

Both barriers of stage s complete one phase per use, so a wait names its phase by the *phase bit*: the consumers
wait on full with parity (kt // stages) & 1, the producer on empty with the opposite parity -- the release of tile
kt - stages, the phase before; the first time round the ring that is the fresh barrier's "phase -1", which counts as
completed, so the producer's first ``stages`` waits return at once.

**Registers.** The consumers hold the accumulators, 128 floats per thread, and want many registers; the producer's
thread needs a few addresses. ``setmaxnreg`` (`gpukernels._tma`) moves them: the producer warpgroup gives its
registers back (``setmaxnreg_dec(40)``), each consumer warpgroup takes more (``setmaxnreg_inc(232)``): 128 x 40 +
256 x 232 = 64512 of the SM's 65536. ptxas honours it only when the kernel's registers are capped at entry -- here
``cuda.jit(launch_bounds=(384, 1))``: at most 384 threads, 1 block per SM, so 65536 / 384 = 168 per thread to start
with -- and each warpgroup's role is one branch of a single if/else, as below.

Everything else is step 7's: the same tensor maps, boxes, ring of 4 stages, grouped tile order and epilogue
(`make_warp_specialized_kernel` is `make_tma_kernel` with roles, empty barriers and setmaxnreg). Rows of A and B
must be 16-byte multiples apart; other shapes run step 6's kernel with loads and stores, as step 7 does.

In the simulator a producer that skips the empty wait is caught: it arms a stage's full barrier again while the
stage's copies are still unconsumed (an "early overwrite" naming its line and the copy's), or its copies land on a
stage a consumer's wgmma still reads. This step is checked in the simulator (against float64 at odd shapes, several
times round the ring) and compiled for sm_90a (its PTX holds setmaxnreg, the waits on both barriers, the bulk tensor
copies and the wgmmas; ptxas honours setmaxnreg and keeps everything in registers). On an H100 it matched float64
and ran 0.226 ms at 4096^3 (step 7: 0.233; cuBLAS FP16: 0.219) and 1.759 at 8192^3 (step 7: 1.755): with one block
per tile the roles gain little over step 7 -- what they make possible is step 9, where the producer runs ahead into
the next tile.
"""

from __future__ import annotations

from numba import cuda, float32, types

from .._launch import version
from .._mma import (align1024, wgmma_commit, wgmma_fence, wgmma_n64, wgmma_n128, wgmma_n256, wgmma_store, wgmma_wait,
                    wgmma_zero)
from .._tma import TENSOR_MAPS, fence_mbarrier_init, fence_proxy_tensormap_acquire, setmaxnreg_dec, setmaxnreg_inc
from ._common import check, rows_aligned16
from ._ring import release, ring_init, stage_of, wait_empty, wait_full
from .k06_wgmma import BK, BM, GROUP, STAGES, grouped_tile, require_hopper, wgmma_launch, wgmma_sync_kernel
from .k07_tma import make_load_stage, tma_launch

PRODUCER_REGS = 40  # registers per thread of the producer warpgroup after setmaxnreg.dec
CONSUMER_REGS = 232  # ... of each consumer warpgroup after setmaxnreg.inc (the accumulators: 128 of them)


def make_warp_specialized_kernel(bn: int = 256, stages: int = STAGES, keep: int = 1, group: int = GROUP,
                                 bm: int = BM):
    """Step 7's kernel (`make_tma_kernel`, same arguments) with a producer warpgroup and bm / 64 consumer
    warpgroups, a full and an empty mbarrier per stage."""
    consumers = bm // 64  # warpgroups that issue wgmma: 64 rows of C each
    threads = 128 * (1 + consumers)  # + the producer warpgroup
    acc_n = bn // 2  # accumulators per thread
    a_stage, b_stage = bm * BK, BK * bn  # halves per buffer
    stage = a_stage + b_stage
    lbo = BK * 64 * 2  # bytes between B's 64-column atoms
    mma = {64: wgmma_n64, 128: wgmma_n128, 256: wgmma_n256}[bn]
    load_stage = make_load_stage(bm, bn)  # one thread's copies of a stage: A's box and B's atoms (step 7's)

    # launch_bounds: at most `threads` per block, 1 block per SM -- the register cap at entry setmaxnreg needs
    @cuda.jit(extensions=[TENSOR_MAPS], launch_bounds=(threads, 1))
    def warp_specialized_kernel(a, b, c, ta, tb):
        smem = cuda.shared.array(0, types.float16)  # dynamic: the launch gives its size
        full = cuda.shared.array(stages, types.uint64)  # an mbarrier per stage: its tiles have landed
        empty = cuda.shared.array(stages, types.uint64)  # ... and one: its consumers are done with it
        tid = cuda.threadIdx.x
        wg = tid >> 7  # the warpgroup: 0 the producer, 1.. the consumers
        row, col = grouped_tile(group)
        row0, col0 = row * bm, col * bn
        base0 = align1024(smem)
        k_tiles = (a.shape[1] + BK - 1) // BK
        if tid == 0:
            fence_proxy_tensormap_acquire(ta)  # the maps were written by the host: acquire them for the copy engine
            fence_proxy_tensormap_acquire(tb)
            ring_init(full, empty, stages, 4 * consumers)  # full: the producer's arrival; empty: each consumer warp's
            fence_mbarrier_init()  # ... visible to the copy engine
        cuda.syncthreads()  # the barriers are initialised for every thread
        if wg == 0:  # the producer: one thread issues every copy, the others give their registers back and finish
            setmaxnreg_dec(PRODUCER_REGS)
            if tid == 0:
                for kt in range(k_tiles):
                    wait_empty(empty, kt, stages)  # the consumers released tile kt - stages's stage
                    s = stage_of(kt, stages)
                    load_stage(smem, base0 + s * stage, ta, tb, full, s, kt * BK, row0, col0)
        else:  # the consumers: 64 rows of the block's tile each
            setmaxnreg_inc(CONSUMER_REGS)
            acc = cuda.local.array(acc_n, float32)
            wgmma_zero(acc, bn)
            rows = (wg - 1) * 64
            releases = (tid & 31) == 0  # lane 0 of each warp arrives on the empty barriers (worked out once, here:
            # computed inside the loop, ptxas serializes the wgmmas)
            for kt in range(k_tiles):
                wait_full(full, kt, stages)  # tile kt landed: phase kt // stages of its full barrier
                sa = base0 + stage_of(kt, stages) * stage + rows * BK
                sb = base0 + stage_of(kt, stages) * stage + a_stage
                wgmma_fence()
                for s in range(BK // 16):
                    mma(acc, smem, sa + s * 16, smem, sb + s * 16 * 64, lbo)
                wgmma_commit()
                wgmma_wait(keep)  # tile kt - keep's products are done ...
                if kt >= keep:  # ... so this warp (its lane 0) releases their stage to the producer
                    release(empty, kt - keep, stages, releases)
            wgmma_wait(0)
            warp, lane = (tid >> 5) & 3, tid & 31
            r0 = row0 + rows + warp * 16 + (lane >> 2)
            c0 = col0 + 2 * (lane & 3)
            wgmma_store(c, acc, bn, r0, c0)  # acc[4 j + i] -> c[r0 + 8 (i // 2), c0 + 8 j + i % 2], inside C

    if bm != BM or bn != 256:  # (profiles tell them apart)
        name = f"warp_specialized_{bm}x{bn}_kernel"
        warp_specialized_kernel.__name__ = warp_specialized_kernel.__qualname__ = name
    warp_specialized_kernel.tile = (bm, bn)
    warp_specialized_kernel.threads = threads
    warp_specialized_kernel.stages = stages
    warp_specialized_kernel.target = "sm_90a"  # wgmma and setmaxnreg are Hopper's architecture-specific instructions
    warp_specialized_kernel.shared_bytes = stages * stage * 2 + 1024  # + up to 1 KB to reach a 1024-byte boundary
    return warp_specialized_kernel


warp_specialized_kernel = make_warp_specialized_kernel()


@version("tensor_core", check, kernels=[warp_specialized_kernel, wgmma_sync_kernel])
def warp_specialized(a, b, c):
    """Step 7 with roles: a producer warpgroup's thread issues the TMA copies, two consumer warpgroups the wgmmas; a
    full and an empty mbarrier per stage; setmaxnreg moves registers to the consumers."""
    require_hopper()
    if not rows_aligned16(a, b):  # a tensor map's rows are 16-byte multiples apart: loads and stores instead
        return wgmma_launch(wgmma_sync_kernel, a, b, c)
    return tma_launch(warp_specialized_kernel, a, b, c)
