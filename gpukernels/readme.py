"""Regenerate the README's generated blocks -- never typed by hand:

* between ``<!-- versions:begin -->`` and ``<!-- versions:end -->``: every lesson's ``VERSIONS``, with the
  one idea each adds (the first paragraph of its docstring);
* between ``<!-- bench:begin -->`` and ``<!-- bench:end -->``: the performance table from the committed GPU
  results (``benchmarks/results/h200.json``);
* between ``<!-- suite:begin -->`` and ``<!-- suite:end -->``: the suite of real shapes, per regime and per shape
  with the dispatchers' choices (``benchmarks/results/h200-suite.json``, ``gpukernels bench --suite``);
* between ``<!-- tiers:begin -->`` and ``<!-- tiers:end -->``: the test tiers, each with what it runs and what its
  newest recorded run measured (``tests/tiers.json``, written by ``make test RECORD=1`` and the like; the GPU row
  from the newest committed ``make gpu-session`` folder under ``benchmarks/results/gpu-sessions/``);
* in docs/overhead.md, between ``<!-- overhead:begin -->`` and ``<!-- overhead:end -->``: host microseconds per
  launcher call against the targets (``benchmarks/results/h200-overhead.json``, ``gpukernels bench --overhead``).

    python -m gpukernels.readme            # rewrite README.md (and docs/overhead.md) in place
    python -m gpukernels.readme --check    # exit 1 if README.md is out of date (used by the tests)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ._markers import replace_between as _replace

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "results" / "h200.json"
SUITE = ROOT / "benchmarks" / "results" / "h200-suite.json"
OVERHEAD_DOC = ROOT / "docs" / "overhead.md"
OVERHEAD = ROOT / "benchmarks" / "results" / "h200-overhead.json"
TIERS = ROOT / "tests" / "tiers.json"
GPU_SESSIONS = ROOT / "benchmarks" / "results" / "gpu-sessions"

#: (record key, command, what it runs, its goal) -- the README's table of test tiers, measured column generated
TIER_ROWS = (
    ("default", "`make test`",
     "the default tier (`pytest -m \"not slow\"`): every lesson version correct under the simulator at one or two "
     "small odd shapes into NaN-poisoned outputs against float64 references, the simulator's primitives, errors and "
     "hazards, the tracer, the grader against its fixtures and solutions (one seed), the CLI and bad input",
     "budget 9 CPU-minutes (4-5 min on 2 cores): a run over it fails, naming its costliest tests"),
    ("all", "`make test-all`",
     "both tiers: the above, plus the long tier (`slow`): the notebooks executed top to bottom, numba-cuda's own "
     "kernel tests on the simulator, the mutation sample, the browser tests, more seeds and larger shapes",
     "goal 15 min on 2 cores"),
    ("nocuda", "`make test-nocuda`",
     "in a venv without numba-cuda (a Mac's view): the tests whose answers depend on the missing compiler "
     "(`NOCUDA_TESTS` in the Makefile)", "goal 2 min of tests"),
    ("gpu", "`make gpu-session`",
     "on a GPU machine, one command: both tiers with the GPU-only cases (16-core machine: 12 pytest workers sharing "
     "one folder of compiled kernels), compute-sanitizer memcheck, racecheck and synccheck over every lesson "
     "version, a minute of random shapes, then the standard benchmark alone on the GPU, stalest lesson first",
     "goal 9 min for the whole session"),
)


def versions_markdown() -> str:
    from gpukernels import LESSONS

    lines = ["| lesson | # | version | the one idea it adds |", "| --- | ---: | --- | --- |"]
    for lesson, mod in LESSONS.items():
        for i, (name, version) in enumerate(mod.VERSIONS.items(), 1):
            lines.append(f"| {lesson} | {i} | `{lesson}.{name}` | {version.idea} |")
    return "\n".join(lines)


def bench_markdown() -> str:
    from gpukernels.bench import markdown_table

    if not RESULTS.exists():
        return "No GPU results committed yet."
    report = json.loads(RESULTS.read_text())
    return markdown_table(report) + not_measured(report)


def not_measured(report: dict) -> str:
    """A note naming the versions of each lesson's ``VERSIONS`` that ``report`` has no row of (added after the run):
    the table shows what was measured, and the note what the registry holds besides, so the two never disagree
    silently (tests/test_outputs_registry.py). A lesson with no row at all (one not yet run on a GPU) is named as
    such, with all its versions."""
    from gpukernels import LESSONS

    measured = {(r["lesson"], r["name"]) for r in report.get("results", [])}
    lessons = {r["lesson"] for r in report.get("results", [])}
    parts = []
    for lesson, mod in LESSONS.items():
        missing = [name for name in mod.VERSIONS if (lesson, name) not in measured]
        if missing:
            whole = "" if lesson in lessons else " (the whole lesson, not benchmarked yet)"
            parts.append(f"{lesson}{whole} {', '.join(f'`{name}`' for name in missing)}")
    return "\n\nNot in this benchmark run (added since): " + "; ".join(parts) + "." if parts else ""


def suite_markdown() -> str:
    from gpukernels.bench import suite_markdown as table

    from gpukernels import LESSONS

    if not SUITE.exists():
        return "No suite results committed yet."
    report = json.loads(SUITE.read_text())
    missing = [lesson for lesson in LESSONS if not any(r["lesson"] == lesson for r in report.get("results", []))]
    note = (f"\n\nNot in this suite run (no GPU run of their suite yet): {', '.join(missing)}." if missing else "")
    return table(report) + note


def overhead_markdown() -> str:
    if not OVERHEAD.exists():
        return "No overhead results committed yet."
    rep = json.loads(OVERHEAD.read_text())
    env = rep.get("environment", {})
    lines = [f"Measured on {env.get('device', 'the GPU')} ({env.get('date', '')[:10]}, "
             f"`benchmarks/results/h200-overhead.json`): host µs per call, median of {rep.get('calls', '?')} "
             "back-to-back calls on small work; the checked path is the same call with the fast path off, in the "
             "same run; a plan of several launches is replayed as one CUDA graph, and kernel by kernel is the same call "
             "launching each kernel itself; device µs is the kernels' own time (CUDA graph, events).", "",
             "| lesson | version | arrays | shape | launches | µs per call | target | meets | kernel by kernel µs | "
             "peer µs | checked path µs | device µs |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rep["results"]:
        by_kernel = r.get("kernel_by_kernel_us_per_call")
        lines.append(f"| {r['lesson']} | {r['name']} | {r['array_kind']} | {'x'.join(map(str, r['shape']))} | "
                     f"{r.get('launches', '')} | {r['us_per_call']:.1f} | <= {r['target_us']:.0f} | "
                     f"{'yes' if r['meets_target'] else '**no**'} | "
                     f"{'' if by_kernel is None else f'{by_kernel:.1f}'} | "
                     f"{r['peer_us_per_call']:.1f} | {r['checked_us_per_call']:.1f} | {r['device_us']:.1f} |")
    met = sum(r["meets_target"] for r in rep["results"])
    lines += ["", f"{met} of {len(rep['results'])} rows meet their target."]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s" if seconds >= 60 else f"{seconds:.0f} s"


def newest_gpu_session() -> dict | None:
    """The newest committed ``make gpu-session`` report (its folder name starts with the date and time)."""
    found = sorted(GPU_SESSIONS.glob("*/session.json"))
    return json.loads(found[-1].read_text()) if found else None


def _measured(rec: dict | None) -> str:
    if not rec:
        return "not measured yet"
    counts = f"{rec['passed']} passed, {rec['failed']} failed, {rec['skipped']} skipped"
    return (f"{_duration(rec['wall_s'])} wall, {rec['cpu_s'] / 60:.1f} CPU-minutes, {rec['workers']} workers; "
            f"{counts} ({rec['date']}, {rec['machine']})")


def tiers_markdown() -> str:
    records = json.loads(TIERS.read_text()) if TIERS.exists() else {}
    session = newest_gpu_session()
    lines = ["| command | what it runs | goal | measured |", "| --- | --- | --- | --- |"]
    for key, command, what, goal in TIER_ROWS:
        if key == "gpu":
            suite = (session or {}).get("suite", {})
            measured = "not measured yet" if not session else (
                f"{_duration(session['seconds'])} in all ({session['date']}, {session['card'].get('name')}); the "
                f"suite {_duration(suite.get('seconds', 0))}: {suite.get('passed', 0)} passed, "
                f"{suite.get('failed', 0)} failed, {suite.get('skipped', 0)} skipped"
                f"{', cut at its deadline before the last tests ended' if suite.get('cut') else ''}" if suite else
                f"{_duration(session['seconds'])} ({session['date']}, {session['card'].get('name')}), suite not run")
        else:
            measured = _measured(records.get(key))
        lines.append(f"| {command} | {what} | {goal} | {measured} |")
    return "\n".join(lines)


def render(text: str) -> str:
    text = _replace(text, "tiers", tiers_markdown())
    text = _replace(text, "versions", versions_markdown())
    text = _replace(text, "suite", suite_markdown())
    return _replace(text, "bench", bench_markdown())


def main(argv: list[str] | None = None) -> int:
    from .cli import ArgumentParser

    parser = ArgumentParser(prog="python -m gpukernels.readme",
                            description="rewrite the generated blocks of README.md and docs/overhead.md in place")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: exit 1 if a file is out of date (used by the tests)")
    # an unknown argument (`--chek`) is refused before anything is read or written: it rewrote README.md
    check = parser.parse_args(sys.argv[1:] if argv is None else argv).check
    stale = []
    for path, new in ((README, render(README.read_text())),
                      (OVERHEAD_DOC, _replace(OVERHEAD_DOC.read_text(), "overhead", overhead_markdown()))):
        if new != path.read_text():
            stale.append(path)
            if not check:
                path.write_text(new)
    if check and stale:
        print(f"{', '.join(p.name for p in stale)} out of date: run `python -m gpukernels.readme`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
