"""`make mutate`: mutation testing (mutmut 3) of the code the tests must guard, with a score per module.

    python tools/mutate.py                 # a sample of SAMPLE mutants per module (seeded: the same every run)
    python tools/mutate.py --all           # every mutant of the selected functions (about 2600: an hour or more)
    python tools/mutate.py --report        # the table of the last run, without running anything
    python tools/mutate.py --sample 8 --modules check spec --min-score 75   # CI's bounded sample (exit 1 below)

Modules and the functions mutated (setup.cfg's [mutmut] section lists the files and the fast unit tests; mutmut
runs, for each mutant, only the selected tests that call the mutated function):

* ``check``        gpukernels/check.py: the comparison every test and the grader trust;
* ``launch``       gpukernels/_launch.py: the launchers' argument checks (check_array, _check_out, contiguous);
* ``trace``        gpukernels/trace.py: the tracer's analyses (traffic, coalescing, bank conflicts, hazards,
                   divergence, barriers and the per-block folding behind them), not its tables;
* ``sim``          gpukernels/sim/_launch.py: barriers and warp primitives (barrier, release, warp ops, votes,
                   shuffles, a lane's exit);
* ``gates``        gpukernels/grade/gates.py: how a gate is scored from a child's report (not the starting of
                   child processes, which test_grade.py grades end to end);
* ``spec``         gpukernels/grade/spec.py: the technique checks, the points per gate, the drawn shapes.

A mutant "survives" when every test that runs the mutated function still passes. tests/MUTATION.md lists the
survivors of the last full look, each killed by a test since or explained as equivalent.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULES = {
    "check": ("gpukernels.check", ["*"]),
    "launch": ("gpukernels._launch", ["x_check_array__mutmut_*", "x__check_out__mutmut_*", "x_contiguous__mutmut_*",
                                      "x__c_strides__mutmut_*"]),
    "trace": ("gpukernels.trace", [f"xǁTraceǁ{m}__mutmut_*" for m in (
        "register", "hook_for", "end_block", "end", "_grow", "_mark_seen", "_analyse_block", "_hazards",
        "_race_cell", "traffic", "_count_seen", "global_bytes", "barriers", "coalescing", "bank_conflicts",
        "hazards", "divergence")] + [f"x_{f}__mutmut_*" for f in (
        "_line_no", "_unravel", "_count_distinct", "_mix", "_rank_within")]),
    "sim": ("gpukernels.sim._launch", [f"xǁLaunchǁ{m}__mutmut_*" for m in (
        "barrier", "_release", "warp_op", "activemask", "_retry_warp", "_complete", "_compute",
        "_maybe_preempt", "sync_counts")]),
    "gates": ("gpukernels.grade.gates", [f"xǁGradingǁ{m}__mutmut_*" for m in (
        "add", "skip_reason", "wants_speed", "add_later", "fail_all", "score_sim", "add_compiles",
        "_check_cases", "score_technique")] + [f"x_{f}__mutmut_*" for f in (
        "child_problem", "student_error", "_nan_note", "make_case", "poisoned", "_first_change", "_dims")]),
    "spec": ("gpukernels.grade.spec", ["xǁ*ǁevaluate__mutmut_*", "xǁExerciseǁ*__mutmut_*"] + [
        f"x_{f}__mutmut_*" for f in ("grouped_sum", "ceil_div", "vector_with_outliers", "_rng")]),
}

KILLED = {1, 3}  # mutmut's exit codes for a mutant that made a test fail
STATUS = {0: "survived", 33: "no tests", 5: "no tests", None: "not run", 36: "timeout", -24: "timeout",
          24: "timeout", 152: "timeout", 255: "timeout", -9: "segfault", -11: "segfault"}


def _env() -> dict:
    env = dict(os.environ, GPUKERNELS_DEVICE="sim", PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)  # the mutated copy under mutants/ is what the tests import
    return env


def _mutmut() -> list[str]:
    exe = Path(sys.executable).with_name("mutmut")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mutmut"]


def _exit_codes() -> dict:
    codes = {}
    for meta in (ROOT / "mutants").rglob("*.py.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def _select(codes: dict, module: str) -> list[str]:
    prefix, patterns = MODULES[module]
    names = [n for n in codes if n.rsplit(".", 1)[0] == prefix]
    return sorted(n for n in names if any(fnmatch.fnmatch(n.rsplit(".", 1)[1], p) for p in patterns))


def report(chosen: dict, min_score: float | None = None) -> int:
    codes = _exit_codes()
    low = []
    print(f"{'module':8s} {'mutants':>7s} {'killed':>6s} {'survived':>8s} {'other':>5s}  score")
    survivors = []
    for module, names in chosen.items():
        c = Counter("killed" if codes.get(n) in KILLED else STATUS.get(codes.get(n), "suspicious") for n in names)
        tried = c["killed"] + c["survived"]
        other = sum(v for k, v in c.items() if k not in ("killed", "survived"))
        score = f"{100 * c['killed'] / tried:.0f}%" if tried else "-"
        print(f"{module:8s} {len(names):7d} {c['killed']:6d} {c['survived']:8d} {other:5d}  {score}"
              + (f"  ({', '.join(f'{v} {k}' for k, v in c.items() if k not in ('killed', 'survived'))})"
                 if other else ""))
        survivors += [n for n in names if codes.get(n) == 0]
        if min_score is not None and (not tried or 100 * c["killed"] / tried < min_score):
            low.append(f"{module} {score} ({c['killed']} of {tried} killed)")
    if survivors:
        print("\nsurvivors (`mutmut show NAME` prints the change):")
        print("\n".join(f"  {n}" for n in survivors))
    if low:
        print(f"\nbelow the floor of {min_score:g}%: {'; '.join(low)}")
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/mutate.py", description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=int(os.environ.get("SAMPLE", 40)),
                        help="mutants per module (default 40, or $SAMPLE)")
    parser.add_argument("--all", action="store_true", help="every mutant of the selected functions")
    parser.add_argument("--seed", type=int, default=0, help="which sample (the same seed, the same mutants)")
    parser.add_argument("--modules", nargs="+", choices=list(MODULES), default=list(MODULES))
    parser.add_argument("--report", action="store_true", help="only print the table of the last run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--min-score", type=float, default=None,
                        help="exit 1 when a module's score (killed / (killed + survived), in %%) is below this")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if not args.report:
        # Generate the mutants and the test-to-function map (a clean run of the selected tests), run nothing yet.
        gen = subprocess.run(_mutmut() + ["run", "--max-children", str(args.max_children), "__generate_only__"],
                             env=_env(), capture_output=True, text=True)
        if not _exit_codes():
            sys.stdout.write(gen.stdout + gen.stderr)
            return 1
    codes = _exit_codes()
    rng = random.Random(args.seed)
    chosen = {}
    for module in args.modules:
        names = _select(codes, module)
        chosen[module] = names if args.all or len(names) <= args.sample else sorted(rng.sample(names, args.sample))
    if not args.report:
        names = [n for ns in chosen.values() for n in ns]
        run = subprocess.run(_mutmut() + ["run", "--max-children", str(args.max_children), *names], env=_env())
        if run.returncode not in (0, 1):
            return run.returncode
    return report(chosen, args.min_score)


if __name__ == "__main__":
    sys.exit(main())
