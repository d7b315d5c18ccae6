"""What the notebooks need besides the lessons, the tracer and the figures -- nothing here is a kernel, an
analysis or a plot:

* ``where_and_when()``  the first output of every notebook: device, mode, date and package versions (and the
  small-PNG display of figures, ``png``);
* ``on_simulator(fn, *args)``  call ``fn`` where the tracer works. In simulator mode that is a plain call; on a
  GPU machine (where ``numba.cuda`` is the real CUDA target and cannot also be the simulator) it runs ``fn`` in a
  simulator child process (``gpukernels._modes.start_in_mode``) kept for the session, and returns its result. A
  kernel defined in a notebook cell can be passed as an argument: the child re-runs the source of that cell;
* ``run_traced`` and ``try_launch``: a lesson version (or a cell's kernel with its launch plan) under the
  tracer; a launch that may fail, its error returned as a message;
* tables, each a ``gpukernels._tables.Table`` that a notebook shows as Markdown: ``race_table`` (the tracer's
  own hazards table), ``resource_table``, ``results_table`` / ``measurements`` / ``committed_results`` (the
  measured performance, labelled with where and when), ``traffic_table`` (the demo's counted traffic), and
  ``markdown_table`` for a notebook's own rows.

Figures are displayed at ``DPI`` dots per inch so that the committed notebooks stay small. The notebooks import
it as ``from gpukernels.notebook import ...``.
"""

from __future__ import annotations

import ast
import atexit
import datetime as _dt
import linecache
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gpukernels

from ._tables import Table

DPI = 80
GPU = gpukernels.MODE == "gpu"
# on_simulator uses a child process on a GPU; GPUKERNELS_NOTEBOOK_CHILD=1 forces that path in simulator mode too
# (to test it).
CHILD_VAR = "GPUKERNELS_NOTEBOOK_CHILD"


def _use_child() -> bool:
    return GPU or os.environ.get(CHILD_VAR) == "1"


# ----------------------------------------------------------------------------------------------------------
# Where and when
# ----------------------------------------------------------------------------------------------------------


def where_and_when() -> dict:
    """Print (and return) where and when this notebook ran; installs the small-figure display and silences Numba's
    performance warnings (`quiet_performance_warnings`)."""
    _small_figures()
    quiet_performance_warnings()
    info = gpukernels.device_info()
    now = _dt.datetime.now(_dt.timezone.utc)
    device = info["device"]
    if info.get("compute_capability"):
        device += f" (compute capability {info['compute_capability']}, {info['sm_count']} SMs, " \
                  f"driver {info.get('driver_version')})"
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
    print(f"Ran on:  {device}")
    print(f"Mode:    {info['mode']} ({info['reason']})")
    print(f"Date:    {now:%Y-%m-%d %H:%M} UTC")
    print(f"Python {info['python']}; {versions}")
    for w in info["warnings"]:
        print(f"WARNING: {w}")
    return info


def quiet_performance_warnings() -> None:
    """Ignore Numba's NumbaPerformanceWarning for the rest of the session. On a GPU numba-cuda issues one at every
    launch of fewer than 128 blocks ("Grid size 3 will likely result in GPU under-utilization"): the notebooks launch
    small grids on purpose, to be read, and a warning block naming a file of the machine's Python under each cell
    said nothing to a student. numba-cuda has its own class of that name besides Numba's: both are ignored."""
    import importlib
    import warnings

    for module in ("numba.core.errors", "numba.cuda.core.errors"):
        try:
            category = importlib.import_module(module).NumbaPerformanceWarning
        except (ImportError, AttributeError):  # a Mac without numba-cuda, another Numba
            continue
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("ignore", message=r".*will likely result in GPU under-utilization")


def _small_figures() -> None:
    """Show matplotlib Figures (gpukernels.viz returns them) as one small PNG each: DPI dots per inch, 256 colours."""
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return
    formatters = ip.display_formatter.formatters
    formatters["image/png"].for_type(Figure, png)
    for mime in ("image/svg+xml", "application/pdf", "image/jpeg"):  # no second copy of the image
        formatters[mime].pop(Figure, None)
    formatters["text/plain"].for_type(Figure, lambda fig, p, cycle: p.text(""))  # no "<Figure size ...>"


