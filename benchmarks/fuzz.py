"""Every version of every lesson on shapes nobody chose: random shapes drawn across each dispatcher's regimes, each run
checked against a float64 reference of its own inputs, on a NaN-poisoned output, through the public call.

    GPUKERNELS_DEVICE=gpu python benchmarks/fuzz.py [LESSON ...] [--cases N] [--seed S] [--budget SECONDS]
        [--workers W] [--max-work FLOPS] [--versions V ...] [--json out.json]

Each case draws a shape for its lesson (sides log-uniform from 1 to a few thousand, with now and then a side of 1 to
4, a power of two, or one or three away from one; attention's D among 1..128, its Sq and Sk apart; cbr's filters of 1
to 5 and padding 0 to 2; attention causal or not), fresh inputs with the lesson's outliers (``make_inputs``), and an
array kind (NumPy arrays, now and then views that are not contiguous; Numba device arrays; torch tensors where torch
is installed). Every version that takes the shape
(``check.supports``) runs twice through its public call -- the checked path, then the fast path a GPU takes for a call
it has seen -- each into an output filled with NaN, and is compared with the float64 reference (``check.compare``:
relative error within the lesson's tolerance, no element far off, no NaN left). The inputs are compared with a copy
afterwards: no version may write them. The naive steps run only on the smaller shapes (``SLOW_WORK``).

What the dispatchers chose is counted (``optimized.choose``: the step and the configuration's kind), so the report
says which regimes the cases reached. ``--workers W`` runs W processes of disjoint cases sharing one kernel cache.
Exit status 1 when a run was wrong or raised; the JSON lists each failure with what reproduces it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter

import numpy as np

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

from gpukernels import LESSONS, check  # noqa: E402
from gpukernels._launch import MODE, LaunchError  # noqa: E402

#: Versions that run only on cases of at most this many flops (their rate is a few GFLOP/s to 1 TFLOP/s): the naive
#: and untiled steps, whose time grows with the work and whose regime does not depend on the shape.
SLOW = {"matmul": ("naive", "coalesced"), "softmax": ("naive",), "cbr": ("naive",), "tensor_core": ("mma_global",),
        "attention": ("naive", "fused_rows")}
SLOW_WORK = 2**32
#: The largest case drawn (flops), on a GPU and in the simulator: the float64 reference and the slow steps bound it.
MAX_WORK = {"gpu": 2**37, "sim": 2**16}
MAX_ELEMENTS = {"gpu": 2**27, "sim": 2**12}  # of the largest input or output (attention's naive scores too)
LESSON_ORDER = ("matmul", "softmax", "cbr", "tensor_core", "attention")


def side(rng, hi: int, lo: int = 1) -> int:
    """One dimension: log-uniform in [lo, hi], else (a third of the time) an edge: 1-4, a power of two, or one or three
    off one."""
    u = rng.random()
    if u < 0.12:
        v = int(rng.integers(1, 5))
    elif u < 0.34:
        p = 2 ** int(rng.integers(2, max(3, int(math.log2(hi)) + 1)))
        v = p + int(rng.choice([0, 0, -1, 1, -3, 3]))
    else:
        v = int(round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(hi)))))
    return max(lo, min(hi, v))


def draw(lesson: str, rng, mode: str, max_work=None):
    """(shape, params) of one case of ``lesson``, within MAX_WORK (or ``max_work``) and MAX_ELEMENTS."""
    work, elems = min(MAX_WORK[mode], max_work or math.inf), MAX_ELEMENTS[mode]
    big = 6000 if mode == "gpu" else 40
    for _ in range(1000):
        params = {}
        if lesson in ("matmul", "tensor_core"):
            shape = (side(rng, big), side(rng, big), side(rng, big))
            if rng.random() < 0.15:  # a vocabulary projection: N very wide, K a few hundred
                shape = (side(rng, 4096 if mode == "gpu" else 8), side(rng, 60000 if mode == "gpu" else 64),
                         side(rng, 1024 if mode == "gpu" else 16))
            m, n, k = shape
            flops, sizes = 2 * m * n * k, (m * k, k * n, m * n)
        elif lesson == "softmax":
            shape = (side(rng, 30000 if mode == "gpu" else 40), side(rng, 70000 if mode == "gpu" else 80))
            flops, sizes = 5 * shape[0] * shape[1], (shape[0] * shape[1],)
        elif lesson == "cbr":
            r = int(rng.choice([1, 3, 3, 3, 5, 2]))
            s = r if rng.random() < 0.85 else int(rng.choice([1, 3, 5]))
            hw = side(rng, 230 if mode == "gpu" else 12)
            shape = (side(rng, 128 if mode == "gpu" else 3), side(rng, 512 if mode == "gpu" else 6), hw,
                     hw if rng.random() < 0.7 else side(rng, 230 if mode == "gpu" else 12),
                     side(rng, 512 if mode == "gpu" else 9), r, s)
            params["padding"] = int(rng.choice([1, 1, 1, 0, 2]))
            n, c, h, w, kk, r, s = shape
            ho, wo = h + 2 * params["padding"] - r + 1, w + 2 * params["padding"] - s + 1
            if ho < 1 or wo < 1:
                continue
            flops, sizes = 2 * n * kk * c * r * s * ho * wo, (n * c * h * w, n * kk * ho * wo)
        elif lesson == "attention":
            d = int(rng.choice([16, 32, 64, 64, 80, 128, 128])) if rng.random() < 0.75 else int(rng.integers(1, 129))
            if mode == "sim":
                d = min(d, int(rng.choice([1, 3, 16, 17, 32])))
            sq = side(rng, 8192 if mode == "gpu" else 40)
            sk = sq if rng.random() < 0.5 else side(rng, 8192 if mode == "gpu" else 40)
            if rng.random() < 0.1:
                sq = int(rng.integers(1, 5))  # decoding
            shape = (side(rng, 32 if mode == "gpu" else 2), side(rng, 32 if mode == "gpu" else 3), sq, sk, d)
            params["causal"] = bool(rng.random() < 0.4)
            if rng.random() < 0.2:
                params["scale"] = float(rng.choice([0.05, 0.3, 1.0]))
            b, h = shape[:2]
            flops = 4 * b * h * sq * sk * d
            # naive's stored scores count only where naive runs (SLOW_WORK)
            sizes = (b * h * max(sq, sk) * d,) + ((b * h * sq * sk,) if flops <= SLOW_WORK else ())
        else:
            raise ValueError(f"no shapes drawn for the lesson {lesson!r}")
        if flops <= work and max(sizes) <= elems:
            return tuple(int(x) for x in shape), params, flops
    raise RuntimeError(f"{lesson}: no shape within the limits after 1000 draws")


def branch(lesson: str, shape, params, inputs) -> str:
    """What the lesson's dispatcher picks for this case, in a few words: its step and the kinds of its configuration."""
    opt = LESSONS[lesson].optimized
    if lesson == "matmul":
        m, n, k = shape
        c = opt.choose(m, n, k, aligned=k % 4 == 0 and n % 4 == 0)
    elif lesson == "tensor_core":
        m, n, k = shape
        c = opt.choose(m, n, k, aligned=k % 8 == 0 and n % 8 == 0)
    elif lesson == "softmax":
        c = opt.choose(*shape, aligned=shape[1] % 4 == 0)
    elif lesson == "cbr":
        c = LESSONS["cbr"].choice_for(inputs[0].shape, inputs[1].shape, params.get("padding", 1))
    else:
        b, h, sq, sk, d = shape
        c = opt.choose(b, h, sq, sk, d, causal=params.get("causal", False), half=check._is_float16(inputs[0]))
    flags = sorted(key for key, value in c.config.items() if value is True)
    for key in ("tile", "splits", "cols", "rows"):
        value = c.config.get(key)
        if key == "splits" and isinstance(value, int):
            flags.append("split" if value > 1 else "whole")
        elif key == "tile" and value:
            flags.append(str(value))
    return " ".join([c.step] + flags)


