"""``gpukernels grade``: score students' kernels for the exercises in ``exercises/``, in a way a teacher can trust.

For each exercise, the grader (this process) loads the exercise's spec from its *own* copy of ``exercises/``,
draws fresh random inputs, computes the reference itself, and hands only the inputs (and a NaN-poisoned output)
to a child process that imports the submission and launches its kernel. The child sends back raw outputs and
raw observations through files; every score is computed here. Gates, in order -- a later gate counts only when
the earlier ones passed:

1. ``correctness``  in the simulator on every shape of the spec (odd sizes included), once in thread order and
   once in a shuffled order (a race shows up as a different answer), inputs checked unmodified afterwards;
2. ``compiles``     ``cuda.compile_ptx`` for sm_90 in a second child with the real CUDA target (no GPU needed):
   catches kernels that only the simulator can run (NumPy calls, Python lists, host functions);
3. ``technique``    the tracer's observations (loads per element, coalescing, bank conflicts, races) against
   the spec's checks; skipped, with a note and no points at stake, while ``gpukernels.trace`` is missing;
4. ``speed``        on a GPU only: the kernel against the lesson's naive kernel, both timed with CUDA events;
   skipped, with no points at stake, in simulator mode.

A submission that fails to import, lacks the function, loops forever or kills its process gets 0 for that
exercise with a message saying so; the other exercises are graded as usual.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .spec import GATES, Exercise, load

CHILD = Path(__file__).with_name("_child.py")
DEFAULT_TIMEOUT = 60.0  # seconds per child process; the simulator's own per-launch limit is half of it
HELP_HINTS = "run `gpukernels grade {ex} --hints {n}` for more help"


# ----------------------------------------------------------------------------------------------------------
# Where exercises and submissions are
# ----------------------------------------------------------------------------------------------------------


def exercises_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The grader's exercises: ``--exercises``, else ``$GPUKERNELS_EXERCISES``, else the repository's
    ``exercises/`` next to this package, else ``./exercises``."""
    if explicit is not None:
        if not available(Path(explicit)):
            raise FileNotFoundError(f"{explicit} holds no exercises (NN_name/spec.py folders)")
        return Path(explicit).resolve()
    for candidate in (os.environ.get("GPUKERNELS_EXERCISES"), Path(__file__).resolve().parents[2] / "exercises",
                      Path.cwd() / "exercises"):
        if candidate and Path(candidate).is_dir() and available(Path(candidate)):
            return Path(candidate).resolve()
    raise FileNotFoundError("no exercises/ folder found; pass --exercises-dir DIR")


def available(root: Path) -> dict[str, Path]:
    """Exercise name -> folder, in order (``NN_name`` folders with a ``spec.py``)."""
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir())
            if p.is_dir() and p.name[:2].isdigit() and (p / "spec.py").exists()}


