"""The grader: solutions score full marks, stubs 0, and every fixture submission the score it says it deserves.

Each fixture in ``tests/fixtures/submissions/NN_name/`` states, in its docstring's last line, what it deserves:
``Expected: pass compiles, correctness; fail technique ("loads per element")``. Each gate's expected status, score
and maximum are computed here from that statement and the spec's own ``points`` (`expected_tests`) -- never from
what the grader reports -- and so are the Gradescope entries and totals; every fixture is graded with five seeds
(fresh shapes and inputs each), which must all give that result.

Each group is graded in one call of the grader (child processes in parallel) inside one test, so that
pytest-xdist never grades a group twice; a failing test lists every submission that scored wrong.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpukernels.grade import available, exercises_dir, export_main, grade, infer_exercise, select, to_gradescope
from gpukernels.grade.admission import AdmissionError, admit
from gpukernels.grade.gates import POISON, POISON_BITS
from gpukernels.grade.spec import GATES, load

from ._cli import run_main
from .conftest import GPU

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = exercises_dir(ROOT / "exercises")
SOLUTIONS = EXERCISES / "solutions"
FIXTURES = Path(__file__).parent / "fixtures" / "submissions"
NAMES = list(available(EXERCISES))
TIMEOUT = 120.0  # generous: the suite runs on 2 busy cores; the infinite loop has its own, short limit
SEEDS = 2  # each run draws fresh seeds, so CI's runs add up to many; a third seed per run cost CI 1.6 CPU-minutes
# The default tier grades every solution with one seed, and of the fixtures the refused ones and one that runs per
# exercise (`default_tier_fixtures`), with one seed; the long tier grades the other fixtures with one seed and every
# fixture and solution with SEEDS - 1 more, and the stubs.
# (seeds, and whether the stubs are graded too): the default tier's one seed of the solutions; the long tier's more
SEED_TIERS = [pytest.param(1, False, id="1seed"),
              pytest.param(SEEDS - 1, True, id=f"{SEEDS - 1}more", marks=pytest.mark.slow)]
# (exercises, seeds, which fixtures): the default tier in one grader run (one pool of workers to start); the long
# tier in three groups of exercises, which pytest-xdist spreads over its workers -- one grader run per group for both
# of its parts (the other fixtures with SEEDS seeds, the default tier's with SEEDS - 1 more): a run compiles each
# submission once for all its seeds and starts one pool. (Two runs per group, "1seed-rest" and "1more", graded the
# same pairs: they started six pools and compiled every fixture the default tier does not grade twice.)
FIXTURE_TIERS = [pytest.param("01-99", 1, "default", id="01-99-1seed")] + [
    pytest.param(group, SEEDS, "long", id=f"{group}-{SEEDS}seeds", marks=pytest.mark.slow)
    for group in ("01-04", "05-09", "10-99")]
SLOW = {"01_vector_add/infinite_loop"}  # graded alone, with a short time limit

STATEMENT = re.compile(r"Expected: pass (?P<passed>[\w, ]+?)(?:; fail (?P<gate>\w+) \(\"(?P<fragment>[^\"]+)\"\))?"
                       r"\s*$")
KNOWN_GATES = set(GATES) | {"admission", "none"}


def statement(path: Path) -> dict:
    """The fixture's own statement of what it deserves (its docstring's last line)."""
    doc = path.read_text().split('"""')[1].strip()
    m = STATEMENT.search(doc.splitlines()[-1])
    if m is None:
        raise ValueError(f"{path.name}: the docstring's last line must read `Expected: pass ...[; fail GATE "
                         f"(\"fragment\")]`, got {doc.splitlines()[-1]!r}")
    passed = {g.strip() for g in m["passed"].split(",")} - {"none"}
    bad = (passed | {m["gate"] or "none"}) - KNOWN_GATES
    if bad:
        raise ValueError(f"{path.name}: unknown gate(s) {sorted(bad)}")
    return {"passed": passed, "gate": m["gate"], "fragment": m["fragment"]}