class Arrays:
    """Inputs and outputs of one array kind: 'numpy' (host), 'numba' (device arrays) or 'torch' (CUDA tensors)."""

    def __init__(self, kind: str, strided: bool = False):
        self.kind, self.strided = kind, strided
        if kind == "torch":
            import torch

            self.torch = torch

    def put(self, x, strided=None):
        if self.kind == "numpy":
            if self.strided if strided is None else strided:  # the same values, every second element of a wider array
                wide = np.full(x.shape[:-1] + (2 * x.shape[-1],), np.nan, x.dtype)
                wide[..., ::2] = x
                return wide[..., ::2]
            return x
        if self.kind == "numba":
            from numba import cuda

            return cuda.to_device(x)
        return self.torch.from_numpy(np.ascontiguousarray(x)).cuda()

    def nan(self, shape):
        return self.put(np.full(shape, np.nan, np.float32), strided=False)

    def get(self, x) -> np.ndarray:
        if self.kind == "numpy":
            return np.asarray(x)
        if self.kind == "numba":
            return x.copy_to_host()
        return x.cpu().numpy()


def reference(lesson: str, inputs, params, torch):
    """The float64 reference of these inputs (on the GPU through torch where it is installed), as float32."""
    mod = LESSONS[lesson]
    if torch is not None and MODE == "gpu":
        from gpukernels.bench import _reference

        t_inputs = [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in inputs]
        if lesson == "attention" and params.get("scale") is not None:
            # the GPU reference scales by 1/sqrt(D): q scaled in float64 to make up the difference
            t_inputs[0] = t_inputs[0].double() * (params["scale"] * math.sqrt(inputs[0].shape[-1]))
        with torch.no_grad():
            return _reference(lesson, torch, t_inputs, params).float().cpu().numpy()
    return mod.reference(*inputs, **params)


