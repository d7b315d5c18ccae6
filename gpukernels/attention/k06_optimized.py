"""Step 6 of the attention lesson, ``optimized``: the dispatcher -- per dtype and shape, ``pipelined``, ``fused_rows``
or ``tiled``, by rules a student can call and read (``attention.optimized.choose(B, H, Sq, Sk, D, causal, half)``).

**float16 inputs** go to the tensor cores: ``pipelined`` (step 5), at every shape -- on an H200 it is the fastest
step wherever it can run, from one query per head (decoding) to 16k tokens. D must be a multiple of 16, as for
the tensor-core steps themselves. **float32 inputs** stay on the CUDA cores, by these rules:

No kernel here is new. ``tiled`` shares each K/V tile between 32 query rows, so it reads K and V 32 times less
than ``fused_rows``; but a block of 32 rows needs 32 rows to share, and enough blocks to fill the GPU:

1. **Few queries** (Sq <= FUSED_MAX_SQ = 8, decoding one token at a time): a 32-row tile would be at least three
   quarters padding; a warp per row wastes nothing.
2. **Too few tiles** (fewer (query tile, head) blocks than SMs): tiled leaves SMs idle, while fused_rows' blocks of
   4 rows are 8 times as many.
3. **Everything else**: ``tiled``.

Both steps skip what the causal mask hides (fused_rows stops each row at its query, tiled skips the K/V tiles after
a block's last query), so ``causal`` changes no choice; it is named in the reason.

The thresholds are first estimates, from counting blocks against SMs; they are to be placed by measuring on the GPU
(``SHAPES["suite"]`` holds a shape on each side of each rule).
"""

from __future__ import annotations

from typing import Any


from .._launch import Choice, ceil_div, count, sm_count, version
from ..tensor_core._common import itemsize
from ._common import check, check_half
from .k02_fused_rows import FUSED_ROWS_KERNELS, FUSED_WARPS, dims_per_lane, fused_rows_launches
from .k03_tiled import TILE_ROWS, TILED_KERNELS, padded_dims, tile_keys, tiled_launches
from .k05_pipelined import PIPELINED_KERNELS, pipelined_launches, warps_for

FUSED_MAX_SQ = 8  # at most this many queries per head: a warp per row (a 32-row tile would be mostly padding)
FILL = 1.0  # tiled needs at least this many blocks per SM; fewer: fused_rows


def choose(b: int, h: int, sq: int, sk: int, d: int, causal: bool = False, half: bool = False,
           sms: int | None = None) -> Choice:
    """The step for q (B, H, Sq, D) against k, v (B, H, Sk, D), float16 when ``half``; ``sms``: the GPU's SM count
    (default: this GPU's, or an H200's 132)."""
    sms = sms or sm_count()
    if half:
        rows = 16 * warps_for(d)
        tiles = b * h * ceil_div(sq, rows)
        return Choice("pipelined", {"rows": rows, "keys": 64, "width": d},
                      f"float16: tensor cores, {count(tiles, 'block')} of {rows} queries walking "
                      f"K/V tiles of 64 keys copied by cp.async" + (", causal: tiles past a block's queries skipped"
                                                                     if causal else ""))
    mask = ", causal: each row stops at its query" if causal else ""
    rows = {"rows_per_block": FUSED_WARPS, "dims_per_lane": dims_per_lane(d)}
    rows_blocks = ceil_div(b * h * sq, FUSED_WARPS)
    if sq <= FUSED_MAX_SQ:
        return Choice("fused_rows", rows,
                      f"{sq} quer{'y' if sq == 1 else 'ies'} per head (<= {FUSED_MAX_SQ}): a tile of {TILE_ROWS} rows "
                      f"would be mostly padding; a warp per row, {count(rows_blocks, 'block')} of {FUSED_WARPS} "
                      f"rows{mask}")
    tiles = b * h * ceil_div(sq, TILE_ROWS)
    if tiles < FILL * sms:
        return Choice("fused_rows", rows,
                      f"{count(tiles, 'tile')} of {TILE_ROWS} queries would leave {sms - tiles} of {sms} SMs idle; a "
                      f"warp per row makes {count(rows_blocks, 'block')} of {FUSED_WARPS} rows{mask}")
    dp = padded_dims(d)
    skip = ", causal: K/V tiles after a block's last query skipped" if causal else ""
    return Choice("tiled", {"rows": TILE_ROWS, "keys": tile_keys(dp), "width": dp},
                  f"{count(tiles, 'tile')} of {TILE_ROWS} queries = {tiles / sms:.2f} waves of {sms} SMs, each K/V "
                  f"tile of {tile_keys(dp)} keys read once per {TILE_ROWS} rows{skip}")


def is_half(x: Any) -> bool:
    """True for an array of 2-byte elements (NumPy, Numba, torch or CuPy float16); anything else is checked as
    float32, whose check says what was wrong."""
    try:
        return itemsize(x) == 2
    except (AttributeError, TypeError):
        return False


def check_any(q, k, v, causal=False, scale=None):
    """float16 q: the tensor-core steps' check; anything else: the float32 steps'."""
    return (check_half if is_half(q) else check)(q, k, v, causal, scale)


@version("attention", check_any, kernels=FUSED_ROWS_KERNELS + TILED_KERNELS + PIPELINED_KERNELS)
def optimized(q, k, v, out, causal=False, scale=None):
    """The dispatcher: float16 on tensor cores (pipelined); float32 per shape, a warp per query row (few queries, or
    too few tiles to fill the GPU) or tiles of 32 queries sharing K/V tiles in shared memory."""
    b, h, sq, d = q.shape
    choice = choose(b, h, sq, k.shape[2], d, causal, is_half(q))
    launches = {"pipelined": pipelined_launches, "tiled": tiled_launches}.get(choice.step, fused_rows_launches)
    return launches(q, k, v, out, causal, scale)


def describe(q, k, v, causal=False, scale=None) -> str:
    """What ``optimized`` runs for these inputs, in words."""
    b, h, sq, d = q.shape
    return str(choose(b, h, sq, k.shape[2], d, causal, is_half(q)))


optimized.choose = choose
optimized.steps = ("fused_rows", "tiled", "pipelined")  # what it dispatches to
optimized.describe = describe
