"""gpukernels bench --overhead: what one launcher call costs the host, on work small enough that the kernel
itself takes a few microseconds.

For each lesson, its ``optimized`` and its second step (``tiled`` where the lesson has one, else the second entry of
``VERSIONS``), and each kind of array (Numba device arrays, torch tensors, CuPy arrays; a kind whose library is
missing is skipped, and the report says so), ``CALLS`` calls back to back with ``out=`` given, each timed on the host
clock; the row's figure is the median. In the same run, for comparison:

* ``peer_us_per_call``: the torch op that does the same work (``torch.softmax``, ``torch.mm(out=)``,
  ``F.relu(F.conv2d(...))``), timed the same way;
* ``checked_us_per_call``: the same call with the fast path off (`gpukernels._fastlaunch.disable`): every call takes
  the checked path, as every call did before the fast path -- the "before" of the before/after table;
* ``kernel_by_kernel_us_per_call`` (plans of several launches): the same hits with the fast path's CUDA graph
  replay off (``_fastlaunch.GRAPHS``), one ``cuLaunchKernel`` per launch of the plan; ``launches`` counts them;
* ``device_us``: the kernels' own time for one call, from CUDA events around a CUDA graph of the call's launches
  (what ``gpukernels bench`` reports), so that host time and device time stand side by side.

``stages`` splits one call of the checked path into its host stages (array conversion, checks, plan, Numba's
dispatch and launch), beside the fast path's whole call and its driver call alone; ``--figure`` draws them.
docs/overhead.md is the lesson these numbers teach.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import gpukernels
from gpukernels import LESSONS, _fastlaunch
from gpukernels.check import version_inputs

CALLS = 300  # timed calls per row (after warm-up)
WARM = 20
SPIN_UP_S = 1.0  # seconds of untimed calls before the first row (below)
TARGET_US = {"numba": 15.0, "torch": 25.0, "cupy": 25.0}  # the per-call overhead the project aims for on the H200
#: Small work: the kernel takes a few microseconds, so a call's time is its host overhead.
SHAPES = {"softmax": (64, 1024), "matmul": (64, 64, 64), "cbr": (1, 16, 16, 16, 16, 3, 3),
          "tensor_core": (64, 64, 64), "attention": (1, 4, 64, 64, 64)}
KINDS = ("numba", "torch", "cupy")


def versions(lesson: str) -> list[str]:
    """The versions measured: the lesson's second step (``tiled`` if it has one) and ``optimized``."""
    names = list(LESSONS[lesson].VERSIONS)
    second = "tiled" if "tiled" in names else names[1]
    return [second, "optimized"]


def array_kinds() -> tuple[dict, list[str]]:
    """{kind: (to_device(host array), empty(shape))} for the libraries installed, and a note per missing one."""
    from numba import cuda

    kinds = {"numba": (cuda.to_device, lambda shape: cuda.device_array(shape, np.float32))}
    missing = []
    try:
        import torch

        kinds["torch"] = (lambda x: torch.from_numpy(x).cuda(),
                          lambda shape: torch.empty(shape, dtype=torch.float32, device="cuda"))
    except ImportError:
        missing.append("torch is not installed: no torch rows, no peer")
    try:
        import cupy

        kinds["cupy"] = (cupy.asarray, lambda shape: cupy.empty(shape, dtype=cupy.float32))
    except ImportError:
        missing.append("cupy is not installed: no CuPy rows")
    return kinds, missing


def spin_up(fn, seconds: float = SPIN_UP_S) -> int:
    """Call ``fn`` back to back for ``seconds``, untimed, and return how many calls that was. Otherwise the first
    row of a run meets an idle machine: the GPU at its idle clock (345 MHz by nvidia-smi on the H200 machine), the
    CPU's caches cold. A precaution, not a measured fix: on the H200 machines the spread between runs (docs/overhead.md)
    is larger than any first-row effect seen."""
    from numba import cuda

    for _ in range(3):  # the first call compiles and records: the clock starts after it
        fn()
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()
        n += 1
    cuda.synchronize()
    return n


def host_us(fn, calls: int = CALLS, warm: int = WARM) -> float:
    """Median host microseconds of ``fn()`` over ``calls`` back-to-back calls (the GPU is synchronised before and
    after, not between: the calls queue work as a loop in a program would)."""
    from numba import cuda

    for _ in range(warm):
        fn()
    cuda.synchronize()
    times = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        clock = time.perf_counter_ns
        for _ in range(calls):
            t0 = clock()
            fn()
            times.append(clock() - t0)
    finally:
        if gc_was:
            gc.enable()
    cuda.synchronize()
    return statistics.median(times) / 1e3


