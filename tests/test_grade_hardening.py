"""The grader against students who try to beat it and against runs that go wrong -- what each check catches, proved
on a fixture or a real run (the fixtures themselves are graded end to end by test_grade.py):

* sizes past the published ranges (fixtures ``k_loop_capped_at_80``, ``row_loop_capped_at_160``; the draw is
  tested in test_grade_units.py);
* technique by data flow (``decoy_mma``, ``lane0_sums_alone``): the perturbation itself, here;
* idle lanes in coalescing (``lone_lane_walks_the_row``): the tracer's lanes per request, here;
* output capped, on disk, whatever a submission prints (``printing_loop``), through a zygote and a started child;
* a killed grader's folder removed by the next run, never a live run's;
* the class report's failures grouped across students, each message whole;
* messages that fit an 80-column terminal, the first line, a NaN's likely cause.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpukernels  # noqa: F401  (GPUKERNELS_DEVICE=sim in the test suite: the simulator)
from gpukernels.grade import grade
from gpukernels.grade import spec as S
from gpukernels.grade.results import ExerciseResult
from gpukernels.grade.results import TestResult as Entry  # (a name pytest would try to collect)

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = EXERCISES / "solutions"
FIXTURES = Path(__file__).parent / "fixtures" / "submissions"
SIM = pytest.mark.skipif(gpukernels.MODE != "sim", reason="traces and perturbs kernels on the simulator")


def _kernel(path: Path, name: str):
    """The kernel ``name`` of a solution or fixture file, imported here (the simulator runs it in this process)."""
    spec = importlib.util.spec_from_file_location(f"_hardening_{path.parent.name}_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def _run_case(name: str, path: Path, seed: int = 3, traced: bool = False):
    """Run a submission's kernel on the technique's case of ``name`` in this process: (exercise, shape, arrays,
    trace or None)."""
    from gpukernels.grade.gates import make_case, poisoned

    ex = S.load(EXERCISES / name)
    kernel = _kernel(path, ex.kernel)
    shape = ex.draw_trace_shape(seed)
    case = make_case(ex, shape, seed, reference=False)
    arrays = {**case.inputs, ex.out: poisoned(ex.out_shape(shape))}
    args = [arrays[n] if n in arrays else case.params[n] for n in ex.args]
    if not traced:
        kernel[case.grid, case.block](*args)
        return ex, shape, arrays, None
    trace_mod = importlib.import_module("gpukernels.trace")
    with trace_mod.trace() as t:
        kernel[case.grid, case.block](*args)
    return ex, shape, arrays, (t, dict(zip(inspect.signature(kernel.py_func).parameters, ex.args)))


# ----------------------------------------------------------------------------------------------------------
# Idle lanes: the tracer counts them, the coalescing check counts them as waste
# ----------------------------------------------------------------------------------------------------------


@SIM
def test_the_tracer_counts_the_lanes_of_each_request():
    """A warp whose 32 lanes read 32 floats: one request, 32 lanes; lane 0 alone reading them: 32 requests of one
    lane each -- no sector wasted either way, but 1/32 of the lanes."""
    from numba import cuda

    trace_mod = importlib.import_module("gpukernels.trace")

    @cuda.jit
    def every_lane(x, y):
        i = cuda.threadIdx.x
        y[i] = x[i]

    @cuda.jit
    def lane_zero(x, y):
        if cuda.threadIdx.x == 0:
            for i in range(x.size):
                y[i] = x[i]

    x = np.arange(32, dtype=np.float32)
    for kernel, requests, lanes in ((every_lane, 1, 32), (lane_zero, 32, 32)):
        y = np.zeros_like(x)
        with trace_mod.trace() as t:
            kernel[1, 32](x, y)
        (load,) = [ln for ln in t.coalescing().lines if ln.kind == "read"]
        assert (load.requests, load.lanes, load.efficiency) == (requests, lanes, 1.0)
        assert load.lane_utilisation == pytest.approx(lanes / (32 * requests))
    assert trace_mod.lane_utilisation(40, 2) == 40 / 64 and trace_mod.lane_utilisation(0, 0) == 1.0


def test_coalescing_counts_idle_lanes_as_waste():
    check = S.Coalesced(("x",), kinds=("load",))
    full = {"arrays": {"x": {"load_efficiency": 1.0, "load_lanes": 1.0}}}
    alone = {"arrays": {"x": {"load_efficiency": 1.0, "load_lanes": 1 / 32}}}
    assert check.evaluate(full, (1,)) == (True, "coalescing efficiency: x loads 100%")
    ok, text = check.evaluate(alone, (1,))
    assert not ok and "x loads 3% (100% of sectors used x 3% of lanes active)" in text and "idle" in text
    assert check.evaluate({"arrays": {"x": {"load_efficiency": 1.0}}}, (1,))[0]  # no lane count: as before


@SIM
def test_a_lone_lane_is_caught_and_the_solution_is_not():
    from gpukernels.grade._child import observe

    for path, ok in ((SOLUTIONS / "11_softmax_merge.py", True),
                     (FIXTURES / "11_softmax_merge" / "lone_lane_walks_the_row.py", False)):
        ex, shape, _, (t, rename) = _run_case("11_softmax_merge", path, traced=True)
        obs = observe(t, rename)
        verdicts = [c.evaluate(obs, shape)[0] for c in ex.technique if isinstance(c, S.Coalesced)]
        assert verdicts == [ok, ok], (path.name, [c.evaluate(obs, shape) for c in ex.technique])


# ----------------------------------------------------------------------------------------------------------
# Data flow: the named instruction did the work
# ----------------------------------------------------------------------------------------------------------


@SIM
@pytest.mark.parametrize("name, kind, right, cheat", [
    ("10_mma_fragments", "mma_f16", "solutions", "decoy_mma"),
    ("09_warp_sum", "shfl", "solutions", "lane0_sums_alone"),
])
def test_perturbing_the_instruction_moves_a_real_output_and_not_a_decoys(name, kind, right, cheat):
    from gpukernels.grade._child import _perturbation

    ex = S.load(EXERCISES / name)
    check = next(c for c in ex.technique if isinstance(c, S.DataFlow))
    for path, ok in ((SOLUTIONS / f"{name}.py", True), (FIXTURES / name / f"{cheat}.py", False)):
        _, _, clean, _ = _run_case(name, path)
        with _perturbation(kind):
            _, _, perturbed, _ = _run_case(name, path)
        before, after = clean[ex.out].astype(np.float64), perturbed[ex.out].astype(np.float64)
        assert np.isfinite(before).all()
        typical = float(np.sqrt(np.mean(before ** 2)))
        moved = int((np.abs(after - before) > ex.tolerance * typical).sum())
        doubled = int((np.abs(after - 2 * before) <= 2 * ex.tolerance * typical).sum())
        verdict, text = check.evaluate({"dataflow": {kind: {"size": before.size, "moved": moved,
                                                            "doubled": doubled}}}, ())
        assert verdict is ok, (path.name, text)
        if kind == "mma_f16" and ok:
            np.testing.assert_allclose(after, 2 * before, rtol=1e-6, atol=1e-3 * typical)  # exactly twice
    # the simulator is itself again after the context: the last file, run again, gives its unperturbed output
    _, _, again, _ = _run_case(name, path)
    np.testing.assert_array_equal(again[ex.out], clean[ex.out])


DECOY_COPIES = '''
from numba import cuda, float32
from gpukernels._intrinsics import async_commit, async_wait, copy_async

TILE = 16


@cuda.jit
def matmul_async(a, b, c):
    # tiles copied by cp.async into shared memory, waited for -- and never read: the product from global loads
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, k, TILE):
        inside = row < m and k0 + tx < k
        copy_async(a_tile, ty * TILE + tx, a, row * k + k0 + tx if inside else 0, 4 if inside else 0)
        inside = k0 + ty < k and col < n
        copy_async(b_tile, ty * TILE + tx, b, (k0 + ty) * n + col if inside else 0, 4 if inside else 0)
        async_commit()
        async_wait(0)
        cuda.syncthreads()
        if row < m and col < n:
            for kk in range(k0, min(k0 + TILE, k)):
                acc += a[row, kk] * b[kk, col]
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc
'''


@SIM
def test_cp_async_copies_perturbed_move_a_ring_built_product_and_not_a_decoys(tmp_path):
    """The cp.async perturbation (every copy lands its elements + 1), for a spec that counts cp.async: the ring's
    product moves everywhere, a kernel that copies the tiles but multiplies from global loads does not move."""
    from gpukernels.grade._child import _perturbation

    name = "12_async_ring"
    if not (EXERCISES / name / "spec.py").is_file() or not (SOLUTIONS / f"{name}.py").is_file():
        pytest.skip("no cp.async exercise here")
    decoy = tmp_path / "decoy_copies.py"
    decoy.write_text(DECOY_COPIES)
    for path, ok in ((SOLUTIONS / f"{name}.py", True), (decoy, False)):
        ex, _, clean, _ = _run_case(name, path)
        with _perturbation("cp.async"):
            _, _, perturbed, _ = _run_case(name, path)
        before, after = clean[ex.out].astype(np.float64), perturbed[ex.out].astype(np.float64)
        typical = float(np.sqrt(np.mean(before ** 2)))
        moved = int((np.abs(after - before) > ex.tolerance * typical).sum())
        assert (moved == before.size) is ok, (path.name, moved, before.size)


def test_every_spec_that_names_an_instruction_checks_its_data_flow():
    """A count of calls is no proof: wherever a spec counts a warp instruction, or forbids shared memory (the
    shuffle exercise), it also checks that the instruction's results make the output."""
    named = {}
    for folder in sorted(p for p in EXERCISES.iterdir() if p.name[:2].isdigit()):
        ex = S.load(folder)
        kinds = {c.kind for c in ex.technique if isinstance(c, S.WarpInstructions)}
        kinds |= {"shfl" for c in ex.technique if isinstance(c, S.NoSharedMemory)}
        flows = {c.instruction for c in ex.technique if isinstance(c, S.DataFlow)}
        assert kinds <= set(S.DataFlow.INSTRUCTIONS), (folder.name, kinds)  # the grader can check each one's flow
        if folder.name[:2] <= "11":  # (a newer exercise's spec is its author's to complete)
            assert kinds == flows, (folder.name, kinds, flows)
        named.update(dict.fromkeys(flows, folder.name))
    assert {"mma_f16": "10_mma_fragments", "shfl": "09_warp_sum"}.items() <= named.items()
    with pytest.raises(ValueError, match="DataFlow: instruction must be one of mma_f16, shfl, cp.async"):
        S.DataFlow("ldmatrix_x4")


