"""Performance figures: measured (``benchmarks/results/*.json``, written by ``gpukernels bench`` on a GPU) or,
without a measurement, a roofline MODEL from the traced traffic that says so in its title."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .. import resources as _res
from ._common import GREYS, MARKERS, ROOT, _figure, _lessons, _shades, _versions, text_pt
from .traced import traffic

RESULTS_DIR = ROOT / "benchmarks" / "results"

# ----------------------------------------------------------------------------------------------------------
# 6. Performance: measured (benchmarks/results/*.json) or a labelled model
# ----------------------------------------------------------------------------------------------------------


#: The reports the README's tables are generated from (`gpukernels.readme`: the course's reference GPU). The figures
#: use the same ones, so that the gallery and the README agree; without them, the newest report by the date it
#: records -- never by file times, which a clone sets to the moment of checkout.
REFERENCE = {False: "h200.json", True: "h200-suite.json"}


def _timing_report(p: Path, suite: bool) -> dict | None:
    """The report in ``p`` if it is a timing report of kernels of the kind asked for: not `bench --overhead`'s
    host-microsecond rows (top-level "kind"), nor a sweep's list of candidates."""
    try:
        report = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if (isinstance(report, dict) and isinstance(report.get("results"), list) and report["results"]
            and report.get("kind", "bench") == "bench"
            and all(isinstance(r, dict) and "median_ms" in r for r in report["results"])
            and bool(report.get("suite")) == suite):
        report.setdefault("_path", str(p))
        return report
    return None


def load_bench(path: str | Path | None = None, suite: bool = False) -> dict | None:
    """The benchmark report at ``path``, else ``benchmarks/results/`` REFERENCE's (``suite``: of ``gpukernels bench
    --suite``), else the report there with the latest ``environment.date``, else None."""
    if path is not None:
        return json.loads(Path(path).read_text())
    if not RESULTS_DIR.is_dir():
        return None
    reference = _timing_report(RESULTS_DIR / REFERENCE[suite], suite)
    if reference is not None:
        return reference
    reports = [r for r in (_timing_report(p, suite) for p in sorted(RESULTS_DIR.glob("*.json"))) if r is not None]
    def date(report: dict) -> str:
        env = report.get("environment")
        return str(env.get("date", "")) if isinstance(env, dict) else ""

    return max(reports, key=date, default=None)


def bench_results(report: dict, lesson: str, shape=None) -> tuple[tuple, list[dict]]:
    """The results of one lesson at one shape (default: the shape of the lesson's first bench entry that
    was measured), kernels in VERSIONS order, then peers."""
    rs = [r for r in report["results"] if r["lesson"] == lesson]
    if not rs:
        return (), []
    shapes = [tuple(r["shape"]) for r in rs]
    if shape is None:
        wanted = [tuple(s) for s in _lessons()[lesson].SHAPES["bench"]]
        shape = next((s for s in wanted if s in shapes), shapes[0])
    shape = tuple(shape)
    rs = [r for r in rs if tuple(r["shape"]) == shape]
    # one group's rows: a shape measured under the causal mask too (attention) is shown without it where both ran,
    # never both in one chart (`gpukernels.bench._group`: the rows compared with one peer)
    from ..bench import _group

    group = min((_group(r) for r in rs), key=lambda g: g[2], default=None)
    rs = [r for r in rs if _group(r) == group]
    order = {name: i for i, name in enumerate(_versions(lesson))}
    rs.sort(key=lambda r: (r["kind"] != "kernel", order.get(r["name"], 99)))
    return shape, rs


