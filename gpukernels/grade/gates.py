"""The gates of one (exercise, submission) pair, in the order they run, each scored here from what the grader
measured itself:

0. admission   (this process, before anything runs) the file holds only what a kernel file may (``admission``);
               a refusal scores 0 for the exercise;
1. compiles    ``cuda.compile_ptx`` for sm_90 in a child with the real CUDA target (no GPU needed): only what
               compiles goes on to run anywhere; its points count once the kernel is also correct (an empty
               stub compiles); skipped, with no points at stake, where numba-cuda's compiler is not installed
               (a Mac): not available on that platform, never the student's failure;
2. correctness in the simulator on the listed shapes and on shapes drawn fresh this run, in thread order and
               in a shuffled order, and on a shape past the published ranges (thread order); outputs poisoned
               with a NaN payload no arithmetic produces, inputs checked unmodified afterwards;
3. technique   the tracer's observations at a fresh shape (loads per element, coalescing with idle lanes as
               waste, bank conflicts, races, shared memory and barriers) against the spec's checks, and the data
               flow of a named instruction (the same case run with its results perturbed: ``spec.DataFlow``);
4. speed       on a GPU only: the kernel against the lesson's baseline (on its own copy of the inputs), timed
               in turn with CUDA events, so that other work on the GPU falls on both; skipped, with no
               points at stake, in simulator mode.

Points are listed in ``spec.GATES`` order (correctness, compiles, technique, speed), and a gate's points count
only when the ones before it passed. Each child reports raw arrays and raw observations;
scores, messages and hints are made here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._device import cuda_toolchain_missing, numba_cuda_installed
from .admission import AdmissionError, admit, refusal_message
from .pool import Child, child_env
from .protocol import CaseJob, Job, SpeedJob, output_path
from .results import ExerciseResult, TestResult
from .spec import GATES, DataFlow, Exercise

HELP_HINTS = "run `gpukernels grade {ex} --hints {n}` for more help"
MAX_SOURCE_BYTES = 200_000
COMPILE_TIMEOUT = 60.0  # seconds a compile child may take at least, whatever the (run) time limit

# The poison written into every output before a launch: a quiet NaN whose payload (0xBAD1) no arithmetic
# produces -- 0/0 and inf - inf give the default NaN (0xFFC00000 on x86, 0x7FFFFFFF on a GPU), and a NaN
# operand passes its own payload on. So an output that still holds these bits was never written, and any other
# NaN was computed.
POISON_BITS = np.uint32(0x7FC0BAD1)
POISON = POISON_BITS.view(np.float32)


@dataclass
class Case:
    shape: tuple
    seed: int
    inputs: dict
    params: dict
    ref: np.ndarray | None
    grid: tuple
    block: tuple
    scale: np.ndarray | None = None  # the exercise's error_scale of these inputs (None: the reference's own)


def _dims(d) -> list:
    d = (d,) if isinstance(d, int) else tuple(d)
    return [int(x) for x in d]


def make_case(ex: Exercise, shape: tuple, seed: int, reference: bool = True) -> Case:
    inputs = {k: np.ascontiguousarray(v) for k, v in ex.make_inputs(shape, seed).items()}
    params = dict(ex.params(shape))
    ref = np.asarray(ex.reference(**inputs, **params)) if reference else None
    scale = np.asarray(ex.error_scale(**inputs, **params)) if reference and ex.error_scale is not None else None
    grid, block = ex.launch(shape)
    return Case(tuple(shape), seed, inputs, params, ref, tuple(_dims(grid)), tuple(_dims(block)), scale)


def poisoned(shape) -> np.ndarray:
    return np.full(shape, POISON, dtype=np.float32)


def _case_job(ex: Exercise, case: Case, npz: Path, cls=CaseJob, **extra) -> CaseJob:
    np.savez(npz, **case.inputs, **{ex.out: poisoned(ex.out_shape(case.shape))})
    args = []
    for name in ex.args:
        if name in case.inputs or name == ex.out:
            args.append([name, "array", None])
        elif name in case.params:
            value = case.params[name]
            args.append([name, "scalar", value.item() if hasattr(value, "item") else value])
        else:
            raise KeyError(f"{ex.name}: argument {name!r} is neither an input, the output nor a param")
    return cls(npz=str(npz), args=args, grid=list(case.grid), block=list(case.block), shape=list(case.shape),
               **extra)


def _arg_types(ex: Exercise, case: Case) -> list:
    """The kernel's signature, for the compile child: [name, dtype, ndim] per array, [name, "scalar", value]."""
    out = []
    for name in ex.args:
        if name in case.inputs:
            arr = case.inputs[name]
            out.append([name, arr.dtype.str, arr.ndim])
        elif name == ex.out:
            out.append([name, np.dtype(np.float32).str, len(ex.out_shape(case.shape))])
        else:
            value = case.params[name]
            out.append([name, "scalar", value.item() if hasattr(value, "item") else value])
    return out


