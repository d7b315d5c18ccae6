"""Step 21 of the matmul ladder, ``optimized``: no single kernel is fastest on every shape, so choose one per shape.

cuBLAS does the same (a heuristic over many kernels); Triton autotunes per shape key. Here the choice is a short
rule a student can read and call -- ``matmul.optimized.choose(M, N, K)`` returns the step, its configuration and
why:

1. **Few rows of C** (M <= ``SKINNY_MAX_M``), **or few columns** (N <= ``SKINNY_MAX_N``): a matrix-vector
   product is bound by reading B (or A) once, not by arithmetic; ``skinny`` streams it at copy bandwidth.
2. **Few rows or few columns** (M <= 64 with N >= 256, or N <= 32 with M >= 128): ``narrow``'s tile along the
   short side (64 x 256 or 128 x 32), with the slices of K that put NARROW_WARPS_PER_SM warps on every SM.
3. **Small K** (K <= SMALL_K): 64 x 64 tiles, several per SM, so that one block's stores overlap another's loads.
4. **Everything else is a tiled product**, and the question is which tile and how many slices of K. For each
   candidate (tile, slices) the rule estimates the time of the busiest SM. It holds ``L = ceil(blocks / SMs)``
   blocks and runs up to ``per_sm`` of them at once, so it works ``ceil(L / per_sm)`` rounds. In a round, each
   k tile costs what one block's k tile costs alone (its FLOPs at the tile's measured rate, or ``alone_us``
   for the 64 x 64 tiles, which wait on loads and barriers rather than on arithmetic) -- and blocks beyond the
   first four warps (one per scheduler of the SM: those run side by side) add their FLOPs at ``SM_FULL_GFLOPS``;
   a block also pays ``block_us`` for its first loads and its stores. A split's slices meet in one of two ways,
   each a candidate: atomic adds into a C zeroed first (M * N * slices adds, of which the last round's wait at
   the end), or a workspace -- each slice stores its partial tile there and the last of a tile's slices to
   finish sums them in slice order into C (cheaper per partial than an atomic add, but that last block sums
   ``slices`` whole tiles alone: it loses where there are many slices of few tiles; and only while the partials
   fit in a third of L2, ``WORKSPACE_MAX_BYTES``). The smallest estimate wins;
   that one model covers the four regimes below:

   * compute-bound squares (4096^3): the 256 x 128 tile fills the GPU many times over; it wins on its rate, and
     with rows 16-byte aligned and more tiles than SMs ``stream_k``'s schedule runs it, its tiles copied by
     ``async_copy``'s cp.async ring: the estimate divides all the tiles' work evenly over the SMs (fractional
     waves) instead of rounding up to whole ones.
   * wave quantisation (1536^3: 72 tiles of 256 x 128 -- half of 132 SMs idle; 144 of 128 x 128 -- two waves,
     the second 9% full): smaller tiles balance the waves, or, where the 128 x 128 tiles fill between half a wave
     and two (``SPREAD_WAVES``; any number past half a wave where rows are not aligned, which have no stream-K
     ring) and leave the last round at most ``SPREAD_FILL`` full, stream-K's schedule spreads their k tiles evenly
     over one block per SM (``SPREAD_TILE``: a tile may be cut between up to three blocks; 1536^3 197.5 us against
     216.6 for 4 slices of 64 x 64, H100). Its estimate is the tile's own, in the share of its rounds the SMs would
     fill, plus ``SPREAD_US`` for the cut tiles.
   * small products (512^3: 64 tiles of 64 x 64, half an SM's worth of work in all): too little work to fill
     the SMs with warps, so the 64 x 64 tile of 128 threads (4 x 8 outputs each: twice the warps of the 64-thread
     one for the same tile), in a few slices of K -- a lone block of it takes 0.75 us per k tile where the
     64-thread one takes 1.2. Split through a workspace, on aligned rows, its k tiles come by ``async_copy``'s
     cp.async ring: each slice is a short k loop, and the ring keeps two tiles in flight from its start.
   * too few tiles to fill the SMs (M = N = 256, K = 65536: 16 tiles of 64 x 64): slices of K (split-K), met by
     atomics when they are many (the workspace's last block would sum 64 tiles), through the workspace when few
     (512^3: 4 slices of 64 tiles, 16.1 us against 18.2 with atomics, H100).

Rows that are not 16-byte aligned run each tile's scalar kernel (4-byte loads), no ring, and stream-K only spread
(at any number of waves). What 4-byte loads cost differs by tile, and by whole tile or slice (``Tile.scalar_cost``,
a k tile's time over the 16-byte kernel's): fitted to pairs of shapes of the same work, one aligned and one not
(1000^3 against 999 x 1001 x 1003, ...): 1.07 for the 128 x 128 tile whole and 1.12 split, 1.20 and 1.06 for the
64-thread 64 x 64, 1.12 and 1.07 for the 128-thread one, 1.06 spread; the 256 x 128 tile's 1.16 keeps its measured
place behind 128 x 128's (at 4095 x 4097 x 4093 it lost by 4-6% in three runs). Copying such rows into padded ones
was tried and measured slower (benchmarks/NOTES.md).

The rates (``TILES``) come from the committed H200 run (benchmarks/results/h200.json, 2026-12-01), the small tiles'
and the split's costs from sweeps of every (tile, slices) candidate on 14 shapes (benchmarks/NOTES.md), and the
register counts behind ``per_sm`` from ``gpukernels resources matmul``; nothing here names a shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._intrinsics import aligned16
from .._launch import Choice, ceil_div, check_choose, version
from .._launch import count as _count
from . import _common
from ._common import check, fixup_launch, tiled_launch
from ._interior import fixup_twin, make_interior_kernel
from .k13_wave_fit import small_tile_kernel
from .k14_vector_loads import small_vec_kernel, vec_kernel
from .k12_swizzled import swizzled_kernel
from .k15_thread_16x8 import wide_kernel, wide_vec_kernel
from .k16_skinny import (SKINNY_MAX_M, SKINNY_MAX_N, cols_splits, get_skinny_cols_kernel, get_skinny_kernel,
                         get_skinny_shared_kernel, skinny_launches, skinny_rows, skinny_splits)
from .k17_split_k import SPLIT_MAX, SPLIT_MIN_K, split_k_kernels
from .k18_narrow import cols_small_vec_kernel, narrow_kernel, narrow_splits, rows_vec_kernel
from .k19_stream_k import stream_k_blocks, stream_k_launches
from .k20_async_copy import ASYNC_STAGES, async_copy_kernel, async_vec_kernel, has_async_copy

SMALL_K = 128  # K at most this deep takes the 64 x 64 tile (measured at K = 64 and 128)
NARROW_SIDE = 64  # C with at most this many rows (half as many columns) and a long other side takes a narrow tile
NARROW_LONG = 256


@dataclass(frozen=True)
class Tile:
    """A tile the dispatcher may use: its kernels (16-byte loads, scalar loads; split-K ones when it has them),
    its throughput per SM relative to the 256 x 128 tile, the resident blocks per SM it needs to reach it, and what
    a lone block's 16-deep k tile costs when that is latency, not arithmetic (``alone_us``)."""

    name: str
    steps: tuple  # the steps whose kernels these are: (aligned, scalar)
    kernels: tuple  # (aligned, scalar)
    split_kernels: tuple | None  # (aligned, scalar) with split_k=True, or None
    rate: float
    per_sm: int
    scalar_cost: tuple = (1.0, 1.0)  # a k tile's time with 4-byte loads (rows not 16-byte aligned) over 16-byte's:
    # (whole, split)
    alone_us: float | None = None  # a lone block's 16-deep k tile, if not its FLOPs at ``rate`` (or LAT_US)
    block_us: float = 2.0  # a block's prologue (first tile) and epilogue (stores)
    ring_workspace: object = None  # the aligned split through a workspace by a cp.async ring, if it has one

    def workspace_kernel(self, aligned: bool):
        """The kernel whose slices of K meet in a workspace: the split kernel's twin (`fixup_twin`), or for
        aligned rows the tile's cp.async ring where it has one and the GPU has cp.async."""
        if aligned and self.ring_workspace is not None and has_async_copy():
            return self.ring_workspace
        return fixup_twin(self.split_kernels[0 if aligned else 1])

    @property
    def warps(self) -> int:
        return self.kernels[0].threads // 32

    @property
    def label(self) -> str:
        """How ``choose`` says it: "64 x 64 (128 threads)"."""
        bm, bn = self.kernels[0].tile
        return f"{bm} x {bn} ({self.kernels[0].threads} threads)"