def test_data_flow_check_reads_its_observation():
    check = S.DataFlow("shfl")
    assert not check.evaluate({}, ())[0]  # no report: never a pass
    assert not check.evaluate({"dataflow": {"shfl": {"error": "boom"}}}, ())[0]
    assert check.evaluate({"dataflow": {"shfl": {"size": 4, "moved": 4, "doubled": 0}}}, ())[0]
    ok, text = check.evaluate({"dataflow": {"shfl": {"size": 4, "moved": 3, "doubled": 0}}}, ())
    assert not ok and "1 of the 4 outputs did not change" in text
    doubles = S.DataFlow("mma_f16", expect="doubles")
    assert doubles.evaluate({"dataflow": {"mma_f16": {"size": 4, "moved": 4, "doubled": 4}}}, ())[0]
    assert not doubles.evaluate({"dataflow": {"mma_f16": {"size": 4, "moved": 4, "doubled": 3}}}, ())[0]


# ----------------------------------------------------------------------------------------------------------
# Output capped, on disk
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fork", ["1", pytest.param("0", marks=pytest.mark.slow)])
def test_a_printing_loop_is_capped_on_disk_and_reported_by_its_true_size(tmp_path, monkeypatch, fork):
    """27 MB printed by a submission: on disk at most 64 kB per stream and process (the grader's folder is kept
    here to look at), the message gives the true size. Through a zygote's fork, and (long tier) a started child."""
    import gpukernels.grade as grade_mod
    from gpukernels.grade._child import OUTPUT_BUDGET

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(grade_mod, "work_folder", lambda: contextlib.nullcontext(str(work)))
    monkeypatch.setenv("GPUKERNELS_GRADE_FORK", fork)
    (result,) = grade([("01_vector_add", FIXTURES / "01_vector_add" / "printing_loop.py")], root=EXERCISES,
                      timeout=60.0, seed=1)
    text = result.tests[0].output
    assert result.score == 0 and "your code printed" in text, text
    printed = text.split("(your code printed ", 1)[1]
    lines, size = printed.split(" line(s), ")[0], printed.split(" line(s), ")[1].split(",")[0]
    assert int(lines) >= 40000 * 6 and size.endswith("MB") and float(size.split()[0]) > 10, printed
    assert "the grader kept the first 64 kB" in printed
    streams = [p for p in work.rglob("*") if p.name in ("stdout", "stderr")]
    assert streams and max(p.stat().st_size for p in streams) <= OUTPUT_BUDGET
    assert sum(p.stat().st_size for p in work.rglob("*") if p.is_file()) < 2 * 2**20  # the whole run's folder