def suite_heatmap(lesson: str = "matmul", report: dict | None = None) -> Figure:
    """Shapes x steps of a ``gpukernels bench --suite`` report, each cell the library's time over the step's.

    Teaches: no one kernel is fastest everywhere. Rows are the suite's shapes grouped by regime (compute-bound
    squares, matrix-vector products, few tiles, ...), columns the steps the run timed in ``VERSIONS`` order; a cell
    is green where the step reaches the library and red where it falls behind, so the dispatcher's job -- picking
    the greenest cell of each row -- is visible at a glance. Unmeasured cells stay grey.
    """
    from matplotlib.colors import LinearSegmentedColormap, LogNorm

    from .. import bench

    report = load_bench(suite=True) if report is None else report
    rows = [r for r in bench.rows(report or {"results": []}) if r["lesson"] == lesson and r["kind"] == "kernel"]
    steps_run = {r["version"] for r in rows}
    fig = _figure(min(11.2, 5.0 + 0.34 * len(steps_run)), 2.2 + 0.32 * max(1, len({r["shape"] for r in rows})))
    fs = text_pt(fig)
    ax = fig.add_subplot()
    if not rows:
        ax.text(0.5, 0.5, f"no suite measurement of {lesson} (run gpukernels bench --suite --json FILE)",
                ha="center", va="center", fontsize=fs)
        ax.set_axis_off()
        return fig
    regime = {"x".join(map(str, r["shape"])): r.get("extra", {}).get("regime", "") for r in report["results"]
              if r["lesson"] == lesson}
    order = {name: i for i, name in enumerate(_versions(lesson))}
    steps = sorted({r["version"] for r in rows}, key=lambda n: order.get(n, 99))
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    grid = np.full((len(shapes), len(steps)), np.nan)
    for r in rows:
        if r["of_peer"]:
            grid[shapes.index(r["shape"]), steps.index(r["version"])] = r["of_peer"]
    cmap = LinearSegmentedColormap.from_list("peer", ["#b2182b", "#f7f7f7", "#1a9850"]).with_extremes(bad="#dddddd")
    im = ax.imshow(grid, cmap=cmap, norm=LogNorm(vmin=0.1, vmax=10), aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if v == v:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=fs)
    ax.set_xticks(range(len(steps)), steps, rotation=90, fontsize=fs)
    ax.set_yticks(range(len(shapes)), [f"{regime.get(s, '')}  {s}" for s in shapes], fontsize=fs)
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("library time / step time", fontsize=fs)
    cb.ax.tick_params(labelsize=fs)
    env = report.get("environment", {})
    winners = {steps[int(np.nanargmax(r))] for r in grid if np.isfinite(r).any()}
    if len(steps) == 1:  # a suite run of the dispatcher alone: where it reaches the library
        at_par = int(np.sum(grid[:, 0] >= 1.0))
        notice = f"Notice: {steps[0]} is at least as fast as the library at {at_par} of {len(shapes)} shapes"
    else:
        notice = (f"Notice: {len(winners)} different steps are fastest, depending on the shape" if len(winners) > 1
                  else f"Notice: {next(iter(winners))} is fastest at every shape" if winners else "")
    title_pt = text_pt(fig, 10)
    # what fits over the axes (the title starts at their left edge; past their right edge is the colour bar's
    # top label)
    fig.canvas.draw()
    room = ax.get_position().width * fig.get_figwidth() * 72
    chars = max(30, int(room / (0.62 * title_pt)))
    # a merged report: the lesson's rows may come from a later run than the report's environment (their notes say)
    runs = {r.get("note", "")[len("run of "):][:10] for r in report["results"] if r["lesson"] == lesson
            and r.get("note", "").startswith("run of ")}
    date = runs.pop() if len(runs) == 1 else env.get("date", "")[:10]
    title = (f"{lesson} suite on {env.get('device', 'GPU')} ({date}"
             f"{'' if report.get('complete', True) else ', PARTIAL run'}): fraction of the library's speed. {notice}")
    ax.set_title("\n".join(textwrap.wrap(title, chars)), fontsize=title_pt, loc="left")
    fig.gpukernels_data = {"shapes": shapes, "steps": steps, "of_peer": grid}
    return fig


def _memory_bound(lesson: str) -> bool:
    mod = _lessons()[lesson]
    shape = mod.SHAPES["demo_gpu"]
    return mod.flops(shape) / mod.min_bytes(shape) < _res.ARCHS["sm_90"].ridge