def _peer(lesson: str, torch, t_inputs, t_out):
    F = torch.nn.functional

    if lesson == "softmax":
        return lambda: torch.softmax(t_inputs[0], dim=-1)
    if lesson == "matmul":
        return lambda: torch.mm(t_inputs[0], t_inputs[1], out=t_out)
    if lesson == "tensor_core":  # float16 in, float32 out, as the lesson's kernels
        from gpukernels._timing import _mm_f32_out

        return lambda: _mm_f32_out(torch, t_inputs[0], t_inputs[1])
    if lesson == "attention":
        return lambda: F.scaled_dot_product_attention(*t_inputs)
    return lambda: F.relu(F.conv2d(t_inputs[0], t_inputs[1], t_inputs[2], padding=1))


def device_us(version, d_inputs, d_out, torch) -> float | None:
    """The call's kernels on the device, per call: CUDA events around a CUDA graph of its launches (None without
    torch, which the graph capture uses)."""
    if torch is None:
        return None
    from gpukernels._timing import Timer

    timer = Timer(torch)
    launches = version.launches(*d_inputs, out=d_out)

    def enqueue(i):
        s = timer.stream()
        for launch in launches:
            launch(stream=s)

    return statistics.median(timer.time(enqueue, 1, budget_ms=200.0)) * 1e3


def measure(lessons=None, kinds=None, log=print) -> dict:
    """The overhead rows for ``lessons`` (default: all) and array ``kinds`` (default: all installed)."""
    from numba import cuda

    available, missing = array_kinds()
    for note in missing:
        log(f"overhead: {note}")
    try:
        import torch

        from gpukernels._timing import _configure_torch

        _configure_torch(torch)
    except ImportError:
        torch = None
    rows, stages_rows = [], []
    lesson0 = (lessons or list(LESSONS))[0]
    version0 = LESSONS[lesson0].VERSIONS[versions(lesson0)[0]]
    host = version_inputs(lesson0, version0.name, LESSONS[lesson0].make_inputs(SHAPES[lesson0], seed=18))
    d_in = [cuda.to_device(x) for x in host]
    d_out = cuda.device_array(LESSONS[lesson0].reference(*host).shape, np.float32)
    log(f"  spin-up: {spin_up(lambda: version0(*d_in, out=d_out))} untimed calls of {lesson0}.{version0.name}")
    for lesson in lessons or list(LESSONS):
        mod = LESSONS[lesson]
        shape = SHAPES[lesson]
        host = mod.make_inputs(shape, seed=18)
        ref = mod.reference(*host)
        peer_us = None
        if torch is not None:
            t_in = [torch.from_numpy(x).cuda() for x in host]
            t_out = torch.empty(ref.shape, device="cuda")
            with torch.no_grad():
                peer_us = host_us(_peer(lesson, torch, t_in, t_out))
            log(f"  {lesson} {shape} peer: {peer_us:.1f} us per call")
        for name in versions(lesson):
            version = mod.VERSIONS[name]
            host = version_inputs(lesson, name, mod.make_inputs(shape, seed=18))  # as this version takes them
            ref = mod.reference(*host)
            d_in = [cuda.to_device(x) for x in host]
            d_out = cuda.device_array(ref.shape, np.float32)
            dev_us = device_us(version, d_in, d_out, torch)
            n_launches = len(version.launches(*d_in, out=d_out))
            for kind, (to, empty) in available.items():
                if kinds and kind not in kinds:
                    continue
                args, out = [to(x) for x in host], empty(ref.shape)
                call = lambda: version(*args, out=out)  # noqa: E731
                fast = host_us(call)
                by_kernel = None
                if n_launches > 1:  # the same hits, kernel by kernel instead of one graph launch
                    _fastlaunch.GRAPHS = False
                    try:
                        by_kernel = host_us(call)
                    finally:
                        _fastlaunch.GRAPHS = True
                _fastlaunch.disable()
                try:
                    checked = host_us(call, calls=min(CALLS, 100))
                finally:
                    _fastlaunch.enable()
                from gpukernels.check import compare, tolerance

                back = out.copy_to_host() if kind == "numba" else (out.cpu().numpy() if kind == "torch"
                                                                    else __import__("cupy").asnumpy(out))
                ok = compare(back, ref, tolerance(lesson, name, host)).ok
                rows.append({"kind": "overhead", "lesson": lesson, "name": name, "array_kind": kind,
                             "shape": list(shape), "us_per_call": fast, "peer_us_per_call": peer_us,
                             "checked_us_per_call": checked, "device_us": dev_us, "ok": ok,
                             "launches": n_launches, "kernel_by_kernel_us_per_call": by_kernel,
                             "target_us": TARGET_US[kind], "meets_target": fast <= TARGET_US[kind]})
                log(f"  {lesson} {name} {kind}: {fast:.1f} us per call (checked path {checked:.1f}, "
                    f"device {dev_us if dev_us is None else round(dev_us, 1)})")
                if name == "optimized" and lesson == "softmax":
                    stages_rows += stages(version, args, out, kind)
    return {"kind": "overhead", "environment": _environment(), "calls": CALLS, "missing": missing,
            "fast_path": dict(_fastlaunch.STATS), "results": rows, "stages": stages_rows}


