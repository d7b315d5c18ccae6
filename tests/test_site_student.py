"""The course site as a student reads it, from a folder opened in the browser (file://, no server) on a projector's
1280 x 720 and on a 4K screen: no path of the machine the notebooks ran on, figures whose text is 12 px or more,
code that fits its column, wide tables that scroll in their own box with their first column kept in view, lines of
readable length at 4K, a right-hand contents that cuts no entry, and search that finds and quotes pages.

Long tier (needs_browser): the site is built once (tools/build_site.py) with a stand-in classroom page, the build
tests/test_site.py and tests/test_site_pages.py read too (tests/_site.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from . import browser as _browser
from ._site import GROUP as SITE_GROUP, built_site

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

pytestmark = [pytest.mark.needs_browser, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("myst_nb") is None,
                                 reason="needs sphinx and myst-nb (pip install -e '.[dev]')"),
              SITE_GROUP]  # one worker, one build for the three site modules (tests/_site.py)

#: An absolute path of a machine: this repository's, or any absolute POSIX or Windows path to a .py file
MACHINE_PATH = re.compile(re.escape(str(ROOT)) + r"|(?<![\w./:])/(?:[\w.+-]+/)+[\w.+-]+\.py\b|\b[A-Za-z]:\\[^\s\"'<>]+\.py\b")
PROJECTOR = (1280, 720)
FIGURE_PX = 12  # the least text size of a figure as shown


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return built_site(tmp_path_factory)[0]  # shared with test_site.py and test_site_pages.py (tests/_site.py)


@contextlib.contextmanager
def _plain_chromium(width: int, height: int):
    """Chromium as a student's is: without --allow-file-access-from-files (tests/browser.py's driver has it), so
    that a page opened from disk may not fetch another file."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _browser._binary()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def student():
    with _plain_chromium(*PROJECTOR) as driver:
        yield driver


def _resize(driver, width, height):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


def _open(driver, url):
    driver.get(url)
    ready = "return document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)"
    deadline = time.monotonic() + 20
    while not driver.execute_script(ready) and time.monotonic() < deadline:
        time.sleep(0.1)


def _lesson_pages(site: Path) -> list[Path]:
    return sorted(site.glob("notebooks/*.html")) + sorted(site.glob("docs/**/*.html"))


def test_no_machine_path_in_any_page(site, student):
    """Item 1: the notebooks' outputs -- the classroom page each embeds (an iframe's srcdoc), traces, reports -- name
    files relative to the package or the repository, never by a path of the machine they ran on."""
    import html

    problems = []
    for page in _lesson_pages(site):
        raw = html.unescape(html.unescape(page.read_text()))  # an iframe's srcdoc is escaped once more
        for m in list(MACHINE_PATH.finditer(raw))[:3]:
            problems.append(f"{page.relative_to(site)}: {m.group(0)!r}")
    for page in sorted(site.glob("notebooks/*.html")):
        _open(student, page.as_uri())
        text = student.execute_script("return document.body.innerText")
        problems += [f"{page.relative_to(site)} shows {m.group(0)!r}" for m in list(MACHINE_PATH.finditer(text))[:3]]
    assert not problems, "\n".join(problems[:30])


#: What a page shows a projector's audience: figures' least text as drawn (the viz figures' text is LEAST_PX tall
#: at min(their width, DISPLAY_PX): gpukernels.viz._common), code boxes that scroll sideways, tables wider than their
#: box that do not scroll in it or lose their first column, the page scrolling sideways, embedded classroom pages
#: taller than the window, and contents entries cut off.
PROBE = """
const [least, display, figurePx] = arguments;
const out = [];
const doc = document.documentElement;
if (doc.scrollWidth > window.innerWidth) out.push(`the page scrolls sideways: ${doc.scrollWidth} in ${window.innerWidth}`);
for (const img of document.querySelectorAll('article img, [role=main] img')) {
  if (!img.checkVisibility() || img.naturalWidth < 300) continue;  // an icon, or inside a closed fold
  const shown = img.getBoundingClientRect().width, px = least * shown / Math.min(img.naturalWidth, display);
  if (px < figurePx - 0.05) out.push(`figure ${img.getAttribute('src').slice(-40)}: text of ${px.toFixed(1)} px`);
}
for (const pre of document.querySelectorAll('div.cell_input pre, div.cell_output div.highlight pre')) {
  if (!pre.checkVisibility()) continue;
  if (pre.scrollWidth > pre.clientWidth + 1) out.push(`code scrolls sideways: ${pre.textContent.trim().slice(0, 50)}`);
}
for (const table of document.querySelectorAll('article table')) {
  if (!table.checkVisibility()) continue;
  const box = table.parentElement, r = table.getBoundingClientRect();
  if (r.width <= box.clientWidth + 1) continue;
  let scroller = null;
  for (let p = table.parentElement; p && p !== document.body; p = p.parentElement)
    if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) { scroller = p; break; }
  if (!scroller) out.push(`a table ${r.width} px wide does not scroll in a box of its own`);
  const first = table.querySelector('tbody td, tbody th');
  if (first && getComputedStyle(first).position !== 'sticky')
    out.push(`a table wider than its box (${table.innerText.trim().slice(0, 40)}) scrolls its first column away`);
}
for (const frame of document.querySelectorAll('iframe')) {
  const h = frame.getBoundingClientRect().height;
  if (h > window.innerHeight * 0.9) out.push(`an embedded page ${h} px tall in a window of ${window.innerHeight}`);
}
const toc = document.querySelector('.bd-sidebar-secondary');
if (toc && toc.checkVisibility())
  for (const a of toc.querySelectorAll('a'))
    if (a.checkVisibility() && a.scrollWidth > a.clientWidth + 1) out.push(`contents entry cut: ${a.textContent.trim()}`);
return out;
"""


