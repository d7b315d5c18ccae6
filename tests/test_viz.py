"""gpukernels.viz: the numbers behind each figure (not pixels). Compiles are replaced by cached fake assembler
logs, so these tests need neither a GPU nor the compiler."""

import json

import pytest

import gpukernels
from gpukernels import resources as R
from gpukernels import viz

# The tracer behind these figures records accesses on the simulator only.
sim_only = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")

# registers and static shared memory (as sm_80 logs report it: no reservation included) per kernel name
FAKE = {"naive_kernel": (28, 0), "tiled_kernel": (32, 2048), "regblock_2d_kernel": (148, 8192)}


def _log(regs, smem):
    return (f"ptxas info    : Used {regs} registers, used {1 if smem else 0} barriers\n"
            f"info    : used {regs} registers, used 1 barriers, 0 stack, {smem} bytes smem, 400 bytes cmem[0], "
            f"0 bytes lmem\n")


@pytest.fixture
def fake_compiles(tmp_path, monkeypatch):
    """Every lesson kernel 'compiled' for sm_80: 40 registers and no shared memory unless FAKE says otherwise."""
    monkeypatch.setenv("GPUKERNELS_CACHE", str(tmp_path / "cache"))
    for lesson in gpukernels.LESSONS:
        for plans in R.plans_for(lesson, R.lesson_shape(lesson)).values():
            for launch in plans:
                regs, smem = FAKE.get(R.kernel_name(launch.kernel), (40, 0))
                R._cache_put(R.cache_key(launch, "sm_80"), {"log": _log(regs, smem)})

    def no_compile(requests):
        raise AssertionError(f"unexpected compile: {requests}")

    monkeypatch.setattr(R, "compile_requests", no_compile)
    return tmp_path


def test_occupancy_bars_data(fake_compiles):
    fig = viz.occupancy_bars("matmul", "sm_80")
    rows = {r["version"]: r for r in fig.gpukernels_data["rows"]}
    assert list(rows) == list(gpukernels.matmul.VERSIONS)
    # tiled: 256 threads, 32 regs, 2048 B smem on sm_80 -> 8 blocks by threads and registers, 64/64 warps
    t = rows["tiled"]
    assert (t["blocks_per_sm"], t["warps_per_sm"]) == (8, 64)
    assert set(t["binding"]) == {"threads", "registers"}
    # shared memory: (2048 + 1024) -> 3072 B per block; 167936 // 3072 = 54 blocks = 432 warps
    assert t["limits_warps"]["shared memory"] == 54 * 8
    # regblock_2d: 148 regs -> 4864 per warp -> 3 warps per sub-partition -> 12 warps -> 1 block of 8 warps
    r2 = rows["regblock_2d"]
    assert (r2["blocks_per_sm"], r2["warps_per_sm"], r2["binding"]) == (1, 8, ["registers"])
    assert "regblock_2d keeps only 8 of 64 warps" in fig._suptitle.get_text()


def test_occupancy_sweep_data(fake_compiles):
    fig = viz.occupancy_vs_block_size("matmul", "sm_80")
    by = {r["version"]: r for r in fig.gpukernels_data["rows"]}
    r2 = by["regblock_2d"]
    occ = dict(zip(r2["block_sizes"], r2["occupancy"]))
    assert occ[256] == pytest.approx(12.5) and occ[384] == pytest.approx(18.75)
    assert occ[416] == 0  # 16 warps x 4864 registers > 65536: the block does not fit
    assert r2["launched"] == 256
    assert dict(zip(by["naive"]["block_sizes"], by["naive"]["occupancy"]))[32] == 50.0  # 32 blocks of 1 warp


