"""Step 13 of the matmul ladder, ``wave_fit``.

64 x 64 tiles when 128 x 128 ones would make fewer blocks than the GPU has SMs (1024^2). The one change from
``swizzled``: a second, smaller tile (``make_interior_kernel(64, 64)``), and `wave_fit_kernel` to choose.
"""

from __future__ import annotations

from .._launch import ceil_div, version
from . import _common
from ._common import check, tiled_launch
from ._interior import make_interior_kernel
from .k12_swizzled import swizzled_kernel

small_tile_kernel = make_interior_kernel(64, 64)  # for small products: 64 threads, 8-deep tiles


def wave_fit_kernel(m: int, n: int, sms: int | None = None, kernels=(swizzled_kernel, small_tile_kernel)):
    """The kernel for an M x N product: the first of ``kernels`` (largest tile first) whose tiles give at least
    one block per SM, else the last: ``swizzled`` (128 x 128 tiles) or the 64 x 64 tile.

    At 1024 x 1024 a 128 x 128 tile makes only 64 blocks for 132 SMs -- half the GPU idles however fast each
    block runs; 64 x 64 tiles make 256 blocks (each does a quarter of the work with 64 threads)."""
    sms = sms or _common.sm_count()
    for kernel in kernels[:-1]:
        if ceil_div(m, kernel.tile[0]) * ceil_div(n, kernel.tile[1]) >= sms:
            return kernel
    return kernels[-1]


@version("matmul", check, kernels=[swizzled_kernel, small_tile_kernel])
def wave_fit(a, b, c):
    """Tile size fitted to the GPU: 64 x 64 tiles when 128 x 128 ones would make fewer blocks than SMs."""
    return tiled_launch(wave_fit_kernel(*c.shape), c, (a, b, c))