def test_pages_read_on_a_projector(site, student):
    """Item 6 at 1280 x 720: figure text >= 12 px, code fits (wraps), wide tables scroll in their box with their
    first column kept, embedded classroom pages no taller than the window, no contents entry cut off."""
    from gpukernels.viz._common import DISPLAY_PX, LEAST_PX

    _resize(student, *PROJECTOR)
    problems = []
    for page in _lesson_pages(site):
        _open(student, page.as_uri())
        problems += [f"{page.relative_to(site)}: {p}"
                     for p in student.execute_script(PROBE, LEAST_PX, DISPLAY_PX, FIGURE_PX)[:4]]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def test_lines_have_a_readable_length_at_4k(site, student):
    """Item 6 at 3840 x 2160: the content is capped, so that a line of text does not run 3,000 px."""
    try:
        _resize(student, 3840, 2160)
        for name in ("notebooks/02_softmax.html", "docs/performance/matmul.html", "docs/install.html"):
            _open(student, (site / name).as_uri())
            widest = student.execute_script(
                "return Math.max(...Array.from(document.querySelectorAll('article p')).filter(p => p.checkVisibility())"
                ".map(p => p.getBoundingClientRect().width))")
            assert widest <= 1100, f"{name}: lines {widest:.0f} px long at 3840 x 2160"
    finally:
        _resize(student, *PROJECTOR)


def test_search_works_from_a_folder(site, student):
    """Item 6: search.html opened from disk finds pages and quotes each one (a snippet around the word), with
    nothing refused in the console -- in a browser that forbids a page on disk to fetch other files."""
    student.get_log("browser")
    _open(student, (site / "search.html").as_uri() + "?q=coalescing")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = student.execute_script("const s = document.querySelector('#search-results');"
                                        "return s ? s.innerText : ''")
        if "Search finished" in status:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # the snippets come after the list
    hits = student.execute_script("return document.querySelectorAll('#search-results li').length")
    quoted = student.execute_script(
        "return Array.from(document.querySelectorAll('#search-results li')).filter(li => li.querySelector('p.context'))"
        ".length")
    errors = [e["message"] for e in student.get_log("browser") if e.get("level") == "SEVERE"]
    assert hits >= 3, status
    assert quoted == hits, f"{quoted} of {hits} results quoted"
    assert not errors, errors[:3]


def test_contents_entries_are_not_cut_at_1080p(site, student):
    """Item 6: where the right-hand contents has its column (1600 px and wider), its entries wrap, none cut off;
    below that it is a drawer its header button opens, and the article keeps the width."""
    try:
        _resize(student, 1920, 1080)
        cut = []
        for page in _lesson_pages(site):
            _open(student, page.as_uri())
            cut += [f"{page.relative_to(site)}: {t}" for t in student.execute_script(
                "const toc = document.querySelector('.bd-sidebar-secondary');"
                "if (!toc || !toc.checkVisibility()) return [];"
                "return Array.from(toc.querySelectorAll('a')).filter(a => a.checkVisibility() && "
                "a.scrollWidth > a.clientWidth + 1).map(a => a.textContent.trim()).slice(0, 3)")]
        assert not cut, cut[:10]
    finally:
        _resize(student, *PROJECTOR)