def error_scale(lesson: str, inputs, params, torch):
    """What each output's rounding error is proportional to, where the lesson says (cbr: conv2d(|x|, |w|) + |b|, in
    float64 on the GPU through torch where it is installed), else None: the reference itself."""
    mod = LESSONS[lesson]
    if not hasattr(mod, "error_scale"):
        return None
    if lesson == "cbr" and torch is not None and MODE == "gpu":
        x, w, b = (torch.from_numpy(np.ascontiguousarray(a)).cuda().double().abs() for a in inputs)
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w, b, padding=params.get("padding", 1)).cpu().numpy()
    return mod.error_scale(*inputs, **params)


def run_case(lesson: str, index: int, seed: int, mode: str, kinds, torch, versions=None, max_work=None) -> dict:
    rng = np.random.default_rng([seed, index, LESSON_ORDER.index(lesson)])
    shape, params, flops = draw(lesson, rng, mode, max_work)
    mod = LESSONS[lesson]
    kind = str(rng.choice(kinds))
    strided = kind == "numpy" and bool(rng.random() < 0.3)  # NumPy views that are not contiguous: the API copies them
    arrays = Arrays(kind, strided)
    base = mod.make_inputs(shape, int(rng.integers(2**31)))
    case = {"lesson": lesson, "shape": list(shape), "params": params, "kind": kind + (" strided" if strided else ""),
            "flops": flops, "runs": [],
            "failures": []}
    refs = {}
    for name in versions or mod.VERSIONS:
        if name not in mod.VERSIONS or not check.supports(lesson, name, shape):
            continue
        if name in SLOW.get(lesson, ()) and flops > SLOW_WORK:
            continue
        inputs = check.version_inputs(lesson, name, base)
        half = any(check._is_float16(x) for x in inputs)
        if name in getattr(mod, "OWN_CHECK", ()):  # a reference of its own (tensor_core.fp8: its inputs in FP8)
            refs[name] = (check.reference(lesson, name, inputs, **params), None)
            half = name
        elif half not in refs:  # once per precision of the inputs: (reference, error scale)
            refs[half] = (reference(lesson, inputs, params, torch), error_scale(lesson, inputs, params, torch))
        ref, scale = refs[half]
        tol = check.tolerance(lesson, name, inputs)
        if name == "optimized":
            try:
                case["branch"] = branch(lesson, shape, params, inputs)
            except Exception as exc:  # noqa: BLE001 -- a dispatcher that cannot say what it picks is a finding
                case["failures"].append({"version": name, "error": f"choose: {type(exc).__name__}: {exc}"})
        copies = [np.array(x, copy=True) for x in inputs]
        given = [arrays.put(x) for x in inputs]
        for attempt in ("checked", "fast"):
            out = arrays.nan(ref.shape)
            try:
                result = mod.VERSIONS[name](*given, out=out, **params)
                got = arrays.get(result)
                res = check.compare(got, ref, tol, scale=scale)
            except (LaunchError, ValueError, TypeError) as exc:
                case["failures"].append({"version": name, "attempt": attempt,
                                         "error": f"{type(exc).__name__}: {exc}"})
                break
            except Exception as exc:  # noqa: BLE001 -- recorded with its place, the run goes on
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                case["failures"].append({"version": name, "attempt": attempt,
                                         "error": f"{type(exc).__name__}: {exc} ({tb.filename}:{tb.lineno})"})
                break
            case["runs"].append(name)
            if not res.ok:
                case["failures"].append({"version": name, "attempt": attempt, "error": str(res)})
                break
        after = [arrays.get(x) for x in given]
        for i, (x, y) in enumerate(zip(copies, after)):
            if not np.array_equal(x, y, equal_nan=True):
                case["failures"].append({"version": name, "error": f"input {i} was modified"})
    return case


