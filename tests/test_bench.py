"""The benchmark's bookkeeping (no GPU): partial saves, and merging runs shape by shape."""

import json

from gpukernels import bench


def _row(lesson, shape, name, kind, ms, note=""):
    return dict(lesson=lesson, shape=list(shape), name=name, kind=kind, median_ms=ms, min_ms=ms, max_ms=ms,
                runs=20, flops=1, bytes=1, rel_error=0.0, ok=True, note=note, extra={})


def _report(date, rows, complete=True):
    return {"environment": {"device": "Test GPU", "date": date}, "method": "m", "ceilings": {},
            "complete": complete, "results": rows}


def test_merge_takes_each_shape_whole_from_the_last_run_that_has_it():
    a = _report("A", [_row("matmul", (8, 8, 8), "naive", "kernel", 5.0), _row("matmul", (8, 8, 8), "cuBLAS", "peer", 1.0),
                      _row("softmax", (4, 4), "naive", "kernel", 3.0), _row("softmax", (4, 4), "torch", "peer", 2.0)])
    b = _report("B", [_row("matmul", (8, 8, 8), "naive", "kernel", 4.0), _row("matmul", (8, 8, 8), "cuBLAS", "peer", 1.5)],
                complete=False)
    m = bench.merge([a, b])
    got = {(r["lesson"], r["name"]): r for r in m["results"]}
    assert len(m["results"]) == 4
    # matmul from B, kernel and peer together (so "x peer" compares within one run), with no note: B is the last
    assert got["matmul", "naive"]["median_ms"] == 4.0 and got["matmul", "cuBLAS"]["median_ms"] == 1.5
    assert got["matmul", "naive"]["note"] == ""
    # softmax only in A: kept, and marked as from A's run
    assert got["softmax", "torch"]["median_ms"] == 2.0 and got["softmax", "naive"]["note"] == "run of A"
    assert m["environment"]["date"] == "B" and m["complete"] is False
    # one report: nothing is marked as from an earlier run
    assert all(r["note"] == "" for r in bench.merge([a])["results"])


def test_a_cut_off_suite_run_finished_by_a_second_one_is_complete():
    shapes = [shape for _, shape in bench.suite_shapes("softmax")]

    def suite_report(date, part, complete):
        rows = [_row("softmax", s, name, kind, 1.0) for s in part for name, kind in (("optimized", "kernel"),
                                                                                      ("torch", "peer"))]
        return dict(_report(date, rows, complete), suite=True)

    first = suite_report("A", shapes[:4], complete=False)  # the time limit struck during shapes[4]
    merged = bench.merge([first, suite_report("B", shapes[4:][::-1], True)])
    assert merged["complete"] is True
    # in the suite's order, whatever order the runs measured the shapes in
    assert list(dict.fromkeys(tuple(r["shape"]) for r in merged["results"])) == shapes
    # one shape still missing: not complete, whichever report was complete
    assert bench.merge([first, suite_report("B", shapes[4:-1], True)])["complete"] is False
    assert bench.merge([first])["complete"] is False


def test_a_cut_off_standard_run_finished_by_a_run_of_what_it_missed_is_complete():
    from gpukernels import softmax as sm

    shapes = [tuple(s) for s in sm.SHAPES["bench"]]

    def rows(shape, names):
        return [_row("softmax", shape, n, "kernel", 1.0) for n in names] + [_row("softmax", shape, "torch", "peer", 1.0)]

    names = list(sm.VERSIONS)
    # cut off during shapes[1]: half its versions measured
    first = _report("A", rows(shapes[0], names) + rows(shapes[1], names[:3]), complete=False)
    rest = _report("B", [r for s in shapes[1:] for r in rows(s, names)], complete=False)
    assert bench.merge([first, rest])["complete"] is True
    # the shape cut off is not finished by the first run alone, nor by a later run missing a version
    assert bench.merge([first])["complete"] is False
    short = _report("B", [r for s in shapes[1:] for r in rows(s, names[1:])], complete=False)
    assert bench.merge([first, short])["complete"] is False


