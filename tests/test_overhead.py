"""``gpukernels bench --overhead``: which versions it measures, and its report (table, figure, JSON) from a file."""

import json

import pytest

from gpukernels import LESSONS, overhead
from gpukernels.bench import bench_main

from .conftest import GPU


def test_versions_are_optimized_and_the_second_step():
    assert overhead.versions("matmul") == ["tiled", "optimized"]
    for lesson in LESSONS:
        names = overhead.versions(lesson)
        assert names[-1] == "optimized" and all(n in LESSONS[lesson].VERSIONS for n in names)
    assert set(overhead.SHAPES) == set(LESSONS)


def report():
    rows = []
    for lesson in LESSONS:
        for name in overhead.versions(lesson):
            for kind, us in (("numba", 11.0), ("torch", 19.5)):
                rows.append({"kind": "overhead", "lesson": lesson, "name": name, "array_kind": kind,
                             "shape": list(overhead.SHAPES[lesson]), "us_per_call": us, "peer_us_per_call": 7.0,
                             "checked_us_per_call": 120.0, "device_us": 4.0, "ok": True,
                             "target_us": overhead.TARGET_US[kind], "meets_target": us <= overhead.TARGET_US[kind]})
    stages = [{"kind": "overhead_stage", "lesson": "softmax", "name": "optimized", "array_kind": kind,
               "path": "checked", "stage": stage, "us": us}
              for kind in ("numba", "torch")
              for stage, us in (("array conversion (cuda.as_cuda_array)", 0.0 if kind == "numba" else 150.0),
                                ("argument checks", 8.0), ("plan", 3.0), ("Numba dispatch + launch", 30.0))]
    stages += [{"kind": "overhead_stage", "lesson": "softmax", "name": "optimized", "array_kind": kind,
                "path": "fast", "stage": "whole call", "us": 11.0} for kind in ("numba", "torch")]
    return {"kind": "overhead", "environment": {"device": "H200 (made up)", "date": "2026-12-02"}, "calls": 300,
            "missing": ["cupy is not installed: no CuPy rows"], "results": rows, "stages": stages}


def test_report_from_json_prints_and_draws(tmp_path, capsys):
    path = tmp_path / "overhead.json"
    path.write_text(json.dumps(report()))
    fig = tmp_path / "overhead.png"  # into an existing folder: like every output option, --figure makes none
    assert bench_main(["--overhead", "--from-json", str(path), "--figure", str(fig)]) == 0
    out = capsys.readouterr().out
    assert "host us per call" in out and "softmax" in out and "cupy is not installed" in out
    assert fig.stat().st_size > 10_000


@pytest.mark.skipif(GPU, reason="on a GPU it measures")
def test_simulator_says_it_measures_nothing(capsys):
    assert bench_main(["--overhead"]) == 0
    assert "simulator" in capsys.readouterr().out