def _no_compiler_text(why: str) -> str:
    """No CUDA compiler on this machine (a Mac, or an install without numba-cuda's cu12/cu13 toolchain): the
    compiles gate is skipped -- not available on this platform, never the student's failure; the teacher's
    grading machine runs it."""
    return (f"skipped: the CUDA compiler is not available on this machine ({why}); install gpukernels with its "
            "cu12 or cu13 extra on Linux or Windows to check this -- the teacher's grader does")


class Grading:
    """The state of one (exercise, submission) pair while its children run."""

    def __init__(self, ex: Exercise, submission: Path | None, missing: str, work: Path, timeout: float,
                 gpu: bool, speed: bool, hints: int, seed: int, index: int = 0):
        self.index = index
        self.ex, self.submission, self.missing = ex, submission, missing
        self.work, self.timeout, self.gpu, self.do_speed, self.hints = work, timeout, gpu, speed, hints
        self.seed = seed
        self.result = ExerciseResult(ex.name, str(submission) if submission else None)
        self.source = ""
        self.cases: list[Case] = []
        self.trace_shape: tuple | None = None
        self.children: dict[str, Child] = {}
        self.compiled: str | None = ""
        self.no_compiler = ""
        self.speed_case: Case | None = None

    # -- before anything runs ----------------------------------------------------------------------------------
    def admit(self) -> bool:
        """Read and admit the submission (this process; nothing of it runs). False when it is refused."""
        if self.submission is None:
            self.fail_all(GATES[0], self.missing or "no submission", later="there is no submission")
            return False
        name = self.submission.name
        try:
            raw = self.submission.read_bytes()
            if len(raw) > MAX_SOURCE_BYTES:
                raise AdmissionError(name, 0, f"the file is {len(raw)} bytes; a kernel file is at most "
                                              f"{MAX_SOURCE_BYTES} bytes")
            self.source = raw.decode("utf-8")
            admitted = admit(self.source, str(self.submission))
        except AdmissionError as err:
            problem = refusal_message(err, name)
        except SyntaxError as err:
            problem = f"{name} does not parse: SyntaxError: {err.msg} (line {err.lineno})"
        except (OSError, UnicodeDecodeError) as err:
            problem = f"cannot read {name}: {err}"
        else:
            problem = None
            if self.ex.kernel not in admitted.kernels:
                defined = ", ".join(admitted.kernels)
                problem = (f"{name} defines no {self.ex.kernel!r}"
                           + (f" (its @cuda.jit functions: {defined})" if defined else " @cuda.jit kernel"))
            elif self.ex.kernel in admitted.device_functions:
                problem = (f"{self.ex.kernel} is a device function (@cuda.jit(device=True)); it must be a kernel, "
                           "launched as kernel[grid, block]")
        if problem is not None:
            self.fail_all(GATES[0], problem, hint=False, later="the file was not run")
            return False
        self.ignored = admitted.ignored
        return True

    # -- children ----------------------------------------------------------------------------------------------
    def _job(self, mode: str, **kw) -> Job:
        return Job(mode=mode, exercise=self.ex.name, kernel=self.ex.kernel, filename=str(self.submission),
                   source=self.source, out_dir=str(self.work / mode), **kw)

    def _inputs(self) -> Path:
        folder = self.work / "inputs"  # written only now, after admission, and never a child's working directory
        folder.mkdir(exist_ok=True)
        return folder

    def draw_cases(self) -> None:
        ex = self.ex
        self.cases = [make_case(ex, s, self.seed + i) for i, s in enumerate(ex.draw_shapes(self.seed))]

    def compile_child(self) -> Child:
        self.draw_cases()
        job = self._job("compile", arg_types=_arg_types(self.ex, self.cases[0]))
        return self._child(job, "compile")

    def sim_child(self) -> Child:
        ex = self.ex
        inputs = self._inputs()
        # the shapes past the published range are for loops capped at its top: run once, in thread order (the
        # shuffled order's races are the other shapes' business, and these are the costliest)
        past = len(self.cases) - (ex.beyond if ex.ranges else 0)
        jobs = [_case_job(ex, c, inputs / f"case{i}.npz", shuffle=i < past) for i, c in enumerate(self.cases)]
        trace = None
        if ex.technique:
            self.trace_shape = ex.draw_trace_shape(self.seed + 1000)
            trace = _case_job(ex, make_case(ex, self.trace_shape, self.seed + 1000, reference=False),
                              inputs / "trace.npz")
        perturb = sorted({c.instruction for c in ex.technique if isinstance(c, DataFlow)})
        job = self._job("sim", cases=jobs, shuffle_seed=self.seed, trace=trace,
                        launch_timeout=max(1.0, self.timeout / 2), out=ex.out, perturb=perturb)
        return self._child(job, "sim")

    def speed_child(self) -> Child:
        ex = self.ex
        self.speed_case = make_case(ex, ex.speed.shape, self.seed + 2000)
        base = ex.speed.baseline
        speed = _case_job(ex, self.speed_case, self._inputs() / "speed.npz", cls=SpeedJob,
                          baseline=[base.lesson, base.name], repeats=ex.speed.repeats, out=ex.out,
                          inputs=[n for n in ex.args if n in self.speed_case.inputs],
                          params=self.speed_case.params)
        return self._child(self._job("speed", speed=speed), "speed", exclusive=True)

    def _child(self, job: Job, mode: str, exclusive: bool = False) -> Child:
        # The time limit is the student's loop's, not the compiler's: a compile of a correct kernel on a machine
        # busy grading a class can take longer than a short limit, and must not read as "does not compile"
        limit = max(self.timeout, COMPILE_TIMEOUT) if mode == "compile" else self.timeout
        child = Child((mode, self.index), job, child_env(mode), limit, exclusive=exclusive)
        self.children[mode] = child
        return child

    def next_child(self, done: Child | None) -> Child | None:
        """Score the child that ended and return the next one to run (None when the grading is over)."""
        if done is None:
            if not self.admit():
                return None
            skip = self.skip_reason("compiles")
            if skip:  # a Mac: no compile child to start; the rest on the simulator
                self.draw_cases()
                self.compiled, self.no_compiler = None, skip
                return self.sim_child()
            return self.compile_child()  # it reports a missing NVVM itself, as numba-cuda looks for it
        mode = done.key[0]
        if mode == "compile":
            return self.sim_child() if self.score_compile(done) else None
        if mode == "sim":
            if self.score_sim(done):
                self.score_technique(done)
                if self.wants_speed():
                    return self.speed_child()
                self.score_speed(None)
            return None
        self.score_speed(done)
        return None

    # -- scores ------------------------------------------------------------------------------------------------
    def add(self, gate: str, passed: bool | None, output: str, hint: bool = True) -> None:
        """Record a gate: passed True/False, or None for skipped (no points at stake)."""
        ex = self.ex
        max_points = ex.max_points(gate) if passed is not None else 0
        if passed is False and hint:
            tips = ex.hints_for(gate, self.hints, output)  # the hints written for this failure first
            if tips:
                output += "\n" + "\n".join(f"hint {n}: {tip}" for n, tip in tips)
                if len(tips) < len(ex.hints.get(gate, [])):
                    output += f"\n({HELP_HINTS.format(ex=ex.name[:2], n=len(tips) + 1)})"
        status = "passed" if passed else ("skipped" if passed is None else "failed")
        self.result.tests.append(TestResult(f"{ex.name}: {gate}", float(max_points if passed else 0),
                                            float(max_points), output, status))

    def skip_reason(self, gate: str) -> str | None:
        """Why ``gate`` is not graded in this run (no points at stake), or None."""
        ex = self.ex
        if gate == "compiles" and not numba_cuda_installed():  # the same for every submission of this run
            return _no_compiler_text(cuda_toolchain_missing())
        if gate == "speed" and ex.speed is not None:
            base = f"{ex.speed.baseline.lesson}.{ex.speed.baseline.name}"
            if not self.gpu:
                return f"skipped: simulator mode (timed only on a GPU, against {base})"
            if not self.do_speed:
                return "skipped: --no-speed"
        return None

    def wants_speed(self) -> bool:
        return self.ex.speed is not None and self.skip_reason("speed") is None

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

    def fail_all(self, gate_from: str, why: str, hint: bool = True, later: str | None = None) -> None:
        self.add(gate_from, False, why, hint=hint)
        rest = GATES[GATES.index(gate_from) + 1:]
        self.add_later(rest, later or {"compiles": "the kernel must first compile for a GPU",
                                       "correctness": "the kernel must first be correct"}.get(gate_from,
                                                                                            f"{gate_from} failed"))

    def finish(self) -> ExerciseResult:
        self.result.seconds = sum(c.seconds for c in self.children.values())
        return self.result

    def score_compile(self, child: Child) -> bool:
        """The compile child's verdict. False when it did not compile: nothing of it is run then, so its
        correctness is not graded either."""
        problem = child_problem(child, "compiler", child.timeout)
        rep = child.report
        if problem is None and rep.error:
            problem = rep.error
        comp = rep.compile if rep is not None and isinstance(rep.compile, dict) else None
        if problem is None and comp is None:
            problem = "the compiler process ended without a report"
        if problem is None and comp.get("ok") is None and comp.get("unavailable"):
            self.compiled, self.no_compiler = None, _no_compiler_text(comp["unavailable"])
            return True
        if problem is not None or not comp.get("ok"):
            why = problem or comp.get("error", "compile error")
            self.add("correctness", False, "not run: the kernel does not compile for a GPU (sm_90), and only what "
                                           "compiles is run -- see the compiles test", hint=False)
            self.add("compiles", False, "does not compile for a GPU (sm_90) -- the simulator runs any Python, a GPU "
                                        f"does not:\n{why}")
            self.add_later(GATES[2:], "the kernel must first compile for a GPU")
            return False
        self.compiled = f"compiles for sm_90 {comp.get('signature', '')}"
        return True

    def score_sim(self, child: Child) -> bool:
        """Correctness from the simulator child. True when it passed."""
        problem = child_problem(child, "simulator", self.timeout)
        rep = child.report
        if problem is None and rep.error:
            problem = rep.error
        if problem is None:
            problem = self._check_cases(child)
        printed = _printed(child)
        if problem is None and printed:
            # Output on stdout scores 0 (autograders read results from stdout, and a print left in a kernel
            # costs real time on a GPU); the message says what was printed so it is easy to remove.
            problem = ("your code printed to stdout; remove the print() calls and submit again (the grader "
                       "gives 0 to a submission that prints)")
        if problem is not None:
            self.add("correctness", False, problem + printed)
            self.add_compiles(correct=False)
            self.add_later(GATES[2:], "the kernel must first be correct")
            return False
        sim_name = rep.simulator or "simulator"
        shapes = ", ".join("x".join(map(str, c.shape)) for c in self.cases)
        drawn = len(self.cases) - len(self.ex.shapes)
        shuffled = " and in a shuffled thread order" if any("shuffled" in c.outputs for c in rep.cases) else ""
        self.add("correctness", True, f"correct on {len(self.cases)} shapes ({shapes}; the last {drawn} drawn "
                                      f"for this run, sizes not listed among them) in thread order{shuffled} on "
                                      f"{sim_name}; inputs unchanged")
        self.add_compiles(correct=True)
        return True

    def add_compiles(self, correct: bool) -> None:
        """The compiles gate, recorded once correctness is known: its points count only with a correct kernel,
        and a machine without the compiler skips it."""
        if self.compiled is None:
            self.add("compiles", None, self.no_compiler)
        elif correct:
            self.add("compiles", True, self.compiled)
        else:
            self.add("compiles", False, f"{self.compiled}, but its points count once the kernel is correct",
                     hint=False)

    def _check_cases(self, child: Child) -> str | None:
        from gpukernels.check import compare

        ex, rep = self.ex, child.report
        for i, case in enumerate(self.cases):
            where = f"shape {tuple(case.shape)} (case {i + 1} of {len(self.cases)}, seed {case.seed})"
            entry = rep.cases[i] if i < len(rep.cases) else None
            if entry is None:
                return f"{where}: the grading process ended without reporting this case"
            if entry.status != "ok":
                order = " in a shuffled thread order" if entry.run == "shuffled" else ""
                return f"{where}: the kernel failed{order}: {student_error(entry.error, entry.error_type, self)}"
            for run in ("out", "shuffled"):
                if run not in entry.outputs:
                    continue
                arrays = _load_returned(child.job.out_dir, i, run, [*case.inputs, ex.out])
                if arrays is None:
                    return f"{where}: the grading process did not return the arrays"
                for name, before in case.inputs.items():
                    after = arrays[name]
                    if after.shape != before.shape or not np.array_equal(after, before, equal_nan=True):
                        return f"{where}: the kernel modified its input {name!r}{_first_change(before, after)}; " \
                               f"only {ex.out!r} may be written"
                out = arrays[ex.out]
                if out.shape != case.ref.shape or out.dtype != np.float32:
                    return f"{where}: output has shape {out.shape} ({out.dtype}), expected {case.ref.shape}"
                check = compare(out, case.ref, ex.tolerance, scale=case.scale, show=3)  # 3 examples: fits a terminal
                if check.ok:
                    continue
                text = f"{where}: {check}" + _nan_note(out, case.ref, self._unwritten_shared(child))
                races = self._races(child)
                if run == "shuffled":
                    return (f"correct in thread order, but wrong when threads run in another order (shuffle seed "
                            f"{entry.seeds.get('shuffled')}): a race -- some thread reads data before another has "
                            f"written it (a missing cuda.syncthreads()?){races}. {text}")
                if races:
                    return (f"wrong result, and the tracer saw a race: threads of a block touch the same element "
                            f"with no cuda.syncthreads() between them{races}. {text}")
                return text
        return None

    def _unwritten_shared(self, child: Child) -> list:
        """The traced run's reads of shared memory that no thread had written: [array, where, source line]."""
        obs = (child.report.trace or {}).get("observations") or {}
        return [u for u in obs.get("unwritten_shared") or [] if isinstance(u, list) and len(u) == 3]

    def _races(self, child: Child) -> str:
        """The hazards the traced run saw, with their source lines, for a message (empty when none)."""
        trace = child.report.trace or {}
        obs = trace.get("observations") or {}
        lines = obs.get("race_lines") or []
        if not lines:
            return ""
        first, first_src, second, second_src = lines[0]
        return f" -- {first} `{first_src}` and {second} `{second_src}`"

    def score_technique(self, child: Child) -> None:
        ex = self.ex
        if not ex.technique:
            return
        trace = child.report.trace or {}
        if trace.get("status") != "ok":
            self.add("technique", False, "the traced run failed: "
                     + student_error(str(trace.get("error", trace.get("why", "no report"))), "", self))
            return
        obs = dict(trace.get("observations") or {})
        obs["dataflow"] = self._dataflow(child, trace.get("perturbed") or {})
        shape = tuple(self.trace_shape)
        lines, ok = [], True
        for check in ex.technique:
            try:
                passed, text = check.evaluate(obs, shape)
            except Exception as exc:  # noqa: BLE001 - a malformed observation fails the check, not the grader
                passed, text = False, f"{check.describe()}: unreadable observation ({exc})"
            ok &= passed
            lines.append(("ok: " if passed else "FAILED: ") + text)
        self.add("technique", ok, f"traced at shape {shape} (drawn for this run):\n" + "\n".join(lines))

    def _dataflow(self, child: Child, runs: dict) -> dict:
        """Per perturbed instruction, from the arrays the child returned: of the traced case's outputs, how many
        moved (past the tolerance, against the output's typical magnitude) and how many came out doubled."""
        ex, flows = self.ex, {}
        clean = _load_returned(child.job.out_dir, "trace", "out", [ex.out])
        for kind, run in runs.items():
            if not isinstance(run, dict) or run.get("status") != "ok":
                flows[kind] = {"error": student_error(str((run or {}).get("error", "no report")), "", self)}
                continue
            got = _load_returned(child.job.out_dir, "trace", f"perturbed_{kind}", [ex.out])
            if clean is None or got is None:
                flows[kind] = {"error": "the grading process did not return the arrays"}
                continue
            before = clean[ex.out].astype(np.float64)
            after = got[ex.out].astype(np.float64)
            fin = np.isfinite(before)
            typical = float(np.sqrt(np.mean(before[fin] ** 2))) if fin.any() else 1.0
            limit = max(ex.tolerance, 1e-7) * (typical or 1.0)
            with np.errstate(invalid="ignore"):
                moved = ~(np.abs(after - before) <= limit)
                doubled = np.abs(after - 2 * before) <= 2 * limit
            flows[kind] = {"size": int(before.size), "moved": int(moved.sum()), "doubled": int(doubled.sum())}
        return flows

    def score_speed(self, child: Child | None) -> None:
        from gpukernels.check import compare

        ex = self.ex
        if ex.speed is None:
            return
        skip = self.skip_reason("speed")
        if skip:
            self.add("speed", None, skip)
            return
        problem = child_problem(child, "GPU", self.timeout)
        speed = child.report.speed if child.report is not None else None
        if problem is None and (not isinstance(speed, dict) or speed.get("status") != "ok"):
            problem = speed.get("error", "no report") if isinstance(speed, dict) else "no report"
        if problem is not None:
            self.add("speed", False, f"the timed GPU run failed: {problem}")
            return
        arrays = _load_returned(child.job.out_dir, "speed", "out", [ex.out])
        case = self.speed_case
        if arrays is None:
            self.add("speed", False, "the timed run returned no output")
            return
        check = compare(arrays[ex.out], case.ref, ex.tolerance, scale=case.scale)
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


