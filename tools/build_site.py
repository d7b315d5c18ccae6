"""Build the course site into build/site (``make site``): the notebooks with their committed outputs, the lesson
docs (docs/*.md and their figures), the exercises' READMEs, and the classroom pages if they were built.

    python tools/build_site.py                 # -> build/site/index.html
    python tools/build_site.py --out DIR       # elsewhere (the browser test builds into a temporary folder)

Sphinx reads one source folder, and the pages live in three (notebooks/, docs/, exercises/), so they are staged --
copied, never edited -- into ``<out>-src`` beside this repository's site/conf.py, with a generated index that lists
them. Nothing is executed: the notebooks' outputs are the ones committed (site/conf.py says why Sphinx + MyST-NB).

A figure a doc links to that does not exist yet (one only a GPU run draws) becomes a note on the page saying so,
not a broken image; the build lists them.

Hook for the classroom pages (issue 20): any ``build/classroom/*.html`` (and what sits beside them) is copied into
the site's ``classroom/`` folder as it is, and the index links each one; without them the site is complete too.
The other pages: benchmarks/NOTES.md, which the notebooks cite for the profiler's view of every step.
"""

from __future__ import annotations

import argparse
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


def stage(src: Path, classroom: Path = CLASSROOM) -> dict:
    """Copy the pages into ``src`` and write its index.md; returns {section: [staged paths]}."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy(ROOT / "site" / "conf.py", src / "conf.py")
    shutil.copy(ROOT / "site" / "favicon.svg", src / "favicon.svg")
    shutil.copytree(ROOT / "site" / "_static", src / "_static", dirs_exist_ok=True)
    pages = {"Notebooks": [], "Lesson notes": [], "Exercises": []}
    (src / "notebooks").mkdir()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        shutil.copy(nb, src / "notebooks" / nb.name)
        pages["Notebooks"].append(Path("notebooks") / nb.name)
    shutil.copytree(ROOT / "docs", src / "docs", ignore=shutil.ignore_patterns("site"))
    pages["Lesson notes"] += [p.relative_to(src) for p in sorted((src / "docs").glob("*.md"))]
    missing = [m for md in sorted((src / "docs").glob("*.md")) for m in _note_missing_figures(md)]
    # Each prediction beside its measurement and why they differ: the notebooks cite it at every step
    (src / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "NOTES.md", src / "benchmarks" / "NOTES.md")
    pages["Lesson notes"].append(Path("benchmarks") / "NOTES.md")
    for readme in [ROOT / "exercises" / "README.md"] + sorted((ROOT / "exercises").glob("[0-9][0-9]_*/README.md")):
        dest = src / readme.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(readme, dest)
        pages["Exercises"].append(dest.relative_to(src))
    extra = src / "_extra"
    extra.mkdir()
    rooms = sorted(classroom.glob("*.html")) if classroom.is_dir() else []
    if rooms:
        shutil.copytree(classroom, extra / "classroom")
    lines = ["# gpukernels: a Numba CUDA course", "",
             "Kernels from naive to near-cuBLAS, each step one idea, with its code, what the tracer counts and what "
             "an H200 measured. The notebooks are shown with the outputs they were committed with (the first "
             "output of each says where and when it ran); run them yourself with `make notebooks`.", ""]
    for section, paths in pages.items():
        lines += [f"## {section}", ""]
        lines += [f"* [{_title(src / p)}]({p.as_posix()})" for p in paths]
        lines += ["", "```{toctree}", ":hidden:", f":caption: {section}", ""] + [p.with_suffix("").as_posix()
                                                                                    for p in paths] + ["```", ""]
    if rooms:  # static pages Sphinx does not parse: plain links (html_extra_path copies them)
        lines += ["## Classroom pages", ""] + [f'* <a href="classroom/{p.name}">{p.stem}</a>' for p in rooms] + [""]
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
    for m in pages.pop("missing figures"):
        print(f"build_site: figure not generated yet, shown as a note: {m}", file=sys.stderr)
    n = sum(len(v) for v in pages.values())  # pages of the site
    print(f"site: {n} pages in {time.perf_counter() - start:.0f} s -> {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
