"""Each lesson's classroom page in headless Chromium, opened from file:// as from a USB stick: moving the step
slider and clicking a block change what is shown, the counts shown are the tracer's, and nothing is logged to
the console as an error; on the screens a class meets (1280 x 720 to 3840 x 2160, presenter mode or not) nothing
scrolls sideways, the two columns keep apart and every text is legible. Also the notebook object and
`demo --classroom --no-wait`."""

import os
import re
import subprocess
import sys

import pytest

import gpukernels
from gpukernels import classroom
from gpukernels.check import version_inputs
from gpukernels.trace import trace

from ._cli import one_line, run_main
from .browser import console_errors

# (lesson, versions, shape): every page `make classroom` builds, at its default size -- traced in seconds, cbr's in
# ~30 s and ~2 GB (gpukernels.classroom.PAGES says why)
PAGES = [(lesson, versions, shape) for lesson, (versions, shape, _) in classroom.PAGES.items()]


# Each page's tests in one xdist group: the page is traced once per process that uses it (cbr's ~15 CPU-s, matmul's
# and attention's ~12), and without the group both workers traced every page (~30 CPU-s of CI's twice over).
@pytest.fixture(scope="module", params=[pytest.param(p, id=p[0], marks=pytest.mark.xdist_group(f"classroom.{p[0]}"))
                                        for p in PAGES])
def page(request, tmp_path_factory):
    lesson, versions, shape = request.param
    data = classroom.page_data(lesson, versions, shape)
    path = tmp_path_factory.mktemp("classroom") / f"{lesson}.html"
    from gpukernels.classroom.page import render

    path.write_text(render(data), encoding="utf-8")
    return lesson, versions, shape, data, path


def _tracer_loads(lesson, version, shape):
    mod = gpukernels.LESSONS[lesson]
    with trace(count_local=False) as t:  # global traffic only
        mod.VERSIONS[version](*version_inputs(lesson, version, mod.make_inputs(shape, 0)))
    loads = {}
    for a in t.traffic():
        loads[a.array] = loads.get(a.array, 0) + a.loads
    return loads


def _text(driver, id_):
    return driver.find_element("id", id_).text.replace(",", "")


@pytest.mark.needs_browser
def test_page_in_a_browser(page, browser):
    lesson, versions, shape, data, path = page
    _self_contained_and_embeddable(path)
    browser.get(path.as_uri())
    assert console_errors(browser) == []
    slider = browser.find_element("id", "step")
    last = int(slider.get_attribute("max"))
    # at the last step, "loads so far" of every input is the tracer's count
    for _ in range(last):
        browser.find_element("tag name", "body").send_keys("\ue014")  # arrow right
    assert int(slider.get_attribute("value")) == last
    for side, name in enumerate(versions):
        loads = _tracer_loads(lesson, name, shape)
        for array, n in loads.items():
            if n:
                assert int(_text(browser, f"s{side}-{array}-loads")) == n, (name, array)
    # back to the first step: the counts shown are the first step's
    browser.find_element("tag name", "body").send_keys("\ue012")  # arrow left
    for _ in range(last):
        browser.find_element("tag name", "body").send_keys("\ue012")
    v = data["versions"][1]
    for g in v["global"]:
        if g["loads"]:
            assert int(_text(browser, f"s1-{g['name']}-loads")) == sum(v["steps"][0]["loads"].get(g["name"], []))
    # clicking another block changes which elements it reads; the count is the one in the data
    blocks = browser.find_elements("css selector", 'rect.block[data-side="1"]')
    target = blocks[-1]
    target.click()
    assert browser.find_elements("css selector", 'rect.block[data-side="1"]')[-1].get_attribute("fill") == "#222"
    b = len(blocks) - 1
    for g in v["global"]:
        rows = v["access"].get(f"{g['name']}:read", [])
        want = {r[3] + r[4] * i for r in zip(*[iter(rows)] * 6) if r[0] == 0 and r[1] == b for i in range(r[5])}
        if want:
            assert int(_text(browser, f"s1-{g['name']}-selreads")) == len(want)
    # clicking an output element selects, on both sides, the thread that computes it
    out = next(g for g in v["global"] if g["written"])
    browser.find_element("css selector", f'#side1 div[data-array="{out["name"]}"] rect[data-e="0"]').click()
    assert browser.find_element("id", "mode-thread").get_attribute("class") == "on"
    # one warp access at a time, with the tracer's numbers for its line
    assert browser.find_elements("id", "s0-line")
    if lesson == "cbr":  # a 3x3 filter, padding 1: the staged input tile has a halo, zeros outside the image
        assert shape[-2:] == (3, 3)
        tile = next(t for t in v["shared"] if t["source"] == "x")
        cells = tile["cells"]["0:0"]
        assert -1 in cells[1::2] and any(c >= 0 for c in cells[1::2])
        assert "zeros" in _text(browser, f"s1-{tile['name']}-held")
    # presenter mode shows one view, scaled to fit the screen
    browser.find_element("tag name", "body").send_keys("p")
    shown = [s for s in browser.find_elements("css selector", ".section") if s.is_displayed()]
    assert len(shown) == 1
    assert console_errors(browser) == []