def png(fig, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes, quantized to a 256-colour palette (the figures are line art and colour ramps)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white", bbox_inches="tight")
    try:
        from PIL import Image
    except ImportError:
        return buf.getvalue()
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


# ----------------------------------------------------------------------------------------------------------
# Running simulator-only work (the tracer) from a GPU session
# ----------------------------------------------------------------------------------------------------------


@dataclass
class _CellKernel:
    """A kernel defined in a notebook cell, sent to the child as the source of that cell."""

    name: str
    source: str


def _cell_kernel(obj):
    """If ``obj`` is a @cuda.jit kernel defined in a notebook cell, its name and cell source; else None."""
    func = getattr(obj, "py_func", None)
    if func is None or getattr(func, "__module__", None) != "__main__":
        return None
    lines = linecache.getlines(func.__code__.co_filename)
    if not lines:
        raise RuntimeError(f"cannot find the source of {func.__name__} to run it on the simulator")
    source = "".join(lines)
    try:  # IPython syntax (%magics, !commands) to Python, line numbers unchanged
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:
        pass
    return _CellKernel(func.__name__, source)


def on_simulator(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the CUDA simulator: here in simulator mode; on a GPU, in a simulator child
    process started on first use and kept for the session (so the tracer's per-process caches are shared).

    ``fn`` must be importable (a function of gpukernels or of this module); arguments and the result must be
    picklable. Kernels defined in the notebook may be passed: the child runs the imports, functions and literal
    constants of the cell that defines them (with ``cuda``, ``float32``, ``np`` and ``math`` already imported).
    """
    if not _use_child():
        return fn(*args, **kwargs)
    args = tuple(_cell_kernel(a) or a for a in args)
    kwargs = {k: _cell_kernel(v) or v for k, v in kwargs.items()}
    child = _simulator_child()
    try:
        pickle.dump((fn, args, kwargs), child.stdin)
        child.stdin.flush()
        ok, value, printed = pickle.load(child.stdout)
    except (EOFError, BrokenPipeError, pickle.UnpicklingError) as err:
        child.kill()
        raise RuntimeError(f"the simulator child process died ({type(err).__name__}); its errors went to the "
                           "Jupyter server's log. The next call starts a new one.") from None
    except BaseException:  # interrupted (the kernel's stop button): the reply would arrive out of turn
        child.kill()
        raise
    print(printed, end="")
    if not ok:
        raise value
    return value


_CHILD_PROC = None


def _simulator_child():
    global _CHILD_PROC
    if _CHILD_PROC is None or _CHILD_PROC.poll() is not None:
        from ._modes import start_in_mode

        _CHILD_PROC = start_in_mode("sim", "from gpukernels.notebook import _serve; _serve()",
                                    env={"MPLBACKEND": "Agg", CHILD_VAR: "0"}, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE,
                                    start_new_session=True)  # Jupyter's interrupts go to the kernel only
        atexit.register(_CHILD_PROC.kill)
    return _CHILD_PROC


def _serve() -> None:
    """The child's loop (simulator mode): read a pickled job from stdin, run it, pickle (ok, result, printed
    text) to stdout; stop at end of input (when the notebook's kernel goes away)."""
    assert gpukernels.MODE == "sim", gpukernels.MODE
    import contextlib
    import io

    replies = os.fdopen(os.dup(1), "wb")  # the protocol's channel; fd 1 itself now goes to stderr,
    os.dup2(2, 1)                         # so that stray output cannot corrupt it
    jobs = sys.stdin.buffer
    while True:
        try:
            fn, args, kwargs = pickle.load(jobs)
        except EOFError:
            return
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                value = fn(*[_rebuild(a) for a in args], **{k: _rebuild(v) for k, v in kwargs.items()})
            reply = (True, value, printed.getvalue())
            data = pickle.dumps(reply)
        except Exception as err:  # sent back and re-raised in the notebook
            try:
                data = pickle.dumps((False, err, printed.getvalue()))
                pickle.loads(data)  # some exception classes cannot be rebuilt from their pickle
            except Exception:
                data = pickle.dumps((False, RuntimeError(f"{type(err).__name__}: {err}"), printed.getvalue()))
        replies.write(data)
        replies.flush()


def _rebuild(x):
    """A kernel sent as its cell's source: run the cell and return the kernel."""
    if not isinstance(x, _CellKernel):
        return x
    import math

    import numpy as np
    from numba import cuda, float32

    ns = {"__name__": "__main__", "cuda": cuda, "float32": float32, "np": np, "math": math}
    filename = f"<notebook cell defining {x.name}>"
    # in linecache, as IPython does, so that the simulator and the tracer can quote and name its lines
    linecache.cache[filename] = (len(x.source), None, x.source.splitlines(True), filename)
    # Only the cell's definitions: imports, functions and constants -- not the statements that use them
    # (which may call on_simulator itself). Line numbers stay those of the cell.
    tree = ast.parse(x.source, filename)
    tree.body = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))
                 or (isinstance(node, ast.Assign) and _is_literal(node.value))]
    exec(compile(tree, filename, "exec"), ns)
    return ns[x.name]