def spec_points(ex, speed: bool) -> dict:
    """Points at stake per gate, from the spec alone: technique only with checks, speed only when graded."""
    pts = {g: int(ex.points.get(g, 0)) for g in GATES}
    if not ex.technique:
        pts["technique"] = 0
    if ex.speed is None or not speed:
        pts["speed"] = 0
    return pts


def expected_tests(ex, stated: dict, speed: bool) -> dict:
    """Per gate, (status, score, max_score) as the fixture's statement and the spec's points say, by the rule the
    grader documents (spec.GATES): a gate's points count only when it and every gate before it in GATES order
    passed -- so "pass compiles; fail correctness" scores 0 of compiles' points. A refusal at admission is the
    correctness test's failure. Speed (only where the spec has it) is skipped with nothing at stake unless it is
    graded (a GPU and speed=True). Without numba-cuda's compiler (``make test-nocuda``, a Mac) the compiles gate
    is skipped with nothing at stake, for every submission, and the gates after it are scored as usual."""
    from gpukernels._device import cuda_toolchain_missing

    no_compiler = cuda_toolchain_missing() is not None
    pts = spec_points(ex, speed)
    fail = "correctness" if stated["gate"] == "admission" else stated["gate"]
    out, ok = {}, True
    for gate in GATES:
        if gate == "technique" and not ex.technique or gate == "speed" and ex.speed is None:
            continue  # no such test
        if gate == "speed" and not (speed and GPU) or gate == "compiles" and no_compiler:
            out[gate] = ("skipped", 0.0, 0.0)
            continue
        ok = ok and gate in stated["passed"] and gate != fail
        out[gate] = ("passed", float(pts[gate]), float(pts[gate])) if ok else ("failed", 0.0, float(pts[gate]))
    return out


def expected_score(ex, stated: dict, speed: bool) -> float:
    return sum(score for _, score, _ in expected_tests(ex, stated, speed).values())