# SM_GFLOPS from the first suite run of 2026-12-01 (h200-suite-partial-run1.json, in git history); the rest refitted
# to the third sweep (benchmarks/results/h200-suite-sweep3.json, 8 shapes x up to 60 tile/slice candidates: with these
# values the estimate's pick is the sweep's fastest candidate, or within 6% of it, on every shape; benchmarks/NOTES.md):
SM_GFLOPS = 324.0  # one SM running thread_16x8 at 4096^3: 42.8 TFLOP/s / 132 SMs (H200, 2026-12-01)
LAT_US = 0.6  # an 8-deep k tile's step when latency-bound (twice that for a 16-deep one): the floor of a large tile
# Fitted to two sweeps of every tile and slice count on 14 shapes from 256^3 to 2048^3 (H100, 2026-12-06; with these
# values the pick is the fastest candidate, or within 9% of it, on every shape: benchmarks/NOTES.md):
SM_FULL_GFLOPS = 350.0  # an SM's rate for the blocks beyond its first four warps (a 64 x 64 x 16 k tile: 0.37 us)
SPLIT_OVERHEAD_US = 3.6  # the zero pass's launch and the split kernel's own
ATOMIC_US = 0.5  # per million atomic adds into C, overlapped with other blocks' arithmetic
ATOMIC_LAST_US = 5.0  # per million atomic adds of the last round of blocks, which nothing overlaps
# The split through a workspace, fitted to a sweep of both on 9 shapes (H100, 2026-12-06; the pick is then the
# fastest candidate or within 5% of it on each, against 13% with atomics alone: benchmarks/NOTES.md). Its fixed
# cost measured the same as the zero pass's: the fences and counts cost what the zero pass saved.
WORKSPACE_US = 0.5  # per million partial values stored and summed, overlapped with other blocks' arithmetic
WORKSPACE_LAST_US = 3.0  # per million of them in the last round of blocks
WORKSPACE_SUM_US = 35.0  # per million values the last block of a tile sums alone (slices x the tile's size)
# ... and only while the partials (M x N x slices floats) fit in a third of L2 (50 MB on an H100 or H200): past
# that they are written to and read back from HBM while atomics add into a C that stays in L2 (1536^3 in 4 slices
# of 64 x 64: 38 MB of partials, 232.8 us against 215.5 by atomics; the wins measured had at most 8.4 MB). The
# cp.async ring's split (`Tile.ring_workspace`) measured faster past it -- 1536^3 in 4 slices of the 128-thread tile,
# 203.4 us -- which this estimate, fitted to the register path, does not yet know (benchmarks/NOTES.md)
WORKSPACE_MAX_BYTES = 16 * 2**20
# The slice counts tried: three slices of 768^3 beat two and four by 6% (144 tiles x 3 fill 132 SMs x 4 blocks more
# evenly); none past 64, whose adds into one element of C queue at one L2 slice the estimate does not see (128 x 128
# x 32768, H100: 128 slices of 128 x 128 50.9 us, 64 of the 128-thread 64 x 64 tile 42.0)
SPLITS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
SPLIT_WAVES = 2  # slice K only while the tiles fill fewer than this many waves of resident blocks
# stream_k's kernel per tile against thread_16x8's, measured where nothing is shared (4096 x 4224 x 4096, exactly 4
# waves: 3.06 vs 3.22 ms, H200, benchmarks/NOTES.md) -- a difference of code generation, not of the idea
STREAM_K_RATE = 1.05
STREAM_K_US = 3 * 2.0 + 2.0  # a sharing block's up to three prologues and epilogues, and the partials

