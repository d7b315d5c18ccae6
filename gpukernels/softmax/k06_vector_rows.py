"""Step 6 of the softmax lesson, ``vector_rows``: 16-byte loads and stores for the shortest rows.

At 2^20 x 16, ``warp_rows`` gives a row 2 lanes of 8 values: a warp's 4-byte load reads 8 bytes of each of 16 rows
-- 16 separate 32-byte sectors for 128 useful bytes, and one instruction per value. With 16-byte accesses
(``gpukernels._intrinsics.load4``/``store4``: Numba never emits them itself, as it cannot prove a row is 16-byte
aligned) lane p of a row owns the runs of 4 values at 4 * (p + g * L), so a warp's load g reads 4 * L consecutive
floats of each of its rows: whole sectors even for rows of 16, and a quarter of the load and store instructions,
for the rows where instructions are most of the work.

Only where it pays and is safe: rows of at most VEC_MAX_N = 128 (beyond, a warp's 4-byte loads already read whole
sectors), n a multiple of 4, x and y 16-byte aligned (the launcher checks), values per lane in runs of 4. Anything
else takes ``warp_rows``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from numba import cuda, float32, uintp

from .._intrinsics import aligned16, load4, store4
from .._launch import version
from ._common import WARP, Config, _check
from .k05_warp_rows import warp_launches, warp_layout, warp_rows, warp_rows_config

VEC_MAX_N = 128  # rows up to this long use 16-byte loads and stores when aligned


@functools.cache
def warp_vec_kernel_for(cfg: Config):
    """``warp_rows``' kernel with 16-byte accesses, built once per configuration (``cfg.vec`` is set)."""
    lanes, elems, steps, rows_per_warp, warps_per_block, lanes_reduce, jit = warp_layout(cfg)
    assert elems % 4 == 0

    @jit
    def warp_vec_kernel(x, y):
        # warp_kernel with 16-byte accesses: lane p of a row owns the runs of 4 values at 4 * (p + g * L), so a
        # warp's load g reads 4 * L consecutive floats of each of its rows -- whole 32-byte sectors even for rows
        # of 16 (L = 2: 16 rows x 32 bytes), where warp_kernel's 4-byte loads read 8 bytes of a row each. A
        # quarter of the load and store instructions, for the rows where they are most of the work.
        vals = cuda.local.array(elems, float32)
        t = cuda.threadIdx.x
        i = (cuda.blockIdx.x * warps_per_block + cuda.threadIdx.y) * rows_per_warp + (t >> steps)
        p = t & (lanes - 1)
        m, n = x.shape
        rest = n - 4 * p if i < m else 0  # run g of this lane is x[i, 4 * (p + g * L) ...]; it exists if 4*g*L < rest
        row_max = float32(-math.inf)
        for g in range(elems // 4):
            if 4 * g * lanes < rest:
                vals[4 * g], vals[4 * g + 1], vals[4 * g + 2], vals[4 * g + 3] = load4(
                    x, uintp(i), uintp(4 * (p + g * lanes)))
            else:
                for q in range(4):
                    vals[4 * g + q] = float32(-math.inf)
            for q in range(4):
                row_max = max(row_max, vals[4 * g + q])
        row_max = lanes_reduce(row_max, True)
        row_sum = float32(0.0)
        for g in range(elems // 4):
            for q in range(4):
                vals[4 * g + q] = math.exp(vals[4 * g + q] - row_max) if 4 * g * lanes < rest else float32(0.0)
                row_sum += vals[4 * g + q]
        row_sum = lanes_reduce(row_sum, False)
        inv = float32(1.0) / row_sum if i < m else float32(0.0)
        for g in range(elems // 4):
            if 4 * g * lanes < rest:
                store4(y, uintp(i), uintp(4 * (p + g * lanes)), vals[4 * g] * inv, vals[4 * g + 1] * inv,
                       vals[4 * g + 2] * inv, vals[4 * g + 3] * inv)

    return warp_vec_kernel


def with_vector_access(cfg: Config, n: int, aligned: bool) -> Config:
    """``cfg`` with 16-byte loads and stores (`warp_vec_kernel`) where they pay and are safe: rows of a warp or
    less, at most VEC_MAX_N long (beyond, a warp's 4-byte loads already read whole sectors), 16-byte aligned
    (``aligned``: the launcher checked x and y), and values per lane in whole runs of 4."""
    if aligned and n % 4 == 0 and cfg.cached and cfg.threads <= WARP and n <= VEC_MAX_N and cfg.elems % 4 == 0:
        return dataclasses.replace(cfg, vec=True)
    return cfg


@version("softmax", _check)
def vector_rows(x, y):
    """Rows of up to 128 values, 16-byte aligned: warp_rows with 16-byte loads and stores; others: warp_rows."""
    n = x.shape[1]
    cfg = warp_rows_config(n)
    cfg = cfg and with_vector_access(cfg, n, aligned16(x, y))
    if cfg is None or not cfg.vec:
        return warp_rows.plan(x, y)
    return warp_launches(cfg, warp_vec_kernel_for(cfg), x, y)