def select(names: list[str] | None, root: Path) -> list[str]:
    """Resolve ``06``, ``6``, ``matmul_tiled`` or ``06_matmul_tiled`` to exercise names (all when empty)."""
    found = available(root)
    if not names:
        return list(found)
    chosen = []
    for name in names:
        key = name.strip().rstrip("/").split("/")[-1]
        matches = [ex for ex in found if ex == key or ex[:2] == key.zfill(2) or ex[3:] == key]
        if len(matches) != 1:
            raise ValueError(f"unknown exercise {name!r}; choose from: {', '.join(found)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def infer_exercise(path: Path, root: Path) -> str:
    """The exercise a lone file is for, from its name (``06_matmul_tiled.py``) or its folder
    (``06_matmul_tiled/kernel.py``)."""
    for key in (path.stem, path.resolve().parent.name):
        if key in available(root):
            return key
    raise ValueError(f"cannot tell which exercise {path} is for; name it, e.g. gpukernels grade 06 --submission {path}")


def find_submission(exercise: str, submission: Path | None, root: Path, single: bool) -> tuple[Path | None, str]:
    """The file to grade for ``exercise``: ``SUB/NN_name/kernel.py``, ``SUB/NN_name.py``, ``SUB`` itself (a
    file, when one exercise is graded), or by default the working copy ``exercises/NN_name/kernel.py``."""
    if submission is None:
        candidates = [root / exercise / "kernel.py"]
    elif submission.is_file():
        if not single and not submission.name.startswith(exercise):
            return None, f"{submission} is one file; name the exercise it is for"
        candidates = [submission]
    else:
        candidates = [submission / exercise / "kernel.py", submission / f"{exercise}.py",
                      submission / exercise[3:] / "kernel.py", submission / f"{exercise[3:]}.py"]
    for path in candidates:
        if path.is_file():
            return path.resolve(), ""
    return None, "no submission found (looked for " + ", ".join(str(p) for p in candidates) + ")"


# ----------------------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------------------


@dataclass
class TestResult:
    name: str
    score: float
    max_score: float
    output: str
    status: str  # passed | failed | skipped


@dataclass
class ExerciseResult:
    exercise: str
    submission: str | None
    tests: list[TestResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)

    def test(self, gate: str) -> TestResult:
        return next(t for t in self.tests if t.name.endswith(f": {gate}"))


# ----------------------------------------------------------------------------------------------------------
# Child processes
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Child:
    """One child process: its job file, how it ended, and what it wrote."""

    key: tuple
    job: dict
    env: dict
    timeout: float
    exclusive: bool = False  # times kernels on the GPU: runs alone
    proc: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    result: dict | None = None
    stdout: str = ""
    stderr: str = ""

    def start(self) -> None:
        work = Path(self.job["work"])
        job_path = work / f"{self.job['prefix_name']}.json"
        job_path.write_text(json.dumps(self.job))
        self._out = open(work / f"{self.job['prefix_name']}.stdout", "w+b")
        self._err = open(work / f"{self.job['prefix_name']}.stderr", "w+b")
        kwargs = {}
        if os.name == "posix":
            kwargs.update(start_new_session=True, preexec_fn=_child_limits)
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, str(CHILD), str(job_path)], cwd=str(work), env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err, **kwargs)

    def poll(self) -> bool:
        """True once the child has ended (killing it when it ran past its time limit)."""
        if self.proc.poll() is None:
            if time.monotonic() - self.started <= self.timeout:
                return False
            self.timed_out = True
            _kill_group(self.proc)
        self.seconds = time.monotonic() - self.started
        self.returncode = self.proc.returncode
        for name, handle in (("stdout", self._out), ("stderr", self._err)):
            handle.seek(0)
            setattr(self, name, handle.read(200_000).decode("utf-8", "replace"))
            handle.close()
        try:
            with open(self.job["result"]) as f:
                result = json.load(f)
            self.result = result if isinstance(result, dict) else None
        except (OSError, ValueError):
            self.result = None
        return True


def _child_limits() -> None:  # pragma: no cover - runs in the child between fork and exec
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfaulting submission leaves no core file


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and anything it started (it leads its own session)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _run_pool(children: list[Child], jobs: int, on_done) -> None:
    """Run children ``jobs`` at a time; ``on_done(child)`` may return further children to run. Children that time
    kernels on the GPU (``exclusive``) run one at a time, so that no two timings share the GPU."""
    queue, running = list(children), []
    try:
        while queue or running:
            busy_gpu = any(c.exclusive for c in running)
            for child in list(queue):
                if len(running) >= jobs:
                    break
                if child.exclusive and busy_gpu:
                    continue
                queue.remove(child)
                child.start()
                running.append(child)
                busy_gpu |= child.exclusive
            time.sleep(0.02)
            for child in [c for c in running if c.poll()]:
                running.remove(child)
                queue = list(on_done(child) or []) + queue
    finally:
        for child in running:
            _kill_group(child.proc)


