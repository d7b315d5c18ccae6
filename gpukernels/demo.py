"""gpukernels demo [LESSON|all] [--size ...] [--save DIR]: the classroom demo.

For each lesson it runs every version in ``VERSIONS`` on a meaningful size, checks each against the float64
reference, and prints one table:

* on a GPU: median time (CUDA events, the benchmark's harness and budget), throughput, speed-up over
  naive and the library peer measured in the same run;
* in the simulator: correctness and the global-memory traffic the tracer *counted* while the kernel ran
  (bytes loaded and stored, loads per input element) -- and no claim about speed, because the simulator has
  none to measure.

With ``--save DIR`` it also writes the lesson's key figures (performance bars, roofline, reuse heatmap, tile
phases) as PNG files. The command line itself is `gpukernels.demo_cli`; this module is what it runs (and what the
classroom's narrated sequence and the notebooks call).
"""

from __future__ import annotations

import math
from pathlib import Path

import gpukernels
from gpukernels import LESSONS
from gpukernels.check import compare, reference, supports, tolerance, version_inputs


def demo_sim(lesson: str, shape: tuple, progress=None, task=None) -> list[dict]:
    """Run every version in the simulator: check it (its output poisoned with NaN), and count its global traffic
    with the tracer. Each version gets the inputs it takes (`gpukernels.check.version_inputs`: attention's
    tensor-core steps float16 copies) and is checked against the reference of those; a version that does not run at
    ``shape`` (`supports`) gets a row that says why (``skipped``) instead."""
    import numpy as np
    from numba import cuda

    try:
        from gpukernels.trace import reuse
        from gpukernels.trace import trace as _trace
    except ImportError:  # the tracer is optional: correctness alone still makes a demo
        _trace = None
    mod = LESSONS[lesson]
    host = mod.make_inputs(shape, seed=None)
    refs: dict = {}  # one reference per kind of inputs (attention: float32, and the float16 steps' float16)
    rows = []
    for name, version in mod.VERSIONS.items():
        row = {"lesson": lesson, "shape": shape, "version": name, "idea": version.idea}
        inputs = version_inputs(lesson, name, host)
        if not supports(lesson, name, shape):
            row.update(ok=True, rel_error=None, skipped=_why_not(version, inputs), check="not run")
            rows.append(row)
            if progress is not None:
                progress.advance(task)
            continue
        kind = tuple(str(x.dtype) for x in inputs) + ((name,) if name in getattr(mod, "OWN_CHECK", ()) else ())
        if kind not in refs:
            refs[kind] = reference(lesson, name, inputs)
        ref = refs[kind]
        # the least a version can move: its inputs, as it takes them, read once and the float32 output written once
        row["min_bytes"] = sum(int(x.nbytes) for x in inputs) + 4 * int(np.prod(ref.shape))
        # The output starts as NaN on the device, so that an element no thread writes fails the check.
        d_out = cuda.to_device(np.full(ref.shape, np.nan, np.float32))
        if _trace is not None:
            with _trace() as t:
                version(*inputs, out=d_out)
            per_array: dict = {}  # summed over the version's launches (naive CBR makes three)
            for a in t.traffic("global"):
                loads, stores, elements = per_array.get(a.array, (0, 0, a.elements))
                per_array[a.array] = (loads + a.loads, stores + a.stores, elements)
                row["loaded_bytes"] = row.get("loaded_bytes", 0) + a.bytes_loaded
                row["stored_bytes"] = row.get("stored_bytes", 0) + a.bytes_stored
            row["reuse"] = ", ".join(f"{name} {reuse(loads, elements):.1f}" for name, (loads, _, elements)
                                     in per_array.items() if loads)
            # Per launch and array, for the notebooks' tables (kept with the rest in notebooks/traced/, so that a
            # notebook shows every version's traffic without tracing every version again).
            coalesced = t.coalescing().per_kernel  # kernel -> share of the 32-byte sectors its accesses needed
            row["traffic"] = [{"launch": a.launch, "kernel": a.kernel, "array": a.array, "loads": a.loads,
                               "stores": a.stores, "bytes_loaded": a.bytes_loaded, "bytes_stored": a.bytes_stored,
                               "loads_per_element": a.loads_per_element,
                               "kernel_coalescing": coalesced.get(a.kernel, 1.0)} for a in t.traffic("global")]
        else:
            version(*inputs, out=d_out)
        check = compare(d_out.copy_to_host(), ref, tolerance(lesson, name, inputs))
        row.update(ok=check.ok, rel_error=check.rel_error, detail="" if check.ok else str(check), check=str(check))
        rows.append(row)
        if progress is not None:
            progress.advance(task)
    return rows


def _why_not(version, inputs) -> str:
    """The version's own reason for refusing these inputs (its LaunchError), for a row that was not run."""
    from gpukernels._launch import LaunchError

    try:
        version.launches(*inputs)
    except LaunchError as err:
        return str(err)
    return "it does not take this shape"


def demo_gpu(lesson: str, shape: tuple, progress=None, task=None) -> list[dict]:
    from gpukernels import bench

    try:
        import torch

        bench._configure_torch(torch)
    except ImportError:
        torch = None
    timer = bench.Timer(torch)
    results = bench.bench_shape(lesson, shape, timer, torch, log=lambda *_: None)
    report = {"results": [dict(vars(r), tflops=r.tflops, gbps=r.gbps) for r in results], "ceilings": {}}
    if progress is not None:
        progress.advance(task, len(LESSONS[lesson].VERSIONS))
    return bench.rows(report)


