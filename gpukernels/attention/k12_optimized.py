"""Step 12 of the attention lesson, ``optimized``: the dispatcher -- per dtype and shape, ``pipelined``,
``split_keys_f16``, ``tf32x3``, ``split_keys``, ``fused_rows`` or ``tiled``, by rules a student can call and read
(``attention.optimized.choose(B, H, Sq, Sk, D, causal, half)``).

The Hopper steps -- 9, ``wgmma`` (Hopper's warpgroup MMA for both products), 10, ``warp_specialized`` (a producer
warpgroup feeding rings of K and V tiles by TMA) and 11, ``ping_pong`` (FlashAttention-3's schedule of the two consumer
warpgroups) -- are not among them yet: each is checked in the simulator and compiled for sm_90a, but no GPU run has
timed them. The rule they are expected to earn, once measured (``WGMMA_RULE``, a prediction): on compute capability
9.0, float16 with enough (query tile of 128, head) blocks to fill the SMs -- ``pipelined``'s 32-rows-per-warp
layout's condition, `gpukernels.attention.k05_pipelined.plan` -- goes to the fastest of them, predicted to be
``ping_pong`` (``HOPPER_STEPS``, fastest first, FlashAttention-3's order); decoding stays with ``split_keys_f16``. The
tensor-core lesson keeps its unmeasured steps out of its dispatcher the same way. ``choose`` says so in its reason for
every float16 shape that rule would take.

**float16 inputs** go to the tensor cores: ``pipelined`` (step 5) -- on an H200 the fastest step wherever it can
run, with its own plan (two m16 tiles of queries per warp where its blocks fill the SMs,
`gpukernels.attention.k05_pipelined.plan`) -- except for **decoding with few heads**: at most SPLIT_MAX_SQ = 16
queries per head (one m16 tile) where a block per (query tile, head) would give the SMs fewer than SLICE_BLOCKS = 4
blocks each and the keys make slices of at least 4 K/V tiles (`split_keys_f16.slices_for` > 1; e.g. 1 x 32 heads x
8192 keys: 32 blocks for 132 SMs). There ``split_keys_f16`` (step 8) cuts the keys into slices, a one-warp block
each, and merges their states. This rule is predicted, from float32's ``split_keys`` (on an H200, 2026-12-05: 1.87x
torch's SDPA at 8 x 32 x 1 x 32768 x 128, 2.6 TB/s of K and V, where a warp per row took 15 times as long) and from
``pipelined``'s 0.21x FlashAttention-2 at 1 x 32 x 1 x 8192 x 128 (0.255 against 0.054 ms on an H100, December 2026)
-- until a GPU run times ``split_keys_f16`` itself. D must be a multiple of 16, as for the tensor-core steps
themselves. **float32 inputs**, by these rules:

1. **Few queries** (Sq <= FUSED_MAX_SQ = 8, decoding one token at a time): a warp per query row. A tile of queries
   would be at least three quarters padding, and a warp per row wastes nothing; with so few queries attention is a
   pass over K and V (memory-bound), and ``tf32x3``'s split pass would add twice their bytes. ``split_keys`` when
   the rows alone would leave the SMs short of warps (`split_keys.splits_for` > 1: runs of at least 256 keys),
   ``fused_rows`` when they fill it.
2. **A GPU with tensor cores** (compute capability 8.0 or newer, which has TF32 ``mma.sync``): ``tf32x3``, float32
   accuracy from three TF32 products on the tensor cores, whose rate is several times the CUDA cores' FMAs. Past
   D = 96 its blocks are 8 warps, one per SM; where they walk **few keys** (at most FEW_KEYS = 256 on average, e.g.
   cross attention to a short context) a block's fixed work -- Q's tile copied in and split, about three K/V tiles'
   time -- is a large part of it, and blocks of 4 warps with Q split as read (102 KB at D = 128) run two per SM,
   one's fixed work beside the other's loop: 21% faster at 128 keys on an H100, 5-10% slower past 1,024.
3. Otherwise on the CUDA cores: **too few tiles** (fewer (query tile, head) blocks than SMs): ``fused_rows``, whose
   blocks of 4 rows are 8 times as many as tiled's; **everything else**: ``tiled``, which shares each K/V tile
   between 32 query rows.

Every step skips what the causal mask hides (fused_rows stops each row at its query, tiled and tf32x3 skip the K/V
tiles after a block's last query), so ``causal`` changes no choice; it is named in the reason.

The thresholds come from counting blocks against SMs and bytes against FLOPs (``SHAPES["suite"]`` holds a shape on
each side of each rule). Measured on an H200 (2026-12-05, the suite's 10 shapes, torch's float32 SDPA in the same
run): float32 ``optimized`` at 1.17x torch (geometric mean; 0.91x to 1.87x) -- ``tf32x3`` 45.6 TFLOP/s at
8 x 16 x 4096^2 x 128 (0.97x), ``split_keys`` 1.87x on 8 x 32 x 1 x 32768 x 128 (benchmarks/NOTES.md).
"""
from __future__ import annotations

