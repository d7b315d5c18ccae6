"""What the notebooks and docs show agrees with the code: every committed table that lists a lesson's versions lists
exactly ``gpukernels.LESSONS[lesson].VERSIONS``, in its order, and the gallery names only source lines that exist.

A table "lists versions" when it has a ``version`` column. Its values that look like a version name (an identifier:
``naive``, ``split_k``) must all be versions of the lesson -- the ``lesson`` column's, or else the lesson whose
registry they match best; a peer such as ``cuBLAS (torch.mm, TF32 off)`` or a ``**naive total**`` row is not one.
A table naming three or more versions claims to show the ladder, so it must show all of it, in the registry's order
(a benchmark table may lack the versions added after its run if the same output names them: ``results_table``'s
"Not in this benchmark run"). Two versions side by side (naive against coalesced) are a comparison, not a ladder.

The notebooks' outputs come from a GPU run and are only refreshed by running them again there: a notebook whose
committed outputs predate the registry is marked xfail(strict=True) below, with the reason, until it is re-run --
then the mark must go (strict: a stale mark fails too).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gpukernels

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # how a version's name looks; peers and totals do not
NOT_RUN = "Not in this benchmark run"

#: Notebooks whose committed outputs are older than the registry and wait for a GPU re-run (not regenerated here).
STALE: dict = {  # name -> why, e.g. "its versions table has 19 of 21 rows; re-run the notebook on the GPU"
}


def markdown_tables(text: str):
    """(header, rows) of each GitHub-flavoured Markdown table in ``text``; cells stripped, ``\\|`` kept as ``|``."""
    def cells(line: str) -> list[str]:
        parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        return [p.replace("\\|", "|").strip() for p in parts]

    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and re.fullmatch(r"\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*",
                                                               lines[i + 1]):
            header = cells(lines[i])
            j, rows = i + 2, []
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append(cells(lines[j]))
                j += 1
            yield header, rows
            i = j
        else:
            i += 1


def _lesson_of(names: list[str]) -> str | None:
    """The lesson whose registry holds the most of ``names``."""
    score = {lesson: sum(n in mod.VERSIONS for n in names) for lesson, mod in gpukernels.LESSONS.items()}
    best = max(score, key=score.get)
    return best if score[best] else None


def version_problems(text: str, where: str) -> list[str]:
    """What is wrong with the version tables in ``text`` (one Markdown output or page)."""
    problems = []
    for header, rows in markdown_tables(text):
        cols = [h.strip("*_` ").lower() for h in header]
        if "version" not in cols:
            continue
        v = cols.index("version")
        lc = cols.index("lesson") if "lesson" in cols else None
        groups: dict = {}
        for row in rows:
            if v >= len(row):
                continue
            # a version's cell may carry a note after its name: "tf32x3 (float32 in; x peer: ...)", "optimized †"
            name = re.split(r" \(| †", row[v].strip("`"))[0].strip("` ")
            if NAME.match(name):
                groups.setdefault(row[lc] if lc is not None and lc < len(row) else None, []).append(name)
        for lesson, names in groups.items():
            lesson = lesson if lesson in gpukernels.LESSONS else _lesson_of(names)
            if lesson is None:
                problems.append(f"{where}: a table of versions of no lesson: {names}")
                continue
            registry = list(gpukernels.LESSONS[lesson].VERSIONS)
            shown = list(dict.fromkeys(names))
            unknown = [n for n in shown if n not in registry]
            if unknown:
                problems.append(f"{where}: {lesson} table names versions not in {lesson}.VERSIONS: {unknown}")
            if len(shown) >= 3 and shown != registry:
                missing = [n for n in registry if n not in shown]
                noted = NOT_RUN in text and all(f"`{n}`" in text.split(NOT_RUN, 1)[1] for n in missing)
                if not noted or [n for n in registry if n in shown] != shown:
                    problems.append(f"{where}: {lesson} table lists {len(shown)} versions, {lesson}.VERSIONS has "
                                    f"{len(registry)}" + (f"; missing {missing}" if missing else "")
                                    + ("; out of order" if not missing and not unknown else ""))
    return problems


def notebook_problems(path: Path) -> list[str]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            md = out.get("data", {}).get("text/markdown")
            if md:
                problems += version_problems("".join(md), f"{path.name} cell {i}")
    return problems


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=[pytest.mark.xfail(strict=True,
                                                                                        reason=STALE[p.stem])]
                                               if p.stem in STALE else []) for p in NOTEBOOKS])
def test_notebook_version_tables_match_the_registry(path):
    problems = notebook_problems(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", ["README.md"] + sorted(p.relative_to(ROOT).as_posix()
                                                        for p in (ROOT / "docs").glob("*.md")))
def test_page_version_tables_match_the_registry(page):
    problems = version_problems((ROOT / page).read_text(), page)
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_stale_table():
    """A table missing a version, one naming a version the registry no longer has, and one in another order fail;
    a comparison of two, a peer's row and a benchmark table that names its missing versions pass."""
    names = list(gpukernels.LESSONS["softmax"].VERSIONS)

    def table(rows, note=""):
        return "| version | ms |\n|---|---|\n" + "".join(f"| {r} | 1 |\n" for r in rows) + note

    assert version_problems(table(names), "t") == []
    assert version_problems(table(names[:2]), "t") == []
    assert version_problems(table(names + ["torch.softmax", "cuDNN (F.relu)", "**naive total**"]), "t") == []
    assert "missing" in version_problems(table(names[:-1]), "t")[0]
    assert "not in softmax.VERSIONS" in version_problems(table(names + ["softmax_v9"]), "t")[0]
    assert "out of order" in version_problems(table(names[::-1]), "t")[0]
    assert version_problems(table(names[:-1], f"\n\n{NOT_RUN} (added since): `{names[-1]}`."), "t") == []
    # names carrying a note (a follow-up run's mark, another input type) are still names: all of them, or one short
    noted = [f"{n} †" for n in names[:-1]] + [f"{names[-1]} (float16 in; x peer: torch SDPA (float16))"]
    assert version_problems(table(noted + ["torch SDPA (float32, default backend) †"]), "t") == []
    assert "missing" in version_problems(table(noted[1:]), "t")[0]
    two = "| lesson | version |\n|---|---|\n" + "".join(f"| {les} | {v} |\n" for les in ("matmul", "softmax")
                                                         for v in gpukernels.LESSONS[les].VERSIONS)
    assert version_problems(two, "t") == []