def sim_table(rows: list[dict]):
    """``demo_sim``'s rows as a table (``gpukernels._tables.Table``): printed by the demo, shown by the notebooks'
    ``traffic_table``. ``x minimum``: global bytes moved / the lesson's ``min_bytes`` (each input read once, the
    output written once; a row's own ``min_bytes`` where it has one: attention's float16 steps read half the bytes)."""
    from gpukernels._tables import Table

    lesson, shape = rows[0]["lesson"], rows[0]["shape"]
    body = []
    for r in rows:
        floor = r.get("min_bytes") or LESSONS[lesson].min_bytes(shape)
        moved = (r.get("loaded_bytes") or 0) + (r.get("stored_bytes") or 0)
        if r.get("skipped"):
            body.append([r["version"], r["idea"], "not run", "-", "-", "-", "-", "-"])
            continue
        body.append([r["version"], r["idea"], "yes" if r["ok"] else "NO", f"{r['rel_error']:.1e}",
                     _bytes(r.get("loaded_bytes")), _bytes(r.get("stored_bytes")),
                     f"{moved / floor:.1f}x" if "loaded_bytes" in r else "-", r.get("reuse", "-")])
    return Table(f"{lesson} {'x'.join(map(str, shape))} -- simulator: correctness and counted traffic "
                 "(no timings: the simulator cannot measure GPU speed)",
                 ["version", "what it changes", "correct", "rel. error", "global loads", "global stores", "x minimum",
                  "loads/element"], body)


def print_sim_table(console, rows: list[dict]) -> None:
    from rich.markup import escape

    from ._terminal import fit

    lesson = rows[0]["lesson"]
    console.print(fit(sim_table(rows), console.width, prose=["loads/element", "what it changes"],
                      more=f"a wider terminal shows them whole; help(gpukernels.{lesson}.NAME) says what a step changes"))
    for r in rows:
        if r.get("skipped"):
            console.print(f"[yellow]{r['lesson']}.{r['version']} not run at this shape:[/] {escape(r['skipped'])}",
                          highlight=False)
        elif not r["ok"]:
            console.print(f"[red]{r['lesson']}.{r['version']}:[/] {r['detail']}")


def gpu_table(rows: list[dict], title: str = "", shapes: bool = False):
    """Measured rows (``bench.rows``) as a table (``gpukernels._tables.Table``): printed by the demo on a GPU,
    shown by the notebooks' ``results_table`` (with ``shapes``: a shape column, for rows of several shapes)."""
    from gpukernels._tables import Table

    numbers = ("ms", "TFLOP/s", "GB/s", "x naive", "x peer")
    body = [([r["shape"]] if shapes else []) + [r["version"] if r["ok"] else f"{r['version']} (WRONG)",
                                                _num(r["ms"], ".4f"), _num(r["tflops"], ".2f"), _num(r["gbps"], ".0f"),
                                                _num(r["speedup"], ".1f"), _num(r["of_peer"], ".2f")] for r in rows]
    return Table(title, (["shape"] if shapes else []) + ["version", *numbers], body, right=numbers)


def print_gpu_table(console, rows: list[dict], lesson: str, shape: tuple) -> None:
    from ._terminal import fit

    console.print(fit(gpu_table(rows, f"{lesson} {'x'.join(map(str, shape))} on "
                                      f"{gpukernels.device_info().get('device')}"), console.width))


def _num(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def save_figures(lesson: str, directory: Path, console, in_child: bool | None = None) -> list[Path]:
    """The lesson's key figures, from gpukernels.viz (skipped with a note where a figure can't be drawn).

    Most figures come from the tracer, which runs only on the simulator; on a GPU machine numba.cuda is the
    real target in this process, so there the figures are drawn by ``gpukernels plots`` in a simulator child
    process (as the notebooks do); its performance figures show the committed GPU results, labelled as such."""
    if gpukernels.MODE == "gpu" if in_child is None else in_child:
        from gpukernels._modes import run_in_mode

        proc = run_in_mode("sim", module="gpukernels", env={"MPLBACKEND": "Agg"},
                           args=["plots", lesson, "--out", directory, "--gallery", directory / "gallery.md"])
        if proc.returncode != 0:
            console.print(f"[yellow]figures skipped: the simulator child failed:\n{proc.stderr[-2000:]}[/]")
        return sorted(directory.glob("*.png"))
    from rich.markup import escape

    try:
        from gpukernels import viz
    except ImportError as err:
        console.print(f"[yellow]figures skipped: gpukernels.viz unavailable ({err})[/]")
        return []
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in viz.figure_specs(lessons=[lesson]):
        try:
            fig = spec.make()
        except Exception as err:  # one figure failing must not stop the demo
            console.print(f"[yellow]figure {spec.name} skipped: {err}[/]")
            continue
        if viz.unavailable(fig):  # e.g. occupancy without the CUDA compiler: one line, no PNG
            console.print(f"[yellow]figure {spec.name} skipped:[/] {escape(viz.unavailable(fig))}", highlight=False)
            continue
        path = directory / f"{spec.name}.png"
        viz._save_png(fig, path)
        written.append(path)
    return written