from typing import Any


from .._errors import LaunchError
from .._launch import Choice, ceil_div, check_choose, compute_capability, count, sm_count, version
from ..tensor_core._common import itemsize
from ._common import MAX_D, check, check_half
from .k02_fused_rows import FUSED_ROWS_KERNELS, FUSED_WARPS, dims_per_lane, fused_rows_launches
from .k03_tiled import TILE_ROWS, TILED_KERNELS, padded_dims, tile_keys, tiled_launches
from .k05_pipelined import KEYS as HALF_KEYS  # pipelined's K/V tiles (tf32x3's KEYS is its own)
from .k05_pipelined import PIPELINED_KERNELS, WIDE_D, WIDE_WARPS, pipelined_launches
from .k05_pipelined import plan as pipelined_plan
from .k06_tf32x3 import KEYS, TF32X3_KERNELS, padded_width, tf32x3_config, tf32x3_kernel_for, tf32x3_launches
from .k07_split_keys import MIN_CHUNK, SPLIT_KEYS_KERNELS, split_keys_launches, splits_for
from .k08_split_keys_f16 import (MIN_TILES, SLICE_BLOCKS, SPLIT_KEYS_F16_KERNELS, SPLIT_WARPS,
                                 split_keys_f16_launches, split_plan)
from .k09_wgmma import ROWS as WGMMA_ROWS

#: The rule predicted for the Hopper steps, not applied until a GPU run times them (the module docstring): float16 on
#: compute capability 9.0 where blocks of 128 query rows are at least this many per SM ...
WGMMA_RULE = {"capability": (9, 0), "fill": 1.0}
#: ... to the fastest of them, predicted in this order (FlashAttention-3's: each adds one of its ideas to the last)
HOPPER_STEPS = ("ping_pong", "warp_specialized", "wgmma")
FUSED_MAX_SQ = 8  # at most this many queries per head: a warp per row (a 32-row tile would be mostly padding)
SPLIT_MAX_SQ = 16 * SPLIT_WARPS  # float16: at most this many queries per head, one m16 tile, for split_keys_f16
FILL = 1.0  # tiled needs at least this many blocks per SM; fewer: fused_rows
#: tf32x3 past D = 96 (blocks of 8 warps, one per SM) with blocks that walk at most this many keys on average: blocks
#: of 4 warps with Q split as read (102 KB at D = 128), two per SM, so that one's fixed work -- Q's tile copied and
#: split, ~16 us, about three K/V tiles' time -- runs beside the other's loop (benchmarks/NOTES.md)
FEW_KEYS = 256


def keys_walked(sq: int, sk: int, rows: int, causal: bool) -> float:
    """The keys a block of ``rows`` queries walks, on average over a head's blocks: all Sk, or under the causal mask
    (query i sees keys 0 to i) as far as its last query."""
    tiles = ceil_div(sq, rows)
    if not causal:
        return float(sk)
    return sum(min(sk, sq, (t + 1) * rows) for t in range(tiles)) / tiles


