"""The grader's child process: import one submission, launch its kernel on the inputs the grader wrote, and
write back what happened -- raw outputs and raw observations, never a score.

Run as a *script* (``python .../_child.py JOB.json``), not as ``-m gpukernels.grade._child``: importing the
``gpukernels`` package picks the simulator, and the compile/speed child must run with the real CUDA target.

Two kinds of child, chosen by ``job["mode"]``:

* ``sim``:  runs every correctness case on the simulator (in thread order, then again in a shuffled order to
  flush out races), then traces one case when ``gpukernels.trace`` exists;
* ``real``: compiles the kernel for sm_90 with ``cuda.compile_ptx`` (no GPU needed) and, when the grader runs
  on a GPU, times it and the lesson's naive kernel with CUDA events.

The protocol is files only: arrays come in as ``.npz`` files written by the grader, outputs go back as ``.npy``
files and everything else as one JSON file (``job["result"]``), rewritten after every step so that a crash
half-way leaves a record of how far it got. Nothing goes over stdout, so a submission that prints cannot
corrupt it; nothing is pickled, so a submission cannot hand the grader code to run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

STUDENT_MODULE = "submission_kernel"


def _save(path: str, result: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)


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


def _import_submission(path: str):
    import importlib.util

    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(STUDENT_MODULE, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[STUDENT_MODULE] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_case(case: dict):
    """The kernel's arguments, in order: arrays from the grader's .npz, scalars from the job."""
    import numpy as np

    with np.load(case["npz"], allow_pickle=False) as data:
        arrays = {k: data[k].copy() for k in data.files}
    args = []
    for name, kind, value in case["args"]:
        args.append(arrays[name] if kind == "array" else value)
    return arrays, args


def _save_arrays(prefix: str, arrays: dict) -> dict:
    import numpy as np

    paths = {}
    for name, arr in arrays.items():
        path = f"{prefix}_{name}.npy"
        np.save(path, np.asarray(arr), allow_pickle=False)
        paths[name] = path
    return paths


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


def _run_sim(job: dict, result: dict, kernel, student_file: str) -> None:
    import gpukernels  # noqa: F401  (GPUKERNELS_DEVICE=sim: installs the simulator)

    sim = getattr(gpukernels, "_sim", None)
    configure = getattr(sim, "configure", None)
    if configure is not None:
        configure(timeout_s=job["launch_timeout"], shuffle=False, seed=0)
    result["simulator"] = "gpukernels.sim" if configure is not None else "numba (stock)"
    result["cases"] = []
    grid_of = lambda c: tuple(c["grid"])  # noqa: E731
    for i, case in enumerate(job["cases"]):
        entry = {"status": "running"}
        result["cases"].append(entry)
        _save(job["result"], result)
        runs = [("out", None)]
        if configure is not None and job.get("shuffle_seed") is not None:
            runs.append(("shuffled", int(job["shuffle_seed"]) + i))
        for label, seed in runs:
            arrays, args = _load_case(case)
            t0 = time.perf_counter()
            try:
                if seed is None:
                    kernel[grid_of(case), tuple(case["block"])](*args)
                else:
                    with configure(shuffle=True, seed=seed):
                        kernel[grid_of(case), tuple(case["block"])](*args)
            except BaseException as exc:  # noqa: BLE001 - everything the student's code raises is reported
                entry.update(status="error", run=label, error=_describe_exception(exc, student_file),
                             error_type=type(exc).__name__, seed=seed)
                _save(job["result"], result)
                return
            entry[f"{label}_seconds"] = time.perf_counter() - t0
            entry[label] = _save_arrays(f"{job['prefix']}_case{i}_{label}", arrays)
            entry.setdefault("seeds", {})[label] = seed
        entry["status"] = "ok"
        _save(job["result"], result)

    if job.get("trace") is not None:
        result["trace"] = {"status": "running"}
        _save(job["result"], result)
        result["trace"] = _trace(job, kernel, student_file)
        _save(job["result"], result)


def _trace(job: dict, kernel, student_file: str) -> dict:
    import importlib
    import inspect

    try:
        trace_mod = importlib.import_module("gpukernels.trace")
    except ImportError as exc:
        return {"status": "unavailable", "why": f"gpukernels.trace is not available ({exc})"}
    if not callable(getattr(trace_mod, "trace", None)):
        return {"status": "unavailable", "why": "gpukernels.trace has no trace()"}
    case = job["trace"]
    arrays, args = _load_case(case)
    spec_names = [name for name, _, _ in case["args"]]
    try:
        params = list(inspect.signature(kernel.py_func).parameters)
    except (TypeError, ValueError):
        params = []
    rename = {student: spec for student, spec in zip(params, spec_names)}
    try:
        with trace_mod.trace() as t:
            kernel[tuple(case["grid"]), tuple(case["block"])](*args)
        obs = observe(t, rename)
    except BaseException as exc:  # noqa: BLE001
        return {"status": "error", "error": _describe_exception(exc, student_file)}
    return {"status": "ok", "observations": obs}


def _short(loc: str) -> str:
    path, _, line = str(loc).rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else str(loc)


def observe(t, rename: dict) -> dict:
    """Plain numbers from a ``gpukernels.trace`` Trace, keyed by the spec's argument names (``rename`` maps the
    student's parameter names to them): what the technique checks of ``gpukernels.grade.spec`` read."""
    arrays: dict = {}
    for tr in t.traffic("global"):
        name = rename.get(tr.array, tr.array)
        a = arrays.setdefault(name, {"loads": 0, "stores": 0, "size": tr.elements})
        a["loads"] += tr.loads
        a["stores"] += tr.stores
    sectors: dict = {}
    for line in t.coalescing().lines:
        name = rename.get(line.array, line.array)
        kind = {"read": "load", "write": "store"}.get(line.kind)
        if kind is None:
            continue
        acc = sectors.setdefault((name, kind), [0, 0])
        acc[0] += line.sectors
        acc[1] += line.min_sectors
    for (name, kind), (sec, need) in sectors.items():
        arrays.setdefault(name, {})[f"{kind}_efficiency"] = need / sec if sec else 1.0
    shared_accesses = sum(tr.loads + tr.stores + tr.atomics for tr in t.traffic("shared"))
    worst = max(t.bank_conflicts(), key=lambda b: b.max_degree, default=None)
    shared = {"accesses": shared_accesses, "max_ways": worst.max_degree if worst else 1,
              "conflict_text": (f"{worst.kind} of {worst.array} at {_short(worst.location)}: `{worst.source.strip()}`"
                                if worst and worst.max_degree > 1 else "")}
    hazards = t.hazards()
    races = [f"{r.hazard} on {r.array} ({r.space}) between {_short(r.first_location)} ({r.first_kind}) and "
             f"{_short(r.second_location)} ({r.second_kind}), {r.elements} element(s), e.g. threads "
             f"{r.example_threads[0]} and {r.example_threads[1]} of block {r.example_block} -- a "
             "cuda.syncthreads() is missing between them" for r in hazards.races]
    races += [f"shared array {u.array} read at {_short(u.location)} before any thread wrote it "
              f"(e.g. element {u.example_element}, thread {u.example_thread})" for u in hazards.uninitialized]
    return {"arrays": arrays, "shared": shared, "races": races}