# ----------------------------------------------------------------------------------------------------------
# Messages
# ----------------------------------------------------------------------------------------------------------


def child_problem(child: Child, what: str, timeout: float) -> str | None:
    """A message when the child did not finish normally: timed out, crashed or died."""
    rep = child.report
    stage = rep.stage if rep is not None else "start"
    running = next((i for i, c in enumerate(rep.cases) if c.status == "running"), None) if rep else None
    where = {"import": "while loading the submission", "lookup": "while looking up the kernel",
             "run": "while running the kernel", "start": "before it started"}.get(stage, f"at stage {stage}")
    if running is not None and running < len(child.job.cases):
        where += f" (case {running + 1}, shape {tuple(child.job.cases[running].shape)})"
    if child.timed_out:
        return (f"time limit: your kernel did not finish within the grader's {timeout:g} s {where} -- a loop "
                "whose condition never changes, or threads waiting for each other?")
    if stage == "done":
        return None
    if rep is not None and rep.error and child.returncode == 0:
        return None  # an import/lookup error reported properly
    code = child.returncode
    if code is not None and code < 0:
        try:
            name = signal_name(-code)
        except ValueError:
            name = f"signal {-code}"
        how = f"was killed by {name}" + {
            "SIGSEGV": " (a segmentation fault: a crash in native code)",
            # the out-of-memory killer's signal (the grader's own SIGKILL, at a time-out, is reported above)
            "SIGKILL": (" (most often the system's out-of-memory killer: did the kernel ask for more memory than "
                        "the machine has -- a huge cuda.shared.array or cuda.local.array, or a huge grid?)"),
        }.get(name, "")
    else:
        how = f"exited with code {code} before reporting (a crash?)"
    tail = _tail(child.stderr)
    return f"the {what} process {how} {where}" + (f"\nstderr:\n{tail}" if tail else "")


