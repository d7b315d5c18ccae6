"""The grader's child process: run one admitted submission's kernel on the grader's inputs and report raw
outputs and raw observations -- never a score.

Run as a *script* (``python .../_child.py``), not as ``-m gpukernels.grade._child``: importing the
``gpukernels`` package picks the simulator, and the compile and speed children need the real CUDA target.

Three kinds of child, by ``Job.mode``:

* ``compile``: compiles the kernel for sm_90 with ``cuda.compile_ptx`` (no GPU needed) -- before anything of
  the submission runs anywhere else;
* ``sim``: runs every correctness case on the simulator, in thread order and then in a shuffled order (races),
  then traces one case with ``gpukernels.trace`` (technique, and the hazards that explain a wrong result);
* ``speed``: on a GPU, times the kernel and the lesson's baseline with CUDA events.

The protocol (``protocol.py``): line 1 of stdin names the submission (its admitted source travels with it);
the child admits it again with the grader's own ``admission`` module and runs the admitted tree, then reads
line 2, the job. Reports go to a file the harness alone writes; stdout is the submission's (``print`` in a
kernel), never the protocol's.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types

STUDENT_MODULE = "submission_kernel"
HERE = os.path.dirname(os.path.abspath(__file__))


def _sibling(name: str):
    """``protocol`` / ``admission`` from this folder, loaded without importing the ``gpukernels`` package (whose
    import picks the simulator or the GPU: the compile child must stay on the real CUDA target)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_gpukernels_grade_{name}", os.path.join(HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while they are built
    spec.loader.exec_module(mod)
    return mod


