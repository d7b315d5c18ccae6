"""gpukernels.notebook: the notebooks' helpers (what notebooks/nbutil.py held), in the package and under test --
the simulator child that serves a GPU session, kernels sent as their cell's source, and the tables."""

import linecache
import os

import numpy as np
import pytest

import gpukernels
from gpukernels import notebook as nb

sim_only = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")

if gpukernels.MODE == "sim":
    from numba import cuda, float32

    @cuda.jit
    def unsynced_shift(out):
        s = cuda.shared.array(64, float32)
        i = cuda.threadIdx.x
        s[i] = i
        out[i] = s[(i + 1) % 64]  # RACE: no syncthreads between the write and the neighbour's read

    @cuda.jit
    def own_element(out):
        s = cuda.shared.array(64, float32)
        i = cuda.threadIdx.x
        s[i] = i
        out[i] = s[i]  # each thread reads what it wrote: no barrier needed


def _boom(message):
    raise KeyError(message)


def _chatty(x):
    print("from the child")
    return x * 2


def test_markdown_table_is_a_table_that_shows_as_markdown():
    t = nb.markdown_table(["version", "loads", "ratio", "note"], [["naive", 12345, 0.125, None]])
    assert t._repr_markdown_().splitlines() == ["| version | loads | ratio | note |", "|---|---|---|---|",
                                                "| naive | 12,345 | 0.125 | - |"]


@sim_only
def test_race_table_is_the_tracers_hazard_table_with_the_lines_quoted():
    with gpukernels.trace() as t:
        unsynced_shift[1, 64](np.zeros(64, np.float32))
    summary = t.summary()
    assert nb.race_table(summary) == summary.tables()["hazards"]
    assert "read-after-write" in summary.tables()["hazards"].markdown()
    shown = nb.race_table(summary, unsynced_shift)
    text = str(getattr(shown, "data", shown))  # IPython's Markdown, or the text without IPython
    assert "race (read-after-write)" in text and "`out[i] = s[(i + 1) % 64]  # RACE" in text
    with gpukernels.trace() as clean:
        own_element[1, 64](np.zeros(64, np.float32))
    assert "none found" in nb.race_table(clean.summary()).markdown()


@sim_only
def test_on_simulator_runs_here_in_simulator_mode():
    assert nb.on_simulator(os.getpid) == os.getpid()


@sim_only
def test_on_simulator_child_serves_calls_forwards_prints_and_errors(monkeypatch, capsys):
    """The path a GPU session takes (forced here with GPUKERNELS_NOTEBOOK_CHILD=1): one child for the session,
    results and printed text back, the child's exceptions raised in the notebook."""
    monkeypatch.setenv(nb.CHILD_VAR, "1")
    monkeypatch.setattr(nb, "_CHILD_PROC", None)
    try:
        pid = nb.on_simulator(os.getpid)
        assert pid != os.getpid() and nb.on_simulator(os.getpid) == pid  # kept for the session
        assert nb.on_simulator(_chatty, 21) == 42 and capsys.readouterr().out == "from the child\n"
        with pytest.raises(KeyError, match="no such thing"):
            nb.on_simulator(_boom, "no such thing")
        assert nb.on_simulator(os.getpid) == pid  # an error in a job does not end the child
    finally:
        if nb._CHILD_PROC is not None:
            nb._CHILD_PROC.kill()
            nb._CHILD_PROC.wait()


CELL = '''import math
N = 8
SCALE = math.pi  # not a literal: dropped, so the kernel below must not need it


@cuda.jit
def cell_kernel(x):
    i = cuda.grid(1)
    if i < N:
        x[i] = i * 2.0


nb_result = on_simulator(something)  # a statement that uses the kernel: not re-run in the child
'''


@sim_only
def test_a_cell_kernel_is_rebuilt_from_its_cells_definitions():
    kernel = nb._rebuild(nb._CellKernel("cell_kernel", CELL))
    x = np.zeros(10, np.float32)
    kernel[1, 16](x)
    assert x.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 0, 0]
    name = "<notebook cell defining cell_kernel>"
    assert linecache.getline(name, 10).strip() == "x[i] = i * 2.0"  # the tracer can quote the cell's lines