def test_run_saves_after_every_shape(monkeypatch):
    monkeypatch.setattr(bench, "measure_ceilings", lambda timer, torch: {})
    monkeypatch.setattr(bench, "environment", lambda: {"device": "Test GPU", "date": "D"})
    done = []

    def fake_shape(lesson, shape, timer, torch, versions, log):
        done.append(shape)
        return [bench.Result(lesson, shape, "naive", "kernel", 1.0, 1.0, 1.0, 20, 2, 2)]

    monkeypatch.setattr(bench, "bench_shape", fake_shape)
    saved = []
    rep = bench.run(["softmax"], [(4, 4), (8, 8)], log=lambda *_: None, save=lambda r: saved.append(json.dumps(r)))
    saved = [json.loads(s) for s in saved]
    assert [len(s["results"]) for s in saved] == [1, 2] and not any(s["complete"] for s in saved)
    assert rep["complete"] and len(rep["results"]) == 2


def test_from_json_merges_files(tmp_path, capsys):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    a.write_text(json.dumps(_report("A", [_row("softmax", (4, 4), "naive", "kernel", 3.0)])))
    b.write_text(json.dumps(_report("B", [_row("softmax", (8, 8), "naive", "kernel", 6.0)])))
    assert bench.bench_main(["--from-json", str(a), str(b), "--json", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert sorted(r["shape"][0] for r in merged["results"]) == [4, 8]
    assert "Test GPU" in capsys.readouterr().out


def test_suite_runs_each_lessons_suite_and_summarises(monkeypatch):
    """--suite: every shape of SHAPES['suite'] with its regime, the lesson's suite versions, and a summary of
    optimized vs peer (geometric mean and minimum, per lesson and per regime)."""
    monkeypatch.setattr(bench, "measure_ceilings", lambda timer, torch: {})
    monkeypatch.setattr(bench, "environment", lambda: {"device": "Test GPU", "date": "D"})
    seen = []

    def fake_shape(lesson, shape, timer, torch, versions, log, regime="", budget_ms=0):
        seen.append((shape, regime, tuple(versions)))
        ms = 2.0 if regime == "few_long_rows" else 0.5
        return [bench.Result(lesson, shape, "optimized", "kernel", ms, ms, ms, 20, 2, 2, extra={"regime": regime}),
                bench.Result(lesson, shape, "torch.softmax", "peer", 1.0, 1.0, 1.0, 20, 2, 2, extra={"regime": regime})]

    monkeypatch.setattr(bench, "bench_shape", fake_shape)
    rep = bench.run(["softmax"], log=lambda *_: None, suite=True)
    assert [(r, s) for s, r, _ in seen] == bench.suite_shapes("softmax")
    assert all(v[-1] == "optimized" for _, _, v in seen)
    s = rep["summary"]
    assert s["softmax/few_long_rows"]["geomean"] == 0.5 and s["softmax/square"]["geomean"] == 2.0
    assert s["softmax"]["min"] == 0.5 and s["softmax"]["shapes"] == len(seen)
    assert bench.suite_versions("matmul")[0] == "tiled" and bench.suite_versions("matmul")[-1] == "optimized"


# ----------------------------------------------------------------------------------------------------------
# The measuring path itself: checked before timing, then timed (GPU: end to end, nothing replaced)
# ----------------------------------------------------------------------------------------------------------

import math  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numba import cuda  # noqa: E402

import gpukernels  # noqa: E402
from gpukernels import softmax  # noqa: E402
from gpukernels._launch import Launch, Version  # noqa: E402
from gpukernels.check import TOLERANCE  # noqa: E402

GPU = gpukernels.MODE == "gpu"


@cuda.jit
def _bump_first(y):
    # makes a right softmax slightly wrong: one element off by 1e-3 (a row sums to 1)
    if cuda.grid(1) == 0:
        y[0, 0] += 1e-3


def _wrong_versions():
    """Two versions a benchmark must refuse: one that writes nothing (the poisoned output stays NaN), one that is
    right but for one element, off by a little."""
    right = softmax.VERSIONS["optimized"]
    silent = Version("writes_nothing", "softmax", lambda x, y: [], right.check, "writes nothing")
    slightly = Version("one_element_off", "softmax",
                       lambda x, y: right.plan(x, y) + [Launch(_bump_first, (1,), (32,), (y,))], right.check,
                       "one element off by 1e-3")
    return silent, slightly


class _CountingTimer(bench.Timer):
    """The benchmark's timer, counting what it is asked to time (on the simulator it times nothing: a fixed list)."""

    def __init__(self, torch_mod=None):
        super().__init__(torch_mod)
        self.timed = 0

    def time(self, enqueue, sets, min_runs=25, budget_ms=1500.0):
        self.timed += 1
        return super().time(enqueue, sets, min_runs, budget_ms) if GPU else [1.0] * min_runs


def test_a_wrong_version_is_refused_before_timing(monkeypatch):
    """bench_shape checks each version's output (poisoned with NaN first) against the float64 reference and never
    times a wrong one: its row says WRONG with the check's message, no time, no runs."""
    silent, slightly = _wrong_versions()
    monkeypatch.setitem(softmax.VERSIONS, silent.name, silent)
    monkeypatch.setitem(softmax.VERSIONS, slightly.name, slightly)
    torch = None
    if GPU:
        try:
            import torch  # noqa: F811
        except ImportError:
            torch = None
    timer = _CountingTimer(torch)
    logged = []
    results = bench.bench_shape("softmax", (37, 300), timer, torch, versions=["optimized", silent.name,
                                                                             slightly.name], log=logged.append)
    by_name = {r.name: r for r in results}
    assert by_name["optimized"].ok and by_name["optimized"].runs >= 25
    for name, fragment in ((silent.name, "nan"), (slightly.name, "expected")):
        r = by_name[name]
        assert not r.ok and r.runs == 0 and math.isnan(r.median_ms), r
        assert fragment in r.note and r.rel_error > TOLERANCE["softmax"], r.note
        assert any(f"{name}: WRONG RESULT, not timed" in line for line in logged)
    # timed: optimized, and the peer when there is one -- never the two wrong versions
    assert timer.timed == 1 + (torch is not None)


def test_warm_runs_each_version_at_each_shape_once_in_processes_that_end(monkeypatch):
    """`warm`: every (version, shape) of a plan is one job, run in other processes (each version's kernels compiled
    there into the shared cache; here, in the simulator, launched); a job that fails comes back as a line, and the
    processes are gone when it returns. Nothing is timed."""
    import multiprocessing

    tasks = bench.plan(["softmax"], [(3, 33)]) + bench.plan(["matmul"], [(5, 7, 9)], ["naive", "optimized"])
    assert [t[:4] for t in tasks] == [("softmax", "", (3, 33), {}), ("matmul", "", (5, 7, 9), {})]
    count, failed = bench.warm(tasks, jobs=2)
    assert (count, failed) == (len(softmax.VERSIONS) + 2, [])
    assert multiprocessing.active_children() == []
    assert bench.warm([], jobs=4) == (0, [])
    # a job that raises: one line naming the lesson, the version and the shape
    line = bench._warm_one(("nosuch", (4, 4), {}, "naive"))
    assert line.startswith("nosuch naive (4, 4): KeyError") and "\n" not in line
    # and the timer it runs under times nothing
    timer = bench.CompileOnly(None)
    assert not timer.timing and math.isnan(timer.time(lambda i: 1 / 0, 4)[0])


@pytest.mark.gpu
def test_bench_measures_a_small_shape_end_to_end(tmp_path):
    """`gpukernels bench softmax --sizes 257,1000 --json FILE` as a user runs it: ceilings measured, every version
    checked on poisoned output and timed with events (CUDA-graph replay when PyTorch is there), a JSON report whose
    figures hang together. Nothing is replaced. Run as a command, in a process of its own with no kernel cache of
    the test session's: it compiles every kernel ahead in two processes (--jobs 2) into a folder of its own, and
    the timing process must load them all and compile none."""
    import os
    import re
    import subprocess
    import sys

    from gpukernels import _kcache

    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k not in (_kcache.ENV, _kcache.LOG_ENV)}
    done = subprocess.run([sys.executable, "-m", "gpukernels", "bench", "softmax", "--sizes", "257,1000", "--json",
                           str(out), "--jobs", "2"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = re.search(r"(\d+) kernels loaded as compiled ahead, (\d+) compiled in the timed run", done.stderr)
    assert loaded and int(loaded[1]) >= 1 and loaded[2] == "0", done.stderr[-2000:]
    assert not [p for p in tmp_path.iterdir() if p != out]  # the cache folder was not put beside the report
    rep = json.loads(out.read_text())
    assert rep["complete"] and rep["environment"]["device"]
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    kernels = [r for r in rep["results"] if r["kind"] == "kernel"]
    assert [r["name"] for r in kernels] == list(softmax.VERSIONS)
    for r in rep["results"]:
        assert r["ok"] and r["shape"] == [257, 1000], r
        assert r["rel_error"] <= TOLERANCE["softmax"] * (10 if r["kind"] == "peer" else 1), r
        assert r["runs"] >= 25 and 0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"] < 50, r
        assert r["gbps"] == pytest.approx(r["bytes"] / (r["median_ms"] * 1e-3) / 1e9)
        assert r["bytes"] == 8 * 257 * 1000 and r["flops"] == 5 * 257 * 1000
    if have_torch:
        assert rep["method"] == "cuda-graph replay, torch events", rep["method"]  # capture did not fall back
        assert [r["kind"] for r in rep["results"]].count("peer") == 1
        c = rep["ceilings"]
        assert 500 < c["copy_GBps"] < 20000 and 5 < c["sgemm_TFLOPs"] < 500, c  # an H200: ~4000 GB/s, ~50 TFLOP/s
        for row in bench.rows(rep):
            # the roofline floor is a lower bound on the time: no row beats it
            assert row["of_ceiling"] is not None and 0 < row["of_ceiling"] <= 1.05, row
    else:
        assert rep["method"].startswith("numba events") and rep["ceilings"] == {}
    # the naive version is the slowest kernel: one thread per row against a warp or block per row
    naive = next(r for r in kernels if r["name"] == "naive")
    assert all(r["median_ms"] <= naive["median_ms"] for r in kernels)


def test_timer_caps_runs_and_budget_for_a_quick_run(monkeypatch):
    """Timer(min_runs=, budget_ms=) caps what each time() asks (the notebooks' quick tables); without them the
    harness's own asks stand. At 1 ms a launch, 2 launches a timed region: 1500 ms buys 750 regions (capped at
    200), 300 ms buys 150, and min_runs=5 lets a slow kernel stop at 5 instead of 25. A launch of LONG_MS or more
    is timed LONG_MIN_RUNS times at least (5) or its budget's worth, one below it 25 times or its budget's worth."""
    asked = []

    def fake(timer_cls_kwargs, est):
        timer = bench.Timer(None, **timer_cls_kwargs)
        monkeypatch.setattr(timer, "estimate_ms", lambda enqueue, sets: est)
        monkeypatch.setattr(timer, "_time_events", lambda enqueue, sets, inner, runs: asked.append((inner, runs)))
        timer.time(lambda i: None, 1)
        return asked[-1]

    assert fake({}, 1.0) == (2, 200)
    assert fake({"budget_ms": 300.0}, 1.0) == (2, 150)
    assert fake({}, 50.0) == (1, 30)  # slow: one launch a region, the budget's 30 runs
    assert fake({}, 99.0) == (1, 25)  # the floor of runs decides
    assert fake({}, bench.LONG_MS) == (1, 15)  # long: the budget's 15 runs, no floor of 25
    assert fake({}, 1000.0) == (1, bench.LONG_MIN_RUNS) == (1, 5)  # 1.5 runs' budget: 5 runs say enough
    assert fake({"min_runs": 5, "budget_ms": 300.0}, 1000.0) == (1, 5)


def test_a_slow_launch_is_timed_alone_with_the_input_sets_in_turn(monkeypatch):
    """A launch of SLOW_MS or more: one per timed region (not `sets` of them: naive softmax at 1 x 2^20, 338 ms, with
    25 sets per region took 211 s of a suite run), each run on the next input set so that none is timed L2-warm."""
    from numba import cuda

    class Event:  # stand-in events: what is checked is which launches are timed, on any backend (Numba's own
        def record(self, stream=None):  # simulator has no default_stream, ours no elapsed time)
            pass

        def synchronize(self):
            pass

    timer = bench.Timer(None)
    monkeypatch.setattr(timer, "estimate_ms", lambda enqueue, sets: 10 * bench.SLOW_MS)
    monkeypatch.setattr(timer, "stream", lambda: 0)
    monkeypatch.setattr(cuda, "event", lambda *args, **kwargs: Event())
    monkeypatch.setattr(cuda, "event_elapsed_time", lambda start, end: 1.0, raising=False)
    seen = []
    times = timer.time(seen.append, 3, min_runs=7, budget_ms=1.0)
    assert len(times) == 7 and seen == [0, 1, 2, 0, 1, 2, 0]


def test_suite_table_says_when_its_rows_come_from_several_runs():
    shapes = [shape for _, shape in bench.suite_shapes("softmax")]

    def suite_report(date, part):
        rows = [_row("softmax", s, n, k, 1.0) for s in part for n, k in (("optimized", "kernel"), ("torch", "peer"))]
        return dict(_report(date, rows), suite=True)

    one = bench.suite_markdown(suite_report("2026-12-02T15:30:00", shapes))
    assert "(2026-12-02;" in one and "merged" not in one
    two = bench.suite_markdown(bench.merge([suite_report("2026-12-02T15:19:00", shapes[:4]),
                                            suite_report("2026-12-02T15:30:00", shapes[4:])]))
    assert "2 runs, 2026-12-02 15:19 to 2026-12-02 15:30 UTC, merged shape by shape" in two


# ----------------------------------------------------------------------------------------------------------
# A lesson whose versions take different inputs (attention: float32 steps, float16 tensor-core steps), causal runs
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow  # 6 CPU-s: every attention version through the benchmark's harness in the simulator
def test_attention_versions_are_measured_on_the_inputs_they_take():
    """bench_shape gives each version the inputs it takes (the tensor-core steps float16) and checks it against the
    reference of those, within its own tolerance; the rows come back in the registry's order, the float16 ones
    saying so; a version that does not take the shape (D not a multiple of 16) is logged, not run. (On the
    simulator: torch is absent, the timer counts.)"""
    from gpukernels import attention
    from gpukernels.check import tolerance

    logged = []
    results = bench.bench_shape("attention", (1, 2, 33, 40, 16), _CountingTimer(), None, log=logged.append)
    assert [r.name for r in results] == list(attention.VERSIONS)
    for r in results:
        half = r.name in attention.FLOAT16_VERSIONS
        assert r.ok and r.runs > 0, r
        assert r.extra.get("inputs") == ("float16" if half else None), r.extra
        assert r.rel_error <= tolerance("attention", r.name), r
    assert "tf32x3" in results[-1].extra["choice"]  # the dispatcher says what it ran
    # causal: flops of the visible pairs only, the rows marked; D = 8: the float16 steps are not run
    results = bench.bench_shape("attention", (1, 1, 20, 20, 8), _CountingTimer(), None, log=logged.append,
                                params={"causal": True})
    assert [r.name for r in results] == [n for n in attention.VERSIONS if n not in attention.FLOAT16_VERSIONS]
    assert all(r.ok and r.extra["causal"] is True and r.flops == attention.flops((1, 1, 20, 20, 8), causal=True)
               for r in results)
    assert sum("not run (it does not take this shape)" in line for line in logged) == len(attention.FLOAT16_VERSIONS)


def test_run_adds_the_causal_shapes_with_causal_true(monkeypatch):
    monkeypatch.setattr(bench, "measure_ceilings", lambda timer, torch: {})
    monkeypatch.setattr(bench, "environment", lambda: {"device": "Test GPU", "date": "D"})
    seen = []

    def fake_shape(lesson, shape, timer, torch, versions, log, params=None):
        seen.append((shape, params))
        return []

    monkeypatch.setattr(bench, "bench_shape", fake_shape)
    shapes = gpukernels.attention.SHAPES
    bench.run(["attention"], log=lambda *_: None)
    assert seen == [(tuple(s), None) for s in shapes["bench"]] + [(tuple(s), {"causal": True})
                                                                  for s in shapes["bench_causal"]]
    seen.clear()
    bench.run(["attention"], [(1, 2, 64, 64, 64)], log=lambda *_: None)  # --sizes: those shapes only
    assert seen == [((1, 2, 64, 64, 64), None)]


def test_causal_rows_and_float16_rows_keep_their_own_groups_and_peers():
    """A causal row shares its shape with a non-causal one: merging and the tables keep them apart (each compared
    with the peer of its own group); a float16 row is compared with the float16 peer timed beside it."""
    shape = (8, 16, 4096, 4096, 128)

    def row(name, kind, ms, causal=False, **extra):
        r = _row("attention", shape, name, kind, ms)
        r["extra"] = dict(extra, **({"causal": True} if causal else {}))
        return r

    full = [row("naive", "kernel", 40.0), row("mma", "kernel", 2.0, inputs="float16", peer="flash", peer_ms=1.0),
            row("optimized", "kernel", 10.0), row("torch SDPA", "peer", 5.0)]
    causal = [row("naive", "kernel", 20.0, True), row("optimized", "kernel", 4.0, True),
              row("torch SDPA", "peer", 2.0, True)]
    merged = bench.merge([_report("A", full), _report("B", causal)])
    assert len(merged["results"]) == 7
    got = {(r["shape"], r["version"]): r for r in bench.rows(merged)}
    assert got["8x16x4096x4096x128", "optimized"]["of_peer"] == 0.5
    assert got["8x16x4096x4096x128 causal", "optimized"]["of_peer"] == 0.5
    assert got["8x16x4096x4096x128 causal", "optimized"]["speedup"] == 5.0
    mma = got["8x16x4096x4096x128", "mma"]
    assert mma["of_peer"] == 0.5 and mma["label"] == "mma (float16 in; x peer: flash)"
    merged["environment"]["versions"] = {}
    assert "| attention | 8x16x4096x4096x128 causal | optimized" in bench.markdown_table(merged)


class _FakeTensor:
    """Just what the attention reference and peers ask of a torch tensor, over a NumPy array."""

    def __init__(self, a):
        self.a = np.asarray(a)
        self.shape, self.dtype, self.device = self.a.shape, self.a.dtype, "cuda"

    def double(self):
        return _FakeTensor(self.a.astype(np.float64))

    def float(self):
        return _FakeTensor(self.a.astype(np.float32))

    def reshape(self, *shape):
        return _FakeTensor(self.a.reshape(*shape))

    def __getitem__(self, i):
        return _FakeTensor(self.a[i])

    def __setitem__(self, i, value):
        self.a[i] = value.a

    def numpy(self):
        return self.a


def _fake_torch(calls):
    """A torch with F.scaled_dot_product_attention (computed by the lesson's reference) and sdpa_kernel, recording
    each call's backend (None: torch's own choice), dtype, heads and causal flag."""
    import contextlib
    import types

    from gpukernels import attention

    backend = [None]

    @contextlib.contextmanager
    def sdpa_kernel(which):
        backend[0] = which
        try:
            yield
        finally:
            backend[0] = None

    def sdpa(q, k, v, is_causal=False):
        calls.append((backend[0], q.dtype.name, q.shape[0], is_causal))
        return _FakeTensor(attention.reference(q.a, k.a, v.a, causal=is_causal).astype(q.dtype))

    ns = types.SimpleNamespace
    return ns(float32=np.float32, empty=lambda shape, dtype, device: _FakeTensor(np.empty(shape, dtype)),
              nn=ns(functional=ns(scaled_dot_product_attention=sdpa),
                    attention=ns(sdpa_kernel=sdpa_kernel, SDPBackend=ns(MATH="math", FLASH_ATTENTION="flash"))))


def test_attention_reference_and_peers_use_the_backends_they_name(monkeypatch):
    """The float64 reference is SDPA's MATH backend on float64 inputs, a few heads at a time; the float16 steps'
    peer is SDPA's FlashAttention backend, the float32 steps' torch's default choice; causal reaches all three."""
    from gpukernels import attention

    calls = []
    torch = _fake_torch(calls)
    q, k, v = attention.make_inputs((2, 3, 5, 7, 16), 0)
    monkeypatch.setattr(bench, "ATTENTION_REFERENCE_BYTES", 8 * 5 * 7 * 4)  # 4 heads of S at a time: 2 calls
    ref = bench._reference("attention", torch, [_FakeTensor(x) for x in (q, k, v)], {"causal": True})
    assert calls == [("math", "float64", 4, True), ("math", "float64", 2, True)]
    assert ref.dtype == np.float32 and ref.shape == (2, 3, 5, 16)
    assert np.allclose(ref.a, attention.reference(q, k, v, causal=True), rtol=1e-6, atol=1e-6)

    calls.clear()
    name, fn = bench._peer("attention", torch, "float16")
    half = [_FakeTensor(x.astype(np.float16)) for x in (q, k, v)]
    assert "FlashAttention" in name and fn(*half, causal=True).dtype == np.float16
    name, fn = bench._peer("attention", torch)
    fn(*[_FakeTensor(x) for x in (q, k, v)])
    assert "float32" in name and calls == [("flash", "float16", 2, True), (None, "float32", 2, False)]
    assert bench._peer("matmul", torch, "float16") is None and bench._peer("attention", torch, "float64") is None


def test_steps_on_other_inputs_are_summarised_against_their_own_peer():
    """attention's float16 steps are timed against FlashAttention in the same run (``extra.peer_ms``), not against
    the float32 peer of the lesson: the suite's README block summarises them per step; a wrong row counts as 0."""
    def row(shape, name, ms, peer_ms=None, ok=True, kind="version"):
        extra = {"regime": "r", **({"inputs": "float16", "peer": "flash", "peer_ms": peer_ms} if peer_ms else {})}
        return {"lesson": "attention", "shape": list(shape), "name": name, "kind": kind, "median_ms": ms, "ok": ok,
                "extra": extra, "note": ""}

    rep = {"environment": {"device": "GPU", "date": "2026-12-04T00:00:00"}, "method": "m", "suite": True,
           "results": [row((1, 1, 8, 8, 16), "pipelined", 2.0, peer_ms=1.0), row((1, 1, 8, 8, 16), "optimized", 4.0),
                       row((1, 1, 8, 8, 16), "peer", 1.0, kind="peer"),
                       row((2, 1, 8, 8, 16), "pipelined", 1.0, peer_ms=2.0), row((2, 1, 8, 8, 16), "optimized", 1.0),
                       row((2, 1, 8, 8, 16), "peer", 1.0, kind="peer")]}
    (o,) = bench.other_inputs_summary(rep)
    assert (o["name"], o["shapes"], o["min"]) == ("pipelined", 2, 0.5) and abs(o["geomean"] - 1.0) < 1e-12
    assert "| attention | `pipelined` (float16) | flash | 2 | 1.00 | 0.50 |" in bench.suite_markdown(rep)
    rep["results"][3]["ok"] = False
    (o,) = bench.other_inputs_summary(rep)
    assert o["geomean"] == 0.0 and o["min"] == 0.0
