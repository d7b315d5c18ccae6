"""Give every notebook its "Open in Colab" badge and its Colab install cell, from the one repository URL in
pyproject.toml's [project.urls] (a changed URL: edit it there and run this again).

    python tools/notebook_links.py            # every notebooks/NN_*.ipynb, in place
    python tools/notebook_links.py --check    # exit 1 and name the notebooks that are not up to date

The badge is the first line after the title of the first markdown cell. The install cell is the first code cell:
in Colab (``"google.colab" in sys.modules``) it clones the course, installs it with the ``cu12`` extra (Colab's
driver supports CUDA 12) and moves into its notebooks/ folder, where the notebooks find the committed benchmark
results; anywhere else it does nothing and prints nothing. Only sources and cell ids change: the other cells and
their committed outputs stay as they are (nbformat reads and writes them).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
MARK = "# Colab:"  # the install cell's first line: how the cell is recognised when it is updated


def repository() -> str:
    """The repository's URL, from pyproject.toml's [project.urls] Repository."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    return url.rstrip("/")


def colab_url(path: Path, repo: str | None = None, branch: str = "main") -> str:
    """Colab's address of a notebook of this repository (Colab opens it from GitHub)."""
    repo = repo or repository()
    slug = re.sub(r"^https?://github\.com/", "", repo)
    return f"https://colab.research.google.com/github/{slug}/blob/{branch}/{path.relative_to(ROOT).as_posix()}"


def badge(path: Path, repo: str | None = None) -> str:
    return f"[![Open in Colab]({BADGE_IMAGE})]({colab_url(path, repo)})"


def install_cell(repo: str | None = None) -> str:
    repo = repo or repository()
    return "\n".join([
        f"{MARK} fetch the course and install it with the cu12 extra (Colab's driver supports CUDA 12), then work",
        "# in its notebooks/ folder. Anywhere else this cell does nothing (docs/install.md: other ways to install).",
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        "    import importlib, os, subprocess",
        "",
        f'    REPOSITORY, COURSE = "{repo}", "/content/gpukernels"',
        "    if not os.path.isdir(COURSE):",
        '        subprocess.run(["git", "clone", "-q", "--depth", "1", REPOSITORY, COURSE], check=True)',
        '        subprocess.run([sys.executable, "-m", "pip", "install", "-q", COURSE + "[cu12]"], check=True)',
        "        importlib.invalidate_caches()",
        '    os.chdir(COURSE + "/notebooks")',
    ])


def update(nb, path: Path, repo: str | None = None) -> bool:
    """Put the badge and the install cell into ``nb`` (an nbformat notebook); returns whether anything changed."""
    import nbformat

    changed = False
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    lines = first_md.source.split("\n")
    want = badge(path, repo)
    old = [i for i, ln in enumerate(lines) if BADGE_IMAGE in ln]
    if old:
        if lines[old[0]] != want:
            lines[old[0]] = want
            changed = True
    else:
        title = next((i for i, ln in enumerate(lines) if ln.startswith("# ")), -1)
        lines[title + 1:title + 1] = ["", want]
        changed = True
    first_md.source = "\n".join(lines)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    cell_src = install_cell(repo)
    if code and nb.cells[code[0]].source.startswith(MARK):
        if nb.cells[code[0]].source != cell_src:
            nb.cells[code[0]].source = cell_src
            changed = True
    else:
        at = code[0] if code else len(nb.cells)
        nb.cells.insert(at, nbformat.v4.new_code_cell(cell_src, metadata={"tags": ["colab"]}))
        changed = True
    return changed


def main(argv=None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is not up to date")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every course notebook, notebooks/NN*_*.ipynb")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    stale = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if update(nb, path):
            stale.append(path.name)
            if not args.check:
                nbformat.write(nb, path)
    if args.check and stale:
        print(f"not up to date (run python tools/notebook_links.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    print(f"{'checked' if args.check else 'updated'}: {len(paths)} notebooks, {len(stale)} "
          f"{'stale' if args.check else 'changed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
