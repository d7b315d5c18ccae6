"""Configurations of softmax.optimized that optimized_config does not pick by default (benchmarks/
softmax_variants.py times them on a GPU): each must be correct on ragged shapes, in the simulator too."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gpukernels import softmax
from gpukernels.check import TOLERANCE, compare

Config = softmax.Config
ROOT = Path(__file__).resolve().parent.parent


def run_with(monkeypatch, cfg, shape, seed=0):
    (x,) = softmax.make_inputs(shape, seed)
    if cfg is not None:  # optimized with cfg in place of its choice (what benchmarks/softmax_variants.py times)
        monkeypatch.setattr(softmax.k08_optimized, "optimized_config", lambda n: cfg)
    out = np.full(shape, np.nan, np.float32)  # poison: an unwritten element fails
    softmax.optimized(x, out=out)
    check = compare(out, softmax.reference(x), TOLERANCE["softmax"])
    assert check.ok, f"{cfg} shape={shape}: {check}"


@pytest.mark.parametrize("cfg,shape", [
    (Config(8, 2, True, warps_per_block=2), (13, 13)),  # 4 rows per warp, 8 per block: the last warp and block
    (Config(4, 8, True, warps_per_block=1), (9, 30)),  # have rows past the end of x; 13 and 30 are ragged in L
    (Config(16, 1, True, warps_per_block=1, min_blocks=4), (3, 10)),  # fewer values than lanes
    (Config(2, 4, True, warps_per_block=1), (17, 7)),
])
def test_sub_warp_rows(monkeypatch, cfg, shape):
    run_with(monkeypatch, cfg, shape)


@pytest.mark.parametrize("shape", [(37, 1), (37, 3), (11, 17), (7, 100)])
def test_short_rows_default(monkeypatch, shape):
    # Defaults: 1 lane per row (32 rows per warp) for n = 1 and 3, 2 lanes for 17, 8 lanes for 100.
    run_with(monkeypatch, None, shape)


@pytest.mark.parametrize("cfg,shape", [
    (Config(64, 3, True, shared=128), (3, 300)),  # 128 values in shared memory, 172 in registers, ragged
    (Config(64, 3, True, shared=128), (2, 100)),  # the row ends inside the shared part
    (Config(64, 1, True, shared=64, min_blocks=2), (2, 65)),
])
def test_row_partly_cached_in_shared_memory(monkeypatch, cfg, shape):
    run_with(monkeypatch, cfg, shape)


@pytest.mark.parametrize("shape", [(2, 9000), (1, 21000)])
def test_long_rows_default(monkeypatch, shape):
    # 512 threads x 41 register values (+ 512 values in shared memory for 21000), past the ends of the row.
    run_with(monkeypatch, None, shape)


def test_default_configs():
    cfg = softmax.optimized_config(128)  # 16 lanes x 8 values: 2 rows per warp, 8 per block
    assert (cfg.threads, cfg.elems, cfg.rows_per_block, cfg.block) == (16, 8, 8, (32, 4))
    assert tuple(softmax.optimized_config(256)) == (32, 8, True) and softmax.optimized_config(1).threads == 1
    assert tuple(softmax.optimized_config(512)) == (32, 16, True)
    threads, elems, cached = softmax.optimized_config(4096)  # unpacks as in the notebook
    assert (threads, elems, cached) == (256, 16, True)
    assert tuple(softmax.optimized_config(1024)) == (64, 16, True)
    assert softmax.optimized_config(8192) == Config(512, 16, True)
    # Past 16 values per thread: registers capped for 2 blocks per SM, the overflow in shared memory.
    assert softmax.optimized_config(8193) == Config(512, 41, True, min_blocks=2)
    assert softmax.optimized_config(32768) == Config(512, 41, True, shared=11776, min_blocks=2)
    assert softmax.MAX_CACHED == 32768 and not softmax.optimized_config(32769).cached


def test_variant_sweep_builds_and_runs_its_candidates(monkeypatch):
    """The GPU sweep script imports without a GPU and its candidate configurations run correctly."""
    spec = importlib.util.spec_from_file_location("softmax_variants", ROOT / "benchmarks" / "softmax_variants.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    for n in (128, 1024, 32768, 40000):
        cands = sweep.candidates(n)
        assert cands[0][1] == softmax.optimized_config(n) and len(cands) <= 8
        for _, cfg in cands:
            assert not cfg.cached or cfg.threads * cfg.elems + cfg.shared >= n
            softmax.optimized_kernel(cfg)  # builds (compiles on a GPU only when launched)
    assert len(sweep.candidates(128)) >= 5 and len(sweep.candidates(32768)) == 2
    assert [c.threads for _, c in sweep.candidates(40000)] == [softmax.ONLINE_THREADS, 1024]
    for _, cfg in sweep.candidates(128):
        run_with(monkeypatch, cfg, (5, 128))


# ----------------------------------------------------------------------------------------------------------
# split_row: several blocks per row (few long rows)
# ----------------------------------------------------------------------------------------------------------

from .test_lessons import run_checked  # noqa: E402


@pytest.mark.parametrize("shape,pieces", [((2, 9000), 2), ((1, 700), 1), ((3, 5000), 1)])
def test_split_row_pieces(shape, pieces, seed):
    assert softmax.split_pieces(*shape) == pieces
    run_checked("softmax", "split_row", shape, seed)


@pytest.mark.slow  # 3 CPU-s in the simulator
def test_split_row_many_pieces_and_extremes(monkeypatch, seed):
    """Small pieces (so the simulator runs many), a piece of only -inf, and +-1e4 entries."""
    monkeypatch.setattr(softmax.k07_split_row, "SPLIT_MIN_CHUNK", 512)
    monkeypatch.setattr(softmax.k07_split_row, "SPLIT_MIN_ROW", 2048)
    x = np.random.default_rng(seed).standard_normal((2, 3000)).astype(np.float32)
    x[0, :600] = -np.inf  # the first piece of row 0 is empty
    x[1, 5], x[1, 2999] = 1e4, -1e4
    assert softmax.split_pieces(*x.shape) == 5
    assert softmax.use_split_row(*x.shape)
    ref = softmax.reference(x)
    for name in ("split_row", "optimized"):
        out = softmax.VERSIONS[name](x)
        assert compare(out, ref, TOLERANCE["softmax"]).ok, name
        assert (out[0, :600] == 0).all()


def test_optimized_splits_only_few_long_rows():
    split = softmax.use_split_row
    assert split(1, 2**20, 132) and split(131, 40000, 132)  # too long for the chip: a block would read it twice
    assert split(1, 32768, 132) and split(32, 24576, 132)  # long, on fewer than a quarter of the SMs
    assert not split(33, 32768, 132) and not split(64, 32000, 132)  # a block per row measured faster (0.0134 ms
    assert not split(1, 16384, 132) and not split(16, 24575, 132)  # against 0.0177 at 64 x 32000)
    assert not split(1024, 32768, 132) and not split(132, 2**20, 132)  # enough rows to fill the SMs
    assert not split(8, 4096, 132)  # too short to split in two pieces of SPLIT_MIN_CHUNK


@pytest.mark.parametrize("rows, cols", [(65536, 128), (70001, 8192), (1, 2**20)])
def test_split_row_plans_fit_the_gpus_grid_limits(rows, cols):
    """Every launch of the plan is one a GPU accepts (rows on grid.x; grid.y stops at 65535): at 65536 rows the
    first split_row put rows on y and failed on the H200 while the simulator, which then had no limits, ran it."""
    from gpukernels.sim.install import check_launch_limits

    x = np.empty((rows, cols), np.float32)
    for launch in softmax.split_row_launches(x, np.empty_like(x)):
        grid = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
        block = tuple(launch.block) + (1,) * (3 - len(launch.block))
        check_launch_limits("split_row", grid, block)