def performance_bars(lesson: str, report: dict | None = None, shape=None, arch: str = "sm_90") -> Figure:
    """Naive vs optimized vs the library peer, measured on a GPU.

    Teaches: how far each idea moves the needle, and how far the best version still is from cuBLAS / PyTorch /
    cuDNN. Compute-bound lessons are shown in TFLOP/s, memory-bound ones (softmax) in GB/s of the minimum
    traffic; each bar is labelled with its median time and its speed-up over naive. Without a benchmark
    report the bars are the roofline *model* (``roofline_model``) and the title says MODEL.
    """
    report = load_bench() if report is None else report
    memory = _memory_bound(lesson)
    # a bar per version of VERSIONS (measured or not) and per peer
    n_bars = (len(_versions(lesson)) + sum(r["kind"] != "kernel" for r in bench_results(report, lesson, shape)[1])
              if report is not None else 0)
    fig = _figure(8.5, max(3.9, 1.6 + 0.3 * (n_bars or len(_versions(lesson)))))
    ax = fig.add_subplot()
    ax.tick_params(labelsize=text_pt(fig))
    if report is None or not bench_results(report, lesson, shape)[1]:
        return _performance_model(fig, ax, lesson, arch)
    shape, rs = bench_results(report, lesson, shape)
    # every version of VERSIONS has a bar: one the run did not measure (added since) is named, with no value
    measured = {r["name"] for r in rs if r["kind"] == "kernel"}
    missing = [{"name": n, "kind": "missing"} for n in _versions(lesson) if n not in measured]
    if missing:
        order = {name: i for i, name in enumerate(_versions(lesson))}
        rs = sorted([r for r in rs if r["kind"] == "kernel"] + missing, key=lambda r: order[r["name"]]) \
            + [r for r in rs if r["kind"] != "kernel"]
    naive = next((r for r in rs if r["kind"] == "kernel" and r["ok"]), None)
    half = set(getattr(_lessons()[lesson], "FLOAT16_VERSIONS", ()))  # attention's tensor-core steps take float16
    names, values, labels = [], [], []
    for r in rs:
        if r["kind"] == "missing":
            names.append(f"{r['name']} (not in this run)")
            values.append(0.0)
            labels.append("not measured in this run (added since)")
            continue
        ms = r["median_ms"]
        ok = r.get("ok", True) and ms == ms
        v = (r["bytes"] / (ms * 1e-3) / 1e9) if memory else (r["flops"] / (ms * 1e-3) / 1e12)
        names.append(r["name"] + (" (float16)" if r["kind"] == "kernel" and r["name"] in half else "")
                     + (" (peer)" if r["kind"] == "peer" else "") + ("" if ok else " WRONG"))
        values.append(v if ok else 0.0)
        sp = f", {naive['median_ms'] / ms:.1f}x naive" if naive and ok else ""
        labels.append(f"{ms:.3g} ms{sp}" if ok else "wrong result: not timed")
    ys = np.arange(len(names))[::-1]
    shades = _shades(len(rs))
    for i, (y, v, r) in enumerate(zip(ys, values, rs)):
        peer = r["kind"] == "peer"
        ax.barh(y, v, color="white" if peer else shades[i], hatch="///" if peer else "",
                edgecolor="black", height=0.65)
        ax.text(v, y, "  " + labels[i], va="center", fontsize=text_pt(fig))
    ax.set_yticks(ys, names, fontsize=text_pt(fig, 9))
    unit = ("GB/s (minimum DRAM bytes / median time)" if memory else
            "TFLOP/s (median time)" if half else "TFLOP/s (FP32, median time)")
    ax.set_xlabel(unit, fontsize=text_pt(fig, 10))
    ax.set_xlim(0, max(values) * 1.45 if values and max(values) > 0 else 1)
    env = report.get("environment", {})
    # the best against the peer in the peer's precision: a float16 step is not compared with a float32 library
    best = max(((v, n) for v, n, r in zip(values, names, rs) if r["kind"] == "kernel" and r["name"] not in half),
               default=None) or max((v, n) for v, n, r in zip(values, names, rs) if r["kind"] == "kernel")
    peer = next(((v, n) for v, n, r in zip(values, names, rs) if r["kind"] == "peer"), None)
    vs = f" = {best[0] / peer[0]:.0%} of the peer" if peer and peer[0] else ""
    from ..bench import _group, _shape_label

    ax.set_title(f"{lesson} {_shape_label(_group(rs[0]))} on {env.get('device', 'GPU')}, measured:\n"
                 f"the best {'float32 ' if half & set(_versions(lesson)) else ''}version, {best[1]}, runs at "
                 f"{best[0]:.3g} {'GB/s' if memory else 'TFLOP/s'}{vs}",
                 fontsize=10, loc="left")
    fig.gpukernels_data = {"measured": True, "shape": shape, "names": names, "values": values,
                           "unit": "GB/s" if memory else "TFLOP/s"}
    return fig


