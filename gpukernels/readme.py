"""Regenerate the README's generated blocks -- never typed by hand:

* between ``<!-- versions:begin -->`` and ``<!-- versions:end -->``: every lesson's ``VERSIONS``, with the
  one idea each adds (the first line of its docstring);
* between ``<!-- bench:begin -->`` and ``<!-- bench:end -->``: the performance table from the committed GPU
  results (``benchmarks/results/h200.json``);
* between ``<!-- suite:begin -->`` and ``<!-- suite:end -->``: the suite of real shapes, per regime and per shape
  with the dispatchers' choices (``benchmarks/results/h200-suite.json``, ``gpukernels bench --suite``).

    python -m gpukernels.readme            # rewrite README.md in place
    python -m gpukernels.readme --check    # exit 1 if README.md is out of date (used by the tests)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "results" / "h200.json"
SUITE = ROOT / "benchmarks" / "results" / "h200-suite.json"


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
    return markdown_table(json.loads(RESULTS.read_text()))


def suite_markdown() -> str:
    from gpukernels.bench import suite_markdown as table

    if not SUITE.exists():
        return "No suite results committed yet."
    return table(json.loads(SUITE.read_text()))


def _replace(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"README.md lacks the markers {begin} ... {end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def render(text: str) -> str:
    text = _replace(text, "versions", versions_markdown())
    text = _replace(text, "suite", suite_markdown())
    return _replace(text, "bench", bench_markdown())


def main(argv: list[str]) -> int:
    text = README.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("README.md is out of date: run `python -m gpukernels.readme`", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