def _describe_exception(exc: BaseException, student_file: str) -> str:
    """``Type: message`` plus the innermost line of the student's file in the traceback, if any."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    where = ""
    if isinstance(exc, SyntaxError):
        return text.replace(f'File "{student_file}"', os.path.basename(student_file))
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == os.path.abspath(student_file):
            where = f" (at {os.path.basename(student_file)}:{frame.lineno}: {(frame.line or '').strip()})"
    limit = 1500
    return (text[:limit] + (" ..." if len(text) > limit else "")) + where


def _import_admitted(admission, filename: str, source: str):
    """Run the admitted tree of ``source`` as module ``submission_kernel`` (its lines keep their numbers)."""
    import linecache

    admitted = admission.admit(source, filename)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks, tracer
    mod = types.ModuleType(STUDENT_MODULE)
    mod.__file__ = filename
    sys.modules[STUDENT_MODULE] = mod
    exec(admitted.code(), mod.__dict__)  # noqa: S102 - admitted: imports, constants and @cuda.jit defs only
    return mod


def _load_case(case):
    """The kernel's arguments, in order: arrays from the grader's .npz, scalars from the job."""
    import numpy as np

    with np.load(case.npz, allow_pickle=False) as data:
        arrays = {k: data[k].copy() for k in data.files}
    return arrays, [arrays[name] if kind == "array" else value for name, kind, value in case.args]


def _save_arrays(out_dir: str, case, run: str, arrays: dict) -> None:
    import numpy as np

    for name, arr in arrays.items():
        np.save(PROTOCOL.output_path(out_dir, case, run, name), np.asarray(arr), allow_pickle=False)


# ----------------------------------------------------------------------------------------------------------
# simulator child
# ----------------------------------------------------------------------------------------------------------


def _sim_kernel_check(kernel) -> str | None:
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(kernel, FakeCUDAKernel):
        return f"is a {type(kernel).__name__}, not a @cuda.jit kernel"
    if getattr(kernel, "_device", False):
        return "is a device function (@cuda.jit(device=True)); it must be a kernel, launched as kernel[grid, block]"
    return None


def _run_sim(job, report, kernel) -> None:
    CaseReport = PROTOCOL.CaseReport

    import gpukernels  # noqa: F401  (GPUKERNELS_DEVICE=sim: installs the simulator)

    sim = getattr(gpukernels, "_sim", None)
    configure = getattr(sim, "configure", None)
    if configure is not None:
        configure(timeout_s=job.launch_timeout, shuffle=False, seed=0)
    report.simulator = "gpukernels.sim" if configure is not None else "numba (stock)"
    for i, case in enumerate(job.cases):
        entry = CaseReport()
        report.cases.append(entry)
        report.save(job.report)
        runs = [("out", None)]
        if configure is not None and job.shuffle_seed is not None and getattr(case, "shuffle", True):
            runs.append(("shuffled", int(job.shuffle_seed) + i))
        for run, seed in runs:
            arrays, args = _load_case(case)
            t0 = time.perf_counter()
            try:
                if seed is None:
                    kernel[tuple(case.grid), tuple(case.block)](*args)
                else:
                    with configure(shuffle=True, seed=seed):
                        kernel[tuple(case.grid), tuple(case.block)](*args)
            except BaseException as exc:  # noqa: BLE001 - everything the student's code raises is reported
                entry.status, entry.run = "error", run
                entry.error, entry.error_type = _describe_exception(exc, job.filename), type(exc).__name__
                entry.seeds[run] = seed
                report.save(job.report)
                return
            entry.seconds[run] = time.perf_counter() - t0
            _save_arrays(job.out_dir, i, run, arrays)
            entry.outputs.append(run)
            entry.seeds[run] = seed
        entry.status = "ok"
        report.save(job.report)

    if job.trace is not None:
        report.trace = {"status": "running"}
        report.save(job.report)
        report.trace = _trace(job, kernel)
        report.save(job.report)
        if job.perturb and report.trace.get("status") == "ok":
            report.trace["perturbed"] = {kind: _run_perturbed(job, kernel, kind) for kind in job.perturb}
            report.save(job.report)


def _perturbation(kind: str):
    """A context in which the simulator's ``kind`` instructions return other results than they compute, so that a
    kernel whose output comes from them must give another output (``spec.DataFlow``):

    * ``mma_f16`` (and the other mma kinds): D = C + 2 A B instead of C + A B -- a result built from the products
      doubles exactly, one that only passes C through (or throws D away) does not move;
    * ``shfl``: every shuffle (idx, up, down, xor) returns the value it read plus 1;
    * ``cp.async``: every copy lands its elements plus 1 (its zero fill too) -- a result computed from the copied
      tiles moves, one computed from global loads beside the copies does not."""
    import contextlib

    if kind == "cp.async":
        from gpukernels.sim import _async

        land = _async.InFlight.land

        def landed_plus_one(op):
            fresh = not op.landed
            land(op)
            if fresh and op.kind == "cp.async":
                dv, d, _, _, _, n = op.move
                dv[d:d + n] += 1

        @contextlib.contextmanager
        def copies():
            _async.InFlight.land = landed_plus_one
            try:
                yield
            finally:
                _async.InFlight.land = land

        return copies()

    from gpukernels.sim import _launch
    from gpukernels.sim.api import SHFL_DOWN, SHFL_IDX, SHFL_UP, SHFL_XOR

    kinds = {"shfl": {SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR}}.get(kind, {kind})
    original = _launch.Launch._compute

    def compute(self, op, group, need, w):
        results = original(self, op, group, need, w)
        if op not in kinds:
            return results
        if op.startswith("mma"):
            import numpy as np

            c = {t.lane: t.value[1] for t in group}
            return {lane: tuple(np.float32(2.0 * float(d) - float(ci)) for d, ci in zip(res, c[lane]))
                    for lane, res in results.items()}
        return {lane: v + 1 for lane, v in results.items()}

    @contextlib.contextmanager
    def patched():
        _launch.Launch._compute = compute
        try:
            yield
        finally:
            _launch.Launch._compute = original

    return patched()


def _run_perturbed(job, kernel, kind: str) -> dict:
    """The traced case once more, in thread order, with ``kind``'s results perturbed; its output saved."""
    case = job.trace
    arrays, args = _load_case(case)
    try:
        with _perturbation(kind):
            kernel[tuple(case.grid), tuple(case.block)](*args)
    except BaseException as exc:  # noqa: BLE001
        return {"status": "error", "error": _describe_exception(exc, job.filename)}
    _save_arrays(job.out_dir, "trace", f"perturbed_{kind}", {job.out: arrays[job.out]})
    return {"status": "ok"}


