"""The course site: `make site` builds it from the committed notebooks and docs without running a kernel,
and every page works in a real browser -- images load, the code is highlighted, internal links resolve, nothing is
logged to the console. One build per test session (a few seconds), into a temporary folder, served on localhost
as a web server would serve it (the classroom pages themselves are also opened from file://, in
test_classroom_page.py, as from a USB stick)."""

from __future__ import annotations

import functools
import json
import re
import http.server
import importlib.util
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from . import browser as _browser
from ._site import GROUP as SITE_GROUP, built_site

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

# the long tier: a build of the whole site (10 s); .ci/run builds it again with `make site`
pytestmark = [pytest.mark.skipif(importlib.util.find_spec("myst_nb") is None,
                                 reason="needs sphinx and myst-nb (pip install -e '.[dev]')"), pytest.mark.slow,
              SITE_GROUP]  # one worker, one build for the three site modules (tests/_site.py)
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
BUILD_LIMIT = 60  # seconds: the site is built from committed outputs, so a slow build means something runs


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(output folder, pages, build seconds) of one build, with a stand-in classroom page for the hook: the build
    tests/_site.py shares with test_site_pages.py and test_site_student.py."""
    return built_site(tmp_path_factory)


def test_the_build_is_quick_and_clean(site):
    out, pages, seconds = site
    assert seconds < BUILD_LIMIT, f"the site took {seconds:.0f} s to build"
    assert not pages["warnings"], "\n".join(pages["warnings"])  # a broken reference or a missing image warns
    # one copy of each notebook, the download button's (_sources/), and no other
    copies = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.ipynb"))
    assert copies == [f"_sources/notebooks/{stem}.ipynb" for stem in NOTEBOOKS], copies
    for missing in pages["missing figures"]:  # a figure only a GPU run draws, not drawn yet: a note, not a hole
        page, path = missing.split(": ")
        assert "Figure not generated yet" in (out / "docs" / page.replace(".md", ".html")).read_text(), missing


def test_the_index_lists_every_page(site):
    out, pages, _ = site
    index = (out / "index.html").read_text()
    for stem in NOTEBOOKS:
        assert f'href="notebooks/{stem}.html"' in index, stem
    for readme in sorted((ROOT / "exercises").glob("[0-9][0-9]_*/README.md")):
        assert f'href="exercises/{readme.parent.name}/README.html"' in index, readme
    # the lesson notes: a performance page per lesson; the engineering log (benchmarks/NOTES.md) is not the course's
    assert 'href="docs/gallery.html"' in index and "NOTES" not in index
    for lesson in ("matmul", "softmax", "cbr", "tensor_core", "attention"):
        assert f'href="docs/performance/{lesson}.html"' in index, lesson
    # the classroom hook: pages found in the classroom folder are copied as they are and linked
    assert 'href="classroom/matmul.html"' in index and (out / "classroom" / "matmul.html").is_file()


def test_nothing_is_fetched_from_outside(site):
    out, _, _ = site
    for page in out.rglob("*.html"):
        text = page.read_text()
        for attr in ('src="http', "src='http", 'href="http://', "<link rel=\"stylesheet\" href=\"http"):
            assert attr not in text, f"{page.relative_to(out)} loads something from the network ({attr})"


def _pages(out: Path) -> list[Path]:
    skip = {"genindex.html", "search.html"}
    return sorted(p for p in out.rglob("*.html") if p.name not in skip and "_static" not in p.parts)


def _settle(driver, seconds: float = 20.0) -> None:
    """Wait until the page and its images have finished loading (a long notebook page on a busy machine may still
    be decoding when get() returns); a page that never settles is then judged as it stands."""
    ready = "return document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)"
    deadline = time.monotonic() + seconds
    while not driver.execute_script(ready) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture(scope="module")
def served(site):
    """The built site on http://127.0.0.1:PORT (a thread of http.server, quiet), for the module's tests."""
    out = site[0]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _markdown_tables(path: Path) -> int:
    """How many text/markdown outputs of a committed notebook hold a Markdown table."""
    nb = json.loads((ROOT / path).read_text())
    return sum(1 for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
               if re.search(r"^\|[-| ]+\|$", "".join(o.get("data", {}).get("text/markdown", "")), re.M))