def _env(mode: str, gpu: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "GPUKERNELS_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ next to the submission
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    if mode == "sim":
        env["GPUKERNELS_DEVICE"] = "sim"
    else:
        env["NUMBA_ENABLE_CUDASIM"] = "0"
        if gpu:
            env["GPUKERNELS_DEVICE"] = "gpu"
    return env


# ----------------------------------------------------------------------------------------------------------
# One exercise: cases, children, scores
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    shape: tuple
    seed: int
    inputs: dict
    params: dict
    ref: np.ndarray
    grid: tuple
    block: tuple


def _dims(d) -> list:
    d = (d,) if isinstance(d, int) else tuple(d)
    return [int(x) for x in d]


def make_case(ex: Exercise, shape: tuple, seed: int, reference: bool = True) -> Case:
    inputs = {k: np.ascontiguousarray(v) for k, v in ex.make_inputs(shape, seed).items()}
    params = dict(ex.params(shape))
    ref = np.asarray(ex.reference(**inputs, **params)) if reference else None
    grid, block = ex.launch(shape)
    return Case(tuple(shape), seed, inputs, params, ref, tuple(_dims(grid)), tuple(_dims(block)))


def _case_job(ex: Exercise, case: Case, npz: Path) -> dict:
    out = np.full(ex.out_shape(case.shape), np.nan, dtype=np.float32)  # poison: unwritten elements fail
    np.savez(npz, **case.inputs, **{ex.out: out})
    args = []
    for name in ex.args:
        if name in case.inputs or name == ex.out:
            args.append([name, "array", None])
        elif name in case.params:
            value = case.params[name]
            args.append([name, "scalar", value.item() if hasattr(value, "item") else value])
        else:
            raise KeyError(f"{ex.name}: argument {name!r} is neither an input, the output nor a param")
    return {"npz": str(npz), "args": args, "grid": list(case.grid), "block": list(case.block),
            "shape": list(case.shape)}


class Grading:
    """The state of one (exercise, submission) pair while its children run."""

    def __init__(self, ex: Exercise, submission: Path | None, missing: str, work: Path, timeout: float,
                 gpu: bool, speed: bool, hints: int, seed: int, index: int = 0):
        self.index = index
        self.ex, self.submission, self.missing = ex, submission, missing
        self.work, self.timeout, self.gpu, self.do_speed, self.hints = work, timeout, gpu, speed, hints
        self.seed = seed
        self.result = ExerciseResult(ex.name, str(submission) if submission else None)
        self.cases: list[Case] = []
        self.sim: Child | None = None
        self.real: Child | None = None
        self.speed_case: Case | None = None

    # -- children --------------------------------------------------------------------------------------------
    def _job(self, mode: str, cases: list[dict], **extra) -> dict:
        name = f"{self.ex.name}_{mode}"
        return {"mode": mode, "submission": str(self.submission), "kernel": self.ex.kernel, "cases": cases,
                "work": str(self.work), "prefix_name": name, "prefix": str(self.work / name),
                "result": str(self.work / f"{name}.result.json"), **extra}

    def sim_child(self) -> Child:
        ex = self.ex
        self.cases = [make_case(ex, s, self.seed + i) for i, s in enumerate(ex.shapes)]
        jobs = [_case_job(ex, c, self.work / f"case{i}.npz") for i, c in enumerate(self.cases)]
        trace = None
        if ex.technique:
            shape = ex.trace_shape or ex.shapes[-1]
            trace = _case_job(ex, make_case(ex, shape, self.seed + 1000, reference=False),
                              self.work / "trace.npz")
        job = self._job("sim", jobs, shuffle_seed=self.seed, trace=trace,
                        launch_timeout=max(1.0, self.timeout / 2))
        self.sim = Child(("sim", self.index), job, _env("sim", self.gpu), self.timeout)
        return self.sim

    def real_child(self) -> Child:
        ex = self.ex
        first = _case_job(ex, self.cases[0], self.work / "case0_real.npz")
        speed = None
        if self.gpu and self.do_speed and ex.speed is not None:
            self.speed_case = make_case(ex, ex.speed.shape, self.seed + 2000)
            speed = _case_job(ex, self.speed_case, self.work / "speed.npz")
            base = ex.speed.baseline
            speed.update(baseline=[base.lesson, base.name], repeats=ex.speed.repeats, out=ex.out,
                         inputs=[n for n in ex.args if n in self.speed_case.inputs], params=self.speed_case.params)
        job = self._job("real", [first], speed=speed, cc=[9, 0])
        self.real = Child(("real", self.index), job, _env("real", self.gpu), self.timeout, exclusive=speed is not None)
        return self.real

    # -- scores ----------------------------------------------------------------------------------------------
    def add(self, gate: str, passed: bool | None, output: str, hint: bool = True) -> None:
        """Record a gate: passed True/False, or None for skipped (no points at stake)."""
        ex = self.ex
        max_points = ex.max_points(gate) if passed is not None else 0
        if passed is False and hint:
            tips = ex.hint(gate, self.hints)
            if tips:
                output += "\n" + "\n".join(f"hint {i + 1}: {tip}" for i, tip in enumerate(tips))
                if len(tips) < len(ex.hints.get(gate, [])):
                    output += f"\n({HELP_HINTS.format(ex=ex.name[:2], n=len(tips) + 1)})"
        status = "passed" if passed else ("skipped" if passed is None else "failed")
        self.result.tests.append(TestResult(f"{ex.name}: {gate}", float(max_points if passed else 0),
                                            float(max_points), output, status))

    def skip_reason(self, gate: str) -> str | None:
        """Why ``gate`` is not graded in this run (no points at stake), or None."""
        ex = self.ex
        if gate == "technique" and ex.technique and not TRACER_OK[0]:
            return (f"skipped: {TRACER_OK[1]} -- the technique is checked once gpukernels.trace is available")
        if gate == "speed" and ex.speed is not None:
            base = f"{ex.speed.baseline.lesson}.{ex.speed.baseline.name}"
            if not self.gpu:
                return f"skipped: simulator mode (timed only on a GPU, against {base})"
            if not self.do_speed:
                return "skipped: --no-speed"
        return None

    def add_later(self, gates, why: str) -> None:
        """Gates that cannot be graded because an earlier one failed."""
        for gate in gates:
            if gate == "technique" and not self.ex.technique or gate == "speed" and self.ex.speed is None:
                continue
            skip = self.skip_reason(gate)
            if skip:
                self.add(gate, None, skip)
            else:
                self.add(gate, False, f"not graded: {why}", hint=False)

    def fail_all(self, gate_from: str, why: str) -> None:
        self.add(gate_from, False, why)
        later = GATES[GATES.index(gate_from) + 1:]
        self.add_later(later, "the kernel must first be correct" if gate_from == "correctness"
                       else f"{gate_from} failed")

    def finish(self) -> ExerciseResult:
        self.result.seconds = sum(c.seconds for c in (self.sim, self.real) if c is not None)
        return self.result

    def score_sim(self) -> bool:
        """Correctness from the simulator child. True when it passed (and the real child should run)."""
        child, ex = self.sim, self.ex
        problem = _child_problem(child, "simulator", self.timeout)
        res = child.result or {}
        if problem is None and res.get("error"):
            stage = res.get("stage")
            problem = (f"could not import {Path(self.submission).name}: {res['error']}" if stage == "import"
                       else res["error"])
        if problem is None:
            problem = self._check_cases(res)
        printed = _printed(child)
        if problem is None and printed:
            # Issue 9's rule: output on stdout scores 0 (autograders read results from stdout, and a print left in
            # a kernel costs real time on a GPU); the message says what was printed so it is easy to remove.
            problem = ("your code printed to stdout; remove the print() calls and submit again (the grader "
                       "gives 0 to a submission that prints)")
        if problem is not None:
            self.fail_all("correctness", problem + printed)
            return False
        sim_name = res.get("simulator", "simulator")
        shapes = ", ".join("x".join(map(str, c.shape)) for c in self.cases)
        shuffled = " and in a shuffled thread order" if any("shuffled" in c for c in res.get("cases", [])) else ""
        self.add("correctness", True, f"correct on {len(self.cases)} shapes ({shapes}) in thread order{shuffled} "
                                      f"on {sim_name}; inputs unchanged" + printed)
        return True

    def _check_cases(self, res: dict) -> str | None:
        from gpukernels.check import compare

        ex = self.ex
        cases = res.get("cases") if isinstance(res.get("cases"), list) else []
        for i, case in enumerate(self.cases):
            where = f"shape {tuple(case.shape)} (case {i + 1} of {len(self.cases)}, seed {case.seed})"
            entry = cases[i] if i < len(cases) else None
            if not isinstance(entry, dict):
                return f"{where}: the grading process ended without reporting this case"
            if entry.get("status") != "ok":
                err = entry.get("error", "did not finish")
                order = " in a shuffled thread order" if entry.get("run") == "shuffled" else ""
                return f"{where}: the kernel failed{order}: {err}"
            for label in ("out", "shuffled"):
                if label not in entry:
                    continue
                prefix = f"{self.sim.job['prefix']}_case{i}_{label}"
                arrays = _load_returned(prefix, [*case.inputs, ex.out])
                if arrays is None:
                    return f"{where}: the grading process did not return the arrays"
                for name, before in case.inputs.items():
                    after = arrays[name]
                    if after.shape != before.shape or not np.array_equal(after, before, equal_nan=True):
                        return f"{where}: the kernel modified its input {name!r}{_first_change(before, after)}; " \
                               f"only {ex.out!r} may be written"
                out = arrays[ex.out]
                if out.shape != case.ref.shape:
                    return f"{where}: output has shape {out.shape}, expected {case.ref.shape}"
                check = compare(out, case.ref, ex.tolerance)
                if not check.ok:
                    text = f"{where}: {check}"
                    if np.isnan(out).any() and not np.isnan(case.ref).any():
                        text += f" ({int(np.isnan(out).sum())} outputs are nan: never written -- the output is " \
                                "filled with nan before the launch)"
                    if label == "shuffled":
                        text = (f"correct in thread order, but wrong when threads run in another order "
                                f"(shuffle seed {entry.get('seeds', {}).get('shuffled')}): a race -- some thread "
                                f"reads data before another has written it (a missing cuda.syncthreads()?). {text}")
                    return text
        return None

    def score_real(self) -> None:
        child, ex = self.real, self.ex
        problem = _child_problem(child, "compiler", self.timeout)
        res = child.result or {}
        comp = res.get("compile") if isinstance(res.get("compile"), dict) else None
        if problem is None and res.get("error"):
            problem = res["error"]
        if problem is None and comp is None:
            problem = "the compiler process ended without a report"
        if problem is not None or not comp.get("ok"):
            why = problem or comp.get("error", "compile error")
            self.add("compiles", False, "does not compile for a GPU (sm_90) -- the simulator runs any Python, a GPU "
                                        f"does not:\n{why}")
            self.add_later(("technique", "speed"), "the kernel must compile for a GPU first")
            return
        self.add("compiles", True, f"compiles for sm_90 {comp.get('signature', '')}")
        self._score_technique()
        self._score_speed(res.get("speed"))

    def _score_technique(self) -> None:
        ex = self.ex
        if not ex.technique:
            return
        skip = self.skip_reason("technique")
        if skip:
            self.add("technique", None, skip)
            return
        trace = (self.sim.result or {}).get("trace") or {}
        if trace.get("status") != "ok":
            self.add("technique", False, "the traced run failed: " + str(trace.get("error", "no report")))
            return
        obs = trace.get("observations") or {}
        shape = tuple(ex.trace_shape or ex.shapes[-1])
        lines, ok = [], True
        for check in ex.technique:
            try:
                passed, text = check.evaluate(obs, shape)
            except Exception as exc:  # noqa: BLE001 - a malformed observation fails the check, not the grader
                passed, text = False, f"{check.describe()}: unreadable observation ({exc})"
            ok &= passed
            lines.append(("ok: " if passed else "FAILED: ") + text)
        self.add("technique", ok, f"traced at shape {shape}:\n" + "\n".join(lines))

    def _score_speed(self, speed) -> None:
        from gpukernels.check import compare

        ex = self.ex
        if ex.speed is None:
            return
        skip = self.skip_reason("speed")
        if skip:
            self.add("speed", None, skip)
            return
        if not isinstance(speed, dict) or speed.get("status") != "ok":
            err = speed.get("error", "no report") if isinstance(speed, dict) else "no report"
            self.add("speed", False, f"the timed GPU run failed: {err}")
            return
        arrays = _load_returned(f"{self.real.job['prefix']}_speed", [ex.out])
        case = self.speed_case
        if arrays is None:
            self.add("speed", False, "the timed run returned no output")
            return
        check = compare(arrays[ex.out], case.ref, ex.tolerance)
        if not check.ok:
            self.add("speed", False, f"wrong result on the GPU at shape {case.shape}: {check}")
            return
        try:
            t, b = float(speed["student_ms"]), float(speed["baseline_ms"])
        except (KeyError, TypeError, ValueError):
            self.add("speed", False, "the timed run returned no times")
            return
        ratio = b / t if t > 0 else math.inf
        text = (f"shape {case.shape}: {t:.3f} ms against {b:.3f} ms for {speed.get('baseline')} "
                f"(median of {ex.speed.repeats}, CUDA events): {ratio:.2f}x, need {ex.speed.min_speedup:g}x")
        self.add("speed", ratio >= ex.speed.min_speedup, text)


TRACER_OK: list = [False, "gpukernels.trace is not available"]


def tracer_status() -> tuple[bool, str]:
    """Whether the technique gate can run: ``gpukernels.trace`` with an ``observe`` function."""
    import importlib

    try:
        trace_mod = importlib.import_module("gpukernels.trace")
    except ImportError as exc:
        return False, f"gpukernels.trace is not available ({exc})"
    if not callable(getattr(trace_mod, "trace", None)):
        return False, "gpukernels.trace has no trace()"
    return True, ""


def _child_problem(child: Child, what: str, timeout: float) -> str | None:
    """A message when the child did not finish normally: timed out, crashed or died."""
    res = child.result or {}
    stage = res.get("stage", "start")
    cases = res.get("cases") if isinstance(res.get("cases"), list) else []
    running = next((i for i, c in enumerate(cases) if isinstance(c, dict) and c.get("status") == "running"), None)
    where = {"import": "while importing the submission", "lookup": "while looking up the kernel",
             "run": "while running the kernel", "start": "before it started"}.get(stage, f"at stage {stage}")
    if running is not None:
        where += f" (case {running + 1}, shape {tuple(child.job['cases'][running]['shape'])})"
    if child.timed_out:
        return (f"time limit: the {what} process did not finish within {timeout:g} s {where} -- an infinite "
                "loop? (a loop whose condition never changes, or threads waiting on each other)")
    if stage == "done":
        return None
    if res.get("error") and child.returncode == 0:
        return None  # an import/lookup error reported properly
    code = child.returncode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"was killed by {name}" + (" (a segmentation fault: a crash in native code)" if name == "SIGSEGV"
                                         else "")
    else:
        how = f"exited with code {code} before reporting (sys.exit / os._exit in the submission, or a crash)"
    tail = _tail(child.stderr)
    return f"the {what} process {how} {where}" + (f"\nstderr:\n{tail}" if tail else "")


def _tail(text: str, lines: int = 8) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)


