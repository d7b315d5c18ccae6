"""Step 11 of the matmul ladder, ``deep_k``.

16-deep k tiles instead of 8: twice the FMAs between barriers, and each tile's global loads have twice as long to
arrive. The one change from ``interior``: ``bk=16`` (and no register cap).
"""

from __future__ import annotations

from .._launch import version
from ._common import check, tiled_launch
from ._interior import make_interior_kernel

# 16 prefetch registers instead of 8 push the count to 168 (one block of 8 warps per SM); capping it at 128
# spills and was slower (3.97 against 3.66 ms, H200, 2026-11-30), so this one runs at one block per SM.
deep_k_kernel = make_interior_kernel(128, 128, bk=16)


@version("matmul", check, kernels=[deep_k_kernel])
def deep_k(a, b, c):
    """16-deep k tiles: 1024 FMAs per thread between barriers, global loads issued a whole tile ahead."""
    return tiled_launch(deep_k_kernel, c, (a, b, c))
