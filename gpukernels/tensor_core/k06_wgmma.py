"""Step 6 of the tensor-core ladder, ``wgmma``: Hopper's warpgroup MMA, operands read by the tensor cores straight
from shared memory.

With ``mma.sync`` (steps 1-5) every product passes through the registers: a warp ``ldmatrix``-es its fragments of A
and B out of shared memory, then issues the mma, and waits for it. On an H200 that caps the tensor cores well below
their peak: the registers, the ldmatrix traffic and the issue slots of 16 x 8 x 16 products are the limit (step 5
reaches ~45% of cuBLAS). Hopper (sm_90) adds ``wgmma.mma_async``: a *warpgroup* -- 4 consecutive warps, 128
threads -- multiplies a 64 x 16 tile of A by a 16 x N tile of B (N up to 256) in one instruction, reading both from
shared memory through 64-bit *descriptors* (the tile's address, two strides and a swizzle mode), and adds into 64 x N
float32 accumulators spread over the warpgroup's registers (N / 2 per thread). The instruction is asynchronous: the
warpgroup issues several (``wgmma_fence`` before, ``wgmma_commit`` after), goes on, and waits with ``wgmma_wait(n)``
until at most n groups are still running.

The tiles must lie in shared memory exactly as the descriptor says. Both use the 128-byte swizzle, in which each row
is 128 bytes (64 halves) and 16-byte chunk c of row r is stored at chunk c ^ (r % 8) -- step 3's idea, now what the
hardware expects:

* A (BM x 64 per k tile) is *K-major*: row m of the tile is 64 halves of K. A warpgroup's 64 rows start 8 KB apart;
  the 4 k16 slices of a row are 32 bytes apart (the descriptor's start address moves by 32 bytes per slice).
* B (64 x BN) is *N-major* (``trans-b``): k row k of a 64-column *atom* is 64 halves of N, atoms 8 KB apart (the
  leading byte offset), 8-row groups 1 KB apart (the stride byte offset); a k16 slice is 16 rows, 2 KB.

The block is two warpgroups, 128 x BN of C (each 64 x BN), fed by a ring of ``STAGES`` k tiles copied by ``cp.async``
(as in step 4): with wgmma a k tile's products run while the next tiles' copies fly, and with ``wgmma_wait(1)`` the
tensor cores also keep one group of products running while the threads issue the next copies -- so the ring holds
the tile being multiplied, the one still being multiplied, and ``STAGES - 2`` in flight. A ring of 4 stages of 48 KB
(BN = 256) does not fit in the 48 KB a kernel may declare statically: it is *dynamic* shared memory, which a kernel
must opt into (`gpukernels._launch.Launch` sets the attribute).

``make_wgmma_kernel`` also builds other block shapes -- one warpgroup (``bm=64``), 64- or 128-column tiles -- for
products whose 128 x 256 tiles are too few for the SMs; ``benchmarks/wgmma_variants.py --small`` times them.

``wgmma`` needs sm_90a (Hopper's architecture-specific instructions); numba-cuda compiles for sm_90a on an H200. The
simulator runs the same instructions: ``wgmma_n*`` reads the tiles where the descriptors point (`_mma.k_major_byte`,
``mn_major_byte``: the PTX ISA's layouts, which the H200 agreed with) and writes the accumulators at ``wgmma_wait``.
"""

from __future__ import annotations

from numba import cuda, float32, types

from .._intrinsics import udivmod32
from .._launch import Launch, LaunchError, ceil_div, compute_capability, version
from .._mma import (align1024, async_commit, async_wait, copy_async16_f16, fence_proxy_async, wgmma_commit,
                    wgmma_fence, wgmma_n64, wgmma_n128, wgmma_n256, wgmma_store, wgmma_store_add, wgmma_wait,
                    wgmma_zero)
from ._common import check, half_at, rows_aligned16, zero_launch

BK = 64  # halves of K per k tile: one 128-byte swizzled row
BM = 128  # rows of C per block: two warpgroups of 64
STAGES = 4  # k tiles in the ring: one multiplied, one finishing, two in flight
GROUP = 8  # tile rows per group of the block order


