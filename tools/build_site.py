"""Build the course site into build/site (``make site``): the notebooks with their committed outputs, the lesson
docs (docs/*.md and their figures), the exercises' READMEs, and the classroom pages if they were built.

    python tools/build_site.py                 # -> build/site/index.html
    python tools/build_site.py --out DIR       # elsewhere (the browser test builds into a temporary folder)

Sphinx reads one source folder, and the pages live in three (notebooks/, docs/, exercises/), so they are staged --
copied, never edited -- into ``<out>-src`` beside this repository's site/conf.py, with a generated index that lists
them. Nothing is executed: the notebooks' outputs are the ones committed (site/conf.py says why Sphinx + MyST-NB).

A figure a doc links to that does not exist yet (one only a GPU run draws) becomes a note on the page saying so,
not a broken image; the build lists them.

Hook for the classroom pages: any ``build/classroom/*.html`` (and what sits beside them) is copied into the site's
``classroom/`` folder, with a link back to the course at the top of each, and a short page of the course per
classroom page puts it in the sidebar; without them the site is complete too.
Lesson notes for students: per lesson a performance page generated here from the code and the newest committed
measurement (`gpukernels.viz.notes`: the ladder's table over the lesson's VERSIONS, its figure, why each step helps,
the roofline, the peer). The engineering log, benchmarks/NOTES.md, stays in the repository and is not part of the
course.

For a projector: each figure is shown at least as large as its text needs to be 12 px on screen (`_size_figures`;
in a box of its own that scrolls when the column is narrower), and search works from a folder opened in a browser
(file://): the search page carries the text of every page (`_offline_search`) instead of fetching them.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLASSROOM = ROOT / "build" / "classroom"


def _title(path: Path) -> str:
    """The first Markdown heading of a page (a notebook's first markdown cell), else its file name."""
    if path.suffix == ".ipynb":
        import json

        cells = json.loads(path.read_text())["cells"]
        text = "".join(next((c["source"] for c in cells if c["cell_type"] == "markdown"), ""))
    else:
        text = path.read_text()
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _note_missing_figures(md: Path) -> list[str]:
    """Replace each image of a staged page whose file does not exist (a figure only a GPU run makes, not made yet)
    by a visible note, so that the page says what is missing instead of showing a broken image; returns them."""
    missing = []

    def note(m):
        if (md.parent / m.group(2)).exists() or "://" in m.group(2):
            return m.group(0)
        missing.append(f"{md.name}: {m.group(2)}")
        return f"> *Figure not generated yet: `{m.group(2)}` ({m.group(1)}).*"

    text = md.read_text()
    new = IMAGE.sub(note, text)
    if new != text:
        md.write_text(new)
    return missing


#: The "Open in Colab" badge the notebooks carry (tools/notebook_links.py) is Colab's image on GitHub and in
#: Jupyter; the site's pages show its own copy instead, so that no page fetches anything from outside (the
#: notebooks themselves, the download button's copies, keep Colab's).
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


def _local_badges(out: Path) -> None:
    """Point the built pages' Colab badges at the site's copy (``_static/colab-badge.svg``)."""
    for page in out.rglob("*.html"):
        text = page.read_text()
        if COLAB_BADGE in text:
            rel = Path(os.path.relpath(out / "_static" / "colab-badge.svg", page.parent)).as_posix()
            page.write_text(text.replace(COLAB_BADGE, rel))


def _fold_outputs(out: Path) -> int:
    """Fold, in the built notebook pages, what the committed outputs show open although the code now folds it
    (`gpukernels._tables.LONG`, `gpukernels.source.Diff`): tables of more than LONG rows, and a diff's whole
    sources -- the newer step's code and a new factory's. Outputs made by the current code are folded already and
    left alone; this only spares the site's readers the length of outputs made before, until the notebooks run
    again. Returns how many were folded."""
    from bs4 import BeautifulSoup

    from gpukernels._tables import LONG

    folded = 0
    for page in sorted((out / "notebooks").glob("*.html")):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        n = 0
        for table in soup.select("div.cell_output table"):
            rows = len(table.select("tbody tr")) or len(table.select("tr")) - 1
            box = table.find_parent("div", class_="pst-scrollable-table-container") or table
            if rows <= LONG or box.find_parent("details"):
                continue
            details = soup.new_tag("details")
            summary = soup.new_tag("summary")
            summary.string = f"{rows} rows: show the table"
            box.wrap(details)
            details.insert(0, summary)
            n += 1
        for p in soup.select("div.gk-source > p"):
            text = p.get_text()
            code = p.find_next_sibling()
            if not ("code whole:" in text or text.startswith("New in ")) or code is None \
                    or "highlight" not in (code.get("class") or []) or p.find_parent("details"):
                continue
            lines = len(code.get_text().splitlines())
            details = soup.new_tag("details", style="margin: 0.2em 0")
            summary = soup.new_tag("summary", style="cursor: pointer")
            summary.extend(list(p.contents))
            if summary.contents and isinstance(summary.contents[-1], str):
                summary.contents[-1].replace_with(summary.contents[-1].rstrip().rstrip(":."))
            summary.append(f" ({lines} lines)")
            p.replace_with(details)
            details.append(summary)
            details.append(code.extract())
            n += 1
        if n:
            page.write_text(str(soup))
            folded += n
    return folded


def _rooms(classroom: Path) -> list[Path]:
    """The classroom pages in the course's order (``gpukernels.LESSONS``: matmul, softmax, cbr, tensor_core,
    attention, as the notebooks teach them), any other page after them by name."""
    if not classroom.is_dir():
        return []
    try:
        from gpukernels import LESSONS

        order = list(LESSONS)
    except Exception:  # the site builds without the package too: then by name
        order = []
    return sorted(classroom.glob("*.html"),
                  key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.name))