def choose(b: int, h: int, sq: int, sk: int, d: int, causal: bool = False, half: bool = False,
           sms: int | None = None, tensor_cores: bool | None = None) -> Choice:
    """The step for q (B, H, Sq, D) against k, v (B, H, Sk, D), float16 when ``half``; ``sms``: the GPU's SM count
    (default: this GPU's, or an H200's 132); ``tensor_cores``: whether it has TF32 mma.sync (default: this GPU's
    compute capability is 8.0 or newer; the simulator's is an H200's)."""
    check_choose({"b": b, "h": h, "sq": sq, "sk": sk, "d": d}, {"causal": causal, "half": half}, sms)
    if d > MAX_D or (half and d % 16):
        raise LaunchError(f"d must be {'a multiple of 16 ' if half else ''}from {16 if half else 1} to {MAX_D} "
                          f"{'(float16: the tensor cores) ' if half else ''}as the launchers take it; got {d}")
    sms = sms or sm_count()
    if tensor_cores is None:
        tensor_cores = compute_capability() >= (8, 0)
    if half and sq <= SPLIT_MAX_SQ:
        split = split_plan(b * h, sq, sk, causal, sms)
        if split["splits"] > 1:
            blocks, tiles = b * h * ceil_div(sq, SPLIT_MAX_SQ), split["chunk"] // HALF_KEYS
            return Choice("split_keys_f16", split,
                          f"float16, {sq} quer{'y' if sq == 1 else 'ies'} per head (<= {SPLIT_MAX_SQ}) x "
                          f"{count(b * h, 'head')}: {count(blocks, 'block')} would give the {sms} SMs fewer than "
                          f"{SLICE_BLOCKS} each; the keys in {split['splits']} slices of {split['chunk']} ({tiles} K/V "
                          f"tiles of {HALF_KEYS}, >= {MIN_TILES}), {count(blocks * split['splits'], 'block')} of one "
                          f"warp on the tensor cores, then a merge of each row's {split['splits']} partial softmax "
                          f"states (a rule predicted from float32's split_keys until a GPU run times this step)")
    if half:
        layout = pipelined_plan(b * h, sq, d, sms)
        rows = layout["rows_per_warp"] * layout["warps"]
        tiles = b * h * ceil_div(sq, rows)
        where = ", Q in shared memory" if layout.get("q_shared") else ""
        wgmma_blocks = b * h * ceil_div(sq, WGMMA_ROWS)
        later = (f"; steps 9-11 ({', '.join(reversed(HOPPER_STEPS))}) would take it on Hopper, {HOPPER_STEPS[0]} "
                 f"predicted fastest ({count(wgmma_blocks, 'block')} of {WGMMA_ROWS} queries >= "
                 f"{WGMMA_RULE['fill']:g} per SM: a predicted rule), once a GPU run has timed them"
                 if wgmma_blocks >= WGMMA_RULE["fill"] * sms else "")
        return Choice("pipelined", {"rows": rows, "rows_per_warp": layout["rows_per_warp"], "keys": 64, "width": d},
                      f"float16: tensor cores, {count(tiles, 'block')} of {rows} queries ({layout['rows_per_warp']} "
                      f"per warp{where}) walking K/V tiles of 64 keys copied by cp.async"
                      + (", causal: tiles past a block's queries skipped" if causal else "") + later)
    mask = ", causal: each row stops at its query" if causal else ""
    rows = {"rows_per_block": FUSED_WARPS, "dims_per_lane": dims_per_lane(d)}
    rows_blocks = ceil_div(b * h * sq, FUSED_WARPS)
    if sq <= FUSED_MAX_SQ:
        keys = min(sk, sq) if causal else sk  # the most keys a row sees (top-left mask: query i sees i + 1)
        splits = splits_for(b * h * sq, keys, sms)
        if splits > 1:
            pairs = b * h * sq * splits
            return Choice("split_keys", {"splits": splits, "chunk": ceil_div(keys, splits),
                                         "dims_per_lane": dims_per_lane(d)},
                          f"{sq} quer{'y' if sq == 1 else 'ies'} per head (<= {FUSED_MAX_SQ}) x {b * h} heads: "
                          f"{count(b * h * sq, 'warp')} would leave the SMs short of warps; {keys} keys in {splits} "
                          f"runs of {ceil_div(keys, splits)} (>= {MIN_CHUNK}), {count(pairs, 'warp')}, then a merge "
                          f"of each row's {splits} partial softmax states")
        return Choice("fused_rows", rows,
                      f"{sq} quer{'y' if sq == 1 else 'ies'} per head (<= {FUSED_MAX_SQ}): a tile of {TILE_ROWS} rows "
                      f"would be mostly padding; a warp per row, {count(rows_blocks, 'block')} of {FUSED_WARPS} "
                      f"rows{mask}")
    if tensor_cores:
        warps, keys = tf32x3_config(d)
        config = {"rows": 16 * warps, "keys": keys, "width": padded_width(d)}
        walked = keys_walked(sq, sk, 16 * warps, causal)
        few = ""
        if warps == WIDE_WARPS and walked <= FEW_KEYS:
            warps = 4
            config.update(rows=16 * warps, on_read="q")
            few = (f"; few keys ({walked:.0f} a block on average, <= {FEW_KEYS}): blocks of 4 warps, Q split as "
                   f"read, two per SM, one's Q tile copied in and split beside the other's loop")
        blocks = b * h * ceil_div(sq, 16 * warps)
        skip = ", causal: K/V tiles after a block's last query skipped" if causal else ""
        return Choice("tf32x3", config,
                      f"float32 on the tensor cores (3xTF32): {count(blocks, 'block')} of {16 * warps} queries "
                      f"walking K/V tiles of {keys} keys, each product three TF32 mma.sync{skip}{few}")
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
    """``(q, k, v)`` as (B, H, Sq, D), (B, H, Sk, D) and (B, H, Sk, D) arrays, all float32 (the float32 steps) or all
    float16 (the tensor cores: D a multiple of 16 up to 128); ``causal`` a bool and ``scale`` a finite number > 0 (None:
    1/sqrt(D)). The result is (B, H, Sq, D) float32."""
    halves = [is_half(x) for x in (q, k, v)]
    if halves[0] and not all(halves):  # a float16 q beside a float32 k: say so, naming this step (not mma's check)
        kinds = ", ".join(f"{n} {'float16' if h else _dtype(x)}" for n, x, h in zip("qkv", (q, k, v), halves))
        raise LaunchError(f"q, k and v must have one dtype: attention.optimized runs float16 q, k, v on the tensor "
                          f"cores and float32 ones on its float32 steps; got {kinds}. Convert them all with "
                          f".astype(np.float16) or all with .astype(np.float32)")
    return (check_half if halves[0] else check)(q, k, v, causal, scale)


