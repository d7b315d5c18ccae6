"""The fast paths of the later matmul versions: shapes large enough that whole tiles lie inside the matrices
(so `interior` takes its unguarded path), the tile choice of `wave_fit`, and the 16-byte loads of
`vector_loads` and `thread_16x8` with their fallback for rows that are not 16-byte aligned. The generic shape
tests in test_lessons.py are all smaller than one 128 x 128 tile, so without these only the edge paths would
run."""

import numpy as np
import pytest
from numba import cuda

from gpukernels import matmul
from gpukernels._intrinsics import aligned16
from gpukernels.resources import run_with_real_cuda
from gpukernels.check import TOLERANCE, compare

from ._tiers import long_tier_after
from .conftest import GPU, same_kernels_as

from .test_lessons import run_checked


@pytest.mark.parametrize("name,shape", long_tier_after((0,), [
    ("interior", (130, 129, 20)),  # block (0, 0) inside, three edge blocks; K = 8 + 8 + 4: a ragged last k tile
    ("interior", (128, 128, 16)),  # exactly one tile, all of it on the unguarded path
    ("deep_k", (130, 129, 37)),  # 16-deep k tiles: 16 + 16 + 5
    ("swizzled", (257, 130, 24)),  # 3 tile rows in one group of 8: the remapped block order covers every tile
    ("wave_fit", (70, 66, 20)),  # 64 x 64 tiles (4 blocks < 132 SMs): (0, 0) inside, the rest on the edges
    ("wave_fit", (64, 64, 24)),
], multi=True))
def test_interior_and_edge_paths(name, shape, seed):
    run_checked("matmul", name, shape, seed)


def test_wave_fit_picks_the_tile_that_fills_the_gpu():
    assert matmul.wave_fit_kernel(4096, 4096, sms=132) is matmul.swizzled_kernel  # 1024 blocks of 128 x 128
    assert matmul.wave_fit_kernel(4095, 4097, sms=132) is matmul.swizzled_kernel
    assert matmul.wave_fit_kernel(1024, 1024, sms=132) is matmul.small_tile_kernel  # 64 blocks would idle 68 SMs
    assert matmul.wave_fit_kernel(1024, 1024, sms=48) is matmul.swizzled_kernel  # a smaller GPU is filled
    assert matmul.small_tile_kernel.tile == (64, 64) and matmul.small_tile_kernel.threads == 64
    assert matmul.interior_kernel.tile == (128, 128) and matmul.interior_kernel.threads == 256
    big = (matmul.wide_vec_kernel, matmul.vec_kernel, matmul.small_vec_kernel)
    assert matmul.wave_fit_kernel(4096, 4096, sms=132, kernels=big) is matmul.wide_vec_kernel  # 512 blocks
    assert matmul.wave_fit_kernel(2048, 2048, sms=132, kernels=big) is matmul.vec_kernel  # 128 < 132 blocks
    assert matmul.wave_fit_kernel(1024, 1024, sms=132, kernels=big) is matmul.small_vec_kernel
    assert matmul.wide_vec_kernel.tile == (256, 128) and matmul.wide_vec_kernel.threads == 256


@pytest.fixture
def one_sm(monkeypatch):
    """Plan as for a GPU with one SM, so that shapes small enough for the simulator get the big tiles."""
    monkeypatch.setattr(matmul._common, "sm_count", lambda: 1)


@pytest.mark.parametrize("name,shape,kernel", long_tier_after((1,), [
    ("vector_loads", (130, 132, 36), "vec_kernel"),  # K, N multiples of 4: 16-byte loads inside, edges scalar
    ("vector_loads", (130, 130, 36), "swizzled_kernel"),  # N = 130: B's rows are not 16-byte aligned
    ("thread_16x8", (260, 132, 20), "wide_vec_kernel"),  # 256 x 128 tiles: (0, 0) inside, 8 + 8 + 4 deep
    ("thread_16x8", (256, 128, 16), "wide_vec_kernel"),  # exactly one tile, all of it on the fast path
    ("thread_16x8", (257, 129, 19), "wide_kernel"),  # K = 19: scalar loads everywhere
], multi=True))
def test_vector_load_paths(name, shape, kernel, seed, one_sm):
    a, b = matmul.make_inputs(shape, seed)
    [launch] = matmul.VERSIONS[name].launches(a, b)
    assert launch.kernel is getattr(matmul, kernel)
    run_checked("matmul", name, shape, seed)


def test_vector_loads_need_aligned_rows():
    base = np.ones(4 * 8 + 1, dtype=np.float32)
    assert aligned16(np.ones((4, 8), np.float32), np.ones((8, 12), np.float32))
    assert not aligned16(np.ones((4, 6), np.float32))  # 24-byte rows: every other row starts mid-vector
    shifted = base[1:].reshape(4, 8)  # C-contiguous, but 4 bytes past an aligned start
    assert shifted.flags.c_contiguous and not aligned16(shifted)


