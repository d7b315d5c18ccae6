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
    monkeypatch.setattr(softmax, "optimized_config", lambda n: cfg)
    out = np.full(shape, np.nan, np.float32)  # poison: an unwritten element fails
    softmax.optimized(x, out=out)
    check = compare(out, softmax.reference(x), TOLERANCE["softmax"])
    assert check.ok, f"{cfg} shape={shape}: {check}"


@pytest.mark.parametrize("cfg,shape", [
    (Config(32, 2, True, rows_per_warp=3, warps_per_block=2), (7, 50)),  # 7 rows, 6 per block: the last block
    (Config(32, 4, True, rows_per_warp=2, warps_per_block=4), (9, 128)),  # has rows past the end of x
    (Config(32, 1, True, rows_per_warp=2, warps_per_block=1), (3, 1)),
])
def test_several_rows_per_warp(monkeypatch, cfg, shape):
    run_with(monkeypatch, cfg, shape)


@pytest.mark.parametrize("cfg,shape", [
    (Config(64, 3, True, shared=128), (3, 300)),  # 128 values in shared memory, 172 in registers, ragged
    (Config(64, 3, True, shared=128), (2, 100)),  # the row ends inside the shared part
    (Config(64, 1, True, shared=64, min_blocks=2), (2, 65)),
])
def test_row_partly_cached_in_shared_memory(monkeypatch, cfg, shape):
    run_with(monkeypatch, cfg, shape)


def test_default_gives_short_rows_two_per_warp():
    assert softmax.optimized_config(128).rows_per_warp == 2
    assert softmax.optimized_config(129).rows_per_warp == 1
    threads, elems, cached = softmax.optimized_config(4096)  # unpacks as in the notebook
    assert (threads, elems, cached) == (256, 16, True)


def test_variant_sweep_builds_and_runs_its_candidates(monkeypatch):
    """The GPU sweep script imports without a GPU and its candidate configurations run correctly."""
    spec = importlib.util.spec_from_file_location("softmax_variants", ROOT / "benchmarks" / "softmax_variants.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    for n in (128, 1024, 32768):
        cands = sweep.candidates(n)
        assert cands[0][1] == softmax.optimized_config(n) and len(cands) >= 3
        for _, cfg in cands:
            assert not cfg.cached or cfg.threads * cfg.elems + cfg.shared >= n
            softmax.optimized_kernel(cfg)  # builds (compiles on a GPU only when launched)
    for _, cfg in sweep.candidates(128):
        run_with(monkeypatch, cfg, (5, 128))
