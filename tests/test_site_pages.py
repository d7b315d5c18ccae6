"""Every page of the course site reads at a laptop's 1280 x 720 and a projector's 1920 x 1080: the page itself never
scrolls sideways (a code block or a table may scroll inside its own box), every link to a page or file of the site
and every image resolves, and no visible text is smaller than MIN_FONT_PX.

The site is built once (tools/build_site.py, a few seconds; without `make classroom`'s pages the same build as
tests/test_site.py's, tests/_site.py), with the classroom pages of build/classroom if `make classroom` made them
(else a stand-in), and served on localhost. The
classroom pages themselves are another test's (tests/test_classroom_page.py): they are not opened here, but every
link to them must resolve.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from ._site import GROUP as SITE_GROUP, built_site

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

pytestmark = [pytest.mark.needs_browser,
              pytest.mark.skipif(importlib.util.find_spec("myst_nb") is None,
                                 reason="needs sphinx and myst-nb (pip install -e '.[dev]')"),
              SITE_GROUP]  # one worker, one build for the three site modules (tests/_site.py)

SIZES = [(1280, 720), (1920, 1080)]
MIN_FONT_PX = 10.0

#: What one page says about itself, in the browser: sideways scrolling, links and images, and visible text too small
#: to read. Text counts as visible when its element has a box on the page (not in a closed <details>, not in a
#: sidebar the narrow layout has put away: checkVisibility) and is not clipped to nothing (a screen reader's label).
PROBE = """
const doc = document.documentElement;
const small = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const seen = new Set();
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const el = node.parentElement;
  if (!el || seen.has(el) || !node.textContent.trim()) continue;
  seen.add(el);
  if (el.closest('script, style, noscript, template')) continue;
  if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
  const r = el.getBoundingClientRect();
  if (r.width < 2 || r.height < 2) continue;
  const px = parseFloat(getComputedStyle(el).fontSize);
  if (px < arguments[0]) small.push([el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : ''),
                                     px, node.textContent.trim().slice(0, 40)]);
}
return {
  scrollWidth: doc.scrollWidth, innerWidth: window.innerWidth,
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  sources: Array.from(document.querySelectorAll('img[src], script[src], link[href][rel~="stylesheet"], link[href][rel~="icon"]'))
             .map(e => e.src || e.href),
  images: Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]),
  small: small,
};
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # build/classroom's pages where `make classroom` made them; else a stand-in, so that the links are checked --
    # then the very build test_site.py and test_site_student.py read (tests/_site.py)
    return built_site(tmp_path_factory, real_classroom=True)[0]


@pytest.fixture(scope="module")
def served(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pages(out: Path) -> list[str]:
    """Every page of the site, as paths under it, but the classroom pages themselves (their short pages in the
    course, classroom/NAME-page.html, are pages of the site like the others)."""
    rooms = {p.name for p in (out / "classroom").glob("*.html") if not p.stem.endswith("-page")} \
        if (out / "classroom").is_dir() else set()
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html")
                  if "_static" not in p.parts and "_sources" not in p.parts
                  and not (p.parent.name == "classroom" and p.name in rooms))


def _settle(driver, seconds: float = 20.0) -> None:
    ready = "return document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)"
    deadline = time.monotonic() + seconds
    while not driver.execute_script(ready) and time.monotonic() < deadline:
        time.sleep(0.1)


def _local_target(out: Path, url: str, host: str):
    """The file under ``out`` that a URL of the served site names (None for another site or a data: URL)."""
    u = urlparse(url)
    if u.scheme not in ("http", "https") or u.netloc != host:
        return None, u
    target = out / unquote(u.path).lstrip("/")
    return (target / "index.html" if target.is_dir() else target), u


def test_every_page_reads_at_both_sizes(site, served, browser):
    out, host = site, urlparse(served).netloc
    names = pages(out)
    assert len(names) >= 25 and "index.html" in names and "docs/install.html" in names, names
    problems = []
    anchors: dict = {}
    try:
        for width, height in SIZES:
            browser.set_window_size(width, height)
            for name in names:
                browser.get(f"{served}/{name}")
                _settle(browser)
                # the window's inner width is what the page has: the scrollbar of a long page is part of it
                seen = browser.execute_script(PROBE, MIN_FONT_PX)
                at = f"{name} at {width}x{height}"
                if seen["scrollWidth"] > seen["innerWidth"]:
                    problems.append(f"{at}: the page scrolls sideways ({seen['scrollWidth']} px wide in "
                                    f"{seen['innerWidth']})")
                problems += [f"{at}: image {src} did not load" for src, done, w in seen["images"] if not (done and w)]
                problems += [f"{at}: text of {px:g} px in <{tag}>: {text!r}" for tag, px, text in seen["small"][:5]]
                if width != SIZES[0][0]:
                    continue  # links and files are the same at every size
                for url in seen["links"] + seen["sources"]:
                    target, u = _local_target(out, url, host)
                    if target is None:
                        continue
                    if not target.is_file():
                        problems.append(f"{name}: link to {u.path} does not resolve")
                    elif u.fragment and target.suffix == ".html":
                        ids = anchors.setdefault(target, target.read_text())
                        if f'id="{u.fragment}"' not in ids:
                            problems.append(f"{name}: link to {u.path}#{u.fragment}: no such anchor")
    finally:
        browser.set_window_size(1920, 1080)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def test_the_classroom_pages_are_in_the_course(site):
    """Each classroom page has a page of the course (in the sidebar, with previous / next) that opens it, and the
    classroom page itself links back to the course."""
    rooms = sorted(p for p in (site / "classroom").glob("*.html") if not p.stem.endswith("-page"))
    assert rooms
    index = (site / "index.html").read_text()
    for room in rooms:
        stub = site / "classroom" / f"{room.stem}-page.html"
        assert stub.is_file() and f'href="{room.name}"' in stub.read_text(), stub
        assert f"classroom/{room.stem}-page.html" in index  # the sidebar's entry
        assert 'href="../index.html"' in room.read_text()  # the way back