def _report():
    def r(lesson, shape, name, kind, ms, flops, nbytes):
        return dict(lesson=lesson, shape=list(shape), name=name, kind=kind, median_ms=ms, min_ms=ms, max_ms=ms,
                    runs=5, flops=flops, bytes=nbytes, ok=True)
    s = gpukernels.softmax.SHAPES["bench"][0]
    f, b = gpukernels.softmax.flops(s), gpukernels.softmax.min_bytes(s)
    return {"environment": {"device": "Test GPU"}, "ceilings": {"copy_GBps": 4000.0, "sgemm_TFLOPs": 50.0},
            "results": [r("softmax", s, "optimized", "kernel", 0.05, f, b), r("softmax", s, "naive", "kernel", 2.0, f, b),
                        r("softmax", s, "torch.softmax", "peer", 0.04, f, b)]}


def test_performance_bars_measured():
    rep = _report()
    fig = viz.performance_bars("softmax", rep)
    d = fig.gpukernels_data
    assert d["measured"] and d["unit"] == "GB/s"  # softmax is memory-bound: effective bandwidth
    # every version of VERSIONS, in its order (those the run did not measure named as such, without a value),
    # then the peer
    from gpukernels import softmax

    assert d["names"] == [n if n in ("naive", "optimized") else f"{n} (not in this run)" for n in softmax.VERSIONS] \
        + ["torch.softmax (peer)"]
    nbytes = rep["results"][0]["bytes"]
    assert d["values"][0] == pytest.approx(nbytes / 2.0e-3 / 1e9)
    assert d["values"][len(softmax.VERSIONS) - 1] == pytest.approx(nbytes / 0.05e-3 / 1e9)
    assert all(v == 0 for n, v in zip(d["names"], d["values"]) if "not in this run" in n)
    assert "measured" in fig.axes[0].get_title(loc="left")


def test_roofline_measured_points():
    rep = _report()
    fig = viz.roofline(rep, "sm_90", ["softmax"])
    d = fig.gpukernels_data
    assert d["measured"]
    p = {x["version"]: x for x in d["points"]}
    f, b = rep["results"][0]["flops"], rep["results"][0]["bytes"]
    assert p["optimized"]["intensity"] == pytest.approx(f / b)
    assert p["optimized"]["tflops"] == pytest.approx(f / 0.05e-3 / 1e12)
    assert p["torch.softmax"]["peer"]


def test_load_bench_picks_the_reference_else_the_latest_date(tmp_path, monkeypatch):
    """The README's reports (REFERENCE: h200.json, h200-suite.json) when they are there, so that the gallery and the
    README show the same run; else the report whose ``environment.date`` is latest -- never the file modified last
    (a clone sets every file's time to the checkout), nor the last by name. A file that is not a timing report, or
    is a suite report, is passed over unless a suite is asked for."""
    import os

    monkeypatch.setattr(viz.performance, "RESULTS_DIR", tmp_path)
    assert viz.load_bench() is None
    files = {"z_oldest.json": ("oldest", False, "2026-01-01T00:00:00+00:00", 900),
             "b_newest.json": ("newest", False, "2026-03-01T00:00:00+00:00", 100),
             "a_middle.json": ("middle", False, "2026-02-01T00:00:00+00:00", 300),
             "c_suite.json": ("suite", True, "2026-04-01T00:00:00+00:00", 400)}
    for name, (device, suite, date, mtime) in files.items():
        rep = _report()
        rep["environment"].update(device=device, date=date)
        rep["suite"] = suite
        (tmp_path / name).write_text(json.dumps(rep))
        os.utime(tmp_path / name, (mtime, mtime))  # file times that disagree with the dates: not what decides
    (tmp_path / "d_broken.json").write_text("{not json")
    (tmp_path / "e_empty.json").write_text(json.dumps({"results": []}))
    # `bench --overhead`'s report (host us per call, no kernel times) and a sweep's list are not timing reports
    (tmp_path / "f_overhead.json").write_text(json.dumps({"kind": "overhead", "results": [
        {"kind": "overhead", "lesson": "softmax", "name": "optimized", "us_per_call": 9.6}]}))
    (tmp_path / "g_sweep.json").write_text(json.dumps([{"lesson": "matmul", "ms": 1.0}]))
    got = viz.load_bench()
    assert got["environment"]["device"] == "newest" and got["_path"].endswith("b_newest.json")
    assert viz.load_bench(suite=True)["environment"]["device"] == "suite"
    reference = _report()
    reference["environment"].update(device="reference", date="2025-01-01T00:00:00+00:00")  # older, yet chosen
    (tmp_path / viz.performance.REFERENCE[False]).write_text(json.dumps(reference))
    assert viz.load_bench()["environment"]["device"] == "reference"
    assert viz.load_bench(suite=True)["environment"]["device"] == "suite"  # no reference suite report: the latest


