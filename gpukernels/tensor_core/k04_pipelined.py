"""Step 4 of the tensor-core ladder, ``pipelined``: step 3's tiles copied global -> shared by ``cp.async`` through
a ring of 3 shared buffers.

In step 3 a warp loads its halves into registers, stores them to shared memory, waits at a barrier, and only then
do the tensor cores run -- while the loads are in flight nothing else happens in the block. ``cp.async`` (sm_80)
copies 16 bytes from global to shared memory without passing through registers and without waiting: the thread
issues the copy and goes on. With a ring of ``STAGES`` = 3 tile buffers the block keeps the copies of the next two
k tiles in flight while it multiplies the current one: at k tile i it waits for tile i (``async_wait(STAGES - 2)``:
all but the newest group of copies have landed), passes one barrier (everyone's copies of tile i are visible, and
everyone has finished tile i - 1, whose buffer the copies of tile i + 2 now overwrite), issues tile i + 2 and runs
the mmas of tile i. One barrier per k tile instead of two, and 8 halves per copy instruction instead of 1.

A 16-byte copy needs a 16-byte aligned source: every row of A and B must start on a 16-byte boundary (K and N
multiples of 8, the data aligned), which the launcher checks (`rows_aligned16`). Other shapes take the same ring
filled by ordinary loads and stores (``async_copy=False``): correct everywhere, without the overlap. A copy that
reaches past M, N or K reads 0 bytes and zero-fills its 16 (the source address then is any valid one).

The kernel comes from `make_pipelined_kernel`, which step 5 calls with larger tiles.
"""

from __future__ import annotations

from numba import cuda, float32, types

from .._launch import version
from .._mma import async_commit, async_wait, copy_async16_f16
from ._common import check, half_at, rows_aligned16, tiled_launch
from .k02_ldmatrix import BK, make_epilogue, make_row_major_b, make_warp_product
from .k02_ldmatrix import a_at as row_major_a
from .k03_swizzled import make_swizzled_b, swizzled_a

STAGES = 3  # shared buffers in the ring: 3 x (A + B tiles) = 24 KB at 64 x 64 (step 5: 2 of 16 KB at 128 x 128)


