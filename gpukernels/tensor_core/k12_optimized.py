"""Step 12 of the tensor-core ladder, ``optimized``: the step to run, chosen per shape by rules a student can read.

``tensor_core.optimized.choose(M, N, K)`` returns the step, its configuration and why:

1. **float32 inputs** (either matrix): ``tf32x3``, the only step that keeps float32's accuracy on tensor cores
   (finite inputs: an infinite one gives NaN where SGEMM gives inf -- ``k11_tf32x3.py`` says why).
2. **Hopper, and wgmma's 128 x 256 tiles fill at least ``WG_FILL`` = 1/2 of the SMs**: step 9, ``persistent`` --
   step 6's tiles fed by TMA (step 7), by a producer warpgroup (step 8), on one block per SM walking the tiles. On an
   H100 (2026-12-07, CUDA-graph replay, cuBLAS FP16 in the same run): 4096^3 0.218 ms against step 6's 0.297 and
   cuBLAS's 0.219 (1.01x cuBLAS; step 6: 0.74x), 8192^3 1.767 against 2.328 and 1.708 (0.97x; step 6: 0.73x); TMA
   alone (step 7) was 1.27-1.33x step 6 at all three aligned shapes timed. Rows of A and B that are not 16-byte
   aligned (K or N not a multiple of 8) are first copied once into arrays whose rows are padded with zeros
   (`gpukernels._pad`), which a tensor map can describe: on step 6's cp.async, 4095 x 4097 x 4093 went from 0.34x
   cuBLAS by loads and stores to 1.30x (cuBLAS is slow on such rows too). At 1536^3 (72 tiles, 0.55 of a wave) these
   tiles still beat every smaller block (step 6: 0.51x against 0.47x for 64 x 128).
3. **Hopper, too few wgmma tiles for the SMs but deep K, and more than ``WG_SPLIT_ROWS`` = 64 rows**: wgmma with
   split-K -- the 128 x 256 tiles (128 x 128 where N <= 128, which would leave half a 256-wide tile empty) times as
   many slices of K, each at least ``WG_SPLIT_MIN_K`` = 2048 deep, as keep to one wave of the SMs, if that busies at
   least half of them; each block adds its products into a zeroed C by atomics. 128 x 8192 x 8192: 32 tiles x 4
   slices (0.38x -> 0.63x cuBLAS); 8192 x 64 x 4096: 64 tiles of 128 x 128 x 2 (0.45x -> 0.53x). Shallower slices
   lose to their atomics: 1024^3 in 4 slices of 256 ran at 0.18x (0.36x unsplit). Unaligned rows are padded first.
4. **Few, deep tiles** -- fewer than ``SPLIT_BELOW`` = 2 tiles of 64 x 64 per SM, and K deep enough for slices of at
   least ``SPLIT_MIN_K`` = 1024: split-K, the k tiles shared out over ``SPLIT_BLOCKS`` = 4 blocks per SM, each adding
   its part into a zeroed C by atomics (16 x 8192 x 8192: 0.38x -> 0.87x cuBLAS).
5. **Hopper, the rest** (products too small for half a wave of 128 x 256 tiles): wgmma on blocks of *one*
   warpgroup, 64 rows, with a ring of ``SMALL_STAGES`` = 8 k tiles -- 64 x 128 tiles where they are at least
   ``WG_FILL`` of the SMs, else 64 x 64. Small products are latency-bound: a deeper ring and more, smaller blocks
   keep more copies in flight per SM. Measured (H200, x cuBLAS): 1024^3 0.36x on mma.sync 64 x 64 tiles -> 0.70x on
   64 x 128 (128 tiles), 768^3 0.35x -> 0.66x (72 tiles), 512^3 0.44x -> 0.81x on 64 x 64 (64 tiles).
6. **Too few large tiles** (no wgmma) -- 128 x 128 tiles of C for fewer than ``FILL`` = 3/4 of the SMs: step 4's
   64 x 64 tiles, four times as many blocks. At 1024^2, 64 tiles of 128 x 128 would leave 68 of 132 SMs idle while
   256 tiles of 64 x 64 use them all (measured: 0.093 against 0.101 ms).
7. **Everything else** (no wgmma): step 5's 128 x 128 tiles (rows not 16-byte aligned: the ring filled by loads and
   stores).

Measured on an H200 (2026-12-04, ``gpukernels bench tensor_core --suite``, 14 shapes, before rules 3 and 5): geometric
mean 0.655x cuBLAS, 0.36x to 1.30x (benchmarks/NOTES.md has every shape). Rules 3 and 5, measured on 2026-12-05,
lifted the shapes at the bottom of that range (above). The suite now holds 23 products (an LLM's decoding shapes, M =
1 to 128 tokens, among them), not yet timed with these rules; ``benchmarks/suite_sweep.py tensor_core`` times every
plan these rules could make on each of them (`plan` gives a choice's launches), which is what rules 3-5's thresholds
are to be fitted to.
"""