def _key(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


FIXTURE_FILES = sorted(FIXTURES.glob("*/*.py"))


def _mismatches(files, results, speed: bool) -> list:
    """Every way a graded fixture differs from its statement: a gate's status, score or maximum, the failing
    gate's message, the exercise's total, and the Gradescope entries and totals (recomputed here from the
    statement, not summed from the grader's own results)."""
    problems = []
    for path, r in zip(files, results):
        stated = statement(path)
        ex = load(EXERCISES / path.parent.name)
        want = expected_tests(ex, stated, speed)
        got = {t.name.split(": ", 1)[1]: t for t in r.tests}
        first = next((t for t in r.tests if t.status == "failed"), None)
        why = f"first failure: {(first.name + ': ' + first.output[:300]) if first else 'none'!r}"
        if list(got) != list(want):
            problems.append(f"{_key(path)}: tests {list(got)}, want {list(want)}")
            continue
        for gate, (status, score, maximum) in want.items():
            t = got[gate]
            if (t.status, t.score, t.max_score) != (status, score, maximum):
                problems.append(f"{_key(path)}: {gate} {t.status} {t.score:g}/{t.max_score:g}, want {status} "
                                f"{score:g}/{maximum:g}; {why}")
        if stated["gate"]:
            gate = "correctness" if stated["gate"] == "admission" else stated["gate"]
            if stated["fragment"] not in got[gate].output:
                problems.append(f"{_key(path)}: {gate} should fail with {stated['fragment']!r}; got "
                                f"{got[gate].output[:300]!r}")
        total = sum(score for _, score, _ in want.values())
        if r.score != total:
            problems.append(f"{_key(path)}: scored {r.score:g} (want {total:g}); {why}")
        doc = json.loads(json.dumps(to_gradescope([r])))
        entries = {t["name"].split(": ", 1)[1]: t for t in doc["tests"]}
        for gate, (status, score, maximum) in want.items():
            e = entries.get(gate, {})
            if (e.get("score"), e.get("max_score"), e.get("status", "skipped")) != (score, maximum, status):
                problems.append(f"{_key(path)}: Gradescope entry {gate} {e}, want {status} {score:g}/{maximum:g}")
        if (doc["score"], doc["max_score"]) != (total, sum(m for _, _, m in want.values())):
            problems.append(f"{_key(path)}: Gradescope total {doc['score']:g}/{doc['max_score']:g}")
    return problems


def _grade_many(files, seeds_per_file, speed: bool, timeout: float = TIMEOUT):
    """Grade each of ``files`` with ``seeds_per_file`` fresh seeds (a number, or a function of the file) in one run
    of the grader."""
    rng = np.random.default_rng()
    pairs, seeds, owners = [], [], []
    for path in files:
        for _ in range(seeds_per_file(path) if callable(seeds_per_file) else seeds_per_file):
            pairs.append((path.parent.name, path))
            seeds.append(int(rng.integers(0, 2**31 - 1)))
            owners.append(path)
    results = grade(pairs, root=EXERCISES, timeout=timeout, seeds=seeds, speed=speed, jobs=os.cpu_count())
    return owners, results, seeds


def default_tier_fixtures(files) -> set:
    """The fixtures the default tier grades: every refused one (admission is cheap: nothing runs) and one more per
    exercise -- the first (by name) that passes correctness and fails technique where the exercise has one (the whole
    pipeline runs: correctness, the compile, the technique check), else the first failing correctness, else the
    first passing every gate. Grading a fixture that runs costs ~2 CPU-seconds (its compile for sm_90, its sizes in
    the simulator, the traced checks); the long tier grades the rest, and tests/test_grade_hardening.py checks each
    technique check against its own cheat in the default tier."""
    keep, best = set(), {}
    rank = {"technique": 0, "correctness": 1, None: 2}
    for path in sorted(files):
        gate = statement(path)["gate"]
        if gate == "admission":
            keep.add(_key(path))
        elif rank.get(gate, 3) < best.get(path.parent.name, (9, None))[0]:
            best[path.parent.name] = (rank.get(gate, 3), _key(path))
    return keep | {key for _, key in best.values()}


@pytest.mark.needs_cuda_toolchain  # the stated scores count the compiles gate (test_no_toolchain: without it)
@pytest.mark.parametrize("group,n_seeds,which", FIXTURE_TIERS)
def test_every_fixture_scores_what_it_says_with_fresh_seeds(group, n_seeds, which):
    lo, hi = group.split("-")
    files = [p for p in FIXTURE_FILES if lo <= p.parent.name[:2] <= hi and _key(p) not in SLOW]
    quick = default_tier_fixtures(FIXTURE_FILES)
    if which == "default":
        files, per_file = [p for p in files if _key(p) in quick], n_seeds
    else:  # the long tier: n_seeds for each fixture, of which the default tier's run graded one
        per_file = lambda p: n_seeds - (_key(p) in quick)  # noqa: E731
    owners, results, seeds = _grade_many(files, per_file, speed=False)
    problems = [f"{msg} [seed {s}]" for o, r, s in zip(owners, results, seeds)
                for msg in _mismatches([o], [r], speed=False)]
    assert not problems, "\n".join(problems)


def test_infinite_loop_hits_the_time_limit():
    files = [FIXTURES / f"{k}.py" for k in SLOW]
    results = grade([(p.parent.name, p) for p in files], root=EXERCISES, timeout=8.0)
    assert _mismatches(files, results, speed=False) == []
    text = results[0].tests[0].output
    assert "time limit" in text or "did not finish" in text
    assert "configure(timeout_s" not in text and "has not started" not in text  # nothing a student cannot use


@pytest.mark.needs_cuda_toolchain  # full marks include the compiles gate (test_no_toolchain: without it)
@pytest.mark.parametrize("n_seeds,stubs", SEED_TIERS)
def test_solutions_score_full_marks_and_stubs_zero(n_seeds, stubs):
    """Fresh seeds each (one in the default tier, more in the long one); on a GPU the speed gate counts (the
    solutions must beat their baselines). The stubs score zero: graded in the long tier (each is compiled for the
    compiles gate before it fails correctness, ~1 CPU-s apiece on the default tier's budget)."""
    rng = np.random.default_rng()
    pairs = [(n, SOLUTIONS / f"{n}.py") for n in NAMES for _ in range(n_seeds)]
    if stubs:
        pairs += [(n, EXERCISES / n / "kernel.py") for n in NAMES]
    seeds = [int(rng.integers(0, 2**31 - 1)) for _ in pairs]
    results = grade(pairs, root=EXERCISES, timeout=TIMEOUT, seeds=seeds, jobs=os.cpu_count())
    problems = []
    full_marks = {"passed": set(GATES), "gate": None, "fragment": None}
    nothing = {"passed": set(), "gate": "correctness", "fragment": None}
    for (name, path), r, s in zip(pairs, results, seeds):
        ex = load(EXERCISES / name)
        want = expected_tests(ex, full_marks if path.parent == SOLUTIONS else nothing, speed=True)
        got = {t.name.split(": ", 1)[1]: (t.status, t.score, t.max_score) for t in r.tests}
        if got != want:
            bad = [f"{t.name}: {t.output[:300]}" for t in r.tests if t.status == "failed"]
            problems.append(f"{path.parent.name}/{path.name} seed {s}: {got}, want {want} {bad}")
        elif path.parent != SOLUTIONS and "never written" not in r.tests[0].output:  # a stub writes nothing
            problems.append(f"stub {name}: unexpected message {r.tests[0].output[:200]!r}")
    assert not problems, "\n".join(problems)
    # Gradescope's results.json, as a teacher uploads it: every entry and both totals recomputed from the specs'
    # points (a solution passes every gate; speed counts on a GPU only), not summed from the grader's results
    solutions = results[: len(NAMES) * n_seeds: n_seeds]
    doc = json.loads(json.dumps(to_gradescope(solutions)))
    want = {f"{n}: {g}": v for n in NAMES for g, v in expected_tests(load(EXERCISES / n), full_marks, True).items()}
    assert [t["name"] for t in doc["tests"]] == list(want)
    for t in doc["tests"]:
        status, score, maximum = want[t["name"]]
        assert (t["score"], t["max_score"], t.get("status", "skipped")) == (score, maximum, status), t
        assert set(t) >= {"name", "score", "max_score", "output"}
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float) and isinstance(t["output"], str)
        assert t.get("status", "passed") in ("passed", "failed")  # the only statuses Gradescope documents
    assert doc["score"] == sum(v[1] for v in want.values()) == sum(sum(spec_points(load(EXERCISES / n), GPU).values())
                                                                    for n in NAMES)
    assert doc["max_score"] == sum(v[2] for v in want.values())
    assert doc["output"].endswith(f"total: {doc['score']:g} / {doc['max_score']:g}")