def make_pipelined_kernel(bm: int, bn: int, warps_m: int, warps_n: int, stages: int = STAGES,
                          async_copy: bool = True, swizzle: bool = True, split: bool = False):
    """A bm x bn tile per block of warps_m x warps_n warps, BK-deep k tiles in a ring of ``stages`` swizzled shared
    buffers, copied by cp.async (``async_copy``; rows of A and B 16-byte aligned) or by loads and stores.
    ``swizzle=False`` keeps step 2's row-major tiles (to measure what the swizzle saves). ``split``: split-K, the
    k tiles shared out over the grid's z blocks, each adding its part into C by atomics (C zeroed first)."""
    threads = 32 * warps_m * warps_n
    wm, wn = bm // warps_m, bn // warps_n  # the warp's tile of C
    mi, nj = wm // 16, wn // 8  # its mma tiles
    a_stage, b_stage = bm * BK, BK * bn  # halves per buffer
    a_ring, b_ring = stages * a_stage, stages * b_stage  # the shared arrays' sizes (constants)
    a_copies, b_copies = a_stage // 8 // threads, b_stage // 8 // threads  # 16-byte copies per thread per k tile
    b_chunks = bn // 8  # 16-byte chunks per row of the B tile
    waits = stages - 2  # copy groups that may still be in flight when a tile is used (a compile-time constant)
    assert a_copies * 8 * threads == a_stage and b_copies * 8 * threads == b_stage and stages >= 2
    a_at, b_at = (swizzled_a, make_swizzled_b(bn)) if swizzle else (row_major_a, make_row_major_b(bn))
    warp_product = make_warp_product(mi, nj, a_at, b_at)
    zero, store_tile = make_epilogue(mi, nj, atomic=split)

    @cuda.jit(device=True, forceinline=True)
    def copy_tile(a, b, sa, sb, stage, k0, row0, col0, tid):
        # k tile [k0, k0 + BK) of the block's rows of A and columns of B into buffer `stage`, 16 bytes (8 halves) per
        # copy; consecutive threads copy consecutive chunks of a row (a warp: whole 64-byte rows of the A tile, whole
        # 128- or 256-byte rows of the B tile).
        m, kdim = a.shape
        n = b.shape[1]
        for q in range(a_copies):
            e = tid + q * threads
            r, kc = e >> 2, (e & 3) * 8  # BK / 8 = 4 chunks per row of the A tile
            gr, gk = row0 + r, k0 + kc
            dst = stage * a_stage + a_at(r, kc)
            if async_copy:  # K is a multiple of 8 here, so a chunk lies wholly inside K or wholly past it
                inside = gr < m and gk < kdim
                copy_async16_f16(sa, dst, a, gr * kdim + gk if inside else 0, 16 if inside else 0)
            else:
                for h in range(8):
                    sa[dst + h] = half_at(a, gr, gk + h)
        for q in range(b_copies):
            e = tid + q * threads
            r, nc = e // b_chunks, (e % b_chunks) * 8
            gk, gc = k0 + r, col0 + nc
            dst = stage * b_stage + b_at(r, nc)
            if async_copy:
                inside = gk < kdim and gc < n
                copy_async16_f16(sb, dst, b, gk * n + gc if inside else 0, 16 if inside else 0)
            else:
                for h in range(8):
                    sb[dst + h] = half_at(b, gk, gc + h)

    @cuda.jit
    def pipelined_kernel(a, b, c):
        sa = cuda.shared.array(a_ring, types.float16, alignment=16)
        sb = cuda.shared.array(b_ring, types.float16, alignment=16)
        acc = cuda.local.array((mi, nj, 4), float32)
        tid = cuda.threadIdx.x
        warp, lane = tid >> 5, tid & 31
        wr, wc = (warp // warps_n) * wm, (warp % warps_n) * wn
        row0, col0 = cuda.blockIdx.y * bm, cuda.blockIdx.x * bn
        k_tiles = (a.shape[1] + BK - 1) // BK
        k_first = 0
        if split:  # this block's share of the k tiles: slice blockIdx.z of gridDim.z
            per = (k_tiles + cuda.gridDim.z - 1) // cuda.gridDim.z
            k_first = cuda.blockIdx.z * per
            k_tiles = min(k_tiles - k_first, per)
        zero(acc)
        for s in range(stages - 1):  # prologue: the first stages - 1 tiles in flight
            if s < k_tiles:
                copy_tile(a, b, sa, sb, s, (k_first + s) * BK, row0, col0, tid)
            async_commit()  # one group per tile, empty or not, so that the count in async_wait stays right
        for kt in range(k_tiles):
            async_wait(waits)  # this thread's copies of tile kt have landed
            cuda.syncthreads()  # ... and everyone's; and everyone is done with tile kt - 1
            ahead = kt + stages - 1
            if ahead < k_tiles:  # into the buffer of tile kt - 1
                copy_tile(a, b, sa, sb, ahead % stages, (k_first + ahead) * BK, row0, col0, tid)
            async_commit()
            cur = kt % stages
            warp_product(sa, sb, cur * a_stage, cur * b_stage, wr, wc, lane, acc)
        store_tile(c, acc, row0 + wr, col0 + wc, lane)

    pipelined_kernel.tile = (bm, bn)
    pipelined_kernel.threads = threads
    pipelined_kernel.stages = stages
    pipelined_kernel.async_copy = async_copy
    pipelined_kernel.split = split
    return pipelined_kernel


pipelined_kernel = make_pipelined_kernel(64, 64, 2, 2)
pipelined_sync_kernel = make_pipelined_kernel(64, 64, 2, 2, async_copy=False)
pipelined_split_kernel = make_pipelined_kernel(64, 64, 2, 2, split=True)  # split-K: the dispatcher's, for few tiles


@version("tensor_core", check, kernels=[pipelined_kernel, pipelined_sync_kernel])
def pipelined(a, b, c):
    """cp.async copies global -> shared through a ring of 3 buffers: two k tiles in flight while one is multiplied."""
    kernel = pipelined_kernel if rows_aligned16(a, b) else pipelined_sync_kernel
    return tiled_launch(kernel, a, b, c, kernel.threads)