from __future__ import annotations

from .._launch import Choice, Launch, ceil_div, check_choose, compute_capability, count, sm_count, version
from ._common import check_fp32, itemsize, rows_aligned16, tiled_launch, zero_kernel, zero_launch
from .k04_pipelined import pipelined_kernel, pipelined_split_kernel, pipelined_sync_kernel
from .k05_block_tiles import block_tiles_kernel, block_tiles_sync_kernel
from ._tf32x3_mma import tf32x3_mma_kernel
from .k11_tf32x3 import split_cols_kernel, split_rows_kernel, tf32x3_kernel, tf32x3_launches
from .._pad import pad_kernel, pad_operands
from .k06_wgmma import make_wgmma_kernel, wgmma_kernel, wgmma_launch
from .k09_persistent import persistent_kernel, persistent_launch

FILL = 0.75  # 128 x 128 tiles once there are at least this many per SM (a fraction of one wave)
WG_FILL = 0.5  # Hopper: wgmma's 128 x 256 tiles (then 64 x 128) once there are at least this many per SM
SMALL_STAGES = 8  # ... and the one-warpgroup blocks' ring of k tiles
SPLIT_BELOW = 2  # split K when there are fewer 64 x 64 tiles than this many per SM ...
SPLIT_MIN_K = 1024  # ... into slices at least this deep (32 k tiles: the prologue and the atomics amortized) ...
SPLIT_BLOCKS = 4  # ... as many as make this many blocks per SM
WG_SPLIT_ROWS = 64  # wgmma's split-K only for C with more rows than this (fewer: rule 4's 64-row tiles waste less)
WG_SPLIT_MIN_K = 2048  # ... in slices at least this deep (32 k tiles of 64). Measured (H200): 1024^3 in 4 slices of
# 256 took 35.6 us against 17.9 on 64 x 64 mma.sync tiles -- 4M atomic adds into C for 2 GFLOP; 128 x 8192 x 8192 in
# 4 slices of 2048: 62.0 us against 104.8 (benchmarks/NOTES.md)

#: wgmma's split-K kernels by tile width: 256, and 128 for C at most 128 columns wide
WGMMA_SPLIT_KERNELS = {bn: make_wgmma_kernel(bn, split=True) for bn in (256, 128)}
#: wgmma's kernels by tile of C: two warpgroups (step 6's), and one (rule 5, for products too small for those)
WGMMA_KERNELS = {"128x256": wgmma_kernel,
                 **{f"64x{bn}": make_wgmma_kernel(bn, SMALL_STAGES, bm=64) for bn in (128, 64)}}