# The 64 x 64 tile, 16 deep, whole K (its split twin is split_k's): the sweep's best 64 x 64 tile (see k17_split_k)
small_deep_vec_kernel = make_interior_kernel(64, 64, bk=16, vec=True)
small_deep_kernel = make_interior_kernel(64, 64, bk=16)
# The same tile with 128 threads of 4 x 8 outputs (rows=4), capped at 128 registers so that 4 blocks fit an SM: a
# small product has too few tiles to give each SM's 4 schedulers a warp from 64-thread blocks (512^3 in 2 slices:
# 17.9 us against 24.4 for the 64-thread tile, H100). Where the SMs are full, the 64-thread tile's 8 x 8 outputs
# read fewer shared values per FMA and win (1536^3: 214 us against 255).
SMALL_WARPS = dict(bk=16, rows=4, launch_bounds=(128, 4))
quad_vec_kernel = make_interior_kernel(64, 64, vec=True, **SMALL_WARPS)
quad_kernel = make_interior_kernel(64, 64, **SMALL_WARPS)
quad_split_vec_kernel = make_interior_kernel(64, 64, vec=True, split_k=True, **SMALL_WARPS)
quad_split_kernel = make_interior_kernel(64, 64, split_k=True, **SMALL_WARPS)
# Its split through a workspace with each k tile copied global -> shared by async_copy's cp.async ring (3 stages)
# instead of through registers: a few slices of a small product are short k loops whose first loads nothing hides,
# and the ring keeps two tiles in flight. Measured against the register path at the slices the estimate picks
# (H100): 700 x 900 x 500 in 3 slices 29.6 us against 33.3, 512^3 in 4 15.1 against 15.9, 900 x 700 x 1100 in 3
# 56.8 against 55.3 (benchmarks/NOTES.md). 126 registers, 25 KB of shared memory: still 4 blocks per SM.
quad_ring_fixup_kernel = make_interior_kernel(64, 64, vec=True, fixup=True, stages=ASYNC_STAGES, **SMALL_WARPS)

