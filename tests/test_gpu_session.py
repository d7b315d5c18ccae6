"""`make gpu-session` (benchmarks/gpu_session.py): what it reads from each tool's output, the order it benchmarks the
lessons in, its refusals, and -- in the long tier -- a dry run of the whole machinery in the simulator."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.py"


@pytest.fixture(scope="module")
def gs():
    spec = importlib.util.spec_from_file_location("gpu_session_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_it_knows_every_lesson(gs):
    import gpukernels

    assert tuple(gs.LESSONS) == tuple(gpukernels.LESSONS)  # it names them without importing numba
    assert set(gs.BENCH_S) == set(gpukernels.LESSONS)


def test_pytest_counts_read_the_closing_line(gs):
    assert gs.pytest_counts("....\n== 2674 passed, 472 skipped, 2 failed, 1 error in 240.1s ==\n") == {
        "passed": 2674, "skipped": 472, "failed": 2, "errors": 1}
    assert gs.pytest_counts("=== 12 passed in 1.0s ===") == {"passed": 12}


def test_a_suite_cut_at_its_deadline_is_counted_from_its_outcome_lines(gs):
    log = ("[gw0] [ 10%] PASSED tests/test_a.py::test_one \n[gw1] [ 20%] FAILED tests/test_b.py::test_two[x] \n"
           "[gw0] [ 30%] SKIPPED tests/test_a.py::test_three \n[gw1] [ 40%] PASSED tests/test_b.py::test_four \n")
    assert gs.pytest_counts(log) == {"passed": 2, "failed": 1, "skipped": 1, "cut": True,
                                     "failed_tests": ["tests/test_b.py::test_two[x]"]}
    # a run that ended: its closing line's counts, and the failures it printed as they ended
    done = log + "=== 2 passed, 1 failed, 1 skipped in 3.2s ===\n"
    assert gs.pytest_counts(done) == {"passed": 2, "failed": 1, "skipped": 1,
                                      "failed_tests": ["tests/test_b.py::test_two[x]"]}



def test_sanitizer_counts_add_up_every_tool(gs):
    text = ("========= ERROR SUMMARY: 0 errors\n"
            "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)\n"
            "========= ERROR SUMMARY: 2 errors\n"
            "sanitize_lessons: 40 runs, 1 wrong, 12 s\n")
    assert gs.sanitizer_counts(text) == {"errors": 2, "hazards": 3, "runs": 40, "wrong": 1}


def test_optimized_is_compared_with_the_peer_of_its_own_shape(gs):
    rows = [{"lesson": "softmax", "shape": [8, 8], "name": "optimized", "kind": "kernel", "median_ms": 2.0,
             "ok": True},
            {"lesson": "softmax", "shape": [8, 8], "name": "torch.softmax", "kind": "peer", "median_ms": 3.0},
            {"lesson": "softmax", "shape": [4, 4], "name": "optimized", "kind": "kernel", "median_ms": 1.0,
             "ok": False},
            {"lesson": "softmax", "shape": [4, 4], "name": "torch.softmax", "kind": "peer", "median_ms": 0.5}]
    got = gs.optimized_vs_peer(rows)
    assert [(r["shape"], r["x_peer"], r["ok"]) for r in got] == [("8x8", 1.5, True), ("4x4", 0.5, False)]


def test_the_lesson_measured_longest_ago_is_benchmarked_first(gs, tmp_path, monkeypatch):
    for name, date, lessons in (("2026-12-01-0900-h100", "2026-12-01", ["matmul", "softmax"]),
                                ("2026-12-03-0900-h200", "2026-12-03", ["softmax"])):
        (tmp_path / name).mkdir()
        rows = [{"lesson": lesson, "name": "optimized"} for lesson in lessons]
        (tmp_path / name / "bench.json").write_text(json.dumps({"date": date, "results": rows}))
    monkeypatch.setattr(gs, "SESSIONS", tmp_path)
    order = gs.stalest_first(["matmul", "softmax", "cbr", "tensor_core", "attention"])
    # never measured first, in the given order; then matmul (12-01) before softmax (12-03)
    assert order == ["cbr", "tensor_core", "attention", "matmul", "softmax"]


@pytest.mark.parametrize("args,message", [(["--bench", "gemm"], "--bench: expected lessons among"),
                                          (["--skip", "lunch"], "--skip"),
                                          (["--budget", "10"], "--budget must be > 30 s")])
def test_bad_options_are_one_line(gs, args, message, capsys):
    with pytest.raises(SystemExit) as e:
        gs.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "\n".join(err)


@pytest.mark.slow  # a minute of the random-shape check in the simulator
def test_a_dry_run_in_the_simulator_writes_its_folder_and_nothing_else(tmp_path):
    out = tmp_path / "session"
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "sim", "--out", str(out), "--skip", "suite",
                          "bench", "--fuzz-seconds", "2", "--budget", "240"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"session.json", "summary.txt", "run.log", "fuzz.json"} <= set(files), files
    report = json.loads((out / "session.json").read_text())
    assert report["fuzz"]["status"] == "ok" and report["fuzz"]["summary"]["failed_cases"] == 0
    assert "GPU session" in run.stdout and (out / "summary.txt").read_text().strip() == run.stdout.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session"]  # nothing written beside it