def test_misaligned_inputs_take_the_scalar_kernel(seed, one_sm):
    a, b = matmul.make_inputs((130, 132, 36), seed)
    store = np.empty(a.size + 1, np.float32)
    shifted = store[1:].reshape(a.shape)  # the same values, 4 bytes off a 16-byte boundary
    shifted[...] = a
    if not aligned16(store[:4].reshape(1, 4)):  # numpy gave a buffer that is itself misaligned
        pytest.skip("numpy's buffer is not 16-byte aligned")
    assert matmul.VERSIONS["thread_16x8"].launches(shifted, b)[0].kernel is matmul.wide_kernel
    assert matmul.VERSIONS["thread_16x8"].launches(a, b)[0].kernel is matmul.wide_vec_kernel


@pytest.mark.gpu
def test_misaligned_device_view_is_correct(seed):
    # On the GPU the launcher sees where device memory starts: a view 4 bytes into an allocation must not take
    # the 16-byte loads (a misaligned vector load would be a fatal CUDA error, not a slow path).
    m, n, k = 1030, 1028, 516
    a, b = matmul.make_inputs((m, n, k), seed)
    store = cuda.to_device(np.concatenate([[np.float32(1.0)], a.ravel()]))
    d_a = store[1:].reshape(m, k)
    d_b = cuda.to_device(b)
    assert not aligned16(d_a) and aligned16(d_b)
    out = cuda.to_device(np.full((m, n), np.nan, np.float32))
    matmul.optimized(d_a, d_b, out=out)
    check = compare(out.copy_to_host(), matmul.reference(a, b), TOLERANCE["matmul"])
    assert check.ok, f"seed={seed}: {check}"


_PTX_CHILD = r"""
from numba import cuda, types
from gpukernels import matmul
arr = types.Array(types.float32, 2, "C")
for name in sys.argv[1:]:
    ptx, _ = cuda.compile_ptx(getattr(matmul, name).py_func, (arr, arr, arr), cc=(9, 0))
    print(name, ptx.count("ld.global.v4.f32"), ptx.count("ld.global.f32"))
"""


@pytest.mark.needs_cuda_toolchain
@pytest.mark.slow  # a compile of its own; the default tier compiles the ring (test_async_ring_compiles_to_cp_async)
def test_load4_compiles_to_16_byte_loads():
    # The whole point of load4, checked on the real compiler (no GPU needed): the 64 x 64 kernel with it has
    # 16-byte global loads on its interior path and on its (clamped) edge path (2 runs of A and 2 of B per tile,
    # before and inside the loop, on each path); the same kernel without it has none -- Numba alone never proves
    # the alignment.
    out = run_with_real_cuda(_PTX_CHILD, "small_vec_kernel", "small_tile_kernel")
    counts = {name: (int(v4), int(f32)) for name, v4, f32 in (line.split() for line in out.splitlines())}
    assert counts["small_vec_kernel"][0] == 16
    assert counts["small_tile_kernel"][0] == 0 and counts["small_tile_kernel"][1] > 0


# ----------------------------------------------------------------------------------------------------------
# Steps 16-18: skinny, split_k and the dispatcher
# ----------------------------------------------------------------------------------------------------------
from gpukernels.matmul import k16_skinny, k17_split_k  # noqa: E402


@pytest.mark.parametrize("shape,splits", [
    ((1, 130, 600), 2),  # a matrix-vector product, K in 2 slices (atomics), N ragged past 128
    ((3, 132, 600), 2),  # 4 rows per block, 16-byte loads of B (N = 132)
    ((40, 33, 300), 1),  # 16 rows per block, 3 row groups, the last ragged; no split: plain stores
    ((16, 7, 1000), 3),  # a ragged last slice
])
def test_skinny_paths(shape, splits, seed):
    m, n, k = shape
    assert k16_skinny.skinny_splits(m, n, k) == splits
    run_checked("matmul", "skinny", shape, seed)


# The other side: few columns (N <= 4), A streamed by warps of 4 rows. (M, N, K), the kernel, the slices of K
# the launch is given: 16-byte loads (K a multiple of 4) and scalar ones, every N, rows ragged in the last warp and
# the last block, whole warps past M, slices of K added by atomics (the vec ones multiples of 4 deep).
COLS_CASES = [((37, 1, 45), "skinny_cols1_kernel", 1), ((70, 3, 64), "skinny_cols3_vec_kernel", 1),
              ((33, 4, 1030), "skinny_cols4_kernel", 3), ((17, 2, 9), "skinny_cols2_kernel", 1),
              ((45, 2, 1032), "skinny_cols2_vec_kernel", 3), ((100, 1, 2048), "skinny_cols1_vec_kernel", 2),
              ((66, 4, 200), "skinny_cols4_vec_kernel", 1)]


