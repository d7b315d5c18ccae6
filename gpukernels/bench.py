"""gpukernels bench: time every version of every lesson on a GPU, against the library a student knows.

Method (llm.c's dev/cuda and gpu-mode's evaluator do the same):

1. **Check before timing.** Each version runs once into an output poisoned with NaN and is compared with a float64
   reference (computed on the GPU in float64 through PyTorch when it is installed, else with NumPy).
2. **Inputs larger than L2, or rotated.** Each shape gets as many independent input/output sets as it takes to
   cover 4x the L2 cache, and consecutive runs cycle through them, so a run never finds its data in L2.
3. **CUDA events, warm-up, median of many runs.** With PyTorch present, ``inner`` launches are captured into a
   CUDA graph (Numba kernels are launched on PyTorch's stream, so they are captured too) and each replay is
   timed with events: this removes the host's launch overhead (~17 us per Numba launch), which is not what a
   kernel lesson is about. Peers are captured the same way. Without PyTorch, launches are timed back to back
   with Numba events (launch overhead included; the JSON says which method ran).
4. **Ceilings measured on the spot**: device-to-device copy bandwidth and the peer's SGEMM rate; "% of ceiling"
   is the roofline floor max(FLOPs / SGEMM rate, bytes / copy bandwidth) over the measured time.

``gpukernels bench --suite`` measures every lesson on its ``SHAPES["suite"]`` (real workloads, grouped by regime):
each shape gets an ``optimized`` row and a ``peer`` row from the same run (plus the steps the dispatcher chooses
among, and a textbook baseline), the dispatcher's choice and the regime in the row's ``extra``, and the report a
``summary``: per lesson and regime, the geometric mean and the minimum of the library's time over ours.

Peers: cuBLAS SGEMM through ``torch.mm`` (TF32 off), ``torch.softmax``, cuDNN through
``F.relu(F.conv2d(x, w, b, padding=p))`` with ``torch.backends.cudnn.allow_tf32 = False`` and
``cudnn.benchmark = True`` (cuDNN picks its fastest algorithm), cuBLAS's FP16 GEMM for the tensor cores, and
``F.scaled_dot_product_attention`` for attention: on float32 inputs with torch's default choice of backend, and on
the float16 inputs of the tensor-core steps with its FlashAttention backend (``sdpa_kernel(FLASH_ATTENTION)``).

A lesson whose versions take different inputs (attention: float32 steps, float16 tensor-core steps;
``gpukernels.check.version_inputs``) is measured in groups by input type, each against the float64 reference of its
own inputs; a group on other inputs than the lesson's own is compared with that type's peer, timed in the same run
(the row's ``extra``: ``inputs``, ``peer``, ``peer_ms``), as ``tensor_core.tf32x3`` is on float32.
``SHAPES["bench_causal"]`` (attention) runs with ``causal=True``: those rows carry ``extra["causal"]``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import gpukernels
from gpukernels import LESSONS, _kcache
from gpukernels.check import TOLERANCE, compare, supports, tolerance, version_inputs
from gpukernels._timing import (LONG_MIN_RUNS, LONG_MS, SLOW_MS, Timer, _configure_torch,  # noqa: F401
                                _mm_f32_out, environment)  # (re-exported: benchmarks/*.py use bench.Timer)

L2_BYTES = 60 * 2**20  # H200; read from the device when possible


@dataclass
class Result:
    lesson: str
    shape: tuple
    name: str
    kind: str  # "kernel" or "peer"
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    flops: int
    bytes: int
    rel_error: float | None = None
    ok: bool = True
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def tflops(self) -> float:
        return self.flops / (self.median_ms * 1e-3) / 1e12

    @property
    def gbps(self) -> float:
        return self.bytes / (self.median_ms * 1e-3) / 1e9


# ----------------------------------------------------------------------------------------------------------
# Peers (library implementations) and float64 references
# ----------------------------------------------------------------------------------------------------------


def _peer(lesson: str, torch, inputs: str | None = None):
    """(name, fn(*torch inputs, **launch parameters) -> torch output) for a lesson, or None. ``inputs``: the dtype of
    the inputs when it is not the lesson's own (attention's float16 steps: "float16"); None where the lesson has no
    peer on them."""
    if torch is None:
        return None
    F = torch.nn.functional

    if lesson == "attention":
        if inputs == "float16":  # FlashAttention-2's own kernels (float16 in, float16 out), as the steps they face
            return "torch SDPA, FlashAttention backend (float16)", lambda q, k, v, causal=False: _sdpa(
                torch, q, k, v, causal, "FLASH_ATTENTION")
        if inputs is None:
            return "torch SDPA (float32, default backend)", lambda q, k, v, causal=False: (
                F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        return None
    if inputs is not None:
        return None
    if lesson == "matmul":
        return "cuBLAS (torch.mm, TF32 off)", lambda a, b: torch.mm(a, b)
    if lesson == "softmax":
        return "torch.softmax", lambda x: torch.softmax(x, dim=-1)
    if lesson == "cbr":
        return "cuDNN (F.relu(F.conv2d))", lambda x, w, b, padding=1: F.relu(F.conv2d(x, w, b, padding=padding))
    if lesson == "tensor_core":
        # cuBLAS's FP16 GEMM with FP32 accumulation and a float32 C, as the lesson's kernels write it (a float16 C
        # overflows past 65504: the suite's outlier inputs reach that); torch without out_dtype: a float16 C
        return "cuBLAS FP16 (torch.mm, float32 out)", lambda a, b: _mm_f32_out(torch, a, b)
    return None


def _sdpa(torch, q, k, v, causal, backend):
    """``F.scaled_dot_product_attention`` on one backend of torch's (``SDPBackend.<backend>``): torch refuses, rather
    than falls back, when that backend cannot take the inputs."""
    attention = torch.nn.attention
    with attention.sdpa_kernel(getattr(attention.SDPBackend, backend)):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


#: The float64 attention reference computes every head's scores S in float64 (and P beside them): this many bytes of
#: S at a time, a few heads per call (all at once would be 69 GB at 4 x 32 x 8192^2).
ATTENTION_REFERENCE_BYTES = 2**31


def _attention_reference(torch, q, k, v, causal=False):
    """softmax(q k^T / sqrt(D) [causal]) v in float64 on the GPU -- SDPA's MATH backend (plain matmuls and softmax, as
    the definition reads) on ``.double()`` of the inputs as given -- a few heads at a time, as float32."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    heads = [x.reshape(b * h, 1, x.shape[2], x.shape[3]) for x in (q, k, v)]
    per = max(1, ATTENTION_REFERENCE_BYTES // max(1, 8 * sq * sk))
    out = torch.empty((b * h, 1, sq, v.shape[3]), dtype=torch.float32, device=q.device)
    for i in range(0, b * h, per):
        qs, ks, vs = (x[i:i + per].double() for x in heads)
        out[i:i + per] = _sdpa(torch, qs, ks, vs, causal, "MATH").float()
    return out.reshape(b, h, sq, v.shape[3])


def own_reference(lesson: str, name: str, host_inputs, params: dict):
    """The float64 result ``name`` is checked against when it is not the lesson's (`gpukernels.check.reference`:
    tensor_core's fp8, whose inputs are rounded to FP8), computed on the host; else None."""
    hook = getattr(LESSONS[lesson], "version_reference", None)
    return None if hook is None else hook(name, tuple(host_inputs), **params)


def _reference(lesson: str, torch, t_inputs, params: dict):
    """The lesson's result in float64 on the GPU (its inputs as given, made float64), as a torch tensor."""
    F = torch.nn.functional
    if lesson in ("matmul", "tensor_core"):
        a, b = t_inputs
        return torch.mm(a.double(), b.double())
    if lesson == "softmax":
        return torch.softmax(t_inputs[0].double(), dim=-1)
    if lesson == "cbr":
        x, w, b = t_inputs
        return torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=params.get("padding", 1)))
    if lesson == "attention":
        return _attention_reference(torch, *t_inputs, causal=params.get("causal", False))
    raise ValueError(f"no float64 reference on the GPU for the lesson {lesson!r}")


