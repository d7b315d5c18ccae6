"""Step 20 of the matmul ladder, ``async_copy``: tiles copied global -> shared by ``cp.async``, three in a ring.

Until now every k tile came in through registers: each thread loads its share of the next tile from global memory
into 12 prefetch registers while the current tile is multiplied, then stores them to shared memory -- one tile in
flight, 12 registers held across the whole multiply, and a store the warp must issue after the loads land. Since
Ampere (sm_80) the hardware copies global -> shared by itself (``cp.async``; SASS ``LDGSTS``), and cuBLAS's FP32
kernel uses it through 3 stages. Here the interior tiles' loop (`_interior.async_loop`) keeps a ring of 3 shared
buffers: while tile i is multiplied, tiles i + 1 and i + 2 are on their way, and no register holds them. Numba has
no call for it and libNVVM rejects LLVM's ``llvm.nvvm.cp.async.*`` intrinsics, so `gpukernels._intrinsics.copy_async`
writes the PTX instruction as inline assembly. The one change from ``stream_k``: ``stages=3``.

Traffic is unchanged (the same bytes from global memory, the same shared-memory reads); what changes is who waits.
Nsight Compute at 4096^3 (H200, benchmarks/NOTES.md): stalls waiting on shared-memory results 0.30 -> 0.24 cycles
per issued instruction, issue slots busy 75.8% -> 78.2%, but a new wait at ``cp.async.wait_group`` (long
scoreboard 0.01 -> 0.12) takes back part of it: 1-3% faster on the large squares, about even where no tile is
shared. The ring costs 3 x 12.4 KB of shared memory (a fourth stage would pass the 48 KB a static array may use).
"""

from __future__ import annotations

import functools

from .._intrinsics import aligned16
from .._launch import version
from ._common import check, tiled_launch
from ._interior import make_interior_kernel
from .k15_thread_16x8 import wide_kernel
from .k19_stream_k import stream_k_launches, stream_k_vec_kernel

ASYNC_STAGES = 3
async_vec_kernel = make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True, clamp=False, stream_k=True,
                                        stages=ASYNC_STAGES)


@functools.cache
def has_async_copy() -> bool:
    """Whether this device has ``cp.async`` (compute capability 8.0 or newer); the simulator runs the ring with
    plain copies (one of the orders the hardware may take), so it always may."""
    from .._device import MODE

    if MODE != "gpu":
        return True
    from numba import cuda

    return cuda.get_current_device().compute_capability >= (8, 0)


def async_copy_kernel():
    """The kernel for aligned rows: the cp.async ring, or on a GPU older than sm_80 stream_k's register path."""
    return async_vec_kernel if has_async_copy() else stream_k_vec_kernel


@version("matmul", check, kernels=[async_vec_kernel, wide_kernel])
def async_copy(a, b, c):
    """stream_k with each interior tile copied global -> shared by cp.async through a ring of 3 shared buffers."""
    if not aligned16(a, b):  # 16-byte copies of B need 16-byte aligned rows: thread_16x8's scalar kernel
        return tiled_launch(wide_kernel, c, (a, b, c))
    return stream_k_launches(async_copy_kernel(), a, b, c)
