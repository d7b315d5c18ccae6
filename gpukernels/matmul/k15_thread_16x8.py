"""Step 15 of the matmul ladder, ``thread_16x8``.

16 x 8 outputs per thread in 256 x 128 tiles (the tile cuBLAS's own FP32 kernel uses): 128 FMAs per 6 shared
loads instead of 64 per 4. The one change from ``vector_loads``: ``rows=16`` (with a 256-row tile and 8-deep k).
"""

from __future__ import annotations

from .._intrinsics import aligned16
from .._launch import version
from ._common import check, tiled_launch
from ._interior import make_interior_kernel
from .k12_swizzled import swizzled_kernel
from .k13_wave_fit import small_tile_kernel, wave_fit_kernel
from .k14_vector_loads import small_vec_kernel, vec_kernel

# A 16 x 8 thread tile: 128 accumulators, 16 + 8 fragment values, 12 prefetch registers -- 248 registers on the
# H200 (254 from the pip nvJitLink; `gpukernels resources matmul` reports the current count), still one block of
# 8 warps per SM, no spills. Per k step a warp issues 6 shared loads for 128 FMAs (4 for 64 before), so the loop
# is ~85% FFMA. 16-deep tiles would need 50 KB of shared memory, past the 48 KB a static allocation may use, so
# the k tiles are 8 deep. Without load4 this tile measured the same as 128 x 128 (3.69 ms, H200, 2026-12-01):
# the L1 pipeline, not the instruction count, was the limit then.
wide_kernel = make_interior_kernel(256, 128, bk=8, group=8, rows=16)
# Its edge blocks guard their loads instead of clamping the indices: with clamping this kernel (the 248-register one)
# ran 4096^3 -- no edge blocks at all -- in 3.31 ms instead of 3.215 (H200, benchmarks/NOTES.md); the shapes it
# serves are large and aligned, where edge tiles are few. (Unaligned, `wide_kernel`, clamping paid: 4095 x 4097 x 4093
# went from 0.72x to 0.79x cuBLAS.)
wide_vec_kernel = make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True, clamp=False)


@version("matmul", check, kernels=[wide_vec_kernel, vec_kernel, small_vec_kernel, wide_kernel, swizzled_kernel,
                                   small_tile_kernel])
def thread_16x8(a, b, c):
    """16 x 8 outputs per thread in 256 x 128 tiles: 128 FMAs per 6 shared loads (the tile cuBLAS uses)."""
    if aligned16(a, b):
        kernels = (wide_vec_kernel, vec_kernel, small_vec_kernel)
    else:
        kernels = (wide_kernel, swizzled_kernel, small_tile_kernel)
    return tiled_launch(wave_fit_kernel(*c.shape, kernels=kernels), c, (a, b, c))