def _environment() -> dict:
    from gpukernels._timing import environment

    return environment()


def stages(version, args, out, kind: str) -> list[dict]:
    """One call's host time split into stages, each timed alone (medians; the sum is near the checked call's)."""
    from numba import cuda

    from gpukernels._launch import _check_out

    views = [cuda.as_cuda_array(a) if kind != "numba" else a for a in args]
    v_out = cuda.as_cuda_array(out) if kind != "numba" else out
    inputs, params, out_shape = version.check(*views)
    launches = version.plan(*inputs, v_out, **params)
    n = 100
    measured = {
        "array conversion (cuda.as_cuda_array)": host_us(
            lambda: [cuda.as_cuda_array(a) for a in args + [out]], calls=n) if kind != "numba" else 0.0,
        "argument checks": host_us(lambda: (version.check(*views), _check_out(v_out, out_shape)), calls=n),
        "plan": host_us(lambda: version.plan(*inputs, v_out, **params), calls=n),
        "Numba dispatch + launch": host_us(lambda: [launch() for launch in launches], calls=n),
    }
    fast = host_us(lambda: version(*args, out=out), calls=n)
    entry = next((e for e in version._fast.values()), None)
    driver = None
    if entry is not None:
        bases = [_fastlaunch.read_array(a)[0] for a in args] + [_fastlaunch.read_array(out)[0]]
        driver = host_us(lambda: entry.run(_fastlaunch.BACKEND, bases, 0), calls=n)
    rows = [{"kind": "overhead_stage", "lesson": version.lesson, "name": version.name, "array_kind": kind,
             "path": "checked", "stage": stage, "us": us} for stage, us in measured.items()]
    rows.append({"kind": "overhead_stage", "lesson": version.lesson, "name": version.name, "array_kind": kind,
                 "path": "fast", "stage": "whole call", "us": fast})
    if driver is not None:
        rows.append({"kind": "overhead_stage", "lesson": version.lesson, "name": version.name, "array_kind": kind,
                     "path": "fast", "stage": "of which cuLaunchKernel (patched parameters)", "us": driver})
    return rows


# ----------------------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------------------


def _fmt(v, spec=".1f"):
    return "-" if v is None else f"{v:{spec}}"


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    env = report.get("environment", {})
    table = Table(title=f"gpukernels bench --overhead -- {env.get('device')}: host us per call, median of "
                        f"{report.get('calls', CALLS)} back-to-back calls")
    for col in ("lesson", "version", "arrays", "us/call", "target", "peer us/call", "checked path", "x faster",
                "device us"):
        table.add_column(col, justify="left" if col in ("lesson", "version", "arrays") else "right")
    for r in report["results"]:
        met = "[green]" if r["meets_target"] else "[red]"
        table.add_row(r["lesson"], r["name"] if r["ok"] else f"{r['name']} (WRONG)", r["array_kind"],
                      f"{met}{r['us_per_call']:.1f}", f"<= {r['target_us']:.0f}", _fmt(r["peer_us_per_call"]),
                      _fmt(r["checked_us_per_call"]),
                      _fmt(r["checked_us_per_call"] / r["us_per_call"] if r["us_per_call"] else None),
                      _fmt(r["device_us"]))
    console = Console(width=140)
    console.print(table)
    for note in report.get("missing", []):
        console.print(f"skipped: {note}")
    if report.get("stages"):
        st = Table(title="one call of softmax.optimized, stage by stage (host us, medians)")
        for col in ("arrays", "path", "stage", "us"):
            st.add_column(col, justify="right" if col == "us" else "left")
        for r in report["stages"]:
            st.add_row(r["array_kind"], r["path"], r["stage"], f"{r['us']:.1f}")
        console.print(st)


