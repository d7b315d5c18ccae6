"""Step 14 of the matmul ladder, ``vector_loads``.

16-byte global loads: Numba cannot prove an array row is 16-byte aligned, so it never emits them; a 20-line
intrinsic (``gpukernels._intrinsics.load4``) does, when the launcher has checked the alignment. A quarter of the
load instructions and of the trips through the L1 pipeline. The one change from ``wave_fit``: ``vec=True``.
"""

from __future__ import annotations

from .._intrinsics import aligned16
from .._launch import version
from ._common import check, tiled_launch
from ._interior import make_interior_kernel
from .k12_swizzled import swizzled_kernel
from .k13_wave_fit import small_tile_kernel, wave_fit_kernel

# swizzled with load4. Per 16-deep tile a thread's 16 four-byte loads become 4 sixteen-byte ones, and each
# warp-wide load touches the same 16 sectors it did before: a quarter of the instructions and a quarter of the
# passes through the L1 pipeline, which the shared-memory loads of the inner product share. Nsight Compute at
# 4096^3 (H200, 2026-11-30): stalls waiting on shared-memory results ("short scoreboard") 0.65 -> 0.12 cycles per
# issued instruction, issue slots busy 65% -> 72%, 3.68 -> 3.30 ms. Only interior tiles use it (edge tiles may
# start a run mid-row), and only when the launcher found every row 16-byte aligned (K and N multiples of 4).
vec_kernel = make_interior_kernel(128, 128, bk=16, group=8, vec=True)
small_vec_kernel = make_interior_kernel(64, 64, vec=True)


@version("matmul", check, kernels=[vec_kernel, small_vec_kernel, swizzled_kernel, small_tile_kernel])
def vector_loads(a, b, c):
    """16-byte global loads (a Numba intrinsic) where rows are 16-byte aligned: 4x fewer load instructions."""
    kernels = (vec_kernel, small_vec_kernel) if aligned16(a, b) else (swizzled_kernel, small_tile_kernel)
    return tiled_launch(wave_fit_kernel(*c.shape, kernels=kernels), c, (a, b, c))
