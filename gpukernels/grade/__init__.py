"""``gpukernels grade``: score students' kernels for the exercises in ``exercises/``, in a way a teacher can trust.

For each exercise the grader (this process) loads the spec from its *own* copy of ``exercises/``, reads the
submission and admits it or not before any of it runs (``admission``), draws fresh random inputs and shapes,
computes the reference itself, and hands only the inputs (and a poisoned output) to child processes that run
the admitted kernel (``pool``, ``_child``, ``protocol``). Every score is computed here (``gates``) from the
arrays and observations the grader's own harness returned. A teacher who adds an exercise writes a
``spec.py`` (``spec``); one who adds a gate or a check looks in ``gates`` and ``spec``.

Files: ``discovery`` (where exercises and submissions are), ``admission`` (what may run), ``protocol`` (the
child's job and report), ``pool`` (child processes), ``_child`` (the child), ``gates`` (scores and messages),
``results`` (Gradescope JSON, the terminal table), ``classroom`` (a whole class at once), ``scratch`` (the run's
temporary folder, and removing those that killed runs left), ``cli``.

A submission that is refused, fails to compile, loops forever or kills its process gets 0 for that exercise
with a message saying so; the other exercises, and the other students, are graded as usual.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .discovery import (available, current_exercise, exercises_dir, find_submission, handout_dir, infer_exercise,
                        select)
from .gates import Grading
from .pool import run_pool
from .results import ExerciseResult, TestResult, print_table, to_gradescope
from .scratch import work_folder
from .spec import load

DEFAULT_TIMEOUT = 60.0  # seconds per child process; the simulator's own per-launch limit is half of it
MAX_TIMEOUT = 3600.0  # a limit must end: "inf" or a day would let a `while True` kernel hold a core for that long
#: The least time limit taken: below a second a child process cannot even start and compile a kernel, so every
#: submission would fail on the time limit and be blamed for it.
MIN_TIMEOUT = 1.0


def check_timeout(timeout) -> float:
    """``timeout`` as seconds, or ValueError: a finite number from MIN_TIMEOUT to MAX_TIMEOUT ("nan" compares false
    with everything and "inf" never ends, so both are refused rather than let through)."""
    import math

    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if not (MIN_TIMEOUT <= value <= MAX_TIMEOUT):
        raise ValueError(f"expected seconds >= {MIN_TIMEOUT:g} and at most {MAX_TIMEOUT:g}, got {timeout!r}"
                         + (" (less leaves no time to start a child and compile a kernel: every submission would "
                            "fail the time limit)" if 0 < value < MIN_TIMEOUT else ""))
    return value


def grade(pairs, *, root: Path | None = None, timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None,
          gpu: bool | None = None, speed: bool = True, hints: int = 1, seed: int | None = None,
          seeds: list | None = None, on_progress=None) -> list:
    """Grade ``pairs`` of (exercise name, submission file or None); results in the same order.

    ``submission=None`` with a reason: use ``(name, (None, "why"))``. ``gpu`` defaults to ``gpukernels.MODE ==
    "gpu"``; ``seed`` fixes the random inputs and shapes (default: fresh every run); ``seeds`` gives one per pair.
    ``on_progress(done, total)`` is called as each pair finishes."""
    try:
        timeout = check_timeout(timeout)
    except ValueError as err:
        raise ValueError(f"timeout: {err}") from None
    root = exercises_dir(root)
    if gpu is None:
        import gpukernels

        gpu = gpukernels.MODE == "gpu"
    jobs = max(1, jobs or os.cpu_count() or 1)
    base_seed = secrets.randbits(31) if seed is None else int(seed)
    folders = available(root)
    specs: dict = {}
    gradings: list = []
    compiled: dict = {}  # (exercise, source) -> the compile child that ended: one compile serves every copy
    compiling: dict = {}  # (exercise, source) -> gradings waiting for the compile child in flight
    done_count = [0]

    def advance(g, done):
        """The next child of ``g`` after ``done`` (None: g is finished or waits for a compile in flight)."""
        nxt = g.next_child(done)
        while nxt is not None and nxt.key[0] == "compile":
            key = (g.ex.name, g.source)
            if key in compiled:
                nxt = g.next_child(compiled[key])
            elif key in compiling:
                compiling[key].append(g)
                return None
            else:
                compiling[key] = []
                return nxt
        if nxt is None:
            done_count[0] += 1
            if on_progress is not None:
                on_progress(done_count[0], len(gradings))
        return nxt

    with work_folder() as tmp:  # removed at the end; a killed run's is removed by the next run (scratch)
        first = []
        for n, (name, sub) in enumerate(pairs):
            sub, missing = sub if isinstance(sub, tuple) else (sub, "")
            if name not in specs:
                specs[name] = load(folders[name])
            work = Path(tmp) / f"{n:04d}_{name}"
            work.mkdir()
            pair_seed = int(seeds[n]) if seeds is not None else (base_seed + 7919 * n) % 2**31
            g = Grading(specs[name], Path(sub).resolve() if sub else None, missing, work, timeout, gpu, speed,
                        hints, pair_seed, index=n)
            gradings.append(g)
        for g in gradings:
            child = advance(g, None)  # admission, here; None when the file was refused or is missing
            if child is not None:
                first.append(child)

        def on_done(child):
            g = gradings[child.key[1]]
            nxt = [advance(g, child)]
            if child.key[0] == "compile":
                key = (g.ex.name, g.source)
                compiled[key] = child
                nxt += [advance(w, child) for w in compiling.pop(key, [])]
            return [c for c in nxt if c is not None]

        run_pool(first, jobs, on_done)
        return [g.finish() for g in gradings]


def grade_exercises(names=None, submission=None, **kw) -> list:
    """Grade exercises by name (all by default; inside an exercise's folder, that one) for one submission file or
    folder (default: a handout in the current directory -- or the one whose exercise folder it is -- else the
    working copies ``exercises/NN_name/kernel.py``)."""
    root = exercises_dir(kw.pop("root", None))
    if not submission and not names and current_exercise(root):
        names = [current_exercise(root)]
    sub = Path(submission) if submission else handout_dir(root=root)
    if sub is not None and sub.is_file() and not names:
        names = [infer_exercise(sub, root)]
    chosen = select(names, root)
    pairs = []
    for name in chosen:
        path, why = find_submission(name, sub, root, single=len(chosen) == 1)
        pairs.append((name, (path, why)))
    return grade(pairs, root=root, **kw)


def grade_main(argv):
    from .cli import grade_main as main

    return main(argv)


def export_main(argv):
    from .cli import export_main as main

    return main(argv)


def export(root: Path, dest: Path) -> None:
    from .cli import export as _export

    _export(root, dest)


__all__ = ["grade", "grade_exercises", "grade_main", "export_main", "export", "to_gradescope", "print_table",
           "ExerciseResult", "TestResult", "exercises_dir", "available", "select", "find_submission",
           "infer_exercise", "handout_dir", "DEFAULT_TIMEOUT"]
