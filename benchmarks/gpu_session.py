"""Everything the course measures on a GPU, in one command that fits one short lease of a GPU machine (`make
gpu-session`): the GPU test suite, compute-sanitizer over every lesson version, the random-shape check and the
standard benchmark, into one results folder that is committed as it is.

    python3 benchmarks/gpu_session.py [--out DIR] [--budget 540] [--bench LESSON ...] [--skip PHASE ...]

Phase 1, at once (correctness: the GPU is shared, nothing is timed):
  * ``suite``: the whole test suite with ``GPUKERNELS_DEVICE=gpu`` (``--workers`` pytest-xdist processes);
  * ``sanitize``: ``compute-sanitizer`` memcheck, racecheck and synccheck over ``benchmarks/sanitize_lessons.py``
    (every version of every lesson at its small odd test shapes, each output checked against float64), one process
    per tool and lesson, ``--sanitize-jobs`` at a time; then, while the phase has time, over the lessons' own
    scripts (``EXTRA_SANITIZE``: the dispatchers' other paths at larger shapes);
  * ``fuzz``: ``benchmarks/fuzz.py`` for ``--fuzz-seconds`` (random shapes across the dispatchers' regimes).
Phase 2, alone on the GPU (timing): ``bench``, the standard benchmark (``gpukernels bench``), one lesson at a time in
the order given -- by default the lessons whose newest committed session measured them longest ago first -- each
started only if its usual time still fits the budget; the lessons measured are merged into one report. Then, while
time is left, the lessons' own benchmark scripts (``EXTRA_BENCH``: FP8 against ``torch._scaled_mm``, every plan of the
tensor-core dispatcher on its suite, the attention Hopper steps against FlashAttention-2).

Every phase has a deadline inside ``--budget`` seconds (default 540: a 10-minute call with room for the install);
a phase past it is stopped and reported as cut, never left running. All processes share one folder of compiled
kernels (``GPUKERNELS_KERNEL_CACHE``), so a kernel is compiled once in the session. SIGTERM or Ctrl-C stops every
child and still writes what was measured.

The results folder (``--out``; default ``$OUT`` where the GPU machine's tool sets it, else
``benchmarks/results/gpu-sessions/DATE-CARD``) holds at most eight files: ``session.json`` (the card, its clocks,
versions, each phase's status, counts and duration), ``summary.txt`` (the screen printed at the end), ``tests.log``,
``sanitize.log``, ``fuzz.json``, ``bench.json``, ``extras.json`` (the lessons' own scripts' reports, by name) and
``run.log`` (the other commands' output).
``python -m gpukernels.readme`` reads the newest committed session for the README's tier table.

On a GPU machine where nothing can be downloaded, carry the wheels its Python lacks (README, "Measuring on a GPU").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = ROOT / "benchmarks" / "results" / "gpu-sessions"
LESSONS = ("matmul", "softmax", "cbr", "tensor_core", "attention")  # gpukernels.LESSONS, without importing numba
PHASES = ("suite", "sanitize", "fuzz", "bench")
TOOLS = {"memcheck": ["--report-api-errors", "no"], "racecheck": [], "synccheck": []}
#: Seconds one lesson's standard benchmark takes with a warm kernel cache (H100/H200 runs of 2026-12-04..06, rounded
#: up): a lesson is started only when this still fits before the deadline.
BENCH_S = {"softmax": 60, "cbr": 110, "matmul": 160, "tensor_core": 150, "attention": 200}
MARGIN_S = 15  # kept at the end of the budget for writing the report
#: The lessons' own sanitizer scripts, run after the registry-wide one while phase 1 has time left.
EXTRA_SANITIZE = ("benchmarks/attention_sanitize.py", "benchmarks/tensor_core_sanitize.py",
                  "benchmarks/matmul_tiles_sanitize.py", "benchmarks/winograd_sanitize.py")
#: The lessons' own benchmark scripts (name -> the command's arguments after the interpreter, the seconds it takes),
#: run after the standard benchmark while phase 2 has time left, each given ``--json FILE``; their reports go into
#: one file, ``extras.json`` ({name: report}), so that the folder keeps to the eight files a GPU lease returns:
#: FP8 against torch._scaled_mm; every plan of the tensor-core dispatcher's rules on its suite (the rules are fitted
#: to it); the attention Hopper steps against FlashAttention-2 (and cuDNN's backend) on the training shapes.
EXTRA_BENCH = {
    "fp8_peer": (["benchmarks/fp8_peer.py"], 150),
    "tensor_core_sweep": (["benchmarks/suite_sweep.py", "tensor_core"], 200),
    "attention_hopper": (["benchmarks/attention_peer.py", "--quick", "--half", "pipelined", "wgmma",
                          "warp_specialized", "ping_pong", "optimized"], 150),
}


class Session:
    """The running processes (each in its own process group, so that a stop reaches their children) and the log."""

    def __init__(self, out: Path, budget: float):
        self.out, self.start, self.budget = out, time.monotonic(), budget
        self.procs: list[subprocess.Popen] = []
        self.log = open(out / "run.log", "a", buffering=1)

    def left(self) -> float:
        return self.budget - MARGIN_S - (time.monotonic() - self.start)

    def spawn(self, cmd, log: Path | None = None, env=None) -> subprocess.Popen:
        self.log.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out = open(log, "a", buffering=1) if log else self.log
        if log:
            out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        proc.started = time.monotonic()
        self.procs.append(proc)
        return proc

    def wait(self, proc, deadline: float) -> str:
        """'ok', 'failed (status N)' or 'cut at the deadline' (the process group stopped)."""
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            return "ok" if rc == 0 else f"failed (status {rc})"
        except subprocess.TimeoutExpired:
            self.stop(proc)
            return "cut at the deadline"

    def stop(self, proc) -> None:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                return
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)


def sh(*cmd) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def card() -> dict:
    """The GPU as nvidia-smi names it, its driver, memory and clocks now."""
    fields = ("name", "driver_version", "memory.total", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "temperature.gpu", "power.draw", "power.limit")
    text = sh("nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader")
    if not text:
        return {"name": "no GPU found (nvidia-smi gave nothing)"}
    return dict(zip(fields, (v.strip() for v in text.splitlines()[0].split(","))))


def sm_clock() -> float | None:
    text = sh("nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits")
    try:
        return float(text.splitlines()[0])
    except (ValueError, IndexError):
        return None


def versions() -> dict:
    code = ("import json, importlib.metadata as m\nout = {}\n"
            "for n in ('numpy', 'numba', 'numba-cuda', 'cuda-bindings', 'torch', 'pytest', 'pytest-xdist'):\n"
            "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: out[n] = None\n"
            "print(json.dumps(out))")
    try:
        got = json.loads(sh(sys.executable, "-c", code) or "{}")
    except json.JSONDecodeError:
        got = {}
    got["python"] = sys.version.split()[0]
    tool = sanitizer()
    got["compute-sanitizer"] = ((sh(tool, "--version").splitlines() or [""])[-1] or None) if tool else None
    return got


def sanitizer() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.access(p, os.X_OK)), None)


def stalest_first(lessons) -> list[str]:
    """``lessons`` ordered by the date of the newest committed session that benchmarked each, never first."""
    last = {lesson: "" for lesson in lessons}
    for path in sorted(SESSIONS.glob("*/bench.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        date = str(report.get("date", path.parent.name[:10]))
        for row in report.get("results", []):
            if row.get("lesson") in last:
                last[row["lesson"]] = max(last[row["lesson"]], date)
    return sorted(lessons, key=lambda lesson: (last[lesson], list(lessons).index(lesson)))


# --- what each log says ---------------------------------------------------------------------------------------------

#: A test's outcome as ``pytest -v`` prints it when it ends (with xdist: "[gw3] [ 45%] PASSED tests/...").
OUTCOME = re.compile(r"^(?:\[gw\d+\] \[ *\d+%\] )?(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+)", re.M)


def pytest_counts(text: str) -> dict:
    """{'passed': N, 'failed': N, ...} from pytest's closing line; for a run cut before it (a deadline), from the
    outcome lines ``-v`` printed as each test ended, with ``"cut": True``. Either way the failed tests' ids."""
    tail = text[-5000:]
    closing = re.search(r"=+ .*\d+ (?:passed|failed|skipped|errors?).* in [\d.]+s", tail)
    outcomes = OUTCOME.findall(text)
    failed = sorted({test for what, test in outcomes if what in ("FAILED", "ERROR")})
    if closing:
        counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)",
                                                    closing.group(0))}
        if "error" in counts:
            counts["errors"] = counts.pop("error")
    else:
        names = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped", "XFAIL": "xfailed",
                 "XPASS": "xpassed"}
        counts = {}
        for what, _ in outcomes:
            counts[names[what]] = counts.get(names[what], 0) + 1
        counts["cut"] = True
    if failed:
        counts["failed_tests"] = failed
    return counts


