"""Step 9 of the tensor-core ladder, ``persistent``: step 8's warp-specialized kernel launched once per SM, each
block walking tile after tile of C, so that the producer fills the next tile's stages while the consumers finish
the last one.

In step 8 a block computes one 128 x 256 tile of C and ends: at 4096^3 that is 512 blocks for 132 SMs, so 3.9 waves.
Each block pays its start (barriers initialised, tensor maps fetched, the ring filled from empty: the first
wgmma waits for a whole stage's copies) and its end (the epilogue: 128 floats per thread stored to C while the tensor
cores have nothing to do), and the last wave leaves SMs idle. Here the grid is ``min(tiles, SMs)`` blocks -- one per
SM, the "persistent" kernel of CUTLASS's sm90 GEMMs -- and block b computes tiles b, b + grid, b + 2 grid, ... in
step 6's grouped order (``grouped_tile_of``: the tiles computed at the same time share rows of A and columns of B
in L2).

The ring runs on across tiles: the producer and the consumers count the k tiles they have passed through it
(``it``, not the tile's own ``kt``), so stage ``it % stages`` and its phase bit ``(it // stages) & 1`` continue from
one tile of C to the next. That is what overlaps the epilogue: once the consumers have released a tile's last
stages, the producer -- who never waits for the epilogue -- is already copying the next tile's first k tiles into
them, and the consumers' first wait of the next tile returns at once. Only the consumers' release of a tile's last
stages moves: step 8 never released them (the block ended); here they are released after ``wgmma_wait(0)``, before
the epilogue, so that the copies of the next tile fly during the stores.

What a student should see in the diff against step 8: the grid, the two loops over tiles (one per role, walking the
same tiles in the same order), the ring's position carried across them, the accumulators zeroed per tile, and the
release of the last stages. ``persistent_launch(..., blocks=n)`` caps the grid (the tests use 2 blocks for 5 tiles,
so that each block goes round its loop and the ring's phases carry over); the step itself uses one block per SM.

Two things the sm90 libraries add beyond this step, for the notes: a second consumer pair working on another tile
(CUTLASS's "ping-pong" schedule: one pair's epilogue under the other's wgmmas, at the cost of half the tile per pair)
and clusters of 2 blocks sharing one operand's copy by TMA multicast. Rows of A and B must be 16-byte multiples
apart; other shapes run step 6's kernel with loads and stores, as steps 7 and 8 do. Checked in the simulator
(against float64 at odd shapes, blocks going round several tiles, the ring's phases carried across them) and
compiled for sm_90a; on an H100 it matched float64 and ran 0.218 ms at 4096^3 against cuBLAS FP16's 0.219 (1.01x;
step 8: 0.226, step 6: 0.297) and 1.767 ms at 8192^3 against 1.708 (0.97x), so ``optimized`` chooses it wherever its
128 x 256 tiles fill half the SMs.
"""

from __future__ import annotations

from numba import cuda, float32, types

from .._launch import Launch, ceil_div, sm_count, version
from .._mma import (align1024, wgmma_commit, wgmma_fence, wgmma_n64, wgmma_n128, wgmma_n256, wgmma_store, wgmma_wait,
                    wgmma_zero)
from .._tma import (TENSOR_MAPS, TensorMap, fence_mbarrier_init, fence_proxy_tensormap_acquire, setmaxnreg_dec,
                    setmaxnreg_inc)
from ._common import check, rows_aligned16
from ._ring import release, ring_init, stage_of, wait_empty, wait_full
from .k06_wgmma import BK, BM, GROUP, STAGES, grouped_tile_of, require_hopper, wgmma_launch, wgmma_sync_kernel
from .k07_tma import ATOM, make_load_stage
from .k08_warp_specialized import CONSUMER_REGS, PRODUCER_REGS


