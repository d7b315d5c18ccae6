"""The per-shape choices: what each dispatcher picks follows its documented rule, and every path it can
pick is correct on ragged shapes in the simulator (the suite's real shapes run in the GPU suite: test_lessons)."""

import numpy as np
import pytest

from gpukernels import cbr, matmul, softmax
from gpukernels._launch import LaunchError
from gpukernels.check import TOLERANCE, compare
from gpukernels.matmul import k16_skinny, k18_narrow, k21_optimized

from ._tiers import long_tier_after
from .test_lessons import run_checked

# ----------------------------------------------------------------------------------------------------------
# matmul
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,step", [
    ((1, 8192, 8192), "skinny"), ((16, 4096, 4096), "skinny"),  # few rows: B streamed once
    ((64, 8192, 8192), "narrow"), ((17, 300, 1000), "narrow"),  # a few more rows: the 64 x 256 tile
    ((8192, 32, 4096), "narrow"), ((200, 20, 600), "narrow"),  # few columns: 128 x 32
    ((4096, 4096, 64), "vector_loads"),  # small K: the 64 x 64 tile
    ((256, 256, 65536), "split_k"), ((4096, 4096, 4096), "async_copy"), ((6144, 6144, 6144), "async_copy"),
    ((2048, 11008, 4096), "async_copy"),  # 688 tiles of 256 x 128 = 5.21 waves
    ((1280, 1792, 1024), "stream_k"), ((1301, 1107, 1999), "stream_k"),  # 140 and 99 tiles of 128 x 128, spread
])
def test_matmul_choose_follows_its_rules(shape, step):
    choice = matmul.optimized.choose(*shape)
    assert choice.step == step, str(choice)
    assert choice.why  # says why, in words
    if step == "vector_loads":
        assert choice.config["tile"] == "64x64x8"


