"""The lesson notes a student reads on the course site: one performance page per lesson (docs/performance/), written
from the code and the reference run by `python -m gpukernels.viz.notes`, and nothing of the engineering log.

Default tier, about a second: the pages are compared with what the generator gives now, so that a step added to a
lesson's VERSIONS or a new committed run shows up as a failure naming the command, not as a stale page."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import gpukernels
from gpukernels.viz import notes
from gpukernels.viz.performance import load_bench

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

#: What the pages the site renders must not carry: commit hashes, branch names, talk of machines being lent.
PROCESS_TALK = re.compile(r"\bcommit [0-9a-f]{7,40}\b|\b(?:branch|origin)/[\w-]+|\bno GPU (?:was )?available\b|"
                          r"\bthe development machine\b|\bGPU session\b", re.I)


def test_each_lesson_page_is_what_the_code_and_the_results_give():
    report = load_bench()
    for lesson, mod in gpukernels.LESSONS.items():
        path = notes.PAGES_DIR / f"{lesson}.md"
        assert path.is_file(), f"{path} is missing: run python -m gpukernels.viz.notes"
        assert path.read_text() == notes.lesson_page(lesson, report), \
            f"{path.relative_to(ROOT)} is stale: run python -m gpukernels.viz.notes"
        text = path.read_text()
        # the ladder's table has a row per entry of VERSIONS, in its order, and says which were not measured
        rows = re.findall(r"^\| (\d+) \| `(\w+)`", text, re.M)
        assert [name for _, name in rows] == list(mod.VERSIONS), lesson
        for section in ("## The ladder", "## Why each step helps", "## What the peer does differently"):
            assert section in text, (lesson, section)
        assert f"{lesson}_performance.png" in text and "NOTES" not in text


def test_the_site_has_lesson_notes_and_no_engineering_log(tmp_path):
    import build_site

    pages = build_site.stage(tmp_path / "src", classroom=tmp_path / "none")
    notes_pages = [p.as_posix() for p in pages["Lesson notes"]]
    assert notes_pages[:len(gpukernels.LESSONS)] == [f"docs/performance/{lesson}.md" for lesson in gpukernels.LESSONS]
    assert not (tmp_path / "src" / "benchmarks").exists()
    assert "NOTES" not in (tmp_path / "src" / "index.md").read_text()
    # nothing staged for the site links to the log or speaks of commits, branches or machines lent
    for page in sorted((tmp_path / "src").rglob("*")):
        if page.suffix not in (".md", ".ipynb"):
            continue
        text = page.read_text()
        if page.suffix == ".ipynb":  # what is read: the markdown cells (code comments cite the log by name)
            import json

            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
        assert "](../benchmarks/NOTES.md" not in text and "](benchmarks/NOTES.md" not in text, page
        found = PROCESS_TALK.findall(text)
        assert not found, f"{page.relative_to(tmp_path / 'src')}: {found}"


#: A path of the machine a notebook ran on: the repository's, or any absolute path to a .py file (POSIX, Windows)
MACHINE_PATH = re.compile(re.escape(str(ROOT)) + r"|(?<![\w./:])/(?:[\w.+-]+/)+[\w.+-]+\.py\b|\b[A-Za-z]:\\[^\s\"'<>]+\.py\b")


def test_committed_notebooks_name_no_machine_path():
    """What the site renders of a notebook -- its outputs, the classroom page each embeds (an iframe's srcdoc) --
    names files relative to the package or the repository (gpukernels/matmul/k01_naive.py:28), never by a path of
    the machine it ran on (the browser test, tests/test_site_student.py, reads the built pages the same way)."""
    import html
    import json

    found = []
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            for out in cell.get("outputs", []):
                for text in [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k.startswith("text/")]:
                    text = html.unescape(html.unescape("".join(text) if isinstance(text, list) else text))
                    found += [f"{nb.name}, cell {i}: {m.group(0)!r}" for m in list(MACHINE_PATH.finditer(text))[:2]]
    assert not found, "\n".join(found[:20])