@pytest.mark.needs_browser
def test_every_page_in_a_browser(site, served, browser):
    out, _, _ = site
    problems = []
    pages = _pages(out)
    assert len(pages) >= len(NOTEBOOKS) + 10, [p.name for p in pages]
    host = urlparse(served).netloc
    for page in pages:
        name = page.relative_to(out).as_posix()
        browser.get(f"{served}/{name}")
        _settle(browser)
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])")
        problems += [f"{name}: image {src} did not load" for src, ok in images if not ok]
        for href in browser.execute_script("return Array.from(document.links).map(a => a.href)"):
            url = urlparse(href)
            if url.scheme == "http" and url.netloc == host:  # a page of the site: its file under the build
                target = out / unquote(url.path).lstrip("/")
                if target.is_dir():
                    target = target / "index.html"
                if not target.exists():
                    problems.append(f"{name}: link to {target} does not resolve")
                elif url.fragment and target.suffix == ".html" and f'id="{url.fragment}"' not in target.read_text():
                    problems.append(f"{name}: link to {target.name}#{url.fragment}: no such anchor")
        if name.startswith("notebooks/"):
            stem = Path(name).stem
            if not [src for src, ok in images if ok]:
                problems.append(f"{name}: no figure rendered")
            # the notebook's own code cells, highlighted by Sphinx (pygments classes) ...
            if not browser.execute_script("return document.querySelectorAll('div.highlight span.k, "
                                          "div.highlight span.kn').length"):
                problems.append(f"{name}: code cells not highlighted")
            # every Markdown table a cell printed (gpukernels.notebook.Table) is an HTML table, not lines of pipes
            want = _markdown_tables(Path("notebooks") / f"{stem}.ipynb")
            got = browser.execute_script("return document.querySelectorAll('div.output table, div.cell_output table')"
                                         ".length")
            raw = browser.execute_script("return /\\|\\s*(-{3,}|\u2014)\\s*\\|/.test(document.body.innerText)")
            if got < want or raw:
                problems.append(f"{name}: {want} Markdown tables in the notebook's outputs, {got} rendered as tables"
                                + ("; raw '|---|' text on the page" if raw else ""))
            # ... and the lessons' source shown by gpukernels.source, highlighted inline
            if stem in ("01_matmul", "01b_matmul_ladder", "02_softmax", "03_fused_cbr"):
                shown = browser.execute_script("return document.querySelectorAll('div.gk-source span[style]').length")
                if shown < 100:
                    problems.append(f"{name}: the steps' source is not shown highlighted ({shown} spans)")
        problems += [f"{name}: console: {m}" for m in _browser.console_errors(browser)]
    assert not problems, "\n".join(problems[:30])


@pytest.mark.needs_browser
def test_sidebar_code_is_readable_on_a_narrow_screen(site, served, browser):
    """Code in the sidebars' links (a heading naming cuda.syncthreads(), in the page's table of contents) once kept
    its own grey box and dark text there (alabaster's dark narrow-screen sidebar made it unreadable). It takes the
    link's own colour, on a transparent box."""
    browser.set_window_size(900, 1000)
    try:
        browser.get(f"{served}/notebooks/01_matmul.html")
        _settle(browser)
        found = browser.execute_script("""
            return Array.from(document.querySelectorAll('.bd-sidebar a code, .bd-sidebar-secondary a code')).map(c => {
                const s = getComputedStyle(c), a = getComputedStyle(c.closest('a'));
                return [c.textContent, s.color === a.color, s.backgroundColor];
            });""")
    finally:
        browser.set_window_size(1920, 1080)
    assert found, "no code in the sidebar's links of 01_matmul (the check would prove nothing)"
    bad = [(text, bg) for text, same, bg in found if not same or bg not in ("rgba(0, 0, 0, 0)", "transparent")]
    assert not bad, bad