def _kept_table(kept):
    import json

    table = json.loads(kept.read_text())
    lesson, shape = table["lesson"], tuple(table["shape"])
    assert table["key"] == nb.traced_key(lesson, shape), (
        f"{kept.name} is stale: run python -m gpukernels.notebook keep {lesson} {' '.join(map(str, shape))}")
    return table, lesson, shape


@pytest.mark.parametrize("kept", sorted(nb.TRACED.glob("*.json")), ids=lambda p: p.stem)
def test_kept_traffic_tables_are_keyed_to_the_sources_now(kept):
    """A table kept beside the notebooks (notebooks/traced/) is used only while its key matches the sources: a
    kernel edited since it was kept makes it stale (the long tier re-traces it, below)."""
    table, lesson, shape = _kept_table(kept)
    assert [r["version"] for r in table["rows"]] == list(gpukernels.LESSONS[lesson].VERSIONS)


@sim_only
@pytest.mark.slow  # traces every version of the lesson: ~10 s each
@pytest.mark.parametrize("kept", sorted(nb.TRACED.glob("*.json")), ids=lambda p: p.stem)
def test_kept_traffic_tables_are_what_the_tracer_counts_now(kept):
    """This re-traces a kept table and fails when it is stale or its counts differ (a change of the tracer)."""
    table, lesson, shape = _kept_table(kept)
    live, from_kept = nb.traffic_rows(lesson, shape, fresh=True)
    assert not from_kept
    fields = ("version", "loaded_bytes", "stored_bytes", "reuse", "traffic", "ok")
    assert [[r.get(f) for f in fields] for r in live] == [[r.get(f) for f in fields] for r in table["rows"]]
    assert nb.traffic_rows(lesson, shape) == (table["rows"], True)


@sim_only
def test_a_kept_traffic_table_is_not_used_once_a_source_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(nb, "TRACED", tmp_path)
    nb.keep_traffic("softmax", (4, 64))
    assert nb.traffic_rows("softmax", (4, 64))[1] is True
    monkeypatch.setattr(nb, "traced_key", lambda lesson, shape: "another")  # as after an edit to a kernel
    rows, kept = nb.traffic_rows("softmax", (4, 64))
    assert not kept and [r["version"] for r in rows] == list(gpukernels.softmax.VERSIONS)


@sim_only
def test_traffic_table_counts_every_version_against_the_minimum():
    text = str(getattr(nb.traffic_table("softmax", (4, 64)), "data", ""))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "version" not in line]
    assert [r.split("|")[1].strip() for r in rows] == list(gpukernels.softmax.VERSIONS)
    assert "Counted by the tracer" in text and "1.0x" in text  # optimized: each element read once, written once


def test_results_table_is_the_demos_gpu_table_under_its_label():
    from gpukernels import bench, demo

    report = {"environment": {"device": "Test GPU", "date": "2026-12-01"}, "method": "m", "ceilings": {},
              "results": [dict(lesson="softmax", shape=[4, 64], name=name, kind=kind, median_ms=ms, min_ms=ms, max_ms=ms,
                               runs=5, flops=10**9, bytes=10**9, rel_error=0.0, ok=ok, note="", extra={})
                          for name, kind, ms, ok in (("naive", "kernel", 2.0, True), ("optimized", "kernel", 0.5, False),
                                                     ("torch.softmax", "peer", 1.0, True))]}
    shown = nb.results_table(report, "softmax", "**label**")
    text = str(getattr(shown, "data", shown))
    assert text.startswith("**label**") and demo.gpu_table(bench.rows(report), shapes=True).markdown() in text
    assert "| 4x64 | naive | 2.0000 |" in text and "optimized (WRONG)" in text
    assert "Not in this benchmark run (added since): `block_row`, `online`, `registers`" in text