#: Largest tile first. 128 x 128: vector_loads at 4096^3 ran at 0.97 of thread_16x8. 64 x 64 (16 deep): 64 threads
#: of ~180 registers and 17 KB of shared memory, 6 resident per SM reach 0.9 of the big tile's rate per SM (fit).
#: 64 x 64 of 128 threads: 4 per SM (128 registers each), for products too small to fill the SMs' schedulers.
TILES = (
    # 256 x 128 with 4-byte loads: 0.92 -- at 4095 x 4097 x 4093 its scalar kernel took 3.77 / 3.72 / 3.78 ms where
    # 128 x 128's took 3.57 / 3.57 / 3.57 (H200: the 2026-12-03 suite, two runs of 2026-12-05, benchmarks/NOTES.md)
    Tile("256x128", ("thread_16x8", "thread_16x8"), (wide_vec_kernel, wide_kernel), None, 1.0, 1, (1.16, 1.16)),
    Tile("128x128", ("vector_loads", "swizzled"), (vec_kernel, swizzled_kernel),
         split_k_kernels(True)[:1] + split_k_kernels(False)[:1], 0.97, 1, (1.07, 1.12), block_us=3.0),
    Tile("64x64", ("optimized", "optimized"), (small_deep_vec_kernel, small_deep_kernel),
         split_k_kernels(True)[1:] + split_k_kernels(False)[1:], 0.9, 6, (1.20, 1.06), alone_us=2 * LAT_US,
         block_us=1.0),
    Tile("64x64/128", ("optimized", "optimized"), (quad_vec_kernel, quad_kernel),
         (quad_split_vec_kernel, quad_split_kernel), 0.9, 4, (1.12, 1.07), alone_us=0.75, block_us=0.5,
         ring_workspace=quad_ring_fixup_kernel),
)
#: stream_k's tile and schedule, its tiles copied by async_copy's ring (rows 16-byte aligned only: its 16-byte
#: copies need them). Its rate is stream_k's: the ring measured 1-3% faster on the large squares and about even
#: elsewhere (benchmarks/NOTES.md), too little and too mixed to fit a rate of its own.
STREAM_K_TILE = Tile("256x128", ("async_copy", "async_copy"), (async_vec_kernel, async_vec_kernel), None,
                     STREAM_K_RATE, 1)
