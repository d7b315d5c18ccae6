"""``gpukernels grade --class DIR``: a whole class at once.

``DIR/<student>/NN_name/kernel.py`` or ``DIR/<student>/NN_name.py``, one folder per student. Every (student,
exercise) pair is graded as ``gpukernels grade`` grades one -- its own processes, its own time limit, so one bad
submission costs only its own points -- with ``--workers`` child processes at a time. Written to ``--out``:

* ``<student>/results.json``   Gradescope's format, one per student;
* ``scores.csv``               a row per student, a column per exercise, and the total;
* ``report.md``, ``report.html`` and ``histograms.png``: the score histogram of each exercise and the most
  common failures across the class, each shown once with its message whole: a message is taken apart from its
  student (their path, file name and folder name) and failures that differ only in numbers (shapes, seeds,
  values) are one failure.
"""

from __future__ import annotations

import csv
import html
import re
import time
from collections import Counter
from pathlib import Path

from .discovery import exercises_dir, find_submission, select
from .results import to_gradescope, write_json_atomically


def students(folder: Path) -> list:
    """The student folders of a class folder, sorted (hidden folders and files are not students)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"--class: {folder} is not a folder")
    found = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    if not found:
        raise FileNotFoundError(f"--class: {folder} holds no student folders (expected {folder}/<student>/NN_name/"
                                "kernel.py)")
    return found


def grade_class(folder: Path, out: Path | None = None, *, names=None, root=None, workers=None, timeout=60.0,
                speed=True, hints=1, seed=None, console=None) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from . import grade

    root = exercises_dir(root)
    chosen = select(names, root)
    people = students(folder)
    out = out or folder.with_name(folder.name + "-grades")
    from .cli import _inside

    if _inside(out, folder):  # results.json and the reports would land among the students' submissions
        from ..cli import UsageError

        raise UsageError(f"--out {str(out)!r}: is inside --class {str(folder)!r}, the students' submissions; "
                         f"expected a folder outside it (default: {folder.name}-grades beside it)")
    if out.exists() and not out.is_dir():
        raise FileNotFoundError(f"--out: {out} exists and is not a folder")
    from ..cli import output_dir

    output_dir(out, "--out")  # made if missing, its parents never (UsageError: a mistyped path)
    pairs, owners = [], []
    for person in people:
        for name in chosen:
            path, why = find_submission(name, person, root, single=False)
            pairs.append((name, (path, why)))
            owners.append(person.name)
    t0 = time.monotonic()
    with Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        task = bar.add_task("grading", total=len(pairs))
        results = grade(pairs, root=root, timeout=timeout, jobs=workers, speed=speed, hints=hints, seed=seed,
                        on_progress=lambda done, total: bar.update(task, completed=done))
        bar.update(task, completed=len(pairs))
    seconds = time.monotonic() - t0
    by_student: dict = {}
    for owner, result in zip(owners, results):
        by_student.setdefault(owner, []).append(result)
    for owner, res in by_student.items():
        (out / owner).mkdir(exist_ok=True)
        write_json_atomically(out / owner / "results.json", to_gradescope(res))
    write_csv(out / "scores.csv", chosen, by_student)
    write_report(out, chosen, by_student, seconds, workers)
    if console is not None:
        console.print(f"graded {len(people)} students x {len(chosen)} exercises in {seconds:.1f} s; wrote "
                      f"{out}/scores.csv, {out}/report.html and {len(people)} results.json")
    return 0


def write_csv(path: Path, exercises: list, by_student: dict) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", *exercises, "total", "max"])
        for owner, res in by_student.items():
            w.writerow([owner, *(f"{r.score:g}" for r in res), f"{sum(r.score for r in res):g}",
                        f"{sum(r.max_score for r in res):g}"])


# (fragment of a failure message, the kind of mistake it reports), most specific first
_KINDS = [("does not parse", "syntax error"), ("defines no", "no kernel of the required name"),
          ("does not compile", "does not compile for a GPU"), ("printed to stdout", "prints to stdout"),
          ("time limit", "time limit (a loop that never ends?)"), ("did not finish", "time limit (a loop that never ends?)"),
          ("barrier divergence", "cuda.syncthreads() inside a branch"), ("race", "race (a missing cuda.syncthreads())"),
          ("out-of-bounds", "out-of-bounds access (bounds guard)"), ("modified its input", "modifies an input"),
          ("never written", "outputs never written"), ("computed NaN", "computes NaN"),
          ("shfl_", "warp shuffle misused"), ("expected", "wrong values")]


def _without_hints(text: str) -> str:
    """A failure message without the hints and the "--hints N" line the grader appends (the README's words)."""
    keep = [ln for ln in text.splitlines() if not re.match(r"hint \d+: |\(run `gpukernels grade ", ln)]
    return "\n".join(keep).strip()


def anonymise(text: str, submission: str | None = None, owner: str | None = None) -> str:
    """A failure message with the student taken out: their file's path (and any other absolute path) as its name
    alone, their file's name as ``kernel.py`` (a class may hand in ``NN_name.py`` or ``NN_name/kernel.py``) and
    their folder's name as ``<student>`` -- so that the same mistake reads the same for everyone."""
    text = _without_hints(text)
    if submission:
        path = Path(submission)
        for form in (str(path), str(path.resolve())):
            text = text.replace(form, path.name)
        if path.name != "kernel.py":
            text = re.sub(rf"(?<![\w/]){re.escape(path.name)}\b", "kernel.py", text)
    text = re.sub(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)", r"\1", text)  # any other absolute path: its name
    if owner:
        text = re.sub(rf"(?<![\w-]){re.escape(owner)}(?![\w-])", "<student>", text)
    return text


def failure_key(text: str, gate: str = "correctness") -> str:
    """The kind of mistake a failure message reports, for the summary table: refusals by the rule they broke,
    technique by the check that failed, correctness by what went wrong."""
    if text.startswith("not allowed"):
        reason = re.sub(r"^not allowed in [^,]+, line \d+: ", "", text).split(". Nothing")[0]
        reason = re.sub(r"`[^`]*`", "`...`", reason)
        return "refused before it ran: " + reason
    if gate == "technique":
        failed = next((ln[8:] for ln in text.splitlines() if ln.startswith("FAILED: ")), text.splitlines()[0])
        failed = re.sub(r"\([^)]*\)", "", failed.split(" -- ")[0])
        return "technique: " + re.sub(r"-?\d+(\.\d+)?%?", "N", failed).strip()
    return next((kind for fragment, kind in _KINDS if fragment in text), "other")


def group_key(text: str) -> str:
    """Failures that differ only in numbers (shapes, seeds, counts, values drawn per run) are one failure."""
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", text)


def summarise(exercises: list, by_student: dict) -> dict:
    """Per exercise: the scores, the maximum, and the most common failures across students: each a dict of
    ``kind`` (for the table), ``message`` (one student's whole message, the student taken out), ``count``."""
    summary = {}
    for i, name in enumerate(exercises):
        scores, groups, maximum = [], {}, 0.0
        for owner, res in by_student.items():
            r = res[i]
            scores.append(r.score)
            maximum = max(maximum, r.max_score)
            failed = [t for t in r.tests if t.status == "failed" and not t.output.startswith("not graded")]
            if failed:
                gate = failed[0].name.split(": ")[1]
                message = anonymise(failed[0].output, r.submission, owner)
                kind = failure_key(message, gate)
                group = groups.setdefault((kind, group_key(message)),
                                          {"kind": kind, "message": message, "count": 0})
                group["count"] += 1
        ranked = sorted(groups.values(), key=lambda g: -g["count"])  # stable: first seen first among equals
        summary[name] = {"scores": scores, "max": maximum, "failures": ranked[:5]}
    return summary


def write_report(out: Path, exercises: list, by_student: dict, seconds: float, workers) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarise(exercises, by_student)
    cols = min(3, len(exercises))
    rows = -(-len(exercises) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, exercises):
        s = summary[name]
        top = int(s["max"]) if s["max"] else 1
        ax.hist(s["scores"], bins=[b - 0.5 for b in range(top + 2)], color="#1f5fa8", edgecolor="white")
        ax.set_title(f"{name}: how many students scored each point", fontsize=9)
        ax.set_xlabel(f"points (of {s['max']:g})")
        ax.set_ylabel("students")
    for ax in list(axes.flat)[len(exercises):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / "histograms.png", dpi=110)
    plt.close(fig)

    totals = [sum(r.score for r in res) for res in by_student.values()]
    maximum = max((sum(r.max_score for r in res) for res in by_student.values()), default=0)
    head = (f"{len(by_student)} students, {len(exercises)} exercises, graded in {seconds:.1f} s "
            f"({workers or 'CPU count'} workers). Mean total {sum(totals) / max(1, len(totals)):.1f} of {maximum:g}.")
    md = ["# Class report", "", head, "", "![score histograms](histograms.png)", "",
          "| exercise | mean | full marks | zero | most common failures |", "|---|---:|---:|---:|---|"]
    page = ["<!doctype html><meta charset='utf-8'><title>Class report</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}td,th{padding:4px 8px;"
            "border-bottom:1px solid #ccc;vertical-align:top}</style>",
            f"<h1>Class report</h1><p>{html.escape(head)}</p><img src='histograms.png' alt='score histograms'>",
            "<table><tr><th>exercise</th><th>mean</th><th>full marks</th><th>zero</th><th>most common failures</th></tr>"]
    details_md, details_html = [], []
    for name in exercises:
        s = summary[name]
        n = max(1, len(s["scores"]))
        full = sum(1 for x in s["scores"] if s["max"] and x == s["max"])
        zero = sum(1 for x in s["scores"] if x == 0)
        fails = "; ".join(f"{f['count']}x {f['kind']}" for f in s["failures"]) or "-"
        md.append(f"| {name} | {sum(s['scores']) / n:.1f} / {s['max']:g} | {full} | {zero} | "
                  f"{fails.replace('|', '/')} |")
        items = "".join(f"<li>{f['count']}&times; {html.escape(f['kind'])}</li>" for f in s["failures"]) or "-"
        page.append(f"<tr><td>{html.escape(name)}</td><td>{sum(s['scores']) / n:.1f} / {s['max']:g}</td>"
                    f"<td>{full}</td><td>{zero}</td><td><ul>{items}</ul></td></tr>")
        if s["failures"]:  # each failure once, however many students made it, with its message whole
            details_md += ["", f"### {name}"]
            details_html.append(f"<h3>{html.escape(name)}</h3>")
            for f in s["failures"]:
                who = f"{f['count']} student" + ("s" if f["count"] > 1 else "")
                details_md += ["", f"**{who}**: {f['kind']}", "", "~~~", f["message"].replace("~~~", "~ ~ ~"), "~~~"]
                details_html.append(f"<p><b>{who}</b>: {html.escape(f['kind'])}</p>"
                                    f"<pre style='white-space:pre-wrap'>{html.escape(f['message'])}</pre>")
    page.append("</table>")
    if details_md:
        md += ["", "## The most common failures, each message whole", *details_md]
        page += ["<h2>The most common failures, each message whole</h2>", *details_html]
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.html").write_text("\n".join(page) + "\n")


__all__ = ["grade_class", "students", "summarise", "failure_key", "anonymise", "group_key"]