@pytest.mark.needs_browser
def test_matmul_race_view_names_the_lines(page, browser):
    lesson, _, _, data, path = page
    if lesson != "matmul":
        pytest.skip("only matmul has a broken variant")
    browser.get(path.as_uri())
    races = browser.find_elements("css selector", ".race")
    assert len(races) == len(data["broken"]["races"]) == 2
    assert "k03_tiled" not in races[0].text and "racy.py" in races[0].text
    races[0].click()
    assert "on" in browser.find_elements("css selector", ".race")[0].get_attribute("class")
    assert console_errors(browser) == []


# ---- on every screen a class meets -------------------------------------------------------------------------

#: (width, height, presenter mode): a laptop on a 720p projector, a 1400 x 900 laptop, a 1080p projector and a 4K
#: screen, and presenter mode on the smallest, on 1080p and on 4K
SCREENS = [(1280, 720, False), (1400, 900, False), (1920, 1080, False), (3840, 2160, False), (1280, 720, True),
           (1920, 1080, True), (3840, 2160, True)]

#: What a student cannot read or reach, as one line per problem: the document scrolls sideways, an element reaches
#: past the window or out of its column, the two columns overlap, a visible text is smaller than `least` px (as
#: drawn: its font size times the drawing's scale and any CSS zoom), an image does not load or a link leads nowhere.
PROBLEMS = """
const least = arguments[0], out = [], W = window.innerWidth, de = document.documentElement;
const name = (e) => `${e.tagName.toLowerCase()}${e.id ? "#" + e.id : ""}` +
  `${e.className && e.className.baseVal === undefined ? "." + String(e.className).split(" ")[0] : ""}` +
  ` "${(e.textContent || "").trim().slice(0, 30)}"`;
const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
  && getComputedStyle(e).visibility !== "hidden"; };
if (de.scrollWidth > W) out.push(`the page scrolls sideways: ${de.scrollWidth} px wide in a window of ${W}`);
for (const e of document.querySelectorAll("body *")) {
  if (!shown(e)) continue;
  const r = e.getBoundingClientRect();
  if (r.right > W + 0.5 || r.left < -0.5) out.push(`${name(e)} reaches past the window: ${r.left}-${r.right} of ${W}`);
  const text = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!text) continue;
  // drawn size: an SVG's text times the drawing's scale (its CTM, CSS zoom included); HTML text times its zoom
  const svg = e.closest("svg");
  let scale = svg ? svg.getScreenCTM().a : 1;
  for (let p = e; p && !svg; p = p.parentElement) scale *= parseFloat(getComputedStyle(p).zoom) || 1;
  const size = parseFloat(getComputedStyle(e).fontSize) * scale;
  if (size < least - 0.01) out.push(`${name(e)}: text of ${size.toFixed(1)} px (at least ${least})`);
}
for (const sides of document.querySelectorAll(".sides")) {
  if (!shown(sides)) continue;
  const cols = [...sides.children].filter(shown), boxes = cols.map((c) => c.getBoundingClientRect());
  for (let i = 0; i < cols.length; i++) {
    for (let j = i + 1; j < cols.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
        out.push(`columns ${name(cols[i])} and ${name(cols[j])} overlap`);
    }
    for (const e of cols[i].querySelectorAll("*")) {  // nothing drawn outside its column: lanes into the next one
      if (!shown(e)) continue;
      const r = e.getBoundingClientRect();
      if (r.right > boxes[i].right + 0.5 || r.left < boxes[i].left - 0.5)
        out.push(`${name(e)} leaves its column ${name(cols[i])}: ${r.left}-${r.right} outside ` +
                 `${boxes[i].left}-${boxes[i].right}`);
    }
  }
}
for (const img of document.images) if (!img.complete || !img.naturalWidth) out.push(`image ${img.src} does not load`);
for (const a of document.querySelectorAll("a[href]")) {
  const href = a.getAttribute("href");
  if (href.startsWith("#") ? !document.getElementById(href.slice(1)) : !href.startsWith("data:"))
    out.push(`link ${href} leads nowhere a page on a USB stick can reach`);
}
return [...new Set(out)].slice(0, 20);
"""


