"""Step 7 of the tensor-core ladder, ``tma``: step 6's wgmma kernel, its tiles copied by Hopper's Tensor Memory
Accelerator (TMA) and their arrival signalled by an mbarrier per stage.

In step 6 every one of the block's 256 threads issues ``cp.async`` copies of 16 bytes -- 12 per thread per k tile,
each with its own address arithmetic and swizzle -- then waits for its own commit groups, and a barrier makes
everyone's pieces visible. Hopper has a copy engine for whole tiles: ``cp.async.bulk.tensor`` (`gpukernels._tma`)
reads a *box* of a matrix described by a *tensor map* and writes it into shared memory already in the 128-byte
swizzle wgmma's descriptors read. So here **one thread** (thread 0) asks for a stage's tiles -- A's 128 x 64 box,
and B's 64 x 256 tile as four 64 x 64 boxes (with the 128-byte swizzle a box row is at most 128 bytes: B's
64-column *atoms*, already laid out 8 KB apart as step 6 placed them) -- and the other 255 threads issue no copy at
all. The elements of a box past the edges of A or B (a box may lie wholly past N) are written as zeros by the copy
engine, as step 6's cp.async zero-filled them: the kernel has no edge code for its loads.

Completion is counted by an **mbarrier** per stage, the stage's *full* barrier: thread 0 arrives on it with
``mbarrier_arrive_expect_tx`` announcing the bytes the stage's copies will write (every box's, zeros included: 48 KB),
and each copy takes its bytes off the count as it lands. The barrier's phase completes when all the bytes have
landed; every thread waits for it with ``mbarrier_wait(full, s, phase)``. Stage s is filled again every ``stages``
k tiles, so tile kt completes phase kt // stages of its barrier, and the *phase bit* a thread waits on is
(kt // stages) & 1: it flips each time round the ring. Waiting on the wrong bit returns at once (before the tile
landed) or never (the kernel hangs); the simulator reports both, naming the line.

Everything else is step 6's -- `make_tma_kernel` is `make_wgmma_kernel` with its copies replaced, so a diff of the
two files shows the one idea: two warpgroups, a 128 x 256 tile of C,
a ring of 4 stages with 2 tiles in flight while wgmma multiplies one and finishes the one before, and one
``cuda.syncthreads()`` per k tile before a stage is refilled -- every warpgroup's wgmma on that stage has finished by
then (the next step gives each stage an *empty* barrier instead, so that the copies never wait for the slowest
warp). The TMA writes and the tensor cores' reads both go through the async proxy, so step 6's
``fence_proxy_async`` is gone. Rows of A and B must be 16-byte multiples apart (a tensor map's strides are);
other shapes run step 6's kernel with loads and stores, as step 6 does.

**The tensor maps.** Made on the host for each call's arrays (`gpukernels._tma.TensorMap`: the matrix, the box and
the swizzle; on a GPU encoded by the driver's ``cuTensorMapEncodeTiled``, from cuda-bindings). CUDA C++ would pass
each map by value as a ``__grid_constant__`` kernel parameter; Numba cannot, so the kernel receives the 128-byte map
copied to global memory (the kernel's ``extensions=[TENSOR_MAPS]`` turns the `TensorMap` into that array at launch),
and thread 0 issues ``fence.proxy.tensormap::generic.acquire`` on each before its first copy, as the CUDA
programming guide asks of a map the host wrote into global memory.

This step is checked in the simulator (against float64 at odd shapes, every planted misuse reported by line) and
compiled for sm_90a (its PTX holds the bulk tensor copies, the mbarrier instructions and the wgmmas, with no local
memory). On an H100 (CUDA-graph replay, cuBLAS FP16 in the same run) it matched float64 and ran 1.27x step 6 at
4096^3 (0.233 against 0.297 ms; cuBLAS 0.219), 1.33x at 8192^3 (1.755 against 2.328; cuBLAS 1.708) and 1.29x at
1024^3: the copy engine's copies cost the threads nothing. ``optimized`` runs its copies through step 9.
"""

from __future__ import annotations

from numba import cuda, float32, types

from .._launch import Launch, ceil_div, version
from .._mma import (align1024, wgmma_commit, wgmma_fence, wgmma_n64, wgmma_n128, wgmma_n256, wgmma_store, wgmma_wait,
                    wgmma_zero)
from .._tma import (TENSOR_MAPS, TensorMap, fence_mbarrier_init, fence_proxy_tensormap_acquire,
                    mbarrier_arrive_expect_tx, mbarrier_init, tma_load_2d)
from ._common import check, rows_aligned16
from ._ring import wait_full
from .k06_wgmma import BK, BM, GROUP, STAGES, grouped_tile, require_hopper, wgmma_launch, wgmma_sync_kernel

ATOM = 64  # columns of B per copy: one 128-byte swizzled row of halves, the widest box row the swizzle takes


def make_load_stage(bm: int, bn: int):
    """The device function one thread calls to fill a stage of the ring with a bm x BK tile of A and a BK x bn tile
    of B: ``load_stage(smem, base, ta, tb, full, s, k0, row0, col0)``."""
    a_stage = bm * BK  # halves of A's tile, before B's in the stage
    stage_bytes = 2 * (a_stage + BK * bn)  # what the stage's copies write: A's box and B's atoms, zeros included
    atoms = bn // ATOM  # B's boxes per stage

    @cuda.jit(device=True, forceinline=True)
    def load_stage(smem, base, ta, tb, full, s, k0, row0, col0):
        # One thread: announce the stage's bytes on its full barrier, then ask the copy engine for A's box (rows
        # row0.., columns k0.. of A: K-major) and B's atoms (rows k0.. of B, 64 columns each: N-major)
        mbarrier_arrive_expect_tx(full, s, stage_bytes)
        tma_load_2d(smem, base, ta, row0, k0, full, s)
        for j in range(atoms):
            tma_load_2d(smem, base + a_stage + j * BK * ATOM, tb, k0, col0 + j * ATOM, full, s)

    return load_stage