def test_skinny_slices_never_start_a_second_round():
    # 4 blocks of the shared-A kernel per SM hold 528 blocks: M = 16 and N = 8192 is 64 column blocks x 8 slices.
    for m, n, k in [(16, 8192, 8192), (8, 4096, 65536), (1, 8192, 8192), (3, 1000, 9000)]:
        rows = k16_skinny.skinny_rows(m)
        per_sm = k16_skinny.SKINNY_SHARED_BLOCKS_PER_SM if rows >= 4 else k16_skinny.SKINNY_BLOCKS_PER_SM
        splits = k16_skinny.skinny_splits(m, n, k, sms=132)
        blocks = -(-n // k16_skinny.SKINNY_TILE_N) * -(-m // rows) * splits
        assert blocks <= 132 * per_sm or splits == 1
        assert k // splits >= k16_skinny.SKINNY_MIN_K or splits == 1
    assert k16_skinny.skinny_splits(16, 8192, 8192, sms=132) == 8


def test_narrow_slices_fill_the_sms_with_warps():
    kernel = k18_narrow.narrow_kernel(64, 8192, True)
    assert kernel.tile == (64, 256)
    assert k18_narrow.narrow_splits(64, 8192, 8192, kernel, sms=132) == 4  # 32 tiles x 8 warps x 4 >= 7 x 132
    kernel = k18_narrow.narrow_kernel(8192, 32, True)
    assert kernel.tile == (128, 32)
    assert k18_narrow.narrow_splits(8192, 32, 4096, kernel, sms=132) == 8
    # a shallow K is never sliced thinner than NARROW_MIN_K
    assert k18_narrow.narrow_splits(64, 256, 300, k18_narrow.narrow_kernel(64, 256, True), sms=132) == 1


# What the dispatcher runs at each (optimized.choose): (16, 130, 300) skinny, A's 16 rows in shared memory;
# (5, 260, 600) skinny, 8 rows, K in 2 slices; (40, 300, 260) the 64 x 256 narrow tile, ragged along both sides;
# (300, 20, 520) the 128 x 32 narrow tile, K in 2 slices; (130, 72, 40) the 64 x 64 tile with 16-byte loads, edge
# blocks on both sides; (64, 256, 64) the 64 x 256 tile exactly. Two more cases were these paths again: (70, 200,
# 48), (130, 72, 40)'s kernel and edges; and (40, 300, 520), the 64 x 256 tile in 2 slices -- (40, 300, 260)'s
# blocks, each over two slices of K as (300, 20, 520)'s are on the 128 x 32 tile (the factory's same split code):
# the file's slowest case in the simulator, 17 CPU-s.
@pytest.mark.parametrize("shape", long_tier_after((0, 4), [
                                   (16, 130, 300), (5, 260, 600), (40, 300, 260), (300, 20, 520), (130, 72, 40),
                                   (64, 256, 64)]))
def test_matmul_dispatched_paths_are_correct(shape, seed):
    # skinny with A in shared memory (rows 8 and 16), the narrow tiles (ragged along both sides), clamped edge
    # blocks with 16-byte loads (K and N multiples of 4), the small-K tile
    run_checked("matmul", "optimized", shape, seed)


@pytest.mark.slow  # 6 CPU-s in the simulator
def test_skinny_shared_rows_32_is_correct(seed):
    from numba import cuda

    a, b = matmul.make_inputs((40, 132, 600), seed)
    c = cuda.to_device(np.full((40, 132), np.nan, np.float32))
    for launch in k16_skinny.skinny_launches(cuda.to_device(a), cuda.to_device(b), c, rows=32, splits=2):
        launch()
    assert compare(c.copy_to_host(), matmul.reference(a, b), TOLERANCE["matmul"]).ok


# ----------------------------------------------------------------------------------------------------------
# CBR
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,bn,sliced", [
    ((1, 512, 7, 7, 512, 3, 3), 128, True),  # batch 1, deep: 8 tiles for 132 SMs, 16 of Winograd's 2 x 2
    ((1, 256, 14, 14, 256, 3, 3), 128, True),  # 49 tiles of 2 x 2: too few for Winograd
    ((1, 64, 56, 56, 64, 5, 5), 128, True),  # not 3 x 3: the GEMM, sliced
    ((16, 128, 28, 28, 128, 1, 1), 256, False),  # 1 x 1: 98 tiles, more than half busy, slicing costs more
    ((32, 32, 56, 56, 64, 3, 3), 256, False),  # 392 tiles: a full wave (32 input channels: not Winograd)
    ((16, 48, 56, 56, 64, 3, 3), 256, False),  # 196 tiles: more than one per SM
])
def test_cbr_choose_follows_its_rule(shape, bn, sliced):
    choice = cbr.optimized.choose(*shape[:5], shape[5], shape[6], sms=132)
    assert choice.step != "winograd", str(choice)
    assert choice.config["bn"] == bn and (choice.config["splits"] > 1) == sliced, str(choice)
    n, c, h, w, k, r, s = shape
    ho, wo = h + 2 - r + 1, w + 2 - s + 1
    tiles = -(-n * ho * wo // bn) * -(-k // cbr.IG_BM)
    if sliced:  # the fewest slices that fill one wave
        assert tiles * choice.config["splits"] >= 132 > tiles * choice.config["splits"] // 2


@pytest.mark.parametrize("shape,winograd", [
    ((16, 128, 28, 28, 128, 3, 3), True), ((16, 512, 7, 7, 512, 3, 3), True), ((1, 64, 56, 56, 64, 3, 3), True),
    ((1, 128, 28, 28, 128, 3, 3), True),
    ((128, 128, 28, 28, 128, 3, 3), True),  # 784 GEMM tiles, but 128 channels: deep enough whatever the GEMM's tiles
    ((24, 160, 9, 11, 136, 3, 3), True),  # ragged deep channels
    ((16, 64, 56, 56, 64, 3, 3), True),  # 196 GEMM tiles for 132 SMs: the GEMM fills them, F(4x4) still wins
    ((64, 64, 56, 56, 64, 3, 3), True),  # 784 GEMM tiles, 64 channels
    ((16, 32, 28, 28, 64, 3, 3), False),  # 32 input channels: too shallow to repay the transforms
    ((16, 64, 28, 28, 63, 3, 3), False),  # 63 output channels
    ((8, 3, 224, 224, 64, 3, 3), False),  # 3 input channels
    ((16, 256, 14, 14, 256, 3, 5), False),  # 3 x 5: F(m x m, 3 x 3) does not apply
    ((1, 512, 7, 7, 512, 3, 3), False),  # 16 tiles of 2 x 2: split_c's regime
    ((1, 256, 14, 14, 256, 3, 3), False),  # 49 tiles of 2 x 2
])
def test_cbr_choose_takes_winograd_by_its_thresholds(shape, winograd):
    n, c, h, w, k, r, s = shape
    choice = cbr.optimized.choose(n, c, h, w, k, r, s, sms=132)
    assert (choice.step == "winograd") == winograd, str(choice)
    # the thresholds, read back: each case above sits on one side of exactly what the docstring says
    two_by_two = n * -(-h // 2) * -(-w // 2)
    expected = ((r, s) == (3, 3) and two_by_two >= cbr.WINOGRAD_MIN_TILES and min(c, k) >= cbr.WINOGRAD_MIN_CHANNELS)
    assert expected == winograd
    if winograd:
        # the GEMM's tiles do not enter: on fewer SMs (where they would fill them) the choice is the same step
        gemm_tiles = -(-n * h * w // 256) * -(-k // cbr.IG_BM)
        assert cbr.optimized.choose(n, c, h, w, k, r, s, sms=max(1, gemm_tiles // 2)).step == "winograd"
        m = cbr.output_tile(n, h, w)  # padding 1: the output is the input's size
        assert choice.config["m"] == m
        p = n * -(-h // m) * -(-w // m)
        assert choice.config["tile"] == cbr.products_tile(k, p, 132, (m + 2) ** 2)


@pytest.mark.parametrize("k,p,tile", [
    (128, 25088, (128, 128)),  # 128 x 28^2 images: 3136 blocks of 128 x 128
    (512, 256, (128, 128)),  # 16 x 7^2: 128 blocks of 128 x 128, at least half a wave of 132 SMs
    (128, 196, (64, 128)),  # 1 x 28^2: 32 blocks of 128 x 128, a quarter wave -- the small tile makes twice as many
    (64, 100000, (64, 128)),  # 64 output channels: a 128-row tile would be half empty
    (127, 100000, (64, 128)),
])
def test_winograd_products_tile_by_its_threshold(k, p, tile):
    assert cbr.products_tile(k, p, sms=132) == tile
    large = 16 * -(-k // 128) * -(-p // 128)
    assert (tile == (128, 128)) == (k >= 128 and large >= 0.5 * 132)


def test_winograd_products_tile_counts_f4x4s_36_positions():
    # 1 x 28^2 as 4 x 4 tiles: 49 tiles, so one column of blocks -- 16 positions make 16 blocks of 128 x 128 for 132
    # SMs (a small tile), 36 make 36 (still under half a wave), 80 output tiles make 72, which is over it
    assert cbr.products_tile(128, 49, 132, 16) == cbr.products_tile(128, 49, 132, 36) == (64, 128)
    assert cbr.products_tile(128, 130, 132, 16) == (64, 128) and cbr.products_tile(128, 130, 132, 36) == (128, 128)


@pytest.mark.parametrize("n,ho,wo,m", [
    (256, 1, 9, 2), (256, 2, 2, 2), (256, 9, 2, 2), (256, 3, 3, 4), (256, 4, 4, 4), (256, 5, 5, 2), (256, 6, 6, 2),
    (256, 5, 7, 4), (256, 7, 7, 4), (16, 14, 14, 4), (1, 28, 28, 2), (1, 56, 56, 2), (1, 1823, 781, 4),
    (16, 7, 7, 2),  # 64 tiles of 4 x 4: one column of 128-wide product blocks, half empty
    (1, 64, 64, 4), (1, 63, 64, 4), (1, 60, 64, 2),  # 256 tiles of 4 x 4 (16 x 16), 256, 240
])
def test_winograd_output_tile_by_its_rule(n, ho, wo, m):
    assert cbr.output_tile(n, ho, wo) == m
    f2, f4 = 16 * -(-ho // 2) * -(-wo // 2), 36 * -(-ho // 4) * -(-wo // 4)
    assert (m == 4) == (f4 < f2 and n * -(-ho // 4) * -(-wo // 4) >= cbr.F4_MIN_TILES)


@pytest.mark.slow  # 8 CPU-s in the simulator; the rule itself is tested by test_cbr_choose_takes_winograd_by_its_thresholds
def test_cbr_optimized_runs_winograd_in_its_regime(seed):
    # 64 channels, 128 tiles of 2 x 2, 2 implicit-GEMM tiles: rule 0 holds, so the dispatcher plans Winograd's four
    # launches -- and its result, traffic formula included, is Winograd's
    shape = (2, 64, 16, 16, 64, 3, 3)
    x, w, b = cbr.make_inputs(shape, seed)
    assert cbr.choice_for(x.shape, w.shape).step == "winograd"
    kernels = [la.kernel for la in cbr.optimized.launches(x, w, b)]
    assert kernels == [la.kernel for la in cbr.winograd.launches(x, w, b)] and len(kernels) == 4
    assert cbr.global_loads("optimized", x.shape, w.shape) == cbr.global_loads("winograd", x.shape, w.shape)
    run_checked("cbr", "optimized", shape, seed)


@pytest.mark.parametrize("shape", long_tier_after((1,), [(1, 20, 7, 9, 70, 3, 3), (2, 9, 5, 6, 3, 3, 3),
                                                        (1, 5, 6, 4, 9, 1, 1), (1, 3, 6, 4, 2, 5, 5)]))
def test_split_c_is_correct_on_ragged_slices(shape, seed):
    # more slices than channels, empty last slices, 1x1 and 5x5 filters, K past one 64-channel block
    run_checked("cbr", "split_c", shape, seed)
    run_checked("cbr", "optimized", shape, seed)


def test_split_c_with_more_slices_than_channel_tiles(seed):
    x, w, b = cbr.make_inputs((1, 3, 5, 7, 4, 3, 3), seed)
    y = np.full((1, 4, 5, 7), np.nan, np.float32)
    from numba import cuda

    dy = cuda.to_device(y)
    launches = cbr.igemm_launches(cuda.to_device(x), cuda.to_device(w), cuda.to_device(b), dy, 1, bn=64,
                                  min_blocks=None, splits=16)
    assert launches[1].grid[2] == 3  # capped at the channels' k tiles
    for launch in launches:
        launch()
    assert compare(dy.copy_to_host(), cbr.reference(x, w, b), TOLERANCE["cbr"]).ok


@pytest.mark.parametrize("shape, bn, splits", [
    ((1, 5, 7, 9, 150, 3, 3), 64, 1),  # K past one 128-channel block, last block 22 channels; pixels past the end
    ((2, 3, 6, 5, 131, 3, 3), 128, 2),  # sliced, 3 channels in 2 slices
    ((1, 9, 5, 6, 129, 1, 1), 64, 1),  # 1x1: 8 channels per k tile, the last chunk partial
    ((1, 3, 6, 4, 40, 5, 5), 64, 1),  # 5x5: the filter cut into row groups; K below one block
])
def test_igemm_with_16_channels_per_thread(shape, bn, splits, seed):
    # The 128-channel tile (16 x 8 outputs per thread, matmul's thread_16x8 inner loop): every output is written,
    # from the right channel (a wrong second-half channel offset fails K = 150 and 131), into a NaN-poisoned y.
    from numba import cuda

    k = shape[4]
    x, w, b = cbr.make_inputs(shape, seed)
    ref = cbr.reference(x, w, b)  # padding 1: a 1x1 filter's output is 2 pixels wider and taller than x
    dy = cuda.to_device(np.full(ref.shape, np.nan, np.float32))
    launches = cbr.igemm_launches(cuda.to_device(x), cuda.to_device(w), cuda.to_device(b), dy, 1, bn=bn,
                                  min_blocks=None, splits=splits, bm=128)
    assert launches[-1 if splits == 1 else 1].grid[1] == -(-k // 128)
    for launch in launches:
        launch()
    assert compare(dy.copy_to_host(), ref, TOLERANCE["cbr"]).ok


def test_igemm_rejects_other_channel_tiles():
    from numba import cuda

    x, w, b = cbr.make_inputs((1, 3, 5, 7, 4, 3, 3), 0)
    with pytest.raises(LaunchError, match="bm must be one of"):
        cbr.igemm_launches(*(cuda.to_device(a) for a in (x, w, b)), cuda.device_array((1, 4, 5, 7), np.float32), bm=96)


# ----------------------------------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(37, 16), (5, 12), (9, 4), (33, 8), (70, 128), (3, 100), (20, 64)])
def test_softmax_vector_rows(shape, seed):
    (x,) = softmax.make_inputs(shape, seed)
    cfg = softmax.with_vector_access(softmax.optimized_config(shape[1]), shape[1], True)
    assert cfg.vec
    out = np.full(shape, np.nan, np.float32)
    softmax.optimized(x, out=out)
    assert compare(out, softmax.reference(x), TOLERANCE["softmax"]).ok


def test_softmax_vector_access_only_where_it_is_safe():
    v = softmax.with_vector_access
    assert not v(softmax.optimized_config(16), 16, False).vec  # not aligned
    assert not v(softmax.optimized_config(13), 13, True).vec  # runs of 4 need n % 4 == 0
    assert not v(softmax.optimized_config(256), 256, True).vec  # past VEC_MAX_N
    assert not v(softmax.optimized_config(4096), 4096, True).vec  # a block per row
    assert softmax.describe(np.zeros((4, 16), np.float32)).startswith("vector_rows")


@pytest.mark.parametrize("m, n, aligned, step", [
    (1, 2**20, True, "split_row"), (131, 32769, True, "split_row"),  # fewer rows than SMs, too long for the chip
    (1, 32768, True, "split_row"), (32, 24576, True, "split_row"),  # long rows on fewer than a quarter of the SMs
    (33, 32768, True, "registers"), (64, 32000, True, "registers"),  # more rows: a block per row is faster
    (131, 8192, True, "registers"), (1, 24575, True, "registers"),  # shorter rows: one block streams it quicker
    (200, 2**20, True, "online"), (132, 32769, True, "online"),  # past MAX_CACHED, enough rows
    (132, 32768, True, "registers"), (4096, 4096, True, "registers"), (100, 513, True, "registers"),
    (100, 512, True, "warp_rows"), (100, 132, True, "warp_rows"),  # past VEC_MAX_N
    (65536, 128, True, "vector_rows"), (65536, 128, False, "warp_rows"), (10, 13, True, "warp_rows"),
    (2**20, 16, True, "vector_rows"), (7, 1, True, "warp_rows"),
])
def test_softmax_choose_rules(m, n, aligned, step):
    """The dispatcher's rule: thresholds on the row length and on the rows against the SMs, never a shape list."""
    choice = softmax.optimized.choose(m, n, aligned, sms=132)
    assert choice.step == step, choice
    assert choice.step in softmax.VERSIONS and choice.why and str(n) in choice.why
    assert choice.step in softmax.optimized.steps


def test_softmax_choose_follows_the_sm_count():
    assert softmax.optimized.choose(20, 32768, sms=132).step == "split_row"
    assert softmax.optimized.choose(20, 32768, sms=64).step == "registers"
    assert softmax.optimized.choose(100, 40000, sms=132).step == "split_row"
    assert softmax.optimized.choose(100, 40000, sms=64).step == "online"


@pytest.mark.parametrize("name", ["vector_rows", "warp_rows", "registers"])
def test_softmax_steps_fall_back_where_their_idea_does_not_apply(name, seed):
    """A step whose idea needs short, aligned or cacheable rows runs the step before it elsewhere: a view whose
    rows are not 16-byte aligned (vector_rows), rows past 512 (warp_rows), rows past MAX_CACHED (registers)."""
    shape = {"vector_rows": (6, 17), "warp_rows": (3, 700), "registers": (1, softmax.MAX_CACHED + 5)}[name]
    (x,) = softmax.make_inputs(shape, seed)
    x = x[:, 1:] if name == "vector_rows" else x  # 16 values a row, rows 68 bytes apart
    out = np.full(x.shape, np.nan, np.float32)
    softmax.VERSIONS[name](x, out=out)
    check = compare(out, softmax.reference(x), TOLERANCE["softmax"])
    assert check.ok, f"{name} {x.shape} seed={seed}: {check}"


# ----------------------------------------------------------------------------------------------------------
# The suite's real shapes on a GPU
# ----------------------------------------------------------------------------------------------------------

SOFTMAX_SUITE = [s for shapes in softmax.SHAPES["suite"].values() for s in shapes]
CBR_SUITE = [s for shapes in cbr.SHAPES["suite"].values() for s in shapes]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SOFTMAX_SUITE, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(f"softmax.{n}"))
                                  for n in softmax.VERSIONS])
def test_softmax_every_step_on_every_suite_shape_gpu(name, shape, seed):
    """Every step of the softmax ladder (the suite times them all) on every suite shape: NaN-poisoned output,
    float64 reference, inputs with +-1e4 and -inf."""
    run_checked("softmax", name, shape, seed)


@pytest.mark.gpu
@pytest.mark.xdist_group("cbr.optimized")
@pytest.mark.parametrize("shape", CBR_SUITE, ids=lambda s: "x".join(map(str, s)))
def test_cbr_optimized_on_every_suite_shape_gpu(shape, seed):
    """The CBR dispatcher on the suite's real shapes, NaN-poisoned output, float64 reference on the GPU (torch)."""
    torch = pytest.importorskip("torch")
    from numba import cuda

    x, w, b = cbr.make_inputs(shape, seed)
    t = [torch.from_numpy(a).cuda() for a in (x, w, b)]
    ref = torch.relu(torch.nn.functional.conv2d(t[0].double(), t[1].double(), t[2].double(), padding=1))
    ref = ref.float().cpu().numpy()
    out = cuda.to_device(np.full(ref.shape, np.nan, np.float32))
    cbr.optimized(*(cuda.as_cuda_array(a) for a in t), out=out)
    check = compare(out.copy_to_host(), ref, TOLERANCE["cbr"])
    assert check.ok, f"{shape} seed={seed} ({cbr.optimized.choose(*shape[:5])}): {check}"
