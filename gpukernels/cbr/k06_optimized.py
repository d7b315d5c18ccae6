"""Step 6 of the CBR lesson, ``optimized``: the dispatcher -- per shape, Winograd or the implicit GEMM, and the
GEMM's pixels per block and slices of the channels, by a rule a student can call and read
(``cbr.optimized.choose(N, C, H, W, K)``)."""

from __future__ import annotations

from .._launch import Choice, ceil_div, sm_count, version
from ._common import _check, _empty
from .k03_implicit_gemm import IG_BM, IG_MIN_BLOCKS, igemm_bk_max, igemm_launches, igemm_tiling
from .k04_split_c import SPLIT_C_MAX
from .k05_winograd import output_tile, products_tile, winograd_launches


#: Pixels per block: 256, or 128 when 64 x 256 tiles would give fewer than one per CBR_SMALL_SMS SMs (batch 1).
CBR_SMALL_SMS = 8
#: Slice the channels only when the tiles leave more than half the SMs idle (fewer than SMs / CBR_SPLIT_IDLE tiles):
#: at (16, 128, 28^2, 128), 98 tiles of 64 x 256 for 132 SMs, unsliced ran 0.179 ms and 2 slices 0.224 ms (the bias
#: and ReLU passes, the atomics and twice the reads of w cost more than the idle quarter of the GPU).
CBR_SPLIT_IDLE = 2
#: Winograd (3 x 3 filters) when both channel counts are at least this deep, the implicit GEMM's 64 x 256 tiles would
#: not fill the SMs once (fewer tiles than SMs), and there are at least WINOGRAD_MIN_TILES output tiles of 2 x 2.
#: Measured (H100, 2026-12-05, benchmarks/NOTES.md), against cuDNN: where the GEMM's tiles are few, its rate is capped
#: (an idle part of the GPU, or split_c's slices and their passes) while Winograd's 16 products make 16 times the
#: blocks of 2.25 times fewer FLOPs -- 16 x 128 x 28^2 1.15x (the GEMM 0.77x), 16 x 512 x 7^2 1.37x (split_c 0.65x),
#: 1 x 64 x 56^2 1.20x (split_c 0.88x); where the tiles fill the SMs, the GEMM runs at its full rate and Winograd's
#: transforms (V and M, 16 floats per 2 x 2 tile per channel, written and read once more) cost what it saves:
#: 16 x 64 x 56^2 (196 tiles) 0.89x against the GEMM's 0.92x, 32 x 64 x 56^2 0.93x against 1.14x.
WINOGRAD_MIN_CHANNELS = 64
WINOGRAD_MAX_WAVES = 1
#: ... or, with both channel counts at least WINOGRAD_DEEP_CHANNELS, whatever the GEMM's tiles: with the products on
#: 128 x 128 tiles (H100, 2026-12-06) Winograd beat the full-wave GEMM at 128 x 128 x 28^2 x 128 (0.79 ms against
#: 0.86) and matched it at 32 x 256 x 14^2; at 64 channels the GEMM still won every batched shape (16 to 64 x 64 x
#: 56^2: Winograd 0.80-0.93 of its rate), since 64 channels make its GEMM too shallow for the products to repay the
#: transforms' bytes.
WINOGRAD_DEEP_CHANNELS = 128
#: ... and batch 1's smallest images stay with split_c, whose slices fill the SMs where Winograd's few tiles cannot:
#: 1 x 256 x 14^2 (49 tiles of 2 x 2) split_c 2.03x, Winograd 1.43x; 1 x 128 x 28^2 (196 tiles) 1.19x and 1.24x.
WINOGRAD_MIN_TILES = 128


def choose(n, c, h, wd, k, r=3, s=3, sms: int | None = None) -> Choice:
    """Winograd, or the implicit GEMM's pixels per block and slices of the channels, for x (N, C, H, W) convolved
    with w (K, C, R, S), padding 1.

    0. **Winograd** for 3 x 3 filters with at least WINOGRAD_MIN_TILES output tiles of 2 x 2 and C and K both at
       least WINOGRAD_DEEP_CHANNELS -- or at least WINOGRAD_MIN_CHANNELS with fewer implicit-GEMM tiles of 64 x 256
       than WINOGRAD_MAX_WAVES per SM: deep channels, where Winograd's fewer FLOPs outweigh its transforms'
       bytes, or moderately deep ones on small images, where the GEMM cannot fill the SMs with big tiles. Its output
       tile is the step's own choice (``output_tile``: 4 x 4, 4 times fewer FLOPs, on all but the smallest images).
       Otherwise the implicit GEMM:
    1. **Tile**: 64 channels x 256 pixels, or x 128 pixels when the 256-pixel tiles would number fewer than one
       per CBR_SMALL_SMS SMs -- there halving the tile doubles the tiles, and each block's k loop is no longer.
    2. **Slices**, only when the tiles would leave more than half the SMs idle: the fewest (a power of two) that
       make at least one block per SM, at most SPLIT_C_MAX and no more than the channels' k tiles. On the H200
       each such suite shape's fastest measured slicing was the first to fill the 132 SMs (benchmarks/NOTES.md,
       "CBR on the suite").

    Nothing here names a shape: the thresholds are counts of channels, and of tiles against SMs."""
    sms = sms or sm_count()
    ho, wo = h + 2 - r + 1, wd + 2 - s + 1
    tiles256 = ceil_div(n * ho * wo, 256) * ceil_div(k, IG_BM)
    wtiles = n * ceil_div(ho, 2) * ceil_div(wo, 2)
    deep = min(c, k) >= WINOGRAD_DEEP_CHANNELS
    few = min(c, k) >= WINOGRAD_MIN_CHANNELS and tiles256 < WINOGRAD_MAX_WAVES * sms
    if (r, s) == (3, 3) and wtiles >= WINOGRAD_MIN_TILES and (deep or few):
        why = (f"{c} -> {k} channels (>= {WINOGRAD_DEEP_CHANNELS})" if deep else
               f"{c} -> {k} channels (>= {WINOGRAD_MIN_CHANNELS}) and {tiles256} implicit-GEMM tiles of 64 x 256, "
               f"fewer than {WINOGRAD_MAX_WAVES * sms} for {sms} SMs")
        m = output_tile(ho, wo)
        p = n * ceil_div(ho, m) * ceil_div(wo, m)
        return Choice("winograd", {"m": m, "tile": products_tile(k, p, sms, (m + 2) ** 2)},
                      f"3 x 3 filters, {why}: Winograd's {(m + 2) ** 2} products over {p} tiles of {m} x {m} do "
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
    if padding != 1:
        h, wd = h + 2 * padding - 2, wd + 2 * padding - 2
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
    """The dispatcher: per shape, Winograd (3 x 3 filters, deep channels, small batched images) or the implicit GEMM's
    tile and slices of the channels, as choose() rules."""
    return _choice_launches(x, w, b, y, padding)[1]


optimized.choose = choose
optimized.steps = ("implicit_gemm", "split_c", "winograd")
optimized.describe = lambda x, w, b, padding=1: str(choice_for(x.shape, w.shape, padding))