def _is_literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except Exception:  # ValueError for non-literals; others for odd nodes
        return False
    return True


# ----------------------------------------------------------------------------------------------------------
# Small pieces of glue used through on_simulator
# ----------------------------------------------------------------------------------------------------------


#: The versions the notebooks draw event figures of (reuse maps, tile phases) after checking every version with
#: `run_traced`: their traces keep the event log, so that the figures need no second simulation. (Every version's
#: events would cost more than they save: the register-blocked steps' logs are the largest.)
FIGURE_VERSIONS = {"matmul": ("naive", "coalesced", "tiled"), "cbr": ("naive", "fused_direct"),
                   "softmax": ("naive",)}


def run_traced(lesson: str, version: str, shape, kernel=None, seed: int = 0):
    """Run ``lesson.VERSIONS[version]`` on inputs of ``shape`` under the tracer -- with its kernel replaced by
    ``kernel`` if given (same launch configuration: the launcher's own plan). Returns (CheckResult, Summary)."""
    import dataclasses

    import numpy as np
    from numba import cuda

    from gpukernels.check import compare, reference, tolerance, version_inputs

    mod = gpukernels.LESSONS[lesson]
    inputs = version_inputs(lesson, version, mod.make_inputs(shape, seed))  # as the version takes them
    ref = reference(lesson, version, inputs)
    d_inputs = [cuda.to_device(x) for x in inputs]
    out = cuda.to_device(np.full(ref.shape, np.nan, np.float32))  # poisoned: unwritten elements show up
    launches = mod.VERSIONS[version].launches(*d_inputs, out=out)
    if kernel is not None:
        launches = [dataclasses.replace(launch, kernel=kernel) for launch in launches]
    keep = kernel is None and version in FIGURE_VERSIONS.get(lesson, ())
    with gpukernels.trace(events=keep) as t:
        for launch in launches:
            launch()
    if keep:  # the notebook's figures of this version at this shape reuse this very trace (viz.traced's cache)
        from gpukernels.viz.traced import remember

        remember(lesson, version, shape, seed, t, launches, d_inputs)
    return compare(out.copy_to_host(), ref, tolerance(lesson, version, inputs)), t.summary()


def try_launch(kernel, grid, block, *arrays):
    """``kernel[grid, block]`` on device copies of host ``arrays``; returns (the arrays after the launch, the
    error as a message or None) -- for cells that show what goes wrong."""
    from numba import cuda

    d_arrays = [cuda.to_device(a) for a in arrays]
    error = None
    try:
        kernel[grid, block](*d_arrays)
        cuda.synchronize()
    except Exception as err:  # shown to the student, not raised
        error = f"{type(err).__name__}: {err}"
    return [d.copy_to_host() for d in d_arrays], error


# ----------------------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------------------


def markdown_table(header, rows) -> Table:
    """A notebook's own rows as a table (shown as Markdown)."""
    return Table("", list(header), [list(r) for r in rows])


def _labelled(label: str, table: Table | None = None, note: str = ""):
    """Markdown text: a label, a table, a note -- an IPython Markdown object (plain text outside IPython)."""
    text = "\n\n".join(part for part in (label, table.markdown() if table else "", note) if part)
    try:
        from IPython.display import Markdown

        return Markdown(text)
    except ImportError:
        return text