def a_at(r, k):
    # element (r, k) of a K-major A tile: row r of 64 halves, 16-byte chunk k // 8 swizzled by the row
    return r * BK + ((((k >> 3) ^ (r & 7))) << 3) + (k & 7)


def make_b_at(bn):
    def b_at(k, n):
        # element (k, n) of an N-major B tile: 64-column atoms of BK rows x 128 bytes, chunk n // 8 swizzled by k
        return (n >> 6) * (BK * 64) + k * 64 + (((((n & 63) >> 3) ^ (k & 7))) << 3) + (n & 7)

    return b_at


@cuda.jit(device=True, forceinline=True)
def grouped_tile(group):
    # This block's tile: its number in the grid, in the grouped order below
    return grouped_tile_of(cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x, cuda.gridDim.x, cuda.gridDim.y, group)


@cuda.jit(device=True, forceinline=True)
def grouped_tile_of(t, cols, rows, group):
    # Tile number t of a rows x cols grid of tiles -> (tile row, tile column), down columns of `group` tile rows, so
    # that the tiles computed at once share their tiles of A and B in L2 (the matmul lesson's grouped order).
    # udivmod32: 32-bit division; Numba's would be 64-bit, a subroutine call that serializes the wgmmas.
    g, within = udivmod32(t, group * cols)
    first = g * group
    col, row = udivmod32(within, min(rows - first, group))
    return first + row, col


def make_wgmma_kernel(bn: int, stages: int = STAGES, async_copy: bool = True, keep: int = 1, group: int = GROUP,
                      split: bool = False, bm: int = BM):
    """A bm x bn tile of C per block of bm / 64 warpgroups (two by default), a ring of ``stages`` k tiles copied by
    cp.async (``async_copy``) or by loads and stores; ``keep``: wgmma groups left running while the next copies are
    issued (0 or 1); ``group``: tile rows per group of the block order (1: row by row); ``split``: split-K -- block z
    of gridDim.z multiplies its share of the k tiles and adds its products into C (zeroed first) by atomics."""
    threads = 2 * bm  # a warpgroup of 128 threads per 64 rows
    acc_n = bn // 2  # accumulators per thread
    a_stage, b_stage = bm * BK, BK * bn  # halves per buffer
    stage = a_stage + b_stage
    a_copies, b_copies = a_stage // 8 // threads, b_stage // 8 // threads
    b_chunks = bn // 8
    ahead = stages - 1 - keep  # tiles in flight beyond the ones the tensor cores may be reading
    waits = ahead - 1
    lbo = BK * 64 * 2  # bytes between B's 64-column atoms
    mma = {64: wgmma_n64, 128: wgmma_n128, 256: wgmma_n256}[bn]
    b_at_py = make_b_at(bn)
    a_at_d = cuda.jit(device=True, forceinline=True)(a_at)
    b_at = cuda.jit(device=True, forceinline=True)(b_at_py)

    @cuda.jit(device=True, forceinline=True)
    def copy_tile(a, b, smem, base, k0, row0, col0, tid):
        m, kdim = a.shape
        n = b.shape[1]
        for q in range(a_copies):
            e = tid + q * threads
            r, kc = e >> 3, (e & 7) * 8  # 8 chunks per 128-byte row
            gr, gk = row0 + r, k0 + kc
            dst = base + a_at_d(r, kc)
            if async_copy:
                inside = gr < m and gk < kdim
                copy_async16_f16(smem, dst, a, gr * kdim + gk if inside else 0, 16 if inside else 0)
            else:
                for h in range(8):
                    smem[dst + h] = half_at(a, gr, gk + h)
        for q in range(b_copies):
            e = tid + q * threads
            r, nc = e // b_chunks, (e % b_chunks) * 8
            gk, gc = k0 + r, col0 + nc
            dst = base + a_stage + b_at(r, nc)
            if async_copy:
                inside = gk < kdim and gc < n
                copy_async16_f16(smem, dst, b, gk * n + gc if inside else 0, 16 if inside else 0)
            else:
                for h in range(8):
                    smem[dst + h] = half_at(b, gk, gc + h)

    @cuda.jit
    def wgmma_kernel(a, b, c):
        smem = cuda.shared.array(0, types.float16)  # dynamic: the launch gives its size
        acc = cuda.local.array(acc_n, float32)
        wgmma_zero(acc, bn)
        tid = cuda.threadIdx.x
        wg = tid >> 7  # the warpgroup: rows 64 wg .. 64 wg + 63 of the block's tile
        row, col = grouped_tile(group)
        row0, col0 = row * bm, col * bn
        base0 = align1024(smem)
        k_tiles = (a.shape[1] + BK - 1) // BK
        k_first = 0  # the first k tile of this block's share: all of them, or slice blockIdx.z of gridDim.z
        if split:
            share, _ = udivmod32(k_tiles + cuda.gridDim.z - 1, cuda.gridDim.z)  # 32 bits: no subroutine call
            k_first = min(cuda.blockIdx.z * share, k_tiles)
            k_tiles = min(k_first + share, k_tiles) - k_first  # may be 0: the last slices of a short K
        for s in range(ahead):
            if s < k_tiles:
                copy_tile(a, b, smem, base0 + s * stage, (k_first + s) * BK, row0, col0, tid)
            async_commit()
        for kt in range(k_tiles):
            async_wait(waits)  # this thread's copies of tile kt have landed
            fence_proxy_async()  # ... and are visible to the tensor cores' (async) reads
            cuda.syncthreads()  # everyone's; and every warpgroup's products of tile kt - 2 are done
            nxt = kt + ahead
            if nxt < k_tiles:  # into the buffer of tile kt - 2
                copy_tile(a, b, smem, base0 + (nxt % stages) * stage, (k_first + nxt) * BK, row0, col0, tid)
            async_commit()
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
        if split:
            if k_tiles > 0:  # another block adds its slice of K to the same elements
                wgmma_store_add(c, acc, bn, r0, c0)
        else:
            wgmma_store(c, acc, bn, r0, c0)  # acc[4 j + i] -> c[r0 + 8 (i // 2), c0 + 8 j + i % 2], inside C

    if split or bm != BM:  # (profiles tell them apart)
        name = f"wgmma_{bn}" if bm == BM else f"wgmma_{bm}x{bn}"
        wgmma_kernel.__name__ = wgmma_kernel.__qualname__ = name + ("_split_kernel" if split else "_kernel")
    wgmma_kernel.tile = (bm, bn)
    wgmma_kernel.threads = threads
    wgmma_kernel.stages = stages
    wgmma_kernel.async_copy = async_copy
    wgmma_kernel.split = split
    wgmma_kernel.target = "sm_90a"  # wgmma is one of Hopper's architecture-specific instructions
    wgmma_kernel.shared_bytes = stages * stage * 2 + 1024  # + up to 1 KB to reach a 1024-byte boundary
    return wgmma_kernel