def figure(report: dict, path: Path) -> None:
    """Stacked bars: the checked path's stages per array kind, beside the fast path's whole call, the peer's call
    and the kernel's device time (softmax.optimized at the overhead shape)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages_ = report["stages"]
    kinds = list(dict.fromkeys(r["array_kind"] for r in stages_))
    checked_stages = list(dict.fromkeys(r["stage"] for r in stages_ if r["path"] == "checked"))
    row = {(r["array_kind"], r["path"], r["stage"]): r["us"] for r in stages_}
    soft = next((r for r in report["results"] if r["lesson"] == "softmax" and r["name"] == "optimized"), {})
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ticks, labels = [], []

    def bar(x, us, label, bottom=0.0, **kw):
        ax.bar(x, us, bottom=bottom, label=label, **kw)

    x = 0.0
    for kind in kinds:
        bottom = 0.0
        for i, stage in enumerate(checked_stages):
            us = row.get((kind, "checked", stage), 0.0)
            bar(x, us, stage if kind == kinds[0] else None, bottom, color=colors(i))
            bottom += us
        ticks.append(x), labels.append(f"{kind}\nchecked path")
        bar(x + 1, row.get((kind, "fast", "whole call"), 0.0), "fast path, whole call" if kind == kinds[0] else None,
            color=colors(len(checked_stages)))
        ticks.append(x + 1), labels.append(f"{kind}\nfast path")
        x += 2.5
    if soft.get("peer_us_per_call"):
        bar(x, soft["peer_us_per_call"], "torch.softmax (host, per call)", color="0.5")
        ticks.append(x), labels.append("torch\npeer")
        x += 1
    if soft.get("device_us"):
        bar(x, soft["device_us"], "the kernel on the device (CUDA graph, events)", color="black")
        ticks.append(x), labels.append("device\ntime")
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("microseconds per call")
    env = report.get("environment", {})
    ax.set_title(f"softmax.optimized {SHAPES['softmax'][0]}x{SHAPES['softmax'][1]}: host time per call against "
                 f"device time ({env.get('device')}, {str(env.get('date', ''))[:10]})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def overhead_main(argv: list[str]) -> int:
    from .cli import ArgumentParser, input_json, output_file

    parser = ArgumentParser(prog="gpukernels bench --overhead",
                            description=" ".join(__doc__.split("\n\n")[0].split()))  # its first sentence
    parser.add_argument("lessons", nargs="*", help=f"lessons among {', '.join(LESSONS)} (default: all)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, help="array kinds (default: every one installed)")
    parser.add_argument("--json", type=Path, help="write the rows to this JSON file")
    parser.add_argument("--from-json", type=Path, help="don't measure: print (and draw) this file")
    parser.add_argument("--figure", type=Path, help="draw the stage-by-stage figure to this PNG")
    args = parser.parse_args(argv)
    unknown = [name for name in args.lessons if name not in LESSONS]
    if unknown:
        parser.error(f"unknown lesson {unknown[0]!r}; choose from {', '.join(LESSONS)}")
    # files checked before anything is measured: a typo must cost neither a run nor its results
    for option, path in (("--json", args.json), ("--figure", args.figure)):
        if path is not None:
            output_file(path, option)
    if args.from_json:
        report = input_json(args.from_json, "--from-json", key="results",
                            what="a `gpukernels bench --overhead --json` report", report="overhead")
    else:
        if gpukernels.MODE != "gpu":
            print("gpukernels bench --overhead measures host time per launch on a GPU; this is the simulator. "
                  "docs/overhead.md shows figures measured on an H200.")
            return 0
        if not _fastlaunch.ENABLED:
            print("note: GPUKERNELS_FAST_LAUNCH=0 -- the fast path is off; enabling it for this measurement",
                  file=sys.stderr)
            _fastlaunch.enable()
        report = measure(args.lessons or None, args.kinds, log=lambda m: print(m, file=sys.stderr, flush=True))
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
    print_report(report)
    if args.figure and report.get("stages"):
        figure(report, args.figure)
    return 0 if all(r["ok"] for r in report["results"]) else 1
