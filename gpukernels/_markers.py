"""Generated text between markers in a Markdown file: ``<!-- name:begin -->`` ... ``<!-- name:end -->``.

`gpukernels.readme` rewrites the README's tables this way, and ``gpukernels bench --update-readme`` one table."""

from __future__ import annotations


def replace_between(text: str, name: str, body: str) -> str:
    """``text`` with what lies between the markers of ``name`` replaced by ``body``; SystemExit (one line) when the
    markers are missing."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"README.md lacks the markers {begin} ... {end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"