def _performance_model(fig, ax, lesson, arch):
    a = _res.get_arch(arch)
    model = roofline_model(lesson, arch=a.name)
    names = [m["version"] for m in model]
    values = [m["attainable_tflops"] for m in model]
    ys = np.arange(len(names))[::-1]
    for i, (y, m) in enumerate(zip(ys, model)):
        ax.barh(y, m["attainable_tflops"], color=GREYS[min(i, 3)], edgecolor="black", height=0.65, hatch="..")
        ax.text(m["attainable_tflops"], y, f"  AI {m['intensity']:.2f} FLOP/B -> {m['bound']}-bound",
                va="center", fontsize=text_pt(fig))
    ax.set_yticks(ys, names, fontsize=text_pt(fig, 9))
    ax.set_xlabel(f"MODEL: attainable TFLOP/s = min({a.peak_fp32_tflops} TFLOP/s, intensity x "
                  f"{a.peak_bw_gbs / 1000:g} TB/s), {a.gpu} spec sheet")
    ax.set_xlim(0, max(values) * 1.6 if values else 1)
    top = max(model, key=lambda m: m["attainable_tflops"])
    ax.set_title(f"MODEL, not a measurement -- {lesson}: the roofline's bound for each version's global traffic,\n"
                 f"traced at the lesson's trace shape {'x'.join(map(str, model[0]['shape']))} (run `gpukernels bench` "
                 f"on a GPU to measure)\nNotice: the step with the fewest bytes per FLOP, {top['version']}, allows "
                 "the most", fontsize=9.5, loc="left")
    fig.gpukernels_data = {"measured": False, "names": names, "values": values, "unit": "TFLOP/s"}
    return fig


def roofline_model(lesson: str, shape=None, arch: str = "sm_90") -> list[dict]:
    """Per version: FLOPs, global bytes the tracer counted (loads + stores, 4 bytes each, no caches) at the
    lesson's trace shape, intensity = FLOPs / bytes, and the roofline's attainable TFLOP/s. A model."""
    a = _res.get_arch(arch)
    mod = _lessons()[lesson]
    shape = tuple(shape or mod.SHAPES["trace"])
    out = []
    for name in mod.VERSIONS:
        t = traffic(lesson, name, shape)
        nbytes = t["bytes"]  # loads + stores, in bytes of their arrays
        ai = mod.flops(shape) / max(nbytes, 1)
        attainable = min(a.peak_fp32_tflops, ai * a.peak_bw_gbs / 1000)
        out.append({"version": name, "shape": shape, "flops": mod.flops(shape), "bytes": nbytes,
                    "intensity": ai, "attainable_tflops": attainable,
                    "bound": "compute" if ai >= a.ridge else "memory"})
    return out


#: Lessons with steps on the tensor cores: the roofline draws their FP16 ceiling too.
TENSOR_CORE_LESSONS = {"tensor_core", "attention"}