def _trace(job, kernel) -> dict:
    import importlib
    import inspect

    try:
        trace_mod = importlib.import_module("gpukernels.trace")
    except ImportError as exc:
        return {"status": "unavailable", "why": f"gpukernels.trace is not available ({exc})"}
    if not callable(getattr(trace_mod, "trace", None)):
        return {"status": "unavailable", "why": "gpukernels.trace has no trace()"}
    case = job.trace
    arrays, args = _load_case(case)
    spec_names = [name for name, _, _ in case.args]
    try:
        params = list(inspect.signature(kernel.py_func).parameters)
    except (TypeError, ValueError):
        params = []
    rename = dict(zip(params, spec_names))
    try:
        with trace_mod.trace() as t:
            kernel[tuple(case.grid), tuple(case.block)](*args)
        obs = observe(t, rename)
    except BaseException as exc:  # noqa: BLE001
        return {"status": "error", "error": _describe_exception(exc, job.filename)}
    if job.out and job.out in arrays:
        _save_arrays(job.out_dir, "trace", "out", {job.out: arrays[job.out]})
    return {"status": "ok", "observations": obs}


def _short(loc: str) -> str:
    path, _, line = str(loc).rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else str(loc)


def observe(t, rename: dict) -> dict:
    """Plain numbers from a ``gpukernels.trace`` Trace, keyed by the spec's argument names (``rename`` maps the
    student's parameter names to them): what the technique checks of ``gpukernels.grade.spec`` read.

    An atomic counts as a load and a store of its element (it reads and writes it), whatever the tracer's own
    totals say, so that ``cuda.atomic.add(a, i, 0)`` is no way to read ``a`` unseen."""
    arrays: dict = {}
    for tr in t.traffic("global"):
        name = rename.get(tr.array, tr.array)
        a = arrays.setdefault(name, {"loads": 0, "stores": 0, "atomics": 0, "size": tr.elements,
                                     "elements_loaded": None, "elements_stored": None})
        counted = hasattr(tr, "elements_loaded")  # a tracer that counts atomics in its loads and stores
        a["loads"] += tr.loads + (0 if counted else tr.atomics)
        a["stores"] += tr.stores + (0 if counted else tr.atomics)
        a["atomics"] += tr.atomics
        if counted:
            a["elements_loaded"] = (a["elements_loaded"] or 0) + int(tr.elements_loaded)
            a["elements_stored"] = (a["elements_stored"] or 0) + int(tr.elements_stored)
    sectors: dict = {}
    for line in t.coalescing().lines:
        name = rename.get(line.array, line.array)
        kind = {"read": "load", "write": "store"}.get(line.kind)
        if kind is None:
            continue
        acc = sectors.setdefault((name, kind), [0, 0, 0, 0])
        acc[0] += line.sectors
        acc[1] += line.min_sectors
        acc[2] += line.requests
        acc[3] += getattr(line, "lanes", 32 * line.requests)  # an older tracer: lanes unknown, counted as full
    # summed per spec name first (rename may map several traced arrays to one), then the tracer's definitions
    from gpukernels.trace import coalescing_efficiency

    try:
        from gpukernels.trace import lane_utilisation
    except ImportError:  # an older tracer
        def lane_utilisation(lanes, requests):
            return 1.0
    for (name, kind), (sec, need, requests, lanes) in sectors.items():
        arrays.setdefault(name, {})[f"{kind}_efficiency"] = coalescing_efficiency(need, sec)
        arrays[name][f"{kind}_lanes"] = lane_utilisation(lanes, requests)
    shared_traffic = t.traffic("shared")
    # each access once: a tracer that counts an atomic in its loads and its stores would count it three times
    shared_accesses = sum(tr.loads + tr.stores + (-tr.atomics if hasattr(tr, "elements_loaded") else tr.atomics)
                          for tr in shared_traffic)
    worst = max(t.bank_conflicts(), key=lambda b: b.max_degree, default=None)
    shared = {"accesses": shared_accesses, "arrays": len(shared_traffic),
              "max_ways": worst.max_degree if worst else 1,
              "conflict_text": (f"{worst.kind} of {worst.array} at {_short(worst.location)}: `{worst.source.strip()}`"
                                if worst and worst.max_degree > 1 else "")}
    barriers = getattr(t, "barriers", None)
    sync = None  # an older tracer that does not count barriers: the check that needs it fails, it is not skipped
    if callable(barriers):
        launches = barriers()
        sync = {"syncthreads": sum(int(b.syncthreads) for b in launches),
                "syncwarp": sum(int(b.syncwarp) for b in launches)}
        shared["arrays"] = max(shared["arrays"], sum(len(b.shared_arrays) for b in launches))
    collectives = None  # an older tracer that does not count them: the check that needs it fails
    if callable(getattr(t, "collectives", None)):
        collectives = {}
        for launch in t.collectives():
            for kind, count in launch.items():
                collectives[kind] = collectives.get(kind, 0) + int(count)
    hazards = t.hazards()
    races = [f"{r.hazard} on {r.array} ({r.space}) between {_short(r.first_location)} ({r.first_kind}) and "
             f"{_short(r.second_location)} ({r.second_kind}), {r.elements} element(s), e.g. threads "
             f"{r.example_threads[0]} and {r.example_threads[1]} of block {r.example_block}" for r in hazards.races]
    lines = [[_short(r.first_location), _first_source(r, "first"), _short(r.second_location),
              _first_source(r, "second")] for r in hazards.races]
    races += [f"shared array {u.array} read at {_short(u.location)} before any thread wrote it "
              f"(e.g. element {u.example_element}, thread {u.example_thread})" for u in hazards.uninitialized]
    # reads of shared memory no thread wrote: where a computed NaN most likely comes from (the simulator's shared
    # memory starts as NaN; a GPU's holds whatever was there)
    unwritten = [[u.array, _short(u.location), _source_at(str(u.location))] for u in hazards.uninitialized]
    return {"arrays": arrays, "shared": shared, "races": races, "race_lines": lines, "sync": sync,
            "collectives": collectives, "unwritten_shared": unwritten}