#: Put at the top of each classroom page the site serves: the way back to the course, and what the page is.
BACK_LINK = ('<nav style="font: 18px/1.4 sans-serif; padding: 6px 20px; background: #eef2f7; '
             'border-bottom: 1px solid #99a">'
             '<a href="../index.html" target="_top">&larr; gpukernels course</a> &middot; '
             '<a href="../docs/classroom.html" target="_top">how to use this page</a></nav>')


def _classroom_pages(classroom: Path, extra: Path, src: Path) -> list[Path]:
    """Copy the classroom pages into the site (``classroom/NAME.html``, each with a link back to the course at its
    top), and write for each a short page of the course (``classroom/NAME-page.md``) that says what it is and opens
    it: those are the sidebar's entries and have previous / next links like every page. Returns the short pages."""
    rooms = _rooms(classroom)
    if not rooms:
        return []
    shutil.copytree(classroom, extra / "classroom")
    (src / "classroom").mkdir()
    stubs = []
    for room in rooms:
        page = extra / "classroom" / room.name
        text = page.read_text()
        text = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + BACK_LINK, text, count=1)
        page.write_text(text)
        m = re.search(r"<title>(.*?)</title>", text, re.S)
        what = html.unescape(m.group(1)).strip() if m else room.stem
        stub = src / "classroom" / f"{room.stem}-page.md"
        stub.write_text("\n".join([
            f"# Classroom page: {room.stem}", "",
            f"*{what}*: one kernel beside another, traced on the simulator, to step through on a projector -- "
            "every block, warp access and barrier phase, with the tracer's counts. One self-contained HTML file: "
            "it works offline, from a USB stick too.", "",
            f'<p><a class="btn btn-primary" href="{room.name}">Open the {room.stem} classroom page</a></p>', "",
            f"Make it yourself with `gpukernels demo {room.stem} --html {room.name}` (or `make classroom` for every "
            "lesson); press `p` on the page for presenter mode. The keys and what each count means: "
            "[Classroom demos](../docs/classroom.md).", ""]))
        stubs.append(stub.relative_to(src))
    return stubs


def _performance_pages(folder: Path, src: Path) -> list[Path]:
    """Write each lesson's performance page for students (`gpukernels.viz.notes.lesson_page`), in the course's
    order; returns them relative to ``src``."""
    import gpukernels
    from gpukernels.viz.notes import lesson_page
    from gpukernels.viz.performance import load_bench

    folder.mkdir(parents=True, exist_ok=True)
    report = load_bench()
    out = []
    for lesson in gpukernels.LESSONS:
        page = folder / f"{lesson}.md"
        page.write_text(lesson_page(lesson, report, figures="../figures"))
        out.append(page.relative_to(src))
    return out


#: How large a figure is shown: its text is sized (`gpukernels.viz._common.text_pt`) to be LEAST_PX tall when the
#: PNG is shown min(its width, DISPLAY_PX) wide; the site shows it FIGURE_PX / LEAST_PX times that, so that no text of
#: it is under FIGURE_PX on screen.
FIGURE_PX = 12