def measure_ceilings(timer: Timer, torch) -> dict:
    """Device copy bandwidth (bytes read + written per second) and the peer SGEMM rate at 4096^3."""
    out = {}
    if torch is None:
        return out
    n = 2**28  # 1 GiB of float32
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    # cudaMemcpyAsync, timed with events around back-to-back copies (a graph's memcpy node measured ~35% slower)
    t = statistics.median(timer._time_events(lambda i: dst.copy_(src), 1, inner=5, runs=20))
    out["copy_GBps"] = 2 * 4 * n / (t * 1e-3) / 1e9
    del src, dst
    m = 4096
    a = torch.randn(m, m, device="cuda")
    b = torch.randn(m, m, device="cuda")
    t = statistics.median(timer.time(lambda i: torch.mm(a, b), 1, min_runs=20))
    out["sgemm_TFLOPs"] = 2 * m**3 / (t * 1e-3) / 1e12
    return out


# ----------------------------------------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------------------------------------


def _l2_bytes() -> int:
    try:
        from numba import cuda

        return int(cuda.get_current_device().L2_CACHE_SIZE)
    except Exception:
        return L2_BYTES


#: The step each lesson's suite times besides ``optimized`` and the steps ``optimized`` dispatches to: the textbook
#: version a student would write first (the CBR target is ">= 3x naive").
SUITE_BASELINE = {"matmul": "tiled", "softmax": "naive", "cbr": "naive", "tensor_core": "mma_global",
                  "attention": "naive"}
#: Lessons whose suite times every step: softmax's kernels compile in seconds and run in microseconds, so the whole
#: ladder fits in the run and its heatmap shows each step's regime (matmul's 21 steps would take an hour).
SUITE_ALL_STEPS = ("softmax",)


def suite_shapes(lesson: str) -> list[tuple[str, tuple]]:
    """(regime, shape) for every shape of a lesson's suite, in the order the lesson lists them."""
    return [(regime, tuple(s)) for regime, shapes in LESSONS[lesson].SHAPES["suite"].items() for s in shapes]


def suite_versions(lesson: str) -> list[str]:
    """The versions a suite run times: the baseline, the dispatcher's steps (``optimized.steps``), ``optimized``;
    every step for the lessons of SUITE_ALL_STEPS."""
    mod = LESSONS[lesson]
    if lesson in SUITE_ALL_STEPS:
        return list(mod.VERSIONS)
    names = [SUITE_BASELINE.get(lesson)] + list(getattr(mod.optimized, "steps", ())) + ["optimized"]
    return [n for n in dict.fromkeys(names) if n in mod.VERSIONS]


def bench_shape(lesson: str, shape: tuple, timer: Timer, torch, versions=None, log=print, regime: str = "",
                budget_ms: float = 1500.0, params: dict | None = None) -> list[Result]:
    """Check and time the versions of ``lesson`` at ``shape`` (``versions``: only these), and the lesson's peer.
    ``params``: the launchers' keyword arguments (attention's ``causal``), given to the peer and the reference too.
    Versions are measured in groups by the inputs they take (`gpukernels.check.version_inputs`); the rows come back
    in the registry's order, the peer last."""
    mod = LESSONS[lesson]
    params = dict(params or {})
    host_inputs = mod.make_inputs(shape, seed=hash((lesson, shape)) % 2**32)
    flops, nbytes = _of_shape(mod.flops, shape, params), _of_shape(mod.min_bytes, shape, params)
    set_bytes = sum(x.nbytes for x in host_inputs) + 4 * math.prod(_out_shape(mod, host_inputs))
    sets = int(min(32, max(1, math.ceil(4 * _l2_bytes() / max(set_bytes, 1))))) if timer.timing else 1
    tags = {**({"regime": regime} if regime else {}), **{k: v for k, v in params.items() if v is True}}

    own = _dtypes(host_inputs)
    groups: dict = {own: (tuple(host_inputs), [])}  # the lesson's own inputs first: its peer runs on them
    for name in mod.VERSIONS:
        if versions and name not in versions:
            continue
        if not supports(lesson, name, shape):
            log(f"  {lesson} {shape} {name}: not run (it does not take this shape)")
            continue
        inputs = version_inputs(lesson, name, host_inputs)
        groups.setdefault(_dtypes(inputs), (inputs, []))[1].append(name)
    results = []
    for key, (inputs, names) in groups.items():
        if names or key == own:
            results += _bench_group(lesson, shape, inputs, names, key == own, timer, torch, sets, flops, nbytes,
                                    log, tags, budget_ms, params)
    order = list(mod.VERSIONS)
    return sorted(results, key=lambda r: (r.kind == "peer", order.index(r.name) if r.name in order else len(order)))