def _first_source(race, which: str) -> str:
    return _source_at(str(getattr(race, f"{which}_location", "")))


def _source_at(loc: str) -> str:
    """The source line at ``loc`` (``path:line``; the tracer may give the student's file by its name alone)."""
    import linecache

    path, _, line = loc.rpartition(":")
    try:
        number = int(line)
    except ValueError:
        return ""
    from gpukernels.sim._source import full_path

    text = linecache.getline(full_path(path), number)  # the tracer names package files relative to their folder
    student = getattr(sys.modules.get(STUDENT_MODULE), "__file__", None)
    if not text.strip() and student and os.path.basename(path) == os.path.basename(student):
        text = linecache.getline(student, number)
    return text.strip()


# ----------------------------------------------------------------------------------------------------------
# compile child: sm_90, no GPU needed
# ----------------------------------------------------------------------------------------------------------


def _first_lines(text: str, n: int = 12) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    keep = lines[:n]
    return "\n".join(keep) + ("\n..." if len(lines) > n else "")


def _signature(arg_types: list) -> tuple:
    import numpy as np
    from numba import typeof

    sig = []
    for name, kind, extra in arg_types:
        if kind == "scalar":
            sig.append(typeof(extra))
        else:
            sig.append(typeof(np.empty((1,) * int(extra), dtype=kind)))
    return tuple(sig)