#: The 128 x 128 tile under stream-K's schedule, spread over every SM when its tiles do not fill them (less than a
#: tile's work per block, a tile cut between two or three blocks, `stream_k_blocks(spread=True)`), or sharing the last
#: waves' tiles as ``stream_k`` does. Split-K evens out a part-empty wave only in whole slices: 120 tiles for 132 SMs
#: take 11 slices to balance, and each slice costs a prologue, an epilogue and a partial tile; here a tile costs at
#: most three partials however the work falls. For rows that are not 16-byte aligned too (4-byte loads).
spread_vec_kernel = make_interior_kernel(128, 128, bk=16, group=8, vec=True, stream_k=True, spread=True)
spread_kernel = make_interior_kernel(128, 128, bk=16, group=8, stream_k=True, spread=True)
SPREAD_TILE = Tile("128x128", ("stream_k", "stream_k"), (spread_vec_kernel, spread_kernel), None, 0.97, 1,
                   (1.06, 1.06), block_us=3.0)
# A candidate while its tiles fill at least half a wave of the SMs (so a tile is cut between at most three blocks:
# the fit below had up to 10, and it never won under 99 tiles) and fewer than two (split-K's reach) ...
SPREAD_WAVES = (0.5, 2)
# ... or any number past half a wave where rows are not 16-byte aligned: they have no stream-K (its ring needs
# them), so a part-empty last round of whole tiles is left for this schedule to even out -- the first rounds whole
# tiles, the last shared out. Measured (H100) on 6 shapes of 2.06-7.03 waves: the fastest candidate on each, 1-8%
# ahead of the next and 9-20% ahead of the pick without it where that was measured (2047 x 2049 x 2047: 499 us
# against 544; 3382 x 2549 x 3969: 2.00 ms against 2.25)
SPREAD_WAVES_SCALAR = (0.5, math.inf)
# ... while the whole tiles' rounds are at most this full: past a wave spread takes 1.055 x the whole tiles' time in
# the share of their rounds that is full, plus ~25 us (fitted to 7 shapes of 1.2-7 waves), so rounds 90% full or more
# leave it nothing to gain -- which the estimate, whose constant is set by picks under two waves, does not see
SPREAD_FILL = 0.9
# What spreading costs beyond the whole tile's estimate in the share of the SMs, in the estimate's own scale. Measured
# (H100, 2026-12-06), spread takes 1.03 x the whole tile's time in that share + ~18 us; but on these shapes the other
# candidates' estimates run 10-26% under their measured times, so the constant is set by the picks instead: of 18
# shapes of 81 to 225 tiles swept both ways, 12.5 us picks the faster on 14; the 4 others are within 6.5%
# (benchmarks/NOTES.md).
SPREAD_US = 12.5
#: Small K's tile: 64 x 64, 8 deep (K = 64 is only 4 tiles of 16), measured at K = 64 and 128 (rule 3).
SMALL_K_TILE = Tile("64x64x8", ("vector_loads", "wave_fit"), (small_vec_kernel, small_tile_kernel), None, 0.61, 4)