def roofline(report: dict | None = None, arch: str = "sm_90", lessons=None) -> Figure:
    """Every version of every lesson as a point under the roofline: FP32 peak and DRAM bandwidth ceilings.

    Teaches: a kernel left of the ridge point (~14 FLOP/byte on an H200) cannot beat bandwidth x intensity
    however well it computes -- softmax lives there; matmul and CBR can reach the compute roof only if data is
    reused. Measured (from a benchmark report): x is the *minimum* intensity (FLOPs / minimum DRAM bytes), y
    the measured TFLOP/s, and the ceilings are those measured in the same run (solid) and the spec sheet
    (dashed). Without a report: a MODEL, x from the tracer's counted global bytes and y on the roof.
    """
    a = _res.get_arch(arch)
    report = load_bench() if report is None else report
    lessons = list(lessons or _lessons())
    measured = report is not None and any(bench_results(report, l)[1] for l in lessons)
    points = []  # (lesson, name, intensity, TFLOP/s, peer, index in the lesson, label on the plot)
    for lesson in lessons:
        steps = _versions(lesson)
        rows = ([(r["name"], r["flops"] / r["bytes"], r["flops"] / (r["median_ms"] * 1e-3) / 1e12, r["kind"] == "peer")
                 for r in bench_results(report, lesson)[1] if r.get("ok", True) and r["median_ms"] == r["median_ms"]]
                if measured else [(m["version"], m["intensity"], m["attainable_tflops"], False)
                                  for m in roofline_model(lesson, arch=a.name)])
        peers = 0
        for vi, (name, x, y, peer) in enumerate(rows):
            peers += peer
            label = ("P" + (str(peers) if sum(p for *_, p in rows) > 1 else "")) if peer else \
                str(steps.index(name) + 1 if name in steps else vi + 1)
            points.append((lesson, name, x, y, peer, vi, label))
    # The plot above, a key below: each point carries its step number (the lesson's VERSIONS order, as in the
    # README; P: the library), placed where it touches no other label, marker or the legend -- a lesson's twenty
    # versions at one intensity cannot all be named beside their points
    key = _roofline_key(lessons, points)
    fig = _figure(9.5, 7.0 + 0.2 * len(key))
    fs = text_pt(fig)
    ax, kax = fig.subplots(2, 1, height_ratios=[6.8, 0.2 * len(key) + 0.2])
    peak, bw = a.peak_fp32_tflops, a.peak_bw_gbs
    xs = np.logspace(-2, 3.5, 200)
    ax.plot(xs, np.minimum(peak, xs * bw / 1000), "--", color="0.4", lw=1.2,
            label=f"spec sheet {a.gpu}: {peak} TFLOP/s, {bw / 1000:g} TB/s")
    tensor = a.peak_fp16_tensor_tflops if set(lessons) & TENSOR_CORE_LESSONS else 0.0
    if tensor:  # the roof the tensor-core steps run under
        tc = a.peak_fp16_tensor_tflops
        ax.plot(xs, np.minimum(tc, xs * bw / 1000), ":", color="0.4", lw=1.2,
                label=f"spec sheet {a.gpu}, FP16 tensor cores: {tc:g} TFLOP/s")
    ceilings = (report or {}).get("ceilings", {}) if measured else {}
    if ceilings.get("sgemm_TFLOPs") and ceilings.get("copy_GBps"):
        mp, mb = ceilings["sgemm_TFLOPs"], ceilings["copy_GBps"]
        ax.plot(xs, np.minimum(mp, xs * mb / 1000), "-", color="black", lw=1.6,
                label=f"measured: peer SGEMM {mp:.1f} TFLOP/s, copy {mb / 1000:.2f} TB/s")
    for li, lesson in enumerate(lessons):  # one legend entry per lesson's marker
        ax.plot([], [], MARKERS[li % len(MARKERS)], color="0.6", markeredgecolor="black", markersize=8, label=lesson)
    for lesson, name, x, y, peer, vi, _ in points:
        li = lessons.index(lesson)
        n_versions = len(_versions(lesson))
        ax.plot(x, y, MARKERS[li % len(MARKERS)], markersize=8 if not peer else 10, zorder=3,
                markerfacecolor="white" if peer else _shades(n_versions)[min(vi, n_versions - 1)],
                markeredgecolor="black")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xs[0], xs[-1])
    ymin = min([p[3] for p in points] + [peak]) / 3
    ax.set_ylim(max(ymin, 1e-4), max([p[3] for p in points] + [peak]) * 3)  # tensor cores pass the FP32 roof
    if tensor and ax.get_ylim()[1] < tensor * 1.5:  # the tensor-core roof in view
        ax.set_ylim(ax.get_ylim()[0], tensor * 2)
    ax.grid(True, which="major", color="0.9")
    ax.tick_params(labelsize=fs)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)  " +
                  ("[FLOPs / minimum DRAM bytes]" if measured else "[MODEL: FLOPs / traced global bytes, no caches]"),
                  fontsize=fs)
    ax.set_ylabel("TFLOP/s" + ("" if measured else " (MODEL: on the roof)"), fontsize=fs)
    ax.axvline(a.ridge, color="0.6", lw=0.8, ls=":")
    ax.text(a.ridge, peak * 1.4, f" ridge {a.ridge:.0f} FLOP/B", fontsize=fs, color="0.3")
    ax.legend(fontsize=fs, loc="upper left")  # nothing can lie above the bandwidth roof: that corner is empty
    device = (report or {}).get("environment", {}).get("device", "GPU")
    title = (f"Roofline, measured on {device}: left of the ridge, bandwidth caps the speed; right of it, FP32 peak"
             if measured else "Roofline MODEL, not a measurement: data reuse moves a version right, towards the "
                              "compute roof")
    import textwrap

    ax.set_title(textwrap.fill(title, int(fig.get_figwidth() * 72 / (0.6 * text_pt(fig, 10)))),
                 fontsize=text_pt(fig, 10), loc="left")
    kax.set_axis_off()
    kax.text(0, 1, "\n".join(key), va="top", ha="left", fontsize=fs, transform=kax.transAxes)
    # a lesson's labels go left of its column when another lesson's column is close on its right
    column = {l: min(x for ll, _, x, *_ in points if ll == l) for l in {p[0] for p in points}}
    left = {l: any(0 < math.log10(column[o] / column[l]) < 1.3 for o in column) for l in column}
    _place_labels(fig, ax, [(x, y) for _, _, x, y, *_ in points], [p[6] for p in points], fs,
                  [math.pi if left[p[0]] else 0.0 for p in points])
    fig.gpukernels_data = {"measured": measured, "points": [
        {"lesson": l, "version": n, "intensity": x, "tflops": y, "peer": p, "label": lab}
        for l, n, x, y, p, _, lab in points]}
    return fig