@pytest.fixture(scope="module")
def screen():
    """One Chromium for the module, its viewport set exactly (CDP) by `show`."""
    from .browser import chromium

    with chromium() as driver:
        yield driver


def show(driver, path, width, height):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    driver.get(path.as_uri())
    assert driver.execute_script("return [innerWidth, innerHeight]") == [width, height]


@pytest.mark.needs_browser
@pytest.mark.parametrize("width, height, presenter", SCREENS, ids=[f"{w}x{h}{'-presenter' if p else ''}"
                                                                   for w, h, p in SCREENS])
def test_page_fits_the_screen_and_reads_from_the_back(page, screen, width, height, presenter):
    lesson, _, shape, data, path = page
    show(screen, path, width, height)
    body = screen.find_element("tag name", "body")
    steps = int(screen.find_element("id", "step").get_attribute("max")) + 1
    assert steps >= 2, f"{lesson} at {shape}: the slider has {steps} step, nothing to walk through"
    views = 3 if data["broken"] else 2
    if presenter:
        body.send_keys("p")  # one view at a time; space shows the next
    for view in range(views if presenter else 1):
        shown = [s.get_attribute("id") for s in screen.find_elements("css selector", ".section") if s.is_displayed()]
        for step in (0, steps - 1):  # the first and the last step (the last draws the most)
            screen.execute_script("const s = document.getElementById('step'); s.value = arguments[0];"
                                  "s.dispatchEvent(new Event('input'))", step)
            problems = screen.execute_script(PROBLEMS, 14 if presenter else 12)  # 12 px: legible on a 720p projector
            where = f"{lesson} at {width}x{height}, {', '.join(shown)}, step {step + 1}"
            assert problems == [], f"{where}:\n" + "\n".join(problems)
        if presenter:
            body.send_keys(" ")
    assert console_errors(screen) == []


@pytest.mark.needs_browser
def test_a_page_of_one_step_says_so_and_counts_16_byte_accesses_whole(screen, tmp_path):
    """softmax's short rows take vector_rows: no barrier, so one step (the page says so, nothing to slide), and
    load4's 16-byte accesses are one request per warp -- 16 sectors at 100% -- at the kernel's own line."""
    from gpukernels.classroom.page import render

    path = tmp_path / "softmax.html"
    path.write_text(render(classroom.page_data("softmax", ("naive", "optimized"), (32, 64))), encoding="utf-8")
    show(screen, path, 1920, 1080)
    assert not screen.find_element("id", "step").is_displayed()
    label = screen.find_element("id", "steplabel").text
    assert label.startswith("one step at this size") and "slider" not in screen.find_element("tag name", "body").text
    assert _text(screen, "s1-sectors") == "16" and _text(screen, "s1-eff") == "100%"
    source = screen.find_element("css selector", "#sec-warp #side1 .source").text
    assert source.startswith("gpukernels/softmax/k06_vector_rows.py:") and "load4(" in source
    assert "_intrinsics" not in screen.find_element("id", "sec-warp").text
    assert screen.execute_script(PROBLEMS, 12) == []


