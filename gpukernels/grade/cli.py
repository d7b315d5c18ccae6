"""The command lines: ``gpukernels grade`` (one student, or ``--class DIR``) and ``gpukernels export-student``.

Every bad option gets one line naming it, what was expected and what was given, and exit status 2. ``gpukernels
grade`` exits 0 when every graded exercise has full marks and 1 when one is below (or nothing was graded), as test
runners do -- ``--exit-zero`` for 0 whatever the scores; ``--class`` exits 0 once the class is graded (its report is
the result).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..cli import ArgumentParser as _Parser  # one line (``prog: error: message``) and status 2, no usage block
from ..cli import positive

def _seconds(text: str) -> float:
    from . import check_timeout  # from MIN_TIMEOUT to MAX_TIMEOUT, as the Python API takes it

    try:
        return check_timeout(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (links resolved; neither need exist)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


class _Terminated(BaseException):
    """SIGTERM or SIGHUP reached the grader: unwinds it like Ctrl-C, so that its children are stopped and its
    temporary folder removed on the way out (a BaseException: no ``except Exception`` of the grading stops it)."""


def grade_main(argv) -> int:
    """``gpukernels grade``: ``_grade``, with SIGTERM and SIGHUP turned into an orderly end (one line, status
    128 + the signal): the default action would end the grader at once, leaving its temporary folder behind."""
    import signal
    import threading

    def stop(signum, frame):
        raise _Terminated(signum)

    names = [name for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    main = threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
    previous = {name: signal.signal(getattr(signal, name), stop) for name in names} if main else {}
    try:
        return _grade(argv)
    except _Terminated as err:
        num = err.args[0]
        print(f"gpukernels grade: stopped by {signal.Signals(num).name}; its child processes were ended",
              file=sys.stderr)
        return 128 + num
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def _grade(argv) -> int:
    from ..cli import output_file
    from . import DEFAULT_TIMEOUT, exercises_dir, grade_exercises
    from .results import print_table, to_gradescope, write_json_atomically

    parser = _Parser(prog="gpukernels grade", description="grade exercises (Gradescope results.json)")
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE", help="e.g. 01, 6, matmul_tiled (default: all)")
    parser.add_argument("--submission", metavar="FILE_OR_DIR",
                        help="a kernel file (one exercise), or a folder of NN_name/kernel.py or NN_name.py files "
                             "(default: the handout in the current directory, else exercises/NN_name/kernel.py)")
    parser.add_argument("--class", dest="klass", metavar="DIR",
                        help="grade a whole class: DIR/<student>/NN_name/kernel.py or DIR/<student>/NN_name.py")
    parser.add_argument("--out", metavar="DIR", help="with --class: where to write results (default: DIR-grades)")
    parser.add_argument("--workers", type=positive(int, "a whole number of processes > 0"), default=None,
                        help="child processes at a time (default: CPU count)")
    parser.add_argument("--jobs", type=positive(int, "a whole number of processes > 0"), default=None,
                        help=argparse.SUPPRESS)  # the old name of --workers
    parser.add_argument("--json", metavar="FILE", help="write Gradescope's results.json here")
    parser.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT,
                        help=f"seconds per child process (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--hints", type=_nonnegative_int, default=1, metavar="N",
                        help="hints shown per failed test (default 1)")
    parser.add_argument("--seed", type=_nonnegative_int, default=None, help="fix the random inputs (default: fresh)")
    parser.add_argument("--no-speed", action="store_true", help="skip the GPU speed gate")
    parser.add_argument("--exercises-dir", metavar="DIR", help="the grader's exercises (specs and references)")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 whatever the scores (default: 1 when an exercise is below full marks)")
    args = parser.parse_args(argv)
    workers = args.workers or args.jobs
    if args.out is not None and args.klass is None:
        parser.error(f"--out {args.out!r}: --out is where --class writes a class's results; for one student's "
                     "results.json use --json FILE")
    console = Console()
    try:
        if args.klass is not None:
            from .classroom import grade_class

            if args.submission or args.json:
                parser.error("--class grades a folder of students; it takes --out, not --submission or --json")
            return grade_class(Path(args.klass), Path(args.out) if args.out else None, names=args.exercises,
                               root=args.exercises_dir, workers=workers, timeout=args.timeout,
                               speed=not args.no_speed, hints=args.hints, seed=args.seed, console=console)
        root = exercises_dir(args.exercises_dir)
        if args.submission is not None and not Path(args.submission).exists():
            raise FileNotFoundError(f"--submission: {args.submission} does not exist")
        if args.json is not None:  # before grading: results are never lost to a path that cannot be written
            output_file(args.json, "--json")
        results = grade_exercises(args.exercises, args.submission, root=root, timeout=args.timeout, jobs=workers,
                                  speed=not args.no_speed, hints=args.hints, seed=args.seed)
    except (ValueError, FileNotFoundError) as err:  # UsageError is a ValueError
        print(f"gpukernels grade: {err}", file=sys.stderr)
        return 2
    graded = [r.submission for r in results if r.submission]
    if args.json:
        write_json_atomically(args.json, to_gradescope(results))  # zero points for what is missing, as graded
    if not graded:  # a grade of nothing is no success: say why, in one line
        why = next((t.output.splitlines()[0] for r in results for t in r.tests if t.output), "no exercise chosen")
        print(f"gpukernels grade: nothing was graded ({len(results)} exercise(s) asked for): {why}", file=sys.stderr)
        return 1
    console.print(Text(graded_files_line(graded)))
    print_table(results, console)
    below = [r.exercise for r in results if r.score < r.max_score]
    # as test runners do: a script or CI job can tell full marks (0) from anything less (1)
    return 1 if below and not args.exit_zero else 0


def graded_files_line(graded: list, cwd: Path | None = None) -> str:
    """The first line of ``gpukernels grade``: which files were graded, plainly -- relative to the working folder
    where they lie inside it."""
    cwd = (cwd or Path.cwd()).resolve()
    # (the folder of the submission, the file's name in it): NN_name/kernel.py, or NN_name.py
    units = [(p.parent.parent, f"{p.parent.name}/{p.name}") if p.name == "kernel.py" else (p.parent, p.name)
             for p in (Path(f).resolve() for f in graded)]
    folder = units[0][0]
    names = ", ".join(name if where == folder else f"{where}/{name}" for where, name in units)
    count = f"{len(units)} file" + ("s" if len(units) > 1 else "")
    if folder == cwd:
        return f"grading {count} in this folder: {names}"
    shown = str(folder.relative_to(cwd)) + "/" if _inside(folder, cwd) else str(folder)
    return f"grading {count} in {shown}: {names}"


def export_main(argv) -> int:
    """Copy the exercises -- stubs, READMEs and specs -- without the solutions."""
    from . import available, exercises_dir

    parser = _Parser(prog="gpukernels export-student",
                     description="copy the exercises for students, without their solutions")
    parser.add_argument("dir", help="where to write (must not exist or be empty)")
    parser.add_argument("--exercises-dir", metavar="DIR")
    args = parser.parse_args(argv)
    try:
        root = exercises_dir(args.exercises_dir)
    except FileNotFoundError as err:
        print(f"gpukernels export-student: {err}", file=sys.stderr)
        return 2
    dest = Path(args.dir)
    if _inside(dest, root):  # the handout would be copied into the exercises it is copied from
        where = "is" if dest.resolve() == root else "is inside"
        print(f"gpukernels export-student: DIR {args.dir!r}: {where} the exercises folder {root} it copies; "
              "expected a folder outside it", file=sys.stderr)
        return 2
    if _inside(root, dest):  # the copy would be made around (and of) the exercises themselves
        print(f"gpukernels export-student: DIR {args.dir!r}: holds the exercises folder {root} it copies; expected a "
              "folder outside it", file=sys.stderr)
        return 2
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        print(f"gpukernels export-student: {dest} exists and is not an empty folder", file=sys.stderr)
        return 2
    from ..cli import UsageError, output_dir

    try:  # made here, its parents never: a missing parent is a mistyped path
        output_dir(dest, "DIR")
    except UsageError as err:
        print(f"gpukernels export-student: {err}", file=sys.stderr)
        return 2
    export(root, dest)
    print(f"wrote {len(available(dest))} exercises to {dest} (no solutions); students run `gpukernels grade` "
          "inside it")
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


__all__ = ["grade_main", "export_main", "export"]
