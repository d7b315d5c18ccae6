"""The grader: solutions score full marks, stubs 0, and every wrong submission the score it deserves.

Each group is graded in one call of the grader (child processes in parallel) inside one test, so that pytest-xdist
never grades a group twice; a failing test lists every submission that scored wrong.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpukernels.grade import available, exercises_dir, export_main, grade, infer_exercise, select, to_gradescope
from gpukernels.grade.spec import GATES, load

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = exercises_dir(ROOT / "exercises")
SOLUTIONS = EXERCISES / "solutions"
FIXTURES = Path(__file__).parent / "fixtures" / "submissions"
NAMES = list(available(EXERCISES))
TIMEOUT = 120.0  # generous: the suite runs on 2 busy cores; the infinite loop has its own, short limit

C, K, T = "correctness", "compiles", "technique"
# fixture -> (gates that pass, a fragment the first failing message must contain)
WRONG = {
    "01_vector_add/wrong_result": ((), "expected"),
    "01_vector_add/off_by_one_guard": ((), "out-of-bounds read of global array 'a'"),
    "01_vector_add/short_guard": ((), "never written"),
    "01_vector_add/numpy_in_kernel": ((C,), "does not compile for a GPU"),
    "01_vector_add/host_compute": ((), "not a @cuda.jit kernel"),
    "01_vector_add/host_compute_in_thread": ((C,), "does not compile for a GPU"),
    "01_vector_add/modifies_input": ((), "modified its input 'a'"),
    "01_vector_add/syntax_error": ((), "SyntaxError"),
    "01_vector_add/import_error": ((), "No module named 'numpy_but_faster'"),
    "01_vector_add/missing_function": ((), "defines no 'vector_add' (it defines: vec_add)"),
    "01_vector_add/crash_exit": ((), "exited with code 0 before reporting"),
    "01_vector_add/segfault": ((), "SIGSEGV"),
    "01_vector_add/forged_output": ((), "never written"),
    "01_vector_add/correct_but_prints": ((), "printed to stdout"),
    "02_matrix_add/rows_on_x": ((C, K), "coalescing"),
    "03_block_sum/missing_syncthreads": ((), "expected"),
    "03_block_sum/syncthreads_in_branch": ((), "barrier divergence"),
    "03_block_sum/out_of_bounds_read": ((), "out-of-bounds read of global array 'x'"),
    "04_transpose/no_padding": ((C, K), "bank conflicts"),
    "04_transpose/direct": ((C, K), "coalescing"),
    "06_matmul_tiled/untiled": ((C, K), "global loads per element"),
    "06_matmul_tiled/missing_syncthreads": ((), "expected"),
    "08_conv_bias_relu/unfused": ((C, K, "speed"), "stores"),  # caches hide the extra passes on a GPU
}
# Either the simulator's no-progress watchdog (which names the looping line) or the grader's own time limit
# stops it, whichever comes first on the machine at hand; both score 0.
SLOW = {"01_vector_add/infinite_loop": ((), ("made no progress", "did not finish within"))}


def _pairs(table):
    return [(key.split("/")[0], FIXTURES / f"{key}.py") for key in table]


def _mismatches(table, results) -> list[str]:
    """Compare each result with its expectation; technique expectations count only when the tracer runs."""
    problems = []
    for (key, (passing, fragment)), r in zip(table.items(), results):
        passed = {t.name.split(": ")[1] for t in r.tests if t.status == "passed"}
        graded = {t.name.split(": ")[1] for t in r.tests if t.status != "skipped"}
        want = set(passing) & graded
        expected_score = sum(t.max_score for t in r.tests if t.name.split(": ")[1] in want)
        failing = [t for t in r.tests if t.status == "failed"]
        text = failing[0].output if failing else ""
        fragments = fragment if isinstance(fragment, tuple) else (fragment,)
        if passed != want or r.score != expected_score or not any(f in text for f in fragments):
            problems.append(f"{key}: passed {sorted(passed)} (want {sorted(want)}), score {r.score:g}/{r.max_score:g}"
                            f" (want {expected_score:g}); first failure: {text[:300]!r}")
    return problems


def test_wrong_submissions_get_the_expected_scores():
    results = grade(_pairs(WRONG), root=EXERCISES, timeout=TIMEOUT)
    problems = _mismatches(WRONG, results)
    assert not problems, "\n".join(problems)


def test_infinite_loop_hits_the_time_limit():
    results = grade(_pairs(SLOW), root=EXERCISES, timeout=8.0)
    problems = _mismatches(SLOW, results)
    assert not problems, "\n".join(problems)


def test_solutions_score_full_marks_and_stubs_zero():
    pairs = [(n, SOLUTIONS / f"{n}.py") for n in NAMES] + [(n, EXERCISES / n / "kernel.py") for n in NAMES]
    results = grade(pairs, root=EXERCISES, timeout=TIMEOUT)
    solutions, stubs = results[: len(NAMES)], results[len(NAMES):]
    problems = []
    for r in solutions:
        if r.max_score <= 0 or r.score != r.max_score:
            bad = [f"{t.name}: {t.output[:300]}" for t in r.tests if t.status == "failed"]
            problems.append(f"solution {r.exercise}: {r.score:g}/{r.max_score:g} {bad}")
    for r in stubs:
        if r.score != 0 or r.max_score <= 0:
            problems.append(f"stub {r.exercise}: {r.score:g}/{r.max_score:g}")
        elif "nan" not in r.tests[0].output:  # a stub writes nothing: the poisoned output says so
            problems.append(f"stub {r.exercise}: unexpected message {r.tests[0].output[:200]!r}")
    assert not problems, "\n".join(problems)
    # Gradescope's results.json, as a teacher uploads it
    doc = json.loads(json.dumps(to_gradescope(solutions)))
    assert set(doc) >= {"score", "tests"}
    assert doc["score"] == sum(t["score"] for t in doc["tests"]) == sum(r.max_score for r in solutions)
    for t in doc["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output"}
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float) and isinstance(t["output"], str)
        assert 0 <= t["score"] <= t["max_score"]


def test_cli_grades_a_folder_and_isolates_a_broken_exercise(tmp_path):
    """`gpukernels grade 01 02 --submission DIR --json FILE`: a syntax error in 01 leaves 02 graded in full."""
    sub = tmp_path / "submission"
    (sub / "01_vector_add").mkdir(parents=True)
    (sub / "01_vector_add" / "kernel.py").write_text((FIXTURES / "01_vector_add" / "syntax_error.py").read_text())
    (sub / "02_matrix_add.py").write_text((SOLUTIONS / "02_matrix_add.py").read_text())
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "grade", "1", "matrix_add", "--submission", str(sub),
                           "--json", str(out), "--exercises-dir", str(EXERCISES)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "01_vector_add: correctness" in proc.stdout and "SyntaxError" in proc.stdout
    doc = json.loads(out.read_text())
    by_ex = {}
    for t in doc["tests"]:
        ex = t["name"].split(":")[0]
        by_ex.setdefault(ex, [0.0, 0.0])
        by_ex[ex][0] += t["score"]
        by_ex[ex][1] += t["max_score"]
    assert by_ex["01_vector_add"][0] == 0
    assert by_ex["02_matrix_add"][0] == by_ex["02_matrix_add"][1] > 0
    assert doc["score"] == by_ex["02_matrix_add"][0]


# ----------------------------------------------------------------------------------------------------------
# The exercises' contract (fast: no child processes)
# ----------------------------------------------------------------------------------------------------------


def test_at_least_eight_exercises_each_complete():
    assert len(NAMES) >= 8
    for name in NAMES:
        folder = EXERCISES / name
        for part in ("README.md", "kernel.py", "spec.py"):
            assert (folder / part).is_file(), f"{name} lacks {part}"
        assert (SOLUTIONS / f"{name}.py").is_file(), f"{name} has no solution"
        ex = load(folder)
        assert ex.kernel in (folder / "kernel.py").read_text()
        assert ex.kernel in (SOLUTIONS / f"{name}.py").read_text()
        assert ex.hints.get("correctness"), f"{name}: README has no correctness hints"


@pytest.mark.parametrize("name", NAMES)
def test_readme_points_table_matches_the_spec(name):
    """The README's "What is graded" table states the points the spec awards (one is checked against the other)."""
    ex = load(EXERCISES / name)
    table = {}
    for line in (EXERCISES / name / "README.md").read_text().splitlines():
        m = re.match(r"\|\s*(\w+)\s*\|\s*(\d+)\s*\|", line)
        if m and m.group(1) in GATES:
            table[m.group(1)] = int(m.group(2))
    expected = {g: ex.max_points(g) for g in GATES if ex.max_points(g)}
    assert table == expected


