"""Figures of thread, block and shared-memory behaviour, every one measured from the real kernels.

Each plot function returns a ``matplotlib.figure.Figure`` (made without pyplot, so it works the same in a
notebook, a script or ``make plots``) and keeps the numbers it drew in ``fig.gpukernels_data`` (a dict), which is
what the tests check. Where the numbers come from:

* the **compiler** (``gpukernels.resources``): registers, shared memory and occupancy, for the launch
  configuration the launcher really makes (``Version.launches``);
* the **tracer** (``gpukernels.trace``): every global and shared memory access of a simulated launch, with its
  block, thread, warp, lane and barrier interval -- grid maps, access maps, reuse, tile phases, sectors, banks;
* the **benchmark** (``benchmarks/results/*.json``, written by ``gpukernels bench`` on a GPU): measured times.
  Without one, the performance figures are a *model* and say so in their title.

The figures, each with what it teaches (the function's docstring says more):

=========================  ================================================================================
``grid_map``               which block and which thread computes which output element
``access_map``             which input elements one thread / warp / block reads, naive vs optimized
``reuse_heatmap``          global loads per input element: "naive reads A N times, tiled N/T times"
``tile_phases``            what the shared tile holds in each barrier interval (tiled matmul, fused CBR)
``warp_sectors``           lanes -> 32-byte sectors of one warp's global access (coalesced vs strided)
``warp_banks``             lanes -> shared-memory banks of one warp's shared access (conflicts)
``occupancy_bars``         resident warps per SM per version, and which budget binds
``occupancy_vs_block_size`` occupancy as the block size varies, same registers and shared memory
``performance_bars``       naive vs optimized vs the library peer (measured, or a labelled model)
``roofline``               each version against the FP32 and memory-bandwidth ceilings
=========================  ================================================================================

``gpukernels plots`` (``make plots``) writes all of them to ``docs/figures/`` and ``docs/gallery.md``.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from matplotlib.figure import Figure

from . import resources as _res

# Greyscale-safe: a perceptually uniform colormap for quantities, hatching and markers for categories.
CMAP = "viridis"
CMAP_DIVERGE = "cividis"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
HATCHES = ["", "///", "...", "xxx", "\\\\\\", "++", "ooo", "---"]
GREYS = ["0.15", "0.45", "0.7", "0.9", "0.3", "0.6", "0.8", "0.05"]
LIMIT_MARKERS = {"threads": "o", "blocks": "D", "registers": "s", "shared memory": "^", "barriers": "v"}

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    fig.gpukernels_data = {}
    return fig


def _lessons():
    import gpukernels

    return gpukernels.LESSONS


def _versions(lesson: str) -> list[str]:
    return list(_lessons()[lesson].VERSIONS)


def _naive_and_best(lesson: str) -> tuple[str, str]:
    names = _versions(lesson)
    return names[0], names[-1]


# ----------------------------------------------------------------------------------------------------------
# 5. Occupancy (from the compiler: gpukernels.resources)
# ----------------------------------------------------------------------------------------------------------


def _row_label(row) -> str:
    """The version's name, plus the kernel's when the version makes several launches."""
    return row.version if _single_launch(row) else f"{row.version}: {row.kernel}"


_LAUNCH_COUNTS: dict[tuple[str, str], int] = {}


def _single_launch(row) -> bool:
    return _LAUNCH_COUNTS.get((row.lesson, row.version), 1) == 1


def _resource_rows(lesson: str | None, arch: str, shape_key: str = "demo_gpu"):
    rows = _res.report([lesson] if lesson else None, arch, shape_key, what="the occupancy figure")
    for r in rows:
        key = (r.lesson, r.version)
        _LAUNCH_COUNTS[key] = max(_LAUNCH_COUNTS.get(key, 0), r.index + 1)
    return rows


def _not_available(title: str, why: str) -> Figure:
    """A figure that says, in one line, why it cannot be drawn here (a notebook's Run All goes on past it);
    ``unavailable(fig)`` returns the line, so that ``gpukernels plots`` and the demo skip it instead of saving it."""
    import textwrap

    fig = _figure(9, 1.6)
    fig.text(0.01, 0.5, textwrap.fill(f"{title}: {why}", 130), fontsize=8.5, va="center", family="monospace")
    fig.gpukernels_data = {"unavailable": why}
    return fig


def unavailable(fig: Figure) -> str | None:
    """Why ``fig`` is only a note (the compiler is not installed here), or None for a real figure."""
    return (getattr(fig, "gpukernels_data", None) or {}).get("unavailable")


def _pct(x: float) -> str:
    """12.5 % stays 12.5 %, 75 % stays 75 %."""
    v = 100 * x
    return f"{v:.0f}%" if abs(v - round(v)) < 0.05 else f"{v:.1f}%"


def _shades(n: int) -> list:
    """n colours from viridis, dark to light: distinct in colour and in grey."""
    import matplotlib

    return [matplotlib.colormaps[CMAP](x) for x in np.linspace(0.0, 0.8, max(n, 1))]


def occupancy_bars(lesson: str | None = None, arch: str = "sm_90", shape_key: str = "demo_gpu") -> Figure:
    """Resident warps per SM for every kernel of every version, and which budget stops the next block.

    Teaches: occupancy is the *minimum* over four budgets (threads, blocks, registers, shared memory). The bar
    is what fits; each marker is what one budget alone would allow (budgets allowing more than the SM's warp
    slots are not drawn), and the filled marker at the bar's end is the one that binds. Register blocking
    (regblock_2d) buys arithmetic intensity with registers, and pays in resident warps.
    """
    a = _res.get_arch(arch)
    try:
        rows = _resource_rows(lesson, a.name, shape_key)
    except _res.ToolchainMissing as err:
        return _not_available("occupancy_bars", str(err))
    labels = [(f"{r.lesson}." if lesson is None else "") + _row_label(r) for r in rows]
    n = len(rows)
    fig = _figure(10, 0.42 * n + 1.6)
    ax = fig.add_subplot()
    cap = a.max_warps_per_sm
    ys = np.arange(n)[::-1]
    data = []
    for y, r in zip(ys, rows):
        occ = r.occupancy
        ax.barh(y, occ.warps_per_sm, color="0.8", edgecolor="0.2", height=0.62, zorder=2)
        for name, blocks in occ.limits.items():
            w = blocks * occ.warps_per_block
            if w > cap and name not in occ.binding:
                continue
            ax.plot(min(w, cap), y, LIMIT_MARKERS[name], color="black" if name in occ.binding else "white",
                    markeredgecolor="black", markersize=7.5, zorder=3, clip_on=False)
        ax.text(cap * 1.03, y, f"{_pct(occ.occupancy):>5}  {', '.join(occ.binding)}: {r.resources.registers} regs, "
                f"{r.resources.shared_bytes + r.dynamic_shared} B smem, {r.threads_per_block} threads",
                va="center", fontsize=8, family="monospace")
        data.append({"lesson": r.lesson, "version": r.version, "kernel": r.kernel,
                     "warps_per_sm": occ.warps_per_sm, "blocks_per_sm": occ.blocks_per_sm,
                     "limits_warps": {k: v * occ.warps_per_block for k, v in occ.limits.items()},
                     "binding": list(occ.binding), "occupancy": occ.occupancy})
    ax.set_yticks(ys, labels, fontsize=9)
    ax.set_xlim(0, cap)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xticks(list(range(0, cap + 1, 8)))
    ax.set_xlabel(f"resident warps per SM (at most {cap} on {a.name})", fontsize=9)
    handles = [ax.plot([], [], m, color="white", markeredgecolor="black", markersize=7.5, ls="")[0]
               for m in LIMIT_MARKERS.values()]
    handles.append(ax.plot([], [], "s", color="black", markersize=7.5, ls="")[0])
    fig.legend(handles, [f"{k} allow" for k in LIMIT_MARKERS] + ["filled: binds"], fontsize=8, loc="outside lower center",
               ncol=6, frameon=False)
    worst = min(rows, key=lambda r: r.occupancy.occupancy)
    where = f"{worst.lesson}.{worst.version}" if lesson is None else worst.version
    fig.suptitle(f"{'All lessons' if lesson is None else lesson} on {a.name} ({a.gpu}): {where} keeps only "
                 f"{worst.occupancy.warps_per_sm} of {cap} warps resident -- limited by "
                 f"{' and '.join(worst.occupancy.binding)}", fontsize=10, x=0.01, ha="left")
    fig.gpukernels_data = {"arch": a.name, "rows": data}
    return fig


def occupancy_vs_block_size(lesson: str | None = None, arch: str = "sm_90", shape_key: str = "demo_gpu") -> Figure:
    """Occupancy of each kernel if it were launched with other block sizes (same registers per thread and
    shared memory per block), with the block size the launcher really uses ringed.

    Teaches: occupancy is a staircase, not a smooth curve -- whole blocks fit or don't, so a block size that
    doesn't divide the SM's warp slots (or the register file) leaves slots empty; few registers let most block
    sizes reach 100 %, many registers cap it whatever the block size, and past some size the block does not
    fit at all.
    """
    a = _res.get_arch(arch)
    try:
        rows = _resource_rows(lesson, a.name, shape_key)
    except _res.ToolchainMissing as err:
        return _not_available("occupancy_vs_block_size", str(err))
    sizes = list(range(32, 1025, 32))
    # Kernels with the same registers, shared memory and barriers have the same curve: draw it once.
    groups: dict[tuple, list] = {}
    for r in rows:
        key = (r.resources.registers, r.resources.shared_bytes + r.dynamic_shared, r.resources.barriers)
        groups.setdefault(key, []).append(r)
    fig = _figure(9, 4.8)
    ax = fig.add_subplot()
    data = []
    colours = _shades(len(groups))
    for i, ((regs, smem, bars), rs) in enumerate(groups.items()):
        sweep = _res.occupancy_sweep(a, regs, smem, bars, sizes)
        ys = [100 * o.occupancy for o in sweep]
        names = ", ".join((f"{r.lesson}." if lesson is None else "") + _row_label(r) for r in rs)
        ax.plot(sizes, ys, marker=MARKERS[i % len(MARKERS)], markersize=4.5, lw=1.4, ls=["-", "--", ":", "-."][i % 4],
                color=colours[i], label=f"{names} ({regs} regs, {smem} B smem)")
        for r in rs:
            ax.plot([r.threads_per_block], [100 * r.occupancy.occupancy], "o", markersize=14,
                    markerfacecolor="none", markeredgecolor="black", markeredgewidth=1.6, zorder=4)
            data.append({"version": r.version, "kernel": r.kernel, "registers": regs, "shared_bytes": smem,
                         "block_sizes": sizes, "occupancy": ys, "launched": r.threads_per_block})
        zero = next((s for s, o in zip(sizes, sweep) if o.blocks_per_sm == 0), None)
        if zero is not None:
            ax.annotate(f"{regs} regs x {zero} threads > {a.regs_per_block // 1024}K registers:\nthe block does not fit",
                        (zero, 0), xytext=(zero + 20, 12), fontsize=7.5, arrowprops={"arrowstyle": "->", "lw": 0.8})
    ax.set_xlabel("threads per block (rings: the launcher's choice)")
    ax.set_ylabel("occupancy (% of the SM's warp slots)")
    ax.set_xticks([32, 128, 256, 384, 512, 640, 768, 896, 1024])
    ax.set_ylim(-3, 105)
    ax.grid(True, color="0.9")
    fig.legend(fontsize=7.5, loc="outside lower center", ncol=2, frameon=False)
    ax.set_title(f"{lesson or 'All lessons'} on {a.name}: occupancy vs block size is a staircase; many registers "
                 f"cap it at any size", fontsize=10, loc="left")
    fig.gpukernels_data = {"arch": a.name, "rows": data}
    return fig


# ----------------------------------------------------------------------------------------------------------
# 6. Performance: measured (benchmarks/results/*.json) or a labelled model
# ----------------------------------------------------------------------------------------------------------


def load_bench(path: str | Path | None = None, suite: bool = False) -> dict | None:
    """The benchmark report at ``path``, else the newest ``benchmarks/results/*.json`` of the benchmark's shapes
    (``suite``: of ``gpukernels bench --suite``), else None."""
    if path is not None:
        return json.loads(Path(path).read_text())
    files = sorted(RESULTS_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime) if RESULTS_DIR.is_dir() else []
    for p in reversed(files):
        try:
            report = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("results") and bool(report.get("suite")) == suite:
            report.setdefault("_path", str(p))
            return report
    return None


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

    from . import bench

    report = load_bench(suite=True) if report is None else report
    rows = [r for r in bench.rows(report or {"results": []}) if r["lesson"] == lesson and r["kind"] == "kernel"]
    fig = _figure(8.5, 0.9 + 0.32 * max(1, len({r["shape"] for r in rows})))
    ax = fig.add_subplot()
    if not rows:
        ax.text(0.5, 0.5, f"no suite measurement of {lesson} (run gpukernels bench --suite --json FILE)",
                ha="center", va="center")
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
    cmap = LinearSegmentedColormap.from_list("peer", ["#b2182b", "#f7f7f7", "#1a9850"])
    cmap.set_bad("#dddddd")
    im = ax.imshow(grid, cmap=cmap, norm=LogNorm(vmin=0.1, vmax=10), aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if v == v:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(steps)), steps, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(shapes)), [f"{regime.get(s, '')}  {s}" for s in shapes], fontsize=8)
    fig.colorbar(im, ax=ax, label="library time / step time")
    env = report.get("environment", {})
    ax.set_title(f"{lesson} suite on {env.get('device', 'GPU')} ({env.get('date', '')[:10]}"
                 f"{'' if report.get('complete', True) else ', PARTIAL run'}): fraction of the library's speed",
                 fontsize=10, loc="left")
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
    fig = _figure(8.5, 3.9)
    ax = fig.add_subplot()
    if report is None or not bench_results(report, lesson, shape)[1]:
        return _performance_model(fig, ax, lesson, arch)
    shape, rs = bench_results(report, lesson, shape)
    naive = next((r for r in rs if r["kind"] == "kernel" and r["ok"]), None)
    names, values, labels = [], [], []
    for r in rs:
        ms = r["median_ms"]
        ok = r.get("ok", True) and ms == ms
        v = (r["bytes"] / (ms * 1e-3) / 1e9) if memory else (r["flops"] / (ms * 1e-3) / 1e12)
        names.append(r["name"] + (" (peer)" if r["kind"] == "peer" else "") + ("" if ok else " WRONG"))
        values.append(v if ok else 0.0)
        sp = f", {naive['median_ms'] / ms:.1f}x naive" if naive and ok else ""
        labels.append(f"{ms:.3g} ms{sp}" if ok else "wrong result: not timed")
    ys = np.arange(len(names))[::-1]
    shades = _shades(len(rs))
    for i, (y, v, r) in enumerate(zip(ys, values, rs)):
        peer = r["kind"] == "peer"
        ax.barh(y, v, color="white" if peer else shades[i], hatch="///" if peer else "",
                edgecolor="black", height=0.65)
        ax.text(v, y, "  " + labels[i], va="center", fontsize=8)
    ax.set_yticks(ys, names, fontsize=9)
    unit = "GB/s (minimum DRAM bytes / median time)" if memory else "TFLOP/s (FP32, median time)"
    ax.set_xlabel(unit)
    ax.set_xlim(0, max(values) * 1.45 if values and max(values) > 0 else 1)
    env = report.get("environment", {})
    best = max((v, n) for v, n, r in zip(values, names, rs) if r["kind"] == "kernel")
    peer = next(((v, n) for v, n, r in zip(values, names, rs) if r["kind"] == "peer"), None)
    vs = f" = {best[0] / peer[0]:.0%} of the peer" if peer and peer[0] else ""
    ax.set_title(f"{lesson} {'x'.join(map(str, shape))} on {env.get('device', 'GPU')}, measured:\n"
                 f"the best version, {best[1]}, runs at {best[0]:.3g} {'GB/s' if memory else 'TFLOP/s'}{vs}",
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
                va="center", fontsize=8)
    ax.set_yticks(ys, names, fontsize=9)
    ax.set_xlabel(f"MODEL: attainable TFLOP/s = min({a.peak_fp32_tflops} TFLOP/s, intensity x "
                  f"{a.peak_bw_gbs / 1000:g} TB/s), {a.gpu} spec sheet")
    ax.set_xlim(0, max(values) * 1.6 if values else 1)
    ax.set_title(f"MODEL, not a measurement -- {lesson}: the roofline's bound for each version's traced global\n"
                 f"traffic at {'x'.join(map(str, model[0]['shape']))} (run `gpukernels bench` on a GPU to measure)",
                 fontsize=9.5, loc="left")
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
        nbytes = 4 * (t["loads"] + t["stores"])
        ai = mod.flops(shape) / max(nbytes, 1)
        attainable = min(a.peak_fp32_tflops, ai * a.peak_bw_gbs / 1000)
        out.append({"version": name, "shape": shape, "flops": mod.flops(shape), "bytes": nbytes,
                    "intensity": ai, "attainable_tflops": attainable,
                    "bound": "compute" if ai >= a.ridge else "memory"})
    return out


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
    fig = _figure(8.5, 5.2)
    ax = fig.add_subplot()
    measured = report is not None and any(bench_results(report, l)[1] for l in lessons)
    peak, bw = a.peak_fp32_tflops, a.peak_bw_gbs
    xs = np.logspace(-2, 3.5, 200)
    ax.plot(xs, np.minimum(peak, xs * bw / 1000), "--", color="0.4", lw=1.2,
            label=f"spec sheet {a.gpu}: {peak} TFLOP/s, {bw / 1000:g} TB/s")
    ceilings = (report or {}).get("ceilings", {}) if measured else {}
    if ceilings.get("sgemm_TFLOPs") and ceilings.get("copy_GBps"):
        mp, mb = ceilings["sgemm_TFLOPs"], ceilings["copy_GBps"]
        ax.plot(xs, np.minimum(mp, xs * mb / 1000), "-", color="black", lw=1.6,
                label=f"measured: peer SGEMM {mp:.1f} TFLOP/s, copy {mb / 1000:.2f} TB/s")
    points = []
    for li, lesson in enumerate(lessons):
        mod = _lessons()[lesson]
        if measured:
            shape, rs = bench_results(report, lesson)
            for vi, r in enumerate(rs):
                if not r.get("ok", True) or not r["median_ms"] == r["median_ms"]:
                    continue
                x = r["flops"] / r["bytes"]
                y = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
                points.append((lesson, r["name"], x, y, r["kind"] == "peer", vi))
        else:
            for vi, m in enumerate(roofline_model(lesson, arch=a.name)):
                points.append((lesson, m["version"], m["intensity"], m["attainable_tflops"], False, vi))
    label_y = _spread([(x, y) for _, _, x, y, _, _ in points], min_gap=0.15)
    # A lesson's labels go to the left of its column when another lesson's column is close on the right.
    column = {l: min(x for ll, _, x, _, _, _ in points if ll == l) for l in {p[0] for p in points}}
    left = {l: any(0 < math.log10(column[o] / column[l]) < 1.3 for o in column) for l in column}
    for (lesson, name, x, y, peer, vi), ly in zip(points, label_y):
        li = lessons.index(lesson)
        n_versions = len(_versions(lesson))
        ax.plot(x, y, MARKERS[li % len(MARKERS)], markersize=8 if not peer else 10, zorder=3,
                markerfacecolor="white" if peer else _shades(n_versions)[min(vi, n_versions - 1)],
                markeredgecolor="black")
        ax.annotate(f"{lesson}.{name}" if not peer else f"{lesson}: {name}", (x, y),
                    xytext=(x / 1.25 if left[lesson] else x * 1.25, ly), ha="right" if left[lesson] else "left",
                    textcoords="data", fontsize=7, va="center",
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"} if abs(ly / y - 1) > 0.05 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xs[0], xs[-1])
    ymin = min([p[3] for p in points] + [peak]) / 3
    ax.set_ylim(max(ymin, 1e-4), peak * 3)
    ax.grid(True, which="major", color="0.9")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)  " +
                  ("[FLOPs / minimum DRAM bytes]" if measured else "[MODEL: FLOPs / traced global bytes, no caches]"))
    ax.set_ylabel("TFLOP/s" + ("" if measured else " (MODEL: on the roof)"))
    ax.axvline(a.ridge, color="0.6", lw=0.8, ls=":")
    ax.text(a.ridge, peak * 1.4, f" ridge {a.ridge:.0f} FLOP/B", fontsize=7.5, color="0.3")
    ax.legend(fontsize=7.5, loc="lower right")
    device = (report or {}).get("environment", {}).get("device", "GPU")
    title = (f"Roofline, measured on {device}: left of the ridge, bandwidth caps the speed; right of it, FP32 peak"
             if measured else "Roofline MODEL, not a measurement: data reuse moves a version right, towards the "
                              "compute roof")
    ax.set_title(title, fontsize=10, loc="left")
    fig.gpukernels_data = {"measured": measured, "points": [
        {"lesson": l, "version": n, "intensity": x, "tflops": y, "peer": p} for l, n, x, y, p, _ in points]}
    return fig


def _spread(points: list[tuple[float, float]], min_gap: float) -> list[float]:
    """Label heights for points on a log-y axis: points in the same column (same x within 20 %) get labels at
    least ``min_gap`` decades apart, as close to their points as possible."""
    out = [y for _, y in points]
    order = sorted(range(len(points)), key=lambda i: (round(math.log10(points[i][0]) * 5), points[i][1]))
    prev_i = None
    for i in order:
        if prev_i is not None and abs(math.log10(points[i][0] / points[prev_i][0])) < 0.08:
            lo = math.log10(out[prev_i]) + min_gap
            if math.log10(out[i]) < lo:
                out[i] = 10 ** lo
        prev_i = i
    return out


# ----------------------------------------------------------------------------------------------------------
# Traces: one simulated run of a version under gpukernels.trace, every access with its block and thread
# ----------------------------------------------------------------------------------------------------------

#: The shapes the tracer-fed figures use: small enough to simulate in seconds, large enough for several blocks
#: (and, for the reuse maps, for the reuse factor N / TILE to show). Editorial choices, one place.
FIGURE_SHAPES = {"matmul": (64, 64, 64), "softmax": (32, 256), "cbr": (1, 4, 16, 16, 8, 3, 3)}

_READ, _WRITE = 0, 1
_GLOBAL, _SHARED = 0, 1


@dataclass
class Traced:
    """The accesses of one version's launches, as NumPy columns (one row per element access).

    ``ev`` columns: launch, block (linear), bx, by, bz, tid, aid (array id), elem (flat element index), kind
    (0 read, 1 write, 2 atomic), interval (barriers passed), pc (source line id), occ (n-th execution of that
    line by that thread), order (n-th access of the thread). ``arrays[aid]``: name, space (0 global, 1 shared,
    2 local), shape, launch. ``params[launch]``: the kernel's parameter names in order.
    """

    lesson: str
    version: str
    shape: tuple
    launches: list  # (kernel name, grid, block)
    arrays: list
    ev: dict
    lines: list  # pc -> (filename, lineno)
    out_name: str
    input_names: list
    trace: Any = None

    def block_dims(self, launch: int) -> tuple:
        return tuple(self.launches[launch][2])

    def grid_dims(self, launch: int) -> tuple:
        return tuple(self.launches[launch][1])

    def select(self, **conds) -> np.ndarray:
        """Boolean mask of rows where every column equals the given value (``array=`` takes a name)."""
        ev = self.ev
        mask = np.ones(len(ev["tid"]), bool)
        for key, val in conds.items():
            if key == "array":
                aids = [i for i, a in enumerate(self.arrays) if a["name"] == val]
                mask &= np.isin(ev["aid"], aids)
            elif key == "space":
                aids = [i for i, a in enumerate(self.arrays) if a["space"] == val]
                mask &= np.isin(ev["aid"], aids)
            else:
                mask &= ev[key] == val
        return mask

    def array_shape(self, name: str) -> tuple:
        return next(tuple(a["shape"]) for a in self.arrays if a["name"] == name)

    def counts(self, name: str, mask: np.ndarray | None = None, kind: int = _READ) -> np.ndarray:
        """Accesses of ``kind`` per element of global array ``name`` (where ``mask``), shaped like the array."""
        sel = self.select(array=name, kind=kind, space=_GLOBAL)
        if mask is not None:
            sel &= mask
        shape = self.array_shape(name)
        return np.bincount(self.ev["elem"][sel], minlength=math.prod(shape)).reshape(shape)


def _param_names(kernel) -> list[str]:
    import inspect

    return list(inspect.signature(getattr(kernel, "py_func", kernel)).parameters)


def _raw_events(t) -> tuple[list, list, dict, list]:
    """(launches, arrays, columns, lines) from a Trace made with ``events=True``.

    Reads the tracer's compact per-block buffers when they are there (72 bytes per access; ``Trace.events()``
    builds strings for every access, ~1.5 KB each, too much for the 500 000 accesses of a 64^3 matmul), and
    falls back to ``Trace.events()`` otherwise.
    """
    tr = _trace_module()
    launches = [(l.kernel, tuple(l.grid), tuple(l.block)) for l in t.launches]
    if hasattr(t, "_events") and hasattr(t, "_arrays") and hasattr(t, "_pcs") and hasattr(tr, "ORDER"):
        arrays = [{"name": a.name, "space": int(a.space), "shape": tuple(a.shape), "launch": a.launch}
                  for a in t._arrays]
        parts = {k: [] for k in ("launch", "bx", "by", "bz", "tid", "aid", "elem", "kind", "interval", "pc", "occ",
                                 "order")}
        for li, block, e in t._events:
            n = len(e)
            parts["launch"].append(np.full(n, li, np.int64))
            for axis, key in enumerate(("bx", "by", "bz")):
                parts[key].append(np.full(n, block[axis], np.int64))
            for key, col in (("tid", tr.TID), ("aid", tr.AID), ("elem", tr.ELEM), ("kind", tr.KIND),
                             ("interval", tr.BAR), ("pc", tr.PC), ("occ", tr.OCC), ("order", tr.ORDER)):
                parts[key].append(e[:, col])
        cols = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in parts.items()}
        return launches, arrays, cols, list(t._pcs)
    # Public, slower path: string columns.
    rec = t.events()
    names = sorted(set(zip(rec["launch"].tolist(), rec["array"].tolist(), rec["space"].tolist())))
    arrays, aid_of = [], {}
    for li, name, space in names:
        aid_of[(li, name)] = len(arrays)
        elems = rec["element"][(rec["launch"] == li) & (rec["array"] == name)]
        arrays.append({"name": name, "space": {"global": 0, "shared": 1, "local": 2}[space],
                       "shape": (int(elems.max()) + 1,), "launch": li})
    locs = sorted(set(rec["location"].tolist()))
    pc_of = {loc: i for i, loc in enumerate(locs)}
    bdims = [l[2] for l in launches]
    tid = np.array([th[0] + bdims[li][0] * (th[1] + bdims[li][1] * th[2])
                    for li, th in zip(rec["launch"].tolist(), rec["thread"].tolist())], np.int64)
    cols = {"launch": rec["launch"].astype(np.int64), "bx": rec["block"][:, 0].astype(np.int64),
            "by": rec["block"][:, 1].astype(np.int64), "bz": rec["block"][:, 2].astype(np.int64), "tid": tid,
            "aid": np.array([aid_of[(l, a)] for l, a in zip(rec["launch"].tolist(), rec["array"].tolist())]),
            "elem": rec["element"].astype(np.int64),
            "kind": np.array([{"read": 0, "write": 1, "atomic": 2}[k] for k in rec["kind"]]),
            "interval": rec["interval"].astype(np.int64), "pc": np.array([pc_of[x] for x in rec["location"]]),
            "occ": np.zeros(len(rec), np.int64), "order": rec["order"].astype(np.int64)}
    return launches, arrays, cols, [(loc.rsplit(":", 1)[0], int(loc.rsplit(":", 1)[1])) for loc in locs]


_TRACES: dict = {}


def traced(lesson: str, version: str, shape=None, seed: int = 0) -> Traced:
    """Run ``lesson.VERSIONS[version]`` on inputs of ``shape`` under the tracer (cached per process)."""
    import gpukernels

    _trace_module()  # ImportError here: no tracer
    mod = _lessons()[lesson]
    shape = tuple(shape or FIGURE_SHAPES.get(lesson) or mod.SHAPES["trace"])
    key = (lesson, version, shape, seed)
    if key in _TRACES:
        return _TRACES[key]
    inputs = mod.make_inputs(shape, seed)
    ver = mod.VERSIONS[version]
    # Parameter names of the output and the inputs, from the launch plan (the tracer names arrays by them).
    out = np.empty(0, np.float32)
    plan = ver.launches(*inputs)
    probe_out = plan[0].args[[i for i, a in enumerate(plan[0].args) if isinstance(a, np.ndarray)][-1]]
    out_name, input_names = None, []
    for launch in plan:
        names = _param_names(launch.kernel)
        for i, arg in enumerate(launch.args):
            if not isinstance(arg, np.ndarray) or i >= len(names):
                continue
            if arg is probe_out and out_name is None:
                out_name = names[i]
            elif any(arg is x for x in inputs) and names[i] not in input_names:
                input_names.append(names[i])
    del out
    with gpukernels.trace(events=True) as t:
        ver(*inputs)
    launches, arrays, cols, lines = _raw_events(t)
    result = Traced(lesson, version, shape, launches, arrays, cols, lines, out_name or "out", input_names, t)
    if len(_TRACES) >= 12:
        _TRACES.pop(next(iter(_TRACES)))
    _TRACES[key] = result
    return result


def traffic(lesson: str, version: str, shape=None) -> dict:
    """Global loads and stores (elements) of one version at ``shape`` (default: ``SHAPES['trace']``), counted by
    the tracer; cached on disk next to the compile cache, keyed by the lesson's source."""
    import hashlib

    import gpukernels

    mod = _lessons()[lesson]
    shape = tuple(shape or mod.SHAPES["trace"])
    # A lesson that is a package (matmul) is keyed by all of its files, so that editing a step's file counts.
    src = "".join(f.read_text() for f in sorted(Path(mod.__file__).parent.glob("*.py"))) if hasattr(mod, "__path__") \
        else Path(mod.__file__).read_text()
    key = hashlib.sha256(f"{lesson}|{version}|{shape}|{src}|traffic-v1".encode()).hexdigest()[:24]
    path = _res.cache_dir().parent / "traffic" / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    with gpukernels.trace() as t:
        mod.VERSIONS[version](*mod.make_inputs(shape, 0))
    rows = t.traffic()
    out = {"loads": sum(r.loads for r in rows), "stores": sum(r.stores for r in rows),
           "bytes": t.global_bytes(), "shape": list(shape)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out))
    except OSError:
        pass
    return out


def _montage(counts: np.ndarray) -> np.ndarray:
    """A 2-D picture of an array of any rank: (..., H, W) planes side by side with a one-cell gap (NaN)."""
    if counts.ndim == 1:
        return counts[None, :].astype(float)
    if counts.ndim == 2:
        return counts.astype(float)
    h, w = counts.shape[-2:]
    planes = counts.reshape(-1, h, w).astype(float)
    out = np.full((h, len(planes) * (w + 1) - 1), np.nan)
    for i, p in enumerate(planes):
        out[:, i * (w + 1): i * (w + 1) + w] = p
    return out


def _montage_axes_label(shape: tuple, name: str) -> str:
    if len(shape) <= 2:
        return f"{name} {tuple(shape)}"
    return f"{name} {tuple(shape)}: {math.prod(shape[:-2])} planes of {shape[-2]} x {shape[-1]}, side by side"


def _image(ax, img, title, cmap=CMAP, norm=None, vmin=None, vmax=None):
    import matplotlib

    cm = matplotlib.colormaps[cmap].with_extremes(bad="0.85")  # NaN: gaps between planes, unread elements
    im = ax.imshow(img, cmap=cm, norm=norm, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="auto")
    ax.set_title(title, fontsize=8.5, loc="left")
    ax.tick_params(labelsize=7)
    if img.shape[0] <= 3:
        ax.set_yticks([])
    return im


# -- 1. grid map ---------------------------------------------------------------------------------------------


def _owners(tr: Traced):
    """For each output element: (launch, linear block, tid) of the thread that first wrote it (-1: none)."""
    name = tr.out_name
    shape = tr.array_shape(name)
    sel = np.flatnonzero(tr.select(array=name, kind=_WRITE, space=_GLOBAL))
    first_launch = int(tr.ev["launch"][sel].min()) if len(sel) else 0
    sel = sel[tr.ev["launch"][sel] == first_launch]
    n = math.prod(shape)
    block = np.full(n, -1, np.int64)
    tid = np.full(n, -1, np.int64)
    gx, gy, _ = tr.grid_dims(first_launch)
    lin = tr.ev["bx"][sel] + gx * (tr.ev["by"][sel] + gy * tr.ev["bz"][sel])
    # first writer wins: assign in reverse so the earliest row is the last assignment
    block[tr.ev["elem"][sel][::-1]] = lin[::-1]
    tid[tr.ev["elem"][sel][::-1]] = tr.ev["tid"][sel][::-1]
    return first_launch, block.reshape(shape), tid.reshape(shape)


def _plane(a: np.ndarray) -> np.ndarray:
    """The first 2-D plane of an array (a[0, 0, ..., :, :]); 1-D arrays become one row."""
    if a.ndim == 1:
        return a[None, :]
    while a.ndim > 2:
        a = a[0]
    return a


def grid_map(lesson: str = "matmul", versions=None, shape=None, zoom=(8, 16)) -> Figure:
    """Which block and which thread computes which output element, per version.

    Teaches: the launch configuration is a *mapping* from (block, thread) to output elements. Top row: every
    output element coloured by the block that writes it (block index in the middle). Bottom row: the top-left
    corner, each cell labelled with the thread index that writes it and shaded by warp -- naive matmul's warp
    runs *down a column* (threadIdx.x -> row), coalesced's along a row; a register-blocked thread owns a
    whole strip or tile. Measured from the tracer's record of the writes to the output.
    """
    versions = list(versions or _naive_and_best(lesson))
    n = len(versions)
    fig = _figure(3.3 * n + 0.6, 7.2)
    axes = fig.subplots(2, n, squeeze=False, height_ratios=[1.25, 1])
    data = {}
    for col, version in enumerate(versions):
        tr = traced(lesson, version, shape)
        li, block, tid = _owners(tr)
        bplane, tplane = _montage(block), _plane(tid)  # every plane for the blocks, the first for threads
        bplane = np.where(np.isnan(bplane), -1, bplane).astype(np.int64)
        bdims, gdims = tr.block_dims(li), tr.grid_dims(li)
        nblocks = math.prod(gdims)
        # colour blocks with well-separated shades (neighbours differ in lightness too)
        shade = (np.arange(max(nblocks, 1)) * 0.618034) % 1.0
        img = np.where(bplane >= 0, shade[np.maximum(bplane, 0)], np.nan)
        ax = axes[0, col]
        _image(ax, img, f"{version}: {tr.launches[li][0]}\ngrid {gdims}, block {bdims}", cmap=CMAP, vmin=0, vmax=1)
        for b in np.unique(bplane[bplane >= 0]):
            ys, xs = np.nonzero(bplane == b)
            if len(ys) >= 0.004 * bplane.size:
                bx, by, bz = b % gdims[0], (b // gdims[0]) % gdims[1], b // (gdims[0] * gdims[1])
                label = f"{bx},{by}" if gdims[1] > 1 or gdims[2] > 1 else f"{bx}"
                ax.text(xs.mean(), ys.mean(), label, ha="center", va="center", fontsize=6.5,
                        color="white" if shade[b] < 0.55 else "black")
        if block.ndim > 2:
            ax.set_xlabel(_montage_axes_label(block.shape, tr.out_name), fontsize=7)
        else:
            ax.set_xlabel(f"{tr.out_name}: column (of {bplane.shape[1]})", fontsize=7.5)
            ax.set_ylabel(f"row (of {bplane.shape[0]})", fontsize=7.5)
        # zoom: thread ids, shaded by warp
        zr, zc = min(zoom[0], tplane.shape[0]), min(zoom[1], tplane.shape[1])
        zt = tplane[:zr, :zc]
        warp = np.where(zt >= 0, zt // 32, -1)
        zax = axes[1, col]
        bfirst = _plane(block)
        b0 = int(bfirst[bfirst >= 0].min()) if (bfirst >= 0).any() else 0
        w0 = np.argwhere((bfirst == b0) & (tplane >= 0) & (tplane < 32))
        span = (f"warp 0 of block {b0} writes {np.ptp(w0[:, 0]) + 1} x {np.ptp(w0[:, 1]) + 1} outputs"
                if len(w0) else "")
        _image(zax, np.where(warp >= 0, warp % 8, np.nan), f"top-left {zr} x {zc}: threadIdx (shade = warp)\n{span}",
               cmap=CMAP, vmin=0, vmax=9)
        for r in range(zr):
            for c in range(zc):
                t = int(zt[r, c])
                if t < 0:
                    continue
                x, y, z = t % bdims[0], (t // bdims[0]) % bdims[1], t // (bdims[0] * bdims[1])
                txt = f"{x},{y}" if bdims[1] > 1 else f"{x}"
                zax.text(c, r, txt, ha="center", va="center", fontsize=5 if len(txt) > 3 else 6,
                         color="white" if (warp[r, c] % 8) < 5 else "black")
        zax.set_xticks(range(zc))
        zax.set_yticks(range(zr))
        zax.tick_params(labelsize=6)
        data[version] = {"launch": li, "block": block, "thread": tid, "grid": gdims, "block_dims": bdims,
                         "warp0_span": (int(np.ptp(w0[:, 0]) + 1), int(np.ptp(w0[:, 1]) + 1)) if len(w0) else None}
    fig.suptitle(f"{lesson} {'x'.join(map(str, tr.shape))}: who computes which output element\n(colour = block, "
                 f"labelled with blockIdx; zoom: threadIdx of the writer, shade = warp)", fontsize=10, x=0.01,
                 ha="left")
    fig.gpukernels_data = {"shape": tr.shape, "versions": data}
    return fig


# -- 2. access maps and reuse ----------------------------------------------------------------------------------


def _who_mask(tr: Traced, who: str, index: int, block: int, launch: int = 0) -> tuple[np.ndarray, str]:
    gx, gy, _ = tr.grid_dims(launch)
    ev = tr.ev
    lin = ev["bx"] + gx * (ev["by"] + gy * ev["bz"])
    mask = (ev["launch"] == launch) & (lin == block)
    if who == "thread":
        mask &= ev["tid"] == index
        bd = tr.block_dims(launch)
        desc = f"thread {(index % bd[0], (index // bd[0]) % bd[1])[:2 if bd[1] > 1 else 1]} of block {block}"
    elif who == "warp":
        mask &= (ev["tid"] >> 5) == index
        desc = f"warp {index} of block {block}"
    elif who == "block":
        desc = f"block {block}"
    else:
        raise ValueError(f"who must be 'thread', 'warp' or 'block'; got {who!r}")
    return mask, desc


def access_map(lesson: str = "matmul", versions=None, who: str = "warp", index: int = 0, block: int = 0,
               shape=None) -> Figure:
    """Which elements of each input one thread, warp or block reads from global memory, per version.

    Teaches: the *footprint* of a unit of work. Naive matmul's warp 0 reads 32 full rows of A (one per lane)
    and a single column of B; after coalescing it reads one row of A and 32 neighbouring columns of B; a tiled
    block reads a strip of A and a strip of B once, however many outputs it computes. Shade = how many times
    the selection loaded the element (white: never).
    """
    versions = list(versions or _naive_and_best(lesson))
    trs = [traced(lesson, v, shape) for v in versions]
    names = trs[0].input_names
    fig = _figure(3.6 * len(names) + 0.8, 2.5 * len(versions) + 0.8)
    axes = fig.subplots(len(versions), len(names), squeeze=False)
    data = {}
    for row, (version, tr) in enumerate(zip(versions, trs)):
        mask, desc = _who_mask(tr, who, index, block)
        data[version] = {}
        for col, name in enumerate(names):
            if name not in [a["name"] for a in tr.arrays]:
                axes[row, col].set_axis_off()
                continue
            c = tr.counts(name, mask)
            img = _montage(c)
            img = np.where(img == 0, np.nan, img)  # not read: grey
            ax = axes[row, col]
            distinct, loads = int((c > 0).sum()), int(c.sum())
            top = int(c.max()) if distinct else 1
            im = _image(ax, img, f"{version}, {desc}:\nreads {distinct} of {c.size} elements of {name} ({loads} loads)",
                        vmin=1, vmax=max(top, 2))
            if distinct and min(img.shape) >= 2:  # outline what was read: a one-element strip stays visible
                ax.contour(np.nan_to_num(_montage(c > 0)), levels=[0.5], colors="black", linewidths=0.9)
            ax.set_xlabel(_montage_axes_label(c.shape, name), fontsize=7)
            if top > 1:
                cb = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.01)
                cb.ax.tick_params(labelsize=6)
                cb.set_label("loads", fontsize=7)
            data[version][name] = c
    fig.suptitle(f"{lesson} {'x'.join(map(str, trs[0].shape))}: the global elements one {who} reads "
                 f"(outlined; shade = loads, grey = not read)", fontsize=10, x=0.01, ha="left")
    _grey_background(fig)
    fig.gpukernels_data = {"who": who, "index": index, "block": block, "counts": data}
    return fig


def _grey_background(fig):
    for ax in fig.axes:
        if ax.images:
            ax.set_facecolor("0.93")


def reuse_heatmap(lesson: str = "matmul", versions=None, shape=None) -> Figure:
    """Global loads per input element over the whole launch, per version: the reuse factor made visible.

    Teaches: naive matmul loads every element of A N times and of B M times; tiling divides that by the
    tile width (N / 16), register blocking by the block tile (N / 64, N / 128). The same logarithmic shade
    scale is used for every version of an input, so a lighter map means more reuse from fast memory.
    """
    import matplotlib.colors as mcolors

    versions = list(versions or _naive_and_best(lesson))
    trs = [traced(lesson, v, shape) for v in versions]
    names = trs[0].input_names
    counts = {v: {n: tr.counts(n) for n in names if n in [a["name"] for a in tr.arrays]}
              for v, tr in zip(versions, trs)}
    fig = _figure(3.6 * len(names) + 0.8, 2.4 * len(versions) + 0.9)
    axes = fig.subplots(len(versions), len(names), squeeze=False)
    for col, name in enumerate(names):
        vmax = max(int(counts[v][name].max()) for v in versions if name in counts[v])
        norm = mcolors.LogNorm(vmin=1, vmax=max(vmax, 2))
        for row, version in enumerate(versions):
            ax = axes[row, col]
            if name not in counts[version]:
                ax.set_axis_off()
                continue
            c = counts[version][name]
            img = _montage(np.maximum(c, 0))
            img = np.where(img == 0, np.nan, img)
            mean = c.sum() / c.size
            im = _image(ax, img, f"{version}: {name} loaded {mean:.3g} times per element "
                                 f"(max {int(c.max())})", norm=norm)
            ax.set_xlabel(_montage_axes_label(c.shape, name), fontsize=7)
            cb = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.01)
            cb.ax.tick_params(labelsize=6)
            cb.set_label("loads per element", fontsize=7)
    first, last = versions[0], versions[-1]
    n0 = names[0]
    r0 = counts[first][n0].sum() / counts[first][n0].size
    r1 = counts[last][n0].sum() / counts[last][n0].size if n0 in counts[last] else float("nan")
    fig.suptitle(f"{lesson} {'x'.join(map(str, trs[0].shape))}: global loads per input element\n{first} reads "
                 f"each element of {n0} {r0:.3g} times, {last} {r1:.3g} times", fontsize=10, x=0.01, ha="left")
    _grey_background(fig)
    fig.gpukernels_data = {"counts": counts}
    return fig


# -- 3. shared-memory tile phases ------------------------------------------------------------------------------


def staged_sources(tr: Traced, block: int, launch: int = 0) -> list[dict]:
    """For each barrier interval in which ``block`` writes shared memory: which global elements (per array)
    the shared tiles receive, and how many shared cells get a constant (zero padding, out of range).

    A shared write's source is the thread's access just before it in program order when that access is a
    global read -- the pattern ``tile[...] = x[...] if inside else 0`` of every lesson kernel."""
    ev = tr.ev
    gx, gy, _ = tr.grid_dims(launch)
    lin = ev["bx"] + gx * (ev["by"] + gy * ev["bz"])
    rows = np.flatnonzero((ev["launch"] == launch) & (lin == block))
    space = np.array([a["space"] for a in tr.arrays])
    r_tid, r_order = ev["tid"][rows], ev["order"][rows]
    lookup = {(int(t), int(o)): int(r) for t, o, r in zip(r_tid, r_order, rows)}
    phases: dict[int, dict] = {}
    for r in rows[(space[ev["aid"][rows]] == _SHARED) & (ev["kind"][rows] == _WRITE)]:
        ph = phases.setdefault(int(ev["interval"][r]), {"sources": {}, "padding": 0, "writes": 0,
                                                         "shared": set()})
        ph["writes"] += 1
        ph["shared"].add(tr.arrays[int(ev["aid"][r])]["name"])
        prev = lookup.get((int(ev["tid"][r]), int(ev["order"][r]) - 1))
        if prev is not None and space[ev["aid"][prev]] == _GLOBAL and ev["kind"][prev] == _READ:
            name = tr.arrays[int(ev["aid"][prev])]["name"]
            ph["sources"].setdefault(name, set()).add(int(ev["elem"][prev]))
        else:
            ph["padding"] += 1
    return [{"interval": k, **v} for k, v in sorted(phases.items())]


def tile_phases(lesson: str = "matmul", version: str = "tiled", block: int | None = None, shape=None,
                max_phases: int = 4) -> Figure:
    """What the shared-memory tiles hold in each barrier interval, for one block, as small multiples.

    Teaches: a tiled kernel walks its inputs phase by phase. In each interval between two ``syncthreads``
    the block stages one tile of each input (dark), computes from it, and moves on; light cells were staged
    in earlier phases, the hatched box is the block's own output region -- it never changes. For fused CBR
    the staged input tile is the output tile plus a halo of R - 1 rows and S - 1 columns, and cells outside
    the image are staged as zeros (padding).
    """
    import matplotlib.patches as mpatches

    tr = traced(lesson, version, shape)
    gdims = tr.grid_dims(0)
    if block is None:  # an interior block when there is one: its tiles are not clipped by the edges
        bx, by = min(1, gdims[0] - 1), min(1, gdims[1] - 1)
        block = bx + gdims[0] * by
    phases = [p for p in staged_sources(tr, block) if p["sources"] or p["padding"]][:max_phases]
    names = [n for n in tr.input_names if any(n in p["sources"] for p in phases)]  # inputs that are staged
    owner_launch, owner_block, _ = _owners(tr)
    out_mask = owner_block == block
    cols = names + [tr.out_name]
    fig = _figure(2.5 * len(cols) + 0.5, 2.1 * len(phases) + 0.8)
    axes = fig.subplots(len(phases), len(cols), squeeze=False)
    seen: dict[str, set] = {n: set() for n in names}
    data = []
    for row, ph in enumerate(phases):
        for col, name in enumerate(cols):
            ax = axes[row, col]
            shape_ = tr.array_shape(name)
            img = np.zeros(math.prod(shape_))
            if name in names:
                now = ph["sources"].get(name, set())
                earlier = seen[name] - now
                img[list(earlier)] = 1
                img[list(now)] = 2
                title = f"phase {row}: {name}, {len(now)} elements staged"
                if name == names[0]:
                    title += f"\n(+{ph['padding']} cells set to 0)" if ph["padding"] else "\n"
            else:
                img[out_mask.ravel()] = 1
                title = f"{name}: the block's {int(out_mask.sum())} outputs\n"
            pic = _montage(img.reshape(shape_))
            _image(ax, pic, title, cmap="Greys", vmin=0, vmax=2.4)
            if name == tr.out_name:
                ys, xs = np.nonzero(_montage(out_mask.astype(float)) > 0)
                if len(ys):
                    ax.add_patch(mpatches.Rectangle((xs.min() - 0.5, ys.min() - 0.5), xs.max() - xs.min() + 1,
                                                    ys.max() - ys.min() + 1, fill=False, hatch="///", lw=1.5,
                                                    edgecolor="black"))
            ax.set_xlabel(_montage_axes_label(shape_, name), fontsize=6.5)
        for name in names:
            seen[name] |= ph["sources"].get(name, set())
        data.append({"interval": ph["interval"], "sources": ph["sources"], "padding": ph["padding"],
                     "shared": sorted(ph["shared"])})
    g = (block % gdims[0], (block // gdims[0]) % gdims[1])
    fig.suptitle(f"{lesson}.{version} {'x'.join(map(str, tr.shape))}, block {g}: what the shared tiles hold in each "
                 f"barrier interval\n(dark: staged this phase, grey: earlier phases; hatched: the block's outputs)",
                 fontsize=10, x=0.01, ha="left")
    fig.gpukernels_data = {"block": block, "phases": data, "out_block_mask": out_mask}
    return fig


# -- 4. warp diagrams: sectors and banks ------------------------------------------------------------------------


def _warp_access(tr: Traced, space: int, array: str | None, kind: int | None, block: int, warp: int,
                 pick: str = "worst"):
    """One warp access: rows of one (line, occurrence) of ``warp`` in ``block`` of launch 0 touching
    ``array`` with ``kind``. Without ``array``: the access that touches the most sectors (global) or has the
    highest conflict degree (shared). Returns (rows, array name, kind, location)."""
    ev = tr.ev
    gx, gy, _ = tr.grid_dims(0)
    lin = ev["bx"] + gx * (ev["by"] + gy * ev["bz"])
    sp = np.array([a["space"] for a in tr.arrays])
    mask = (ev["launch"] == 0) & (lin == block) & ((ev["tid"] >> 5) == warp) & (sp[ev["aid"]] == space)
    if array is not None:
        mask &= tr.select(array=array)
    if kind is not None:
        mask &= ev["kind"] == kind
    rows = np.flatnonzero(mask)
    if not len(rows):
        raise ValueError(f"{tr.lesson}.{tr.version}: warp {warp} of block {block} makes no such access")
    groups: dict = {}
    for r in rows:
        groups.setdefault((int(ev["aid"][r]), int(ev["pc"][r]), int(ev["kind"][r]), int(ev["occ"][r])), []).append(r)

    def score(item):
        (aid, _, _, _), rs = item
        isz = 4
        e = ev["elem"][rs]
        if space == _GLOBAL:
            return len(set((e * isz // 32).tolist()))
        return _conflict_degree(e)

    first_order = lambda item: min(int(ev["order"][r]) for r in item[1])  # noqa: E731
    items = list(groups.items())
    chosen = max(items, key=lambda it: (score(it), -first_order(it))) if pick == "worst" \
        else min(items, key=first_order)
    (aid, pc, k, _), rs = chosen
    fname, lineno = tr.lines[pc]
    return np.array(rs), tr.arrays[aid]["name"], k, f"{Path(fname).name}:{lineno}"


def _conflict_degree(words: np.ndarray) -> int:
    w = np.unique(words)
    return int(np.bincount(w % 32, minlength=32).max()) if len(w) else 0


def warp_sectors(lesson: str = "matmul", versions=None, array: str | None = None, kind: str | None = None,
                 block: int = 0, warp: int = 0, shape=None) -> Figure:
    """Lanes -> 32-byte sectors for one warp's global access, per version.

    Teaches: a warp's 32 loads are served in 32-byte sectors. When lanes read consecutive floats, 32 lanes
    need 4 sectors (128 bytes, all used); when each lane is a row apart, they need 32 sectors and use 4 bytes
    of each 32 -- an eighth of the bandwidth. A broadcast (all lanes, one address) needs one. By default the
    first version's worst access is shown, and the same array and kind in the others.
    """
    versions = list(versions or _naive_and_best(lesson))
    fig = _figure(9.5, 2.3 * len(versions) + 0.7)
    axes = fig.subplots(len(versions), 1, squeeze=False)[:, 0]
    kind_code = None if kind is None else {"read": _READ, "write": _WRITE}[kind]
    if array is None:
        array, kind_code = _most_improved(lesson, versions, shape, block, warp, kind_code)
    data = {}
    for ax, version in zip(axes, versions):
        tr = traced(lesson, version, shape)
        rows, name, k, loc = _warp_access(tr, _GLOBAL, array, kind_code, block, warp)
        lanes = tr.ev["tid"][rows] & 31
        elems = tr.ev["elem"][rows]
        sectors = elems * 4 // 32
        uniq = sorted(set(sectors.tolist()))
        pos = {s: i for i, s in enumerate(uniq)}
        width = max(len(uniq), 1)
        for lane, sec in zip(lanes.tolist(), sectors.tolist()):
            x1 = (pos[sec] + 0.5) * 32 / width
            ax.plot([lane + 0.5, x1], [1, 0.12], color="0.35", lw=0.7)
        for lane in range(32):
            active = lane in set(lanes.tolist())
            ax.add_patch(_rect(lane + 0.05, 1, 0.9, 0.3, "0.25" if active else "white"))
        for s, i in pos.items():
            ax.add_patch(_rect(i * 32 / width + 0.08, -0.25, 32 / width - 0.16, 0.37, "0.7", hatch="//"))
            if width <= 16:
                ax.text((i + 0.5) * 32 / width, -0.06, f"byte {s * 32}", ha="center", va="center", fontsize=6)
        used = 4 * len(set(elems.tolist()))
        ax.set_xlim(0, 32)
        ax.set_ylim(-0.35, 1.45)
        ax.set_yticks([1.15, -0.06], ["lanes", "sectors"], fontsize=8)
        ax.set_xticks([])
        ax.set_title(f"{version}, {loc} ({name} {'read' if k == _READ else 'write'}): {len(set(lanes.tolist()))} "
                     f"lanes -> {len(uniq)} sector{'s' if len(uniq) > 1 else ''} = {32 * len(uniq)} bytes moved for {used} used "
                     f"({used / (32 * len(uniq)):.0%})", fontsize=9, loc="left")
        for sp in ax.spines.values():
            sp.set_visible(False)
        data[version] = {"array": name, "lanes": lanes, "elements": elems, "sectors": len(uniq), "location": loc}
    fig.suptitle(f"{lesson}: one warp access, lanes -> 32-byte sectors (warp {warp} of block {block})",
                 fontsize=10, x=0.01, ha="left")
    fig.gpukernels_data = data
    return fig


def _efficiency(tr: Traced, rows: np.ndarray) -> float:
    elems = tr.ev["elem"][rows]
    return 4 * len(set(elems.tolist())) / (32 * len(set((elems * 4 // 32).tolist())))


def _most_improved(lesson, versions, shape, block, warp, kind_code):
    """The (array, kind) of global access whose sector efficiency improves most from the first version to
    the last (ties: the first version's worst) -- e.g. matmul's store of C: 1/8 of each sector used by naive,
    all of it by coalesced."""
    first, last = traced(lesson, versions[0], shape), traced(lesson, versions[-1], shape)
    best = None
    names = [a["name"] for a in first.arrays if a["space"] == _GLOBAL]
    for name in dict.fromkeys(names):
        for k in ((_READ, _WRITE) if kind_code is None else (kind_code,)):
            try:
                r0 = _warp_access(first, _GLOBAL, name, k, block, warp)[0]
                r1 = _warp_access(last, _GLOBAL, name, k, block, warp)[0]
            except ValueError:
                continue
            gain = (round(_efficiency(last, r1) - _efficiency(first, r0), 6), len(set((first.ev["elem"][r0] * 4
                                                                                      // 32).tolist())))
            if best is None or gain > best[0]:
                best = (gain, name, k)
    if best is None:
        _, name, k, _ = _warp_access(first, _GLOBAL, None, kind_code, block, warp)
        return name, k
    return best[1], best[2]


def _rect(x, y, w, h, face, hatch=""):
    import matplotlib.patches as mpatches

    return mpatches.Rectangle((x, y), w, h, facecolor=face, edgecolor="black", lw=0.6, hatch=hatch)


def warp_banks(lesson: str = "matmul", versions=("regblock_2d", "conflict_free"), array: str | None = None,
               kind: str | None = None, block: int = 0, warp: int = 0, shape=(128, 128, 8)) -> Figure:
    """Lanes -> shared-memory banks for one warp's shared access, per version.

    Teaches: shared memory has 32 banks of 4-byte words; a warp access takes as many passes as the largest
    number of *different* words it needs from one bank (lanes reading the same word share it: a broadcast).
    Stacked boxes in a bank column are the words that bank must serve one after another. By default the
    first version's worst access (highest conflict degree) is shown, and the same array and kind in the
    others: regblock_2d's transposed store of A into its tile hits one bank 8 times; conflict_free pads the
    tile's rows and serves it in one pass.
    """
    versions = list(versions or _naive_and_best(lesson))
    fig = _figure(9.5, 2.6 * len(versions) + 0.7)
    axes = fig.subplots(len(versions), 1, squeeze=False)[:, 0]
    kind_code = None if kind is None else {"read": _READ, "write": _WRITE}[kind]
    data = {}
    for ax, version in zip(axes, versions):
        tr = traced(lesson, version, shape)
        rows, name, k, loc = _warp_access(tr, _SHARED, array, kind_code, block, warp)
        array, kind_code = name, k
        lanes = tr.ev["tid"][rows] & 31
        words = tr.ev["elem"][rows]  # float32: one word per element
        banks = words % 32
        degree = _conflict_degree(words)
        stack: dict[int, list] = {}
        for w in sorted(set(words.tolist())):
            stack.setdefault(w % 32, []).append(w)
        top = 1.0 + 0.35 * max(degree, 1)
        for lane, w in zip(lanes.tolist(), words.tolist()):
            level = stack[w % 32].index(w)
            ax.plot([lane + 0.5, w % 32 + 0.5], [top, 0.35 * level + 0.3], color="0.35", lw=0.7)
        for lane in range(32):
            ax.add_patch(_rect(lane + 0.05, top, 0.9, 0.3, "0.25" if lane in set(lanes.tolist()) else "white"))
        for b in range(32):
            for level, w in enumerate(stack.get(b, [])):
                ax.add_patch(_rect(b + 0.08, 0.35 * level, 0.84, 0.3, "0.6" if level else "0.85",
                                   hatch="xx" if level else ""))
        ax.set_xlim(0, 32)
        ax.set_ylim(-0.1, top + 0.4)
        ax.set_yticks([top + 0.15, 0.15], ["lanes", "banks"], fontsize=8)
        ax.set_xticks([b + 0.5 for b in range(0, 32, 4)], [str(b) for b in range(0, 32, 4)], fontsize=7)
        ax.set_title(f"{version}, {loc} ({name} {'read' if k == _READ else 'write'}): "
                     + ("conflict-free (one pass)" if degree <= 1 else f"{degree}-way bank conflict "
                                                                        f"({degree} passes)"),
                     fontsize=9, loc="left")
        for sp in ax.spines.values():
            sp.set_visible(False)
        data[version] = {"array": name, "lanes": lanes, "words": words, "banks": banks, "degree": degree,
                         "location": loc}
    fig.suptitle(f"{lesson}: one warp's shared-memory access, lanes -> banks (stacked boxes: different words "
                 f"of one bank, served one after another)", fontsize=10, x=0.01, ha="left")
    fig.gpukernels_data = data
    return fig

# ----------------------------------------------------------------------------------------------------------
# make plots: every figure of every lesson, and docs/gallery.md
# ----------------------------------------------------------------------------------------------------------


#: Which versions each gallery figure compares (editorial choices; names missing from VERSIONS are dropped,
#: and a figure falls back to naive vs fastest).
GALLERY = {
    "matmul": {"grid": ("naive", "coalesced", "tiled", "regblock_1d"), "access": ("naive", "coalesced", "tiled"),
               "reuse": ("naive", "tiled", "regblock_1d"), "sectors": ("naive", "coalesced"),
               "phases": ("tiled", None), "banks": (("regblock_2d", "conflict_free"), (128, 128, 8))},
    "cbr": {"phases": ("fused_direct", (1, 8, 16, 64, 4, 3, 3))},
}


def _existing(lesson: str, versions) -> list[str]:
    names = [v for v in versions if v in _lessons()[lesson].VERSIONS]
    return names if len(names) >= 2 else list(_naive_and_best(lesson))


@dataclass
class FigureSpec:
    """One figure of the gallery: file stem, section, one sentence for the gallery, and how to make it."""

    name: str
    section: str
    caption: str
    make: Callable[[], Figure]
    needs: str = ""  # "tracer" when it needs gpukernels.trace


def _trace_module():
    """The module gpukernels.trace (``gpukernels.trace`` the attribute is its context manager)."""
    import importlib

    return importlib.import_module("gpukernels.trace")


def tracer_available() -> bool:
    try:
        _trace_module()
    except ImportError:
        return False
    return True


def figure_specs(arch: str = "sm_90", report: dict | None = None, lessons=None) -> list[FigureSpec]:
    """The gallery, built from the lesson registry: every lesson and version appears without being listed."""
    lessons = list(lessons or _lessons())
    measured = report is not None
    specs: list[FigureSpec] = []
    for lesson in lessons:
        naive, best = _naive_and_best(lesson)
        sec = f"Lesson: {lesson}"
        specs += [
            FigureSpec(f"{lesson}_occupancy", sec,
                       f"Resident warps per SM on {arch} for each {lesson} kernel, and the budget (threads, blocks, "
                       "registers, shared memory) that stops one more block from fitting.",
                       lambda lesson=lesson: occupancy_bars(lesson, arch)),
            FigureSpec(f"{lesson}_occupancy_vs_block_size", sec,
                       "Occupancy if the same kernels were launched with other block sizes: a staircase set by "
                       "whole blocks, capped by registers.",
                       lambda lesson=lesson: occupancy_vs_block_size(lesson, arch)),
        ]
        g = {k: _existing(lesson, v) for k, v in GALLERY.get(lesson, {}).items() if k in ("grid", "access", "reuse",
                                                                                         "sectors")}
        g.setdefault("grid", list(_naive_and_best(lesson)))
        for key in ("access", "reuse", "sectors"):
            g.setdefault(key, list(_naive_and_best(lesson)))
        extra = GALLERY.get(lesson, {})
        specs += [
            FigureSpec(f"{lesson}_grid_map", sec,
                       f"Who computes which output element in {', '.join(g['grid'])}: colour per block, and in the "
                       "zoom the thread index that writes each element, shaded by warp.",
                       lambda lesson=lesson, v=g["grid"]: grid_map(lesson, v), needs="tracer"),
            FigureSpec(f"{lesson}_access_map", sec,
                       f"The global elements warp 0 of block 0 reads in {', '.join(g['access'])}: the footprint "
                       "that decides coalescing and reuse.",
                       lambda lesson=lesson, v=g["access"]: access_map(lesson, v, who="warp"), needs="tracer"),
            FigureSpec(f"{lesson}_reuse", sec,
                       f"Global loads per input element over the whole launch in {', '.join(g['reuse'])}: the reuse "
                       "factor that tiling and blocking buy.",
                       lambda lesson=lesson, v=g["reuse"]: reuse_heatmap(lesson, v), needs="tracer"),
            FigureSpec(f"{lesson}_sectors", sec,
                       f"One warp's global access in {' and '.join(g['sectors'])}: lanes mapped to the 32-byte "
                       "sectors they need.",
                       lambda lesson=lesson, v=g["sectors"]: warp_sectors(lesson, v), needs="tracer"),
        ]
        if "phases" in extra and extra["phases"][0] in _lessons()[lesson].VERSIONS:
            ver, shp = extra["phases"]
            specs.append(FigureSpec(f"{lesson}_tile_phases", sec,
                                    f"{lesson}.{ver}: what one block's shared tiles hold in each barrier interval, "
                                    "next to the block's output region.",
                                    lambda lesson=lesson, ver=ver, shp=shp: tile_phases(lesson, ver, shape=shp),
                                    needs="tracer"))
        if "banks" in extra and all(v in _lessons()[lesson].VERSIONS for v in extra["banks"][0]):
            vers, shp = extra["banks"]
            specs.append(FigureSpec(f"{lesson}_banks", sec,
                                    f"One warp's shared-memory access in {' and '.join(vers)}: lanes mapped to "
                                    "banks, conflicts stacked.",
                                    lambda lesson=lesson, vers=vers, shp=shp: warp_banks(lesson, vers, shape=shp),
                                    needs="tracer"))
        if measured and bench_results(report, lesson)[1]:
            specs.append(FigureSpec(f"{lesson}_performance", sec,
                                    f"Measured speed of every {lesson} version next to the library peer, with each "
                                    "version's speed-up over naive.",
                                    lambda lesson=lesson: performance_bars(lesson, report, arch=arch)))
        else:
            specs.append(FigureSpec(f"{lesson}_performance", sec,
                                    f"MODEL, not a measurement: the roofline bound of each {lesson} version from "
                                    "its traced global traffic.",
                                    lambda lesson=lesson: performance_bars(lesson, None if measured else {"results": []},
                                                                           arch=arch), needs="tracer"))
    suite = load_bench(suite=True)
    for lesson in lessons:
        if suite and any(r["lesson"] == lesson for r in suite["results"]):
            specs.append(FigureSpec(f"{lesson}_suite", f"Lesson: {lesson}",
                                    f"Every {lesson} step timed on the suite's real shapes, as a fraction of the "
                                    "library's speed in the same run: which step wins depends on the shape.",
                                    lambda lesson=lesson: suite_heatmap(lesson, suite)))
    specs.append(FigureSpec("occupancy_all", "All lessons",
                            f"Every kernel of every lesson on one occupancy chart ({arch}).",
                            lambda: occupancy_bars(None, arch)))
    specs.append(FigureSpec("roofline", "All lessons",
                            "Every version of every lesson under the FP32 and bandwidth ceilings" +
                            (" (measured)." if measured else " (a MODEL from traced traffic, not a measurement)."),
                            lambda: roofline(report if measured else {"results": []}, arch, lessons),
                            needs="" if measured else "tracer"))
    return specs


def _save_png(fig: Figure, path: Path, dpi: int = 90) -> int:
    """Save small: 90 dpi, then a 256-colour palette (figures are line art and viridis ramps)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    try:
        from PIL import Image

        buf.seek(0)
        img = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        img.save(path, format="PNG", optimize=True)
    except ImportError:
        path.write_bytes(buf.getvalue())
    return path.stat().st_size


GALLERY_HEADER = """# Gallery

Every figure below is measured from the real kernels: the launch configuration their launchers make
(`Version.launches`), the compiler's resource report (`gpukernels resources`), the memory tracer
(`gpukernels.trace`) and, where a GPU ran them, the benchmark (`benchmarks/results/*.json`).
Regenerate with `make plots` (or `gpukernels plots`); each figure is one function of `gpukernels.viz`,
which returns a matplotlib Figure -- call it in a notebook to draw any lesson, version, thread or block.
"""


def write_gallery(specs_done: list[tuple[FigureSpec, str]], skipped: list[tuple[FigureSpec, str]], path: Path,
                  figures_dir: Path, source: str) -> None:
    lines = [GALLERY_HEADER, f"_Performance data: {source}._", ""]
    section = None
    for spec, fname in specs_done:
        if spec.section != section:
            section = spec.section
            lines += [f"## {section}", ""]
        rel = Path(figures_dir.name) / fname if figures_dir.parent == path.parent else figures_dir / fname
        lines += [f"### {spec.name}", "", spec.caption, "", f"![{spec.caption}]({rel.as_posix()})", ""]
    if skipped:
        lines += ["## Not drawn in this run", ""]
        lines += [f"- `{spec.name}`: {why}" for spec, why in skipped]
        lines.append("")
    path.write_text("\n".join(lines))


def plots_main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    parser = argparse.ArgumentParser(prog="gpukernels plots", description="write every lesson's figures and the "
                                                                         "gallery page")
    parser.add_argument("lessons", nargs="*", metavar="LESSON", help="only these lessons (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures", help="figure folder")
    parser.add_argument("--gallery", type=Path, default=ROOT / "docs" / "gallery.md", help="gallery page")
    parser.add_argument("--arch", default="sm_90", help="architecture for resources and occupancy")
    parser.add_argument("--bench", type=Path, help="benchmark JSON (default: newest benchmarks/results/*.json)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only figures whose name contains one of these")
    args = parser.parse_args(argv)
    unknown = [l for l in args.lessons if l not in _lessons()]
    if unknown:
        parser.error(f"unknown lesson {unknown[0]!r}; choose from {', '.join(_lessons())}")
    report = load_bench(args.bench)
    source = (f"measured, from `{Path(report.get('_path', args.bench or '')).relative_to(ROOT) if report.get('_path') else args.bench}`"
              if report else "no benchmark results yet, so performance figures are a labelled MODEL")
    args.out.mkdir(parents=True, exist_ok=True)
    has_tracer = tracer_available()
    done, skipped = [], []
    for spec in figure_specs(args.arch, report, args.lessons or None):
        if args.only and not any(o in spec.name for o in args.only):
            continue
        if spec.needs == "tracer" and not has_tracer:
            skipped.append((spec, "needs gpukernels.trace, which is not installed yet"))
            continue
        fig = spec.make()
        why = unavailable(fig)
        if why:  # the PNG already there, if any, is left as it is
            skipped.append((spec, why))
            print(f"  {spec.name} not drawn: {why}")
            continue
        size = _save_png(fig, args.out / f"{spec.name}.png")
        done.append((spec, f"{spec.name}.png"))
        print(f"  {args.out / (spec.name + '.png')}  ({size / 1024:.0f} KB)")
    if args.only:  # the page lists every figure of the registry whose file exists
        done_names = {spec.name for spec, _ in done}
        done = [(spec, f"{spec.name}.png") for spec in figure_specs(args.arch, report, args.lessons or None)
                if spec.name in done_names or (args.out / f"{spec.name}.png").exists()]
    write_gallery(done, skipped, args.gallery, args.out, source)
    size = sum((args.out / f).stat().st_size for _, f in done)
    print(f"wrote {args.gallery} with {len(done)} figures ({size / 1e6:.2f} MB)"
          + (f"; {len(skipped)} not drawn (see the page)" if skipped else ""))
    return 0
