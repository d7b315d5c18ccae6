"""Step 10 of the matmul ladder, ``interior``.

Blocks whose tiles lie wholly inside the matrices take a copy of the loop without bounds checks; only edge
blocks pay for them. This is the base call of the factory (`_interior.make_interior_kernel`) that steps 11-17
change one argument of: a 128 x 128 tile, 8-deep k tiles, ``unrolled``'s layout.
"""

from __future__ import annotations

from .._launch import version
from ._common import check, tiled_launch
from ._interior import make_interior_kernel

# 149 registers would leave room for one block per SM; launch_bounds(256, 2) caps them at 128 (2 blocks).
interior_kernel = make_interior_kernel(128, 128, launch_bounds=(256, 2))


@version("matmul", check, kernels=[interior_kernel])
def interior(a, b, c):
    """Interior fast path: blocks whose tiles lie wholly inside A, B and C load and store without bounds checks."""
    return tiled_launch(interior_kernel, c, (a, b, c))
