"""Step 11 of the tensor-core ladder, ``tf32x3``: float32 accuracy from TF32 tensor cores (3xTF32), on ``wgmma``.

The tensor cores multiply float32 matrices only as TF32: 10 bits of mantissa instead of 23, so a product of float32
inputs through the TF32 tensor cores alone is about as accurate as float16 (relative error ~1e-4 rather than
float32's ~1e-7). The trick (cuBLAS's and CUTLASS's "3xTF32") splits each input into two TF32 numbers,

    x = big + small,   big = tf32(x),   small = tf32(x - big)      (x - big is exact in float32)

so big carries the top 11 significant bits and small the next 11: together 22 of float32's 24. Then

    a b = a_big b_big + a_big b_small + a_small b_big + a_small b_small

and the last term is below float32's rounding (2^-22 relative), so three tensor-core products -- the small ones
first, so that they are not lost against the big one's rounding -- carry float32's accuracy at three times the
tensor-core work. On Hopper, TF32 runs at half of FP16's rate (~495 TFLOP/s dense): three products still have ~3x
the FP32 SIMT cores' 67 TFLOP/s to spend.

**Split once, multiply three times.** The split is a pass of its own (``split_rows_kernel``, ``split_cols_kernel``):
A becomes a (2, M, K4) array [A_big, A_small] and B a (2, N, K4) array [B_big^T, B_small^T], K4 = K rounded up to 4
floats (16-byte rows for cp.async, the extra columns zero). B is stored transposed because ``wgmma`` on TF32 reads
both operands *K-major* (the PTX ISA allows the transpose that step 6 uses for B only on 16-bit types). The pass
reads 4 (MK + KN) bytes and writes twice that: at 4096^3, 0.4 GB, ~0.1 ms against ~2 ms of products.

**Where the sum runs.** The tensor core's adder truncates (rounds toward zero), so a sum that runs through it,
product after product into one accumulator, drifts one way: K / 8 x 3 truncations, each of the size of the whole
running sum. Measured on an H200 at K = 64 that gave a relative error of 4.7e-7 against float32 SGEMM's 1.2e-7, and it
grows with K. So each 32-deep k tile's twelve products are summed from zero by the tensor cores into a *partial*
accumulator (``scale-d`` = 0 on the tile's first wgmma), and the partial is added to the running sum by 64 ordinary
float32 adds per thread (``wgmma_add``), which round to nearest: the truncations are of the size of one tile's
products, and the running sum's rounding is unbiased.

**The kernel** is step 6's, with float32 tiles: 128 x 128 of C per block of two warpgroups (64 x 128 each:
``wgmma_tf32_n128``, m64n128k8), 128-byte swizzled K-major tiles of 128 rows x 32 floats for A_big, A_small, B_big
and B_small (64 KB a stage), a ring of 3 stages filled by cp.async. Two accumulator sets of 64 floats per thread
(running sum and partial) are why the tile is 128 wide, not step 6's 256. Each tile's products are waited for
(``wgmma_wait(0)``) before the partial is added, so the ring holds the tile being multiplied and two in flight, and
the next copies are issued right after the wgmmas, while the tensor cores work.

On GPUs without wgmma (before Hopper) the step runs the same split with ``mma.sync`` (`tensor_core._tf32x3_mma`),
the inputs split as each fragment is read.

Not float32 everywhere: an infinite input splits into big = inf and small = inf - inf = NaN, so its row (of A) or
column (of B) of C is NaN where SGEMM gives inf (a finite input so near float32's largest that rounding it to TF32
would give inf is split as the largest TF32 value and the rest: `gpukernels._mma.split_tf32`); and K of a few dozen
or less is summed less accurately than SGEMM sums it (22 of 24 bits per factor; benchmarks/NOTES.md has the
measured errors).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .._intrinsics import copy_async16
from .._launch import Launch, ceil_div, compute_capability, is_device_array, version
from .._mma import (align1024, async_commit, async_wait, fence_proxy_async, split_tf32, wgmma_add, wgmma_commit,
                    wgmma_fence, wgmma_store, wgmma_tf32_n128, wgmma_wait, wgmma_zero)
from ._common import check_fp32, tiled_launch
from ._tf32x3_mma import tf32x3_mma_kernel
from .k06_wgmma import grouped_tile

BM = BN = 128  # C per block: two warpgroups of 64 x 128
BK = 32  # floats of K per k tile: one 128-byte swizzled row
STAGES = 3  # k tiles in the ring: one multiplied, two in flight
IN_FLIGHT = STAGES - 2  # copy groups a thread may leave pending when it needs the current tile
THREADS = 256
GROUP = 8  # tile rows per group of the block order (step 6's)
FLUSH = 1  # k tiles per partial sum
TILE = BM * BK  # floats per operand tile (A_big, A_small, B_big, B_small: 16 KB each)
STAGE = 4 * TILE
SPLIT = 32  # the split kernels' tiles: 32 x 32 elements, blocks of 32 x 8 threads
PITCH = SPLIT + 1  # the transposing tile's row: +1, so that a column of it is in 32 different banks


# ----------------------------------------------------------------------------------------------------------
# The split: x = big + small, once per element
# ----------------------------------------------------------------------------------------------------------

@cuda.jit(device=True, forceinline=True)
def split_store(out, r, k, v):
    # out[0, r, k], out[1, r, k] = big, small of v (the columns past the input's are zeros)
    if r < out.shape[1] and k < out.shape[2]:
        big, small = split_tf32(v)
        out[0, r, k] = big
        out[1, r, k] = small


@cuda.jit
def split_rows_kernel(a, a2):
    # A (M, K) -> a2 (2, M, K4): a 32 x 32 tile per block, consecutive threads on consecutive k
    r0, k0 = cuda.blockIdx.y * SPLIT, cuda.blockIdx.x * SPLIT
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    for i in range(ty, SPLIT, 8):
        r, k = r0 + i, k0 + tx
        v = float32(a[r, k]) if r < a.shape[0] and k < a.shape[1] else float32(0.0)
        split_store(a2, r, k, v)


@cuda.jit
def split_cols_kernel(b, b2):
    # B (K, N) -> b2 (2, N, K4), transposed through a shared tile: read along B's rows, write along b2's
    tile = cuda.shared.array((SPLIT, PITCH), float32)
    r0, k0 = cuda.blockIdx.y * SPLIT, cuda.blockIdx.x * SPLIT
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    for i in range(ty, SPLIT, 8):
        k, r = k0 + i, r0 + tx
        tile[i, tx] = float32(b[k, r]) if k < b.shape[0] and r < b.shape[1] else float32(0.0)
    cuda.syncthreads()
    for i in range(ty, SPLIT, 8):
        split_store(b2, r0 + i, k0 + tx, tile[tx, i])


def split_launch(kernel, x, rows: int, k4: int, like) -> tuple:
    """(the (2, rows, k4) float32 array of big and small parts, the launch that fills it); on the device when
    ``like`` is a device array."""
    out = (cuda.device_array if is_device_array(like) else np.empty)((2, rows, k4), np.float32)
    return out, Launch(kernel, (ceil_div(k4, SPLIT), ceil_div(rows, SPLIT)), (SPLIT, 8), (x, out))


# ----------------------------------------------------------------------------------------------------------
# The product: three wgmmas per k step, into a partial sum per k tile
# ----------------------------------------------------------------------------------------------------------

@cuda.jit(device=True, forceinline=True)
def at(r, k):
    # element (r, k) of a K-major tile, rows of 32 floats (128 bytes): 16-byte chunk k / 4 at chunk (k / 4) ^ (r % 8)
    return r * BK + ((((k >> 2) ^ (r & 7))) << 2) + (k & 3)


@cuda.jit(device=True, forceinline=True)
def copy_stage(a2, b2, smem, base, k0, row_a, row_b, kc, dst):
    # The k tile at k0 of A_big, A_small (rows row_a + 32 j) and B_big, B_small (rows row_b + 32 j of B^T), 16
    # bytes each at column kc, into the stage at `base`. A thread's four rows (j = 0..3) are 32 apart: the same
    # row % 8, so the same swizzled chunk -- `dst`, its offset in the tile, is computed once (`thread_copies`),
    # and a k tile costs each thread 16 cp.async and little more (an instruction count, not bandwidth, is what
    # limits a kernel with 8 warps per SM).
    m, n, k4 = a2.shape[1], b2.shape[1], a2.shape[2]
    gk = k0 + kc
    k_in = gk < k4
    for j in range(4):
        ra, rb = row_a + 32 * j, row_b + 32 * j
        d = base + dst + j * 32 * BK
        a_in, b_in = k_in and ra < m, k_in and rb < n
        sa = ra * k4 + gk if a_in else 0
        sb = rb * k4 + gk if b_in else 0
        copy_async16(smem, d, a2, sa, 16 if a_in else 0)  # A_big
        copy_async16(smem, d + TILE, a2, sa + m * k4 if a_in else 0, 16 if a_in else 0)  # A_small
        copy_async16(smem, d + 2 * TILE, b2, sb, 16 if b_in else 0)  # B_big
        copy_async16(smem, d + 3 * TILE, b2, sb + n * k4 if b_in else 0, 16 if b_in else 0)  # B_small


@cuda.jit(device=True, forceinline=True)
def thread_copies(tid):
    # (row, kc, dst): thread tid copies chunk kc / 4 (of 8 per 128-byte row) of rows row + 32 j, j = 0..3, to
    # element dst + 32 j * BK of each tile (the chunk swizzled by row % 8, as `at` places it)
    row, kc = tid >> 3, (tid & 7) * 4
    return row, kc, at(row, kc)


def make_tf32x3_kernel(flush: int = FLUSH, group: int = GROUP):
    """The product kernel; ``flush``: k tiles per partial sum (1: every tile's products are added to the running
    sum by float32 adds; more: fewer waits for the tensor cores, larger partial sums); ``group``: tile rows per
    group of the block order."""

    @cuda.jit
    def tf32x3_kernel(a2, b2, c):
        smem = cuda.shared.array(0, float32)  # dynamic: STAGES x 64 KB
        acc = cuda.local.array(64, float32)  # the running sum: 64 x 128 per warpgroup, 64 per thread
        part = cuda.local.array(64, float32)  # the products of the last `flush` k tiles
        wgmma_zero(acc, 128)
        tid = cuda.threadIdx.x
        wg = tid >> 7
        row, col = grouped_tile(group)  # step 6's block order
        row0, col0 = row * BM, col * BN
        base0 = align1024(smem)
        k_tiles = (a2.shape[2] + BK - 1) // BK
        r, kc, dst = thread_copies(tid)
        row_a, row_b = row0 + r, col0 + r
        for s in range(STAGES - 1):
            if s < k_tiles:
                copy_stage(a2, b2, smem, base0 + s * STAGE, s * BK, row_a, row_b, kc, dst)
            async_commit()
        for kt in range(k_tiles):
            async_wait(IN_FLIGHT)  # this thread's copies of tile kt have landed
            fence_proxy_async()  # ... and are visible to the tensor cores
            cuda.syncthreads()  # everyone's
            st = base0 + (kt % STAGES) * STAGE
            a_big = st + wg * 64 * BK
            a_small = a_big + TILE
            b_big = st + 2 * TILE
            b_small = st + 3 * TILE
            fresh = kt % flush  # 0: the first tile of a partial sum, whose first wgmma has scale-d 0
            wgmma_fence()
            for s in range(BK // 8):  # a_small b_big (from zero on a fresh partial) ...
                wgmma_tf32_n128(part, smem, a_small + 8 * s, smem, b_big + 8 * s, fresh + s)
            for s in range(BK // 8):  # ... + a_big b_small ...
                wgmma_tf32_n128(part, smem, a_big + 8 * s, smem, b_small + 8 * s, 1)
            for s in range(BK // 8):  # ... + a_big b_big
                wgmma_tf32_n128(part, smem, a_big + 8 * s, smem, b_big + 8 * s, 1)
            wgmma_commit()
            if flush > 1:  # tile kt - 1's products may still be running: wait for them, everyone's
                wgmma_wait(1)
                cuda.syncthreads()
            nxt = kt + STAGES - 1  # while the tensor cores work: the copies into tile kt - 1's buffer
            if nxt < k_tiles:
                copy_stage(a2, b2, smem, base0 + (nxt % STAGES) * STAGE, nxt * BK, row_a, row_b, kc, dst)
            async_commit()
            if fresh == flush - 1 or kt == k_tiles - 1:
                wgmma_wait(0)
                wgmma_add(acc, part, 128)  # the partial into the running sum, rounded to nearest
        warp, lane = (tid >> 5) & 3, tid & 31
        wgmma_store(c, acc, 128, row0 + wg * 64 + warp * 16 + (lane >> 2), col0 + 2 * (lane & 3))

    tf32x3_kernel.tile = (BM, BN)
    tf32x3_kernel.threads = THREADS
    tf32x3_kernel.flush = flush
    tf32x3_kernel.target = "sm_90a"
    tf32x3_kernel.shared_bytes = STAGES * STAGE * 4 + 1024  # + up to 1 KB to reach a 1024-byte boundary
    return tf32x3_kernel


tf32x3_kernel = make_tf32x3_kernel()


def product_launch(kernel, a2, b2, c) -> Launch:
    m, n = c.shape
    return Launch(kernel, (ceil_div(n, BN), ceil_div(m, BM)), (THREADS,), (a2, b2, c), kernel.shared_bytes)


def split_operands(a, b, c) -> tuple:
    """(a2, b2, launches): A and B^T split into [big, small] arrays of K4 = K rounded up to 4 columns."""
    (m, k), n = a.shape, b.shape[1]
    k4 = ceil_div(k, 4) * 4
    a2, split_a = split_launch(split_rows_kernel, a, m, k4, c)
    b2, split_b = split_launch(split_cols_kernel, b, n, k4, c)
    return a2, b2, [split_a, split_b]


def tf32x3_launches(a, b, c) -> list[Launch]:
    """Split A and B, then the product (Hopper); elsewhere the mma.sync kernel, which splits as it reads."""
    if compute_capability() != (9, 0):
        return tiled_launch(tf32x3_mma_kernel, a, b, c, tf32x3_mma_kernel.threads)
    a2, b2, splits = split_operands(a, b, c)
    return splits + [product_launch(tf32x3_kernel, a2, b2, c)]


@version("tensor_core", check_fp32, kernels=[split_rows_kernel, split_cols_kernel, tf32x3_kernel, tf32x3_mma_kernel])
def tf32x3(a, b, c):
    """float32 inputs at float32 accuracy: x = big + small in TF32, split once, three wgmma products per k step
    (3xTF32)."""
    return tf32x3_launches(a, b, c)


# the benchmark times it on float32 inputs against the matmul lesson's peer (cuBLAS SGEMM, TF32 off) on the same ones
tf32x3.bench_inputs = ("float32", "matmul")