# ----------------------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------------------


def _cli(args, cwd, **env):
    full = {**os.environ, "COLUMNS": "400", **env}
    return subprocess.run([sys.executable, "-m", "gpukernels", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env=full)


@pytest.mark.needs_cuda_toolchain  # its totals count the compiles gate
def test_cli_grades_a_folder_and_isolates_a_broken_exercise(tmp_path):
    """`gpukernels grade 01 02 --submission DIR --json FILE`: a syntax error in 01 leaves 02 graded in full."""
    sub = tmp_path / "submission"
    (sub / "01_vector_add").mkdir(parents=True)
    (sub / "01_vector_add" / "kernel.py").write_text((FIXTURES / "01_vector_add" / "syntax_error.py").read_text())
    (sub / "02_matrix_add.py").write_text((SOLUTIONS / "02_matrix_add.py").read_text())
    out = tmp_path / "results.json"
    proc = _cli(["grade", "1", "matrix_add", "--submission", str(sub), "--json", str(out), "--exercises-dir",
                 str(EXERCISES), "--no-speed"], tmp_path)
    assert proc.returncode == 1, proc.stderr  # 01 is below full marks: as a test runner, status 1
    assert "01_vector_add: correctness" in proc.stdout and "SyntaxError" in proc.stdout
    doc = json.loads(out.read_text())
    by_ex = {}
    for t in doc["tests"]:
        ex = t["name"].split(":")[0]
        by_ex.setdefault(ex, [0.0, 0.0])
        by_ex[ex][0] += t["score"]
        by_ex[ex][1] += t["max_score"]
    assert by_ex["01_vector_add"][0] == 0
    want = sum(spec_points(load(EXERCISES / "02_matrix_add"), speed=False).values())
    assert by_ex["02_matrix_add"] == [want, want]
    assert doc["score"] == want
    assert not list(tmp_path.glob(".results.json.*"))  # written once, atomically


@pytest.mark.needs_cuda_toolchain  # its totals count the compiles gate
@pytest.mark.slow  # 11 CPU-s: a handout exported and graded in children; the default tier grades through the API and the CLI's folder test
def test_a_handout_grades_its_own_files_and_hints_survive_the_table(tmp_path):
    """Inside an exported handout, `gpukernels grade 01 --hints 3` grades the handout's kernel.py, says so in
    its first line, and prints hint 3 with its brackets (rich must not read `[i]` as markup)."""
    handout = tmp_path / "handout"
    assert export_main([str(handout), "--exercises-dir", str(EXERCISES)]) == 0
    proc = _cli(["grade", "01", "--hints", "3", "--no-speed"], handout)
    assert proc.returncode == 1, proc.stderr  # 0 / 10: below full marks
    first = proc.stdout.splitlines()[0]
    # which file, plainly -- no advice to do what was done
    assert first == "grading 1 file in this folder: 01_vector_add/kernel.py", first
    assert "out[i] = a[i] + b[i]" in proc.stdout
    assert "total: 0 / 10" in proc.stdout
    hints = [int(n) for n in re.findall(r"^.*?hint (\d):", proc.stdout, re.M)]
    assert hints == sorted(hints) and len(hints) >= 2, hints  # in the README's order
    proc = _cli(["grade", "01", "--hints", "3", "--no-speed", "--exit-zero"], handout)
    assert proc.returncode == 0 and "total: 0 / 10" in proc.stdout, proc.stderr  # the old behaviour, asked for
    # and the student's solution, put into the handout, is what gets graded
    (handout / "01_vector_add" / "kernel.py").write_text((SOLUTIONS / "01_vector_add.py").read_text())
    proc = _cli(["grade", "01", "--no-speed"], handout)
    assert "total: 10 / 10" in proc.stdout, proc.stdout[-2000:]
    assert proc.returncode == 0  # full marks


@pytest.mark.parametrize("args, fragment", [
    (["--workers", "0"], "--workers: expected a whole number of processes > 0, got '0'"),
    (["--timeout", "soon"], "--timeout: expected seconds >= 1 and at most 3600, got 'soon'"),
    (["--timeout", "inf"], "--timeout: expected seconds >= 1 and at most 3600, got 'inf'"),  # would never end
    (["--timeout", "nan"], "--timeout: expected seconds >= 1 and at most 3600, got 'nan'"),
    (["--timeout", "-1"], "--timeout: expected seconds >= 1 and at most 3600, got '-1'"),
    (["--seed", "-3"], "--seed: expected a whole number >= 0, got '-3'"),
    (["99"], "unknown exercise '99'; choose from: 01_vector_add"),
    (["--submission", "/no/such/file.py"], "--submission: /no/such/file.py does not exist"),
    (["--class", "/no/such/class"], "--class: /no/such/class is not a folder"),
])
def test_bad_options_get_one_line_and_status_2(tmp_path, args, fragment, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    code, _, err = run_main(capsys, ["grade", *args, "--exercises-dir", EXERCISES])
    assert code == 2
    assert fragment in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3


@pytest.mark.needs_cuda_toolchain  # its totals count the compiles gate
@pytest.mark.slow  # 7 CPU-s: a class graded; the class report's grouping has its own unit test
def test_grade_a_class(tmp_path):
    """`--class DIR --workers 2 --out OUT`: a results.json per student, a CSV of scores and a report page; a
    student who crashes or is missing an exercise costs nobody else a point."""
    klass = tmp_path / "class"
    for student, files in {"ada": ["01_vector_add.py", "02_matrix_add.py"],
                           "bob": ["01_vector_add/kernel.py"],
                           "cy": ["01_vector_add.py", "02_matrix_add.py"]}.items():
        for rel in files:
            dest = klass / student / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = SOLUTIONS / f"{dest.stem if dest.stem[:2].isdigit() else dest.parent.name}.py"
            dest.write_text(src.read_text())
    (klass / "cy" / "01_vector_add.py").write_text((FIXTURES / "01_vector_add" / "crash_exit.py").read_text())
    out = tmp_path / "grades"
    proc = _cli(["grade", "01", "02", "--class", str(klass), "--workers", "2", "--out", str(out), "--no-speed",
                 "--exercises-dir", str(EXERCISES)], tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    rows = [line.split(",") for line in (out / "scores.csv").read_text().splitlines()]
    assert rows[0] == ["student", "01_vector_add", "02_matrix_add", "total", "max"]
    scores = {r[0]: r[1:] for r in rows[1:]}
    assert scores == {"ada": ["10", "10", "20", "20"], "bob": ["10", "0", "10", "20"], "cy": ["0", "10", "10", "20"]}
    for student in ("ada", "bob", "cy"):
        doc = json.loads((out / student / "results.json").read_text())
        assert doc["score"] == sum(t["score"] for t in doc["tests"]) == float(scores[student][2])
    page = (out / "report.html").read_text()
    assert "01_vector_add" in page and "histograms.png" in page and (out / "histograms.png").stat().st_size > 0
    assert "refused before it ran" in (out / "report.md").read_text()  # cy's refusal is among the common failures


# ----------------------------------------------------------------------------------------------------------
# Admission, the poison, the process session (fast: no grading)
# ----------------------------------------------------------------------------------------------------------

HEADER = "from numba import cuda, float32\nimport math\nimport numpy as np\n"
KERNEL = "\n@cuda.jit\ndef k(a, out):\n    i = cuda.grid(1)\n    if i < out.size:\n        out[i] = {expr}\n"


@pytest.mark.parametrize("source, line, fragment", [
    ("import os\n", 1, "`import os`"),
    (HEADER + "X = np.load('answers.npy')\n", 4, "a call"),
    (HEADER + "open('x', 'w')\n", 4, "expression statement"),
    (HEADER + "import numba\nif numba.config.ENABLE_CUDASIM:\n    TILE = 1\n", 5, "an `if`"),
    (HEADER + "X = __import__('os')\n", 4, "a call"),
    (HEADER + "T = (1,) * 2 + tuple(range(3))\n", 4, "a call"),
    (HEADER + "BIG = (" + "1.0, " * 300 + ")\n", 4, "more than 256 values"),
    (HEADER + "import numba" + KERNEL.format(expr="a[i] if numba.config.ENABLE_CUDASIM else 0.0"), 9,
     "numba.config"),
    (HEADER + KERNEL.format(expr="a[i].__class__"), 9, "dunder"),
    (HEADER + KERNEL.format(expr="getattr(a, 'x')"), 9, "`getattr`"),
    (HEADER + KERNEL.format(expr="open('f').read()"), 9, "`open`"),
    (HEADER + KERNEL.format(expr="cuda.simulator.x"), 9, "device-side API"),
    (HEADER + "def helper(x):\n    return x\n", 4, "@cuda.jit"),
    (HEADER + "@cuda.jit(link=['evil.cu'])\ndef k(a):\n    pass\n", 4, "link"),
    (HEADER + "class A:\n    pass\n", 4, "a class"),
    # of gpukernels, only the two tensor-core instructions, imported by name, and called in kernels only
    (HEADER + "from gpukernels._mma import mma_f16, ldmatrix_x4\n", 4, "only mma_f16, pack_half2"),
    (HEADER + "import gpukernels._mma\n", 4, "`import gpukernels._mma`"),
    (HEADER + "from gpukernels import tensor_core\n", 4, "`from gpukernels import ...`"),
    (HEADER + "from gpukernels._mma import pack_half2\nW = pack_half2(1.0, 2.0)\n", 5, "a call"),
    (HEADER + "from gpukernels._mma import pack_half2" + KERNEL.format(expr="pack_half2.__globals__"), 9, "dunder"),
    # nor a lesson's code: the attention lesson's online softmax is what exercise 11 asks for
    (HEADER + "from gpukernels.attention.k02_fused_rows import FUSED_WARPS\n", 4,
     "`from gpukernels.attention.k02_fused_rows import ...`: only numba, numba.cuda, math and numpy"),
])
def test_admission_refuses_with_the_line(source, line, fragment):
    with pytest.raises(AdmissionError) as info:
        admit(source, "kernel.py")
    assert info.value.line == line, info.value
    assert fragment in str(info.value)


def test_admission_admits_idiomatic_kernel_files():
    source = (HEADER + "from numba import int32\nTILE = 16\nPADDED = TILE + 1\nSHAPE = (TILE, PADDED)\n"
              "NEG = -math.inf\nFULL = 0xFFFFFFFF\nDT = np.float32\n\n"
              "@cuda.jit(device=True)\ndef twice(x):\n    return 2 * x\n\n"
              "@cuda.jit(fastmath=False)\ndef k(a, out):\n    s = cuda.shared.array(SHAPE, float32)\n"
              "    i = cuda.grid(1)\n    for j in range(i, a.size, cuda.gridsize(1)):\n"
              "        out[j] = twice(a[j]) + a.T[0] * 0 + later(a[j])\n"
              "    cuda.syncwarp()\n    v = cuda.shfl_down_sync(FULL, float32(1), 1)\n\n"
              "@cuda.jit(device=True)\ndef later(x):\n    return math.exp(x) if x < np.float32(0) else x\n\n"
              "if __name__ == '__main__':\n    import os\n    print(os.getcwd())\n")
    admitted = admit(source, "kernel.py")
    assert set(admitted.kernels) == {"twice", "k", "later"} and admitted.device_functions == {"twice", "later"}
    assert admitted.ignored == [source.splitlines().index("if __name__ == '__main__':") + 1]
    ns = {}
    exec(admitted.code(), ns)  # the __main__ block is gone from what runs
    assert "os" not in ns and ns["PADDED"] == 17


def test_admission_admits_the_tensor_core_instructions():
    source = (HEADER + "from gpukernels._mma import mma_f16, pack_half2 as pack\n"
              "@cuda.jit\ndef k(a, out):\n    w = pack(a[0], a[1])\n"
              "    d = mma_f16(w, w, w, w, w, w, float32(0), float32(0), float32(0), float32(0))\n"
              "    out[0] = d[0]\n")
    assert set(admit(source, "kernel.py").kernels) == {"k"}


def test_the_poison_is_a_nan_no_arithmetic_makes():
    assert np.isnan(POISON) and np.float32(POISON).view(np.uint32) == POISON_BITS
    with np.errstate(invalid="ignore", divide="ignore"):
        made = np.array([0.0, np.inf], np.float32) / np.array([0.0, np.inf], np.float32)
    assert np.isnan(made).all() and not (made.view(np.uint32) == POISON_BITS).any()
    assert (np.array([POISON], np.float32) * 2).view(np.uint32)[0] == POISON_BITS  # a NaN passes its payload on


def test_a_child_session_is_killed_when_the_child_ends(tmp_path):
    """What a child leaves running (a forked process in its session) dies with it, not only on a time-out."""
    from gpukernels.grade.pool import kill_session

    marker = tmp_path / "alive"
    code = ("import os, time, sys\nif os.fork() == 0:\n    time.sleep(3)\n    open(sys.argv[1], 'w').write('x')\n"
            "    os._exit(0)\nos._exit(0)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(marker)], start_new_session=True)
    proc.wait()
    kill_session(proc)
    import time

    time.sleep(4)
    assert not marker.exists()


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
        assert ex.ranges and ex.extra_shapes >= 2, f"{name}: no fresh shapes"
        drawn = [ex.draw_shapes(s)[len(ex.shapes):] for s in range(5)]
        assert len({tuple(d) for d in drawn}) > 1, f"{name}: the drawn shapes do not change with the seed"


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


@pytest.mark.parametrize("name", NAMES)
def test_hints_that_show_code_compile_in_spirit(name):
    """A hint never recommends a shared-array shape that Numba cannot compile (`(TILE, TILE + 1)`: a shape must
    be made of module constants); the compiles hint may quote it as what not to write."""
    for gate, tips in load(EXERCISES / name).hints.items():
        for tip in tips:
            assert not re.search(r"shared\.array\(\([^)]*\+", tip), f"{name} {gate}: {tip}"
            if "does not fold" not in tip:
                assert "(TILE, TILE + 1)" not in tip, f"{name} {gate}: {tip}"


def test_fixtures_state_what_they_expect():
    assert len(FIXTURE_FILES) >= 64, "the 24 original fixtures and at least 40 more"
    for path in FIXTURE_FILES:
        stated = statement(path)  # raises on a malformed statement
        if stated["gate"] is None:
            assert {"compiles", "correctness"} <= stated["passed"], path
    stated = [statement(p) for p in FIXTURE_FILES]
    # the two kinds that only the race checks can decide: correct but racy (NoRaces fails the technique), and
    # right only in thread order (the shuffled run fails correctness)
    assert any(s["gate"] == "technique" and s["fragment"] == "race" and "correctness" in s["passed"] for s in stated)
    # (its statement names the race: the first run may fail it too, when the last warp happens to run first)
    assert any(s["gate"] == "correctness" and s["fragment"] == "race" for s in stated)
    per_exercise = {p.parent.name for p in FIXTURE_FILES}
    assert per_exercise == set(NAMES), f"exercises without fixtures: {sorted(set(NAMES) - per_exercise)}"


def test_select_and_export(tmp_path):
    assert select(["6"], EXERCISES) == ["06_matmul_tiled"]
    assert infer_exercise(SOLUTIONS / "09_warp_sum.py", EXERCISES) == "09_warp_sum"
    assert infer_exercise(FIXTURES / "04_transpose" / "direct.py", EXERCISES) == "04_transpose"
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


def test_a_missing_cuda_compiler_is_not_the_students_failure(tmp_path):
    """On a laptop without NVVM the compiles gate is skipped with a reason (no points at stake), never failed."""
    from gpukernels.grade.gates import Grading
    from gpukernels.grade.pool import Child
    from gpukernels.grade.protocol import Job, Report

    ex = load(EXERCISES / "01_vector_add")
    g = Grading(ex, SOLUTIONS / "01_vector_add.py", "", tmp_path, 60.0, False, False, 1, seed=1)
    assert g.admit()
    child = Child(("compile", 0), Job("compile", ex.name, ex.kernel, "k.py", "", str(tmp_path)), {}, 60.0)
    child.report = Report(stage="done", compile={"ok": None, "unavailable": "NvvmSupportError: libNVVM cannot be found"})
    child.returncode = 0
    g.cases = []
    assert g.score_compile(child)  # the simulator still runs
    g.add("correctness", True, "correct")
    g.add_compiles(correct=True)
    test = g.result.test("compiles")
    assert test.status == "skipped" and test.max_score == 0 and "not available on this machine" in test.output
    assert "cu12 or cu13" in test.output


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), 0, -5, 3601, "soon", None, 1e-30, 0.5])
def test_the_python_api_refuses_a_time_limit_that_cannot_end_or_start(timeout):
    with pytest.raises(ValueError, match=r"^timeout: expected seconds >= 1 and at most 3600, got "):
        grade([("01_vector_add", SOLUTIONS / "01_vector_add.py")], root=EXERCISES, timeout=timeout)


@pytest.mark.parametrize("out", ["class", "class/alice", "class/alice/grades", "class/../class/new"])
def test_grade_class_refuses_an_out_inside_the_class(tmp_path, capsys, monkeypatch, out):
    """`grade --class C --out C` (or C/alice) wrote results.json and the reports among the students' submissions."""
    klass = tmp_path / "class"
    (klass / "alice").mkdir(parents=True)
    (klass / "alice" / "01_vector_add.py").write_text((SOLUTIONS / "01_vector_add.py").read_text())
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run_main(capsys, ["grade", "01", "--class", "class", "--out", out, "--no-speed",
                                          "--exercises-dir", EXERCISES])
    assert code == 2, (code, stdout[-2000:], err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--out {out!r}: is inside --class 'class', the students' submissions; expected a folder outside" in err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before  # nothing written
