"""The grader's gates and checks as plain functions, with no child process: the spec's technique checks against
observations made up here, the scoring of a child's report (arrays written where the child would write them),
and the points of each gate. Fast enough to run for every mutant of gates.py and spec.py (`make mutate`);
test_grade.py grades real submissions end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpukernels.check import compare

from gpukernels.grade import spec as S
from gpukernels.grade.gates import POISON, Grading, _nan_note, child_problem, make_case, poisoned, student_error
from gpukernels.grade.pool import Child
from gpukernels.grade.protocol import CaseReport, Job, Report, output_path

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"


# ----------------------------------------------------------------------------------------------------------
# Technique checks
# ----------------------------------------------------------------------------------------------------------


def test_max_loads_per_element():
    c = S.MaxLoadsPerElement("a", lambda shape: shape[0] / 4, why="stage tiles")
    obs = lambda loads, covered=100: {"arrays": {"a": {"loads": loads, "size": 100, "elements_loaded": covered}}}
    ok, text = c.evaluate(obs(200), (8,))
    assert ok and text == "a: 2 global loads per element (limit 2)"
    ok, text = c.evaluate(obs(201), (8,))
    assert not ok and text == "a: 2.01 global loads per element, more than 2 -- stage tiles"
    ok, text = c.evaluate(obs(100, covered=99), (8,))
    assert not ok and "only 99 of its 100 elements were loaded" in text
    assert c.evaluate(obs(100, covered=None), (8,))[0]  # an older tracer without the coverage count
    assert c.evaluate({"arrays": {}}, (8,)) == (False, "the tracer saw no loads of 'a'")
    assert not c.evaluate({"arrays": {"a": {"loads": 5, "size": 0}}}, (8,))[0]
    assert S.MaxLoadsPerElement("a", lambda s: 1).evaluate(obs(101), ())[1].endswith("more than 1")
    assert c.describe() == "global loads per element of a within the limit"


def test_max_stores_per_element():
    c = S.MaxStoresPerElement("y", max_loads=0, why="fuse")
    info = lambda **kw: {"arrays": {"y": {"size": 10, **kw}}}
    ok, text = c.evaluate(info(stores=10, loads=0), ())
    assert ok and text == "y: stored 1 times and loaded 0 times per element"
    ok, text = c.evaluate(info(stores=11, loads=0), ())
    assert not ok and text.endswith("(allowed: stored at most 1 time(s), never loaded) -- fuse")
    ok, text = c.evaluate(info(stores=10, loads=1, atomics=1), ())
    assert not ok and "(1 atomics among them, each a load and a store)" in text
    c2 = S.MaxStoresPerElement("y", limit=3.0, max_loads=2.0)
    assert c2.evaluate(info(stores=30, loads=20), ())[0]
    ok, text = c2.evaluate(info(stores=30, loads=21), ())
    assert not ok and "loaded at most 2 time(s)" in text
    assert S.MaxStoresPerElement("y").evaluate(info(stores=10, loads=50), ())[0]  # loads unlimited by default
    assert S.MaxStoresPerElement("y").evaluate(info(stores=11, loads=0), ())[1].endswith("stored at most 1 time(s))")
    assert c.evaluate({"arrays": {}}, ()) == (False, "the tracer saw no stores to 'y'")
    # stores counted on an array of no elements: refused as unseen, not divided by zero
    assert c.evaluate({"arrays": {"y": {"size": 0, "stores": 5}}}, ()) == (False, "the tracer saw no stores to 'y'")
    assert c.describe() == "y written once per element"


def test_coalesced():
    c = S.Coalesced(("a", "out"))
    both = {"arrays": {"a": {"load_efficiency": 0.75}, "out": {"store_efficiency": 1.0}}}
    ok, text = c.evaluate(both, ())
    assert ok and text == "coalescing efficiency: a loads 75%, out stores 100%"
    worse = {"arrays": {"a": {"load_efficiency": 0.74}, "out": {"store_efficiency": 1.0}}}
    ok, text = c.evaluate(worse, ())
    assert not ok and "(need 75%)" in text and "consecutive threadIdx.x" in text
    ok, text = c.evaluate({"arrays": {"a": {"load_efficiency": 1.0}}}, ())
    assert not ok and text == ("coalescing: the tracer saw no load/store of out -- read and write the arrays "
                               "themselves, element by element")
    only_loads = S.Coalesced(("a",), min_efficiency=0.5, kinds=("load",))
    assert only_loads.evaluate({"arrays": {"a": {"load_efficiency": 0.5, "store_efficiency": 0.0}}}, ())[0]
    assert c.describe() == "coalesced accesses to a, out"


def test_shared_memory_checks():
    nb = S.NoBankConflicts()
    assert nb.evaluate({"shared": {"accesses": 5, "max_ways": 1}}, ()) == (True, "shared memory: no bank conflicts")
    ok, text = nb.evaluate({"shared": {"accesses": 5, "max_ways": 2, "conflict_text": "line 9"}}, ())
    assert not ok and text.startswith("shared memory: up to 2-way bank conflicts (line 9)")
    assert S.NoBankConflicts(max_ways=2).evaluate({"shared": {"accesses": 5, "max_ways": 2}}, ())[0]
    assert not nb.evaluate({"shared": {"accesses": 0}}, ())[0] and not nb.evaluate({}, ())[0]
    assert S.UsesShared().evaluate({"shared": {"accesses": 3}}, ()) == (True, "3 shared-memory accesses")
    assert S.UsesShared().evaluate({"shared": {"accesses": 0}}, ()) == (
        False, "no shared-memory accesses: this exercise is about cuda.shared.array")
    assert not S.UsesShared().evaluate({}, ())[0]
    ns = S.NoSharedMemory()
    clean = {"shared": {"accesses": 0, "arrays": []}, "sync": {"syncthreads": 0}}
    assert ns.evaluate(clean, ())[0]
    ok, text = ns.evaluate({"shared": {"accesses": 4, "arrays": ["s"]}, "sync": {"syncthreads": 2}}, ())
    assert not ok and "4 shared-memory accesses and cuda.syncthreads() (2 barriers over all blocks)" in text
    assert not ns.evaluate({"shared": {"accesses": 0, "arrays": ["s"]}, "sync": {"syncthreads": 0}}, ())[0]
    assert not ns.evaluate({"shared": {}, "sync": {"syncthreads": 1}}, ())[0]
    assert ns.evaluate({"shared": {}}, ()) == (False, "the tracer did not report on barriers")
    for check, words in ((nb, "bank"), (S.UsesShared(), "shared"), (ns, "syncthreads")):
        assert words in check.describe()


def test_no_races():
    c = S.NoRaces()
    assert c.evaluate({"races": []}, ()) == (True, "no races")
    assert c.evaluate({}, ()) == (False, "the tracer did not report on races")
    ok, text = c.evaluate({"races": ["r1", "r2", "r3", "r4"]}, ())
    assert not ok and text == "race: r1; r2; r3"
    assert c.describe() == "no data races"


def test_warp_instructions():
    c = S.WarpInstructions("mma_f16", lambda shape: shape[0] * 2, why="one per tile")
    assert c.evaluate({"collectives": {"mma_f16": 6, "ldmatrix_x4": 9}}, (3,)) == (
        True, "mma_f16: 6 warp instructions, one per tile")
    assert c.evaluate({"collectives": {"ldmatrix_x4": 6}}, (3,)) == (
        False, "no mma_f16 instruction: the products were not computed on tensor cores (expected 6, one per tile)")
    assert c.evaluate({"collectives": {"mma_f16": 7}}, (3,)) == (
        False, "mma_f16: 7 warp instructions, expected 6, one per tile")
    assert c.evaluate({"collectives": {"mma_f16": 5}}, (3,))[0] is False  # fewer: some products not on them
    assert c.evaluate({}, (3,)) == (False, "the tracer did not report warp-collective instructions")
    assert S.WarpInstructions("mma_f16", lambda shape: 1).evaluate({"collectives": {}}, ()) == (
        False, "no mma_f16 instruction: the products were not computed on tensor cores (expected 1)")
    assert c.describe() == "mma_f16 issued once per tile product"


# ----------------------------------------------------------------------------------------------------------
# The exercise: points, shapes
# ----------------------------------------------------------------------------------------------------------


def _exercise(**kw):
    base = dict(kernel="k", args=("x", "y"), out="y", make_inputs=S.vector_with_outliers,
                out_shape=lambda s: s, reference=lambda x: x, launch=lambda s: (1, 32), shapes=[(5,)],
                tolerance=1e-5)
    return S.Exercise(**{**base, **kw})


def test_points_per_gate():
    ex = _exercise()
    assert [ex.max_points(g) for g in S.GATES] == [5, 2, 0, 0]  # no technique checks, no speed gate
    ex = _exercise(technique=[S.NoRaces()], speed=S.Speed((8,), None), points={"correctness": 4, "compiles": 1,
                                                                               "technique": 6, "speed": 3})
    assert [ex.max_points(g) for g in S.GATES] == [4, 1, 6, 3]
    assert S.DEFAULT_POINTS == {"correctness": 5, "compiles": 2, "technique": 3, "speed": 2}
    assert _exercise(points={"correctness": 5}).max_points("compiles") == 0


def test_drawn_shapes():
    ex = _exercise(ranges=[(1, 100), (10, 20)], extra_shapes=3)
    for seed in range(20):
        shapes = ex.draw_shapes(seed)
        assert shapes[:1] == [(5,)] and len(shapes) == 5
        first = shapes[1]  # large in every dimension: the top quarter of each range
        assert 76 <= first[0] <= 100 and 18 <= first[1] <= 20, first
        for d0, d1 in shapes[1:4]:
            assert 1 <= d0 <= 100 and 10 <= d1 <= 20
            assert not (d0 > 8 and d0 % 8 == 0) and not (d1 > 8 and d1 % 8 == 0)  # off the block's multiples
        past = shapes[4]  # past the published range in every dimension, 1 to 1.5 times its top, ragged
        assert 101 <= past[0] <= 151 and 21 <= past[1] <= 31 and all(d % 8 for d in past), past
        assert ex.draw_shapes(seed) == shapes  # the seed decides
    assert len({tuple(ex.draw_shapes(s)) for s in range(20)}) > 10
    assert len({ex.draw_shapes(s)[-1] for s in range(20)}) > 5  # the sizes past the range change per seed too
    assert _exercise().draw_shapes(1) == [(5,)]  # no ranges: the listed shapes only
    ex = _exercise(ranges=[(8, 8)])
    assert ex.draw_shapes(0)[1:3] == [(8,), (8,)]  # 8 is not > 8: kept (and nothing else is in range)
    ex = _exercise(ranges=[(16, 17)], extra_shapes=3)  # 16, a multiple of 8, moves up to 17 (not down, out of range)
    assert {shape for s in range(10) for shape in ex.draw_shapes(s)[1:4]} == {(17,)}
    ex = _exercise(ranges=[(15, 24)], extra_shapes=1)  # the first draw is from (22, 24); 24 moves down to 23
    assert {ex.draw_shapes(s)[1] for s in range(30)} == {(22,), (23,)}
    ex = _exercise(ranges=[(1, 10)], beyond_ranges=[(40, 41)], beyond=2)  # a spec's own range past the published
    assert ex.draw_shapes(4)[-2:] == [(41,), (41,)]  # 40 is a multiple of 8: moved to 41
    assert _exercise(ranges=[(1, 10)], beyond=0).draw_shapes(4)[-1] != (41,)


def test_every_exercise_grades_sizes_past_its_published_range():
    """Each spec draws, per seed, a shape past its ``ranges`` in every dimension (a loop capped at the top of the
    published range fails it); its README says so."""
    for name in sorted(p.name for p in EXERCISES.iterdir() if p.name[:2].isdigit()):
        ex = S.load(EXERCISES / name)
        assert ex.ranges and ex.beyond >= 1, name
        for seed in range(3):
            past = ex.draw_shapes(seed)[-1]
            tops = [hi for _, hi in ex.ranges]
            assert all(d > hi for d, hi in zip(past, tops)), (name, past, tops)
        assert "sizes that are not listed" in (EXERCISES / name / "README.md").read_text(), name


def test_trace_shape():
    ex = _exercise(ranges=[(1, 100)], trace_ranges=[(40, 80), (3, 9)], trace_multiples=(8,))
    for seed in range(20):
        a, b = ex.draw_trace_shape(seed)
        assert 40 <= a <= 80 and a % 8 == 0 and 3 <= b <= 9
    assert _exercise(ranges=[(20, 30)]).draw_trace_shape(1)[0] in range(20, 31)
    assert _exercise(shapes=[(5,), (9,)]).draw_trace_shape(1) == (9,)  # no ranges: the last listed shape
    ex = _exercise(ranges=[(2, 40)], constrain=lambda s: (s[0] * 2,))
    assert ex.draw_trace_shape(3)[0] % 2 == 0


def test_helpers():
    x = np.arange(1, 8, dtype=np.float32)
    assert S.grouped_sum(x, 3).tolist() == [6.0, 15.0, 7.0] and S.grouped_sum(x, 3).dtype == np.float64
    assert S.ceil_div(7, 3) == 3 and S.ceil_div(6, 3) == 2 and S.ceil_div(0, 3) == 0
    v = S.vector_with_outliers((500,), 4)["x"]
    assert v.dtype == np.float32 and v.shape == (500,) and np.abs(v).max() > 50
    assert np.array_equal(v, S.vector_with_outliers((500,), 4)["x"])
    ex = S.load(EXERCISES / "09_warp_sum")
    assert ex.name == "09_warp_sum" and ex.hint("correctness", 1) == ex.hints["correctness"][:1]
    assert ex.hint("correctness", 0) == [] and len(ex.hint("correctness", 99)) == len(ex.hints["correctness"])


def _f32(a):
    """What a kernel hands back: float32 (the references are float64)."""
    return np.asarray(a, dtype=np.float32).copy()


def _float32_sums(x, group, order):
    """Per group of ``group`` elements, a float32 sum in ``order``: "tree" (pairwise, as a shared-memory or
    shuffle reduction adds), "sequential" (one thread's loop)."""
    groups = S.ceil_div(x.size, group)
    padded = np.zeros(groups * group, np.float32)
    padded[: x.size] = x
    v = padded.reshape(groups, group)
    if order == "sequential":
        acc = np.zeros(groups, np.float32)
        for j in range(group):
            acc = (acc + v[:, j]).astype(np.float32)
        return acc
    while v.shape[1] > 1:
        half = v.shape[1] // 2
        v = (v[:, :half] + v[:, half:]).astype(np.float32)
    return v[:, 0]


@pytest.mark.parametrize("name,group", [("03_block_sum", 128), ("09_warp_sum", 32)])
def test_sum_exercises_accept_every_float32_order_and_refuse_a_lost_element(name, group):
    """A correct float32 sum of terms of +-100 may be far from the float64 sum *relative to that sum* (the terms
    cancel): on the H200 a correct block sum measured 1.08e-5 against the 1e-5 tolerance. Measured against
    sum(|x|) (the exercise's error_scale) every order passes, on many seeds; dropping one term still fails."""
    ex = S.load(EXERCISES / name)
    worst = 0.0
    for seed in range(60):
        case = make_case(ex, (int(np.random.default_rng(seed).integers(1, 2000)),), seed)
        x = case.inputs["x"]
        for order in ("tree", "sequential"):
            check = compare(_float32_sums(x, group, order), case.ref, ex.tolerance, scale=case.scale)
            assert check.ok, (name, seed, order, str(check))
            worst = max(worst, check.rel_error)
        lost = x.copy()
        typical = int(np.argsort(np.abs(x))[x.size // 2])  # a term of median size missing (a lost thread)
        lost[typical] = 0.0
        if abs(x[typical]) > 0.1:
            check = compare(_float32_sums(lost, group, "tree"), case.ref, ex.tolerance, scale=case.scale)
            assert not check.ok, (name, seed, str(check))
    assert worst < ex.tolerance / 5  # headroom: the scale is not so loose that it hides arithmetic


def test_compare_scale():
    ref = np.array([1.0, -2.0])
    assert not compare(ref + 1e-4, ref, 1e-5).ok
    assert compare(ref + 1e-4, ref, 1e-5, scale=[100.0, 100.0]).ok  # the same error against sum(|x|) of 100
    assert not compare(ref + 1e-2, ref, 1e-5, scale=[100.0, 100.0]).ok
    with pytest.raises(ValueError, match="scale has shape"):
        compare(ref, ref, 1e-5, scale=[1.0])


# ----------------------------------------------------------------------------------------------------------
# Gates: scoring a child's report
# ----------------------------------------------------------------------------------------------------------


def _grading(tmp_path, name="03_block_sum", gpu=False, speed=False, hints=1, seed=5):
    ex = S.load(EXERCISES / name)
    sub = tmp_path / "kernel.py"
    sub.write_text((EXERCISES / "solutions" / f"{name}.py").read_text())
    return Grading(ex, sub, "", tmp_path, 60.0, gpu, speed, hints, seed=seed)


def _sim_child(g, tmp_path, outputs):
    """A finished simulator child whose report says every case ran, with ``outputs(i, case) -> {run: y}``."""
    out_dir = tmp_path / "sim"
    out_dir.mkdir(exist_ok=True)
    job = Job("sim", g.ex.name, g.ex.kernel, "kernel.py", "", str(out_dir))
    cases = []
    for i, case in enumerate(g.cases):
        runs = outputs(i, case)
        for run, y in runs.items():
            for name, arr in case.inputs.items():
                np.save(output_path(str(out_dir), i, run, name), arr)
            np.save(output_path(str(out_dir), i, run, g.ex.out), y)
        cases.append(CaseReport(status="ok", seeds={"shuffled": 40 + i}, outputs=list(runs)))
    child = Child(("sim", 0), job, {}, 60.0)
    child.report = Report(stage="done", simulator="gpukernels.sim", cases=cases)
    child.returncode = 0
    return child


def _cases(g, n=2):
    g.cases = [make_case(g.ex, s, g.seed + i) for i, s in enumerate(g.ex.shapes[1:n + 1])]


def test_correct_outputs_score_correctness_and_compiles(tmp_path):
    g = _grading(tmp_path)
    _cases(g)
    g.compiled = "compiles for sm_90 (sig)"
    child = _sim_child(g, tmp_path, lambda i, c: {"out": _f32(c.ref), "shuffled": _f32(c.ref)})
    assert g.score_sim(child)
    t = g.result.test("correctness")
    assert (t.status, t.score, t.max_score) == ("passed", 5.0, 5.0)
    assert "in thread order and in a shuffled thread order on gpukernels.sim" in t.output
    assert f"correct on {len(g.cases)} shapes" in t.output
    c = g.result.test("compiles")
    assert (c.status, c.score, c.max_score, c.output) == ("passed", 2.0, 2.0, "compiles for sm_90 (sig)")


def test_wrong_only_when_shuffled_names_the_race(tmp_path):
    g = _grading(tmp_path)
    _cases(g)
    g.compiled = "compiles"
    wrong = lambda c: _f32(c.ref + 1.0)
    child = _sim_child(g, tmp_path, lambda i, c: {"out": _f32(c.ref), "shuffled": wrong(c) if i == 1 else _f32(c.ref)})
    assert not g.score_sim(child)
    t = g.result.test("correctness")
    assert t.status == "failed" and t.score == 0 and t.max_score == 5
    assert "correct in thread order, but wrong when threads run in another order (shuffle seed 41)" in t.output
    assert "case 2 of 2" in t.output
    assert [x.name.split(": ")[1] for x in g.result.tests] == ["correctness", "compiles", "technique"]
    c = g.result.test("compiles")
    assert (c.status, c.score, c.max_score) == ("failed", 0.0, 2.0) and "once the kernel is correct" in c.output
    tech = g.result.test("technique")
    assert (tech.status, tech.score, tech.max_score) == ("failed", 0.0, 3.0) and "must first be correct" in tech.output


def test_wrong_in_thread_order_unwritten_and_modified_inputs(tmp_path):
    g = _grading(tmp_path, hints=2)
    _cases(g, 1)
    g.compiled = "compiles"

    def unwritten(i, c):
        y = _f32(c.ref)
        y[0] = POISON
        return {"out": y}

    assert not g.score_sim(_sim_child(g, tmp_path, unwritten))
    t = g.result.test("correctness")
    assert "1 output was never written (e.g. at (0,)" in t.output and "hint 1:" in t.output
    assert "hint 2:" in t.output  # two hints asked for
    g = _grading(tmp_path)
    _cases(g, 1)
    g.compiled = "compiles"
    out_dir = tmp_path / "sim"
    child = _sim_child(g, tmp_path, lambda i, c: {"out": _f32(c.ref)})
    np.save(output_path(str(out_dir), 0, "out", "x"), g.cases[0].inputs["x"] + 1)
    assert not g.score_sim(child)
    assert "modified its input 'x'" in g.result.test("correctness").output


def test_poison_and_nan_notes():
    ref = np.ones(4, np.float32)
    out = poisoned((4,))
    assert np.isnan(out).all() and out.dtype == np.float32
    out[1] = 1.0
    with np.errstate(invalid="ignore"):
        out[2] = np.float32(0.0) / np.float32(0.0)
    note = _nan_note(out, ref)
    assert "2 outputs were never written (e.g. at (0,)" in note and "1 output is a computed NaN (e.g. at (2,)" in note
    assert _nan_note(ref, ref) == ""


def test_add_points_hints_and_skips(tmp_path):
    g = _grading(tmp_path, name="07_softmax_rows", hints=1)
    g.add("technique", False, "bad")
    t = g.result.tests[-1]
    assert (t.name, t.score, t.max_score, t.status) == ("07_softmax_rows: technique", 0.0, 3.0, "failed")
    assert t.output == "bad\nhint 1: " + g.ex.hints["technique"][0]  # its only hint: no "ask for more"
    g.add("correctness", False, "wrong")  # 3 hints, 1 shown: says how to see the next
    assert g.result.tests[-1].output.endswith("(run `gpukernels grade 07 --hints 2` for more help)")
    g.add("technique", False, "bad", hint=False)
    assert g.result.tests[-1].output == "bad"
    g.add("correctness", True, "fine")
    assert (g.result.tests[-1].score, g.result.tests[-1].status) == (5.0, "passed")
    g.add("speed", None, "skipped: x")
    assert (g.result.tests[-1].score, g.result.tests[-1].max_score, g.result.tests[-1].status) == (0, 0, "skipped")
    assert g.skip_reason("speed").startswith("skipped: simulator mode") and g.skip_reason("technique") is None
    assert not g.wants_speed()
    gpu = _grading(tmp_path, name="07_softmax_rows", gpu=True, speed=False)
    assert gpu.skip_reason("speed") == "skipped: --no-speed" and not gpu.wants_speed()
    assert _grading(tmp_path, name="07_softmax_rows", gpu=True, speed=True).wants_speed()
    assert _grading(tmp_path, name="09_warp_sum", gpu=True, speed=True).skip_reason("speed") is None  # no gate


@pytest.mark.needs_cuda_toolchain  # without the compiler the compiles gate is skipped, not failed
def test_fail_all_records_every_gate_once(tmp_path):
    g = _grading(tmp_path, name="07_softmax_rows")
    g.fail_all("correctness", "refused", hint=False, later="the file was not run")
    got = [(t.name.split(": ")[1], t.status, t.score, t.max_score) for t in g.result.tests]
    assert got == [("correctness", "failed", 0, 5), ("compiles", "failed", 0, 2), ("technique", "failed", 0, 3),
                   ("speed", "skipped", 0, 0)]
    assert g.result.tests[1].output == "not graded: the file was not run"
    g = _grading(tmp_path, name="09_warp_sum", gpu=True, speed=True)  # no speed gate at all
    g.fail_all("correctness", "nothing")
    assert [t.name.split(": ")[1] for t in g.result.tests] == ["correctness", "compiles", "technique"]
    assert g.result.tests[1].output == "not graded: the kernel must first be correct"
    g = _grading(tmp_path, name="01_vector_add")
    g.add_later(["technique"], "why")
    assert g.result.tests[-1].output == "not graded: why"


def test_technique_scores_every_check(tmp_path):
    g = _grading(tmp_path, name="09_warp_sum")
    g.trace_shape = (300,)
    child = Child(("sim", 0), Job("sim", "09", "warp_sum", "k.py", "", str(tmp_path)), {}, 60.0)
    obs = {"arrays": {"x": {"loads": 300, "size": 300, "elements_loaded": 300}},
           "shared": {"accesses": 0, "arrays": []}, "sync": {"syncthreads": 0}, "races": []}
    # the data-flow check's two runs, as the child saves them: the traced output, and with the shuffles perturbed
    sums = np.linspace(-50, 50, 10).astype(np.float32)
    np.save(output_path(str(tmp_path), "trace", "out", "out"), sums)
    np.save(output_path(str(tmp_path), "trace", "perturbed_shfl", "out"), sums + np.float32(31))
    child.report = Report(stage="done", trace={"status": "ok", "observations": obs,
                                               "perturbed": {"shfl": {"status": "ok"}}})
    g.score_technique(child)
    t = g.result.test("technique")
    assert (t.status, t.score) == ("passed", 3.0) and t.output.startswith("traced at shape (300,)")
    assert t.output.count("ok: ") == 4
    np.save(output_path(str(tmp_path), "trace", "perturbed_shfl", "out"), np.where(np.arange(10) < 3, sums, sums + 1))
    g.result.tests.clear()
    g.score_technique(child)  # three sums did not move: they did not come through the shuffles
    assert "FAILED: data flow: with the shuffles returning other values, 3 of the 10 outputs did not change" in \
        g.result.test("technique").output
    np.save(output_path(str(tmp_path), "trace", "perturbed_shfl", "out"), sums + np.float32(31))
    g.result.tests.clear()
    obs["races"] = ["write-after-write on out"]
    g.result.tests.clear()
    g.score_technique(child)
    t = g.result.test("technique")
    assert (t.status, t.score) == ("failed", 0.0) and "FAILED: race: write-after-write on out" in t.output
    obs["arrays"] = None  # malformed: the check fails, the grader does not crash
    g.result.tests.clear()
    g.score_technique(child)
    assert "unreadable observation" in g.result.test("technique").output
    child.report = Report(stage="done", trace={"status": "error", "error": "boom"})
    g.result.tests.clear()
    g.score_technique(child)
    assert g.result.test("technique").output.startswith("the traced run failed: boom\nhint 1: ")


def test_child_problems_and_student_errors(tmp_path):
    job = Job("sim", "01", "k", "k.py", "", str(tmp_path))
    c = Child(("sim", 0), job, {}, 10.0)
    c.timed_out = True
    assert child_problem(c, "simulator", 10.0).startswith("time limit: your kernel did not finish within the "
                                                          "grader's 10 s before it started")
    c = Child(("sim", 0), job, {}, 10.0)
    c.report, c.returncode = Report(stage="run"), -11
    assert "was killed by SIGSEGV (a segmentation fault" in child_problem(c, "simulator", 10.0)
    c.report, c.returncode, c.stderr = Report(stage="import"), 3, "line\nTraceback: oops\n"
    text = child_problem(c, "simulator", 10.0)
    assert "exited with code 3 before reporting (a crash?) while loading the submission" in text
    assert text.endswith("stderr:\nline\nTraceback: oops")
    c.report, c.returncode = Report(stage="done"), 0
    assert child_problem(c, "simulator", 10.0) is None
    c.report = Report(stage="import", error="ImportError: x")
    assert child_problem(c, "simulator", 10.0) is None  # reported properly: the error is the message
    g = _grading(tmp_path)
    msg = student_error("kernel 'k' did not finish within the time limit: no progress. Raise the limit with "
                        "gpukernels.sim.configure(timeout_s=...).", "KernelTimeoutError", g)
    assert "configure(timeout_s" not in msg and "The grader allows 30 s per launch" in msg
    assert student_error("IndexError: x", "IndexError", g) == "IndexError: x"


@pytest.mark.parametrize("name", ["01_vector_add", "05_matmul_naive", "08_conv_bias_relu", "11_softmax_merge"])
def test_make_case_follows_the_spec(name):
    ex = S.load(EXERCISES / name)
    shape = ex.shapes[-1]
    case = make_case(ex, shape, 3)
    assert case.shape == tuple(shape) and case.seed == 3
    assert case.ref.shape == tuple(ex.out_shape(shape))
    grid, block = ex.launch(shape)
    assert case.grid == tuple(np.atleast_1d(grid).tolist()) and case.block == tuple(np.atleast_1d(block).tolist())
    assert all(v.flags.c_contiguous for v in case.inputs.values())
    assert make_case(ex, shape, 3, reference=False).ref is None
    assert math.isnan(poisoned(case.ref.shape).ravel()[0])


def test_the_speed_child_times_the_kernel_and_the_baseline_in_turn(monkeypatch):
    """a, b, a, b, ...: a burst of another process's work on the GPU falls on both, not on one of them (fake events:
    each function advances a clock by its own cost; a 'burst' doubles the cost of whatever runs during calls 7-10)."""
    import importlib.util

    from numba import cuda

    from gpukernels.grade import _child as child_path

    spec = importlib.util.spec_from_file_location("_child_under_test", child_path.__file__)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    clock, calls = [0.0], []

    class Event:
        def record(self):
            self.t = clock[0]

        def synchronize(self):
            pass

    def run(name, cost):
        def fn():
            calls.append(name)
            clock[0] += cost * (2 if 7 <= len(calls) <= 10 else 1)
        return fn

    monkeypatch.setattr(cuda, "event", Event, raising=False)
    monkeypatch.setattr(cuda, "event_elapsed_time", lambda a, b: b.t - a.t, raising=False)
    monkeypatch.setattr(cuda, "synchronize", lambda: None, raising=False)
    student, baseline = child._time_in_turn([run("student", 1.0), run("baseline", 3.0)], 20)
    assert calls == ["student", "baseline"] * 21  # one warm-up each, then in turn
    assert len(student) == len(baseline) == 20
    # the burst hit two runs of each; the medians, and so the speed ratio, are untouched
    assert sorted(student)[-2:] == [2.0, 2.0] and sorted(baseline)[-2:] == [6.0, 6.0]
    assert np.median(baseline) / np.median(student) == 3.0


def test_the_speed_childs_plumbing_on_the_simulator(monkeypatch, tmp_path):
    """``_time_on_gpu`` end to end on the simulator with fake events (the real ones need a GPU): the student's
    output comes back, and the baseline runs on its own copies of the inputs -- a kernel that scribbles over its
    input cannot change what the baseline computes."""
    import importlib.util

    from numba import cuda

    from gpukernels.grade import _child as child_path
    from gpukernels.grade.protocol import SpeedJob

    spec = importlib.util.spec_from_file_location("_child_under_test", child_path.__file__)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    child.PROTOCOL = child._sibling("protocol")

    class Event:
        def record(self):
            pass

        def synchronize(self):
            pass

    monkeypatch.setattr(cuda, "event", Event, raising=False)
    monkeypatch.setattr(cuda, "event_elapsed_time", lambda a, b: 1.0, raising=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    np.savez(tmp_path / "speed.npz", x=x, y=np.full((3, 40), np.nan, np.float32))

    @cuda.jit
    def scribbler(x, y):  # writes its answer, then zeroes its input
        i = cuda.grid(1)
        if i < x.shape[0]:
            m = x[i, 0]
            for j in range(x.shape[1]):
                m = max(m, x[i, j])
            s = 0.0
            for j in range(x.shape[1]):
                s += math.exp(x[i, j] - m)
            for j in range(x.shape[1]):
                y[i, j] = math.exp(x[i, j] - m) / s
            for j in range(x.shape[1]):
                x[i, j] = 0.0

    import types

    import gpukernels

    seen = []  # what the baseline's inputs held at each of its runs

    def launches(*inputs, out):
        return [lambda: seen.append([a.copy_to_host() for a in inputs])]

    monkeypatch.setitem(gpukernels.LESSONS, "fake", types.SimpleNamespace(
        VERSIONS={"base": types.SimpleNamespace(launches=launches)}))
    job = types.SimpleNamespace(out_dir=str(tmp_path), speed=SpeedJob(
        npz=str(tmp_path / "speed.npz"), args=[["x", "array", None], ["y", "array", None]], grid=[1], block=[32],
        shape=[3, 40], baseline=["fake", "base"], repeats=2, out="y", inputs=["x"]))
    got = child._time_on_gpu(job, scribbler)
    assert got["status"] == "ok" and got["student_ms"] == got["baseline_ms"] == 1.0
    assert got["baseline"] == "fake.base"
    # the student's output is what its last run wrote: on the input its first run zeroed, a uniform row
    out = np.load(child.PROTOCOL.output_path(str(tmp_path), "speed", "out", "y"))
    assert np.allclose(out, 1 / 40)
    # the baseline ran three times (warm-up and two timed), each time on the grader's inputs, untouched
    assert len(seen) == 3 and all(np.array_equal(s[0], x) for s in seen)


def test_hints_written_for_the_failure_come_first(tmp_path):
    """A README hint ending in ``<!-- when: REGEX -->`` is the one shown for a failure the pattern finds; the hints
    shown are printed in their README order; the marker itself is never shown. More cases in tests/test_cli_safety.py."""
    ex = S.load(EXERCISES / "01_vector_add")
    tips = ex.hints["correctness"]
    assert ex.hints.when["correctness"] == [None, "out-of-bounds", None] and all("<!--" not in t for t in tips)
    oob = "the kernel failed: OutOfBoundsError: OUT-OF-BOUNDS read of global array 'a'"  # case-insensitive
    assert ex.hints_for("correctness", 1, oob) == [(2, tips[1])]
    # chosen for the failure, shown in the README's order: `--hints 2` prints hint 1, then hint 2
    assert ex.hints_for("correctness", 3, oob) == [(1, tips[0]), (2, tips[1]), (3, tips[2])]
    assert ex.hints_for("correctness", 2, oob) == [(1, tips[0]), (2, tips[1])]
    ex11 = S.load(EXERCISES / "11_softmax_merge")  # hint 4 answers "never written": with --hints 2, hints 1 and 4
    assert [n for n, _ in ex11.hints_for("correctness", 2, "3 outputs were never written")] == [1, 4]
    assert ex.hints_for("correctness", 2, "expected 1, got 2") == [(1, tips[0]), (2, tips[1])]
    assert ex.hints_for("correctness", 0, oob) == [] and ex.hints_for("correctness", -1, oob) == []
    assert ex.hints_for("correctness", 1) == [(1, tips[0])]  # no failure text: in order
    assert ex.hints_for("speed", 2, oob) == []  # a gate without hints
    g = _grading(tmp_path, name="01_vector_add", hints=1)
    g.add("correctness", False, oob)
    assert g.result.tests[-1].output == f"{oob}\nhint 2: {tips[1]}\n(run `gpukernels grade 01 --hints 2` for more help)"


def test_a_child_killed_by_sigkill_names_memory(tmp_path):
    c = Child(("sim", 0), Job("sim", "01", "k", "k.py", "", str(tmp_path)), {}, 10.0)
    c.report, c.returncode = Report(stage="run"), -9
    assert child_problem(c, "simulator", 10.0) == (
        "the simulator process was killed by SIGKILL (most often the system's out-of-memory killer: did the kernel "
        "ask for more memory than the machine has -- a huge cuda.shared.array or cuda.local.array, or a huge grid?) "
        "while running the kernel")
    c.returncode = -15
    assert child_problem(c, "simulator", 10.0) == "the simulator process was killed by SIGTERM while running the kernel"


# ----------------------------------------------------------------------------------------------------------
# Exercise 11's inputs: real partial softmax states, every edge case in every draw, a tolerance that a correct
# float32 merge meets with room and that each of the fixtures' mistakes misses whatever the seed
# ----------------------------------------------------------------------------------------------------------

MERGE = "11_softmax_merge"
STATE_NAMES = ("m1", "l1", "acc1", "m2", "l2", "acc2")


def _spec_module(name):
    """An exercise's spec.py as a module (its helpers besides EXERCISE)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_test_spec_{name}", EXERCISES / name / "spec.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_softmax_merge_reference_is_the_softmax_over_both_halves_keys():
    """Keys split anywhere (a half may get none: the empty state), scores spread past 80: the merged states are
    the softmax-weighted average over all the keys, and the merge does not care which state comes first."""
    mod = _spec_module(MERGE)
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, d = int(rng.integers(1, 60)), int(rng.integers(1, 9))
        s = rng.standard_normal(n) * rng.uniform(0.1, 40.0)
        v = rng.standard_normal((n, d))
        cut = int(rng.integers(0, n + 1))
        states = [mod.partial_state(s[:cut], v[:cut]), mod.partial_state(s[cut:], v[cut:])]
        args = [a for m, l, acc in states for a in (np.array([m]), np.array([l]), acc[None])]
        p = np.exp(s - s.max())
        want = (p / p.sum()) @ v
        got = mod.reference(*args)[0]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(mod.reference(*args[3:], *args[:3])[0], got, rtol=1e-12, atol=1e-15)
    assert mod.partial_state([], np.zeros((0, 3)))[:2] == (-np.inf, 0.0)
    m, l, acc = mod.partial_state([-np.inf, -np.inf], np.ones((2, 3)))  # every key masked: the empty state too
    assert (m, l) == (-np.inf, 0.0) and np.array_equal(acc, np.zeros(3))


def test_softmax_merge_inputs_hold_every_edge_case_whatever_the_seed():
    ex = S.load(EXERCISES / MERGE)
    for seed in range(40):
        for shape in ex.draw_shapes(seed):
            inp = ex.make_inputs(shape, seed)
            rows, dim = shape
            assert all(inp[k].dtype == np.float32 and inp[k].flags.c_contiguous for k in STATE_NAMES)
            assert inp["m1"].shape == inp["l2"].shape == (rows,) and inp["acc2"].shape == (rows, dim)
            m1, l1, acc1, m2, l2, acc2 = (inp[k].astype(np.float64) for k in STATE_NAMES)
            for m, l, acc in ((m1, l1, acc1), (m2, l2, acc2)):
                empty = np.isneginf(m)
                assert (l[empty] == 0).all() and (acc[empty] == 0).all()  # the initial state, as masking leaves it
                assert np.isfinite(m[~empty]).all() and (l[~empty] >= 1).all()  # the max key's exp(0) = 1
            assert not (np.isneginf(m1) & np.isneginf(m2)).any()
            cases = [lambda r: np.isfinite(m1[r] - m2[r]) and abs(m1[r] - m2[r]) >= 1,  # rescaling matters
                     lambda r: np.isneginf(m1[r]) and np.isfinite(m2[r]),  # state 1 empty
                     lambda r: np.isneginf(m2[r]) and np.isfinite(m1[r]),  # state 2 empty
                     lambda r: m1[r] - m2[r] > 80, lambda r: m2[r] - m1[r] > 80,  # maxima far apart, both ways
                     lambda r: min(m1[r], m2[r]) > 88.8]  # exp(m) overflows float32 in both states
            assert all(case(r) for r, case in enumerate(cases[:rows])), (seed, shape)
            ref = ex.reference(**inp)
            assert ref.shape == (rows, dim) and np.isfinite(ref).all()
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(np.float32(88.8)))
    a, b = ex.make_inputs((7, 5), 1), ex.make_inputs((7, 5), 2)
    assert not np.array_equal(a["acc1"], b["acc1"]) and not np.array_equal(a["m2"], b["m2"])  # fresh per seed
    assert all(np.array_equal(a[k], ex.make_inputs((7, 5), 1)[k]) for k in STATE_NAMES)  # the seed decides


def _merge_float32(inp, mistake=None, ulps=0):
    """The contract's merge in float32 arithmetic, as a kernel does it (``ulps``: each exp off by that many units
    in the last place, as a GPU's expf may be), or with one of the fixtures' mistakes."""
    f = np.float32
    m1, l1, acc1, m2, l2, acc2 = (inp[k] for k in STATE_NAMES)
    with np.errstate(all="ignore"):
        m = np.maximum(m1, m2)
        e1, e2 = np.exp(m1 - m), np.exp(m2 - m)
        if mistake == "sign flipped":
            e1, e2 = np.exp(m - m1), np.exp(m - m2)
        if mistake == "unshifted":
            e1, e2 = np.exp(m1), np.exp(m2)
        e1, e2 = e1 * f(1 + ulps * 2 ** -23), e2 * f(1 - ulps * 2 ** -23)
        l = {"l1 + l2": l1 + l2, "divides by l1": l1}.get(mistake, l1 * e1 + l2 * e2)
        a1, a2 = (np.ones_like(e1), np.ones_like(e2)) if mistake == "acc not rescaled" else (e1, e2)
        out = (a1[:, None] * acc1 + a2[:, None] * acc2) / l[:, None]
    assert out.dtype == np.float32
    return out


def test_softmax_merge_tolerance_passes_float32_and_fails_each_mistake_at_every_seed():
    """A correct float32 merge, its exps off by 2 ulps, stays 30 times under the tolerance (measured against the
    merge of |acc|: the two terms may cancel); each mistake of the fixtures fails at the listed shape that holds
    every edge case, on every seed -- the unshifted exp with a NaN."""
    ex = S.load(EXERCISES / MERGE)
    worst = 0.0
    for seed in range(100):
        for shape in [(7, 80)] + ex.draw_shapes(seed)[len(ex.shapes):]:
            inp = ex.make_inputs(shape, seed)
            ref, scale = ex.reference(**inp), ex.error_scale(**inp)
            for ulps in (0, 2):
                check = compare(_merge_float32(inp, ulps=ulps), ref, ex.tolerance, scale=scale)
                assert check.ok, (seed, shape, str(check))
                worst = max(worst, check.rel_error)
            if shape != (7, 80):
                continue
            for mistake in ("acc not rescaled", "sign flipped", "l1 + l2", "divides by l1", "unshifted"):
                assert not compare(_merge_float32(inp, mistake), ref, ex.tolerance, scale=scale).ok, (seed, mistake)
            assert np.isnan(_merge_float32(inp, "unshifted")[5]).all()
    assert worst < ex.tolerance / 30


def test_softmax_merge_bad_input_gets_one_line():
    mod = _spec_module(MERGE)
    with pytest.raises(ValueError, match=r"^softmax_merge: shape must be \(R, D\), two ints >= 1; got \(0, 5\)$"):
        mod.make_inputs((0, 5), 1)
    with pytest.raises(ValueError, match=r"^softmax_merge: shape must be .* got \(2.5, 3\)$"):
        mod.make_inputs((2.5, 3), 1)  # not silently 2 rows
    with pytest.raises(ValueError, match=r"^softmax_merge: shape must be"):
        mod.make_inputs((4,), 1)
    inp = mod.make_inputs((3, 2), 1)
    inp["m2"][1] = -np.inf  # row 1's state 1 is empty already
    with pytest.raises(ValueError, match=r"^softmax_merge reference: row 1 has two empty states \(no key seen\): "
                                         r"its softmax is undefined$"):
        mod.reference(**inp)
    inp = mod.make_inputs((3, 2), 1)
    inp["acc2"] = inp["acc2"][:, :1]
    with pytest.raises(ValueError, match=r"^softmax_merge reference: expected m, l of shape \(R,\) and acc of shape "
                                         r"\(R, D\), got \(3,\), \(3,\), \(3, 2\), \(3,\), \(3,\), \(3, 1\)$"):
        mod.reference(**inp)
    with pytest.raises(ValueError, match=r"^partial_state: expected scores \(n,\) and values \(n, D\), got \(2,\) and "
                                         r"\(3, 4\)$"):
        mod.partial_state([1.0, 2.0], np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"^unknown row kind 'odd'; choose from normal, empty1"):
        mod._maxima("odd", np.random.default_rng(0))


def test_data_flow_failures_carry_the_specs_reason_and_passes_do_not():
    """A DataFlow check's failure ends with the spec's ``why`` (what the student is to do), for either expectation,
    and says how many outputs did not move; a spec without one adds nothing."""
    half = {"dataflow": {"mma_f16": {"size": 8, "moved": 6, "doubled": 5}}}
    ok, msg = S.DataFlow("mma_f16", expect="doubles", why="C must be the mma's D").evaluate(half, None)
    assert not ok and msg.endswith(" -- C must be the mma's D") and "only 5 of the 8 outputs doubled" in msg
    assert "(2 did not move at all)" in msg
    ok, msg = S.DataFlow("shfl", why="sum with the shuffles").evaluate(
        {"dataflow": {"shfl": {"size": 8, "moved": 6, "doubled": 0}}}, None)
    assert not ok and msg.endswith(" -- sum with the shuffles") and "2 of the 8 outputs did not change" in msg
    ok, msg = S.DataFlow("shfl").evaluate({"dataflow": {"shfl": {"size": 8, "moved": 6, "doubled": 0}}}, None)
    assert not ok and msg.endswith("do not come from the shuffles")
    ok, msg = S.DataFlow("mma_f16", expect="doubles", why="x").evaluate(
        {"dataflow": {"mma_f16": {"size": 8, "moved": 8, "doubled": 8}}}, None)
    assert ok and " -- x" not in msg


def test_no_shared_memory_counts_the_accesses_it_saw():
    """An array declared but never touched is still shared memory the exercise forbids: 0 accesses, said as such."""
    no_sync = {"syncthreads": 0}
    ok, msg = S.NoSharedMemory().evaluate({"shared": {"arrays": ["buf"]}, "sync": no_sync}, None)
    assert not ok and msg.startswith("uses 0 shared-memory accesses")
    ok, msg = S.NoSharedMemory().evaluate({"shared": {"accesses": 12, "arrays": ["buf"]}, "sync": no_sync}, None)
    assert not ok and msg.startswith("uses 12 shared-memory accesses")
    assert S.NoSharedMemory().evaluate({"shared": {}, "sync": no_sync}, None)[0]