# ---- the page tells the truth (issue 76: items 1, 3, 7) ---------------------------------------------------------

#: A path of this machine: the repository's own, or any absolute path to a .py file (POSIX or Windows)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINE_PATH = re.compile(r"(?:^|[\s(\"'])(?:/[\w.+-]+)+/[\w.+-]+\.py\b|\b[A-Za-z]:\\[^\s\"']+\.py\b")


@pytest.mark.needs_browser
def test_sources_name_no_machine_path(screen, tmp_path, monkeypatch):
    """A page made from a notebook's folder (the working directory below the repository, not above the package)
    names the kernels' lines relative to the package -- gpukernels/matmul/k03_tiled.py:34 -- never by this machine's
    absolute path: the page is embedded in committed notebooks and shown on the course site."""
    from gpukernels.classroom.page import render

    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    path = tmp_path / "matmul.html"
    path.write_text(render(classroom.page_data("matmul", ("naive", "tiled"), (16, 16, 32))), encoding="utf-8")
    assert ROOT not in path.read_text()
    show(screen, path, 1280, 720)
    sources = [e.text for e in screen.find_elements("css selector", ".source")]
    assert sources and all(s.startswith("gpukernels/") for s in sources), sources
    text = screen.find_element("tag name", "body").text
    assert not MACHINE_PATH.search(text), MACHINE_PATH.search(text).group(0)


def _staged(v, step: int) -> tuple:
    """The shared tiles a step of version data copies global values into (cells holding a global element)."""
    return tuple(sorted({tile["name"] for tile in v["shared"] for key, cells in (tile.get("cells") or {}).items()
                         if int(key.split(":")[0]) == step and any(s >= 0 for s in cells[1::2])}))


@pytest.mark.needs_browser
def test_step_labels_say_what_the_step_does(page, screen):
    """A step labelled "K/V tile i of n" (or "K phase", "k tile", "channel chunk") in a version that stages shared
    tiles stages one: n is the number of steps that stage the same tiles, i its place among them, and a step that
    stages nothing (attention's interval of probabilities) is not a tile of its own. (softmax's phases stage no
    tile: the phases of its block reductions, numbered as they come.)"""
    lesson, versions, shape, data, path = page
    word = classroom.PAGES[lesson][2]
    show(screen, path, 1920, 1080)
    steps = int(screen.find_element("id", "step").get_attribute("max")) + 1
    for side, v in enumerate(data["versions"]):
        staged = [_staged(v, i) for i in range(len(v["steps"]))]
        if not any(staged):
            continue
        for step in range(steps):
            screen.execute_script("const s = document.getElementById('step'); s.value = arguments[0];"
                                  "s.dispatchEvent(new Event('input'))", step)
            label = screen.find_element("id", "steplabel").text.split(" | ")[side]
            m = re.search(rf"{re.escape(word)} (\d+) of (\d+)", label)
            if m is None or len(v["steps"]) == 1:
                continue
            i, n = int(m.group(1)), int(m.group(2))
            here = min(step, len(v["steps"]) - 1)
            assert staged[here], f"{lesson} {v['name']}: {label!r} stages no tile"
            same = [k for k, s in enumerate(staged) if s == staged[here]]
            assert (i, n) == (same.index(here) + 1, len(same)), (lesson, v["name"], label, staged)


