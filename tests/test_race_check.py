"""Every version of every lesson, traced on the simulator: no races, no uninitialised shared reads, no barrier
divergence -- so a lost ``cuda.syncthreads()`` fails CI even when the answer happens to come out right.

The lesson tests (test_lessons.py) compare answers. A missing barrier often leaves the answer right: the simulator
runs one thread at a time between barriers, and even its shuffled orders may not hit the window. The tracer
(``gpukernels.trace``) does not depend on the order: two accesses to one element from two threads in one barrier
interval, one of them a write, are a race whatever order they ran in.

The shapes are small (tracing is slow) but odd, and deep enough that every multi-phase kernel goes through several
barrier intervals: matmul's K is three tiles of 16 (five of 8), softmax's rows are longer than one pass of the
block, CBR's input channels take two staging phases. Each case also checks how many barriers a block passed, so a
shape that became too shallow to show a phase-to-phase race fails instead of passing vacuously. The split-K,
split-row, skinny and online paths, and the interior (unguarded) copy of every tiled matmul kernel (in the long
tier), have cases of their own; `test_cases_reach_every_registered_kernel` checks that together they launch every kernel a version
names in its registry entry.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import LESSONS
from gpukernels.check import FLOAT16_TOLERANCE, TOLERANCE, case, compare, version_inputs

from ._tiers import long_tier_after

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")

#: Every version of a lesson is traced at each of its shapes: (shape, launcher keyword arguments).
SHAPES = {
    "matmul": [((33, 35, 33), {})],  # K = 33: 3 tiles of 16 (tiled, deep_k, ...), 5 of 8; M, N ragged
    "softmax": [
        ((5, 33), {}),  # a warp per row (optimized), 33 values: two per lane for some lanes
        ((3, 600), {}),  # a block of 64 threads per row (2 warps: the reduction goes through shared memory)
        ((2, 9000), {}),  # few long rows: split_row (optimized too), 2 pieces per row, 512 threads each
    ],
    "cbr": [((1, 5, 5, 7, 3, 3, 3), {"padding": 1})],  # 5 input channels: 2 staging phases of 4; halos
    # K = 72: 3 k tiles of 32 through the cp.async ring (K, N multiples of 8: rows 16-byte aligned), 5 of 16 for
    # tf32x3; M, N ragged against every tile
    "tensor_core": [((33, 40, 72), {})],
    # Sq = 40: two query tiles of tiled's 32 (one block of the tensor-core steps' 64); Sk = 70: three K/V tiles of 32
    # (tiled at D = 16), two of 64 (mma, pipelined), the last ragged
    "attention": [((1, 1, 40, 70, 16), {})],
}

#: One version at a shape that takes it down another path: (lesson, version, shape, params, barriers per block).
PATHS = [
    ("matmul", "split_k", (33, 35, 130), {}, 3),  # K = 130: 2 slices of K added into C by atomics
    ("matmul", "skinny", (1, 37, 530), {}, 2),  # one row of C (one phase of `red`), K split in 2: atomics
    ("matmul", "skinny", (13, 36, 300), {}, 3),  # 16 rows per block (16 phases of `red`), 16-byte loads of B
    ("matmul", "optimized", (1, 36, 300), {}, 2),  # the dispatcher's matrix-vector kernel, 16-byte loads
    ("cbr", "optimized", (1, 19, 4, 5, 3, 1, 1), {"padding": 0}, 1),  # 1x1 filter: k tiles of 8 channels, ragged,
    # in 2 slices (the second holds one k tile): the atomics of split_c
    ("cbr", "implicit_gemm", (1, 19, 4, 5, 3, 1, 1), {"padding": 0}, 3),  # the same, unsliced: 3 k tiles
    # winograd's products: 20 channels, 3 k tiles of 8 through its two buffers (the third reuses the first's), the
    # last ragged; 3 output channels and 12 tiles of 2 x 2, both ragged against the block tile (F(4x4)'s transforms:
    # test_winograd_large_products_tile_has_no_hazards)
    ("cbr", "winograd", (1, 20, 5, 7, 3, 3, 3), {"padding": 1}, 3),
    # rows not 16-byte aligned (K, N odd): the ring filled by loads and stores instead of cp.async
    ("tensor_core", "pipelined", (9, 37, 70), {}, 3),
    ("tensor_core", "block_tiles", (9, 37, 70), {}, 3),
    # wgmma: 5 k tiles of 64 through its 4-stage ring (tile 4 reuses the buffer of tile 0, which the tensor cores
    # read asynchronously); then the same unaligned (N, K odd: loads and stores)
    ("tensor_core", "wgmma", (70, 200, 300), {}, 5),
    ("tensor_core", "wgmma", (9, 261, 299), {}, 5),
    # the causal mask: the blocks of the first queries stop after their tiles (3 query tiles: 1, 2 and 3 K/V tiles
    # of tiled's 32 keys; 2 blocks of 64 rows for the tensor-core steps)
    ("attention", "tiled", (1, 1, 96, 70, 16), {"causal": True}, 3),
    ("attention", "mma", (1, 1, 96, 70, 16), {"causal": True}, 3),
    ("attention", "pipelined", (1, 1, 96, 70, 16), {"causal": True}, 3),
    ("attention", "pipelined", (1, 1, 17, 200, 16), {}, 3),  # four K/V tiles of 64 through its buffers
    ("attention", "tf32x3", (1, 1, 96, 70, 16), {"causal": True}, 3),  # 2 blocks of 64: 2 and 3 K/V tiles of 32
    ("attention", "split_keys", (1, 2, 2, 530, 16), {}, 0),  # 530 keys: 2 runs per row, 4 rows' partial states
    # wgmma's blocks of 128 rows under the mask: the block of queries 128-139 walks 3 K/V tiles of 64 (the last
    # ragged), the block of 0-127 two; the tensor cores read Q, K and V asynchronously between the barriers
    ("attention", "wgmma", (1, 1, 140, 150, 16), {"causal": True}, 3),
    # the rings of 2 stages went round several times (6 K/V tiles per head, the last ragged, its box reading the next
    # head's keys), two heads, two query tiles each under the mask: the TMA copies, the tensor cores' reads and the
    # consumers' releases ordered by mbarriers alone, the turns by named barriers
    ("attention", "warp_specialized", (1, 2, 140, 330, 16), {"causal": False}, 1),
    ("attention", "ping_pong", (1, 2, 140, 330, 16), {"causal": True}, 1),
]

#: attention's kernels are specialised per head dimension D: fused_rows by the values per lane (D up to 32, 64, 96,
#: 128), tiled by the tiles' width (16, 32, 64, 128; 16 keys a tile at 128), mma and pipelined by D / 16 (16 to 128),
#: tf32x3 by D rounded up to 16. One case per kernel that the D = 16 shape above misses; the float16 tensor-core ones
#: between 32 and 112 in the long tier (the same code with fewer fragments than D = 128's), and tf32x3's past D = 24.
#: (version, shape, barriers per block, long tier)
ATTENTION_DIMS = ([(name, (1, 1, 3, 20, d), 0, False) for name in ("fused_rows", "split_keys") for d in (48, 80, 128)]
                  + [("tiled", (1, 1, 17, 70, d), 3, False) for d in (32, 64)]
                  + [("tiled", (1, 1, 17, 40, 128), 3, False)]
                  + [(name, (1, 1, 17, 70, d), 3, d != 128) for name in ("mma", "pipelined")
                     for d in range(32, 129, 16)]
                  # tf32x3 pads D to 16 (D = 24: 32 wide); at 80 a row's pieces do not divide the threads; past 96,
                  # 8 warps
                  + [("tf32x3", (1, 1, 17, 70, d), 3, d not in (24, 64)) for d in (24, 48, 64, 80, 96, 112, 128)]
                  # optimized's tf32x3 for few keys past D = 96: blocks of 4 warps, Q split as read
                  + [("optimized", (1, 1, 17, 70, d), 3, d != 128) for d in (112, 128)]
                  # float16 decoding's slices: 3 queries, 600 keys (10 tiles of 64, ragged), pipelined's ring in
                  # each slice, then the merge
                  + [("split_keys_f16", (1, 1, 3, 600, d), 3, d != 128) for d in range(16, 129, 16)]
                  # wgmma: Q, K and V tiles of one or two 64-column atoms, D / 16 slices of S per tile
                  + [("wgmma", (1, 1, 17, 70, d), 3, d != 128) for d in range(32, 129, 16)]
                  # the same tiles by TMA into the rings of warp_specialized and ping_pong (one barrier per block:
                  # their loops are ordered by mbarriers and named barriers), in the long tier: the default tier traces
                  # them at D = 16, and test_attention_hopper.py compiles D = 128
                  + [(name, (1, 1, 17, 70, d), 1, True) for name in ("warp_specialized", "ping_pong")
                     for d in range(32, 129, 16)])

MIN_BARRIERS = 3  # per block, for a launch that has barriers at all: several phases, so reuse across them is seen
#: Versions that slice a small image's channels as finely as the GPU's SMs ask (split_c, and the dispatcher that picks
#: it): at a traceable shape every slice is one k tile, so a block passes 2 barriers -- the prologue's, which
#: separates its shared stores from the tile's reads, and the tile's own. (Empty trailing slices pass 1.)
MIN_BARRIERS_OF = {("cbr", "split_c"): 1, ("cbr", "optimized"): 1,
                   # 5 channels are one k tile of winograd's 8: one barrier (its ring is traced in PATHS)
                   ("cbr", "winograd"): 1,
                   # 64-deep k tiles: K = 72 is 2 of them (its ring's reuse is traced in PATHS, at K = 328), and
                   # the dispatcher's one-warpgroup wgmma blocks at this shape (their 8-stage ring wraps in
                   # test_tensor_core_dispatch_paths_have_no_hazards)
                   ("tensor_core", "wgmma"): 2, ("tensor_core", "optimized"): 2,
                   # one barrier, after the mbarriers' set-up: its main loop is ordered by the mbarriers alone
                   ("tensor_core", "warp_specialized"): 1, ("tensor_core", "persistent"): 1, ("tensor_core", "fp8"): 1,
                   # the same in attention's producer/consumer steps (the rings' reuse is traced in PATHS)
                   ("attention", "warp_specialized"): 1, ("attention", "ping_pong"): 1}


def _run_traced(launch_all):
    """Run ``launch_all()`` under the tracer; a barrier divergence or a warp-mask error fails the test."""
    from gpukernels.sim import BarrierDivergenceError, WarpMaskError

    try:
        with gpukernels.trace(count_local=False) as t:  # races and uninitialised reads: global and shared only
            launch_all()
    except (BarrierDivergenceError, WarpMaskError) as err:
        pytest.fail(f"{type(err).__name__}: {err}")
    return t


#: Kernels whose blocks pass a fixed number of barriers whatever the shape: no deeper case shows more phases.
FIXED_BARRIERS = {"quantize_cols_kernel": 1,  # tensor_core.fp8's transpose of B through one shared tile
                  "split_cols_kernel": 1,  # tensor_core.tf32x3's transpose of B through one shared tile
                  "split_values_kernel": 1}  # attention.tf32x3's transpose of V, likewise


def hazard_report(t, min_barriers: int = MIN_BARRIERS) -> list[str]:
    """What is wrong with a traced run: races, uninitialised shared reads, and launches whose blocks passed
    fewer than ``min_barriers`` barriers (a shape too shallow to test the kernel's phases)."""
    h = t.hazards()
    problems = [
        f"{r.kernel}: {r.hazard} race on {r.array} ({r.space}) between {r.first_location} ({r.first_kind}) and "
        f"{r.second_location} ({r.second_kind}), {r.elements} element(s), e.g. {r.array}{list(r.example_element)} "
        f"in block {r.example_block}, threads {r.example_threads[0]} and {r.example_threads[1]}, interval "
        f"{r.example_interval}"
        for r in h.races
    ]
    problems += [
        f"{u.kernel}: shared {u.array} read at {u.location} before any thread wrote it ({u.reads} read(s), e.g. "
        f"{u.array}{list(u.example_element)} by thread {u.example_thread} of block {u.example_block})"
        for u in h.uninitialized
    ]
    for launch, b in zip(t.launches, t.barriers()):
        blocks = math.prod(launch.grid)
        if b.syncthreads and b.syncthreads < min(min_barriers, FIXED_BARRIERS.get(b.kernel, min_barriers)) * blocks:
            problems.append(f"{b.kernel}: {b.syncthreads / blocks:g} barriers per block, fewer than {min_barriers}: "
                            "the case is too shallow to show a race between phases")
    return problems


#: Steps whose default-tier race check the step after them covers: each is the next one's kernel less one idea (the
#: TMA copies of step 7 and the roles of step 8 run again in step 9; attention's step 10 in step 11), and their own
#: test files run the simulator's asynchronous checks (mbarrier phases, early reads, overwrites) in the default tier
LONG_TIER_ONLY = {("tensor_core", "tma"), ("tensor_core", "warp_specialized"), ("attention", "warp_specialized")}


def _version_cases():
    for lesson, mod in LESSONS.items():
        for name in mod.VERSIONS:
            for shape, params in SHAPES[lesson]:
                # a dispatcher runs the kernels of the steps it picks, each checked under its own name here (and
                # along its paths in PATHS): the long tier checks it again under its own
                marks = [pytest.mark.slow] if name == "optimized" or (lesson, name) in LONG_TIER_ONLY else []
                yield pytest.param(lesson, name, shape, params, MIN_BARRIERS_OF.get((lesson, name), MIN_BARRIERS),
                                   id=f"{lesson}-{name}-{'x'.join(map(str, shape))}", marks=marks)
    # the dispatchers' other paths and attention's other head sizes: 2-6 CPU-s each in the tracer, the long tier
    # (the default tier race-checks every version at its lesson's shapes, above)
    for lesson, name, shape, params, min_barriers in PATHS:
        yield pytest.param(lesson, name, shape, params, min_barriers, marks=[pytest.mark.slow],
                           id=f"{lesson}-{name}-{'x'.join(map(str, shape))}-path"
                              + ("-causal" if params.get("causal") else ""))
    for name, shape, min_barriers, slow in ATTENTION_DIMS:
        yield pytest.param("attention", name, shape, {}, min_barriers, marks=[pytest.mark.slow],
                           id=f"attention-{name}-{'x'.join(map(str, shape))}-D")


@pytest.mark.parametrize("lesson,name,shape,params,min_barriers", list(_version_cases()))
def test_version_has_no_hazards(lesson, name, shape, params, min_barriers, seed):
    mod = LESSONS[lesson]
    inputs, ref, tol = case(lesson, name, shape, seed, **params)  # the inputs the version takes, their reference
    out = np.full(ref.shape, np.nan, np.float32)
    t = _run_traced(lambda: mod.VERSIONS[name](*inputs, out=out, **params))
    problems = hazard_report(t, min_barriers)
    assert not problems, f"{lesson}.{name} at {shape} {params}:\n" + "\n".join(problems)
    check = compare(out, ref, tol)
    assert check.ok, f"{lesson}.{name} at {shape} seed={seed}: {check}"


# ----------------------------------------------------------------------------------------------------------
# Kernels the small shapes do not reach through their version: traced by a direct launch
# ----------------------------------------------------------------------------------------------------------


def _planned_kernels() -> set:
    """ids of the kernels the version cases launch (planned with `Version.launches`, not run)."""
    reached = set()
    for param in _version_cases():
        lesson, name, shape, params, _ = param.values
        mod = LESSONS[lesson]
        inputs = version_inputs(lesson, name, mod.make_inputs(shape, 0))
        reached |= {id(l.kernel) for l in mod.VERSIONS[name].launches(*inputs, **params)}
    return reached


def _tiled_kernels():
    """The kernels of the tiled matmul factory (they carry ``tile`` and ``bk``) that a version names but no
    version case launches: the 16-byte-load, 256 x 128 and 128 x 128 split-K kernels, which the dispatchers
    choose only for matrices of hundreds of tiles. (The non-vec interior path is the same code for every
    factory kernel; these cases trace it too.)"""
    planned, seen = _planned_kernels(), {}
    for version in LESSONS["matmul"].VERSIONS.values():
        for k in version.kernels:
            if hasattr(k, "tile") and not k.stream_k and id(k) not in planned and id(k) not in seen:
                seen[id(k)] = k
    return list(seen.values())


def _matmul_interior(kernel, seed):
    """One block wholly inside A and B (the unguarded copy of the loop, and load4 for a vec kernel): K three
    tiles deep, or for a split-K kernel (atomics or a workspace) two slices of two tiles. K and N are multiples of
    4: rows 16-byte aligned."""
    from gpukernels.matmul._common import tiled_launch

    from gpukernels.matmul._common import fixup_launch

    fixup = kernel.params.get("fixup", False)  # the slices meet in a workspace: the last of the two sums them
    splits = 2 if kernel.split_k or fixup else 1
    bm, bn = kernel.tile
    k = 4 * kernel.bk if splits > 1 else 2 * kernel.bk + 4
    a, b = LESSONS["matmul"].make_inputs((bm, bn, k), seed)
    da, db = cuda.to_device(a), cuda.to_device(b)
    dc = cuda.to_device(np.full((bm, bn), np.nan, np.float32))
    launches = (fixup_launch if fixup else tiled_launch)(kernel, dc, (da, db, dc), splits)
    return launches, dc, LESSONS["matmul"].reference(a, b), TOLERANCE["matmul"]


def _stream_k_case(kernel, shape, sms=2):
    """stream_k with two SMs: 3 tiles (the last on the bottom edge) shared by 2 blocks, so the middle tile is cut
    between them and summed through the workspace (K = 24: 3 k tiles per tile, 4 and 5 per block); a spread
    kernel with fewer tiles than blocks: each tile cut between three or four of them."""

    def build(seed):
        from gpukernels.matmul.k19_stream_k import stream_k_launches

        a, b = LESSONS["matmul"].make_inputs(shape, seed)
        dc = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
        launches = stream_k_launches(kernel, cuda.to_device(a), cuda.to_device(b), dc, sms=sms)
        return launches, dc, LESSONS["matmul"].reference(a, b), TOLERANCE["matmul"]

    return build


def _cols_case(shape, splits):
    """skinny with N <= 4 columns: warps of 4 rows of A, K in ``splits`` slices added into C by atomics."""

    def build(seed):
        from gpukernels.matmul.k16_skinny import skinny_cols_launches

        a, b = LESSONS["matmul"].make_inputs(shape, seed)
        dc = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
        launches = skinny_cols_launches(cuda.to_device(a), cuda.to_device(b), dc, splits)
        return launches, dc, LESSONS["matmul"].reference(a, b), TOLERANCE["matmul"]

    return build


def _softmax_config(n):
    """optimized's kernel for rows of n values, launched directly (with few rows the version would take
    split_row instead): n > MAX_CACHED is the two-pass online kernel, n just above what 512 threads keep in
    registers is the hybrid kernel with part of the row in shared memory."""

    def build(seed):
        from gpukernels import softmax
        from gpukernels._launch import Launch

        m = 2
        cfg = softmax.optimized_config(n)
        (x,) = softmax.make_inputs((m, n), seed)
        dx, dy = cuda.to_device(x), cuda.to_device(np.full_like(x, np.nan))
        launches = [Launch(softmax.optimized_kernel(cfg), (-(-m // cfg.rows_per_block),), cfg.block, (dx, dy))]
        return launches, dy, softmax.reference(x), TOLERANCE["softmax"]

    return build


def _kernel_cases():
    # the long tier: the interior copy is the same code in every factory kernel; the default tier traces it through
    # the versions' own kernels (their blocks wholly inside A and B)
    for kernel in _tiled_kernels():
        yield pytest.param(lambda seed, k=kernel: _matmul_interior(k, seed), id=f"matmul-{kernel.__name__}-interior",
                           marks=pytest.mark.slow)
    from gpukernels import softmax
    from gpukernels.matmul import k19_stream_k, k20_async_copy

    yield pytest.param(_stream_k_case(k19_stream_k.stream_k_vec_kernel, (513, 64, 24)), id="matmul-stream_k-vec-shared")
    # the cp.async ring (plain copies here): the buffer a copy overwrites was last read before the tile's barrier
    yield pytest.param(_stream_k_case(k20_async_copy.async_vec_kernel, (513, 64, 24)), id="matmul-async_copy-shared")
    # optimized's 128 x 128 tile spread over more blocks than tiles: 2 tiles x 4 k tiles over 7 blocks (16-byte
    # loads), 6 tiles x 3 k tiles over 13 (4-byte loads, a ragged last k tile)
    spread = LESSONS["matmul"].k21_optimized.SPREAD_TILE.kernels
    yield pytest.param(_stream_k_case(spread[0], (130, 100, 64), 7), id="matmul-stream_k-spread-vec")
    yield pytest.param(_stream_k_case(spread[1], (131, 257, 37), 13), id="matmul-stream_k-spread")
    # skinny's few-columns kernels (no shared memory: the atomics of K in slices), 16-byte and scalar loads
    yield pytest.param(_cols_case((45, 1, 1032), 3), id="matmul-skinny-cols1-vec-split")
    yield pytest.param(_cols_case((37, 3, 45), 2), id="matmul-skinny-cols3-split")
    yield pytest.param(_softmax_config(softmax.MAX_CACHED + 101), id="softmax-online")
    hybrid = softmax.LONG_THREADS * softmax.HYBRID_ELEMS + 37
    yield pytest.param(_softmax_config(hybrid), id="softmax-hybrid-shared")


@pytest.mark.parametrize("build", long_tier_after(3, _kernel_cases()))
def test_kernel_path_has_no_hazards(build, seed):
    launches, out, ref, tol = build(seed)

    def launch_all():
        for launch in launches:
            launch()

    t = _run_traced(launch_all)
    problems = hazard_report(t)
    names = ", ".join(l.kernel for l in t.launches)
    assert not problems, f"{names}:\n" + "\n".join(problems)
    check = compare(out.copy_to_host(), ref, tol)
    assert check.ok, f"{names} seed={seed}: {check}"


# (wgmma_split's 128 x 256 tiles and the 64 x 128 one-warpgroup blocks are traced on one row of tiles: 2 tiles x 2
# slices on a lent 5-SM GPU, and 2 tiles on 4 SMs. A second row of tiles -- 130 and 69 rows -- doubled those traces
# (20 and 13 CPU-s): the same blocks at another row offset, which test_tensor_core.py compares with float64 in 2 rows
# of tiles, test_wgmma_split_k_is_correct at (130, 300, 330) and test_wgmma_block_shapes_are_correct's 64 x 128
# kernel of 8 stages at (70, 136, 200).)
@pytest.mark.parametrize("path,shape", long_tier_after((0,), [
    ("split_k", (16, 64, 200)), ("padded", (70, 261, 75)), ("wgmma_split", (70, 300, 330)),
    ("wgmma_split", (70, 100, 200)), ("wgmma_64x128", (60, 131, 597)), ("wgmma_64x64", (70, 72, 600))], multi=True))
def test_tensor_core_dispatch_paths_have_no_hazards(path, shape, seed, monkeypatch):
    """The tensor-core dispatcher's paths for large problems, taken at a traceable shape by lending it a shallow
    split (split-K: 7 k tiles in 6 slices added into C by atomics after a zeroing launch) or a 1-SM GPU (A and B
    copied into arrays with 16-byte rows, then step 9's persistent TMA kernel); and its one-warpgroup wgmma blocks, 10 k tiles through their
    8-stage ring (64 x 128: 2 tiles on a lent 4-SM GPU, rows padded first; 64 x 64: 4 tiles on 132 SMs)."""
    from gpukernels.tensor_core import k12_optimized as opt

    if path == "split_k":
        monkeypatch.setattr(opt, "SPLIT_MIN_K", 32)
    elif path == "wgmma_split":  # 2 tiles of 128 x 256 x 2 slices; one of 128 x 128 x 3 slices, the last empty
        monkeypatch.setattr(opt, "WG_SPLIT_MIN_K", 64)
        monkeypatch.setattr(opt, "sm_count", lambda: 5 if shape[1] > 128 else 6)
    elif path == "wgmma_64x128":
        monkeypatch.setattr(opt, "sm_count", lambda: 4)
    elif path == "padded":
        monkeypatch.setattr(opt, "sm_count", lambda: 1)
    mod = LESSONS["tensor_core"]
    a, b = mod.make_inputs(shape, seed)
    kernels = [x.kernel for x in mod.optimized.launches(a, b)]
    expected = {"split_k": [opt.zero_kernel, opt.pipelined_split_kernel],
                "padded": [opt.pad_kernel, opt.pad_kernel, opt.persistent_kernel],
                "wgmma_split": [opt.zero_kernel, opt.WGMMA_SPLIT_KERNELS[256 if shape[1] > 128 else 128]],
                "wgmma_64x128": [opt.pad_kernel, opt.pad_kernel, opt.WGMMA_KERNELS["64x128"]],
                "wgmma_64x64": [opt.WGMMA_KERNELS["64x64"]]}
    if path == "wgmma_split":  # (K = 330, N = 100: rows not 16-byte aligned, so copies with padded rows first)
        kernels = [k for k in kernels if k is not opt.pad_kernel]
    assert kernels == expected[path]
    out = np.full(shape[:2], np.nan, np.float32)
    t = _run_traced(lambda: mod.optimized(a, b, out=out))
    problems = hazard_report(t, 1)
    assert not problems, f"tensor_core.optimized ({path}) at {shape}:\n" + "\n".join(problems)
    check = compare(out, mod.reference(a, b), TOLERANCE["tensor_core"])
    assert check.ok, f"tensor_core.optimized ({path}) at {shape} seed={seed}: {check}"


@pytest.mark.slow  # 3-5 CPU-s per D: the default tier race-checks pipelined at its lesson shape
@pytest.mark.parametrize("d", [pytest.param(d, marks=[] if d in (16, 80, 128) else [pytest.mark.slow])
                               for d in range(16, 129, 16)])
def test_pipelined_pair_has_no_hazards(d, monkeypatch, seed):
    """attention.pipelined with 32 query rows per warp, which its plan takes where the blocks of 128 rows fill the
    SMs (here a lent 1-SM GPU): 2 query blocks (the first with 12 rows), 3 and 2 K/V tiles under the causal mask, the
    last ragged; Q's tile in shared memory past D = 64."""
    from gpukernels.attention import k05_pipelined

    monkeypatch.setattr(k05_pipelined, "sm_count", lambda: 1)
    mod = LESSONS["attention"]
    q, k, v = version_inputs("attention", "pipelined", mod.make_inputs((1, 1, 140, 150, d), seed))
    [launch] = mod.pipelined.launches(q, k, v)
    assert launch.kernel is mod.pipelined_kernel_for(d) and launch.kernel.tile[0] == 128
    out = np.full((1, 1, 140, d), np.nan, np.float32)
    t = _run_traced(lambda: mod.pipelined(q, k, v, causal=True, out=out))
    problems = hazard_report(t, 4)
    assert not problems, f"attention.pipelined (32 rows per warp) at D = {d}:\n" + "\n".join(problems)
    check = compare(out, mod.reference(q, k, v, causal=True), FLOAT16_TOLERANCE["attention"])
    assert check.ok, f"attention.pipelined (32 rows per warp) at D = {d} seed={seed}: {check}"


def test_tf32x3_without_wgmma_has_no_hazards(monkeypatch, seed):
    # Before Hopper, tf32x3 runs its mma.sync kernel (the simulator plays an H200, so the GPU is lent an A100's
    # compute capability): K = 72, 5 k tiles of 16 through its two buffers
    from gpukernels.tensor_core import k11_tf32x3

    monkeypatch.setattr(k11_tf32x3, "compute_capability", lambda: (8, 0))
    mod = LESSONS["tensor_core"]
    a, b = mod.make_inputs((33, 40, 72), seed, dtype=np.float32)
    assert [x.kernel for x in mod.tf32x3.launches(a, b)] == [mod.tf32x3_mma_kernel]
    out = np.full((33, 40), np.nan, np.float32)
    t = _run_traced(lambda: mod.tf32x3(a, b, out=out))
    problems = hazard_report(t, 3)
    assert not problems, "tensor_core.tf32x3 (mma.sync):\n" + "\n".join(problems)
    assert compare(out, mod.reference(a, b), 1e-5).ok


def test_cases_reach_every_registered_kernel():
    """The cases above launch every kernel that any version names in its registry entry (``Version.kernels``):
    planned, not run, so this is quick. A version added to a registry is traced by the cases above at its
    lesson's shapes; a kernel it adds that those shapes miss fails here until a case reaches it."""
    from gpukernels.matmul import k19_stream_k, k20_async_copy
    from gpukernels.tensor_core import k12_optimized as tc_opt

    from gpukernels.matmul.k16_skinny import get_skinny_cols_kernel

    reached = (_planned_kernels() | {id(k) for k in _tiled_kernels()}
               # test_winograd_large_products_tile_has_no_hazards: the 128 x 128 products, F(4x4)'s transforms
               | {id(LESSONS["cbr"].k05_winograd.products_kernel_large)}
               | {id(k) for k in LESSONS["cbr"].k05_winograd.TRANSFORMS[4]}
               | {id(LESSONS["cbr"].k05_winograd.output_transform_4x4_rows_kernel)}
               | {id(k19_stream_k.stream_k_vec_kernel), id(k20_async_copy.async_vec_kernel)}
               | {id(k) for k in LESSONS["matmul"].k21_optimized.SPREAD_TILE.kernels}
               | {id(get_skinny_cols_kernel(1, True)), id(get_skinny_cols_kernel(3, False))}
               # test_tensor_core_dispatch_paths_have_no_hazards
               | {id(tc_opt.zero_kernel), id(tc_opt.pipelined_split_kernel), id(tc_opt.pad_kernel)}
               | {id(k) for k in tc_opt.WGMMA_SPLIT_KERNELS.values()} | {id(k) for k in tc_opt.WGMMA_KERNELS.values()}
               | {id(tc_opt.tf32x3_mma_kernel)}  # test_tf32x3_without_wgmma_has_no_hazards
               | {id(LESSONS["attention"].pipelined_kernel_for(d)) for d in range(16, 129, 16)})  # ... pair ...
    missing = [f"{lesson}.{name}: {getattr(k, '__name__', k)}" for lesson, mod in LESSONS.items()
               for name, version in mod.VERSIONS.items() for k in version.kernels if id(k) not in reached]
    assert not missing, "kernels no race-check case launches:\n" + "\n".join(missing)


# ----------------------------------------------------------------------------------------------------------
# The check itself: it finds the races it exists to find
# ----------------------------------------------------------------------------------------------------------


def test_hazard_report_names_a_missing_barrier_and_a_shallow_case():
    """A tiled kernel without its second barrier (the next tile overwrites what slower threads still read) has a
    write-after-read race at K three tiles deep, which the report names; at K one tile deep the same kernel has
    no race to find, and the report says that the case is too shallow instead of passing it."""
    from numba import float32

    tile = 8

    @cuda.jit
    def lost_barrier(a, b, c):
        sa = cuda.shared.array((tile, tile), float32)
        sb = cuda.shared.array((tile, tile), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.grid(2)
        acc = float32(0)
        for t in range((a.shape[1] + tile - 1) // tile):
            sa[ty, tx] = a[row, t * tile + tx] if row < a.shape[0] and t * tile + tx < a.shape[1] else 0
            sb[ty, tx] = b[t * tile + ty, col] if t * tile + ty < b.shape[0] and col < b.shape[1] else 0
            cuda.syncthreads()
            for k in range(tile):
                acc += sa[ty, k] * sb[k, tx]
            # the second cuda.syncthreads() is missing here
        if row < c.shape[0] and col < c.shape[1]:
            c[row, col] = acc

    for k, want in ((24, "write-after-read race on sa"), (8, "too shallow")):
        a, b = LESSONS["matmul"].make_inputs((9, 9, k), 0)
        c = np.zeros((9, 9), np.float32)
        t = _run_traced(lambda: lost_barrier[(2, 2), (tile, tile)](a, b, c))
        report = "\n".join(hazard_report(t))
        assert want in report, report


@pytest.mark.slow  # 30 s in the simulator: the default tier race-checks winograd's steps at small shapes
def test_winograd_large_products_tile_has_no_hazards(seed, monkeypatch):
    """Winograd's products on their 128 x 128 tile (256 threads) and F(4x4, 3x3)'s transforms, taken at a traceable
    shape by lending a 1-SM GPU and lowering F4_MIN_TILES: 20 channels are 3 k tiles through the two buffers; 128
    output channels one row of blocks (the fewest the step gives this tile); 4 tiles of 4 x 4, the last ones partly
    outside the 5 x 7 image, so the block's columns are ragged. (130 channels, a second and ragged row of blocks,
    doubled the trace to 42 CPU-s: its rows past K take the guards of the factory that makes both tiles, traced on the
    64 x 128 tile by the winograd cases above, whose rows are ragged; the large tile's second row of blocks is compared
    with NumPy by test_cbr_winograd.py::test_the_16_products at 129 x 9 x 130.)"""
    from gpukernels.cbr import k05_winograd as wg

    monkeypatch.setattr(wg, "sm_count", lambda: 1)
    monkeypatch.setattr(wg, "F4_MIN_TILES", 1)
    mod = LESSONS["cbr"]
    shape = (1, 20, 5, 7, 128, 3, 3)
    x, w, b = mod.make_inputs(shape, seed)
    kernels = [la.kernel for la in mod.winograd.launches(x, w, b)]
    assert kernels[2] is wg.products_kernel_large
    assert [kernels[i] for i in (0, 1, 3)] == list(wg.TRANSFORMS[4])
    out = np.full((1, 128, 5, 7), np.nan, np.float32)
    t = _run_traced(lambda: mod.winograd(x, w, b, out=out))
    problems = hazard_report(t, 3)
    assert not problems, f"cbr.winograd (128 x 128 products) at {shape}:\n" + "\n".join(problems)
    assert compare(out, mod.reference(x, w, b), TOLERANCE["cbr"]).ok
    # and F(4x4)'s output rows as 16-byte stores: an output 8 wide, 6 high (the second row of tiles half outside)
    shape = (1, 20, 6, 8, 6, 3, 3)  # 20 channels: 3 k tiles of the products, as above
    x, w, b = mod.make_inputs(shape, seed)
    assert mod.winograd.launches(x, w, b)[3].kernel is wg.output_transform_4x4_rows_kernel
    out = np.full((1, 6, 6, 8), np.nan, np.float32)
    t = _run_traced(lambda: mod.winograd(x, w, b, out=out))
    problems = hazard_report(t, 3)
    assert not problems, f"cbr.winograd (16-byte output rows) at {shape}:\n" + "\n".join(problems)
    assert compare(out, mod.reference(x, w, b), TOLERANCE["cbr"]).ok