def run(lessons, cases: int, seed: int, budget: float, shard: int = 0, shards: int = 1, versions=None,
        max_work=None, log=print):
    mode = "gpu" if MODE == "gpu" else "sim"
    try:
        import torch  # noqa: F401

        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    kinds = ["numpy", "numba"] + (["torch"] if torch is not None and mode == "gpu" else [])
    t0 = time.monotonic()
    report = {"device": MODE, "seed": seed, "cases": [], "stopped": None}
    for index in range(shard, cases, shards):
        if time.monotonic() - t0 > budget:
            report["stopped"] = f"time budget of {budget:g} s spent after {len(report['cases'])} cases"
            break
        for lesson in lessons:
            c = run_case(lesson, index, seed, mode, kinds, torch, versions, max_work)
            report["cases"].append(c)
            status = "FAIL " + "; ".join(f"{f['version']}: {f['error'][:200]}" for f in c["failures"]) \
                if c["failures"] else "ok"
            log(f"[{index}] {lesson} {c['shape']} {c['params']} {c['kind']} -> {c.get('branch', '')}: "
                f"{len(c['runs'])} runs {status}", flush=True)
    return report


def summary(report: dict) -> dict:
    cases = report["cases"]
    out = {"cases": len(cases), "runs": sum(len(c["runs"]) for c in cases),
           "failed_cases": sum(1 for c in cases if c["failures"])}
    for lesson in LESSON_ORDER:
        mine = [c for c in cases if c["lesson"] == lesson]
        if mine:
            out[lesson] = {"cases": len(mine), "failed": sum(1 for c in mine if c["failures"]),
                           "branches": dict(Counter(c.get("branch", "?") for c in mine).most_common())}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lessons", nargs="*", help=f"lessons among {', '.join(LESSON_ORDER)} (default: all)")
    p.add_argument("--cases", type=int, default=50, help="cases per lesson")
    p.add_argument("--seed", type=int, default=None, help="default: drawn, and printed")
    p.add_argument("--budget", type=float, default=1e9, help="stop starting cases after this many seconds")
    p.add_argument("--versions", nargs="+", default=None, help="only these versions")
    p.add_argument("--max-work", type=float, default=None,
                   help="largest case in flops (default: 2^37 on a GPU; smaller under compute-sanitizer)")
    p.add_argument("--workers", type=int, default=1, help="processes, each its share of the cases")
    p.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="write the report here")
    a = p.parse_args(argv)
    if a.cases < 1 or a.workers < 1 or a.budget <= 0:
        p.error(f"--cases, --workers and --budget must be positive; got {a.cases}, {a.workers}, {a.budget:g}")
    seed = a.seed if a.seed is not None else int(np.random.default_rng().integers(2**31))
    unknown = [x for x in a.lessons if x not in LESSON_ORDER]
    if unknown:
        p.error(f"lessons must be among {', '.join(LESSON_ORDER)}; got {', '.join(unknown)}")
    lessons = [lesson for lesson in LESSON_ORDER if lesson in (a.lessons or LESSON_ORDER)]
    if a.workers == 1:
        shard, shards = (int(x) for x in a.shard.split("/"))
        report = run(lessons, a.cases, seed, a.budget, shard, shards, a.versions, a.max_work)
    else:
        env = dict(os.environ)
        env.setdefault("GPUKERNELS_KERNEL_CACHE", tempfile.mkdtemp(prefix="fuzz-kcache-"))
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for i in range(a.workers):
                cmd = [sys.executable, __file__, *lessons, "--cases", str(a.cases), "--seed", str(seed), "--budget",
                       str(a.budget), "--shard", f"{i}/{a.workers}", "--json", os.path.join(tmp, f"{i}.json")]
                if a.versions:
                    cmd += ["--versions", *a.versions]
                if a.max_work:
                    cmd += ["--max-work", str(a.max_work)]
                procs.append(subprocess.Popen(cmd, env=env))
            codes = [proc.wait() for proc in procs]
            report = {"device": MODE, "seed": seed, "cases": [], "stopped": None}
            for i, code in enumerate(codes):
                path = os.path.join(tmp, f"{i}.json")
                if not os.path.exists(path):
                    report["cases"].append({"lesson": "?", "shape": [], "params": {}, "runs": [],
                                            "failures": [{"version": "?", "error": f"worker {i} exited {code}"}]})
                    continue
                part = json.load(open(path))
                report["cases"] += part["cases"]
                report["stopped"] = report["stopped"] or part["stopped"]
    report["summary"] = summary(report)
    if a.shard == "0/1":  # not a worker of another run
        print(json.dumps(report["summary"], indent=1))
        print(f"seed {seed}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if report["summary"]["failed_cases"] else 0


if __name__ == "__main__":
    sys.exit(main())