@pytest.mark.needs_browser
def test_the_tensor_core_page_shows_the_kernels_lines_and_the_swizzle(page, screen):
    """The warp view names the student's kernel line first (k02_ldmatrix.py's ``sa[...] = half_at(a, ...)``), the
    helper's ``return x[i, j]`` in _common.py only as the way it reaches memory; and the swizzled tiles are drawn in
    128-byte lines whose 16-byte chunks change order from line to line (ldmatrix's keep theirs)."""
    lesson, versions, _, data, path = page
    if lesson != "tensor_core":
        pytest.skip("the tensor-core page")
    show(screen, path, 1920, 1080)
    for side in (0, 1):
        first = screen.find_element("css selector", f"#sec-warp #side{side} .source").text
        assert first.startswith(f"gpukernels/tensor_core/k0{side + 1}_"), first
    # each 128-byte line of the swizzled A tile: the chunks' colours in order along the line
    rows = screen.execute_script("""
      const svg = document.querySelector('#side1 [data-tile="sa"] svg');
      const by = {};
      for (const r of svg.querySelectorAll('rect[data-e]')) {
        const e = Number(r.getAttribute('data-e')), line = Math.floor(e / 64), chunk = Math.floor((e % 64) / 8);
        (by[line] ||= [])[chunk] = r.getAttribute('fill');
      }
      return Object.values(by).filter((cs) => cs.every((c) => c && c !== '#BBBBBB' && c !== '#f4f4f4'));""")
    assert len(rows) >= 2 and len({tuple(r) for r in rows}) > 1, rows[:4]  # the order changes: the swizzle


@pytest.mark.needs_browser
def test_keys_scroll_the_page_unless_presenting(page, screen):
    """Outside presenter mode Space and PgDn scroll the page (a keyboard or a clicker reaches its lower views);
    in presenter mode they show the next view."""
    lesson, _, _, data, path = page
    if lesson != "matmul":
        pytest.skip("the keys are the same on every page")
    show(screen, path, 1280, 720)
    body = screen.find_element("tag name", "body")
    assert screen.execute_script("return window.scrollY") == 0
    body.send_keys(" ")
    screen.execute_script("return new Promise((r) => setTimeout(r, 300))")
    assert screen.execute_script("return window.scrollY") > 100, "Space did not scroll the page"
    shown = [s.get_attribute("id") for s in screen.find_elements("css selector", ".section") if s.is_displayed()]
    assert len(shown) == (3 if data["broken"] else 2)  # all views, none hidden by the key
    body.send_keys("\ue00f")  # PgDn
    body.send_keys("p")
    first = [s.get_attribute("id") for s in screen.find_elements("css selector", ".section") if s.is_displayed()]
    body.send_keys(" ")
    second = [s.get_attribute("id") for s in screen.find_elements("css selector", ".section") if s.is_displayed()]
    assert len(first) == len(second) == 1 and first != second


#: Cells drawn with an outline: the outline may take at most a fifth of the cell, and only cells of STROKE_MIN px
#: or more get one, so that the fill a student compares with the legend is what shows.
OUTLINED = """
const out = [];
for (const r of document.querySelectorAll("svg.array rect[stroke]")) {
  if (r.getAttribute("fill") === "none") continue;  // a panel's frame
  const b = r.getBoundingClientRect(), sw = parseFloat(r.getAttribute("stroke-width")) * r.getScreenCTM().a;
  // an outlined cell is drawn inset by its outline's width: the cell is its box plus that
  if (b.width + sw < 9.5 || sw > (b.width + sw) / 5 + 0.01) out.push([r.getAttribute("fill"), b.width, sw]);
}
return out.slice(0, 5);
"""


@pytest.mark.needs_browser
@pytest.mark.parametrize("width, height", [(1280, 720), (1920, 1080)])
def test_small_cells_keep_their_legend_colour(page, screen, width, height):
    lesson, _, _, _, path = page
    show(screen, path, width, height)
    for step in (0, int(screen.find_element("id", "step").get_attribute("max"))):
        screen.execute_script("const s = document.getElementById('step'); s.value = arguments[0];"
                              "s.dispatchEvent(new Event('input'))", step)
        for mode in ("b", "t"):
            screen.find_element("tag name", "body").send_keys(mode)
            bad = screen.execute_script(OUTLINED)
            assert bad == [], f"{lesson} at {width}x{height}, step {step + 1}: outlines hiding the fill: {bad}"