def signal_name(num: int) -> str:
    import signal

    return signal.Signals(num).name


def student_error(text: str, error_type: str, grading: Grading) -> str:
    """The simulator's message, worded for a graded student: its time-out advice names a setting a student
    cannot change, and it lists threads that had not started."""
    if error_type == "KernelTimeoutError" or "did not finish within the time limit" in text:
        text = re.sub(r"Raise the limit with\s+gpukernels\.sim\.configure\(timeout_s=\.\.\.\)\.?",
                      "", text).rstrip(" ?.")
        text = re.sub(r";\s*[^;]*has not started", "", text)
        text += (f"? The grader allows {max(1.0, grading.timeout / 2):g} s per launch: look for a loop whose "
                 "condition never changes, or a thread waiting for memory another thread has not written.")
    return text


def _nan_note(out: np.ndarray, ref: np.ndarray, unwritten_shared: list = ()) -> str:
    """Tell "never written" (still the poison's bits) from "computed NaN" (any other NaN), and name a computed NaN's
    likely cause: a read of shared memory no thread wrote, when the tracer saw one (``unwritten_shared``: [array,
    where, source line]), else the arithmetic."""
    bits = out.view(np.uint32)
    unwritten = bits == POISON_BITS
    computed = np.isnan(out) & ~unwritten & ~np.isnan(ref)
    notes = []
    if unwritten.any():
        idx = tuple(int(i) for i in np.argwhere(unwritten)[0])
        n = int(unwritten.sum())
        notes.append(f"{n} {'output was' if n == 1 else 'outputs were'} never written (e.g. at {idx}; the output is "
                     "filled with a marked NaN before the launch)")
    if computed.any():
        idx = tuple(int(i) for i in np.argwhere(computed)[0])
        n = int(computed.sum())
        if unwritten_shared:  # the simulator's shared memory starts as NaN: such a read is the likely cause
            array, where, source = unwritten_shared[0]
            line = f" `{source}`" if source else ""
            notes.append(f"{n} {'output is' if n == 1 else 'outputs are'} a computed NaN (e.g. at {idx}), most "
                         f"likely from a read of shared memory no thread wrote: {array} is read at {where}{line} "
                         "before any thread wrote it -- a cuda.syncthreads() missing between the writes and the "
                         "reads, or an element no thread stores")
        else:
            notes.append(f"{n} {'output is' if n == 1 else 'outputs are'} a computed NaN (e.g. at {idx}: 0/0, "
                         "inf - inf or sqrt of a negative in your arithmetic)")
    return (" (" + "; ".join(notes) + ")") if notes else ""