def test_fixtures_state_what_they_expect():
    files = sorted(FIXTURES.glob("*/*.py"))
    listed = {f"{p.parent.name}/{p.stem}" for p in files}
    assert listed == set(WRONG) | set(SLOW), "every fixture is graded by a test, every test has a fixture"
    for path in files:
        doc = path.read_text().split('"""')[1]
        assert "Expected" in doc, f"{path.name}: say what it should score"


def test_select_and_export(tmp_path):
    assert select(["6"], EXERCISES) == ["06_matmul_tiled"]
    assert infer_exercise(FIXTURES / "04_transpose" / "direct.py", EXERCISES) == "04_transpose"
    assert infer_exercise(SOLUTIONS / "09_warp_sum.py", EXERCISES) == "09_warp_sum"
    assert select(["matmul_tiled", "01"], EXERCISES) == ["06_matmul_tiled", "01_vector_add"]
    with pytest.raises(ValueError, match="unknown exercise"):
        select(["99"], EXERCISES)
    out = tmp_path / "handout"
    assert export_main([str(out), "--exercises-dir", str(EXERCISES)]) == 0
    assert export_main([str(out), "--exercises-dir", str(EXERCISES)]) == 2  # refuses to overwrite
    assert not (out / "solutions").exists()
    assert list(available(out)) == NAMES
    for name in NAMES:
        assert (out / name / "kernel.py").read_text() == (EXERCISES / name / "kernel.py").read_text()
    assert not list(out.rglob("__pycache__"))