CITED = re.compile(r"[\w./-]*[\w-]\.py(?::(\d+))?")


def cited_problems(text: str, where: str) -> list[str]:
    """Each source file ``text`` names (``gpukernels/softmax/k01_naive.py:28``) must be a file of the repository,
    named by its path (a bare ``softmax.py`` names none), and a cited line must be one of its lines."""
    problems = []
    for m in CITED.finditer(text):
        path, line = m.group(0).split(":")[0], m.group(1)
        f = ROOT / path
        if "/" not in path or not f.is_file():
            problems.append(f"{where} cites {m.group(0)}: no such file in the repository")
        elif line and not 0 < int(line) <= len(f.read_text().splitlines()):
            problems.append(f"{where} cites {m.group(0)}: {path} has {len(f.read_text().splitlines())} lines")
    return problems


def test_the_gallery_cites_only_source_that_exists():
    text = (ROOT / "docs" / "gallery.md").read_text()
    problems = cited_problems(text, "docs/gallery.md")
    assert not problems, "\n".join(problems)
    # the figures that quote a line of a kernel say which, so that the check above has something to check
    assert "Source lines shown: `gpukernels/" in text
    assert cited_problems("`softmax.py:126`", "t") and cited_problems("`gpukernels/softmax/k01_naive.py:9999`", "t")


def test_every_notebook_opens_in_colab_from_the_one_repository_url():
    """Each notebook has its "Open in Colab" badge and its Colab-only install cell (tools/notebook_links.py writes
    them from pyproject's [project.urls] Repository), and every GitHub address in the notebooks and pages is that
    one: a changed URL is changed in one place and the tool run again."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(ROOT / "tools" / "notebook_links.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    sys.path.insert(0, str(ROOT / "tools"))
    import notebook_links

    repo = notebook_links.repository()
    slug = repo.removeprefix("https://github.com/")
    texts = {p.relative_to(ROOT).as_posix(): p.read_text()
             for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *NOTEBOOKS]}
    for name, text in texts.items():
        for m in re.finditer(r"github\.com/([\w.-]+/[\w.-]+)", text):
            assert m.group(1) == slug, f"{name} names github.com/{m.group(1)}, pyproject's repository is {repo}"