def _size_figures(out: Path) -> int:
    """Set the width of every figure of the built pages (a notebook's output, a doc's image) so that its smallest
    text is FIGURE_PX on screen, in a box that scrolls sideways where the column is narrower. Returns how many."""
    from bs4 import BeautifulSoup
    from PIL import Image

    from gpukernels.viz._common import DISPLAY_PX, LEAST_PX

    n = 0
    for page in sorted(out.rglob("*.html")):
        if "_static" in page.parts or "_sources" in page.parts or page.parent.name == "classroom":
            continue
        text = page.read_text()
        if "<img" not in text:
            continue
        soup = BeautifulSoup(text, "html.parser")
        changed = False
        for img in soup.select("article img, [role=main] img"):
            srcpath = (page.parent / img.get("src", "")).resolve()
            if not srcpath.is_file() or srcpath.suffix.lower() != ".png" or img.find_parent("a", class_="reference external"):
                continue
            with Image.open(srcpath) as im:
                width = im.size[0]
            if width < 300:  # an icon or a badge, not a figure
                continue
            shown = round(min(width, DISPLAY_PX) * FIGURE_PX / LEAST_PX)
            img["style"] = f"width: {shown}px; max-width: none; height: auto"
            img["class"] = (img.get("class") or []) + ["gk-figure"]
            box = img.find_parent("div", class_="gk-figure-box")
            if box is None:
                box = soup.new_tag("div", attrs={"class": "gk-figure-box"})
                img.wrap(box)
            n += 1
            changed = True
        if changed:
            page.write_text(str(soup))
    return n


#: Put on the search page: the text of every page, and a fetch() that answers from it, so that search shows its
#: snippets from a folder opened in a browser (file://), where the page's own fetch of each result is refused.
SEARCH_SHIM = """<script>
(function () {
  const pages = window.GK_PAGES || {};
  const real = window.fetch ? window.fetch.bind(window) : null;
  window.fetch = function (url, opts) {
    const abs = new URL(String(url), location.href).href.split("#")[0];
    for (const [key, html] of Object.entries(pages))
      if (new URL(key, location.href).href === abs) return Promise.resolve(new Response(html, {status: 200}));
    return real ? real(url, opts) : Promise.reject(new Error("no fetch"));
  };
})();
</script>"""


def _offline_search(out: Path) -> int:
    """Write _static/gk-pages.js (the main text of every page, by the path search asks for) and load it and the shim
    on search.html before Sphinx's search script. Returns how many pages it holds."""
    import json

    from bs4 import BeautifulSoup

    search = out / "search.html"
    if not search.is_file():
        return 0
    pages = {}
    for page in sorted(out.rglob("*.html")):
        rel = page.relative_to(out).as_posix()
        if rel.startswith(("_static/", "_sources/")) or rel in ("search.html", "genindex.html") \
                or (page.parent.name == "classroom" and not page.stem.endswith("-page")):
            continue
        soup = BeautifulSoup(page.read_text(), "html.parser")
        main = soup.find(attrs={"role": "main"})
        if main is None:
            continue
        for tag in main.find_all(["img", "iframe", "script", "style", "svg", "nav", "details"]):
            if tag.name == "details":
                tag.unwrap()
            else:
                tag.decompose()
        for tag in main.find_all(True):
            if tag.name in ("section",) or tag.get("id"):
                tag.attrs = {"id": tag["id"]} if tag.get("id") else {}
            else:
                tag.unwrap()
        pages[rel] = f'<div role="main">{main.decode_contents()}</div>'
    (out / "_static" / "gk-pages.js").write_text("window.GK_PAGES = " + json.dumps(pages, separators=(",", ":")) + ";\n")
    text = search.read_text()
    anchor = '<script src="_static/searchtools.js'
    if anchor in text and "gk-pages.js" not in text:
        text = text.replace(anchor, '<script src="_static/gk-pages.js"></script>\n' + SEARCH_SHIM + "\n" + anchor, 1)
        search.write_text(text)
    return len(pages)


HINT = re.compile(r"^(\d+)\.\s+(.*)")


def _collapsible_hints(md: Path) -> int:
    """Fold each hint of a staged exercise README into an HTML <details> ("Hint 1", "Hint 2", ... under each gate's
    heading), so that a student opens one at a time, least help first, as `gpukernels grade --hints N` shows them.
    Only the site's copy changes: the README itself keeps the plain numbered lists the grader reads its hints from
    (`gpukernels.grade.spec.readme_hints`). Returns how many hints were folded."""
    out, hint, n, in_hints = [], [], 0, False

    def flush():
        nonlocal n
        if hint:
            number, first = hint[0]
            body = [first] + [line.strip() for line in hint[1:]]
            if out and out[-1]:
                out.append("")
            out.extend([f'<details class="gk-hint"><summary>Hint {number}</summary>', "", *body, "", "</details>", ""])
            hint.clear()
            n += 1

    for line in md.read_text().splitlines():
        if line.startswith("## "):
            flush()
            in_hints = line[3:].strip().lower() == "hints"
            out.append(line)
        elif in_hints and HINT.match(line):
            flush()
            m = HINT.match(line)
            hint.append((m.group(1), m.group(2)))
        elif in_hints and hint and line.strip() and not line.startswith("#"):
            hint.append(line)  # a wrapped line of the hint
        else:
            flush()
            if line.strip() or (out and out[-1]):  # no second blank line after a folded hint
                out.append(line)
    flush()
    md.write_text("\n".join(out) + "\n")
    return n