# ----------------------------------------------------------------------------------------------------------
# real-GPU child: compile for sm_90, and time on a GPU when there is one
# ----------------------------------------------------------------------------------------------------------


def _first_lines(text: str, n: int = 12) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    keep = lines[:n]
    return "\n".join(keep) + ("\n..." if len(lines) > n else "")


def _run_real(job: dict, result: dict, kernel, student_file: str) -> None:
    from numba import cuda, typeof
    from numba.cuda.dispatcher import CUDADispatcher

    if not isinstance(kernel, CUDADispatcher):
        result["compile"] = {"ok": False, "error": f"{job['kernel']} is a {type(kernel).__name__}, "
                             "not a @cuda.jit kernel"}
        _save(job["result"], result)
        return
    if not job.get("speed"):
        _compile_without_gpu(tuple(job.get("cc", (9, 0))))
    arrays, args = _load_case(job["cases"][0])
    sig = tuple(typeof(a) for a in args)
    t0 = time.perf_counter()
    try:
        cuda.compile_ptx(kernel.py_func, sig, cc=tuple(job.get("cc", (9, 0))))
    except BaseException as exc:  # noqa: BLE001
        result["compile"] = {"ok": False, "error": _first_lines(_describe_exception(exc, student_file), 8),
                             "error_type": type(exc).__name__}
        _save(job["result"], result)
        return
    result["compile"] = {"ok": True, "seconds": time.perf_counter() - t0,
                         "signature": "(" + ", ".join(str(t) for t in sig) + ")"}
    _save(job["result"], result)
    if job.get("speed"):
        result["speed"] = {"status": "running"}
        _save(job["result"], result)
        try:
            result["speed"] = _time_on_gpu(job, kernel)
        except BaseException as exc:  # noqa: BLE001
            result["speed"] = {"status": "error", "error": _describe_exception(exc, student_file)}
        _save(job["result"], result)


