"""Step 6 of the CBR lesson, ``optimized``: the dispatcher -- per shape, Winograd or the implicit GEMM, and the
GEMM's pixels per block and slices of the channels, by a rule a student can call and read
(``cbr.optimized.choose(N, C, H, W, K)``)."""

from __future__ import annotations

from .._errors import LaunchError
from .._launch import Choice, ceil_div, check_choose, sm_count, version
from ._common import _check, _empty
from .k03_implicit_gemm import IG_BM, IG_MIN_BLOCKS, igemm_bk_max, igemm_launches, igemm_tiling
from .k04_split_c import SPLIT_C_MAX
from .k05_winograd import winograd_launches, winograd_plan


#: Pixels per block: 256, or 128 when 64 x 256 tiles would give fewer than one per CBR_SMALL_SMS SMs (batch 1).
CBR_SMALL_SMS = 8
#: Slice the channels only when the tiles leave more than half the SMs idle (fewer than SMs / CBR_SPLIT_IDLE tiles):
#: at (16, 128, 28^2, 128), 98 tiles of 64 x 256 for 132 SMs, unsliced ran 0.179 ms and 2 slices 0.224 ms (the bias
#: and ReLU passes, the atomics and twice the reads of w cost more than the idle quarter of the GPU).
CBR_SPLIT_IDLE = 2
#: Winograd (3 x 3 filters) when both channel counts are at least this deep and there are at least WINOGRAD_MIN_TILES
#: output tiles of 2 x 2, whatever the implicit GEMM's tiles. Measured (H100, 2026-12-06, benchmarks/NOTES.md), the
#: step on F(4x4, 3x3) against the GEMM's best plan: 16 x 64 x 56^2 0.116 ms against 0.150, 32 x 64 x 56^2 0.209
#: against 0.237, 64 x 64 x 56^2 0.384 against 0.441, 128 x 128 x 28^2 0.553 against 0.858 -- at 64 channels its
#: 4 times fewer FLOPs outweigh the transforms' bytes even where the GEMM fills the SMs (on F(2x2, 3x3), 2.25 times
#: fewer, the GEMM had won there). Below 64 (8 x 3 x 224^2, 3 x 20 x 37 x 41 x 24) the transforms' bytes per FLOP
#: saved grow and the GEMM or split_c keeps them.
WINOGRAD_MIN_CHANNELS = 64
#: ... and batch 1's smallest images stay with split_c, whose slices fill the SMs where Winograd's few tiles cannot:
#: 1 x 256 x 14^2 (49 tiles of 2 x 2) split_c 2.03x, Winograd 1.43x; 1 x 128 x 28^2 (196 tiles) 1.19x and 1.24x.
WINOGRAD_MIN_TILES = 128