def _printed(child: Child) -> str:
    text = child.stdout.strip()
    if not text:
        return ""
    lines = text.splitlines()
    first = lines[0][:200]
    return f"\n(your code printed {len(lines)} line(s) to stdout; first: {first!r})"


def _load_returned(prefix: str, names: list[str]) -> dict | None:
    """Arrays the child saved as ``{prefix}_{name}.npy``; paths are rebuilt here, never taken from the child."""
    out = {}
    for name in names:
        try:
            out[name] = np.load(f"{prefix}_{name}.npy", allow_pickle=False)
        except (OSError, ValueError):
            return None
    return out


def _first_change(before: np.ndarray, after: np.ndarray) -> str:
    if before.shape != after.shape:
        return f" (its shape changed from {before.shape} to {after.shape})"
    diff = ~((before == after) | (np.isnan(before) & np.isnan(after)))
    idx = tuple(int(i) for i in np.argwhere(diff)[0])
    return f" ({int(diff.sum())} elements changed; at {idx}: was {before[idx]:.6g}, now {after[idx]:.6g})"


# ----------------------------------------------------------------------------------------------------------
# Grading many pairs
# ----------------------------------------------------------------------------------------------------------


def grade(pairs, *, root: Path | None = None, timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None,
          gpu: bool | None = None, speed: bool = True, hints: int = 1, seed: int | None = None
          ) -> list[ExerciseResult]:
    """Grade ``pairs`` of (exercise name, submission file or None); results in the same order.

    ``submission=None`` with a reason: use ``(name, (None, "why"))``. ``gpu`` defaults to ``gpukernels.MODE ==
    "gpu"``; ``seed`` fixes the random inputs (default: fresh every run)."""
    root = exercises_dir(root)
    if gpu is None:
        import gpukernels

        gpu = gpukernels.MODE == "gpu"
    jobs = max(1, jobs or os.cpu_count() or 1)
    base_seed = secrets.randbits(31) if seed is None else int(seed)
    TRACER_OK[:] = tracer_status()
    folders = available(root)
    gradings: list[Grading] = []
    children: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="gpukernels-grade-") as tmp:
        for n, (name, sub) in enumerate(pairs):
            sub, missing = sub if isinstance(sub, tuple) else (sub, "")
            ex = load(folders[name])
            work = Path(tmp) / f"{n:03d}_{name}"
            work.mkdir()
            g = Grading(ex, Path(sub).resolve() if sub else None, missing, work, timeout, gpu, speed, hints,
                        (base_seed + 7919 * n) % 2**31, index=n)
            gradings.append(g)
            if sub is None:
                g.fail_all("correctness", missing or "no submission")
                continue
            children.append(g.sim_child())
        def on_done(child: Child):
            g = gradings[child.key[1]]
            if child is g.sim:
                if g.score_sim():
                    return [g.real_child()]
                return []
            g.score_real()
            return []

        _run_pool(children, jobs, on_done)
        return [g.finish() for g in gradings]