def stage(src: Path, classroom: Path = CLASSROOM) -> dict:
    """Copy the pages into ``src`` and write its index.md; returns {section: [staged paths]}."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy(ROOT / "site" / "conf.py", src / "conf.py")
    shutil.copy(ROOT / "site" / "favicon.svg", src / "favicon.svg")
    shutil.copy(ROOT / "pyproject.toml", src / "pyproject.toml")  # conf.py reads the repository's URL from it
    shutil.copytree(ROOT / "site" / "_static", src / "_static", dirs_exist_ok=True)
    pages = {"Start": [], "Notebooks": [], "Lesson notes": [], "Exercises": [], "Classroom pages": []}
    (src / "notebooks").mkdir()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        shutil.copy(nb, src / "notebooks" / nb.name)
        pages["Notebooks"].append(Path("notebooks") / nb.name)
    shutil.copytree(ROOT / "docs", src / "docs", ignore=shutil.ignore_patterns("site"))
    for doc in sorted((src / "docs").glob("*.md")):
        pages["Start" if doc.name == "install.md" else "Lesson notes"].append(doc.relative_to(src))
    pages["Lesson notes"][:0] = _performance_pages(src / "docs" / "performance", src)
    missing = [m for md in sorted((src / "docs").rglob("*.md")) for m in _note_missing_figures(md)]
    for readme in [ROOT / "exercises" / "README.md"] + sorted((ROOT / "exercises").glob("[0-9][0-9]_*/README.md")):
        dest = src / readme.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(readme, dest)
        _collapsible_hints(dest)
        pages["Exercises"].append(dest.relative_to(src))
    extra = src / "_extra"
    extra.mkdir()
    pages["Classroom pages"] = _classroom_pages(classroom, extra, src)
    rooms = _rooms(classroom) if pages["Classroom pages"] else []
    lines = ["# gpukernels: a Numba CUDA course", "",
             "Kernels from naive to near-cuBLAS, each step one idea, with its code, what the tracer counts and what "
             "an H200 measured. The notebooks are shown with the outputs they were committed with (the first "
             "output of each says where and when it ran); run them yourself -- [Install and run](docs/install.md) "
             "says how, on a laptop without a GPU or in Colab.", "",
             "New here? Install, then read the notebooks in order, from "
             "[00 · Start here](notebooks/00_start_here.ipynb) to 06 (attention), with the previous / next links "
             "under each page; the exercises a notebook points to are graded by `gpukernels grade`.", ""]
    for section, paths in pages.items():
        if not paths:
            continue
        lines += [f"## {section}", ""]
        if section == "Classroom pages":  # the pages themselves: static files Sphinx does not parse
            lines += [f'* <a href="classroom/{p.name}">{p.stem}</a>: the interactive page '
                      f"([what it shows](classroom/{p.stem}-page.md))" for p in rooms]
        else:
            lines += [f"* [{_title(src / p)}]({p.as_posix()})" for p in paths]
        lines += ["", "```{toctree}", ":hidden:", f":caption: {section}", ""] + [p.with_suffix("").as_posix()
                                                                                    for p in paths] + ["```", ""]
    (src / "index.md").write_text("\n".join(lines))
    pages["Classroom"] = [Path("classroom") / p.name for p in rooms]
    pages["missing figures"] = missing
    return pages


def build(out: Path, classroom: Path = CLASSROOM, quiet: bool = True) -> dict:
    """Stage and build; raises CalledProcessError (Sphinx's output in it) if Sphinx fails. Returns the pages."""
    src = out.parent / (out.name + "-src")
    pages = stage(src, classroom)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-j", "1", "-E", str(src), str(out)] + (["-q"] if quiet else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    _local_badges(out)
    pages["folded"] = _fold_outputs(out)
    pages["figures sized"] = _size_figures(out)
    pages["searchable offline"] = _offline_search(out)
    pages["warnings"] = [ln for ln in proc.stderr.splitlines() if "WARNING" in ln]
    return pages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site", help="output folder (default %(default)s)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        pages = build(args.out.resolve(), quiet=False)
    except subprocess.CalledProcessError as err:
        print(err.stdout, err.stderr, sep="\n", file=sys.stderr)
        print(f"build_site: Sphinx failed (exit {err.returncode})", file=sys.stderr)
        return 1
    for w in pages.pop("warnings"):
        print(w, file=sys.stderr)
    pages.pop("figures sized")
    pages.pop("searchable offline")
    folded = pages.pop("folded")
    if folded:
        print(f"build_site: {folded} long tables and whole sources of outputs made before they were folded, folded")
    for m in pages.pop("missing figures"):
        print(f"build_site: figure not generated yet, shown as a note: {m}", file=sys.stderr)
    n = sum(len(v) for v in pages.values())  # pages of the site
    print(f"site: {n} pages in {time.perf_counter() - start:.0f} s -> {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
