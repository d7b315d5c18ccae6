"""What a machine without numba-cuda's CUDA compiler gets -- a student's Mac, where numba-cuda has no wheels.

Everything runs there on Numba's simulator with gpukernels' on top; what compiles for a real GPU says so in one
line. These tests run only where the compiler is missing (``make test-nocuda``, the Mac's view); where it is
installed, test_grade.py checks the same submissions with the compiles gate counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpukernels.grade import grade
from gpukernels.grade.spec import GATES, load

from . import test_grade as G

pytestmark = pytest.mark.no_cuda_toolchain
# One fresh seed per submission: what differs here is the missing compiler, not the draws, which the main suite
# grades with G.SEEDS seeds
SEEDS = 1
ROOT = Path(__file__).resolve().parents[1]
NOT_HERE = "not available on this machine"


def _compiles(result):
    return next(t for t in result.tests if t.name.endswith(": compiles"))


def _points_without_compiler(ex) -> dict:
    pts = G.spec_points(ex, speed=False)
    pts["compiles"] = 0
    return pts


def test_solutions_score_full_marks_without_the_compile_gate_and_stubs_zero():
    pairs = [(n, G.SOLUTIONS / f"{n}.py") for n in G.NAMES for _ in range(SEEDS)]
    pairs += [(n, G.EXERCISES / n / "kernel.py") for n in G.NAMES]
    results = grade(pairs, root=G.EXERCISES, timeout=G.TIMEOUT, speed=False)
    problems = []
    for (name, path), r in zip(pairs, results):
        full = sum(_points_without_compiler(load(G.EXERCISES / name)).values())
        want = full if path.parent == G.SOLUTIONS else 0
        comp = _compiles(r)
        if (r.score, r.max_score) != (want, full):
            problems.append(f"{name}/{path.name}: {r.score:g}/{r.max_score:g}, want {want}/{full}")
        if comp.status != "skipped" or comp.max_score != 0 or NOT_HERE not in comp.output:
            problems.append(f"{name}/{path.name}: compiles gate {comp.status}: {comp.output[:200]!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("group", ["01-04", "05-09", "10-19"])
def test_every_fixture_fails_where_it_says_and_is_never_failed_for_the_missing_compiler(group):
    """Each fixture still fails the gate it states, with its words, and scores what it deserves without the
    compiles gate's points; one that only a compiler rejects (NumPy in a kernel) has its compiles gate skipped
    as not available here, never failed."""
    lo, hi = group.split("-")
    files = [p for p in G.FIXTURE_FILES if lo <= p.parent.name[:2] <= hi and G._key(p) not in G.SLOW]
    owners, results, seeds = G._grade_many(files, SEEDS, speed=False)
    problems = []
    for path, r, s in zip(owners, results, seeds):
        stated = G.statement(path)
        where = f"{G._key(path)} [seed {s}]"
        if stated["gate"] == "admission":  # refused before anything runs: the same answer everywhere
            problems += G._mismatches([path], [r], speed=False)
            continue
        comp = _compiles(r)
        if comp.status != "skipped" or NOT_HERE not in comp.output:
            problems.append(f"{where}: compiles gate {comp.status}: {comp.output[:200]!r}")
        if stated["gate"] == "compiles":
            continue  # only a compiler rejects it; the simulator runs any Python
        if stated["gate"]:
            test = next(t for t in r.tests if t.name.endswith(f": {stated['gate']}"))
            if test.status != "failed" or stated["fragment"] not in test.output:
                problems.append(f"{where}: {stated['gate']} should fail with {stated['fragment']!r}; got "
                                f"{test.status}: {test.output[:300]!r}")
        pts = _points_without_compiler(load(G.EXERCISES / path.parent.name))
        stop = len(GATES) if stated["gate"] is None else GATES.index(stated["gate"])
        want = float(sum(pts[g] for g in GATES[:stop] if g in stated["passed"]))
        if r.score != want:
            problems.append(f"{where}: scored {r.score:g}, want {want:g}")
    assert not problems, "\n".join(problems)


def test_grade_a_class_and_a_handout_without_the_compile_gate(tmp_path):
    """The command lines as a Mac runs them: a class graded, each exercise's maximum without the compiles
    gate's points, results.json with that gate skipped (no status, no points, the reason in its output); a
    handout's stub graded 0 of the same maximum."""
    maxima = {n: sum(_points_without_compiler(load(G.EXERCISES / n)).values()) for n in G.NAMES[:2]}
    klass = tmp_path / "class"
    for student in ("ada", "bob"):
        for n in G.NAMES[:2]:
            (klass / student).mkdir(parents=True, exist_ok=True)
            (klass / student / f"{n}.py").write_text((G.SOLUTIONS / f"{n}.py").read_text())
    (klass / "bob" / f"{G.NAMES[1]}.py").unlink()
    out = tmp_path / "grades"
    proc = G._cli(["grade", "01", "02", "--class", str(klass), "--workers", "2", "--out", str(out), "--no-speed",
                   "--exercises-dir", str(G.EXERCISES)], tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    rows = [line.split(",") for line in (out / "scores.csv").read_text().splitlines()]
    a, b = (maxima[n] for n in G.NAMES[:2])
    assert {r[0]: r[1:] for r in rows[1:]} == {"ada": [f"{a}", f"{b}", f"{a + b}", f"{a + b}"],
                                                 "bob": [f"{a}", "0", f"{a}", f"{a + b}"]}
    doc = json.loads((out / "ada" / "results.json").read_text())
    compiles = [t for t in doc["tests"] if t["name"].endswith(": compiles")]
    assert len(compiles) == 2 and all(t["max_score"] == 0 and "status" not in t and NOT_HERE in t["output"]
                                      for t in compiles)
    handout = tmp_path / "handout"
    assert G.export_main([str(handout), "--exercises-dir", str(G.EXERCISES)]) == 0
    proc = G._cli(["grade", "01", "--no-speed"], handout)
    # the stub scores 0: status 1, as a test runner's for a failure (the compiles gate skipped, not failed)
    assert proc.returncode == 1 and f"total: 0 / {a}" in proc.stdout, proc.stdout[-2000:]


def test_resources_says_in_one_line_what_is_missing_and_what_to_do(tmp_path):
    env = {"GPUKERNELS_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "resources", "softmax"], cwd=ROOT, text=True,
                          capture_output=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "needs the CUDA compiler" in proc.stderr and "numba-cuda" in proc.stderr and "cu13" in proc.stderr


def test_occupancy_figures_say_why_they_are_not_drawn(tmp_path, monkeypatch):
    from gpukernels import viz

    monkeypatch.setenv("GPUKERNELS_CACHE", str(tmp_path / "cache"))
    for fig in (viz.occupancy_bars("softmax"), viz.occupancy_vs_block_size("cbr"), viz.occupancy_bars()):
        assert "needs the CUDA compiler" in viz.unavailable(fig)


def test_info_names_the_backend_and_what_is_unavailable():
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "info", "--json"], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)
    info = json.loads(proc.stdout)
    assert info["cuda_toolchain"].startswith("numba-cuda is")
    assert any("gpukernels resources" in line and "cu13" in line for line in info["unavailable"])
    if info["versions"]["numba-cuda"] is None:
        assert info["backend"].startswith("Numba's built-in simulator")