def make_tma_kernel(bn: int = 256, stages: int = STAGES, keep: int = 1, group: int = GROUP, bm: int = BM):
    """Step 6's kernel (`make_wgmma_kernel`, same arguments) with its ring filled by TMA: a bm x bn tile of C per
    block of bm / 64 warpgroups, ``stages`` k tiles in the ring, each with its *full* mbarrier."""
    threads = 2 * bm  # a warpgroup of 128 threads per 64 rows
    acc_n = bn // 2  # accumulators per thread
    a_stage, b_stage = bm * BK, BK * bn  # halves per buffer
    stage = a_stage + b_stage
    ahead = stages - 1 - keep  # tiles in flight beyond the ones the tensor cores may be reading
    lbo = BK * 64 * 2  # bytes between B's 64-column atoms
    mma = {64: wgmma_n64, 128: wgmma_n128, 256: wgmma_n256}[bn]
    load_stage = make_load_stage(bm, bn)  # one thread's copies of a stage: A's box and B's atoms

    @cuda.jit(extensions=[TENSOR_MAPS])
    def tma_kernel(a, b, c, ta, tb):
        smem = cuda.shared.array(0, types.float16)  # dynamic: the launch gives its size
        full = cuda.shared.array(stages, types.uint64)  # an mbarrier per stage: its tiles have landed
        acc = cuda.local.array(acc_n, float32)
        wgmma_zero(acc, bn)
        tid = cuda.threadIdx.x
        wg = tid >> 7  # the warpgroup: rows 64 wg .. 64 wg + 63 of the block's tile
        row, col = grouped_tile(group)
        row0, col0 = row * bm, col * bn
        base0 = align1024(smem)
        k_tiles = (a.shape[1] + BK - 1) // BK
        if tid == 0:
            fence_proxy_tensormap_acquire(ta)  # the maps were written by the host: acquire them for the copy engine
            fence_proxy_tensormap_acquire(tb)
            for s in range(stages):
                mbarrier_init(full, s, 1)  # one arrival per phase: thread 0's, with the stage's bytes
            fence_mbarrier_init()  # ... visible to the copy engine
            for s in range(ahead):
                if s < k_tiles:
                    load_stage(smem, base0 + s * stage, ta, tb, full, s, s * BK, row0, col0)
        cuda.syncthreads()  # the barriers are initialised for every thread
        for kt in range(k_tiles):
            wait_full(full, kt, stages)  # tile kt landed: phase kt // stages of its barrier (parity: the phase bit)
            cuda.syncthreads()  # every warpgroup's products of tile kt - 2 are done: its buffer may be refilled
            nxt = kt + ahead
            if tid == 0 and nxt < k_tiles:  # into the buffer of tile kt - 2
                load_stage(smem, base0 + (nxt % stages) * stage, ta, tb, full, nxt % stages, nxt * BK, row0, col0)
            sa = base0 + (kt % stages) * stage + wg * 64 * BK
            sb = base0 + (kt % stages) * stage + a_stage
            wgmma_fence()
            for s in range(BK // 16):
                mma(acc, smem, sa + s * 16, smem, sb + s * 16 * 64, lbo)
            wgmma_commit()
            wgmma_wait(keep)  # tile kt - keep's products are done: its buffer may be refilled after the next barrier
        wgmma_wait(0)
        warp, lane = (tid >> 5) & 3, tid & 31
        r0 = row0 + wg * 64 + warp * 16 + (lane >> 2)
        c0 = col0 + 2 * (lane & 3)
        wgmma_store(c, acc, bn, r0, c0)  # acc[4 j + i] -> c[r0 + 8 (i // 2), c0 + 8 j + i % 2], inside C

    if bm != BM or bn != 256:  # (profiles tell them apart)
        tma_kernel.__name__ = tma_kernel.__qualname__ = f"tma_{bm}x{bn}_kernel"
    tma_kernel.tile = (bm, bn)
    tma_kernel.threads = threads
    tma_kernel.stages = stages
    tma_kernel.target = "sm_90a"  # wgmma is one of Hopper's architecture-specific instructions
    tma_kernel.shared_bytes = stages * stage * 2 + 1024  # + up to 1 KB to reach a 1024-byte boundary
    return tma_kernel


tma_kernel = make_tma_kernel()


def tma_launch(kernel, a, b, c) -> list[Launch]:
    """One block per tile of C; the tensor maps of A (boxes of a tile's rows x 64 of K) and B (64 of K x 64
    columns), both with the 128-byte swizzle."""
    m, n = c.shape
    bm, bn = kernel.tile
    maps = (TensorMap(a, (bm, BK), swizzle=128), TensorMap(b, (BK, ATOM), swizzle=128))
    return [Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm)), (kernel.threads,), (a, b, c) + maps,
                   kernel.shared_bytes)]


@version("tensor_core", check, kernels=[tma_kernel, wgmma_sync_kernel])
def tma(a, b, c):
    """Step 6's wgmma fed by TMA: one thread copies a stage's tiles, an mbarrier per stage says they landed."""
    require_hopper()
    if not rows_aligned16(a, b):  # a tensor map's rows are 16-byte multiples apart: loads and stores instead
        return wgmma_launch(wgmma_sync_kernel, a, b, c)
    return tma_launch(tma_kernel, a, b, c)
