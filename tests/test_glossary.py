"""Every term of a fixed glossary is defined in the notebook where a student first meets it, before (or where) it is
first used: the course is read in the notebooks' order (00, 01, 01b, 02, ...), and the cell of a term's first use
must hold its definition -- the term set in emphasis (``*warp*`` or ``**warp**``) -- or come after a cell that does.

What counts as a use: the term in a markdown cell's prose (not in `code`, not in a link's address). The opening cell
of a notebook (its title and "What you will learn" list: a preview of what it defines) and a "Next" list of the
notebooks to come are not uses. Default tier,
well under a second: it reads the committed notebooks' markdown only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))

#: term -> the pattern of a use (plurals and inflections included)
GLOSSARY = {
    "kernel": r"kernels?",
    "thread": r"threads?",
    "block": r"blocks?",
    "grid": r"grids?",
    "warp": r"warps?",
    "lane": r"lanes?",
    "SM": r"SMs?",
    "global memory": r"global memory",
    "shared memory": r"shared memory",
    "register": r"registers?",
    "occupancy": r"occupancy",
    "sector": r"sectors?",
    "coalesced": r"coalesc(?:ed|ing|es|e)",
    "bank conflict": r"bank conflicts?",
    "barrier": r"barriers?",
    "tile": r"tiles?",
    "arithmetic intensity": r"(?:arithmetic )?intensity",
    "roofline": r"roofline",
    "tensor core": r"tensor cores?",
    "fragment": r"fragments?",
    "warpgroup": r"warpgroups?",
    "TMA": r"TMA|Tensor Memory Accelerator",
    "mbarrier": r"mbarriers?",
    "phase bit": r"phase bits?",
}
CASE_SENSITIVE = {"SM", "TMA"}


def _prose(text: str) -> str:
    """A markdown cell's text without code (fenced, indented or inline), link addresses, HTML tags and headings'
    '#' marks: what is read as words."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"^(?: {4}|\t).*$", " ", text, flags=re.M)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"<[^>\n]+>", " ", text)
    return text


def _cells(nb: Path) -> list[str]:
    cells = json.loads(nb.read_text())["cells"]
    return [_prose("".join(c["source"])) if c["cell_type"] == "markdown" else "" for c in cells]


def _uses(pattern: str, text: str, case: bool):
    return list(re.finditer(rf"(?<![\w-]){pattern}(?![\w-])", text, 0 if case else re.I))


def _defines(pattern: str, text: str, case: bool) -> bool:
    """The term set in emphasis: *term* or **term** (a word of it may be inside a longer emphasised phrase)."""
    flags = 0 if case else re.I
    return bool(re.search(rf"\*{{1,2}}[^*]{{0,40}}(?<![\w-]){pattern}(?![\w-])[^*]{{0,40}}\*{{1,2}}", text, flags))


def first_use(term: str) -> tuple[Path, int] | None:
    pattern, case = GLOSSARY[term], term in CASE_SENSITIVE
    for nb in NOTEBOOKS:
        for i, text in enumerate(_cells(nb)):
            if i == 0 or re.match(r"\s*#+ (?:Next|Where next)\b", text):
                continue  # the title and what you will learn, or the list of what comes next: previews
            if _uses(pattern, text, case):
                return nb, i
    return None


def test_every_glossary_term_is_defined_where_it_is_first_used():
    problems = []
    for term, pattern in GLOSSARY.items():
        found = first_use(term)
        if found is None:
            continue
        nb, cell = found
        cells = _cells(nb)
        case = term in CASE_SENSITIVE
        if not any(_defines(pattern, cells[i], case) for i in range(1, cell + 1)):
            m = _uses(pattern, cells[cell], case)[0]
            around = cells[cell][max(0, m.start() - 50):m.end() + 30].replace("\n", " ")
            problems.append(f"{term!r}: first used in {nb.name}, cell {cell} ('...{around}...'), defined no earlier "
                            f"there (set it in *emphasis* where it is explained)")
    assert not problems, "\n".join(problems)


def test_later_notebooks_say_what_to_read_first():
    """Each notebook after 00 names its prerequisites in its opening cell."""
    for nb in NOTEBOOKS[1:]:
        opening = "".join(json.loads(nb.read_text())["cells"][0]["source"])
        assert re.search(r"\*\*Before this notebook\*\*", opening), f"{nb.name}: no 'Before this notebook' line"