def _dtypes(inputs) -> tuple:
    return tuple(np.dtype(x.dtype).name for x in inputs)


def _of_shape(fn, shape, params):
    """``fn(shape, **params)`` with the parameters ``fn`` takes (attention's flops count only what causal leaves)."""
    import inspect

    accepted = inspect.signature(fn).parameters
    return fn(shape, **{k: v for k, v in params.items() if k in accepted})


def _bench_group(lesson, shape, host_inputs, names, own, timer, torch, sets, flops, nbytes, log, tags, budget_ms,
                 params) -> list[Result]:
    """Check and time ``names`` on ``host_inputs`` (the inputs they all take), against the float64 reference of these
    inputs. ``own``: they are the lesson's own inputs, and the lesson's peer runs on them as a row of its own; other
    inputs get the peer for their type (if the lesson has one), timed here and named in each row's ``extra``."""
    from numba import cuda

    mod = LESSONS[lesson]
    tol = tolerance(lesson, None, host_inputs)
    # Reference in float64, on the GPU when PyTorch is there (a 4096^3 product in float64 takes ~10 s on a CPU).
    peer = _peer(lesson, torch, None if own else _dtypes(host_inputs)[0]) if timer.timing else None
    if torch is not None:
        t_inputs = [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in host_inputs]
    ref = None  # compile only (`CompileOnly`): no reference, nothing compared -- the memory and time are the timed run's
    if timer.timing and torch is not None:
        with torch.no_grad():
            ref = _reference(lesson, torch, t_inputs, params).float().cpu().numpy()
    elif timer.timing:
        ref = mod.reference(*host_inputs, **params)
    out_shape = _out_shape(mod, host_inputs) if ref is None else ref.shape

    # Input/output sets for rotation; set 0 holds the checked inputs.
    if torch is not None:
        sets_in = [t_inputs] + [[x.clone() for x in t_inputs] for _ in range(sets - 1)]
        sets_out = [torch.empty(out_shape, device="cuda") for _ in range(sets)]
        as_numba = cuda.as_cuda_array
    else:
        d = [cuda.to_device(x) for x in host_inputs]
        sets_in = [d] + [[cuda.to_device(x) for x in host_inputs] for _ in range(sets - 1)]
        sets_out = [cuda.device_array(out_shape, np.float32) for _ in range(sets)]
        as_numba = lambda x: x  # noqa: E731

    results = []
    regime = tags.get("regime", "")
    for name in names:
        version = mod.VERSIONS[name]
        if getattr(version, "bench_inputs", None) is not None and torch is not None:
            # a step made for other inputs (tensor_core.tf32x3: float32) is timed on those, beside its own peer
            results.append(_bench_other_inputs(mod, version, host_inputs, shape, timer, torch, sets, flops, nbytes,
                                               log, regime, budget_ms))
            continue
        nb_in = [[as_numba(x) for x in s] for s in sets_in]
        nb_out = [as_numba(o) for o in sets_out]
        plans = [version.launches(*nb_in[i], out=nb_out[i], **params) for i in range(sets)]
        # Check first, on poisoned output.
        poison = cuda.to_device(np.full(out_shape, np.nan, np.float32))
        nb_out[0].copy_to_device(poison)
        for launch in plans[0]:
            launch()
        cuda.synchronize()
        if ref is None:
            continue
        own_ref = own_reference(lesson, name, host_inputs, params)  # a step checked against its own (tensor_core.fp8)
        check = (compare(nb_out[0].copy_to_host(), ref, tol) if own_ref is None else
                 compare(nb_out[0].copy_to_host(), own_ref, tolerance(lesson, name, host_inputs)))
        if not check.ok:
            log(f"  {lesson} {shape} {name}: WRONG RESULT, not timed: {check}")
            results.append(Result(lesson, shape, name, "kernel", math.nan, math.nan, math.nan, 0, flops, nbytes,
                                  check.rel_error, False, str(check), extra=dict(tags)))
            continue

        def enqueue(i, plans=plans):
            s = timer.stream()
            for launch in plans[i]:
                launch(stream=s)

        times = timer.time(enqueue, sets, budget_ms=budget_ms)
        extra = dict(tags)
        if hasattr(version, "describe"):  # a dispatcher says what it chose for these inputs
            extra["choice"] = version.describe(*nb_in[0], **params)
        results.append(Result(lesson, shape, name, "kernel", statistics.median(times), min(times), max(times),
                              len(times), flops, nbytes, check.rel_error, extra=extra))
        log(f"  {lesson} {shape} {name}: {results[-1].median_ms:.4f} ms")

    if peer is not None and (own or results):
        pname, pfn = peer
        with torch.no_grad():
            out = pfn(*sets_in[0], **params)
            check = compare(out.float().cpu().numpy(), ref, tol * 10)

            def enqueue_peer(i):
                pfn(*sets_in[i], **params)

            times = timer.time(enqueue_peer, sets, budget_ms=budget_ms)
        if own:
            results.append(Result(lesson, shape, pname, "peer", statistics.median(times), min(times), max(times),
                                  len(times), flops, nbytes, check.rel_error, check.ok, extra=dict(tags)))
        else:  # the rows of these inputs are compared with this peer ("x peer"), as tensor_core.tf32x3's
            for r in results:
                r.extra.update(inputs=_dtypes(host_inputs)[0], peer=pname, peer_ms=statistics.median(times),
                               peer_rel_error=check.rel_error)
        log(f"  {lesson} {shape} {pname}: {statistics.median(times):.4f} ms")
    elif not own:  # no peer for these inputs: the rows still say what they ran on
        for r in results:
            r.extra["inputs"] = _dtypes(host_inputs)[0]
    return results


