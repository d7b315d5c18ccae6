"""Time `gpukernels grade --class` on a synthetic class: N students x every exercise, each student's file drawn
from the solutions and the fixture submissions (cheats, bugs, alternatives) as a real class mixes them.

    python benchmarks/grade_class.py --students 100 --workers 1 2 4

prints, per --workers value, the wall time, the time per (student, exercise) pair and the speed-up over one
worker. Simulator mode (GPUKERNELS_DEVICE=sim) unless a GPU is chosen.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_class(folder: Path, students: int, seed: int) -> int:
    """Write ``students`` folders; returns the number of (student, exercise) pairs."""
    rng = random.Random(seed)
    exercises = sorted(p.name for p in (ROOT / "exercises").iterdir() if (p / "spec.py").exists())
    pool = {}
    for name in exercises:
        files = [ROOT / "exercises" / "solutions" / f"{name}.py"] * 3  # most students get most exercises right
        files += sorted((ROOT / "tests" / "fixtures" / "submissions" / name).glob("*.py"))
        files += [ROOT / "exercises" / name / "kernel.py"]  # and some hand in the stub
        pool[name] = [f for f in files if "infinite_loop" not in f.name]  # one would cost its full time limit
    for i in range(students):
        person = folder / f"student{i:03d}"
        for name in exercises:
            dest = person / name / "kernel.py"
            dest.parent.mkdir(parents=True)
            dest.write_text(rng.choice(pool[name]).read_text())
    return students * len(exercises)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    env = {**os.environ, "GPUKERNELS_DEVICE": os.environ.get("GPUKERNELS_DEVICE", "sim")}
    with tempfile.TemporaryDirectory() as tmp:
        klass = Path(tmp) / "class"
        pairs = make_class(klass, args.students, args.seed)
        base = None
        print(f"{args.students} students, {pairs} (student, exercise) pairs, {os.cpu_count()} CPUs")
        print("| workers | wall (s) | s per pair | speed-up |\n|---:|---:|---:|---:|")
        for workers in args.workers:
            out = Path(tmp) / f"out{workers}"
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "gpukernels", "grade", "--class", str(klass), "--workers",
                                   str(workers), "--out", str(out), "--no-speed", "--seed", str(args.seed)],
                                  env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
                return 1
            base = base or wall
            print(f"| {workers} | {wall:.1f} | {wall / pairs:.3f} | {base / wall:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