def make_persistent_kernel(bn: int = 256, stages: int = STAGES, keep: int = 1, group: int = GROUP, bm: int = BM):
    """Step 8's kernel (`make_warp_specialized_kernel`, same arguments) with each block walking tiles of C."""
    consumers = bm // 64  # warpgroups that issue wgmma: 64 rows of C each
    threads = 128 * (1 + consumers)  # + the producer warpgroup
    acc_n = bn // 2  # accumulators per thread
    a_stage, b_stage = bm * BK, BK * bn  # halves per buffer
    stage = a_stage + b_stage
    lbo = BK * 64 * 2  # bytes between B's 64-column atoms
    mma = {64: wgmma_n64, 128: wgmma_n128, 256: wgmma_n256}[bn]
    load_stage = make_load_stage(bm, bn)  # one thread's copies of a stage: A's box and B's atoms (step 7's)

    @cuda.jit(extensions=[TENSOR_MAPS], launch_bounds=(threads, 1))
    def persistent_kernel(a, b, c, ta, tb):
        smem = cuda.shared.array(0, types.float16)  # dynamic: the launch gives its size
        full = cuda.shared.array(stages, types.uint64)  # an mbarrier per stage: its tiles have landed
        empty = cuda.shared.array(stages, types.uint64)  # ... and one: its consumers are done with it
        tid = cuda.threadIdx.x
        wg = tid >> 7  # the warpgroup: 0 the producer, 1.. the consumers
        cols, rows = (c.shape[1] + bn - 1) // bn, (c.shape[0] + bm - 1) // bm  # C's tiles
        tiles = rows * cols
        base0 = align1024(smem)
        k_tiles = (a.shape[1] + BK - 1) // BK
        if tid == 0:
            fence_proxy_tensormap_acquire(ta)  # the maps were written by the host: acquire them for the copy engine
            fence_proxy_tensormap_acquire(tb)
            ring_init(full, empty, stages, 4 * consumers)  # full: the producer's arrival; empty: each consumer warp's
            fence_mbarrier_init()  # ... visible to the copy engine
        cuda.syncthreads()  # the barriers are initialised for every thread
        if wg == 0:  # the producer: one thread issues every copy of every tile of this block
            setmaxnreg_dec(PRODUCER_REGS)
            if tid == 0:
                it = 0  # k tiles this block has put through the ring, over all its tiles: the ring's position
                for t in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):  # this block's tiles of C
                    row, col = grouped_tile_of(t, cols, rows, group)
                    for kt in range(k_tiles):
                        wait_empty(empty, it, stages)  # the consumers released the stage's previous k tile
                        load_stage(smem, base0 + stage_of(it, stages) * stage, ta, tb, full, stage_of(it, stages),
                                   kt * BK, row * bm, col * bn)
                        it += 1
        else:  # the consumers: 64 rows of each tile of C
            setmaxnreg_inc(CONSUMER_REGS)
            acc = cuda.local.array(acc_n, float32)
            rows0 = (wg - 1) * 64
            releases = (tid & 31) == 0  # lane 0 of each warp arrives on the empty barriers
            warp, lane = (tid >> 5) & 3, tid & 31
            it = 0  # the same count as the producer's: both walk the same tiles and k tiles in the same order
            for t in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
                row, col = grouped_tile_of(t, cols, rows, group)
                wgmma_zero(acc, bn)  # a new tile of C
                for kt in range(k_tiles):
                    wait_full(full, it, stages)  # k tile it landed: phase it // stages of its full barrier
                    sa = base0 + stage_of(it, stages) * stage + rows0 * BK
                    sb = base0 + stage_of(it, stages) * stage + a_stage
                    wgmma_fence()
                    for s in range(BK // 16):
                        mma(acc, smem, sa + s * 16, smem, sb + s * 16 * 64, lbo)
                    wgmma_commit()
                    wgmma_wait(keep)  # k tile it - keep's products are done ...
                    if kt >= keep:  # ... so this warp (its lane 0) releases their stage to the producer
                        release(empty, it - keep, stages, releases)
                    it += 1
                wgmma_wait(0)
                for j in range(min(keep, k_tiles)):  # the tile's last stages, released before the epilogue: the
                    release(empty, it - min(keep, k_tiles) + j, stages, releases)  # producer refills them meanwhile
                r0 = row * bm + rows0 + warp * 16 + (lane >> 2)
                c0 = col * bn + 2 * (lane & 3)
                wgmma_store(c, acc, bn, r0, c0)  # the epilogue, while the next tile's copies fly

    if bm != BM or bn != 256:  # (profiles tell them apart)
        name = f"persistent_{bm}x{bn}_kernel"
        persistent_kernel.__name__ = persistent_kernel.__qualname__ = name
    persistent_kernel.tile = (bm, bn)
    persistent_kernel.threads = threads
    persistent_kernel.stages = stages
    persistent_kernel.target = "sm_90a"  # wgmma and setmaxnreg are Hopper's architecture-specific instructions
    persistent_kernel.shared_bytes = stages * stage * 2 + 1024  # + up to 1 KB to reach a 1024-byte boundary
    return persistent_kernel


persistent_kernel = make_persistent_kernel()


def persistent_launch(kernel, a, b, c, blocks: int | None = None) -> list[Launch]:
    """``min(tiles, blocks)`` blocks (``blocks``: the GPU's SMs unless given), each walking its tiles of C; step 7's
    tensor maps."""
    m, n = c.shape
    bm, bn = kernel.tile
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    grid = min(tiles, blocks or sm_count())
    maps = (TensorMap(a, (bm, BK), swizzle=128), TensorMap(b, (BK, ATOM), swizzle=128))
    return [Launch(kernel, (grid,), (kernel.threads,), (a, b, c) + maps, kernel.shared_bytes)]


@version("tensor_core", check, kernels=[persistent_kernel, wgmma_sync_kernel])
def persistent(a, b, c):
    """Step 8 launched once per SM: each block walks tiles of C, the ring's phases carried from tile to tile, so
    the next tile's copies fly during the epilogue."""
    require_hopper()
    if not rows_aligned16(a, b):  # a tensor map's rows are 16-byte multiples apart: loads and stores instead
        return wgmma_launch(wgmma_sync_kernel, a, b, c)
    return persistent_launch(persistent_kernel, a, b, c)