def _dtype(x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    return str(dtype) if dtype is not None else type(x).__name__


#: tf32x3's blocks for few keys past D = 96 (FEW_KEYS)
FEW_KEYS_KERNELS = [tf32x3_kernel_for(d, 4, KEYS, "q") for d in range(WIDE_D + 16, MAX_D + 1, 16)]


@version("attention", check_any, kernels=FUSED_ROWS_KERNELS + TILED_KERNELS + PIPELINED_KERNELS + TF32X3_KERNELS
         + FEW_KEYS_KERNELS + SPLIT_KEYS_KERNELS + SPLIT_KEYS_F16_KERNELS)
def optimized(q, k, v, out, causal=False, scale=None):
    """The dispatcher: float16 on tensor cores (pipelined; decoding with few heads, its keys split into slices:
    split_keys_f16); float32 a warp per query row for few queries (their keys
    split across warps where the rows are too few to fill the GPU), else 3xTF32
    on the tensor cores (tf32x3) -- or, on a GPU without them, tiles of 32 queries sharing K/V tiles in shared memory
    (tiled), or a warp per row where those tiles would not fill the GPU."""
    b, h, sq, d = q.shape
    choice = choose(b, h, sq, k.shape[2], d, causal, is_half(q))
    if choice.step == "split_keys":
        return split_keys_launches(q, k, v, out, causal, scale, choice.config["splits"])
    if choice.step == "split_keys_f16":
        return split_keys_f16_launches(q, k, v, out, causal, scale, choice.config["splits"])
    if choice.step == "tf32x3":
        config = choice.config
        return tf32x3_launches(q, k, v, out, causal, scale, config["rows"] // 16, config["keys"],
                               config.get("on_read", ""))
    launches = {"pipelined": pipelined_launches, "tiled": tiled_launches}.get(choice.step, fused_rows_launches)
    return launches(q, k, v, out, causal, scale)


def describe(q, k, v, causal=False, scale=None) -> str:
    """What ``optimized`` runs for these inputs, in words."""
    b, h, sq, d = q.shape
    return str(choose(b, h, sq, k.shape[2], d, causal, is_half(q)))


optimized.choose = choose
optimized.steps = ("fused_rows", "tiled", "pipelined", "tf32x3", "split_keys", "split_keys_f16")  # what it runs
optimized.describe = describe