def _bench_other_inputs(mod, version, host_inputs, shape, timer, torch, sets, flops, nbytes, log, regime,
                        budget_ms) -> Result:
    """Time ``version`` on the shape's inputs cast to ``version.bench_inputs`` (dtype, peer lesson) and that lesson's
    peer on the same inputs in the same run: the row's "x peer" compares it with that peer (``extra['peer_ms']``)."""
    from numba import cuda

    dtype, peer_lesson = version.bench_inputs
    t_in = [torch.from_numpy(x.astype(dtype)).cuda() for x in host_inputs]
    with torch.no_grad():
        ref = torch.mm(t_in[0].double(), t_in[1].double()).float().cpu().numpy()
    sets_in = [t_in] + [[x.clone() for x in t_in] for _ in range(sets - 1)]
    sets_out = [torch.empty(ref.shape, device="cuda") for _ in range(sets)]
    nb_in = [[cuda.as_cuda_array(x) for x in s] for s in sets_in]
    plans = [version.launches(*nb_in[i], out=cuda.as_cuda_array(sets_out[i])) for i in range(sets)]
    sets_out[0].fill_(float("nan"))
    for launch in plans[0]:
        launch()
    cuda.synchronize()
    check = compare(sets_out[0].cpu().numpy(), ref, TOLERANCE[peer_lesson])
    pname, pfn = _peer(peer_lesson, torch)
    with torch.no_grad():
        peer_check = compare(pfn(*t_in).cpu().numpy(), ref, TOLERANCE[peer_lesson] * 10)
        peer_times = timer.time(lambda i: pfn(*sets_in[i]), sets, budget_ms=budget_ms)
    extra = {"inputs": np.dtype(dtype).name, "peer": pname, "peer_ms": statistics.median(peer_times),
             "peer_rel_error": peer_check.rel_error, **({"regime": regime} if regime else {})}
    name = f"{version.name} ({np.dtype(dtype).name} in)"
    if not check.ok:
        log(f"  {mod.__name__} {shape} {name}: WRONG RESULT, not timed: {check}")
        return Result(version.lesson, shape, version.name, "kernel", math.nan, math.nan, math.nan, 0, flops, nbytes,
                      check.rel_error, False, str(check), extra=extra)

    def enqueue(i):
        s = timer.stream()
        for launch in plans[i]:
            launch(stream=s)

    times = timer.time(enqueue, sets, budget_ms=budget_ms)
    log(f"  {version.lesson} {shape} {name}: {statistics.median(times):.4f} ms (error {check.rel_error:.1e}); "
        f"{pname}: {extra['peer_ms']:.4f} ms (error {peer_check.rel_error:.1e})")
    return Result(version.lesson, shape, version.name, "kernel", statistics.median(times), min(times), max(times),
                  len(times), flops, nbytes, check.rel_error, extra=extra)


def _out_shape(mod, inputs):
    if mod.__name__.endswith(("matmul", "tensor_core")):
        return (inputs[0].shape[0], inputs[1].shape[1])
    if mod.__name__.endswith("softmax"):
        return inputs[0].shape
    if mod.__name__.endswith("attention"):  # (B, H, Sq, D): a query's row of values
        return tuple(inputs[0].shape[:3]) + tuple(inputs[2].shape[3:])
    from gpukernels.cbr import out_shape

    return out_shape(inputs[0].shape, inputs[1].shape)


def run(lessons, sizes=None, versions=None, log=print, save=None, suite: bool = False, min_runs: int | None = None,
        budget_ms: float | None = None) -> dict:
    """Measure every shape of every lesson (``suite``: the lesson's suite, with `suite_versions` unless
    ``versions`` is given). ``save(report)``, when given, is called after each shape with the report so far
    (``complete`` False until the end): a run cut off by a time limit keeps what it measured. ``min_runs`` /
    ``budget_ms`` cap every timing's runs and time (see ``Timer``): a quick, noisier run."""
    try:
        import torch

        _configure_torch(torch)
    except ImportError:
        torch = None
    timer = Timer(torch, min_runs, budget_ms)
    log("measuring ceilings (copy bandwidth, peer SGEMM)...")
    ceilings = measure_ceilings(timer, torch)
    env = environment()
    results = []

    def report(complete: bool) -> dict:
        rep = {"environment": env, "method": timer.method, "ceilings": ceilings, "complete": complete,
               "suite": suite, "results": [dict(asdict(r), tflops=r.tflops, gbps=r.gbps) for r in results]}
        if suite:
            rep["summary"] = suite_summary(rep)
        return rep

    for lesson, regime, shape, params, names in plan(lessons, sizes, versions, suite):
        # The suite has 40 shapes: 0.3 s of timed replays per version is plenty for a median of >= 25 runs.
        kw = {"regime": regime, "budget_ms": 300.0} if suite else {}
        if params:
            kw["params"] = params
        results += bench_shape(lesson, shape, timer, torch, names, log, **kw)
        if save:
            save(report(False))
    return report(True)


def plan(lessons, sizes=None, versions=None, suite: bool = False) -> list[tuple]:
    """What `run` measures, in order: (lesson, regime, shape, launch parameters, version names or None for all)."""
    tasks = []
    for lesson in lessons:
        if suite and not sizes:
            shapes = suite_shapes(lesson)
        else:  # a suite shape given by --sizes keeps its regime (a re-measured shape merges into a suite report)
            regimes = {s: r for r, s in suite_shapes(lesson)} if suite else {}
            shapes = [(regimes.get(tuple(s), ""), tuple(s)) for s in sizes or LESSONS[lesson].SHAPES["bench"]]
        # the lesson's causal cases (attention): its own shapes again with causal=True, beside the others
        causal = [] if suite or sizes else [tuple(s) for s in LESSONS[lesson].SHAPES.get("bench_causal", [])]
        names = versions or (suite_versions(lesson) if suite else None)
        tasks += [(lesson, r, s, {}, names) for r, s in shapes]
        tasks += [(lesson, "", s, {"causal": True}, names) for s in causal]
    return tasks