def sanitizer_counts(text: str) -> dict:
    """Errors and hazards compute-sanitizer reported, and the checked runs' verdict."""
    errors = sum(int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", text))
    hazards = sum(int(n) for n in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text))
    wrong = sum(int(n) for n in re.findall(r"sanitize_lessons: \d+ runs, (\d+) wrong", text))
    runs = sum(int(n) for n in re.findall(r"sanitize_lessons: (\d+) runs", text))
    return {"errors": errors, "hazards": hazards, "runs": runs, "wrong": wrong}


# --- the phases -----------------------------------------------------------------------------------------------------

def phase_one(s: Session, args, env, report) -> None:
    deadline = time.monotonic() + min(args.phase1, s.left())
    jobs = []  # (phase, key, proc)
    if "suite" not in args.skip:
        record = s.out / ".tier.json"
        suite_env = dict(env, GPUKERNELS_TIER_RECORD=str(record))
        # -v: each test's outcome is printed as it ends, so a run cut at the deadline still says what failed
        cmd = [sys.executable, "-m", "pytest", "-v", "-n", str(args.workers), "--dist", "loadgroup", "--timeout",
               "300", "-p", "no:cacheprovider", "-rfE", *(["--record-tier", "gpu"] if args.tests == "tests" else []),
               *shlex.split(args.tests)]
        jobs.append(("suite", "suite", s.spawn(cmd, s.out / "tests.log", suite_env)))
    if "fuzz" not in args.skip:
        cmd = [sys.executable, "benchmarks/fuzz.py", "--workers", "2", "--budget", str(args.fuzz_seconds), "--seed",
               str(args.seed), "--json", s.out / "fuzz.json"]
        jobs.append(("fuzz", "fuzz", s.spawn(cmd, env=env)))
    tool = sanitizer()
    queue = []
    if "sanitize" not in args.skip:
        if tool is None:
            report["sanitize"] = {"status": "not run: compute-sanitizer not found"}
        else:
            for name, opts in TOOLS.items():
                for lesson in LESSONS:
                    queue.append((name, lesson, [tool, "--tool", name, *opts, sys.executable,
                                                 "benchmarks/sanitize_lessons.py", lesson]))
            # then, while phase 1 has time, the lessons' own scripts: larger shapes that take the dispatchers'
            # other paths (split-K, several key slices, every tile), which the small test shapes do not reach
            for script in EXTRA_SANITIZE:
                for name, opts in TOOLS.items():
                    queue.append((name, Path(script).stem, [tool, "--tool", name, *opts, sys.executable, script]))
    logs = {}
    running = []
    # The sanitizer runs go args.sanitize_jobs at a time beside the suite (each is one GPU context and one core).
    while queue or running:
        while queue and len(running) < args.sanitize_jobs and time.monotonic() < deadline:
            name, lesson, cmd = queue.pop(0)
            logs[(name, lesson)] = s.out / f".sanitize-{name}-{lesson}.log"
            running.append((name, lesson, s.spawn(cmd, logs[(name, lesson)], env)))
        if not running:
            break
        time.sleep(1)
        still = []
        for name, lesson, proc in running:
            if proc.poll() is None and time.monotonic() < deadline:
                still.append((name, lesson, proc))
            else:
                status = s.wait(proc, deadline)
                report.setdefault("sanitize", {}).setdefault("runs", {})[f"{name} {lesson}"] = {
                    "status": status, "seconds": round(time.monotonic() - proc.started, 1),
                    **sanitizer_counts(logs[(name, lesson)].read_text(errors="replace"))}
        running = still
    for name, lesson, cmd in queue:
        report.setdefault("sanitize", {}).setdefault("runs", {})[f"{name} {lesson}"] = {"status": "not started: "
                                                                                         "no time left"}
    with open(s.out / "sanitize.log", "w") as f:
        for (name, lesson), path in logs.items():
            f.write(f"===== compute-sanitizer --tool {name}: {lesson} =====\n")
            f.write(path.read_text(errors="replace"))
            path.unlink()
    for phase, _, proc in jobs:
        status = s.wait(proc, deadline)
        report[phase] = {"status": status, "seconds": round(time.monotonic() - proc.started, 1)}
    if "suite" in report:
        report["suite"].update(pytest_counts((s.out / "tests.log").read_text(errors="replace")))
        record = s.out / ".tier.json"
        if record.exists():
            report["suite"]["tier"] = json.loads(record.read_text()).get("gpu")
            record.unlink()
    if "fuzz" in report and (s.out / "fuzz.json").exists():
        try:
            fuzz = json.loads((s.out / "fuzz.json").read_text())
            report["fuzz"].update({"seed": fuzz.get("seed"), "summary": fuzz.get("summary")})
        except json.JSONDecodeError:
            pass
    if "sanitize" in report and "runs" in report["sanitize"]:
        runs = report["sanitize"]["runs"].values()
        report["sanitize"]["totals"] = {k: sum(r.get(k, 0) for r in runs) for k in ("errors", "hazards", "runs",
                                                                                     "wrong")}
        report["sanitize"]["status"] = ("ok" if all(r["status"] == "ok" for r in runs) else
                                        "not all ok: see runs")


