"""Grades as data, and the two ways they are shown: Gradescope's ``results.json`` and the terminal table.

Everything a student wrote or the grader quotes (hints with ``out[i]``, source lines, error messages) is
shown as plain text: rich would read ``[i]`` as markup and drop it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TestResult:
    name: str
    score: float
    max_score: float
    output: str
    status: str  # passed | failed | skipped (skipped: no points at stake)


@dataclass
class ExerciseResult:
    exercise: str
    submission: str | None
    tests: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)

    def test(self, gate: str) -> TestResult:
        return next(t for t in self.tests if t.name.endswith(f": {gate}"))


def _fmt(x: float) -> str:
    return f"{x:g}"


def to_gradescope(results: list) -> dict:
    """Gradescope's autograder ``results.json``: ``score`` and ``tests`` (name, score, max_score, output, and
    ``status`` -- ``passed`` or ``failed``, the two Gradescope documents; a skipped test, with no points at
    stake, has none and says "skipped" in its output)."""
    tests = []
    for r in results:
        for t in r.tests:
            entry = {"name": t.name, "score": t.score, "max_score": t.max_score, "output": t.output,
                     "visibility": "visible"}
            if t.status in ("passed", "failed"):
                entry["status"] = t.status
            tests.append(entry)
    total = sum(t["score"] for t in tests)
    maximum = sum(t["max_score"] for t in tests)
    lines = [f"{r.exercise}: {_fmt(r.score)} / {_fmt(r.max_score)}" for r in results]
    return {"score": total, "max_score": maximum, "output": "\n".join(lines) + f"\ntotal: {_fmt(total)} / "
            f"{_fmt(maximum)}", "tests": tests}


def write_json_atomically(path, doc) -> None:
    """Write ``doc`` to ``path`` in one step (a temporary file renamed over it): a reader never sees half of
    it, and nothing but the grader, at the end, writes it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent.resolve()))
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


#: Below this many columns the messages leave the table: a message column a third of an 80-column terminal wide
#: wrapped one message over 20-odd lines. They are printed under the table then, across the terminal's width.
WIDE = 120


def print_table(results: list, console=None) -> None:
    """The grades as a table; on a terminal narrower than WIDE columns, the messages below it, full width."""
    from rich.console import Console
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    wide = console.width >= WIDE
    table = Table(title="gpukernels grade", show_lines=wide)
    columns = [("test", {}), ("points", {"justify": "right"}), ("max", {"justify": "right"})]
    columns.append(("message", {"overflow": "fold"}) if wide else ("result", {}))
    for col, kw in columns:
        table.add_column(col, **kw)
    for r in results:
        for t in r.tests:
            style = {"passed": "green", "failed": "red", "skipped": "dim"}[t.status]
            note = Text(t.output) if wide else Text(t.status, style=style)
            table.add_row(Text(t.name), Text(_fmt(t.score), style=style), _fmt(t.max_score), note)
        table.add_row(Text(r.exercise, style="bold"), Text(_fmt(r.score), style="bold"),
                      Text(_fmt(r.max_score), style="bold"),
                      Text(f"{r.seconds:.1f} s" + (f"  ({r.submission})" if r.submission and wide else "")))
    console.print(table)
    if not wide:  # each message under the table, across the terminal: a passed test's in one line
        for r in results:
            for t in r.tests:
                style = {"passed": "green", "failed": "red", "skipped": "dim"}[t.status]
                console.print(Text(f"{t.name}: {t.status}, {_fmt(t.score)} / {_fmt(t.max_score)}", style=style))
                text = t.output if t.status == "failed" else t.output.splitlines()[0] if t.output else ""
                console.print(Padding(Text(text, overflow="fold"), (0, 0, 0, 2)))
    total, maximum = sum(r.score for r in results), sum(r.max_score for r in results)
    console.print(Text(f"total: {_fmt(total)} / {_fmt(maximum)}", style="bold"))


__all__ = ["TestResult", "ExerciseResult", "to_gradescope", "print_table", "write_json_atomically"]
