"""Where the exercises (the grader's specs) and the submissions (a student's files) are."""

from __future__ import annotations

import os
from pathlib import Path


def exercises_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The grader's exercises: ``--exercises-dir``, else ``$GPUKERNELS_EXERCISES``, else the repository's
    ``exercises/`` next to this package, else ``./exercises``, else ``.`` (a handout, when gpukernels is
    installed without its repository)."""
    if explicit is not None:
        if not Path(explicit).exists():
            raise FileNotFoundError(f"--exercises-dir: {explicit} does not exist; expected a folder of NN_name/spec.py "
                                    "exercises")
        if not Path(explicit).is_dir():
            raise FileNotFoundError(f"--exercises-dir: {explicit} is not a folder; expected a folder of "
                                    "NN_name/spec.py exercises")
        if not available(Path(explicit)):
            raise FileNotFoundError(f"--exercises-dir: {explicit} holds no exercises (NN_name/spec.py folders)")
        return Path(explicit).resolve()
    for candidate in (os.environ.get("GPUKERNELS_EXERCISES"), Path(__file__).resolve().parents[2] / "exercises",
                      Path.cwd() / "exercises", Path.cwd()):
        if candidate and Path(candidate).is_dir() and available(Path(candidate)):
            return Path(candidate).resolve()
    raise FileNotFoundError("no exercises/ folder found; pass --exercises-dir DIR")


def available(root: Path) -> dict:
    """Exercise name -> folder, in order (``NN_name`` folders with a ``spec.py``)."""
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir())
            if p.is_dir() and p.name[:2].isdigit() and (p / "spec.py").exists()}


def exercise_folder(cwd: Path | None = None) -> Path | None:
    """The exercise folder the current directory is -- ``NN_name`` holding its ``kernel.py``, one folder of a
    handout (or of the grader's exercises) -- or None."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    return cwd.resolve() if cwd.name[:2].isdigit() and (cwd / "kernel.py").is_file() else None


def current_exercise(root: Path, cwd: Path | None = None) -> str | None:
    """The exercise to grade when none is named: the one whose folder the current directory is, else None."""
    folder = exercise_folder(cwd)
    return folder.name if folder is not None and folder.name in available(Path(root)) else None


def handout_dir(cwd: Path | None = None, root: Path | None = None) -> Path | None:
    """The student's handout to grade by default: the current directory, or its ``exercises/``, when it holds
    ``NN_name/kernel.py`` folders (what ``gpukernels export-student DIR`` writes), or the handout the current
    directory is one exercise folder of -- unless that is the grader's own exercises folder, whose kernel.py files
    are the default anyway."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    inside = exercise_folder(cwd)
    if inside is not None:  # handout/06_matmul_tiled: its own kernel.py, never the repository's
        return inside.parent if root is None or inside.parent != Path(root).resolve() else None
    for folder in (cwd, cwd / "exercises"):
        if not folder.is_dir():
            continue
        kernels = [p for p in folder.iterdir() if p.is_dir() and p.name[:2].isdigit() and (p / "kernel.py").is_file()]
        if kernels and (root is None or folder.resolve() != Path(root).resolve()):
            return folder.resolve()
    return None


def select(names, root: Path) -> list:
    """Resolve ``06``, ``6``, ``matmul_tiled`` or ``06_matmul_tiled`` to exercise names (all when empty)."""
    found = available(root)
    if not names:
        return list(found)
    chosen = []
    for name in names:
        key = str(name).strip().rstrip("/").split("/")[-1]
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


def find_submission(exercise: str, submission: Path | None, root: Path, single: bool) -> tuple:
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


__all__ = ["exercises_dir", "available", "handout_dir", "exercise_folder", "current_exercise", "select",
           "infer_exercise", "find_submission"]