def phase_two(s: Session, args, env, report) -> None:
    lessons = args.bench or stalest_first(LESSONS)
    done, clocks, parts = [], [], []
    stop = threading.Event()

    def sample():  # the SM clock while the benchmark runs: a throttled card shows here
        while not stop.wait(5):
            c = sm_clock()
            if c:
                clocks.append(c)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    bench = {}
    for lesson in lessons:
        if s.left() < BENCH_S.get(lesson, 120):
            bench[lesson] = f"not started: {s.left():.0f} s left, it takes about {BENCH_S.get(lesson, 120)} s"
            continue
        part = s.out / f".bench-{lesson}.json"
        proc = s.spawn([sys.executable, "-m", "gpukernels", "bench", lesson, *(["--suite"] if args.suite else []),
                        "--jobs", str(args.workers), "--json", part], env=env)
        bench[lesson] = s.wait(proc, time.monotonic() + s.left())
        if part.exists():  # a run cut at its deadline keeps the shapes it measured (bench saves after each)
            parts.append(part)
            if bench[lesson] == "ok":
                done.append(lesson)
    extras = {}
    for name, (cmd, need) in EXTRA_BENCH.items():  # then the lessons' own benchmarks, while there is time
        if s.left() < need:
            bench[name] = f"not started: {s.left():.0f} s left, it takes about {need} s"
            continue
        part = s.out / f".extra-{name}.json"
        proc = s.spawn([sys.executable, *cmd, "--json", part], env=env)
        bench[name] = s.wait(proc, time.monotonic() + s.left())
        if part.exists():  # a script cut at its deadline keeps what it wrote
            try:
                extras[name] = json.loads(part.read_text())
            except json.JSONDecodeError:
                extras[name] = {"unreadable": part.read_text(errors="replace")[-2000:]}
            part.unlink()
    if extras:
        (s.out / "extras.json").write_text(json.dumps(extras, indent=1))
    stop.set()
    if parts:
        merge = s.spawn([sys.executable, "-m", "gpukernels", "bench", "--from-json", *parts, "--json",
                         s.out / "bench.json"], env=env)
        s.wait(merge, time.monotonic() + 60)
        for part in parts:
            part.unlink(missing_ok=True)
    report["bench"] = {"status": "ok" if done and len(done) == len(lessons) else "partial" if done else "nothing "
                       "measured", "seconds": round(time.monotonic() - t0, 1), "lessons": bench,
                       "sm_clock_mhz": {"median": statistics.median(clocks), "min": min(clocks),
                                        "max": max(clocks)} if clocks else None}
    if (s.out / "bench.json").exists():
        report["bench"]["optimized_vs_peer"] = optimized_vs_peer(
            json.loads((s.out / "bench.json").read_text()).get("results", []))