def _bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def resource_table(lesson: str, arch: str = "sm_90"):
    """``gpukernels.resources.report`` for one lesson (compiled for ``arch``, no GPU needed): the table that
    ``gpukernels resources`` prints (``resources.table``), labelled with the shape that set the launches."""
    from gpukernels import resources

    try:
        rows = resources.report([lesson], arch, what="the resource table")
    except resources.ToolchainMissing as err:  # a Mac: one line, and the notebook goes on
        return _labelled(str(err))
    if not rows:
        return _labelled(f"No kernels of {lesson} to compile.")
    return _labelled(f"Launch configuration at shape {'x'.join(map(str, rows[0].shape))}:", resources.table(rows))


def race_table(summary, kernel=None):
    """The tracer's own hazards table (``summary.tables()["hazards"]``: races and uninitialised shared reads),
    followed, when the kernel is given, by the source of each line it names (the line numbers of a kernel
    defined in a notebook cell are lines of that cell)."""
    table = summary.tables()["hazards"]
    func = getattr(kernel, "py_func", kernel)
    if func is None:
        return table
    lines = sorted({int(loc.rsplit(":", 1)[1]) for r in summary.hazards.races
                    for loc in (r.first_location, r.second_location)}
                   | {int(u.location.rsplit(":", 1)[1]) for u in summary.hazards.uninitialized})
    source = linecache.getlines(func.__code__.co_filename)
    quoted = [f"- line {n}: `{source[n - 1].strip()}`" for n in lines if 0 < n <= len(source)]
    return _labelled("", table, "\n".join(quoted))


#: Set (to anything but 0) by the test suite when it executes a notebook on a GPU: `measurements` then times the
#: first and the last version only, at the lesson's small ``demo_sim`` shape. Compiling and timing all twenty-one
#: matmul versions at 4096^3 was 139 of the notebook's 199 s on the H200 -- most of the GPU suite's wall time --
#: and checking even two of them at the full shape against a float64 reference took 43-57 s a notebook; every
#: version's correctness and speed have tests and `gpukernels bench` of their own.
QUICK_ENV = "GPUKERNELS_NOTEBOOK_QUICK"


def measurements(lesson: str):
    """(report, label) for the performance table of ``lesson``.

    On a GPU: every version (with `QUICK_ENV` set: the first and the last, at ``SHAPES["demo_sim"]``) and the library peer timed now with the benchmark harness (``gpukernels.bench.run``:
    check first, inputs rotated past L2, CUDA events, median) at ``SHAPES["demo_gpu"]``, on a small budget (at
    least 5 runs, ~0.3 s a version) so that the notebooks stay quick -- ``gpukernels bench`` takes the full one.
    In the simulator: the newest GPU report committed in ``benchmarks/results/``, or None when there is none.
    """
    from gpukernels import bench

    if GPU:
        quick = os.environ.get(QUICK_ENV, "") not in ("", "0")
        shape = tuple(gpukernels.LESSONS[lesson].SHAPES["demo_sim" if quick else "demo_gpu"])
        names = list(gpukernels.LESSONS[lesson].VERSIONS)
        if quick:  # the test suite's run: the first and the last version, at a small shape; same code paths
            names = [names[0], names[-1]]
        report = bench.run([lesson], [shape], versions=names, log=lambda *_: None, min_runs=5, budget_ms=300.0)
        which = (f"only {' and '.join(names)} at {'x'.join(map(str, shape))}: {QUICK_ENV} is set, "
                 if quick else "")
        return report, (f"**Measured now on {report['environment'].get('device')}** ({which}{report['method']}; "
                        f"median of at least 5 runs: a small budget, `gpukernels bench` takes more)")
    return committed_results(lesson)