def wgmma_split(m: int, n: int, k: int, sms: int) -> tuple[int, int, int]:
    """Rule 3's plan: (tile width, tiles, slices of K) -- as many slices as keep the blocks to one wave of ``sms``,
    each at least WG_SPLIT_MIN_K deep."""
    bn = 128 if n <= 128 else 256
    tiles = ceil_div(m, 128) * ceil_div(n, bn)
    return bn, tiles, max(1, min(sms // tiles, k // WG_SPLIT_MIN_K))


def choose(m: int, n: int, k: int, aligned: bool = True, fp32: bool = False, sms: int | None = None,
           hopper: bool | None = None) -> Choice:
    """The step for an (M, K) x (K, N) product: ``aligned``: rows of A and B 16-byte aligned (cp.async can copy
    them); ``fp32``: float32 inputs; ``sms``: the GPU's SM count (default: this GPU's, or an H200's 132);
    ``hopper``: the GPU has wgmma (default: this GPU's compute capability is 9.0; the simulator plays an H200)."""
    check_choose({"m": m, "n": n, "k": k}, {"aligned": aligned, "fp32": fp32}, sms)
    sms = sms or sm_count()
    hopper = compute_capability() == (9, 0) if hopper is None else hopper
    copies = "cp.async" if aligned else "loads and stores (rows not 16-byte aligned)"
    if fp32:
        return Choice("tf32x3", {"tile": "128x128"},
                      "float32 inputs: each split into two TF32 parts, three tensor-core products per multiply keep "
                      "float32's accuracy")
    wide = ceil_div(m, 128) * ceil_div(n, 256)
    how = ("copied by cp.async" if aligned else
           "A and B (those whose rows need it) first copied into arrays with rows padded to 16 bytes (K, N "
           "rounded up to 8), so that cp.async can copy them")
    if hopper and wide >= WG_FILL * sms:
        tma = ("copied by TMA" if aligned else "A and B (those whose rows need it) first copied into arrays with rows "
               "padded to 16 bytes (K, N rounded up to 8), so that a tensor map can describe them, then copied by TMA")
        return Choice("persistent", {"tile": "128x256", "padded": not aligned},
                      f"Hopper: {count(wide, 'tile')} of 128 x 256 = {wide / sms:.2f} waves of {sms} SMs, wgmma from "
                      f"swizzled shared tiles {tma} by a producer warpgroup, {min(wide, sms)} persistent blocks "
                      "walking the tiles (measured: 1.27-1.36x step 6's cp.async at 1024^3 to 8192^3)")
    if hopper and m > WG_SPLIT_ROWS:
        bn, tiles, slices = wgmma_split(m, n, k, sms)
        if slices >= 2 and tiles * slices * 2 >= sms:  # and at least half the SMs busy
            how = "" if aligned else "; A and B (those whose rows need it) first copied into arrays with padded rows"
            return Choice("wgmma", {"tile": f"128x{bn}", "split_k": slices, "padded": not aligned},
                          f"Hopper: {count(tiles, 'tile')} of 128 x {bn} for {sms} SMs, each {k} deep: K split in "
                          f"{slices} slices, {tiles * slices} blocks adding into C by atomics{how}")
    large, small = ceil_div(m, 128) * ceil_div(n, 128), ceil_div(m, 64) * ceil_div(n, 64)
    slices = min(ceil_div(SPLIT_BLOCKS * sms, small), k // SPLIT_MIN_K)
    if aligned and small < SPLIT_BELOW * sms and slices >= 2:
        return Choice("pipelined", {"tile": "64x64", "split_k": slices},
                      f"{count(small, 'tile')} of 64 x 64 for {sms} SMs, each {k} deep: K split in {slices} slices, "
                      f"{small * slices} blocks adding into C by atomics, so that every SM has several blocks' copies "
                      "in flight")
    if hopper:
        mid = ceil_div(m, 64) * ceil_div(n, 128)
        bn, tiles = (128, mid) if mid >= WG_FILL * sms else (64, small)
        return Choice("wgmma", {"tile": f"64x{bn}", "stages": SMALL_STAGES, "padded": not aligned},
                      f"Hopper, {count(wide, 'tile')} of 128 x 256 for {sms} SMs: blocks of one warpgroup, "
                      f"{count(tiles, 'tile')} of 64 x {bn} = {tiles / sms:.2f} waves, a ring of {SMALL_STAGES} k "
                      f"tiles {how}")
    if large < FILL * sms:
        return Choice("pipelined", {"tile": "64x64", "async_copy": aligned},
                      f"{count(large, 'tile')} of 128 x 128 would leave {max(sms - large, 0)} of {sms} SMs idle; "
                      f"{count(small, 'tile')} of 64 x 64 = {small / sms:.2f} waves, copied by {copies}")
    return Choice("block_tiles", {"tile": "128x128", "async_copy": aligned},
                  f"{count(large, 'tile')} of 128 x 128 = {large / sms:.2f} waves of {sms} SMs, copied by {copies}")


def _is_fp32(*arrays) -> bool:
    return any(itemsize(x) == 4 for x in arrays)  # float32 (the check admits only float16 and float32)


@version("tensor_core", check_fp32,
         kernels=[persistent_kernel, *WGMMA_KERNELS.values(), block_tiles_kernel, pipelined_kernel, tf32x3_kernel, split_rows_kernel,
                  split_cols_kernel, tf32x3_mma_kernel, pad_kernel, pipelined_split_kernel, zero_kernel,
                  *WGMMA_SPLIT_KERNELS.values()])
def optimized(a, b, c):
    """The dispatcher: per shape, persistent TMA-fed wgmma on 128 x 256 tiles (Hopper; split-K wgmma for few deep
    tiles; one-warpgroup blocks of 64 x 128 or 64 x 64 for small products), 128 x 128 (block_tiles) or 64 x 64
    (pipelined); 3xTF32 for float32 inputs."""
    m, n = c.shape
    return plan(choose(m, n, a.shape[1], rows_aligned16(a, b), _is_fp32(a, b)), a, b, c)


def plan(choice: Choice, a, b, c) -> list:
    """The launches of ``choice`` (one of `choose`'s) for C = A @ B: the dispatcher's second half, apart so that a
    benchmark can time every rule's plan on one shape (benchmarks/suite_sweep.py tensor_core)."""
    m, n = c.shape
    aligned = rows_aligned16(a, b)
    if choice.step == "tf32x3":
        return tf32x3_launches(a, b, c)
    if choice.step == "persistent":
        a, b, pads = pad_operands(a, b, c, 8) if choice.config["padded"] else (a, b, [])
        return pads + persistent_launch(persistent_kernel, a, b, c)
    if choice.step == "wgmma":
        pads = []
        if choice.config["padded"]:
            a, b, pads = pad_operands(a, b, c, 8)
        splits = choice.config.get("split_k", 1)
        tile = choice.config["tile"]
        kernel = WGMMA_SPLIT_KERNELS[int(tile.split("x")[1])] if splits > 1 else WGMMA_KERNELS[tile]
        return pads + wgmma_launch(kernel, a, b, c, splits)
    if choice.config.get("split_k"):
        bm, bn = pipelined_split_kernel.tile
        grid = (ceil_div(n, bn), ceil_div(m, bm), choice.config["split_k"])
        return [zero_launch(c), Launch(pipelined_split_kernel, grid, (pipelined_split_kernel.threads,), (a, b, c))]
    if choice.step == "pipelined":
        kernel = pipelined_kernel if aligned else pipelined_sync_kernel
    else:
        kernel = block_tiles_kernel if aligned else block_tiles_sync_kernel
    return tiled_launch(kernel, a, b, c, kernel.threads)


optimized.choose = choose
optimized.steps = ("pipelined", "block_tiles", "wgmma", "persistent", "tf32x3")
optimized.describe = lambda a, b: str(choose(a.shape[0], b.shape[1], a.shape[1], rows_aligned16(a, b),
                                             _is_fp32(a, b)))
