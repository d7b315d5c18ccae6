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