@pytest.mark.parametrize("shape,kernel,splits", COLS_CASES, ids=[f"{m}x{n}x{k}" for (m, n, k), _, _ in COLS_CASES])
def test_few_columns_paths(shape, kernel, splits, seed):
    m, n, k = shape
    a, b = matmul.make_inputs(shape, seed)
    launches = k16_skinny.skinny_cols_launches(cuda.to_device(a), cuda.to_device(b),
                                               cuda.to_device(np.empty((m, n), np.float32)), splits)
    assert launches[-1].kernel.__name__ == kernel and launches[-1].grid == (-(-m // 32), splits)
    assert len(launches) == (2 if splits > 1 else 1)  # C zeroed first when K is split
    dc = cuda.to_device(np.full((m, n), np.nan, np.float32))
    for launch in k16_skinny.skinny_cols_launches(cuda.to_device(a), cuda.to_device(b), dc, splits):
        launch()
    check = compare(dc.copy_to_host(), matmul.reference(a, b), TOLERANCE["matmul"])
    assert check.ok, f"{kernel} at {shape}, {splits} slice(s), seed={seed}: {check}"


def test_few_columns_take_the_skinny_step_through_the_dispatcher(seed):
    """N <= 4 with M past skinny's rows: the dispatcher (and skinny itself) stream A; M <= 16 keeps the rows
    kernel, N = 5 a tile."""
    for shape in [(8192, 1, 8192), (4096, 4, 1000), (17, 3, 100)]:
        choice = matmul.choose(*shape)
        assert choice.step == "skinny" and choice.config["cols"] == shape[1], choice
        assert "bound by reading A" in choice.why
    assert "cols" not in matmul.choose(16, 1, 100).config and matmul.choose(4096, 5, 1000).step != "skinny"
    run_checked("matmul", "optimized", (45, 2, 1032), seed)
    run_checked("matmul", "skinny", (45, 3, 41), seed)


# The same kernel (64 x 64 tiles, 16-byte loads, split K) at every shape: (70, 66, 600) runs its interior block, edge
# blocks on both sides and a ragged last slice; (64, 64, 768) one whole tile in 24 slices. A third case, (130, 129,
# 520), ran those same paths on 3 x 3 tiles (21 CPU-s of CI's).
@pytest.mark.slow  # 10 CPU-s in the simulator; the default tier splits K through the workspace (ring) and the dispatcher
@pytest.mark.parametrize("shape", [(70, 66, 600), (64, 64, 768)])
def test_split_k_slices(shape, seed):
    kernel, splits = k17_split_k.split_k_plan(*shape[:2], shape[2], aligned=True)
    assert splits > 1 and kernel.split_k
    run_checked("matmul", "split_k", shape, seed)


# ----------------------------------------------------------------------------------------------------------
# Step 19: stream_k
# ----------------------------------------------------------------------------------------------------------
from gpukernels.matmul import k19_stream_k  # noqa: E402


def test_stream_k_blocks_share_only_the_last_waves():
    assert k19_stream_k.stream_k_blocks(4096, 4096, sms=132) == (264, 132)  # 512 tiles: 2 waves whole, 248 shared
    assert k19_stream_k.stream_k_blocks(4096, 4224, sms=132) == (396, 132)  # exactly 4 waves: one tile each
    assert k19_stream_k.stream_k_blocks(2048, 4096, sms=132) == (0, 132)  # 1.94 waves: all 256 shared
    assert k19_stream_k.stream_k_blocks(1024, 1024, sms=132) == (0, 32)  # fewer tiles than SMs: one each
    for m, n, sms in [(4096, 4096, 132), (6144, 6144, 132), (300, 140, 3), (5000, 3000, 7)]:
        dp, sk = k19_stream_k.stream_k_blocks(m, n, sms)
        tiles = -(-m // 256) * -(-n // 128)
        assert dp % sms == 0 and sk <= sms and tiles - dp >= sk  # each sharing block gets >= one tile's work
        assert tiles - dp < 2 * sk or tiles <= sms  # ... and < two: a tile is never cut between three blocks


@same_kernels_as("matmul.stream_k")
@pytest.mark.parametrize("shape,sms", [
    pytest.param((300, 140, 24), 3, marks=pytest.mark.slow),  # 4 edge-heavy tiles for 3 blocks: tiles 1 and 2 cut
    # between two blocks (the default tier runs the one-tile case below)
    pytest.param((520, 260, 24), 4, marks=pytest.mark.slow),  # 9 tiles: 4 whole (one per block), 5 shared by 4
    ((256, 128, 16), 1),  # one tile, one block
])
def test_stream_k_shares_tiles_correctly(shape, sms, seed, monkeypatch):
    monkeypatch.setattr(matmul._common, "sm_count", lambda: sms)
    a, b = matmul.make_inputs(shape, seed)
    da, db = cuda.to_device(a), cuda.to_device(b)
    c = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
    [launch] = matmul.stream_k.launches(da, db, out=c)
    assert launch.kernel is k19_stream_k.stream_k_vec_kernel
    dp, sk = k19_stream_k.stream_k_blocks(*shape[:2], sms)
    assert launch.grid == (dp + sk,)
    _twice_into_nan(launch, c, a, b)


def _twice_into_nan(launch, c, a, b):
    """Launched twice on one workspace, into NaN: the counts are back to zero after each launch (the next launch
    relies on it), and both results are right and the same to the bit."""
    outs = []
    for _ in range(2):
        c.copy_to_device(np.full(c.shape, np.nan, np.float32))
        launch()
        assert not launch.args[4].copy_to_host().any()
        outs.append(c.copy_to_host())
    assert np.array_equal(outs[0], outs[1])
    assert compare(outs[0], matmul.reference(a, b), TOLERANCE["matmul"]).ok


def test_stream_k_spread_shares_a_wave_over_every_slot():
    assert k19_stream_k.stream_k_blocks(1024, 1024, sms=132, spread=True) == (0, 132)
    assert k19_stream_k.stream_k_blocks(1237, 1531, sms=132, tile=(128, 128), spread=True) == (0, 132)  # 120 tiles
    assert k19_stream_k.stream_k_blocks(1237, 1531, sms=132, tile=(128, 128)) == (0, 120)
    assert k19_stream_k.stream_k_blocks(2048, 2048, sms=100, tile=(128, 128), spread=True) == (100, 100)  # 2.56


def _spread_case(shape, sms, aligned):
    """The 128 x 128 tile under stream-K's schedule over more blocks than tiles, as ``optimized`` runs it."""
    from gpukernels.matmul import k21_optimized

    a, b = matmul.make_inputs(shape, 0)
    a[0, 0], b[-1, -1], a[-1, shape[2] // 2] = 41.0, -37.5, 1e3  # outliers in the first, middle and last k tiles
    kernel = k21_optimized.SPREAD_TILE.kernels[0 if aligned else 1]
    da, db = cuda.to_device(a), cuda.to_device(b)
    assert aligned16(da, db) == aligned
    c = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
    return a, b, c, k19_stream_k.stream_k_launches(kernel, da, db, c, sms=sms)


def _parts(shape, sk, iters):
    """The most blocks that share one tile under the spread schedule (sk blocks, iters k tiles per tile)."""
    tiles = -(-shape[0] // 128) * -(-shape[1] // 128)
    starts = [j * tiles * iters // sk for j in range(sk + 1)]
    return max(sum(1 for j in range(sk) if starts[j] < (t + 1) * iters and starts[j + 1] > t * iters)
               for t in range(tiles))


# (A fifth case, (130, 100, 64) on 7 blocks -- 2 tiles x 4 k tiles, 4 blocks then 3 sharing a tile -- is
# test_race_check.py's matmul-stream_k-spread-vec: the same launch, traced and compared with float64 there; its
# workspace runs twice here on the other aligned cases. (131, 257, 37) is traced there too, and stays here: the only
# 4-byte kernel run twice.)
@pytest.mark.parametrize("shape,sms,aligned,parts", long_tier_after((0,), [
    ((131, 257, 37), 13, False, 3),  # 6 tiles x 3 k tiles over 13 blocks, 4-byte loads (K odd), a ragged last k tile
    ((200, 152, 40), 5, True, 2),  # 4 tiles x 3 k tiles over 5 blocks: 2.4 k tiles each, tiles cut between two
    ((128, 128, 16), 3, True, 1),  # one tile, one k tile: one block, the other two get nothing and are not launched
    # 9 tiles x 2 k tiles over 5 blocks (more tiles than blocks: 3.6 k tiles each, a whole tile inside a block's run
    # and cut ones at its ends); K = 32, not 64: the same schedule at half the simulator's time
    pytest.param((300, 260, 32), 5, True, 2, marks=pytest.mark.slow),
], multi=True))
@pytest.mark.slow  # 11 CPU-s in the simulator: the default tier runs stream-K through the public step
def test_stream_k_spread_sums_tiles_cut_between_three_blocks(shape, sms, aligned, parts):
    a, b, c, [launch] = _spread_case(shape, sms, aligned)
    tiles = -(-shape[0] // 128) * -(-shape[1] // 128)
    sk = launch.args[3].shape[0]
    assert launch.grid[0] <= max(sms, tiles) and sk <= sms
    if launch.grid[0] == sk:  # all of it shared: as many blocks on one tile as the case says
        assert _parts(shape, sk, -(-shape[2] // 16)) == parts
    _twice_into_nan(launch, c, a, b)


@same_kernels_as("matmul.stream_k")
@pytest.mark.slow  # 8 CPU-s in the simulator
def test_stream_k_without_aligned_rows_runs_thread_16x8s_scalar_kernel(seed, one_sm):
    shape = (520, 262, 23)  # N, K not multiples of 4
    [launch] = matmul.stream_k.launches(*matmul.make_inputs(shape, seed))
    assert launch.kernel is matmul.wide_kernel
    run_checked("matmul", "stream_k", shape, seed)


# ----------------------------------------------------------------------------------------------------------
# Step 20: async_copy (stream_k's kernel with `make_interior_kernel(stages=3)`); also the ring on the plain tile
# ----------------------------------------------------------------------------------------------------------
from gpukernels.matmul import k20_async_copy  # noqa: E402
from gpukernels.matmul._interior import make_interior_kernel  # noqa: E402

async_stream_k_kernel = k20_async_copy.async_vec_kernel
# the same ring on thread_16x8's plain schedule (no stream-K): the ring's code without the workspace paths
async_kernel = make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True, clamp=False, stages=3)


def _run_async(kernel, shape, seed, sms, times=1):
    a, b = matmul.make_inputs(shape, seed)
    a[0, 0], b[-1, -1] = 37.5, -41.0  # outliers in the first and the last tile of K
    da, db = cuda.to_device(a), cuda.to_device(b)
    c = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
    if kernel.stream_k:
        [launch] = k19_stream_k.stream_k_launches(kernel, da, db, c, sms=sms)
    else:
        [launch] = matmul._common.tiled_launch(kernel, c, (da, db, c))
    outs = []
    for _ in range(times):
        c.copy_to_device(np.full(shape[:2], np.nan, np.float32))
        launch()
        outs.append(c.copy_to_host())
    check = compare(outs[0], matmul.reference(a, b), TOLERANCE["matmul"])
    assert check.ok, f"{kernel.__name__} shape={shape} seed={seed}: {check}"
    return outs


@same_kernels_as("matmul.async_copy")
@pytest.mark.parametrize("shape,sms", long_tier_after((1,), [
    ((256, 128, 16), 1),  # one interior tile, two k tiles: fewer tiles than the ring has stages
    ((256, 128, 44), 1),  # K = 5 x 8 + 4: the last copy reads 4 of 8 k and fills the rest with zeros
    # 9 tiles, edge blocks on the register path: 6 whole, then 3 shared by the 2 sharing blocks (the middle one cut)
    # -- 25 s in the simulator, the long tier
    pytest.param((520, 260, 36), 2, marks=pytest.mark.slow),
    ((300, 132, 4), 3),  # one k tile, shorter than bk
], multi=True))
def test_async_ring_is_correct(shape, sms, seed):
    outs = _run_async(async_stream_k_kernel, shape, seed, sms, times=2)
    assert np.array_equal(outs[0], outs[1])  # the sums do not depend on which copy landed first
    if shape != LARGE_RING:
        _run_async(async_kernel, shape, seed, sms)


# The plain schedule's ring (the same factory kernel without stream-K's schedule and workspace) is not run again at
# the large shape (12 CPU-s): what that shape adds is stream-K's schedule. The plain kernel's ring (interior blocks)
# runs whole and with a ragged last copy at (256, 128, 16) and (256, 128, 44), its edge blocks at (300, 132, 4); the
# edge blocks' guarded loads over several k tiles are the code the stream-K kernel runs at the large shape (the
# factory's same `clamp=False` path).
LARGE_RING = (520, 260, 36)


@same_kernels_as("matmul.async_copy")
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2052, 2056, 260), (1000, 1032, 1004), (4096, 4096, 4096), (2048, 4096, 2052)])
def test_async_ring_is_correct_gpu(shape, seed):
    # At sizes where every SM runs blocks and many k tiles are in flight: a missing wait or barrier in the ring
    # shows up here as wrong sums, not in the simulator (which copies at once).
    outs = _run_async(async_stream_k_kernel, shape, seed, None, times=2)
    assert np.array_equal(outs[0], outs[1])
    _run_async(async_kernel, shape, seed, None)


_ASYNC_PTX_CHILD = r"""
from numba import cuda, types
from gpukernels.matmul._interior import make_interior_kernel
arr = types.Array(types.float32, 2, "C")
k = make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True, clamp=False, stages=3)
ptx, _ = cuda.compile_ptx(k.py_func, (arr, arr, arr), cc=(9, 0))
print(ptx.count("cp.async.ca.shared.global"), ptx.count("cp.async.cg.shared.global"),
      ptx.count("cp.async.wait_group 1;"), ptx.count("ld.global.v4.f32"))
"""


@pytest.mark.slow  # 7 CPU-s: a compile of its own
@pytest.mark.needs_cuda_toolchain
def test_async_ring_compiles_to_cp_async():
    # The interior loop copies with cp.async: 8 four-byte copies of A for each 16-byte copy of B (in every copy
    # of the tile code: full tiles and the one that crosses K, prologue and loop, however LLVM unrolls them), and
    # waits for all but the newest group. No 16-byte load into registers is left: the edge blocks of this
    # kernel (clamp=False) guard scalar loads, as thread_16x8's do.
    ca, cg, waits, v4 = (int(v) for v in run_with_real_cuda(_ASYNC_PTX_CHILD).split())
    assert cg >= 2 and ca == 8 * cg and waits >= 1 and v4 == 0


@pytest.mark.slow  # 4 CPU-s; the default tier runs the ring itself (test_async_ring_is_correct)
@same_kernels_as("matmul.async_copy")
def test_async_copy_is_stream_k_with_the_ring(seed, one_sm):
    shape = (520, 260, 36)  # 9 tiles on one SM: whole tiles, then tiles cut between sharing blocks
    a, b = matmul.make_inputs(shape, seed)
    [launch] = matmul.async_copy.launches(a, b)
    assert launch.kernel is k20_async_copy.async_vec_kernel and launch.kernel.stages == 3 and launch.kernel.stream_k
    assert launch.grid == matmul.stream_k.launches(a, b)[0].grid  # the same schedule as step 19
    ragged = (300, 131, 37)  # rows not 16-byte aligned: thread_16x8's scalar kernel, as stream_k does
    [launch] = matmul.async_copy.launches(*matmul.make_inputs(ragged, seed))
    assert launch.kernel is matmul.wide_kernel
    run_checked("matmul", "async_copy", ragged, seed)


# (test_async_copy_runs_whole_and_cut_tiles_on_one_sm ran the step at (520, 260, 36) on one SM: 8 whole tiles and a
# ninth on the one sharing block, nothing cut. test_async_ring_is_correct runs the same kernel at that shape on two
# SMs -- 6 whole tiles, then 3 shared by 2 blocks, the middle one cut -- and test_async_copy_is_stream_k_with_the_ring
# checks the step's own launch at that shape and runs the step on unaligned rows: 11 CPU-s of CI's.)


def test_async_copy_falls_back_without_cp_async(monkeypatch, seed):
    # Before sm_80 there is no cp.async: the step (and the dispatcher) run stream_k's register path instead.
    monkeypatch.setattr(k20_async_copy, "has_async_copy", lambda: False)
    a, b = matmul.make_inputs((520, 260, 36), seed)
    assert matmul.async_copy.launches(a, b)[0].kernel is matmul.k19_stream_k.stream_k_vec_kernel
    assert k20_async_copy.async_copy_kernel() is matmul.k19_stream_k.stream_k_vec_kernel


def test_dispatcher_regimes_follow_readable_thresholds():
    choose = matmul.optimized.choose
    assert choose(1, 8192, 8192).step == "skinny"
    assert choose(matmul.k16_skinny.SKINNY_MAX_M + 1, 8192, 8192).step != "skinny"
    big = choose(4096, 4096, 4096)  # 3.88 waves of the largest tile: the last shared out, tiles copied by cp.async
    assert big.step == "async_copy" and big.config["stream_k"] and big.config["stages"] == 3
    # the ring and stream-K need aligned rows; with 4-byte loads the 128 x 128 tile outruns the 256 x 128 (measured)
    assert choose(4096, 4096, 4096, aligned=False).step == "swizzled"
    assert choose(1024, 1024, 1024).step != "async_copy"  # 32 tiles of 256 x 128: fewer than the SMs
    assert choose(4095, 4097, 4093, aligned=False).config["vec"] is False
    big_k = choose(256, 256, 65536)
    assert big_k.step == "split_k" and big_k.config["splits"] > 1  # 16 tiles of 64 x 64 cannot fill 132 SMs
    for shape in [(1, 1, 1), (17, 5, 3), (300, 200, 100), (2048, 11008, 4096)]:
        c = choose(*shape)
        assert c.why and c.step in matmul.VERSIONS, c


def test_rows_not_16_byte_aligned_weigh_each_tiles_own_cost(monkeypatch):
    # 4-byte loads cost each tile differently (Tile.scalar_cost, fitted to pairs of shapes of the same work, H100):
    # the same work picks differently by alignment, as measured
    from gpukernels.matmul import k21_optimized as opt

    choose = matmul.optimized.choose
    for tile in opt.TILES + (opt.SPREAD_TILE,):
        assert all(1.0 <= c < 1.3 for c in tile.scalar_cost), tile.name
    # 99 tiles of 128 x 128 for 132 SMs: aligned, the 128-thread 64 x 64 tile (78.8 us against 82.1 spread); with
    # 4-byte loads it pays 1.12 and spread 1.06 (91.2 against 85.9)
    assert choose(1112, 1332, 776, aligned=True, sms=132).config["tile"] == "64x64/128"
    assert choose(1111, 1333, 777, aligned=False, sms=132).step == "stream_k"
    # 2.06 and 4.09 waves of 128 x 128 tiles: aligned rows have stream-K's 256 x 128 ring for the part-empty last
    # round; without it the spread schedule evens it out (499 us against 541-544 for the next candidates; 2.00 ms
    # against 2.04-2.25)
    assert choose(2100, 2100, 2000, aligned=True, sms=132).step == "async_copy"
    assert choose(2047, 2049, 2047, aligned=False, sms=132).step == "stream_k"
    assert choose(3384, 2548, 3968, aligned=True, sms=132).step == "async_copy"
    assert choose(3382, 2549, 3969, aligned=False, sms=132).step == "stream_k"
    # rounds at least SPREAD_FILL full leave spread nothing to gain: 1040 tiles in 8 rounds of 132 (98.5%); 120
    # tiles for 132 SMs (91%; 3000 x 600 x 2000 measured spread 5% slower than the whole tiles)
    assert 1040 / 1056 > 120 / 132 > opt.SPREAD_FILL
    assert choose(3327, 5119, 2001, aligned=False, sms=132).step == "swizzled"
    assert choose(3000, 600, 2000, aligned=True, sms=132).step == "vector_loads"
    monkeypatch.setattr(opt, "SPREAD_FILL", 1.0)  # the estimate alone would spread both
    assert choose(3327, 5119, 2001, aligned=False, sms=132).step == "stream_k"
    assert choose(3000, 600, 2000, aligned=True, sms=132).step == "stream_k"


def test_small_products_take_the_128_thread_tile():
    # Too few tiles to give each SM's four schedulers a warp from 64-thread blocks: the 64 x 64 tile of 128
    # threads, in a few slices of K (H100 sweeps, benchmarks/NOTES.md). Once the SMs are full, larger tiles win
    # again -- the 128 x 128 tile spread evenly over the SMs where its tiles fill between half a wave and two.
    choose = matmul.optimized.choose
    for shape in [(256, 256, 256), (512, 512, 512), (320, 1280, 640), (256, 256, 4096), (128, 128, 32768)]:
        c = choose(*shape, sms=132)
        assert c.config["tile"] == "64x64/128" and "64 x 64 (128 threads)" in c.why, c
    assert choose(512, 512, 512, sms=132).config["splits"] in (2, 3, 4)  # 64 tiles: a few slices, not 8
    assert choose(1536, 1536, 1536, sms=132).step == "stream_k"  # 144 tiles of 128 x 128: 1.09 waves, spread
    assert choose(1000, 1000, 1000, sms=132).config["tile"] == "128x128"  # ragged edges: 2 slices of 128 x 128
    # no slice count past 64: the adds into one element of C queue in L2
    assert max(s for _, s, _ in choose(64, 64, 1 << 20, sms=132).candidates) == 64


@pytest.mark.parametrize("aligned", long_tier_after((1,), [True, False]), ids=["16-byte", "4-byte"])
@pytest.mark.parametrize("tile", long_tier_after(1, [t.name for t in matmul.k21_optimized.TILES]))
def test_every_tile_the_estimate_weighs_is_correct(tile, aligned, seed):
    """Each tile of ``TILES``, whole and in 3 slices of K, on a product ragged along M, N and K (partial edge
    blocks, a short last slice), output NaN-poisoned, float64 reference."""
    from gpukernels.matmul._common import tiled_launch

    t = next(t for t in matmul.k21_optimized.TILES if t.name == tile)
    m, n, k = (70, 72, 100) if aligned else (65, 67, 99)
    a, b = matmul.make_inputs((m, n, k), seed)
    ref = matmul.reference(a, b)
    for pair, splits in [(t.kernels, 1)] + ([(t.split_kernels, 3)] if t.split_kernels else []):
        c = np.full((m, n), np.nan, np.float32)
        dev = [cuda.to_device(x) for x in (a, b, c)]
        for launch in tiled_launch(pair[0 if aligned else 1], dev[2], tuple(dev), splits):
            launch()
        check = compare(dev[2].copy_to_host(), ref, TOLERANCE["matmul"])
        assert check.ok, f"{tile} x{splits}: {check}"


def test_few_slices_meet_in_a_workspace_and_many_by_atomics():
    choose = matmul.optimized.choose
    for shape in [(384, 384, 384), (512, 512, 512), (768, 768, 768), (1000, 1000, 1000)]:
        c = choose(*shape, sms=132)
        assert c.step == "split_k" and c.config["workspace"] and "workspace" in c.why, c
    # many slices of few tiles: the last block of a tile would sum them all alone
    for shape in [(256, 256, 4096), (128, 128, 32768), (256, 256, 65536)]:
        c = choose(*shape, sms=132)
        assert c.config["splits"] >= 16 and "workspace" not in c.config and "by atomics" in c.why, c
    # partials past a third of L2 would go through HBM: atomics into a C that stays in L2 (1536^3 in 4 slices: 38 MB)
    big = choose(1536, 1536, 1536, sms=132)
    assert any(s > 1 for _, s, _ in big.candidates), big
    k21 = matmul.k21_optimized
    assert not any(t.endswith("workspace") and 4 * 1536 * 1536 * s > k21.WORKSPACE_MAX_BYTES for t, s, _ in big.candidates)
    # both ways weighed at every slice count of every tile that splits
    cands = choose(512, 512, 512, sms=132).candidates
    ways = {(t, s) for t, s, _ in cands if s > 1}
    assert ways and all((t + " workspace", s) in ways for t, s in ways if not t.endswith("workspace"))
    assert all(est > 0 for _, _, est in cands)


@pytest.mark.slow  # 4 CPU-s; the default tier runs the workspace split (test_split_through_a_workspace_...)
@pytest.mark.parametrize("aligned", long_tier_after(1, [False, True]), ids=["4-byte", "16-byte"])
def test_optimized_runs_the_workspace_split_when_it_chooses_it(monkeypatch, aligned, seed):
    """The simulator's shapes are too small for the rule to choose the workspace (it does from ~384^3 on 132 SMs):
    the choice is made for it, and ``optimized`` must launch the workspace kernel, no zero pass, and be right on a
    ragged product, NaN-poisoned, twice (the fast path keeps the workspace, whose counts must be back at zero)."""
    import dataclasses

    k21 = matmul.k21_optimized
    real = k21.choose

    def forced(m, n, k, aligned=True, sms=None):
        return dataclasses.replace(real(m, n, k, aligned, sms), step="split_k", config={
            "tile": "64x64/128", "splits": 3, "vec": aligned, "workspace": True})

    monkeypatch.setattr(k21, "choose", forced)
    shape = (70, 72, 100) if aligned else (65, 67, 99)
    a, b = matmul.make_inputs(shape, seed)
    names = [launch.kernel.py_func.__name__ for launch in matmul.optimized.launches(a, b)]
    assert len(names) == 1 and names[0].endswith("_fixup_kernel"), names
    assert ("_async3_" in names[0]) == aligned, names  # aligned rows: the tile's cp.async ring
    for _ in range(2):
        run_checked("matmul", "optimized", shape, seed)


# (The 4-byte twin, fixup_twin(quad_split_kernel), is what optimized launches for unaligned rows: test_optimized_runs_
# the_workspace_split_when_it_chooses_it[4-byte] runs it at this very shape, in 3 slices, twice on one workspace --
# a count left non-zero fails its second run. Its slice-order sum is the fixup code of the two twins here.)
@pytest.mark.parametrize("path", long_tier_after((1,), ["16-byte", "ring"]))
def test_split_through_a_workspace_is_correct_and_leaves_its_counts_zero(path, seed):
    """Slices of K meeting in a workspace (the last to arrive sums them in slice order) instead of by atomics into
    C, each k tile through registers (16-byte or 4-byte loads) or by the cp.async ring. Ragged along M, N and K, 3
    slices, NaN-poisoned output; run twice
    on the same workspace, so a count left non-zero by the first run would show as a wrong second one."""
    from gpukernels.matmul._common import fixup_launch
    from gpukernels.matmul._interior import fixup_twin

    k21 = matmul.k21_optimized
    aligned = path != "4-byte"
    m, n, k = (70, 72, 100) if aligned else (65, 67, 99)
    kernel = {"16-byte": fixup_twin(k21.quad_split_vec_kernel), "4-byte": fixup_twin(k21.quad_split_kernel),
              "ring": k21.quad_ring_fixup_kernel}[path]
    a, b = matmul.make_inputs((m, n, k), seed)
    ref = matmul.reference(a, b)
    dev = [cuda.to_device(x) for x in (a, b, np.full((m, n), np.nan, np.float32))]
    launches = fixup_launch(kernel, dev[2], tuple(dev), 3)
    outs = []
    for _ in range(2):
        dev[2].copy_to_device(np.full((m, n), np.nan, np.float32))
        for launch in launches:
            launch()
        outs.append(dev[2].copy_to_host())
        assert compare(outs[-1], ref, TOLERANCE["matmul"]).ok
        assert not np.any(launches[0].args[-1].copy_to_host() if hasattr(launches[0].args[-1], "copy_to_host")
                          else launches[0].args[-1])  # every tile's count back to zero
    assert np.array_equal(outs[0], outs[1])  # summed in slice order: the same bits whichever slice came last


# (70, 66, 600) is split_k's: test_split_k_slices runs it in the default tier
@pytest.mark.parametrize("shape", [(2, 70, 300), pytest.param((70, 66, 600), marks=pytest.mark.slow), (31, 33, 17)])
def test_optimized_runs_what_it_chose(shape, seed):
    a, b = matmul.make_inputs(shape, seed)
    choice = matmul.optimized.choose(shape[0], shape[1], shape[2], aligned16(a, b))
    names = [launch.kernel.py_func.__name__ for launch in matmul.optimized.launches(a, b)]
    assert ("skinny" in names[-1]) == (choice.step == "skinny")
    atomics = (choice.config.get("splits", 1) > 1 or choice.step == "split_k") and not choice.config.get("workspace")
    assert (names[0] == "zero_kernel") == atomics
    run_checked("matmul", "optimized", shape, seed)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [s for shapes in matmul.SHAPES["suite"].values() for s in shapes],
                         ids=lambda s: "x".join(map(str, s)))
def test_optimized_on_every_suite_shape_gpu(shape, seed):
    """The dispatcher on the suite's real shapes, NaN-poisoned output, float64 reference on the GPU (torch)."""
    torch = pytest.importorskip("torch")
    a, b = (torch.from_numpy(x).cuda() for x in matmul.make_inputs(shape, seed))
    ref = torch.mm(a.double(), b.double()).float().cpu().numpy()
    out = cuda.to_device(np.full(ref.shape, np.nan, np.float32))
    matmul.optimized(cuda.as_cuda_array(a), cuda.as_cuda_array(b), out=out)
    check = compare(out.copy_to_host(), ref, TOLERANCE["matmul"])
    assert check.ok, f"{shape} seed={seed} ({matmul.optimized.choose(*shape)}): {check}"
