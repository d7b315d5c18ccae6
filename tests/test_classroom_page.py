"""Each lesson's classroom page in headless Chromium, opened from file:// as from a USB stick: moving the step
slider and clicking a block change what is shown, the counts shown are the tracer's, and nothing is logged to
the console as an error. Also the notebook object and `demo --classroom --no-wait`."""

import os
import re
import subprocess
import sys

import pytest

import gpukernels
from gpukernels import classroom
from gpukernels.trace import trace

from .browser import console_errors

# (lesson, versions, shape): small, so each page is traced in seconds -- cbr's in ~30 s and ~2 GB, the event log of
# fused_direct's register arrays (gpukernels.classroom.PAGES says why its filter is 1x1)
PAGES = [("matmul", ("naive", "tiled"), (32, 32, 32)), ("softmax", ("naive", "optimized"), (32, 64)),
         ("cbr", ("naive", "fused_direct"), (1, 8, 8, 8, 4, 1, 1))]


@pytest.fixture(scope="module", params=PAGES, ids=[p[0] for p in PAGES])
def page(request, tmp_path_factory):
    lesson, versions, shape = request.param
    data = classroom.page_data(lesson, versions, shape)
    path = tmp_path_factory.mktemp("classroom") / f"{lesson}.html"
    from gpukernels.classroom.page import render

    path.write_text(render(data), encoding="utf-8")
    return lesson, versions, shape, data, path


def _tracer_loads(lesson, version, shape):
    mod = gpukernels.LESSONS[lesson]
    with trace() as t:
        mod.VERSIONS[version](*mod.make_inputs(shape, 0))
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


def _self_contained_and_embeddable(path):
    text = path.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    # nothing fetched: no script or stylesheet by address; the one <link> is the empty icon (data:, inline)
    assert "<script src" not in text and re.findall(r"<link[^>]*>", text) == ['<link rel="icon" href="data:,">']
    html = classroom.Page(text)._repr_html_()  # the notebook object: the same page in an iframe
    assert html.startswith("<iframe srcdoc=") and "&lt;script" in html


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
def test_bad_options_give_one_line(args, message, tmp_path):
    env = dict(os.environ, GPUKERNELS_DEVICE="sim")
    proc = subprocess.run([sys.executable, "-m", "gpukernels", "demo", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr, proc.stderr