def _tail(text: str, lines: int = 8) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)


def _printed(child: Child) -> str:
    """What the submission printed to stdout, by its true size: the grader keeps only the first
    ``_child.OUTPUT_BUDGET`` bytes (``child.stdout``) and counts the rest (``child.printed``)."""
    text = child.stdout.strip()
    total, lines = (child.printed[0] if child.printed else (0, 0))
    total, lines = max(int(total), len(child.stdout.encode())), max(int(lines), len(text.splitlines()))
    if not text and not total:
        return ""
    first = text.splitlines()[0][:200] if text else ""
    kept = len(child.stdout.encode())
    cut = f"; the grader kept the first {_size(kept)}" if total > kept else ""
    return f"\n(your code printed {lines} line(s), {_size(total)}, to stdout{cut}; the first: {first!r})"


def _size(n: int) -> str:
    for unit, step in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if n >= step:
            return f"{n / step:.3g} {unit}"
    return f"{n} bytes"


def _load_returned(out_dir: str, case, run: str, names: list) -> dict | None:
    """Arrays the child saved; paths are rebuilt here, never taken from the child."""
    out = {}
    for name in names:
        try:
            out[name] = np.load(output_path(out_dir, case, run, name), allow_pickle=False)
        except (OSError, ValueError):
            return None
    return out


def _first_change(before: np.ndarray, after: np.ndarray) -> str:
    if before.shape != after.shape:
        return f" (its shape changed from {before.shape} to {after.shape})"
    diff = ~((before == after) | (np.isnan(before) & np.isnan(after)))
    idx = tuple(int(i) for i in np.argwhere(diff)[0])
    return f" ({int(diff.sum())} elements changed; at {idx}: was {before[idx]:.6g}, now {after[idx]:.6g})"


__all__ = ["Grading", "Case", "make_case", "POISON", "POISON_BITS", "child_problem"]