def _run_compile(job, report, kernel) -> None:
    from numba import cuda
    from numba.cuda.dispatcher import CUDADispatcher

    if not isinstance(kernel, CUDADispatcher):
        report.compile = {"ok": False, "error": f"{job.kernel} is a {type(kernel).__name__}, not a @cuda.jit kernel"}
        return
    if kernel.targetoptions.get("device"):
        report.compile = {"ok": False, "error": f"{job.kernel} is a device function (@cuda.jit(device=True)); it "
                                                "must be a kernel, launched as kernel[grid, block]"}
        return
    _compile_without_gpu(tuple(job.cc))
    sig = _signature(job.arg_types)
    t0 = time.perf_counter()
    try:
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=tuple(job.cc))
    except BaseException as exc:  # noqa: BLE001
        if _no_toolchain(exc):
            report.compile = {"ok": None, "unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            return
        report.compile = {"ok": False, "error": _first_lines(_describe_exception(exc, job.filename), 8),
                          "error_type": type(exc).__name__}
        return
    shared = static_shared_bytes(ptx)
    if shared > STATIC_SHARED_LIMIT:  # PTX takes any size; the GPU's assembler refuses it, and the simulator
        # would try to allocate it (an 8 GB array ended the run by SIGKILL, with no word of memory)
        report.compile = {"ok": False, "error_type": "SharedMemoryError", "error": (
            f"{job.kernel} declares {_size(shared)} of shared memory (cuda.shared.array) per block; a block may "
            f"have at most {STATIC_SHARED_LIMIT // 1024} KB of static shared memory on every GPU (the assembler "
            f"refuses more: 'uses too much shared data'; sm_90's 227 KB per block is reachable only by dynamic "
            "shared memory with an opt-in) -- check the shape you give cuda.shared.array")}
        return
    report.compile = {"ok": True, "seconds": time.perf_counter() - t0,
                      "signature": "(" + ", ".join(str(t) for t in sig) + ")"}


#: Bytes of static shared memory (``cuda.shared.array``) a block may declare on every GPU Numba compiles for:
#: ptxas refuses more ("uses too much shared data (0x10000 bytes, 0xc000 max)", checked with nvJitLink for
#: sm_90). Dynamic shared memory with an opt-in reaches 227 KB on sm_90, but cuda.shared.array is static.
STATIC_SHARED_LIMIT = 48 * 1024


def static_shared_bytes(ptx: str) -> int:
    """The static shared memory a kernel's PTX declares: ``.shared .align 4 .b8 name[49152];`` lines, summed
    (``[]`` -- the dynamic array -- counts nothing here)."""
    import re

    total = 0
    for m in re.finditer(r"^\s*(?:\.visible\s+|\.global\s+)?\.shared\s+(?:\.align\s+\d+\s+)?\.[bfsu](\d+)\s+"
                         r"[\w$.]+((?:\[\d+\])+)\s*;", ptx, re.M):
        count = 1
        for dim in re.findall(r"\[(\d+)\]", m.group(2)):
            count *= int(dim)
        total += count * int(m.group(1)) // 8
    return total


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.1f} KB"


def _no_toolchain(exc: BaseException) -> bool:
    """The compiler itself is missing (no NVVM: numba-cuda without its cu12/cu13 extra, or a platform it has no
    wheels for) -- not the student's kernel failing to compile."""
    text = f"{type(exc).__name__} {exc}"
    return any(key in text for key in ("NvvmSupportError", "libNVVM", "libnvvm", "CudaSupportError",
                                       "NVVM cannot be found", "No module named 'numba.cuda'",
                                       "No module named 'cuda'"))


def _compile_without_gpu(cc: tuple) -> None:
    """Let ``compile_ptx`` compile calls to device functions with no GPU present.

    Typing a call to a ``@cuda.jit(device=True)`` function (or to one of numba-cuda's jitted NumPy overloads)
    compiles it for ``get_current_device().compute_capability``, which needs a CUDA driver. Without a GPU we
    answer for the target we compile for instead."""
    import numba.cuda.dispatcher as dispatcher

    class TargetDevice:
        compute_capability = cc

    dispatcher.get_current_device = lambda: TargetDevice()


# ----------------------------------------------------------------------------------------------------------
# speed child: a GPU
# ----------------------------------------------------------------------------------------------------------


