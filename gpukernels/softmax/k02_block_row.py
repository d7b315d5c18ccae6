"""Step 2 of the softmax lesson, ``block_row``: a block of 512 threads per row, its max and sum reduced with warp
shuffles.

The one idea: the threads that share a row read it *together*. Thread t takes columns t, t + 512, t + 1024, ...,
so one load instruction of a warp reads 32 consecutive floats (one 128-byte line: coalesced), and M rows make M
blocks -- every SM busy from a few hundred rows on. The passes are naive's three (max, sum, write: 3 loads and 1
store per element, 16 bytes), but now each one streams.

Combining the threads' partial results is a *reduction*, and it has two levels:

* within a warp, ``cuda.shfl_xor_sync(mask, v, offset)`` hands every lane the ``v`` of lane ``lane ^ offset``: no
  shared memory, no barrier. Five steps with offsets 16, 8, 4, 2, 1 form a butterfly, after which every lane holds
  the warp's result (``warp_max``, ``warp_sum``);
* across the block's 16 warps, lane 0 of each writes its warp's result to shared memory, one
  ``cuda.syncthreads()``, and every warp reduces those 16 values with the same butterfly (``block_reduce``).

Two barriers per reduction, where a shared-memory tree over 512 threads takes nine (exercise 03 builds one).
512 threads, as ``split_row``'s blocks and ``registers``' long rows: 4 blocks per SM, so one block's barrier
wait overlaps the others' loads.
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32

from .._launch import Launch, version
from ._common import FULL_MASK, WARP, _check


@cuda.jit(device=True, forceinline=True)
def warp_max(v):
    # Butterfly: after the 5 steps (xor with 16, 8, 4, 2, 1) every lane holds the maximum of all 32 lanes.
    # A range, not a tuple of offsets: Numba indexes a tuple through a branch tree, and that loop stays rolled.
    for k in range(5):
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 16 >> k))
    return v


@cuda.jit(device=True, forceinline=True)
def warp_sum(v):
    for k in range(5):
        v += cuda.shfl_xor_sync(FULL_MASK, v, 16 >> k)
    return v


@functools.cache
def reductions(threads: int):
    """``(lanes_reduce, block_reduce)`` for ``threads`` threads per row: a butterfly over the L = min(threads, 32)
    lanes of a row within a warp, and (for threads > 32) a second one across the row's warps through shared
    memory. ``threads`` is a compile-time constant of the device functions: their loops unroll to constants."""
    lanes = min(threads, WARP)  # lanes that share a row within a warp
    steps = lanes.bit_length() - 1  # log2(lanes): shuffle steps of one reduction
    warps = -(-threads // WARP)  # warps that share a row

    @cuda.jit(device=True, forceinline=True)
    def lanes_reduce(v, is_max):
        # Butterfly over the `lanes` lanes of a row: xor with lanes/2, ..., 2, 1 never leaves the row's aligned
        # segment of the warp, and after log2(lanes) steps every lane of it holds the result. A range (not a
        # tuple of offsets, which Numba indexes through a branch tree) so that the loop unrolls to constants.
        for k in range(steps):
            other = cuda.shfl_xor_sync(FULL_MASK, v, (lanes >> 1) >> k)
            v = max(v, other) if is_max else v + other
        return v

    @cuda.jit(device=True, forceinline=True)
    def block_reduce(v, scratch, is_max):
        # Reduce within each warp with shuffles, then across warps through shared memory.
        v = lanes_reduce(v, is_max)
        if warps > 1:
            lane = cuda.threadIdx.x % WARP
            warp = cuda.threadIdx.x // WARP
            if lane == 0:
                scratch[warp] = v
            cuda.syncthreads()
            v = scratch[lane] if lane < warps else (float32(-math.inf) if is_max else float32(0.0))
            v = lanes_reduce(v, is_max)
            cuda.syncthreads()  # scratch is reused by the next reduction
        return v

    return lanes_reduce, block_reduce


BLOCK_THREADS = 512
_, block_reduce = reductions(BLOCK_THREADS)


@cuda.jit
def block_row_kernel(x, y):
    # Block i owns row i; thread t reads columns t, t + 512, ...: each warp load is 32 consecutive floats.
    # Traffic per element: 3 loads (the second and third often from L2: a block's row is read again at once)
    # and 1 store.
    scratch = cuda.shared.array(WARP, float32)
    i = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = x.shape[1]
    m = float32(-math.inf)
    for j in range(t, n, BLOCK_THREADS):  # pass 1: this thread's max
        m = max(m, x[i, j])
    row_max = block_reduce(m, scratch, True)
    s = float32(0.0)
    for j in range(t, n, BLOCK_THREADS):  # pass 2: this thread's sum of exponentials
        s += math.exp(x[i, j] - row_max)
    inv = float32(1.0) / block_reduce(s, scratch, False)
    for j in range(t, n, BLOCK_THREADS):  # pass 3: normalise
        y[i, j] = math.exp(x[i, j] - row_max) * inv


@version("softmax", _check, kernels=[block_row_kernel])
def block_row(x, y):
    """A block of 512 threads per row: coalesced loads, max and sum by warp shuffles; still three passes."""
    return [Launch(block_row_kernel, (x.shape[0],), (BLOCK_THREADS,), (x, y))]