class CompileOnly(Timer):
    """A Timer that times nothing: `bench_shape` with it runs each version once (its kernels compiled, its result
    checked) on one input set, with no peer -- what `warm`'s processes do."""

    timing = False

    def time(self, enqueue, sets: int, min_runs: int = 25, budget_ms: float = 1500.0) -> list[float]:
        return [math.nan]


def warm(tasks, jobs: int, log=print) -> tuple[int, list[str]]:
    """Compile the kernels that ``tasks`` (`plan`) will launch in ``jobs`` processes at once, each version at each
    shape a job of its own, into the shared kernel cache (`gpukernels._kcache`, whose folder the caller has set): a
    benchmark run is otherwise mostly NVVM compiling a few hundred kernels one after another in the timing
    process. Times nothing. Returns (jobs run, what failed): a failed job costs nothing but its compile, which the
    timed run then does itself. The processes are ended before this returns, whatever happens."""
    import multiprocessing

    jobs_list = [(lesson, shape, params, name) for lesson, _, shape, params, names in tasks
                 for name in (names or LESSONS[lesson].VERSIONS)
                 if name in LESSONS[lesson].VERSIONS and supports(lesson, name, shape)]
    if not jobs_list:
        return 0, []
    # NumPy's threads in each process: the cores shared out, not all of them each
    threads = str(max(1, _cores() // jobs))
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    os.environ.update({k: threads for k in _THREAD_VARS})
    try:
        pool = multiprocessing.get_context("spawn").Pool(min(jobs, len(jobs_list)))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    failed = []
    try:
        for error in pool.imap_unordered(_warm_one, jobs_list):
            if error:
                failed.append(error)
        pool.close()
        pool.join()
    finally:
        pool.terminate()
    return len(jobs_list), failed


_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _warm_one(job) -> str:
    """One of `warm`'s jobs, in its process: '' when done, else what went wrong, in a line."""
    lesson, shape, params, name = job
    try:
        import torch

        _configure_torch(torch)
    except ImportError:
        torch = None
    try:
        bench_shape(lesson, shape, CompileOnly(torch), torch, [name], log=lambda m: None,
                    **({"params": params} if params else {}))
        return ""
    except Exception as err:  # noqa: BLE001 - any failure leaves the compile to the timed run
        first = str(err).splitlines()[0] if str(err) else ""
        return f"{lesson} {name} {shape}: {type(err).__name__}: {first[:120]}{'...' if len(first) > 120 else ''}"
    finally:
        if torch is not None:
            torch.cuda.empty_cache()


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def suite_summary(report: dict) -> dict:
    """Per lesson (and per regime): geometric mean, minimum and count of the peer's time over ``optimized``'s, each
    ratio within one shape of one run; a wrong or missing ``optimized`` row counts as a ratio of 0."""
    ratios: dict = {}
    for r in rows(report):
        if r["version"] != "optimized":
            continue
        regime = next((x.get("extra", {}).get("regime", "") for x in report["results"]
                       if x["lesson"] == r["lesson"] and "x".join(map(str, x["shape"])) == r["shape"]), "")
        v = r["of_peer"] or 0.0
        for key in (r["lesson"], f"{r['lesson']}/{regime}"):
            ratios.setdefault(key, []).append(v)
    return {key: {"geomean": _geomean(vs) if all(vs) else 0.0, "min": min(vs), "shapes": len(vs)}
            for key, vs in ratios.items()}


def _group(r: dict) -> tuple:
    """A result row's group: its lesson, its shape, and whether it ran under the causal mask (attention's causal rows
    share their shape with its other rows, and are compared with the peer of their own run)."""
    return r["lesson"], tuple(r["shape"]), bool((r.get("extra") or {}).get("causal"))


def _shape_label(lesson_shape_causal: tuple) -> str:
    _, shape, causal = lesson_shape_causal
    return "x".join(map(str, shape)) + (" causal" if causal else "")


def merge(reports: list[dict]) -> dict:
    """Several runs' reports as one: each (lesson, shape) group is taken whole from the last report that has it,
    so every ratio still compares a kernel with the peer measured in the same run. Environment, method and
    ceilings come from the last report; a row taken from an earlier one gets a ``note`` naming that run's date.
    ``complete``: every report was, or together they cover every shape of their lessons -- every suite shape (a
    suite), or every version at every bench shape (a standard run cut off and finished by a run of what it
    missed)."""
    groups: dict = {}
    for i, rep in enumerate(reports):
        earlier = f"run of {rep['environment'].get('date', '?')}" if i < len(reports) - 1 else ""
        taken: dict = {}
        for r in rep["results"]:
            taken.setdefault(_group(r), []).append(dict(r, note=r.get("note") or earlier))
        groups.update(taken)
    last = reports[-1]
    merged = {**last, "complete": all(rep.get("complete", True) for rep in reports),
              "results": [r for rs in groups.values() for r in rs]}
    if any(rep.get("suite") for rep in reports):
        # A suite run cut off by a time limit and finished by a later run (`--suite --sizes` the missing shapes) is
        # complete when together they hold every suite shape of every lesson they touch.
        lessons = list(dict.fromkeys(key[0] for key in groups))
        merged["complete"] = merged["complete"] or all(
            (lesson, shape, False) in groups for lesson in lessons for _, shape in suite_shapes(lesson))
        # rows in the suite's order (lesson, then the lesson's regimes), whichever run measured them
        order = {(lesson, shape, False): (i, j) for i, lesson in enumerate(lessons)
                 for j, (_, shape) in enumerate(suite_shapes(lesson))}
        keys = sorted(groups, key=lambda k: order.get(k, (lessons.index(k[0]), len(order))))
        merged["results"] = [r for k in keys for r in groups[k]]
        merged["suite"] = True
        merged["summary"] = suite_summary(merged)
    else:
        lessons = list(dict.fromkeys(key[0] for key in groups))
        merged["complete"] = merged["complete"] or all(_whole(groups, lesson, tuple(shape), causal)
                                                       for lesson in lessons for shape, causal in _bench_cases(lesson))
    return merged


def _bench_cases(lesson: str) -> list[tuple]:
    """(shape, causal) for every case of a lesson's standard benchmark, as `plan` lists them."""
    shapes = LESSONS[lesson].SHAPES
    return [(s, False) for s in shapes["bench"]] + [(s, True) for s in shapes.get("bench_causal", [])]


def _whole(groups: dict, lesson: str, shape: tuple, causal: bool) -> bool:
    """Whether ``groups`` holds a row of every version of the lesson that takes ``shape`` there."""
    names = {r["name"] for r in groups.get((lesson, shape, causal), [])}
    return all(name in names for name in LESSONS[lesson].VERSIONS if supports(lesson, name, shape))


# ----------------------------------------------------------------------------------------------------------
# Reporting: a rich table, and the README's table between markers
# ----------------------------------------------------------------------------------------------------------


def rows(report: dict) -> list[dict]:
    """One row per (lesson, shape, version) with derived figures: speed-up over naive, % of peer, % of ceiling."""
    ceil = report.get("ceilings", {})
    out = []
    groups: dict = {}
    for r in report["results"]:
        groups.setdefault(_group(r), []).append(r)
    for key, rs in groups.items():
        lesson = key[0]
        # "x naive": over the lesson's first step (naive; tensor_core's mma_global)
        first = next(iter(LESSONS[lesson].VERSIONS)) if lesson in LESSONS else "naive"
        naive = next((r for r in rs if r["name"] == first and r["ok"]), None)
        peer = next((r for r in rs if r["kind"] == "peer"), None)
        for r in rs:
            ms = r["median_ms"]
            floor_ms = None
            if ceil.get("sgemm_TFLOPs") and ceil.get("copy_GBps"):
                floor_ms = 1e3 * max(r["flops"] / (ceil["sgemm_TFLOPs"] * 1e12), r["bytes"] / (ceil["copy_GBps"] * 1e9))
            extra = r.get("extra") or {}
            # a step timed on other inputs than its lesson's (tensor_core.tf32x3: float32; attention's tensor-core
            # steps: float16) says so in tables, and whose time its "x peer" divides
            peer_ms = extra.get("peer_ms") if extra.get("inputs") else peer and peer["median_ms"]
            out.append({
                "lesson": lesson, "shape": _shape_label(key), "version": r["name"], "kind": r["kind"],
                "label": (r["name"] if not extra.get("inputs") else
                          f"{r['name']} ({extra['inputs']} in; x peer: {extra['peer']})" if extra.get("peer") else
                          f"{r['name']} ({extra['inputs']} in)"),
                "ms": ms, "tflops": r.get("tflops"), "gbps": r.get("gbps"), "ok": r["ok"],
                "speedup": (naive["median_ms"] / ms) if naive and r["ok"] else None,
                "of_peer": peer_ms / ms if peer_ms and r["ok"] else None,
                "of_ceiling": (floor_ms / ms) if floor_ms and r["ok"] else None,
                "note": r.get("note", ""),
            })
    return out


def _fmt(v, spec, suffix=""):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{spec}}{suffix}"


def print_table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    env = report["environment"]
    table = Table(title=f"gpukernels bench -- {env.get('device')} ({report['method']})")
    for col in ("lesson", "shape", "version", "ms", "TFLOP/s", "GB/s", "x naive", "x peer", "% ceiling"):
        table.add_column(col, justify="right" if col not in ("lesson", "shape", "version") else "left")
    for r in rows(report):
        table.add_row(r["lesson"], r["shape"], r["label"] if r["ok"] else f"{r['label']} (WRONG)",
                      _fmt(r["ms"], ".4f"), _fmt(r["tflops"], ".2f"), _fmt(r["gbps"], ".0f"),
                      _fmt(r["speedup"], ".1f"), _fmt(r["of_peer"], ".2f"),
                      _fmt(r["of_ceiling"] and 100 * r["of_ceiling"], ".0f", "%"))
    console = Console(width=140)
    console.print(table)
    c = report.get("ceilings", {})
    if c:
        console.print(f"ceilings measured in this run: copy {c['copy_GBps']:.0f} GB/s, "
                      f"peer SGEMM {c['sgemm_TFLOPs']:.1f} TFLOP/s")


def print_summary(report: dict) -> None:
    """The suite's figures: per lesson and regime, the library's time over ``optimized``'s, and what the dispatchers
    chose per shape."""
    for key, s in report["summary"].items():
        print(f"{key:28s} optimized vs peer: geomean {_fmt(s['geomean'], '.3f')}  min {s['min']:.3f}  "
              f"({s['shapes']} shapes)")
    for r in report["results"]:
        if r["name"] == "optimized" and r.get("extra", {}).get("choice"):
            print(f"{r['lesson']} {'x'.join(map(str, r['shape']))}: {r['extra']['choice']}")


def markdown_table(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"Measured on {env.get('device')} ({env.get('date', '')[:10]}, driver {env.get('driver_version')}, "
        f"numba-cuda {env['versions'].get('numba-cuda')}; {report['method']}; median of >= 20 runs). "
        "\"x peer\" is the library's time over ours (above 1 = faster than the library).",
        "",
        "| lesson | shape | version | time (ms) | TFLOP/s | GB/s | x naive | x peer |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    noted = False
    for r in rows(report):
        mark = " †" if r["note"] and r["ok"] else ""
        noted |= bool(mark)
        lines.append(f"| {r['lesson']} | {r['shape']} | {r['label']}{mark} | {_fmt(r['ms'], '.4f')} | "
                     f"{_fmt(r['tflops'], '.2f')} | {_fmt(r['gbps'], '.0f')} | {_fmt(r['speedup'], '.1f')} | "
                     f"{_fmt(r['of_peer'], '.2f')} |")
    if noted:
        lines += ["", "† measured in a follow-up run with the same harness; the row's `note` in the JSON says which "
                      "run, and the peer's time in that run where it differs from this table's (benchmarks/NOTES.md)."]
    return "\n".join(lines)


def suite_markdown(report: dict) -> str:
    """The suite's figures for the README: per lesson and regime the geometric mean and the minimum of the
    library's time over ``optimized``'s, then every shape with what the dispatcher chose."""
    env = report["environment"]
    # a merged report (`--from-json`): its earlier runs are named in the rows' notes
    runs = sorted({r["note"][len("run of "):] for r in report["results"] if r.get("note", "").startswith("run of ")}
                  | {env.get("date", "")})
    when = (f"{len(runs)} runs, {runs[0][:16].replace('T', ' ')} to {runs[-1][:16].replace('T', ' ')} UTC, merged "
            "shape by shape" if len(runs) > 1 else env.get("date", "")[:10])
    lines = [
        f"Measured on {env.get('device')} ({when}; {report['method']}; kernel time, the "
        "library peer in the same run). \"x peer\" is the library's time over `optimized`'s (above 1 = faster).",
        "",
        "| lesson | regime | shapes | geomean x peer | min x peer |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for key, sm in suite_summary(report).items():
        lesson, _, regime = key.partition("/")
        lines.append(f"| {lesson} | {regime or '**all**'} | {sm['shapes']} | {_fmt(sm['geomean'], '.2f')} | "
                     f"{sm['min']:.2f} |")
    lines += ["", "| lesson | regime | shape | `optimized` chose | ms | peer ms | x peer | x baseline |",
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    groups: dict = {}
    noted = False
    for r in report["results"]:
        groups.setdefault(_group(r), []).append(r)
    for key, rs in groups.items():
        lesson = key[0]
        opt = next((r for r in rs if r["name"] == "optimized"), None)
        peer = next((r for r in rs if r["kind"] == "peer"), None)
        base = next((r for r in rs if r["name"] == SUITE_BASELINE.get(lesson) and r["ok"]), None)
        if opt is None:
            continue
        choice = opt.get("extra", {}).get("choice", "")
        chose = (choice.split("}:")[0] + "}" if "}:" in choice else choice.split(":")[0]) if choice else "-"
        ok = opt["ok"]
        mark = " †" if opt.get("extra", {}).get("superseded") else ""
        noted = noted or bool(mark)
        lines.append(
            f"| {lesson} | {opt.get('extra', {}).get('regime', '')} | {_shape_label(key)}{mark} | {chose} | "
            f"{_fmt(opt['median_ms'], '.4f') if ok else 'WRONG'} | {_fmt(peer and peer['median_ms'], '.4f')} | "
            f"{_fmt(peer['median_ms'] / opt['median_ms'] if peer and ok else None, '.2f')} | "
            f"{_fmt(base['median_ms'] / opt['median_ms'] if base and ok else None, '.1f')} |")
    if noted:
        lines += ["", "† measured with code changed since (the row's `extra.superseded` in the JSON says how, and "
                      "where the final code's choice was measured)."]
    other = other_inputs_summary(report)
    if other:
        lines += ["", "Steps timed on other inputs than their lesson's, against the library's kernel for those inputs "
                      "in the same run (attention's tensor-core steps: float16; `optimized` takes them there too):", "",
                  "| lesson | step (inputs) | against | shapes | geomean x peer | min x peer |",
                  "| --- | --- | --- | ---: | ---: | ---: |"]
        lines += [f"| {o['lesson']} | `{o['name']}` ({o['inputs']}) | {o['peer']} | {o['shapes']} | "
                  f"{_fmt(o['geomean'], '.2f')} | {o['min']:.2f} |" for o in other]
    return "\n".join(lines)


def other_inputs_summary(report: dict) -> list[dict]:
    """Per (lesson, step) timed on other inputs than its lesson's (``extra.inputs``: attention's float16 tensor-core
    steps), over the suite's shapes: the geometric mean and minimum of its own peer's time (``extra.peer_ms``, same
    run) over its time; a wrong row counts as 0."""
    out: dict = {}
    for r in report["results"]:
        extra = r.get("extra") or {}
        if r["kind"] == "peer" or not extra.get("inputs") or not extra.get("peer_ms"):
            continue
        o = out.setdefault((r["lesson"], r["name"]), {"lesson": r["lesson"], "name": r["name"],
                                                      "inputs": extra["inputs"], "peer": extra.get("peer", ""),
                                                      "ratios": []})
        o["ratios"].append(extra["peer_ms"] / r["median_ms"] if r["ok"] and r["median_ms"] else 0.0)
    return [dict(o, shapes=len(o["ratios"]), min=min(o["ratios"]),
                 geomean=_geomean(o["ratios"]) if all(o["ratios"]) else 0.0) for o in out.values()]


def update_readme(report: dict, readme: Path) -> None:
    """Regenerate the README's table of this report: a suite run's between the suite markers, the standard
    benchmark's between the bench markers (a suite report once overwrote the standard table)."""
    from ._markers import replace_between as _replace

    name, body = ("suite", suite_markdown(report)) if report.get("suite") else ("bench", markdown_table(report))
    readme.write_text(_replace(readme.read_text(), name, body))


def bench_main(argv: list[str]) -> int:
    from .cli import ArgumentParser, input_json, output_file, positive, shape_names

    parser = ArgumentParser(prog="gpukernels bench", description=__doc__.split("\n")[0])
    parser.add_argument("lessons", nargs="*", help=f"lessons among {', '.join(LESSONS)} (default: all)")
    parser.add_argument("--sizes", nargs="+", help="shapes like 4096,4096,4096 (replaces the lesson's list)")
    parser.add_argument("--versions", nargs="+", help="only these versions (the peer always runs)")
    parser.add_argument("--suite", action="store_true",
                        help="the lessons' suites of real workloads (SHAPES['suite']), optimized and peer per shape")
    parser.add_argument("--json", type=Path, help="write every figure to this JSON file")
    parser.add_argument("--from-json", type=Path, nargs="+",
                        help="don't measure: print (and --update-readme from) these files, merged shape by shape "
                             "(a later file's shape replaces an earlier one's, peer included)")
    parser.add_argument("--update-readme", type=Path, help="regenerate the table between the markers in this file")
    parser.add_argument("--jobs", type=positive(int, "a whole number of processes > 0"), default=None,
                        help="compile the kernels in this many processes at once before timing them in one "
                             "(default: one per core, at most 16; 1: each compiles in the timed process)")
    parser.add_argument("--overhead", action="store_true",
                        help="host microseconds per launcher call on small work, per array kind, against the torch "
                             "op (gpukernels/overhead.py; gpukernels bench --overhead --help lists its options)")
    if "--overhead" in argv:
        from gpukernels.overhead import overhead_main

        return overhead_main([a for a in argv if a != "--overhead"])
    args = parser.parse_args(argv)
    lessons = args.lessons or list(LESSONS)
    unknown = [name for name in lessons if name not in LESSONS]
    if unknown:
        parser.error(f"unknown lesson {unknown[0]!r}; choose from {', '.join(LESSONS)}")
    if args.from_json:  # what chooses or runs measurements means nothing to reports already measured: refused,
        # rather than silently ignored (the report itself says whether it is a suite)
        given = [(f"LESSON {' '.join(args.lessons)!r}", bool(args.lessons)),
                 (f"--sizes {' '.join(args.sizes or [])!r}", bool(args.sizes)),
                 (f"--versions {' '.join(args.versions or [])!r}", bool(args.versions)),
                 ("--suite", args.suite), (f"--jobs {args.jobs}", args.jobs is not None)]
        for option, on in given:
            if on:
                parser.error(f"{option}: --from-json prints reports already measured, whole; it takes no "
                             f"{option.split()[0]} (expected only --json and --update-readme beside it)")
    if args.jobs is not None and args.jobs > _cores():
        parser.error(f"--jobs {args.jobs}: expected at most {_cores()}, the cores this process may use (more "
                     "compile processes than cores only slow each other down)")

    for name in args.versions or []:  # a typo would cost a GPU run that times the peers alone
        if not any(name in LESSONS[lesson].VERSIONS for lesson in lessons):
            known = ", ".join(dict.fromkeys(v for lesson in lessons for v in LESSONS[lesson].VERSIONS))
            parser.error(f"--versions {name!r}: no version of {', '.join(lessons)} has that name; choose from {known}")
    for text in args.sizes or []:
        if not all(part.isdigit() and int(part) >= 1 for part in text.split(",")):
            parser.error(f"--sizes {text!r}: expected a shape of whole numbers >= 1 joined by commas, e.g. "
                         "4096,4096,4096")
        for name in lessons:  # as many numbers as each lesson's shape has (attention's B,H,Sq,Sk,D: five)
            dims = shape_names(LESSONS[name])
            if len(text.split(",")) != len(dims):
                example = ",".join(map(str, LESSONS[name].SHAPES["bench"][0]))
                parser.error(f"--sizes {text!r}: {name} takes {len(dims)} numbers, {','.join(dims)} (e.g. {example}); "
                             f"got {len(text.split(','))}")
    # every file named is checked before anything is measured: a typo must not cost a benchmark run, nor its results
    reports = [input_json(f, "--from-json", key="results", what="a `gpukernels bench --json` report",
                           report="bench")
               for f in args.from_json or []]
    if args.update_readme is not None:
        readme = args.update_readme
        if not readme.is_file():  # a folder was "no such file"
            what = "is a folder" if readme.is_dir() else "no such file"
            parser.error(f"--update-readme {str(args.update_readme)!r}: {what}; expected a Markdown file (such as "
                         "README.md) holding <!-- bench:begin --> ... <!-- bench:end --> (or suite:) markers")
        output_file(args.update_readme, "--update-readme")
        kind = "suite" if args.suite or any(r.get("suite") for r in reports) else "bench"
        if f"<!-- {kind}:begin -->" not in readme.read_text(errors="replace"):
            parser.error(f"--update-readme {str(args.update_readme)!r}: the file lacks the markers "
                         f"<!-- {kind}:begin --> ... <!-- {kind}:end --> between which the table goes")
    save = None
    if args.json:
        output_file(args.json, "--json")

        def save(rep, path=args.json):
            path.write_text(json.dumps(rep, indent=1))

    if args.from_json:
        report = merge(reports)
    else:
        if gpukernels.MODE != "gpu":  # nothing measured: a status that says so (it was 0, as if it had measured)
            print("gpukernels bench measures GPU time, and this is the CUDA simulator: it measured nothing.\n"
                  "Use `gpukernels trace LESSON --version V` to count the memory traffic each version generates,\n"
                  "or run the benchmark on a machine with an NVIDIA GPU. Results measured on an H200 are in\n"
                  "benchmarks/results/.", file=sys.stderr)
            return 1
        sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else None  # checked above
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        jobs = args.jobs or min(16, _cores())
        temporary = _kcache.ENV not in os.environ  # the folder is this run's, removed at its end
        with _kcache.shared(prefix="gpukernels-bench-kernels-") as cache:
            lookups = None  # where the timed run's cache lookups are logged: whether it loaded what was compiled
            if jobs > 1 and cache:
                tasks = plan(lessons, sizes, args.versions, args.suite)
                start = time.perf_counter()
                log(f"compiling: each version at each shape once, in {jobs} processes...")
                count, failed = warm(tasks, jobs)
                for line in failed:
                    log(f"  not compiled ahead (the timed run compiles it): {line}")
                log(f"compiled {count} version x shape runs in {time.perf_counter() - start:.0f} s; timing them")
                own = temporary and _kcache.LOG_ENV not in os.environ  # a log in the run's own folder
                if own:
                    os.environ[_kcache.LOG_ENV] = os.path.join(cache, "lookups.log")
                lookups = os.environ.get(_kcache.LOG_ENV)
            start = time.perf_counter()
            try:
                report = run(lessons, sizes, args.versions, log=log, save=save, suite=args.suite)
            finally:
                if lookups:
                    seen = _kcache.lookups(lookups, os.getpid())
                    log(f"timed in {time.perf_counter() - start:.0f} s: {seen.get('hit', 0)} kernels loaded as "
                        f"compiled ahead, {seen.get('compiled', 0) + seen.get('waited', 0)} compiled in the timed run")
                    if own:
                        os.environ.pop(_kcache.LOG_ENV, None)
    if save:
        save(report)
    print_table(report)
    if report.get("summary"):
        print_summary(report)
    if args.update_readme:
        update_readme(report, args.update_readme)
    kernels = [r for r in report["results"] if r["kind"] == "kernel"]
    return 0 if kernels and all(r["ok"] for r in kernels) else 1  # none measured, or one wrong: not a success
