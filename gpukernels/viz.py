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
    rows = _res.report([lesson] if lesson else None, arch, shape_key)
    for r in rows:
        key = (r.lesson, r.version)
        _LAUNCH_COUNTS[key] = max(_LAUNCH_COUNTS.get(key, 0), r.index + 1)
    return rows


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
    rows = _resource_rows(lesson, a.name, shape_key)
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
    rows = _resource_rows(lesson, a.name, shape_key)
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


def load_bench(path: str | Path | None = None) -> dict | None:
    """The benchmark report at ``path``, else the newest ``benchmarks/results/*.json``, else None."""
    if path is not None:
        return json.loads(Path(path).read_text())
    files = sorted(RESULTS_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime) if RESULTS_DIR.is_dir() else []
    for p in reversed(files):
        try:
            report = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("results"):
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
    ax.set_title(f"MODEL, not a measurement -- {lesson}: the roofline's bound for each version's traced "
                 f"global traffic (run `gpukernels bench` on a GPU to measure)", fontsize=9.5, loc="left")
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
    for (lesson, name, x, y, peer, vi), ly in zip(points, label_y):
        li = lessons.index(lesson)
        n_versions = len(_versions(lesson))
        ax.plot(x, y, MARKERS[li % len(MARKERS)], markersize=8 if not peer else 10, zorder=3,
                markerfacecolor="white" if peer else _shades(n_versions)[min(vi, n_versions - 1)],
                markeredgecolor="black")
        ax.annotate(f"{lesson}.{name}" if not peer else f"{lesson}: {name}", (x, y), xytext=(x * 1.25, ly),
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
    title = ("Roofline (measured): left of the ridge, bandwidth caps the speed; right of it, only FP32 peak"
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


def traffic(lesson: str, version: str, shape=None) -> dict:
    """Global loads and stores (elements) of one version at ``shape`` (default: the trace shape), counted by
    the tracer."""
    raise NotImplementedError("needs gpukernels.trace")


# ----------------------------------------------------------------------------------------------------------
# make plots: every figure of every lesson, and docs/gallery.md
# ----------------------------------------------------------------------------------------------------------


@dataclass
class FigureSpec:
    """One figure of the gallery: file stem, section, one sentence for the gallery, and how to make it."""

    name: str
    section: str
    caption: str
    make: Callable[[], Figure]
    needs: str = ""  # "tracer" when it needs gpukernels.trace


def tracer_available() -> bool:
    try:
        from . import trace  # noqa: F401
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
    done, skipped, total = [], [], 0
    for spec in figure_specs(args.arch, report, args.lessons or None):
        if args.only and not any(o in spec.name for o in args.only):
            continue
        if spec.needs == "tracer" and not has_tracer:
            skipped.append((spec, "needs gpukernels.trace, which is not installed yet"))
            continue
        fig = spec.make()
        size = _save_png(fig, args.out / f"{spec.name}.png")
        total += size
        done.append((spec, f"{spec.name}.png"))
        print(f"  {args.out / (spec.name + '.png')}  ({size / 1024:.0f} KB)")
    if not args.only:
        write_gallery(done, skipped, args.gallery, args.out, source)
        print(f"wrote {args.gallery} with {len(done)} figures ({total / 1e6:.2f} MB)"
              + (f"; {len(skipped)} not drawn (see the page)" if skipped else ""))
    return 0