def _time_in_turn(fns, repeats: int) -> list:
    """CUDA-event times (ms) of each function, ``repeats`` each, taken in turn: a, b, a, b, ... Whatever else
    shares the GPU meanwhile (another process's kernels, a clock that drifts as the GPU warms) then falls on both
    alike, so the ratio of their medians stays fair; timed one after the other, a burst of another process's work
    during one of them decided the speed gate."""
    from numba import cuda

    for fn in fns:
        fn()  # warm-up: compiles and loads the module
    cuda.synchronize()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            start, end = cuda.event(), cuda.event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(cuda.event_elapsed_time(start, end))  # milliseconds
    return times


def _run_speed(job, report, kernel) -> None:
    try:
        report.speed = _time_on_gpu(job, kernel)
    except BaseException as exc:  # noqa: BLE001
        report.speed = {"status": "error", "error": _describe_exception(exc, job.filename)}


def _time_on_gpu(job, kernel) -> dict:
    import numpy as np
    from numba import cuda

    import gpukernels  # GPUKERNELS_DEVICE=gpu

    speed = job.speed
    arrays, _ = _load_case(speed)
    d = {k: cuda.to_device(v) for k, v in arrays.items()}
    args = [d[name] if kind == "array" else value for name, kind, value in speed.args]
    grid, block = tuple(speed.grid), tuple(speed.block)

    # The baseline gets its own copies of the inputs: the student's kernel may write anywhere it is given.
    lesson, version = speed.baseline
    v = gpukernels.LESSONS[lesson].VERSIONS[version]
    inputs = [cuda.to_device(arrays[name]) for name in speed.inputs]
    d_out = cuda.device_array(d[speed.out].shape, dtype=np.float32)
    launches = v.launches(*inputs, out=d_out, **speed.params)

    def run_baseline():
        for launch in launches:
            launch()

    student, baseline = _time_in_turn([lambda: kernel[grid, block](*args), run_baseline], speed.repeats)
    _save_arrays(job.out_dir, "speed", "out", {speed.out: d[speed.out].copy_to_host()})
    return {"status": "ok", "student_ms": float(np.median(student)), "baseline_ms": float(np.median(baseline)),
            "student_best_ms": float(min(student)), "baseline_best_ms": float(min(baseline)),
            "baseline": f"{lesson}.{version}"}


# ----------------------------------------------------------------------------------------------------------


PROTOCOL = None


def main() -> int:
    global PROTOCOL
    header = json.loads(sys.stdin.readline())
    PROTOCOL = _sibling("protocol")
    admission = _sibling("admission")
    Job, Report = PROTOCOL.Job, PROTOCOL.Report
    report = Report(stage="import")
    report_path = os.path.join(header["out_dir"], "report.json")
    report.save(report_path)
    filename = header["filename"]
    if header["mode"] != "sim":
        from numba import cuda  # noqa: F401  (NUMBA_ENABLE_CUDASIM=0: the real CUDA target)
    else:
        import gpukernels  # noqa: F401

    try:
        mod = _import_admitted(admission, filename, header["source"])
    except BaseException as exc:  # noqa: BLE001 - admission refusals and import errors are reported
        report.error, report.error_type = _describe_exception(exc, filename), type(exc).__name__
        report.save(report_path)
        return 0
    job = Job.from_json(sys.stdin.readline())  # the inputs' whereabouts: only now
    report.stage = "lookup"
    kernel = getattr(mod, job.kernel, None)
    if kernel is None:
        defined = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_")
                         and not isinstance(v, types.ModuleType) and hasattr(v, "py_func"))
        report.error = (f"{os.path.basename(filename)} defines no {job.kernel!r}"
                        + (f" (it defines: {', '.join(defined)})" if defined else ""))
        report.save(report_path)
        return 0
    if job.mode == "sim":
        problem = _sim_kernel_check(kernel)
        if problem:
            report.error = f"{job.kernel} {problem}"
            report.save(report_path)
            return 0
    report.stage = "run"
    report.save(report_path)
    {"sim": _run_sim, "compile": _run_compile, "speed": _run_speed}[job.mode](job, report, kernel)
    report.stage = "done"
    report.save(report_path)
    return 0