def grade_exercises(names=None, submission=None, **kw) -> list[ExerciseResult]:
    """Grade exercises by name (all by default) for one submission file or folder (default: the working copies
    ``exercises/NN_name/kernel.py``)."""
    root = exercises_dir(kw.pop("root", None))
    sub = Path(submission) if submission else None
    if sub is not None and sub.is_file() and not names:
        names = [infer_exercise(sub, root)]
    chosen = select(names, root)
    pairs = []
    for name in chosen:
        path, why = find_submission(name, sub, root, single=len(chosen) == 1)
        pairs.append((name, (path, why)))
    return grade(pairs, root=root, **kw)


# ----------------------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return f"{x:g}"


def to_gradescope(results: list[ExerciseResult]) -> dict:
    """Gradescope's autograder ``results.json``: ``score`` and ``tests`` (name, score, max_score, output)."""
    tests = [dict(asdict(t), visibility="visible") for r in results for t in r.tests]
    total = sum(r.score for r in results)
    maximum = sum(r.max_score for r in results)
    lines = [f"{r.exercise}: {_fmt(r.score)} / {_fmt(r.max_score)}" for r in results]
    return {"score": total, "max_score": maximum, "output": "\n".join(lines) + f"\ntotal: {_fmt(total)} / "
            f"{_fmt(maximum)}", "tests": tests}