def committed_results(lesson: str | None = None):
    """(report, label): the newest benchmark report committed in ``benchmarks/results/`` (with results for
    ``lesson`` if given), labelled with where and when it was measured; (None, why) if there is none."""
    from gpukernels import viz

    report = viz.load_bench()
    if report is None or (lesson is not None and not viz.bench_results(report, lesson)[1]):
        return None, ("**No GPU measurements committed yet** (`gpukernels bench --json benchmarks/results/NAME.json` "
                      "on a GPU writes them), and the simulator has no speed to measure.")
    env = report.get("environment", {})
    here = "" if GPU else ", not on this machine"
    date = (env.get("date") or "")[:10]
    # a lesson's rows merged in from a later run carry that run's date ("run of 2026-12-04T...")
    notes = {r.get("note", "") for r in report.get("results", []) if lesson is None or r.get("lesson") == lesson}
    if notes and all(n.startswith("run of ") for n in notes) and len({n[7:17] for n in notes}) == 1:
        date = notes.pop()[7:17]
    return report, (f"**Measured on {env.get('device')} on {date}{here}** "
                    f"(`benchmarks/results/{Path(report.get('_path', '')).name}`, {report.get('method')})")


def results_table(report, lesson: str, label: str):
    """The measured rows of ``lesson`` in ``report`` under ``label``: time, throughput, speed-ups -- the demo's
    table of GPU measurements (``gpukernels.demo.gpu_table``), with a shape column."""
    from gpukernels import bench, demo

    if report is None:
        return _labelled(label)
    rows = [r for r in bench.rows(report) if r["lesson"] == lesson]
    table = demo.gpu_table(rows, shapes=True)
    ceil = report.get("ceilings") or {}
    note = (f"\n\nCeilings measured in the same run: copy {ceil['copy_GBps']:,.0f} GB/s, library SGEMM "
            f"{ceil['sgemm_TFLOPs']:.1f} TFLOP/s." if ceil.get("copy_GBps") and ceil.get("sgemm_TFLOPs") else "")
    measured = {r["version"] for r in rows}
    missing = [name for name in gpukernels.LESSONS[lesson].VERSIONS if name not in measured]
    if missing:
        note += f"\n\nNot in this benchmark run (added since): {', '.join(f'`{m}`' for m in missing)}."
    return _labelled(label, table, note.strip())


#: Traced traffic tables kept beside the notebooks: tracing all 19 matmul steps takes ~18 s of the simulator, which
#: is most of 01_matmul's 45 s budget. A table is used only while its key -- a hash of every source file that decides
#: the counts (the lesson's kernels and launchers, the shared intrinsics and padding, the simulator, the tracer) --
#: matches; a student who edits a kernel gets a live trace. tests/test_notebook_module.py re-traces the committed tables and fails when stale.
TRACED = Path(__file__).resolve().parent.parent / "notebooks" / "traced"