# ----------------------------------------------------------------------------------------------------------
# zygote: one process per mode that has imported numba (and gpukernels) once, and forks a child per job
# ----------------------------------------------------------------------------------------------------------


def _preload(mode: str) -> None:
    """What every child of ``mode`` imports, imported once before the forks (about 0.7 s a child saved)."""
    import numpy  # noqa: F401

    if mode == "sim":
        import gpukernels  # noqa: F401  (installs the simulator)
        import gpukernels.trace  # noqa: F401
    else:
        from numba import cuda  # noqa: F401
        import numba.cuda.dispatcher  # noqa: F401

        if mode == "compile":
            _warm_compiler()
    _sibling("protocol")
    _sibling("admission")


def _warm_compiler() -> None:
    """Compile a kernel of the zygote's own for sm_90 before any fork: the first compile of a process loads NVVM
    and builds Numba's CUDA target (0.35 of the 0.4 s it takes); each fork then inherits them and compiles only
    the submission. No submission's code is involved, and a machine without the compiler just skips it (the
    forks report that as they did)."""
    from numba import cuda, float32

    def warm(x):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] = x[i] + 1.0

    try:
        cuda.compile_ptx(warm, (float32[:],), cc=(9, 0))
    except Exception:  # noqa: BLE001 - no NVVM: the forks find and report the same
        pass


#: Bytes of a child's stdout (and as many of its stderr) kept on disk: a submission that prints in a loop fills a
#: pipe, not a disk. The rest is counted (bytes and lines), not stored: the grader reports the true size.
OUTPUT_BUDGET = 64 * 1024
#: The largest file a child may write (RLIMIT_FSIZE): its outputs are arrays of the grader's shapes (64 MB at the
#: largest speed shape), its report a few kB; past this the system stops it (SIGXFSZ), whatever it runs.
FILE_LIMIT = 256 * 2**20