@pytest.mark.needs_browser
def test_the_cbr_halo_is_visible(page, screen):
    """cbr's default page has a 3 x 3 filter with padding 1 so that the staged input tile shows its halo: the zeros
    beside the image are cells a student can see (at least 4 px), in the legend's colour for them."""
    lesson, _, _, _, path = page
    if lesson != "cbr":
        pytest.skip("only cbr stages a tile with a halo")
    show(screen, path, 1280, 720)
    cells = screen.execute_script("""
      const tile = document.querySelector('#side1 [data-tile="x_tile"]');
      return tile ? Array.from(tile.querySelectorAll('rect')).filter((r) => r.getAttribute('fill') === '#666666')
                         .map((r) => r.getBoundingClientRect().width) : null;""")
    assert cells, "no halo cell drawn on fused_direct's x_tile"
    assert min(cells) >= 4, f"halo cells of {min(cells):.1f} px"
    assert screen.find_element("id", "legend-halo").is_displayed()


def test_each_page_links_the_next_lessons():
    """`make classroom` (demo all --html DIR) writes the pages side by side, each linking the next lesson's."""
    from gpukernels.classroom import next_lesson
    from gpukernels.classroom.page import render

    order = list(classroom.PAGES)
    assert [next_lesson(x) for x in order] == order[1:] + [None]
    html = render({"title": "matmul", "versions": []}, next_page="softmax.html")
    assert '<a id="next" href="softmax.html">next lesson: softmax' in html
    assert 'id="next"' not in render({"title": "attention", "versions": []})


def _self_contained_and_embeddable(path):
    text = path.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    # nothing fetched: no script or stylesheet by address; the one <link> is the empty icon (data:, inline)
    assert "<script src" not in text and re.findall(r"<link[^>]*>", text) == ['<link rel="icon" href="data:,">']
    html = classroom.Page(text)._repr_html_()  # the notebook object: the same page in an iframe
    assert html.startswith("<iframe srcdoc=") and "&lt;script" in html


@pytest.mark.slow  # 14 CPU-s: every lesson's classroom sequence traced in the terminal
def test_classroom_sequence_runs_without_waiting():
    env = dict(os.environ, GPUKERNELS_DEVICE="sim")
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "demo", "--classroom", "matmul", "--size", "8",
                           "--no-wait"], capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for title in ("The grid map", "Coalescing", "Tiling and its phases", "The missing barrier", "Occupancy",
                  "Measured speed", "Summary"):
        assert title in out
    assert "press Enter" not in out
    assert "read-after-write" in out


@pytest.mark.parametrize("args, message", [
    (["matmul", "--html", "/nonexistent/x.html"], "--html '/nonexistent/x.html': its folder"),
    (["all", "--html", "x.html"], "with 'all', --html takes an existing folder"),
    (["matmul", "--version", "tiled", "--html", "x.html"], "give --version twice; got 1"),
    (["matmul", "--version", "tiled", "--version", "nope", "--html", "x.html"], "--version 'nope': matmul has no"),
    (["matmul", "--no-wait"], "--version and --no-wait go with"),
    (["matmul", "--html", "x.html", "--classroom"], "give one of them"),
    (["matmul", "--size", "80", "--html", "x.html"], "--size: matmul.naive records"),
    (["matmul", "--size", "4096", "--html", "x.html"], "--size: matmul at 4096x4096x4096 would record millions"),
])
def test_bad_options_give_one_line(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, ["demo", *args])
    assert code == 2, err
    one_line(err, message)
    assert not any(tmp_path.iterdir())  # nothing written for a refusal