def _roofline_key(lessons: list[str], points: list[tuple]) -> list[str]:
    """The key under the roofline: per lesson, each label and the version (or library) it stands for, wrapped."""
    import textwrap

    lines = []
    for lesson in lessons:
        mine = [(lab, name) for l, name, *_, lab in points if l == lesson]
        if mine:
            lines += textwrap.wrap(f"{lesson}: " + ",  ".join(f"{lab} {name}" for lab, name in mine), 118,
                                   subsequent_indent="    ")
    return lines


def _place_labels(fig: Figure, ax, xy: list[tuple[float, float]], labels: list[str], fontsize: float,
                  first_angle: list[float] | None = None) -> list:
    """Each label near its point where it overlaps no other label, no marker, the legend or the texts already in
    the axes, and stays inside them: the first free spot on rings of growing radius around the point (a leader
    line when it is not beside it). Works in points (1/72 inch) after the layout, so any dpi draws the same."""
    fig.draw_without_rendering()  # the constrained layout: where the axes and their points end up
    renderer = fig._get_renderer()
    scale = 72 / fig.dpi
    box = ax.get_window_extent(renderer)
    frame = (box.x0 * scale, box.y0 * scale, box.x1 * scale, box.y1 * scale)
    pts = [tuple(p * scale for p in ax.transData.transform(p)) for p in xy]
    taken = [(x - 5, y - 5, x + 5, y + 5) for x, y in pts]  # the markers
    for artist in [ax.get_legend(), *ax.texts]:
        if artist is not None:
            b = artist.get_window_extent(renderer)
            taken.append((b.x0 * scale - 2, b.y0 * scale - 2, b.x1 * scale + 2, b.y1 * scale + 2))

    def free(r):
        return (r[0] >= frame[0] and r[1] >= frame[1] and r[2] <= frame[2] and r[3] <= frame[3]
                and not any(r[0] < t[2] and t[0] < r[2] and r[1] < t[3] and t[1] < r[3] for t in taken))

    out = []
    for i, ((x, y), text) in enumerate(zip(pts, labels)):
        start = first_angle[i] if first_angle else 0.0  # the direction tried first (0: right, pi: left)
        w, h = 0.64 * fontsize * len(text) + 5, 1.4 * fontsize  # with a margin: no two labels touch
        spot = None
        for radius in (9, 13, 18, 24, 31, 39, 48, 58, 70, 84, 100, 120, 145, 170):
            for k in range(24):  # alternating either side of the preferred direction
                t = start + math.pi * ((k + 1) // 2) / 12 * (1 if k % 2 else -1)
                cx, cy = x + radius * math.cos(t) * (1 + w / 30), y + radius * math.sin(t)
                r = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
                if free(r):
                    spot = (cx, cy, radius, r)
                    break
            if spot:
                break
        if spot is None:  # nowhere free: beside the point, as before
            spot = (x + 9 + w / 2, y, 9, (x + 9, y - h / 2, x + 9 + w, y + h / 2))
        cx, cy, radius, r = spot
        taken.append(r)
        out.append(ax.annotate(text, xy[len(out)], xytext=(cx - x, cy - y), textcoords="offset points",
                               ha="center", va="center", fontsize=fontsize, zorder=4,
                               arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.45", "shrinkA": 0,
                                           "shrinkB": 4} if radius > 13 else None, in_layout=False))
    return out
