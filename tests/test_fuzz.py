"""benchmarks/fuzz.py, the random-shape check of every version: it runs in the simulator, and it catches what it is
for (a wrong element, an element left unwritten, an input written)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gpukernels import LESSONS

pytestmark = pytest.mark.slow

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz.py"


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("fuzz", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_lesson_runs_clean_on_drawn_shapes(fuzz):
    report = fuzz.run(list(fuzz.LESSON_ORDER), cases=1, seed=3, budget=600, log=lambda *a, **k: None)
    summary = fuzz.summary(report)
    assert summary["failed_cases"] == 0, [c["failures"] for c in report["cases"] if c["failures"]]
    for lesson in fuzz.LESSON_ORDER:
        case = next(c for c in report["cases"] if c["lesson"] == lesson)
        assert "optimized" in case["runs"] and len(set(case["runs"])) >= 3, case
        assert case["branch"].split()[0] in LESSONS[lesson].VERSIONS, case["branch"]


def test_draws_stay_within_the_limits_and_reach_the_edges(fuzz):
    rng = np.random.default_rng(0)
    shapes = [fuzz.draw("matmul", rng, "gpu") for _ in range(400)]
    assert all(flops <= fuzz.MAX_WORK["gpu"] for _, _, flops in shapes)
    sides = [s for shape, _, _ in shapes for s in shape]
    assert min(sides) == 1 and any(s % 4 for s in sides) and any(s > 1000 for s in sides)
    attention = [fuzz.draw("attention", rng, "gpu") for _ in range(200)]
    assert {p.get("causal") for _, p, _ in attention} == {True, False}
    assert any(shape[4] % 16 for shape, _, _ in attention) and any(shape[2] != shape[3] for shape, _, _ in attention)


@pytest.mark.parametrize("fault", ["unwritten", "wrong", "input"])
def test_a_faulty_version_is_reported(fuzz, monkeypatch, fault):
    real = LESSONS["softmax"].VERSIONS["warp_rows"]

    def faulty(x, out=None, **params):
        result = real(x, out=out, **params)
        host = np.asarray(result).copy()
        if fault == "input":
            x[..., 0] += 1.0
            return result
        host.flat[0] = np.nan if fault == "unwritten" else host.flat[0] + 0.5
        return host

    monkeypatch.setitem(LESSONS["softmax"].VERSIONS, "warp_rows", faulty)
    case = fuzz.run_case("softmax", 0, 7, "sim", ["numpy"], None, versions=["warp_rows"])
    assert case["failures"], case
    expect = "was modified" if fault == "input" else "elements wrong"
    assert any(expect in f["error"] for f in case["failures"]), case["failures"]


@pytest.mark.gpu
def test_random_shapes_on_the_gpu(fuzz):
    """A minute of random shapes on the GPU, fresh each run (the seed is in the message): every version of every
    lesson, checked against float64 on a NaN-poisoned output."""
    seed = int(np.random.default_rng().integers(2**31))
    report = fuzz.run(list(fuzz.LESSON_ORDER), cases=40, seed=seed, budget=60, log=lambda *a, **k: None)
    bad = [(c["lesson"], c["shape"], c["params"], c["kind"], c["failures"]) for c in report["cases"] if c["failures"]]
    assert not bad, f"seed {seed} (benchmarks/fuzz.py --seed {seed}): {bad[:5]}"
    assert len(report["cases"]) >= 5
