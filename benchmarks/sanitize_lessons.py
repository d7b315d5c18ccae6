"""Every version of every lesson once per small odd shape, checked against float64, for compute-sanitizer on a GPU:

    compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/sanitize_lessons.py [LESSON ...]
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_lessons.py
    compute-sanitizer --tool synccheck python3 benchmarks/sanitize_lessons.py

The shapes are each lesson's ``SHAPES["test"]`` (what the default test tier runs in the simulator: odd sides, partial
tiles, sizes of 1), so every version's edge code runs; each output starts as NaN and is compared with the float64
reference of its own inputs (``gpukernels.check``), so a kernel the sanitizer passes is also right. The lesson
scripts beside this one (``tensor_core_sanitize.py``, ``attention_sanitize.py``, ...) take the dispatchers down their
other paths at larger shapes; this one covers the whole registry at once. One line per run; exit status 1 when a run
was wrong or raised. ``GPUKERNELS_DEVICE=sim`` runs the same cases in the simulator (a dry run: slow, no sanitizer).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

from gpukernels import LESSONS, check  # noqa: E402


def cases(lessons, kind: str = "test"):
    """(lesson, version, shape) for every version of ``lessons`` at each of the lesson's ``SHAPES[kind]`` it takes."""
    for lesson in lessons:
        mod = LESSONS[lesson]
        for name in mod.VERSIONS:
            for shape in mod.SHAPES[kind]:
                if check.supports(lesson, name, shape):
                    yield lesson, name, tuple(shape)


def run(lesson: str, name: str, shape, seed: int) -> check.CheckResult:
    """One run of ``lesson.name`` at ``shape`` into a NaN-poisoned output, compared with float64."""
    mod = LESSONS[lesson]
    inputs, ref, tol = check.case(lesson, name, shape, seed)
    out = np.full(ref.shape, np.nan, dtype=np.float32)
    mod.VERSIONS[name](*inputs, out=out)
    scale = getattr(mod, "error_scale", None)
    return check.compare(out, ref, tol, scale=scale and scale(*inputs))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lessons", nargs="*", help=f"among {', '.join(LESSONS)} (default: every lesson)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    unknown = [x for x in args.lessons if x not in LESSONS]
    if unknown:
        p.error(f"lessons: expected some of {', '.join(LESSONS)}, got {', '.join(unknown)}")
    lessons = args.lessons or list(LESSONS)
    bad = runs = 0
    start = time.time()
    for lesson, name, shape in cases(lessons):
        runs += 1
        try:
            result = run(lesson, name, shape, args.seed)
            ok, what = result.ok, str(result)
        except Exception as e:  # noqa: BLE001 - reported, counted, and the next version runs
            ok, what = False, f"raised {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {lesson}.{name} {'x'.join(map(str, shape))}: {what}", flush=True)
    print(f"sanitize_lessons: {runs} runs, {bad} wrong, {time.time() - start:.0f} s", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
