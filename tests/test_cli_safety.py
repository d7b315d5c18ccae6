"""Bad input is answered, never suffered: every command refuses what it cannot use with one line on stderr that
names the option, what was expected and what was given, and a non-zero exit -- no traceback, no hang, no file or
folder written outside where the user asked, nothing a command started left running. And the Python API names
its own functions and arguments, and the softmax versions agree on a NaN.

Most cases call the CLI's ``main()`` in this process (capsys reads its output); a few run it as a user would, in
a subprocess: the entry point, a handout folder, and the grader killed while a kernel loops forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpukernels
from gpukernels import LESSONS
from gpukernels.check import supports, version_inputs

from ._cli import one_line, run_main
from ._tiers import long_tier_after

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
FIXTURES = Path(__file__).parent / "fixtures" / "submissions"
LOOP = FIXTURES / "01_vector_add" / "infinite_loop.py"  # `while k < 1: i = i + 0`: never ends
ENV = dict(os.environ, GPUKERNELS_DEVICE="sim")
#: In this process the mode is the machine's: on a GPU `demo --size 1024` is a second's work, rightly not refused
SIM_ONLY = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the simulator's time limit (a GPU runs it)")


@pytest.fixture
def files(tmp_path):
    """Paths for the cases: a regular file, an empty file, a file missing, a JSON without results."""
    (tmp_path / "file").write_text("not a folder\n")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "other.json").write_text('{"a": 1}')
    (tmp_path / "empty_dir").mkdir()
    return {"FILE": tmp_path / "file", "EMPTY": tmp_path / "empty.json", "MISSING": tmp_path / "missing.json",
            "OTHER": tmp_path / "other.json", "OUT": tmp_path / "out", "EMPTY_DIR": tmp_path / "empty_dir",
            "NOPARENT": tmp_path / "no" / "such" / "r.json"}


# Each case: the command line (names in capitals are paths of `files`), the fragment the one line must hold
# (it names the option), and the exit status.
CASES = [
    (["grade", "01", "--json", "/proc/x"], "--json '/proc/x': cannot write files in /proc", 2),
    (["grade", "01", "--out", "OUT"], "--out", 2),
    (["grade", "--timeout", "inf"], "--timeout: expected seconds >= 1 and at most 3600, got 'inf'", 2),
    (["grade", "--submission", "EMPTY_DIR"], "nothing was graded", 1),
    (["plots", "--gallery", "/proc/x"], "--gallery '/proc/x': cannot write files in /proc", 2),
    (["plots", "--out", "/proc/x"], "--out '/proc/x': cannot create it", 2),
    (["plots", "--out", "FILE"], "is a file; expected a folder", 2),
    (["plots", "--out", "OUT", "--arch", "sm_1"], "--arch: unknown architecture 'sm_1'; known: sm_80", 2),
    (["plots", "--out", "OUT", "--bench", "MISSING"], "--bench", 2),
    (["plots", "--out", "OUT", "--bench", "EMPTY"], "--bench", 2),
    (["plots", "--out", "OUT", "--only", "nosuchfigure"], "--only 'nosuchfigure' matches no figure; choose from", 2),
    (["resources", "--json", "/proc/x"], "--json '/proc/x'", 2),
    (["resources", "--json", "NOPARENT"], "does not exist (no folder is created)", 2),
    (["resources", "--shape", "nosuch"], "--shape 'nosuch'", 2),
    (["resources", "--arch", "sm_1"], "--arch", 2),
    (["trace", "--size", "100000"], "required: lesson", 2),
    (["trace", "matmul", "--size", "100000"], "--size 100000: matmul at 100000x100000x100000 needs about", 2),
    (["trace", "matmul", "--seed", "-1"], "--seed: expected a whole number >= 0, got '-1'", 2),
    (["trace", "matmul", "--json", "/proc/x"], "--json '/proc/x'", 2),
    (["demo", "matmul", "--size", "100000000"], "--size 100000000", 2),
    (["demo", "softmax", "--size", "99999999999"], "--size 99999999999", 2),
    pytest.param(["demo", "matmul", "--size", "1024"], "--size 1024: matmul at 1024x1024x1024 would take at least", 2,
                 marks=SIM_ONLY),
    (["demo", "matmul", "--html", "OUT", "--seed", "-1"], "--seed: expected a whole number >= 0, got '-1'", 2),
    (["demo", "matmul", "--save", "NOPARENT"], "--save", 2),
    (["export-student", "/proc/x"], "DIR '/proc/x'", 2),
    (["export-student", "NOPARENT"], "its parent folder", 2),
    (["bench", "--from-json", "MISSING"], "--from-json", 2),
    (["bench", "--from-json", "EMPTY"], "--from-json", 2),
    (["bench", "--from-json", "OTHER"], "holds no 'results'", 2),
    (["bench", "--update-readme", "/proc/x"], "--update-readme '/proc/x'", 2),
    (["bench", "--json", "NOPARENT"], "--json", 2),
    (["bench", "--sizes", "4096,0"], "--sizes '4096,0'", 2),
    (["bench", "--jobs", "0"], "argument --jobs: expected a whole number of processes > 0, got '0'", 2),
    (["bench", "--jobs", "many"], "argument --jobs: expected a whole number of processes > 0, got 'many'", 2),
    (["bench", "attention", "--sizes", "64,64,64"], "--sizes '64,64,64': attention takes 5 numbers, B,H,Sq,Sk,D", 2),
    (["bench", "matmul", "--versions", "tiled", "nosuch"], "--versions 'nosuch': no version of matmul has that name", 2),
    (["bench", "--overhead", "--bogus"], "gpukernels bench --overhead: error: unrecognized arguments: --bogus", 2),
    (["bench", "--overhead", "--kinds", "jax"], "--kinds: invalid choice: 'jax'", 2),
    (["bench", "--overhead", "--from-json", "MISSING"], "--from-json", 2),
    (["bench", "--overhead", "--from-json", "OTHER"], "holds no 'results'", 2),
    (["bench", "--overhead", "--json", "NOPARENT"], "does not exist (no folder is created)", 2),
    (["bench", "--overhead", "--figure", "/proc/x.png"], "--figure '/proc/x.png'", 2),
]


@pytest.mark.parametrize("args, fragment, status", CASES,
                         ids=[" ".join(getattr(c, "values", c)[0]) for c in CASES])
def test_bad_input_is_one_line_naming_the_option(capsys, files, tmp_path, args, fragment, status):
    args = [str(files.get(a, a)) for a in args]
    code, out, err = run_main(capsys, args)
    assert code == status, (code, out[-2000:], err)
    one_line(err, fragment)
    # nothing written for a refusal: no missing parent made (`resources --json /nonexistent/r.json` made
    # /nonexistent), no output folder begun
    assert not files["NOPARENT"].parent.parent.exists() and not files["OUT"].exists()


_BENCH_REPORT = {"environment": {"device": "Test GPU"}, "method": "m", "results": [
    {"lesson": "softmax", "name": "naive", "kind": "kernel", "shape": [4, 4], "ok": True, "median_ms": 1.0,
     "bytes": 1, "flops": 1}]}
_OVERHEAD_REPORT = {"kind": "overhead", "environment": {"device": "Test GPU"}, "results": [
    {"kind": "overhead", "lesson": "softmax", "name": "naive", "shape": [4, 4], "ok": True}]}

# More cases, each run in an empty working directory (a refusal must write nothing there either). Names in
# capitals: FILE (a regular file), BENCH / OVERHEAD (a bench / an overhead report), NOTROWS, NOLESSON (bench
# reports whose rows are not a list of objects / lack 'lesson'), PAGE (an HTML file to write).
MORE_CASES = [
    # argparse's usage block above the error: two lines (info's parser was plain argparse.ArgumentParser)
    (["info", "--bogus"], "gpukernels info: error: unrecognized arguments: --bogus"),
    # an unknown command printed the whole usage to stderr under its error
    (["frobnicate"], "gpukernels: error: unknown command 'frobnicate'; expected one of info, demo"),
    (["INFO"], "unknown command 'INFO'; did you mean 'info'?"),
    # an empty value: `plots --out ""` wrote its figures into the working directory, `grade --submission ""` graded
    # the default files, `trace --version ""` traced the default version, `demo --save ""` wrote into the working
    # directory and `demo --html ""` ran the plain demo, each with status 0
    (["plots", "softmax", "--out", ""], "gpukernels plots: error: --out: expected a value, got ''"),
    (["plots", "softmax", "--out="], "--out: expected a value, got ''"),
    (["grade", "01", "--submission", ""], "--submission: expected a value, got ''"),
    (["trace", "softmax", "--version", " "], "--version: expected a value, got ' '"),
    (["demo", "softmax", "--size", "4", "--save", ""], "--save: expected a value, got ''"),
    (["demo", "softmax", "--size", "4", "--html", ""], "--html: expected a value, got ''"),
    (["grade", ""], "argument 1: expected a value, got ''"),
    # a path under a file: "its parent folder does not exist" said of a file
    (["demo", "softmax", "--size", "4", "--save", "FILE/x"], "is a file, not a folder"),
    # --seed sets the page's inputs only: the demo and the narrated sequence ignored it
    (["demo", "softmax", "--size", "4", "--seed", "3"], "--seed 3: --seed goes with --html FILE"),
    (["demo", "softmax", "--classroom", "--no-wait", "--seed", "3"], "--seed 3: --seed goes with --html FILE"),
    (["demo", "softmax", "--html", "PAGE", "--version", "naive", "--version", "naive"],
     "--version 'naive' given twice"),
    # a shape the version's own check refuses, with --html or --classroom: a LaunchError traceback
    (["demo", "cbr", "--html", "PAGE", "--size", "1,1,2,2,1,5,5"],
     "--size 1,1,2,2,1,5,5: the kernel (R, S) = (5, 5) is larger"),
    (["demo", "cbr", "--classroom", "--no-wait", "--size", "1,1,2,2,1,5,5"],
     "--size 1,1,2,2,1,5,5: the kernel (R, S) = (5, 5) is larger"),
    (["demo", "attention", "--html", "PAGE", "--size", "1,1,8,8,200"], "--size 1,1,8,8,200: the head dimension D"),
    # a report of the wrong kind, or rows that are not rows: a KeyError or TypeError traceback half-way through
    (["bench", "--from-json", "OVERHEAD"], "it is a `gpukernels bench --overhead --json` report; expected a"),
    (["bench", "--overhead", "--from-json", "BENCH"], "it is a `gpukernels bench --json` report; expected a"),
    (["bench", "--from-json", "NOTROWS"], "its 'results' is a str, not a list of rows"),
    (["bench", "--from-json", "NOLESSON"], "results[0] lacks 'lesson'"),
    (["plots", "softmax", "--out", "OUT", "--bench", "NOLESSON"], "--bench"),
    (["plots", "softmax", "--out", "OUT", "--bench", "OVERHEAD"], "it is a `gpukernels bench --overhead --json`"),
    # source and diff: argparse's usage block above the error; a negative -U exited 0 with broken hunk headers
    (["source", "matmul", "1", "--bogus"], "gpukernels source: error: unrecognized arguments: --bogus"),
    (["diff", "matmul", "1", "2", "--bogus"], "gpukernels diff: error: unrecognized arguments: --bogus"),
    (["diff", "matmul", "1", "2", "-U", "-1"], "argument -U/--context: expected a whole number >= 0, got '-1'"),
    (["diff", "matmul", "1", "2", "-U", "x"], "argument -U/--context: expected a whole number, got 'x'"),
    # a time limit no child can start within: every submission failed on it, the student blamed
    (["grade", "--timeout", "1e-30"], "argument --timeout: expected seconds >= 1 and at most 3600, got '1e-30'"),
    (["grade", "--timeout", "0.5"], "argument --timeout: expected seconds >= 1 and at most 3600, got '0.5'"),
    # a missing --exercises-dir was said to hold no exercises
    (["grade", "01", "--exercises-dir", "/nonexistent/ex"], "--exercises-dir: /nonexistent/ex does not exist"),
    (["export-student", "OUT", "--exercises-dir", "/nonexistent/ex"], "--exercises-dir: /nonexistent/ex does not "),
    (["export-student", "OUT", "--exercises-dir", "FILE"], "is not a folder; expected a folder of NN_name/spec.py"),
    # a page that cannot be written was refused after --out had been made: an empty folder left behind
    (["plots", "softmax", "--out", "OUT", "--gallery", "/proc/x.md"], "--gallery '/proc/x.md': cannot write files"),
    (["plots", "softmax", "--out", "OUT", "--gallery", "FILE/x.md"], "--gallery"),
    # --from-json prints reports already measured: what chooses measurements was silently ignored
    (["bench", "--from-json", "BENCH", "--sizes", "4,4"], "--sizes '4,4': --from-json prints reports already"),
    (["bench", "--from-json", "BENCH", "--versions", "naive"], "--versions 'naive': --from-json prints reports"),
    (["bench", "--from-json", "BENCH", "--suite"], "--suite: --from-json prints reports already measured"),
    (["bench", "--from-json", "BENCH", "--jobs", "1"], "--jobs 1: --from-json prints reports already measured"),
    (["bench", "softmax", "--from-json", "BENCH"], "LESSON 'softmax': --from-json prints reports already measured"),
    # more compile processes than cores
    (["bench", "--jobs", "100000"], "--jobs 100000: expected at most"),
]


@pytest.mark.parametrize("args, fragment", MORE_CASES, ids=[" ".join(c[0]) for c in MORE_CASES])
def test_more_bad_input_is_one_line_and_writes_nothing(capfd, tmp_path, monkeypatch, args, fragment):
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    (data / "file").write_text("not a folder\n")
    reports = {"BENCH": _BENCH_REPORT, "OVERHEAD": _OVERHEAD_REPORT, "NOTROWS": dict(_BENCH_REPORT, results="abc"),
               "NOLESSON": dict(_BENCH_REPORT, results=[{"name": "naive"}])}
    for name, report in reports.items():
        (data / name).write_text(json.dumps(report))
    paths = dict({name: data / name for name in reports}, FILE=data / "file", OUT=tmp_path / "out",
                 PAGE=tmp_path / "page.html")
    args = [a.replace("FILE", str(paths["FILE"])) if a.startswith("FILE") else str(paths.get(a, a)) for a in args]
    monkeypatch.chdir(work)
    before = sorted(p.name for p in data.iterdir())
    code, out, err = run_main(capfd, args)
    assert code == 2, (code, out[-2000:], err[-2000:])
    one_line(err, fragment)
    assert not any(work.iterdir()), list(work.iterdir())  # nothing in the working directory
    assert sorted(p.name for p in data.iterdir()) == before  # nor beside the inputs
    assert not paths["OUT"].exists() and not paths["PAGE"].exists()


def test_the_entry_point_prints_one_line_too(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "plots", "--out", str(tmp_path), "--arch", "sm_1"],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 2
    one_line(proc.stderr, "gpukernels plots: error: --arch: unknown architecture 'sm_1'")


# ----------------------------------------------------------------------------------------------------------
# Files land where they were asked for, and nowhere else
# ----------------------------------------------------------------------------------------------------------


def test_plots_with_out_write_only_under_it(capsys, tmp_path):
    gallery = ROOT / "docs" / "gallery.md"
    before = gallery.read_bytes() if gallery.exists() else None
    code, out, err = run_main(capsys, ["plots", "softmax", "--only", "softmax_occupancy", "--out", tmp_path / "f"])
    assert code == 0, err
    assert (tmp_path / "f" / "gallery.md").is_file()
    assert (gallery.read_bytes() if gallery.exists() else None) == before  # the repository's page untouched
    assert sorted(p.name for p in (tmp_path / "f").iterdir() if p.suffix != ".png") == ["gallery.md"]


@SIM_ONLY
def test_a_simulator_run_past_the_limit_is_stopped_with_the_reason(capsys, monkeypatch):
    """Work the simulator cannot finish in time is stopped once it projects past the limit (here 1 s, so that the
    test is short; the default is 10 minutes): a progress bar meanwhile, then one line that says how long it
    would take."""
    monkeypatch.setenv("GPUKERNELS_SIM_LIMIT", "1")
    t0 = time.monotonic()
    code, out, err = run_main(capsys, ["trace", "matmul", "--version", "naive", "--size", "96"])
    assert code == 2 and time.monotonic() - t0 < 30
    one_line(err, "--size 96: matmul.naive 96x96x96 would take")
    assert "on the simulator" in err and "GPUKERNELS_SIM_LIMIT" in err


# ----------------------------------------------------------------------------------------------------------
# The grader: a handout's own file, hints that fit the failure, memory, and children that die with it
# ----------------------------------------------------------------------------------------------------------


def test_inside_an_exercise_folder_grade_grades_that_folders_file(tmp_path):
    from gpukernels.grade import export
    from gpukernels.grade.discovery import current_exercise, handout_dir

    handout = tmp_path / "handout"
    export(EXERCISES, handout)
    folder = handout / "01_vector_add"
    assert handout_dir(folder, EXERCISES) == handout.resolve()
    assert current_exercise(EXERCISES, folder) == "01_vector_add"
    assert handout_dir(EXERCISES / "01_vector_add", EXERCISES) is None  # the grader's own: the default files
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "grade", "01", "--no-speed"], cwd=folder,
                          env=dict(ENV, COLUMNS="300"), capture_output=True, text=True, timeout=300)
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    assert proc.returncode == 1, proc.stderr  # the stub scores 0: below full marks
    assert f"in {handout.resolve()}: 01_vector_add/kernel.py" in first, first  # the handout's stub, not exercises/
    assert str(EXERCISES / "01_vector_add") not in proc.stdout


def test_the_hint_shown_is_the_one_written_for_the_failure(tmp_path):
    from gpukernels.grade.gates import Grading
    from gpukernels.grade.spec import load

    ex = load(EXERCISES / "01_vector_add")
    error = ("shape (1,): the kernel failed: OutOfBoundsError: out-of-bounds read of global array 'a' at index 1 "
             "(shape (1,))")
    assert [n for n, _ in ex.hints_for("correctness", 1, error)] == [2]  # the `<=` guard
    assert [n for n, _ in ex.hints_for("correctness", 2, error)] == [1, 2]  # shown in their README order
    assert [n for n, _ in ex.hints_for("correctness", 1, "expected 3.0, got 2.0")] == [1]  # none fits: in order
    assert all("<!--" not in tip for tips in ex.hints.values() for tip in tips)  # the marker is not shown
    g = Grading(ex, tmp_path / "k.py", "", tmp_path, 60.0, False, False, 1, seed=1)
    g.add("correctness", False, error)
    text = g.result.tests[-1].output
    assert "\nhint 2: The last block runs 64 threads" in text and "hint 1:" not in text
    assert "`<=` lets one thread too many through" in text


def test_a_child_killed_by_sigkill_is_reported_with_memory_named(tmp_path):
    from gpukernels.grade.gates import child_problem
    from gpukernels.grade.pool import Child
    from gpukernels.grade.protocol import Job, Report

    c = Child(("sim", 0), Job("sim", "01", "k", "k.py", "", str(tmp_path)), {}, 10.0)
    c.report, c.returncode = Report(stage="run"), -signal.SIGKILL
    text = child_problem(c, "simulator", 10.0)
    assert text.startswith("the simulator process was killed by SIGKILL") and "out-of-memory" in text


def test_static_shared_memory_is_counted_from_the_ptx():
    from gpukernels.grade._child import STATIC_SHARED_LIMIT, static_shared_bytes

    ptx = (".visible .shared .align 4 .b8 _cudapy_smem_1[49152];\n.shared .align 8 .b64 t[2][3];\n"
           ".extern .shared .align 16 .b8 dyn[];\n\tst.shared.f32 [%rd8], %f1;\n")
    assert static_shared_bytes(ptx) == 49152 + 48
    assert STATIC_SHARED_LIMIT == 48 * 1024


@pytest.mark.needs_cuda_toolchain
def test_the_compile_gate_refuses_a_shared_array_no_gpu_has(tmp_path):
    """8 GB of cuda.shared.array compiles to PTX, and the simulator would try to allocate it (the child died by
    SIGKILL, saying nothing of memory): the compile gate refuses it, saying how much and the limit."""
    from gpukernels.grade import grade

    sub = tmp_path / "03_block_sum.py"
    sub.write_text("from numba import cuda, float32\n\nHUGE = 2 * 1024 * 1024 * 1024\n\n\n@cuda.jit\n"
                   "def block_sum(x, partial):\n    buf = cuda.shared.array(HUGE, float32)\n"
                   "    buf[cuda.threadIdx.x] = x[0]\n    partial[cuda.blockIdx.x] = buf[0]\n")
    (result,) = grade([("03_block_sum", sub)], root=EXERCISES, timeout=60.0)
    compiles = result.test("compiles")
    assert compiles.status == "failed" and "8.0 GB of shared memory" in compiles.output
    assert "at most 48 KB of static shared memory" in compiles.output
    assert result.test("correctness").output.startswith("not run")  # nothing of it ran


def _descendants(pid: int) -> list[int]:
    kids: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# the default tier: one signal that can be caught and one that cannot; the long tier every signal with and without
# the zygote
KILLS = [pytest.param("SIGTERM", "1", id="sigterm"), pytest.param("SIGKILL", "0", id="sigkill-no-zygote"),
         pytest.param("SIGINT", "1", id="ctrl-c", marks=pytest.mark.slow),
         pytest.param("SIGKILL", "1", id="sigkill", marks=pytest.mark.slow),
         pytest.param("SIGINT", "0", id="ctrl-c-no-zygote", marks=pytest.mark.slow),
         pytest.param("SIGTERM", "0", id="sigterm-no-zygote", marks=pytest.mark.slow)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the grader's children")
@pytest.mark.parametrize("signame, fork", KILLS)
def test_children_die_with_the_grader(tmp_path, signame, fork):
    """A `while True` kernel runs in a child (of a zygote, or started alone); whatever ends the grader -- Ctrl-C
    (SIGINT to the terminal's process group), SIGTERM, SIGKILL -- ends the child too. Ctrl-C and SIGTERM print
    one line and remove the grader's temporary folder (SIGKILL gives the grader no chance to)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(ENV, TMPDIR=str(tmp), GPUKERNELS_GRADE_FORK=fork)
    proc = subprocess.Popen([sys.executable, "-m", "gpukernels", "grade", "01", "--submission", str(LOOP),
                             "--timeout", "120"], cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids: list = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the simulator child runs the loop
            reports = list(tmp.glob("gpukernels-grade-*/*/sim/report.json"))
            try:
                if reports and json.loads(reports[0].read_text()).get("stage") == "run":
                    break
            except (OSError, ValueError):
                pass
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the simulator child never started")
        time.sleep(0.3)
        kids = _descendants(proc.pid)
        assert kids, "no child process to watch"
        if signame == "SIGINT":  # what Ctrl-C does: the terminal signals its foreground process group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, getattr(signal, signame))
        out, err = proc.communicate(timeout=60)
        _assert_gone(kids, "children outlived the grader")
        if signame != "SIGKILL":
            assert proc.returncode == 128 + getattr(signal, signame), (proc.returncode, err)
            one_line(err, "gpukernels grade: " + ("interrupted" if signame == "SIGINT" else "stopped by SIGTERM"))
            assert not list(tmp.glob("gpukernels-grade-*")), "the grader's temporary folder was left behind"
    finally:
        _end(proc, kids)


def _assert_gone(kids: list, message: str) -> None:
    """The processes ``kids`` have all ended within 10 s (they were told to when their parent was)."""
    deadline = time.monotonic() + 10
    while any(_alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)], message


def _end(proc, kids: list) -> None:
    """Whatever a test started and left running: the command, then its children -- only those, by id."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
    for k in kids:
        if _alive(k):
            os.kill(k, signal.SIGKILL)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the command's progress")
def test_sigterm_stops_a_command_with_one_line(tmp_path):
    """SIGTERM (what `timeout` sends) while the simulator runs a kernel: one line and status 143, as Ctrl-C gives
    130 -- it ended the command silently (status -15), and a handler's exception raised inside a kernel reached
    the user re-raised by the simulator as a traceback."""
    # No time limit (GPUKERNELS_SIM_LIMIT=0): the run must still be going when the signal comes, on any machine.
    # With the limit on, a loaded 16-core GPU host projected the launch past it and refused (status 2) before the
    # signal; a size picked to stay under the limit on one machine is over it on another.
    proc = subprocess.Popen([sys.executable, "-m", "gpukernels", "trace", "matmul", "--version", "naive", "--size",
                             "320"], cwd=tmp_path, env=dict(ENV, GPUKERNELS_SIM_LIMIT="0"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _cpu_seconds(proc.pid) < 3 and time.monotonic() < deadline:  # imported, and into the kernel
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err[-2000:])
    one_line(err, "gpukernels trace: stopped by SIGTERM")
    assert not any(tmp_path.iterdir())


@pytest.mark.needs_cuda_toolchain
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the command's children")
def test_sigterm_ends_the_compilers_of_resources(tmp_path):
    """`gpukernels resources` compiles in child processes: SIGTERM to the command (`timeout 60 gpukernels
    resources ...`) ends them too -- they outlived it, each compiling on for up to minutes."""
    proc = subprocess.Popen([sys.executable, "-m", "gpukernels", "resources", "--no-cache", "matmul"], cwd=tmp_path,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids: list = []
    try:
        deadline = time.monotonic() + 120
        while not kids and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
            kids = _descendants(proc.pid)
        assert kids, "no compiler process started"
        time.sleep(0.5)
        kids = _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        _assert_gone(kids, "compilers outlived the command")
        assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err[-2000:])
        one_line(err, "gpukernels resources: stopped by SIGTERM")
    finally:
        _end(proc, kids)


_WATCHED = """
import sys
from gpukernels.grade._child import watch_parent
watch_parent(0.05)
print("ready", flush=True)
while True:  # a student's endless kernel, on the simulator: Python that never returns
    pass
"""
_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True, stdout=subprocess.PIPE, text=True)
print(child.pid, flush=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the child's state")
def test_a_child_without_pdeathsig_ends_when_its_parent_is_killed():
    """Where no PR_SET_PDEATHSIG exists (macOS), a grader's child started alone watches its parent: SIGKILL the
    parent while the child spins in Python, and the child (leading its own session) is gone within seconds."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _WATCHED], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "ready"
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


# ----------------------------------------------------------------------------------------------------------
# The Python API
# ----------------------------------------------------------------------------------------------------------


def test_a_padding_too_large_for_any_output_is_a_value_error_naming_padding():
    from gpukernels import cbr

    x, w, b = cbr.make_inputs((1, 2, 5, 5, 3, 3, 3), 0)
    x0 = x.copy()
    with pytest.raises(ValueError, match=r"^padding = 1000000000 makes the output .* use a smaller padding"):
        cbr.optimized(x, w, b, padding=10**9)
    assert np.array_equal(x, x0)  # inputs never modified
    assert cbr.optimized(x, w, b, padding=4).shape == (1, 3, 11, 11)  # large, but a real output: allowed


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_unexpected_arguments_name_the_public_function(lesson):
    mod = LESSONS[lesson]
    for name, version in mod.VERSIONS.items():
        shape = next(s for s in mod.SHAPES["test"][1:] + mod.SHAPES["test"][:1] if supports(lesson, name, s))
        inputs = version_inputs(lesson, name, mod.make_inputs(shape, 0))  # as the version takes them
        with pytest.raises(TypeError, match=rf"^{lesson}\.{name}\(\) got an unexpected keyword argument 'foo'$"):
            version(*inputs, foo=1)
        with pytest.raises(TypeError, match=rf"^{lesson}\.{name}\(\) got an unexpected keyword argument 'foo'$"):
            version.launches(*inputs, foo=1)


#: A row shorter than a warp and one longer than a block of 512 threads (several values per thread); optimized
#: runs split_row only from 32768 values on, so its own dispatch is checked at 2 x 32768, with one NaN.
SOFTMAX_SHAPES = [(4, 33), (2, 1025)]


@pytest.mark.parametrize("name", long_tier_after((0, len(LESSONS["softmax"].VERSIONS) - 1),
                                                  list(LESSONS["softmax"].VERSIONS)))
def test_every_softmax_version_makes_a_row_with_a_nan_all_nan(name):
    """One documented behaviour (the lesson's docstring): a NaN makes its whole row NaN, as in the float64
    reference; the other rows are what they would be without it."""
    softmax = LESSONS["softmax"]
    cases = [(shape, col) for shape in SOFTMAX_SHAPES for col in (0, shape[1] // 2, shape[1] - 1)]
    if name == "optimized":
        assert softmax.optimized.choose(2, 32768).step == "split_row"
        cases.append(((2, 32768), 5))
    for shape, col in cases:
        (x,) = softmax.make_inputs(shape, 3)
        x[1, col] = np.nan
        ref = softmax.reference(x)
        assert np.isnan(ref[1]).all() and not np.isnan(np.delete(ref, 1, 0)).any()
        y = softmax.VERSIONS[name](x)
        assert np.isnan(y[1]).all(), f"{name} at {shape}, NaN at column {col}: row 1 is not all NaN"
        rest = np.delete(y, 1, 0)
        assert not np.isnan(rest).any(), f"{name} at {shape}: a NaN leaked into another row"
        np.testing.assert_allclose(rest, np.delete(ref, 1, 0), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# The module entry points: python -m gpukernels.notebook, python -m gpukernels.readme; source and diff's help
# ----------------------------------------------------------------------------------------------------------


def test_source_and_diff_help_name_every_lesson(capsys):
    for command in ("source", "diff"):
        code, out, err = run_main(capsys, [command, "--help"])
        assert code == 0, err
        assert all(name in out for name in LESSONS), out  # it said "matmul, softmax or cbr"


def test_a_context_of_zero_lines_is_a_diff(capsys):
    code, out, err = run_main(capsys, ["diff", "softmax", "1", "2", "-U", "0"])
    assert code == 0, err
    assert "@@ -" in out and "@@ --" not in out


# `keep LESSON DIM...`: a traceback for a negative or a missing dimension and for a shape too large for memory (a
# 37 GiB allocation); `keep matmul 0 0 0` exited 0 and wrote notebooks/traced/matmul-0x0x0.json
NOTEBOOK_CASES = [
    (["keep", "matmul", "-1", "-1", "-1"], "argument DIM: expected a whole number >= 1, got '-1'"),
    (["keep", "matmul", "0", "0", "0"], "argument DIM: expected a whole number >= 1, got '0'"),
    (["keep", "matmul", "8"], "DIM '8': matmul takes 3 numbers, M N K (e.g. "),
    (["keep", "softmax", "8", "8", "8"], "DIM '8 8 8': softmax takes 2 numbers"),
    (["keep", "matmul", "100000", "100000", "100000"], "DIM 100000 100000 100000: matmul at 100000x100000x100000 "
                                                       "needs about"),
    (["keep", "nosuch", "8", "8"], "LESSON 'nosuch': expected one of matmul, softmax"),
    (["keep", "matmul"], "the following arguments are required: DIM"),
    (["kept"], "argument COMMAND: invalid choice: 'kept'"),
    pytest.param(["keep", "matmul", "1024", "1024", "1024"], "DIM 1024 1024 1024: matmul at 1024x1024x1024 would "
                                                             "take at least", marks=SIM_ONLY),
    (["keep", "cbr", "1", "1", "2", "2", "1", "5", "5"], "DIM 1 1 2 2 1 5 5: the kernel (R, S) = (5, 5) is larger"),
]


@pytest.mark.parametrize("args, fragment", NOTEBOOK_CASES, ids=[" ".join(getattr(c, "values", c)[0])
                                                                for c in NOTEBOOK_CASES])
def test_notebook_keep_refuses_bad_input_in_one_line_writing_nothing(capsys, tmp_path, monkeypatch, args, fragment):
    from gpukernels import notebook

    kept = ROOT / "notebooks" / "traced"
    before = sorted(p.name for p in kept.iterdir()) if kept.is_dir() else []
    monkeypatch.setattr(notebook, "TRACED", tmp_path / "traced")  # were one written, it would land here
    try:
        code = notebook.main(args)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-2000:], err[-2000:])
    one_line(err, fragment)
    assert err.startswith("python -m gpukernels.notebook")
    assert not (tmp_path / "traced").exists()
    assert (sorted(p.name for p in kept.iterdir()) if kept.is_dir() else []) == before


@pytest.mark.parametrize("args", [["--chek"], ["--check", "extra"], ["-x"]], ids=" ".join)
def test_readme_refuses_unknown_arguments_and_rewrites_nothing(capsys, tmp_path, monkeypatch, args):
    """`python -m gpukernels.readme --chek` ignored the typo and rewrote README.md (a copy here, made out of date
    so that a rewrite shows)."""
    from gpukernels import readme

    files = {}
    for name, path in (("README", readme.README), ("OVERHEAD_DOC", readme.OVERHEAD_DOC)):
        copy = tmp_path / path.name
        text = path.read_text()
        begin = text.index("-->", text.index(":begin -->" if name == "OVERHEAD_DOC" else "<!-- versions:begin"))
        copy.write_text(text[:begin + 3] + "\nout of date\n" + text[begin + 3:])
        files[copy] = copy.read_bytes()
        monkeypatch.setattr(readme, name, copy)
    real = {p: p.read_bytes() for p in (ROOT / "README.md", ROOT / "docs" / "overhead.md")}
    try:
        code = readme.main(args)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    one_line(err, f"python -m gpukernels.readme: error: unrecognized arguments: {args[-1]}")
    assert {p: p.read_bytes() for p in files} == files
    assert {p: p.read_bytes() for p in real} == real


def test_readme_check_still_checks(capsys, tmp_path, monkeypatch):
    from gpukernels import readme

    copy = tmp_path / "README.md"
    text = readme.README.read_text()
    end = text.index("<!-- versions:end -->")
    copy.write_text(text[:end] + "out of date\n" + text[end:])
    before = copy.read_bytes()
    monkeypatch.setattr(readme, "README", copy)
    assert readme.main(["--check"]) == 1
    assert "README.md out of date" in capsys.readouterr().err
    assert copy.read_bytes() == before


def test_export_student_refuses_a_destination_inside_the_exercises(capsys, tmp_path):
    """`gpukernels export-student exercises/new` exported into the exercises folder itself."""
    import shutil

    ex = tmp_path / "ex"
    ex.mkdir()
    shutil.copytree(EXERCISES / "01_vector_add", ex / "01_vector_add",
                    ignore=shutil.ignore_patterns("__pycache__"))
    before = sorted(str(p.relative_to(ex)) for p in ex.rglob("*"))
    for dest, fragment in ((ex / "new", "is inside the exercises folder"), (ex, "is the exercises folder"),
                           (ex / "01_vector_add" / "h", "is inside the exercises folder"),
                           (tmp_path, "holds the exercises folder")):
        code, out, err = run_main(capsys, ["export-student", dest, "--exercises-dir", ex])
        assert code == 2, (dest, code, out, err)
        one_line(err, f"gpukernels export-student: DIR {str(dest)!r}: {fragment}")
        assert sorted(str(p.relative_to(ex)) for p in ex.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex"]
    code, out, err = run_main(capsys, ["export-student", tmp_path / "handout", "--exercises-dir", ex])  # beside it
    assert code == 0, err
    assert (tmp_path / "handout" / "01_vector_add" / "kernel.py").is_file()