def test_plots_main_writes_gallery(fake_compiles, tmp_path, monkeypatch):
    monkeypatch.setattr(viz.performance, "RESULTS_DIR", tmp_path / "none")
    monkeypatch.setattr(viz.gallery, "tracer_available", lambda: False)
    out, gallery = tmp_path / "figures", tmp_path / "gallery.md"
    assert viz.plots_main(["softmax", "--arch", "sm_80", "--out", str(out), "--gallery", str(gallery)]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "softmax_occupancy.png" in pngs and "occupancy_all.png" in pngs
    assert sum(p.stat().st_size for p in out.glob("*.png")) < 300_000
    text = gallery.read_text()
    assert "figures/softmax_occupancy.png" in text
    assert "Not drawn in this run" in text and "gpukernels.trace" in text


# --------------------------------------------------------------------------------------------------------
# Tracer-fed figures: the data behind them equals what the tracer recorded and what the launch plan implies.
# Tiny shapes keep the simulation to a second or two.
# --------------------------------------------------------------------------------------------------------

import numpy as np  # noqa: E402


@sim_only
def test_grid_map_matches_the_launch_plan():
    fig = viz.grid_map("matmul", ["naive", "tiled"], shape=(32, 32, 4))
    d = fig.gpukernels_data["versions"]
    i, j = np.indices((32, 32))
    # tiled: 16 x 16 blocks, blockIdx.x along columns; thread (tx, ty) = (j % 16, i % 16)
    assert (d["tiled"]["block"] == (j // 16) + 2 * (i // 16)).all()
    assert (d["tiled"]["thread"] == (j % 16) + 16 * (i % 16)).all()
    # naive: blocks of 32 x 8 threads, threadIdx.x -> row: grid (1, 4); warp 0 writes a 32 x 1 column
    assert (d["naive"]["block"] == j // 8).all()
    assert (d["naive"]["thread"] == i + 32 * (j % 8)).all()
    assert d["naive"]["warp0_span"] == (32, 1) and d["tiled"]["warp0_span"] == (2, 16)


@sim_only
def test_reuse_heatmap_equals_tracer_counts():
    import gpukernels

    shape = (32, 32, 32)
    fig = viz.reuse_heatmap("matmul", ["naive", "tiled"], shape=shape)
    counts = fig.gpukernels_data["counts"]
    # naive reads every element of A N = 32 times and of B M = 32 times; tiled N / 16 = 2 times
    assert (counts["naive"]["a"] == 32).all() and (counts["naive"]["b"] == 32).all()
    assert (counts["tiled"]["a"] == 2).all() and (counts["tiled"]["b"] == 2).all()
    # and the totals are the tracer's own traffic figures
    with gpukernels.trace() as t:
        gpukernels.matmul.tiled(*gpukernels.matmul.make_inputs(shape, 0))
    loads = {r.array: r.loads for r in t.traffic()}
    assert counts["tiled"]["a"].sum() == loads["a"] and counts["tiled"]["b"].sum() == loads["b"]


@sim_only
def test_access_map_of_a_warp():
    fig = viz.access_map("matmul", ["naive", "coalesced"], who="warp", index=0, block=0, shape=(32, 32, 8))
    c = fig.gpukernels_data["counts"]
    # naive warp 0 = 32 rows of one column: all of A's 32 rows (each element once) and B's column 0, 32 times
    assert (c["naive"]["a"] == 1).all()
    assert c["naive"]["b"][:, 0].tolist() == [32] * 8 and c["naive"]["b"][:, 1:].sum() == 0
    # coalesced warp 0 = 32 columns of row 0: A's row 0 (broadcast, 32 loads each) and B's 32 columns once
    assert c["coalesced"]["a"][0].tolist() == [32] * 8 and c["coalesced"]["a"][1:].sum() == 0
    assert (c["coalesced"]["b"] == 1).all()


@sim_only
def test_tile_phases_of_tiled_matmul():
    fig = viz.tile_phases("matmul", "tiled", block=3, shape=(32, 32, 32))  # block (1, 1)
    phases = fig.gpukernels_data["phases"]
    assert len(phases) == 2  # K / TILE
    rows = np.arange(16, 32)
    for p, ph in enumerate(phases):
        a_expect = {int(r * 32 + 16 * p + c) for r in rows for c in range(16)}
        b_expect = {int((16 * p + r) * 32 + 16 + c) for r in range(16) for c in range(16)}
        assert ph["sources"]["a"] == a_expect and ph["sources"]["b"] == b_expect
        assert ph["padding"] == 0 and ph["shared"] == ["a_tile", "b_tile"]
    mask = fig.gpukernels_data["out_block_mask"]
    assert mask.sum() == 256 and mask[16:, 16:].all()


@sim_only
def test_warp_sectors_naive_vs_coalesced():
    fig = viz.warp_sectors("matmul", ["naive", "coalesced"], array="c", kind="write", shape=(32, 32, 4))
    d = fig.gpukernels_data
    assert d["naive"]["sectors"] == 32  # lanes one row apart: a sector each
    assert d["coalesced"]["sectors"] == 4  # 32 consecutive floats = 128 bytes
    assert sorted(d["coalesced"]["lanes"].tolist()) == list(range(32))
    # the tracer's definition (sectors needed / moved): a row apart needs 4 sectors of the 32 moved
    assert (d["naive"]["min_sectors"], d["naive"]["efficiency"]) == (4, 4 / 32)
    assert d["coalesced"]["efficiency"] == 1.0


@sim_only
def test_warp_sectors_figure_and_coalescing_table_agree():
    # coalesced's read of a is a broadcast (every lane, one float): 1 sector moved, 4 bytes used. The
    # figure once said 12% (bytes used / moved) while the table said 100% (sectors needed / moved).
    shape = (32, 32, 4)
    d = viz.warp_sectors("matmul", ["naive", "coalesced"], array="a", kind="read", shape=shape).gpukernels_data
    a, b = gpukernels.matmul.make_inputs(shape, 0)
    for version in ("naive", "coalesced"):
        with gpukernels.trace() as t:
            gpukernels.matmul.VERSIONS[version](a, b)
        table = t.coalescing().by_array()[("a", "read")]
        assert d[version]["efficiency"] == table  # every warp access of a is alike in both versions
    assert (d["coalesced"]["sectors"], d["coalesced"]["bytes_used"], d["coalesced"]["efficiency"]) == (1, 4, 1.0)
    assert d["naive"]["efficiency"] == 4 / 16  # lanes a row of a (K = 4 floats, 16 bytes) apart: 16 sectors


@sim_only
def test_warp_banks_and_conflict_degree():
    fig = viz.warp_banks("matmul", ["tiled"], array="b_tile", kind="read", shape=(16, 16, 16))
    d = fig.gpukernels_data["tiled"]
    assert d["degree"] == 1  # b_tile[kk, tx]: 16 consecutive words, the other half-warp reads the same ones


@pytest.mark.slow  # 2.5 CPU-s: every matmul version traced
@sim_only
def test_roofline_model_from_traced_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUKERNELS_CACHE", str(tmp_path))
    model = {m["version"]: m for m in viz.roofline_model("softmax", shape=(4, 64))}
    # naive reads x 3 times and writes y once: 16 bytes per element; optimized 8
    assert model["naive"]["bytes"] == 16 * 4 * 64 and model["optimized"]["bytes"] == 8 * 4 * 64
    assert model["optimized"]["intensity"] == pytest.approx(5 * 4 * 64 / (8 * 4 * 64))
    assert model["naive"]["bound"] == "memory"
    fig = viz.performance_bars("softmax", {"results": []})
    assert not fig.gpukernels_data["measured"] and "MODEL" in fig.axes[0].get_title(loc="left")


def test_suite_heatmap_from_the_committed_suite_run():
    """Shapes x steps of a bench --suite report, coloured by the peer's time over the step's (no GPU needed)."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "h200-suite.json"
    report = viz.load_bench(path)
    fig = viz.suite_heatmap("matmul", report)
    data = fig.gpukernels_data
    assert data["steps"][-1] == "optimized" and "tiled" in data["steps"]
    measured = {"x".join(map(str, r["shape"])) for r in report["results"] if r["lesson"] == "matmul"}
    assert "1x8192x8192" in data["shapes"] and sorted(data["shapes"]) == sorted(measured)  # every shape, once
    i, j = data["shapes"].index("1x8192x8192"), data["steps"].index("optimized")
    assert 0.5 < data["of_peer"][i, j] < 2  # the matrix-vector kernel at copy bandwidth, near cuBLAS
    assert viz.load_bench() is None or not viz.load_bench().get("suite")  # the gallery's bench report stays put


# -- legibility: every figure as a student sees it -------------------------------------------------------------

#: How the figures are shown (gpukernels.viz._common): a notebook's PNG at gpukernels.notebook.DPI, cropped to its
#: contents; the gallery's at 90 dpi; each scaled down to DISPLAY_PX when wider.
SHOWN = [("notebook", viz._common.SHOWN_DPI[0], True), ("gallery", viz._common.SHOWN_DPI[1], False)]


def _drawn_texts(fig, dpi):
    """(renderer, the Text artists a draw at ``dpi`` really draws): visible, not empty, not a tick outside the
    view (those exist but are skipped), annotations whose point is shown."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    drawn, draw = {}, Text.draw

    def record(self, renderer):
        if self.get_visible() and self.get_text().strip():
            drawn[id(self)] = self
        return draw(self, renderer)

    Text.draw = record
    try:
        canvas.draw()
    finally:
        Text.draw = draw
    return canvas.get_renderer(), list(drawn.values())


def legibility_problems(fig) -> list[str]:
    """What a reader cannot read in ``fig`` however it is shown: a text smaller than LEAST_PX as displayed
    (points x dpi / 72 x displayed width / saved width), two texts on top of each other (their boxes, as the
    renderer lays them out, share more than a pixel each way), a text cut off by the figure's edge."""
    from matplotlib.text import Text

    from gpukernels.viz._common import DISPLAY_PX, LEAST_PX

    out = []
    for where, dpi, cropped in SHOWN:
        renderer, texts = _drawn_texts(fig, dpi)
        saved = (fig.get_tightbbox(renderer).width + 0.2) * dpi if cropped else fig.get_figwidth() * dpi
        shown = min(saved, DISPLAY_PX)
        for t in texts:
            px = t.get_fontsize() * dpi / 72 * shown / saved
            if px < LEAST_PX - 1e-6:
                out.append(f"{where}: {t.get_text()[:40]!r} is {px:.1f} px tall")
        boxes = [(t, Text.get_window_extent(t, renderer)) for t in texts]  # the text alone, not an annotation's arrow
        for i, (a, ba) in enumerate(boxes):
            for b, bb in boxes[i + 1:]:
                if min(ba.x1, bb.x1) - max(ba.x0, bb.x0) > 1 and min(ba.y1, bb.y1) - max(ba.y0, bb.y0) > 1:
                    out.append(f"{where}: {a.get_text()[:30]!r} overlaps {b.get_text()[:30]!r}")
            if not cropped and (ba.x0 < -1 or ba.y0 < -1 or ba.x1 > fig.bbox.x1 + 1 or ba.y1 > fig.bbox.y1 + 1):
                out.append(f"{where}: {a.get_text()[:30]!r} is cut off by the figure's edge")
    return sorted(set(out))


def _committed(name):
    from pathlib import Path

    return viz.load_bench(Path(__file__).resolve().parent.parent / "benchmarks" / "results" / name)


#: Every figure family of gpukernels.viz (but fragments', the tensor-core lesson's own), at small shapes: name ->
#: (needs the simulator's tracer, how to draw it). The committed H200 runs give the crowded cases (the roofline
#: of every lesson's every version, the suite's 18 shapes).
FIGURES = {
    "grid_map": (True, lambda: viz.grid_map("matmul", ["naive", "coalesced", "tiled", "regblock_1d"], (32, 32, 32))),
    "grid_map_cbr": (True, lambda: viz.grid_map("cbr", None, (1, 4, 8, 8, 4, 3, 3))),
    "access_map": (True, lambda: viz.access_map("matmul", ["naive", "coalesced", "tiled"], shape=(32, 32, 32))),
    "reuse_heatmap": (True, lambda: viz.reuse_heatmap("matmul", ["naive", "tiled"], (32, 32, 32))),
    "tile_phases": (True, lambda: viz.tile_phases("matmul", "tiled", shape=(32, 32, 48))),
    "warp_sectors": (True, lambda: viz.warp_sectors("softmax", ["naive", "optimized"], shape=(8, 64))),
    "warp_banks": (True, lambda: viz.warp_banks("matmul", ["tiled"], array="b_tile", kind="read", shape=(16, 16, 16))),
    "occupancy_bars": (False, lambda: viz.occupancy_bars("matmul", "sm_80")),
    "occupancy_all": (False, lambda: viz.occupancy_bars(None, "sm_80")),
    "occupancy_vs_block_size": (False, lambda: viz.occupancy_vs_block_size("matmul", "sm_80")),
    "performance_bars": (False, lambda: viz.performance_bars("matmul", _committed("h200.json"))),
    "performance_model": (True, lambda: viz.performance_bars("softmax", {"results": []})),
    "roofline": (False, lambda: viz.roofline(_committed("h200.json"), "sm_90")),
    "suite_heatmap": (False, lambda: viz.suite_heatmap("matmul", _committed("h200-suite.json"))),
    "not_available": (False, lambda: viz._not_available("occupancy_bars", "the CUDA compiler (NVVM) is not "
                                                        "installed here: pip install numba-cuda[cu13] " * 2)),
}


@pytest.mark.slow  # every figure drawn and measured (30 s): presentation, not a kernel or a command
@pytest.mark.parametrize("name", FIGURES)
def test_figure_text_is_legible_where_it_is_shown(name, fake_compiles):
    """Every text of every figure is at least 10 px tall as a notebook or the course site shows it (a figure wider
    than 940 px is scaled down) and none sits on another."""
    tracer, make = FIGURES[name]
    if tracer and gpukernels.MODE != "sim":
        pytest.skip("the tracer runs on the simulator")
    fig = make()
    assert not viz.unavailable(fig) or name == "not_available"
    assert legibility_problems(fig) == []


def test_the_legibility_check_sees_small_and_overlapping_text():
    from gpukernels.viz._common import _figure

    fig = _figure(6, 3)
    ax = fig.add_subplot()
    ax.text(0.1, 0.5, "seven points", fontsize=7)
    ax.text(0.12, 0.5, "on top", fontsize=12)
    ax.set_title("a title of ten points")
    problems = legibility_problems(fig)
    from gpukernels import notebook

    assert notebook.DPI == viz._common.SHOWN_DPI[0]  # the check measures the notebooks' PNGs as they are made
    assert any("'seven points' is 7.8 px tall" in p for p in problems)
    assert any("overlaps" in p and "on top" in p for p in problems)
    assert not any("title" in p for p in problems)
