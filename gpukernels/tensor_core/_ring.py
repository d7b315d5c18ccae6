"""The mainloop's ring of stages, as the Hopper steps share it (CUTLASS's words): ``stages`` shared-memory buffers
filled in turn, k tile ``kt`` in stage ``kt % stages``; each stage has a *full* mbarrier (its tiles have landed: the
producer's ``arrive.expect_tx`` and the copies' transaction bytes complete its phase) and, from step 8 on, an *empty*
mbarrier (its consumers are done reading it: each arrives once per use). Stage s is used every ``stages`` k tiles,
so tile kt completes phase ``kt // stages`` of its barriers, and a wait names that phase by its parity -- the
*phase bit*, ``(kt // stages) & 1``, flipping each time round the ring.

* ``wait_full(full, kt, stages)``: the consumers' wait for tile kt's bytes.
* ``wait_empty(empty, kt, stages)``: the producer's wait before it refills a stage with tile kt: the consumers
  released the stage's previous tile, kt - stages (phase ``kt // stages - 1`` of the empty barrier). The first time
  round there is no previous tile: the wait asks for the parity *opposite* the fresh barrier's phase 0, which counts
  as completed and returns at once -- CUTLASS's producer starts with its phase bit at 1 for the same reason.
* ``release(empty, kt, stages, pred)``: a consumer's arrival on tile kt's empty barrier, once its reads are done, by
  the threads whose ``pred`` holds (one per warp, say): a predicated instruction, not a branch, so the warp does not
  diverge while wgmma accumulators are in flight (ptxas would serialize the wgmmas).
* ``ring_init(full, empty, stages, consumers)``: one thread; one arrival per phase of a full barrier (the
  producer's), ``consumers`` of an empty one. Then ``fence_mbarrier_init()`` and a ``cuda.syncthreads()``.

In the simulator these are reported at the kernel's line that calls them (like the instructions they hold).
"""

from __future__ import annotations

from numba import cuda

from .._tma import mbarrier_arrive_if, mbarrier_init, mbarrier_wait


@cuda.jit(device=True, forceinline=True)
def stage_of(kt, stages):
    return kt % stages


@cuda.jit(device=True, forceinline=True)
def wait_full(full, kt, stages):
    mbarrier_wait(full, kt % stages, (kt // stages) & 1)  # tile kt landed: phase kt // stages of its full barrier


@cuda.jit(device=True, forceinline=True)
def wait_empty(empty, kt, stages):
    mbarrier_wait(empty, kt % stages, ((kt // stages) & 1) ^ 1)  # tile kt - stages released (at once the 1st round)


@cuda.jit(device=True, forceinline=True)
def release(empty, kt, stages, pred):
    mbarrier_arrive_if(empty, kt % stages, pred)


@cuda.jit(device=True, forceinline=True)
def ring_init(full, empty, stages, consumers):
    for s in range(stages):
        mbarrier_init(full, s, 1)
        mbarrier_init(empty, s, consumers)