def estimate_us(m: int, n: int, k: int, tile: Tile, splits: int, sms: int, aligned: bool = True,
                workspace: bool = False) -> float:
    """The busiest SM's time for this tile and number of K slices (see the module docstring); ``aligned``: the
    16-byte-load kernel runs, else the scalar one, each k tile ``scalar_cost`` times as long; ``workspace``: the
    slices meet in a workspace, not by atomics."""
    kernel = tile.kernels[0]
    bm, bn = kernel.tile
    blocks = ceil_div(m, bm) * ceil_div(n, bn) * splits
    on_sm = ceil_div(blocks, sms)  # L, the busiest SM's blocks
    rounds, resident = ceil_div(on_sm, tile.per_sm), min(on_sm, tile.per_sm)
    k_tiles = ceil_div(ceil_div(k, splits), kernel.bk)
    flops = 2 * bm * bn * kernel.bk  # one block's k tile
    if tile.alone_us is None:
        alone = max(flops / (tile.rate * SM_GFLOPS * 1e3), LAT_US * kernel.bk / 8)
    else:
        alone = tile.alone_us * kernel.bk / 16
    beyond = max(0, resident - max(1, 4 // tile.warps))  # resident blocks past the SM's first four warps
    tile_us = (alone + beyond * flops / (SM_FULL_GFLOPS * 1e3)) * (1 if aligned else tile.scalar_cost[splits > 1])
    t = rounds * (k_tiles * tile_us + tile.block_us)
    if splits > 1 and workspace:
        t += (SPLIT_OVERHEAD_US + m * n * splits * (WORKSPACE_US + WORKSPACE_LAST_US / rounds) / 1e6
              + splits * bm * bn * WORKSPACE_SUM_US / 1e6)
    elif splits > 1:
        t += SPLIT_OVERHEAD_US + m * n * splits * (ATOMIC_US + ATOMIC_LAST_US / rounds) / 1e6
    return t


def stream_k_estimate_us(m: int, n: int, k: int, sms: int) -> float:
    """stream_k's busiest SM: the tiles' work divided evenly over the SMs (no partial last wave), at its rate."""
    tile = STREAM_K_TILE
    bm, bn = tile.kernels[0].tile
    dp, _ = stream_k_blocks(m, n, sms)
    waves = ceil_div(m, bm) * ceil_div(n, bn) / sms
    tile_us = max(2 * bm * bn * tile.kernels[0].bk / (tile.rate * SM_GFLOPS * 1e3), LAT_US)
    return waves * ceil_div(k, tile.kernels[0].bk) * tile_us + dp // sms * tile.block_us + STREAM_K_US


def spread_estimate_us(m: int, n: int, k: int, sms: int, aligned: bool = True) -> float:
    """``SPREAD_TILE``: the 128 x 128 tile's own estimate run whole, in the share of its rounds that the SMs would
    fill evenly, plus what cutting tiles costs (each block's second prologue and epilogue, its partials, the last
    block's sum of a tile's partials): ``SPREAD_US``."""
    tile = SPREAD_TILE
    bm, bn = tile.kernels[0].tile
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    slots = sms * tile.per_sm
    return estimate_us(m, n, k, tile, 1, sms, aligned) * tiles / (slots * ceil_div(tiles, slots)) + SPREAD_US


def split_options(k: int, tiles: int = 0, capacity: int = 1) -> list[int]:
    """The slice counts tried (``SPLITS``) while every slice stays >= SPLIT_MIN_K deep and there are at most
    SPLIT_MAX -- and only 1 when the ``tiles`` alone fill SPLIT_WAVES waves of ``capacity`` resident blocks: split-K
    is for grids too small for the GPU, and on a full one its atomics only add traffic (the estimate cannot see L2
    contention)."""
    if tiles >= SPLIT_WAVES * capacity:
        return [1]
    return [s for s in SPLITS if s <= SPLIT_MAX and (s == 1 or k // s >= SPLIT_MIN_K)]


def choose(m: int, n: int, k: int, aligned: bool = True, sms: int | None = None) -> Choice:
    """The step and configuration for an (M, K) x (K, N) product; ``aligned``: rows 16-byte aligned (K and N
    multiples of 4 and the data 16-byte aligned), so the kernels may use 16-byte loads."""
    check_choose({"m": m, "n": n, "k": k}, {"aligned": aligned}, sms)
    sms = sms or _common.sm_count()
    if m <= SKINNY_MAX_M:
        splits = skinny_splits(m, n, k, sms)
        return Choice("skinny", {"rows": skinny_rows(m), "splits": splits, "vec": aligned},
                      f"M = {m} <= {SKINNY_MAX_M}: each element of B serves only {m} row(s) of C, so the product "
                      f"is bound by reading B ({4 * k * n / 1e6:.1f} MB) once; {splits} slice(s) of K make enough "
                      "blocks to keep the loads in flight")
    if n <= SKINNY_MAX_N:
        splits = cols_splits(m, k, sms)
        return Choice("skinny", {"cols": n, "splits": splits},
                      f"N = {n} <= {SKINNY_MAX_N}: each element of A serves only {n} column(s) of C, so the product is "
                      f"bound by reading A ({4 * m * k / 1e6:.1f} MB) once; a warp streams 4 rows of it, "
                      f"{_count(splits, 'slice')} of K")
    if (m <= NARROW_SIDE and n >= NARROW_LONG) or (n <= NARROW_SIDE // 2 and m >= NARROW_LONG // 2):
        kernel = narrow_kernel(m, n, aligned)
        splits = narrow_splits(m, n, k, kernel, sms)
        bm, bn = kernel.tile
        tiles = ceil_div(m, bm) * ceil_div(n, bn)
        return Choice("narrow", {"tile": f"{bm}x{bn}", "splits": splits, "vec": aligned},
                      f"C is {m} x {n}: a square tile would compute mostly rows or columns that do not exist; "
                      f"{_count(tiles, 'tile')} of {bm} x {bn} x {_count(splits, 'slice')} of K put "
                      f"{tiles * splits * kernel.threads // 32 / sms:.1f} warps on each of {sms} SMs")
    if k <= SMALL_K:
        # Small K: each block's prologue (first tile) and epilogue (its stores) are most of its time, and small
        # tiles, several resident per SM, overlap one block's stores with another's loads. Measured (H200): 64 x 64
        # 4096 x 4096 x 64 0.077 ms vs 256 x 128 0.102; 8192 x 8192 x 128 0.489 vs 0.523.
        tile = SMALL_K_TILE
        blocks = ceil_div(m, 64) * ceil_div(n, 64)
        return Choice(tile.steps[0 if aligned else 1], {"tile": tile.name, "splits": 1, "vec": aligned},
                      f"K = {k} <= {SMALL_K}: {_count(blocks, 'tile')} of 64 x 64, {tile.per_sm} per SM, hide one another's "
                      "prologue and stores")
    cands = []  # (tile, slices, the slices meet in a workspace, estimate)
    for tile in TILES:
        bm, bn = tile.kernels[0].tile
        tiles = ceil_div(m, bm) * ceil_div(n, bn)
        for splits in split_options(k, tiles, sms * tile.per_sm) if tile.split_kernels else [1]:
            for workspace in (False, True) if 1 < splits and 4 * m * n * splits <= WORKSPACE_MAX_BYTES else (False,):
                cands.append((tile, splits, workspace, estimate_us(m, n, k, tile, splits, sms, aligned, workspace)))
    if aligned and ceil_div(m, 256) * ceil_div(n, 128) > sms:  # more 256 x 128 tiles than SMs: stream-K can balance
        cands.append((STREAM_K_TILE, 1, False, stream_k_estimate_us(m, n, k, sms)))
    spread = ceil_div(m, 128) * ceil_div(n, 128)
    low, high = SPREAD_WAVES if aligned else SPREAD_WAVES_SCALAR
    fill = spread / (sms * ceil_div(spread, sms))  # how full the whole tiles' rounds are
    if fill <= SPREAD_FILL and low * sms <= spread < high * sms:  # a part-empty wave: even it out
        cands.append((SPREAD_TILE, 1, False, spread_estimate_us(m, n, k, sms, aligned)))
    # ties: the larger tile, the fewer slices, atomics (listed first)
    tile, splits, workspace, est = min(cands, key=lambda c: c[3])
    bm, bn = tile.kernels[0].tile
    blocks = ceil_div(m, bm) * ceil_div(n, bn)
    if tile is STREAM_K_TILE or tile is SPREAD_TILE:
        dp, sk = stream_k_blocks(m, n, sms, tile=(bm, bn), spread=tile is SPREAD_TILE)
        step = "async_copy" if tile is STREAM_K_TILE else "stream_k"
        why = (f"{_count(blocks, 'tile')} of {tile.label} = {blocks / sms:.2f} waves of {sms} SMs: "
               + (f"the first {dp} one per block, then " if dp else "")
               + f"the last {blocks - dp} shared out evenly by {sk} blocks, so no wave is part-empty"
               + (f"; each tile copied global -> shared by cp.async through {ASYNC_STAGES} shared buffers"
                  if tile is STREAM_K_TILE else ""))
    elif splits > 1:
        step = "split_k"
        why = (f"{_count(blocks, 'tile')} of {tile.label} for {sms} SMs: {splits} slices of K (each "
               f"{ceil_div(k, splits * tile.kernels[0].bk) * tile.kernels[0].bk} deep but the last) "
               f"make {blocks * splits} blocks, "
               + ("which store their partial tiles in a workspace: the last of a tile's slices to finish sums them "
                  "into C" if workspace else "which add their partial tiles into C (zeroed first) by atomics"))
    else:
        step = tile.steps[0 if aligned else 1]
        why = (f"{_count(blocks, 'tile')} of {tile.label} = {blocks / (sms * tile.per_sm):.2f} waves of {sms} SMs "
               f"x {tile.per_sm}")
    why += f" (estimate {est:.1f} us, best of {len(cands)} tile/slice options)"
    config = {"tile": tile.name, "splits": splits, "vec": aligned}
    if workspace:
        config["workspace"] = True
    if tile is STREAM_K_TILE:
        config.update(stream_k=True, stages=ASYNC_STAGES)
    if tile is SPREAD_TILE:
        config.update(stream_k=True)
    return Choice(step, config, why, est, [(t.name + (" stream-K" if t in (STREAM_K_TILE, SPREAD_TILE) else "")
                                            + (" workspace" if w else ""), s, round(e, 2)) for t, s, w, e in cands])


def _kernel_for(choice: Choice):
    if choice.step == "stream_k":
        return SPREAD_TILE.kernels[0 if choice.config["vec"] else 1]
    tile = next(t for t in TILES + (SMALL_K_TILE,) if t.name == choice.config["tile"])
    if choice.config.get("workspace"):
        return tile.workspace_kernel(choice.config["vec"])
    pair = tile.split_kernels if choice.config["splits"] > 1 else tile.kernels
    return pair[0] if choice.config["vec"] else pair[1]


@version("matmul", check, kernels=[wide_vec_kernel, get_skinny_kernel(1, True), get_skinny_shared_kernel(16, True),
                                   get_skinny_cols_kernel(1, True), rows_vec_kernel, cols_small_vec_kernel,
                                   small_deep_vec_kernel, quad_vec_kernel, quad_split_vec_kernel,
                                   fixup_twin(quad_split_vec_kernel), quad_ring_fixup_kernel]
         + list(split_k_kernels(True)) + [fixup_twin(k) for k in split_k_kernels(True)] + [async_vec_kernel,
                                                                                          spread_vec_kernel])
def optimized(a, b, c):
    """The dispatcher: per shape, the step and configuration that choose() estimates fastest (skinny, tiles, split-K, ...)."""
    m, n = c.shape
    choice = choose(m, n, a.shape[1], aligned16(a, b))
    if choice.step == "skinny":
        return skinny_launches(a, b, c, choice.config["splits"])
    if choice.step == "narrow":
        return tiled_launch(narrow_kernel(m, n, choice.config["vec"]), c, (a, b, c), choice.config["splits"])
    if choice.step == "async_copy":
        return stream_k_launches(async_copy_kernel(), a, b, c)
    if choice.step == "stream_k":
        return stream_k_launches(_kernel_for(choice), a, b, c)
    if choice.config.get("workspace"):
        return fixup_launch(_kernel_for(choice), c, (a, b, c), choice.config["splits"])
    return tiled_launch(_kernel_for(choice), c, (a, b, c), choice.config["splits"])


optimized.choose = choose
# What it dispatches to, for the suite -- and stream_k, the step async_copy changes, so that every suite run shows
# what the cp.async ring adds on each shape.
optimized.steps = ("thread_16x8", "vector_loads", "skinny", "split_k", "narrow", "stream_k", "async_copy")
optimized.describe = lambda a, b: str(choose(a.shape[0], b.shape[1], a.shape[1], aligned16(a, b)))
