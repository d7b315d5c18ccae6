"""Step 5 of the softmax lesson, ``warp_rows``: short rows share a warp, and need no barrier.

A block per row wastes what a short row does not have: at 65536 x 128, ``registers`` gives each row a block of 32
threads with 4 values each -- 65536 blocks of one warp, and every reduction is 5 shuffles over a warp for 128
values. Rows of up to 512 values instead get L lanes of a warp (a power of two from 1 to 32, about n / 8 values
each: SUBWARP_ELEMS), so a warp holds 32 / L rows and a block of WARPS_PER_BLOCK warps 4 * 32 / L rows. A
reduction over L lanes is log2(L) shuffles (4 for a 128-value row on 16 lanes), and a warp's shuffle instructions
serve all its rows at once. No row spans two warps, so there is no shared memory and no barrier.

Measured at 65536 x 128 (H200): 16 or 32 lanes 0.0189 ms (1.30x torch), 8 lanes x 16 values 0.0195 (53 registers),
4 lanes x 32 0.0353 (95): short rows gain from more warps per SM more than from more loads per lane. Rows longer
than 512 values take ``registers``.
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32, uintp

from .._launch import Launch, version
from ._common import WARP, Config, _check, _pow2
from .k02_block_row import reductions
from .k04_registers import ELEMS, registers

SUBWARP_ELEMS = 8  # values per lane for rows of <= 512 (fewer registers, more resident warps: measured)
WARPS_PER_BLOCK = 4  # warps per block
WARP_ROWS_MAX_N = WARP * ELEMS  # 512: the longest row a warp takes (32 lanes x 16 values)


def warp_layout(cfg: Config):
    """What a kernel with L = ``cfg.threads`` lanes per row needs at compile time (this step's and vector_rows'):
    (lanes, elems, log2(lanes), rows per warp, warps per block, the L-lane shuffle reduction, the jit decorator)."""
    lanes = cfg.threads
    assert lanes <= WARP and lanes & (lanes - 1) == 0
    lanes_reduce, _ = reductions(lanes)
    jit = cuda.jit(launch_bounds=(WARP * cfg.warps_per_block, cfg.min_blocks)) if cfg.min_blocks else cuda.jit
    return lanes, cfg.elems, lanes.bit_length() - 1, WARP // lanes, cfg.warps_per_block, lanes_reduce, jit


@functools.cache
def warp_kernel_for(cfg: Config):
    """The kernel for rows of at most a warp (``cfg.threads`` = L lanes per row, ``cfg.elems`` values per lane),
    built once per configuration."""
    lanes, elems, steps, rows_per_warp, warps_per_block, lanes_reduce, jit = warp_layout(cfg)

    @jit
    def warp_kernel(x, y):
        # Lanes 0..L-1 of a warp own one row, lanes L..2L-1 the next, ... (L = lanes, 32 // L rows per warp); lane
        # p of a row caches its values p, p + L, p + 2L, ... A load instruction of the warp reads L consecutive
        # floats of each of its rows (whole 32-byte sectors from L = 8 on), and each reduction is log2(L)
        # shuffles -- 4 for a 128-value row on 16 lanes instead of 5 on a full warp. No barrier anywhere.
        vals = cuda.local.array(elems, float32)
        t = cuda.threadIdx.x
        i = (cuda.blockIdx.x * warps_per_block + cuda.threadIdx.y) * rows_per_warp + (t >> steps)
        p = t & (lanes - 1)
        m, n = x.shape
        # Lanes of a row past the end of x (M not a multiple of the block's rows) see an empty row: they load
        # and store nothing but still shuffle, as shfl_xor_sync(FULL_MASK) needs all 32 lanes.
        rest = n - p if i < m else 0  # value e of this lane is x[i, p + e * L]; it exists if e * L < rest
        row_max = float32(-math.inf)
        for e in range(elems):  # all loads are issued before the first shuffle
            vals[e] = x[uintp(i), uintp(p + e * lanes)] if e * lanes < rest else float32(-math.inf)
            row_max = max(row_max, vals[e])
        row_max = lanes_reduce(row_max, True)
        row_sum = float32(0.0)
        for e in range(elems):
            vals[e] = math.exp(vals[e] - row_max) if e * lanes < rest else float32(0.0)
            row_sum += vals[e]
        row_sum = lanes_reduce(row_sum, False)
        inv = float32(1.0) / row_sum if i < m else float32(0.0)  # an empty row's sum is 0
        for e in range(elems):
            if e * lanes < rest:
                y[uintp(i), uintp(p + e * lanes)] = vals[e] * inv

    return warp_kernel


def warp_rows_config(n: int) -> Config | None:
    """L lanes per row of n <= WARP_ROWS_MAX_N values, about SUBWARP_ELEMS each (16 for n = 128: a warp holds 2
    rows), WARPS_PER_BLOCK warps per block; None for longer rows."""
    if n > WARP_ROWS_MAX_N:
        return None
    lanes = min(WARP, _pow2(-(-n // SUBWARP_ELEMS)))
    return Config(lanes, _pow2(-(-n // lanes)), True, warps_per_block=WARPS_PER_BLOCK)


def warp_launches(cfg: Config, kernel, x, y) -> list[Launch]:
    grid = -(-x.shape[0] // cfg.rows_per_block)  # 32 // lanes rows for each warp of a block
    return [Launch(kernel, (grid,), cfg.block, (x, y))]


@version("softmax", _check)
def warp_rows(x, y):
    """Rows of up to 512 values share a warp (L lanes each, log2(L) shuffles, no barrier); longer rows: registers."""
    cfg = warp_rows_config(x.shape[1])
    return registers.plan(x, y) if cfg is None else warp_launches(cfg, warp_kernel_for(cfg), x, y)