class CappedSink:
    """One output stream of a child: the read end of its pipe, drained into ``path`` up to ``budget`` bytes; the
    rest counted (``total`` bytes, ``lines`` newlines), never stored."""

    def __init__(self, fd: int, path: str, budget: int = OUTPUT_BUDGET):
        self.fd, self.budget = fd, budget
        self.file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.kept = self.total = self.lines = 0
        self.ended = False  # the pipe's end was read: no more select on it
        os.set_blocking(fd, False)

    def pump(self) -> bool:
        """Read what the pipe holds now; False at its end (every writer has closed it)."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                self.ended = True
                return False
            self.total += len(chunk)
            self.lines += chunk.count(b"\n")
            room = self.budget - self.kept
            if room > 0:
                self.kept += os.write(self.file, chunk[:room])

    def close(self) -> list:
        """Drain what is left (its writers are gone) and close; [bytes printed, lines printed]."""
        self.pump()
        for fd in (self.fd, self.file):
            try:
                os.close(fd)
            except OSError:
                pass
        return [self.total, self.lines]


def zygote(mode: str) -> int:
    """Serve fork requests on stdin until it closes: one JSON line per job (``id``, ``cwd``, ``stdout``,
    ``stderr``, ``payload``); answers ``{"id", "pid"}`` when the child is forked and ``{"id", "exit", "printed"}``
    (a return code, negative for a signal; [bytes, lines] the child wrote to stdout and to stderr) when it has
    ended -- after its whole session is killed. A child's stdout and stderr are pipes the zygote drains
    (`CappedSink`): at most OUTPUT_BUDGET bytes of each reach the disk. No code of a submission ever runs in the
    zygote itself: only in the forks, each in a session of its own."""
    import select

    _preload(mode)
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # nothing but the replies reaches the grader's pipe
    running: dict = {}  # pid -> id
    sinks: dict = {}  # pid -> (stdout's CappedSink, stderr's)
    buffer = b""
    open_ = True
    me = os.getpid()

    def reply(msg: dict) -> None:
        try:
            replies.write(json.dumps(msg) + "\n")
        except OSError:  # the grader is gone (killed, interrupted): its children go with it, quietly
            for pid in running:
                _killpg(pid)
            os._exit(0)
    while open_ or running:
        pipes = {sink.fd: sink for pair in sinks.values() for sink in pair if not sink.ended}
        ready = select.select(([0] if open_ else []) + list(pipes), [], [], 0.02)[0]
        for fd in ready:
            if fd in pipes:
                pipes[fd].pump()  # at its end it is closed when its child is reaped
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                open_ = False
                for pid in running:
                    _killpg(pid)
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                req = json.loads(line)
                out_r, out_w = os.pipe()
                err_r, err_w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the child: its own session, files, working directory; then the job
                    try:
                        os.setsid()
                        die_with_parent(me)  # whatever ends the zygote (the grader's SIGKILL too) ends this
                        _child_limits()
                        os.chdir(req["cwd"])
                        os.dup2(out_w, 1)  # pipes the zygote drains: what it prints is capped, not the disk's
                        os.dup2(err_w, 2)
                        others = [fd for pair in sinks.values() for sink in pair for fd in (sink.fd, sink.file)]
                        for fd in (out_r, out_w, err_r, err_w, *others):  # nothing of another child's streams
                            try:
                                os.close(fd)
                            except OSError:
                                pass
                        os.dup2(devnull, 0)
                        replies.close()
                        import io

                        sys.stdin = io.StringIO(req["payload"])
                        sys.stdout = os.fdopen(1, "w", buffering=1)
                        sys.stderr = os.fdopen(2, "w", buffering=1)
                        code = main()
                        sys.stdout.flush()
                        sys.stderr.flush()
                    except BaseException:  # noqa: BLE001 - a harness failure: the grader reads the exit code
                        traceback.print_exc()
                        code = 70
                    os._exit(code)
                os.close(out_w)
                os.close(err_w)
                sinks[pid] = (CappedSink(out_r, req["stdout"]), CappedSink(err_r, req["stderr"]))
                running[pid] = req["id"]
                reply({"id": req["id"], "pid": pid})
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _killpg(pid)  # whatever the child left running in its session goes with it
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            printed = [sink.close() for sink in sinks.pop(pid, ())]
            reply({"id": running.pop(pid, None), "exit": code, "printed": printed})
    return 0


def _killpg(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent(parent: int) -> None:
    """Linux: have the kernel send this process SIGKILL when the process that started it ends -- however it ends,
    SIGKILL included, which no handler of the grader's can see (``prctl(PR_SET_PDEATHSIG)``, kept across exec).
    A parent that ended before the call is caught by comparing ``getppid()`` with ``parent``. Elsewhere the
    grader's pipes are what children watch (a zygote reads EOF and kills its children), and a child started alone
    watches its parent (`watch_parent`)."""
    if _PRCTL is None:
        return
    _PRCTL(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG (1), SIGKILL (9)
    if os.getppid() != parent:  # the parent is already gone
        os._exit(1)


def watch_parent(interval: float = 0.2) -> None:
    """Where the system cannot end this process with its parent (no ``prctl``: macOS), a daemon thread notices that
    the parent is gone -- the process has been handed to another one -- and kills this process's session (a
    started child leads its own) or, if it leads none, this process alone: whatever the main thread is running, a
    ``while True`` kernel on the simulator included (the thread gets the GIL every few milliseconds)."""
    import signal
    import threading

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(interval)
        try:
            if os.getpgid(0) == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        except OSError:
            os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _prctl():
    """libc's prctl, looked up once at import: between fork and exec nothing may be imported or dlopen'ed (another
    thread of the grader may have held the lock at the fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None


_PRCTL = _prctl()


def _child_limits() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfaulting submission leaves no core file
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))  # no file past FILE_LIMIT


if __name__ == "__main__":
    sys.path.pop(0)  # this script's folder: keep gpukernels/grade/*.py from shadowing anything
    if len(sys.argv) == 3 and sys.argv[1] == "--zygote":
        os._exit(zygote(sys.argv[2]))
    if _PRCTL is None and os.name == "posix":  # macOS: no PR_SET_PDEATHSIG for a child started alone
        watch_parent()
    sys.stdout.flush()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no atexit handlers or stray threads run after the report