wgmma_kernel = make_wgmma_kernel(256)
wgmma_sync_kernel = make_wgmma_kernel(256, async_copy=False)


def wgmma_launch(kernel, a, b, c, splits: int = 1) -> list[Launch]:
    """One block per tile of C; a split kernel: ``splits`` blocks per tile along the grid's z, after C is zeroed."""
    m, n = c.shape
    bm, bn = kernel.tile
    if not kernel.split:
        return [Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm)), (kernel.threads,), (a, b, c), kernel.shared_bytes)]
    return [zero_launch(c), Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm), splits), (kernel.threads,), (a, b, c),
                                   kernel.shared_bytes)]


def require_hopper() -> None:
    """wgmma exists on sm_90 (Hopper) only: a clear error on any other GPU (the simulator plays an H200)."""
    cc = compute_capability()
    if cc != (9, 0):
        raise LaunchError(f"tensor_core.wgmma needs a Hopper GPU (compute capability 9.0, e.g. an H100 or H200); "
                          f"this one is {cc[0]}.{cc[1]}. Use tensor_core.block_tiles or tensor_core.optimized, "
                          "which picks a step this GPU has")


@version("tensor_core", check, kernels=[wgmma_kernel, wgmma_sync_kernel])
def wgmma(a, b, c):
    """Hopper's wgmma: two warpgroups, 128 x 256 of C, A and B read from swizzled shared tiles by descriptor."""
    require_hopper()
    kernel = wgmma_kernel if rows_aligned16(a, b) else wgmma_sync_kernel
    return wgmma_launch(kernel, a, b, c)