def print_table(results: list[ExerciseResult], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="gpukernels grade", show_lines=True)
    for col, kw in (("test", {}), ("points", {"justify": "right"}), ("max", {"justify": "right"}),
                    ("message", {"overflow": "fold"})):
        table.add_column(col, **kw)
    for r in results:
        for t in r.tests:
            style = {"passed": "green", "failed": "red", "skipped": "dim"}[t.status]
            table.add_row(t.name, f"[{style}]{_fmt(t.score)}[/]", _fmt(t.max_score), t.output, )
        table.add_row(f"[bold]{r.exercise}[/]", f"[bold]{_fmt(r.score)}[/]", f"[bold]{_fmt(r.max_score)}[/]",
                      f"{r.seconds:.1f} s" + (f"  ({r.submission})" if r.submission else ""))
    console.print(table)
    total, maximum = sum(r.score for r in results), sum(r.max_score for r in results)
    console.print(f"[bold]total: {_fmt(total)} / {_fmt(maximum)}[/]")


def grade_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpukernels grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE", help="e.g. 01, 6, matmul_tiled (default: all)")
    parser.add_argument("--submission", metavar="FILE_OR_DIR",
                        help="a kernel file (one exercise), or a folder of NN_name/kernel.py or NN_name.py files "
                             "(default: exercises/NN_name/kernel.py)")
    parser.add_argument("--json", metavar="FILE", help="write Gradescope's results.json here")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per child process (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--jobs", type=int, default=None, help="child processes at a time (default: CPU count)")
    parser.add_argument("--hints", type=int, default=1, metavar="N", help="hints shown per failed test (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="fix the random inputs (default: fresh)")
    parser.add_argument("--no-speed", action="store_true", help="skip the GPU speed gate")
    parser.add_argument("--exercises-dir", metavar="DIR", help="the grader's exercises (specs and references)")
    args = parser.parse_args(argv)
    try:
        results = grade_exercises(args.exercises, args.submission, root=args.exercises_dir, timeout=args.timeout,
                                  jobs=args.jobs, speed=not args.no_speed, hints=args.hints, seed=args.seed)
    except (ValueError, FileNotFoundError) as err:
        print(f"gpukernels grade: {err}", file=sys.stderr)
        return 2
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(to_gradescope(results), indent=2))
    return 0


def export_main(argv: list[str]) -> int:
    """Copy the exercises -- stubs, READMEs and specs -- without the solutions."""
    parser = argparse.ArgumentParser(prog="gpukernels export-student",
                                     description="copy the exercises for students, without their solutions")
    parser.add_argument("dir", help="where to write (must not exist or be empty)")
    parser.add_argument("--exercises-dir", metavar="DIR")
    args = parser.parse_args(argv)
    root = exercises_dir(args.exercises_dir)
    dest = Path(args.dir)
    if dest.exists() and any(dest.iterdir()):
        print(f"gpukernels export-student: {dest} exists and is not empty", file=sys.stderr)
        return 2
    export(root, dest)
    print(f"wrote {len(available(dest))} exercises to {dest} (no solutions)")
    return 0


def export(root: Path, dest: Path) -> None:
    ignore = shutil.ignore_patterns("solutions", "__pycache__", "*.pyc", ".*")
    dest.mkdir(parents=True, exist_ok=True)
    for item in sorted(root.iterdir()):
        if item.name in ("solutions", "__pycache__") or item.name.startswith("."):
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, ignore=ignore)
        else:
            shutil.copy2(item, dest / item.name)


__all__ = ["grade", "grade_exercises", "grade_main", "export_main", "export", "to_gradescope", "print_table",
           "ExerciseResult", "TestResult", "exercises_dir", "available", "select", "find_submission"]