def optimized_vs_peer(rows) -> list[dict]:
    """Each shape's ``optimized`` median against the peer timed in the same run (the first peer row of that shape)."""
    peers = {}
    for r in rows:
        if r.get("kind") == "peer":
            peers.setdefault((r["lesson"], tuple(r["shape"])), r)
    out = []
    for r in rows:
        peer = peers.get((r.get("lesson"), tuple(r.get("shape", ()))))
        if r.get("name") == "optimized" and peer and r.get("median_ms"):
            out.append({"lesson": r["lesson"], "shape": "x".join(map(str, r["shape"])),
                        "ms": round(r["median_ms"], 4), "peer": peer["name"],
                        "peer_ms": round(peer["median_ms"], 4),
                        "x_peer": round(peer["median_ms"] / r["median_ms"], 3), "ok": r.get("ok")})
    return out


def summary(report: dict) -> str:
    c = report.get("card", {})
    lines = [f"GPU session {report['date']}: {c.get('name')} (driver {c.get('driver_version')}, SM clock "
             f"{c.get('clocks.sm')} of {c.get('clocks.max.sm')}), {report.get('seconds')} s"]
    suite = report.get("suite")
    if suite:
        cut = " (the tests that ended before the cut)" if suite.get("cut") else ""
        lines.append(f"  suite     {suite['status']}: {suite.get('passed', 0)} passed, {suite.get('failed', 0)} "
                     f"failed, {suite.get('errors', 0)} errors, {suite.get('skipped', 0)} skipped in "
                     f"{suite['seconds']:.0f} s{cut}")
        for test in suite.get("failed_tests", [])[:20]:
            lines.append(f"            FAILED {test}")
    san = report.get("sanitize")
    if san:
        t = san.get("totals", {})
        lines.append(f"  sanitize  {san.get('status')}: {t.get('runs', 0)} checked runs per tool set, "
                     f"{t.get('errors', 0)} errors, {t.get('hazards', 0)} hazards, {t.get('wrong', 0)} wrong")
        for key, run in san.get("runs", {}).items():
            if run.get("status") != "ok" or run.get("errors") or run.get("hazards") or run.get("wrong"):
                lines.append(f"            {key}: {run.get('status')} {run.get('errors', 0)} errors "
                             f"{run.get('hazards', 0)} hazards {run.get('wrong', 0)} wrong")
    fuzz = report.get("fuzz")
    if fuzz:
        lines.append(f"  fuzz      {fuzz['status']}: {json.dumps(fuzz.get('summary'))[:150]}")
    bench = report.get("bench")
    if bench:
        lines.append(f"  bench     {bench['status']} in {bench['seconds']:.0f} s; SM clock {bench.get('sm_clock_mhz')}")
        for lesson, status in bench.get("lessons", {}).items():
            lines.append(f"            {lesson}: {status}")
        for row in bench.get("optimized_vs_peer", []):
            lines.append(f"            {row['lesson']} {row['shape']}: optimized {row['ms']} ms, {row['peer']} "
                         f"{row['peer_ms']} ms: {row['x_peer']}x the peer{'' if row['ok'] else ' (WRONG RESULT)'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="the results folder (default: $OUT, else "
                   "benchmarks/results/gpu-sessions/DATE-CARD)")
    p.add_argument("--budget", type=float, default=540.0, help="seconds for the whole session (default 540)")
    p.add_argument("--phase1", type=float, default=360.0, help="seconds for the suite, sanitizers and fuzz")
    p.add_argument("--bench", nargs="+", default=None, metavar="LESSON",
                   help="benchmark these lessons, in this order (default: every lesson, stalest first)")
    p.add_argument("--suite", action="store_true",
                   help="benchmark the lessons' suites of real workloads (gpukernels bench --suite) instead of their "
                        "standard shapes")
    p.add_argument("--skip", nargs="+", default=[], choices=PHASES, metavar="PHASE",
                   help=f"leave out phases among {', '.join(PHASES)}")
    p.add_argument("--tests", default="tests", metavar="ARGS",
                   help="what the suite phase gives pytest, one string (default: the whole tests folder, which alone "
                        "is recorded as the GPU tier); e.g. --tests \"tests -k 'tma or warp_specialized'\" for a "
                        "short lease")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 4) - 4))
    p.add_argument("--sanitize-jobs", type=int, default=4)
    p.add_argument("--fuzz-seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--device", choices=("gpu", "sim"), default="gpu",
                   help="sim: a dry run of the session's machinery in the simulator (tests/test_gpu_session.py)")
    args = p.parse_args(argv)
    for lesson in args.bench or ():
        if lesson not in LESSONS:
            p.error(f"--bench: expected lessons among {', '.join(LESSONS)}, got {lesson!r}")
    if args.budget <= MARGIN_S * 2 or args.workers < 1 or args.sanitize_jobs < 1:
        p.error("--budget must be > 30 s, --workers and --sanitize-jobs >= 1")

    now = dt.datetime.now(dt.timezone.utc)
    info = card()
    name = re.sub(r"[^a-z0-9]+", "-", info.get("name", "gpu").lower()).strip("-")
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else
                       SESSIONS / f"{now:%Y-%m-%d-%H%M}-{name}")
    out.mkdir(parents=True, exist_ok=True)
    report = {"date": now.strftime("%Y-%m-%d"), "started": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "card": info,
              "versions": versions(), "budget_s": args.budget, "seed": args.seed}
    s = Session(out, args.budget)
    cache = tempfile.mkdtemp(prefix="gpukernels-session-kernels-")
    env = dict(os.environ, GPUKERNELS_DEVICE=args.device, GPUKERNELS_KERNEL_CACHE=cache, PYTHONUNBUFFERED="1")

    def stopped(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stopped)
    status = 0
    try:
        if {"suite", "sanitize", "fuzz"} - set(args.skip):
            phase_one(s, args, env, report)
        if "bench" not in args.skip:
            phase_two(s, args, env, report)
    except KeyboardInterrupt as e:
        report["interrupted"] = str(e) or "SIGINT"
        status = 130
    finally:
        s.stop_all()
        shutil.rmtree(cache, ignore_errors=True)
        report["card_after"] = card()
        report["seconds"] = round(time.monotonic() - s.start, 1)
        (out / "session.json").write_text(json.dumps(report, indent=2) + "\n")
        text = summary(report)
        (out / "summary.txt").write_text(text + "\n")
        print(text)
    bad = (report.get("suite", {}).get("failed") or report.get("suite", {}).get("errors")
           or report.get("sanitize", {}).get("totals", {}).get("errors")
           or report.get("sanitize", {}).get("totals", {}).get("hazards")
           or report.get("sanitize", {}).get("totals", {}).get("wrong"))
    return status or (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