def traced_key(lesson: str, shape) -> str:
    """The hash of what decides ``lesson``'s traced counts at ``shape``: its sources, the simulator's, the tracer's."""
    import hashlib

    pkg = Path(gpukernels.__file__).resolve().parent
    lesson_src = pkg / lesson
    files = sorted(lesson_src.glob("*.py")) if lesson_src.is_dir() else [pkg / f"{lesson}.py"]
    files += sorted((pkg / "sim").rglob("*.py")) + [pkg / n for n in ("trace.py", "_launch.py", "_intrinsics.py",
                                                                      "_mma.py", "_wgmma_rs.py", "_tma.py",
                                                                      "_named_barrier.py", "_pad.py", "demo.py",
                                                                      "tensor_core/_ring.py")]
    files = list(dict.fromkeys(files))  # (the tensor-core lesson's own files include its ring)
    h = hashlib.sha256(repr((lesson, tuple(shape))).encode())
    for f in files:
        h.update(f.relative_to(pkg).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def traced_path(lesson: str, shape) -> Path:
    return TRACED / f"{lesson}-{'x'.join(map(str, shape))}.json"


def traffic_rows(lesson: str, shape, fresh: bool = False) -> tuple[list, bool]:
    """(the demo's traced rows for every version at ``shape``, whether they came from the kept table)."""
    import json

    path = traced_path(lesson, shape)
    if not fresh and path.exists():
        kept = json.loads(path.read_text())
        if kept.get("key") == traced_key(lesson, shape):
            return kept["rows"], True
    from gpukernels import demo

    return on_simulator(demo.demo_sim, lesson, tuple(shape)), False


def keep_traffic(lesson: str, shape) -> Path:
    """Trace ``lesson`` at ``shape`` now and keep the table beside the notebooks (``python -m gpukernels.notebook
    keep matmul 64 64 8``)."""
    import json

    rows, _ = traffic_rows(lesson, shape, fresh=True)
    path = traced_path(lesson, shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in rows]
    path.write_text(json.dumps({"lesson": lesson, "shape": list(shape), "key": traced_key(lesson, shape),
                                "rows": clean}, indent=1) + "\n")
    return path


def traffic_table(lesson: str, shape):
    """Global traffic of every version at ``shape``, counted by the tracer (on the simulator): the demo's own
    table (``gpukernels.demo.sim_table``), labelled. Taken from the table kept in notebooks/traced/ when the
    kernels, simulator and tracer are the ones it was traced with (`traffic_rows`)."""
    from gpukernels import demo

    rows, kept = traffic_rows(lesson, shape)
    floor = gpukernels.LESSONS[lesson].min_bytes(shape)
    how = (f"traced with these very sources, kept in `notebooks/traced/{traced_path(lesson, shape).name}`" if kept
           else "traced now")
    label = (f"**Counted by the tracer** on the simulator ({how}), shape {'x'.join(map(str, shape))}: every global "
             f"load and store the kernels issue (no caches), against the minimum {_bytes(floor)} (each input read "
             f"once, the output written once).")
    table = demo.sim_table(rows)
    table.title = ""  # the label says it
    return _labelled(label, table)


__all__ = ["DPI", "GPU", "where_and_when", "png", "on_simulator", "run_traced", "try_launch", "markdown_table",
           "resource_table", "race_table", "measurements", "committed_results", "results_table", "traffic_table",
           "traffic_rows", "keep_traffic", "traced_key"]


def main(argv=None) -> int:
    """``python -m gpukernels.notebook keep LESSON DIM...``: trace and keep a notebook's traffic table. Bad input
    (a lesson, a shape of the wrong length, a dimension below 1, a shape too large for the memory or the
    simulator's time limit) is refused in one line, status 2, before anything is traced or written."""
    from ._launch import LaunchError
    from ._simtime import check_size
    from .check import supports
    from .cli import ArgumentParser, UsageError, fail, positive, shape_names

    prog = "python -m gpukernels.notebook"
    parser = ArgumentParser(prog=prog, description="keep the traffic tables the notebooks show")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    keep = sub.add_parser("keep", help="trace every version of LESSON at the shape and keep the table")
    keep.add_argument("lesson", metavar="LESSON", help=f"one of {', '.join(gpukernels.LESSONS)}")
    keep.add_argument("dims", metavar="DIM", nargs="+", type=positive(int, "a whole number >= 1"),
                      help="the shape, e.g. 64 64 8 for matmul")
    args = parser.parse_args(argv)
    lessons = gpukernels.LESSONS
    if args.lesson not in lessons:
        return fail(f"{prog} keep", f"LESSON {args.lesson!r}: expected one of {', '.join(lessons)}")
    mod, shape = lessons[args.lesson], tuple(args.dims)
    names, given = shape_names(mod), " ".join(map(str, args.dims))
    if len(shape) != len(names):
        example = " ".join(map(str, mod.SHAPES["trace"]))
        return fail(f"{prog} keep", f"DIM {given!r}: {args.lesson} takes {len(names)} numbers, {' '.join(names)} "
                                    f"(e.g. {example}); got {len(shape)}")
    try:  # before any array is made: memory, and what the simulator cannot finish
        check_size(args.lesson, shape, runs=len(mod.VERSIONS), option="DIM", simulator=True, given=given)
        if not any(supports(args.lesson, v, shape) for v in mod.VERSIONS):
            raise UsageError(f"DIM {given}: no version of {args.lesson} runs at {'x'.join(map(str, shape))}")
        print(keep_traffic(args.lesson, shape))
    except UsageError as err:
        return fail(f"{prog} keep", str(err))
    except LaunchError as err:  # a shape a version's argument check refuses (cbr: a filter larger than the image);
        return fail(f"{prog} keep", f"DIM {given}: {err}")  # raised before the table is written
    return 0


if __name__ == "__main__":
    sys.exit(main())