def _compile_without_gpu(cc: tuple) -> None:
    """Let ``compile_ptx`` compile calls to device functions with no GPU present.

    Typing a call to a ``@cuda.jit(device=True)`` function (or to one of numba-cuda's jitted NumPy overloads)
    compiles it for ``get_current_device().compute_capability``, which needs a CUDA driver. Without a GPU we
    answer for the target we compile for instead."""
    import numba.cuda.dispatcher as dispatcher

    class TargetDevice:
        compute_capability = cc

    dispatcher.get_current_device = lambda: TargetDevice()


def _time_events(fn, repeats: int) -> list:
    from numba import cuda

    fn()  # warm-up: compiles and loads the module
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cuda.event(), cuda.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end))  # milliseconds
    return times


def _time_on_gpu(job: dict, kernel) -> dict:
    import numpy as np
    from numba import cuda

    import gpukernels  # GPUKERNELS_DEVICE=gpu

    speed = job["speed"]
    arrays, _ = _load_case(speed)
    d = {k: cuda.to_device(v) for k, v in arrays.items()}
    args = [d[name] if kind == "array" else value for name, kind, value in speed["args"]]
    grid, block = tuple(speed["grid"]), tuple(speed["block"])
    student = _time_events(lambda: kernel[grid, block](*args), speed["repeats"])
    out_path = _save_arrays(f"{job['prefix']}_speed", {speed["out"]: d[speed["out"]].copy_to_host()})

    lesson, version = speed["baseline"]
    v = gpukernels.LESSONS[lesson].VERSIONS[version]
    inputs = [d[name] for name in speed["inputs"]]
    d_out = cuda.device_array(d[speed["out"]].shape, dtype=np.float32)
    launches = v.launches(*inputs, out=d_out, **speed["params"])

    def run_baseline():
        for launch in launches:
            launch()

    baseline = _time_events(run_baseline, speed["repeats"])
    return {"status": "ok", "student_ms": float(np.median(student)), "baseline_ms": float(np.median(baseline)),
            "student_best_ms": float(min(student)), "baseline_best_ms": float(min(baseline)),
            "outputs": out_path, "baseline": f"{lesson}.{version}"}


# ----------------------------------------------------------------------------------------------------------


def main(job_path: str) -> int:
    with open(job_path) as f:
        job = json.load(f)
    result = {"stage": "import"}
    _save(job["result"], result)
    student_file = job["submission"]
    if job["mode"] == "real":
        from numba import cuda  # noqa: F401  (NUMBA_ENABLE_CUDASIM=0: the real CUDA target)
    else:
        import gpukernels  # noqa: F401
    try:
        mod = _import_submission(student_file)
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, ImportError, SystemExit, ...
        result.update(stage="import", error=_describe_exception(exc, student_file), error_type=type(exc).__name__)
        _save(job["result"], result)
        return 0
    result["stage"] = "lookup"
    kernel = getattr(mod, job["kernel"], None)
    if kernel is None:
        defined = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_")
                         and getattr(v, "__module__", STUDENT_MODULE) == STUDENT_MODULE)
        result["error"] = (f"{os.path.basename(student_file)} defines no {job['kernel']!r}"
                           + (f" (it defines: {', '.join(defined)})" if defined else ""))
        _save(job["result"], result)
        return 0
    if job["mode"] == "sim":
        problem = _sim_kernel_check(kernel)
        if problem:
            result["error"] = f"{job['kernel']} {problem}"
            _save(job["result"], result)
            return 0
    result["stage"] = "run"
    _save(job["result"], result)
    if job["mode"] == "sim":
        _run_sim(job, result, kernel, student_file)
    else:
        _run_real(job, result, kernel, student_file)
    result["stage"] = "done"
    _save(job["result"], result)
    return 0


if __name__ == "__main__":
    sys.path.pop(0)  # this script's folder: keep gpukernels/grade/*.py from shadowing anything
    sys.stdout.flush()
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no atexit handlers or stray threads of the submission run after the report