def test_a_capped_sink_keeps_its_budget_and_counts_the_rest(tmp_path):
    from gpukernels.grade._child import CappedSink

    read, write = os.pipe()
    sink = CappedSink(read, str(tmp_path / "out"), budget=100)
    os.write(write, b"x" * 60 + b"\n")
    sink.pump()
    os.write(write, b"y" * 200 + b"\n\n")
    os.close(write)
    assert sink.close() == [263, 3]
    assert (tmp_path / "out").read_bytes() == b"x" * 60 + b"\n" + b"y" * 39


# ----------------------------------------------------------------------------------------------------------
# Nothing left behind
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock and /proc")
def test_a_killed_graders_folder_is_removed_by_the_next_run_and_a_live_ones_is_not(tmp_path, monkeypatch):
    """`kill -9` of a grader whose child loops forever leaves its folder (it cannot remove it); the next run removes
    it, and keeps the folder of a grader that is still running (another process holding its lock) and a folder
    made an instant ago by a live process (that has yet to take its lock)."""
    import tempfile

    from gpukernels.grade import scratch

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), GPUKERNELS_DEVICE="sim")
    loop = FIXTURES / "01_vector_add" / "infinite_loop.py"
    proc = subprocess.Popen([sys.executable, "-m", "gpukernels", "grade", "01", "--submission", str(loop),
                             "--timeout", "120"], cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until its simulator child runs the loop
            reports = list(tmp.glob("gpukernels-grade-*/*/sim/report.json"))
            with contextlib.suppress(OSError, ValueError):
                if reports and json.loads(reports[0].read_text()).get("stage") == "run":
                    break
            assert proc.poll() is None
            time.sleep(0.1)
        else:
            pytest.fail("the simulator child never started")
        os.kill(proc.pid, signal.SIGKILL)  # the grader alone; its children die with it (PR_SET_PDEATHSIG)
        proc.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the session it started, should anything of it remain
    (killed,) = tmp.glob("gpukernels-grade-*")
    assert (killed / "0000_01_vector_add" / "inputs").is_dir()  # left behind: inputs, outputs, reports
    past = time.time() - 10  # older than the instant a run takes to lock its new folder, however fast this was
    os.utime(killed, (past, past))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    young = tmp / f"{scratch.PREFIX}{os.getpid()}-young"  # a live process's, not locked yet
    young.mkdir()
    with scratch.work_folder() as live:  # a grader of this process, running: it holds its folder's lock
        assert not killed.exists()  # removed as the run began
        assert Path(live).is_dir() and young.is_dir()
        old = time.time() + 2 * scratch.GRACE  # however old they get, a locked folder stays
        assert scratch.remove_stale(tmp, now=old) == [str(young)] and Path(live).is_dir()
    assert not Path(live).exists()  # and a run's own folder goes when it ends
    assert not list(tmp.iterdir())


# ----------------------------------------------------------------------------------------------------------
# The class report
# ----------------------------------------------------------------------------------------------------------


def test_the_class_report_groups_a_failure_across_students_and_shows_it_whole(tmp_path):
    """Three students, the same mistake (their paths and names in each message, numbers drawn per run): one entry
    counted 3 times, its message whole -- no student's path or name in the report."""
    from gpukernels.grade.classroom import summarise, write_report

    def failed(owner, layout, seed):
        path = f"/home/teacher/class/{owner}/{layout}"
        text = (f"{Path(path).name} defines no 'vector_add' (its @cuda.jit functions: vec_add) -- seed {seed}; "
                + "the grader looked for the kernel by the name the exercise's README gives, and found another "
                  "one; rename it, keeping its parameters in order" + f"\nhint 1: see {path}")
        return ExerciseResult("01_vector_add", path, [Entry("01_vector_add: correctness", 0, 5, text, "failed"),
                                                      Entry("01_vector_add: compiles", 0, 2, "not graded: x",
                                                                 "failed")])

    by_student = {"ada": [failed("ada", "01_vector_add.py", 11)], "bob": [failed("bob", "01_vector_add/kernel.py", 2)],
                  "cy": [failed("cy", "01_vector_add.py", 3070)]}
    (group,) = summarise(["01_vector_add"], by_student)["01_vector_add"]["failures"]
    assert group["count"] == 3 and group["kind"] == "no kernel of the required name"
    assert group["message"].startswith("kernel.py defines no 'vector_add'") and group["message"].endswith(
        "keeping its parameters in order") and len(group["message"]) > 200  # whole: not cut at 100 characters
    write_report(tmp_path, ["01_vector_add"], by_student, 1.0, 2)
    for page in ("report.md", "report.html"):
        text = (tmp_path / page).read_text()
        assert text.count("defines no") == 1 and "3 students" in text, page
        assert not any(word in text for word in ("/home/teacher", "ada", "bob", "hint 1")), page


# ----------------------------------------------------------------------------------------------------------
# Messages
# ----------------------------------------------------------------------------------------------------------


@SIM
def test_a_nan_from_unwritten_shared_memory_is_named_as_such():
    """04's missing barrier: the tile is read before it is written (the simulator's shared memory starts as NaN);
    the message names that read, not 0/0 in the student's arithmetic."""
    from gpukernels.grade._child import observe
    from gpukernels.grade.gates import _nan_note, make_case

    path = FIXTURES / "04_transpose" / "missing_syncthreads.py"
    ex, shape, arrays, (t, rename) = _run_case("04_transpose", path, traced=True)
    unwritten = observe(t, rename)["unwritten_shared"]
    assert unwritten and unwritten[0][0] == "tile" and "tile[tx, r]" in unwritten[0][2], unwritten
    ref = make_case(ex, shape, 3).ref
    note = _nan_note(arrays[ex.out], ref, unwritten)
    assert "a read of shared memory no thread wrote: tile is read at missing_syncthreads.py:" in note, note
    assert "0/0" not in note
    assert "0/0, inf - inf" in _nan_note(arrays[ex.out], ref)  # with no such read seen: the arithmetic


def test_messages_fit_an_80_column_terminal():
    """A long failure (a race, three mismatches, a NaN's cause, two hints: 1,100 characters) under the table, across
    80 columns: no line past 80, the message within 20 lines; at 200 columns, in the table."""
    from rich.console import Console

    from gpukernels.grade.results import print_table

    message = ("wrong result, and the tracer saw a race: threads of a block touch the same element with no "
               "cuda.syncthreads() between them -- kernel.py:23 `tile[r, tx] = a[row0 + r, col0 + tx]` and "
               "kernel.py:26 `out[col0 + r, row0 + tx] = tile[tx, r]`. shape (33, 65) (case 2 of 7, seed 7): "
               "relative error inf (tolerance 0); 1026 of 2145 elements wrong: at (0, 1): expected 1.54673, got nan; "
               "at (0, 2): expected -0.143257, got nan; at (0, 3): expected -1.14801, got nan (1026 outputs are a "
               "computed NaN (e.g. at (0, 1)), most likely from a read of shared memory no thread wrote: tile is "
               "read at kernel.py:26 `out[col0 + r, row0 + tx] = tile[tx, r]` before any thread wrote it -- a "
               "cuda.syncthreads() missing between the writes and the reads, or an element no thread stores)\n"
               "hint 1: Read: for r in ty, ty + 8, ty + 16, ty + 24, thread (tx, ty) loads `a[by*32 + r, bx*32 + "
               "tx]` into `tile[r, tx]` (if inside `a`).\nhint 2: `cuda.syncthreads()` between the loads and the "
               "reads of the tile -- outside any `if`.\n(run `gpukernels grade 04 --hints 3` for more help)")
    result = ExerciseResult("04_transpose", "04_transpose/kernel.py",
                            [Entry("04_transpose: correctness", 0, 5, message, "failed"),
                             Entry("04_transpose: compiles", 2, 2, "compiles for sm_90", "passed")], 1.0)
    console = Console(width=80, record=True)
    print_table([result], console)
    lines = console.export_text().splitlines()
    assert max(len(ln) for ln in lines) <= 80
    start = next(i for i, ln in enumerate(lines) if ln.startswith("04_transpose: correctness: failed"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("04_transpose: compiles"))
    assert end - start - 1 <= 20 and "(run `gpukernels grade 04 --hints 3` for more help)" in lines[end - 1]
    wide = Console(width=200, record=True)
    print_table([result], wide)
    text = wide.export_text()
    assert "message" in text and "04_transpose: correctness: failed" not in text  # the messages in the table


def test_the_first_line_says_which_files_were_graded(tmp_path):
    from gpukernels.grade.cli import graded_files_line

    files = [tmp_path / "h" / "01_vector_add" / "kernel.py", tmp_path / "h" / "02_matrix_add.py"]
    files[1] = tmp_path / "h" / "02_matrix_add" / "kernel.py"
    assert graded_files_line(files, tmp_path / "h") == ("grading 2 files in this folder: 01_vector_add/kernel.py, "
                                                        "02_matrix_add/kernel.py")
    assert graded_files_line(files[:1], tmp_path) == "grading 1 file in h/: 01_vector_add/kernel.py"
    assert graded_files_line(files[:1], tmp_path / "elsewhere") == (f"grading 1 file in {tmp_path / 'h'}: "
                                                                     "01_vector_add/kernel.py")
    assert "handout" not in graded_files_line(files, tmp_path) and "--submission" not in graded_files_line(files)
    flat = [tmp_path / "sub" / "04_transpose.py"]  # a submission folder of NN_name.py files, or one such file
    assert graded_files_line(flat, tmp_path) == "grading 1 file in sub/: 04_transpose.py"
    assert graded_files_line(flat, tmp_path / "sub") == "grading 1 file in this folder: 04_transpose.py"
