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
and each copy takes its bytes off the count as it lands. The barrier's phase completes when all the bytes have landed; every thread waits for it with
``mbarrier_wait(full, s, phase)``. Stage s is filled again every ``STAGES`` k tiles, so tile kt completes phase
kt // STAGES of its barrier, and the *phase bit* a thread waits on is (kt // STAGES) & 1: it flips each time round
the ring. Waiting on the wrong bit returns at once (before the tile landed) or never (the kernel hangs); the
simulator reports both, naming the line.

Everything else is step 6's (a diff of the two files shows the one idea): two warpgroups, a 128 x 256 tile of C,
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
memory); it is not yet timed on a GPU, so ``optimized`` does not choose it.
"""

from __future__ import annotations

from numba import cuda, float32, types

from .._launch import Launch, ceil_div, version
from .._mma import align1024, wgmma_commit, wgmma_fence, wgmma_n256, wgmma_store, wgmma_wait, wgmma_zero
from .._tma import (TENSOR_MAPS, TensorMap, fence_mbarrier_init, fence_proxy_tensormap_acquire,
                    mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait, tma_load_2d)
from ._common import check, rows_aligned16
from .k06_wgmma import BK, BM, GROUP, STAGES, grouped_tile, require_hopper, wgmma_launch, wgmma_sync_kernel

BN = 256  # columns of C per block
ACC = BN // 2  # float32 accumulators per thread: 64 x BN over a warpgroup's 128 threads
ATOM = 64  # columns of B per copy: one 128-byte swizzled row of halves, the widest box row the swizzle takes
KEEP = 1  # wgmma groups left running while the next tile is waited for
AHEAD = STAGES - 1 - KEEP  # tiles in flight beyond the ones the tensor cores may be reading
THREADS = 2 * BM  # two warpgroups of 128
A_STAGE, B_STAGE = BM * BK, BK * BN  # halves per buffer
STAGE = A_STAGE + B_STAGE
STAGE_BYTES = 2 * STAGE  # what a stage's copies write into shared memory: A's box and B's atoms, zeros included
LBO = BK * ATOM * 2  # bytes between B's 64-column atoms
SHARED_BYTES = STAGES * STAGE * 2 + 1024  # + up to 1 KB to reach a 1024-byte boundary


@cuda.jit(device=True, forceinline=True)
def load_stage(smem, base, ta, tb, full, s, k0, row0, col0):
    # One thread: announce the stage's bytes on its full barrier, then ask the copy engine for A's box (rows row0..,
    # columns k0.. of A: K-major) and B's atoms (rows k0.. of B, 64 columns each: N-major)
    mbarrier_arrive_expect_tx(full, s, STAGE_BYTES)
    tma_load_2d(smem, base, ta, row0, k0, full, s)
    for j in range(BN // ATOM):
        tma_load_2d(smem, base + A_STAGE + j * BK * ATOM, tb, k0, col0 + j * ATOM, full, s)


@cuda.jit(extensions=[TENSOR_MAPS])
def tma_kernel(a, b, c, ta, tb):
    smem = cuda.shared.array(0, types.float16)  # dynamic: the launch gives its size
    full = cuda.shared.array(STAGES, types.uint64)  # an mbarrier per stage: its tiles have landed
    acc = cuda.local.array(ACC, float32)
    wgmma_zero(acc, BN)
    tid = cuda.threadIdx.x
    wg = tid >> 7  # the warpgroup: rows 64 wg .. 64 wg + 63 of the block's tile
    row, col = grouped_tile(GROUP)
    row0, col0 = row * BM, col * BN
    base0 = align1024(smem)
    k_tiles = (a.shape[1] + BK - 1) // BK
    if tid == 0:
        fence_proxy_tensormap_acquire(ta)  # the maps were written by the host: acquire them for the copy engine
        fence_proxy_tensormap_acquire(tb)
        for s in range(STAGES):
            mbarrier_init(full, s, 1)  # one arrival per phase: thread 0's, with the stage's bytes
        fence_mbarrier_init()  # ... visible to the copy engine
        for s in range(AHEAD):
            if s < k_tiles:
                load_stage(smem, base0 + s * STAGE, ta, tb, full, s, s * BK, row0, col0)
    cuda.syncthreads()  # the barriers are initialised for every thread
    for kt in range(k_tiles):
        s = kt % STAGES
        mbarrier_wait(full, s, (kt // STAGES) & 1)  # tile kt has landed: phase kt // STAGES of its barrier
        cuda.syncthreads()  # every warpgroup's products of tile kt - 2 are done: its buffer may be refilled
        nxt = kt + AHEAD
        if tid == 0 and nxt < k_tiles:  # into the buffer of tile kt - 2
            load_stage(smem, base0 + (nxt % STAGES) * STAGE, ta, tb, full, nxt % STAGES, nxt * BK, row0, col0)
        sa = base0 + s * STAGE + wg * 64 * BK
        sb = base0 + s * STAGE + A_STAGE
        wgmma_fence()
        for q in range(BK // 16):
            wgmma_n256(acc, smem, sa + q * 16, smem, sb + q * 16 * 64, LBO)
        wgmma_commit()
        wgmma_wait(KEEP)  # tile kt - 1's products are done: its buffer may be refilled after the next barrier
    wgmma_wait(0)
    warp, lane = (tid >> 5) & 3, tid & 31
    r0 = row0 + wg * 64 + warp * 16 + (lane >> 2)
    c0 = col0 + 2 * (lane & 3)
    wgmma_store(c, acc, BN, r0, c0)  # acc[4 j + i] -> c[r0 + 8 (i // 2), c0 + 8 j + i % 2], inside C


tma_kernel.tile = (BM, BN)
tma_kernel.threads = THREADS
tma_kernel.stages = STAGES
tma_kernel.target = "sm_90a"  # wgmma is one of Hopper's architecture-specific instructions
tma_kernel.shared_bytes = SHARED_BYTES


def tma_launch(a, b, c) -> list[Launch]:
    """One block per 128 x 256 tile of C; the tensor maps of A (boxes of 128 rows x 64 of K) and B (64 of K x 64
    columns), both with the 128-byte swizzle."""
    m, n = c.shape
    maps = (TensorMap(a, (BM, BK), swizzle=128), TensorMap(b, (BK, ATOM), swizzle=128))
    return [Launch(tma_kernel, (ceil_div(n, BN), ceil_div(m, BM)), (THREADS,), (a, b, c) + maps, SHARED_BYTES)]


@version("tensor_core", check, kernels=[tma_kernel, wgmma_sync_kernel])
def tma(a, b, c):
    """Step 6's wgmma fed by TMA: one thread copies a stage's tiles, an mbarrier per stage says they landed."""
    require_hopper()
    if not rows_aligned16(a, b):  # a tensor map's rows are 16-byte multiples apart: loads and stores instead
        return wgmma_launch(wgmma_sync_kernel, a, b, c)
    return tma_launch(a, b, c)