def choose(n, c, h, wd, k, r=3, s=3, sms: int | None = None) -> Choice:
    """Winograd, or the implicit GEMM's pixels per block and slices of the channels, for x (N, C, H, W) convolved
    with w (K, C, R, S), padding 1.

    0. **Winograd** for 3 x 3 filters with C and K both at least WINOGRAD_MIN_CHANNELS and at least
       WINOGRAD_MIN_TILES output tiles of 2 x 2: channels deep enough that Winograd's fewer FLOPs outweigh its
       transforms' bytes, on an image large enough for its products to fill the SMs. Its output tile is the step's own
       choice (``output_tile``: 4 x 4, 4 times fewer FLOPs, wherever there are F4_MIN_TILES tiles of 4 x 4 or more;
       else 2 x 2, 2.25 times fewer).
       Otherwise the implicit GEMM:
    1. **Tile**: 64 channels x 256 pixels, or x 128 pixels when the 256-pixel tiles would number fewer than one
       per CBR_SMALL_SMS SMs -- there halving the tile doubles the tiles, and each block's k loop is no longer.
    2. **Slices**, only when the tiles would leave more than half the SMs idle: the fewest (a power of two) that
       make at least one block per SM, at most SPLIT_C_MAX and no more than the channels' k tiles. On the H200
       each such suite shape's fastest measured slicing was the first to fill the 132 SMs (benchmarks/NOTES.md,
       "CBR on the suite").

    Nothing here names a shape: the thresholds are counts of channels, and of tiles against SMs."""
    check_choose({"n": n, "c": c, "h": h, "wd": wd, "k": k, "r": r, "s": s}, sms=sms)
    if r > h + 2 or s > wd + 2:
        raise LaunchError(f"the filter (r, s) = ({r}, {s}) must fit the padded image (h + 2, wd + 2) = "
                          f"({h + 2}, {wd + 2})")
    sms = sms or sm_count()
    ho, wo = h + 2 - r + 1, wd + 2 - s + 1
    tiles256 = ceil_div(n * ho * wo, 256) * ceil_div(k, IG_BM)
    wtiles = n * ceil_div(ho, 2) * ceil_div(wo, 2)
    if (r, s) == (3, 3) and wtiles >= WINOGRAD_MIN_TILES and min(c, k) >= WINOGRAD_MIN_CHANNELS:
        m, p, tile = winograd_plan(n, ho, wo, k, sms)
        return Choice("winograd", {"m": m, "tile": tile},
                      f"3 x 3 filters, {c} -> {k} channels (>= {WINOGRAD_MIN_CHANNELS}), {wtiles} tiles of 2 x 2 "
                      f"(>= {WINOGRAD_MIN_TILES}): Winograd's {(m + 2) ** 2} products over {p} tiles of {m} x {m} do "
                      f"{9 * m * m / (m + 2) ** 2:g} times fewer FLOPs")
    bn = 128 if tiles256 * CBR_SMALL_SMS < sms or s > igemm_bk_max(256) else 256
    tiles = ceil_div(n * ho * wo, bn) * ceil_div(k, IG_BM)
    chunks = ceil_div(c, igemm_tiling(r, s, None, bn)[0])
    splits = 1
    if tiles * CBR_SPLIT_IDLE < sms:  # more than half the SMs would idle: slice until every SM has a block
        while tiles * splits < sms and splits * 2 <= min(SPLIT_C_MAX, chunks):
            splits *= 2
    why = (f"{tiles} tile{'' if tiles == 1 else 's'} of 64 channels x {bn} pixels for {sms} SMs"
           + (f" (256-pixel tiles: {tiles256}, fewer than one per {CBR_SMALL_SMS} SMs)" if bn == 128 else "")
           + (f": {splits} slices of the {c} channels make {tiles * splits} blocks, one wave" if splits > 1
              else ": a full wave without slicing" if tiles >= sms
              else ": more than half the SMs busy, slicing would cost more" if tiles * CBR_SPLIT_IDLE >= sms
              else ": too few channels to slice"))
    return Choice("split_c" if splits > 1 else "implicit_gemm", {"bn": bn, "splits": splits}, why)


def choice_for(x_shape, w_shape, padding=1) -> Choice:
    """choose() for these arrays' shapes; the rule assumes padding 1, so any other padding takes it on its own
    output size."""
    n, c, h, wd = x_shape
    k, _, r, s = w_shape
    if padding != 1:  # the size that gives the same output with padding 1 (at least 1: a 1 x 1 filter, padding 0)
        h, wd = max(h + 2 * padding - 2, 1), max(wd + 2 * padding - 2, 1)
    return choose(n, c, h, wd, k, r, s)


def _choice_launches(x, w, b, y, padding):
    ch = choice_for(x.shape, w.shape, padding)
    if ch.step == "winograd":
        return ch, winograd_launches(x, w, b, y, padding, tile=ch.config["tile"], m=ch.config["m"])
    return ch, igemm_launches(x, w, b, y, padding, bn=ch.config["bn"],
                              min_blocks=IG_MIN_BLOCKS if ch.config["bn"] == 256 else None,
                              splits=ch.config["splits"])


@version("cbr", _check, empty=_empty)
def optimized(x, w, b, y, padding=1):
    """The dispatcher: per shape, Winograd (3 x 3 filters, 64 channels or more) or the implicit GEMM's tile and slices
    of the channels, as choose() rules."""
    return _choice_launches(x, w, b, y, padding)[1]


optimized.choose = choose
optimized.steps = ("implicit_gemm", "split_c", "winograd")
optimized.describe = lambda x, w, b, padding=1: str(choice_for(x.shape, w.shape, padding))
