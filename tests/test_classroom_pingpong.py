"""The classroom page's timeline of attention's consumer warpgroups (gpukernels.classroom.timeline.pingpong_svg),
read back from the SVG a student sees -- not from the data it was drawn from:

* for ``ping_pong`` (step 11) the turns at the tensor cores alternate, warpgroup 1, 2, 1, 2, ..., one per K/V tile
  and one more; every wgmma tick of a warpgroup lies in one of its turns; and under every softmax of one warpgroup
  the other issues a wgmma;
* for ``warp_specialized`` (step 10: no named barriers) the drawing claims no turns, and the same checks fail on it
  -- as they do on step 11's record with two turns swapped, so the checks can fail on a drawing that has turns;
* ``page_data`` picks this drawing for both steps (turns first, else the existing cp.async / ring timelines), and
  the page names it.

Each traced run takes a second or two (no event log); the page's own tracing, ~6 s, is marked slow.
"""

import dataclasses
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the simulator's record of wgmmas and named barriers")

SHAPE = (1, 1, 128, 192, 16)  # one block of 128 queries, 3 K/V tiles of 64 keys: 4 turns per warpgroup
SVG = "{http://www.w3.org/2000/svg}"


def traced(version: str):
    """A trace (no event log) of attention.<version> at SHAPE on float16 inputs, as the page runs it."""
    from gpukernels import attention

    q, k, v = (x.astype(np.float16) for x in attention.make_inputs(SHAPE, 0))
    with gpukernels.trace(count_local=False) as t:
        attention.VERSIONS[version](q, k, v)
    return t


@pytest.fixture(scope="module")
def runs():
    """version -> (its trace, block 0's _pplog.Schedule, the SVG page_data draws for it)."""
    from gpukernels import _pplog, classroom

    out = {}
    for version in ("ping_pong", "warp_specialized"):
        t = traced(version)
        out[version] = (t, _pplog.schedule(t.async_events()), classroom._timeline(t))
    return out


def read(svg: str) -> dict:
    """What the drawing shows, from its elements: the turns (x from, x to, warpgroup) left to right, the wgmma ticks
    (x, warpgroup), each (warpgroup, tile)'s softmax bars [(x from, x to)], and its accessible name."""
    root = ET.fromstring(svg)
    turns = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "turn":
            held = next(r for r in g.iter(f"{SVG}rect") if r.get("class") == "held")
            x = float(held.get("x"))
            turns.append((x, x + float(held.get("width")), int(g.get("data-warpgroup"))))
    issues = [(float(e.get("x1")), int(e.get("data-warpgroup"))) for e in root.iter(f"{SVG}line")
              if e.get("class") == "issue"]
    softmax: dict = {}
    for r in root.iter(f"{SVG}rect"):
        if r.get("class") == "softmax":
            x = float(r.get("x"))
            softmax.setdefault((int(r.get("data-warpgroup")), int(r.get("data-tile"))), []).append(
                (x, x + float(r.get("width"))))
    texts = ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]
    return {"turns": sorted(turns), "issues": issues, "softmax": softmax, "role": root.get("role"),
            "label": root.get("aria-label"), "texts": texts}


def drawing_problems(svg: str) -> list[str]:
    """What in the drawing is not ping-pong: turns that do not alternate 1, 2, 1, 2, ... (one per tile and one
    more) or that overlap, a warpgroup's wgmma tick outside its turns, a softmax with no tick of the other warpgroup
    under every warp's bar of it."""
    d = read(svg)
    problems = []
    tiles = 1 + max(tile for _, tile in d["softmax"])
    order = [wg for _, _, wg in d["turns"]]
    if order != [1, 2] * (tiles + 1):
        problems.append(f"the turns went to warpgroups {order}")
    if any(a[1] > b[0] for a, b in zip(d["turns"], d["turns"][1:])):
        problems.append("two turns overlap")
    for x, wg in d["issues"]:
        if not any(a <= x <= b and w == wg for a, b, w in d["turns"]):
            problems.append(f"warpgroup {wg} issued a wgmma outside its turns")
            break
    idle = []
    for (wg, tile), bars in sorted(d["softmax"].items()):
        lo, hi = max(a for a, _ in bars), min(b for _, b in bars)  # while every warp is in its softmax
        if not any(lo < x < hi for x, other in d["issues"] if other != wg):
            idle.append((wg, tile))
    if idle:
        problems.append(f"no wgmma of the other warpgroup under the softmax of (warpgroup, tile) {idle}")
    return problems


def test_the_ping_pong_drawing_shows_alternating_turns_and_each_softmax_under_the_others_products(runs):
    _, sched, svg = runs["ping_pong"]
    d = read(svg)
    assert 'class="timeline pingpong"' in svg and d["role"] == "img"
    assert d["label"] == "ping-pong: 8 turns at the tensor cores, warpgroups 1, 2, 1, 2, 1, 2, 1, 2; 3 K/V tiles"
    assert drawing_problems(svg) == []
    # everything the record holds is drawn: each turn, each warp's softmax of each tile, each wgmma issued
    assert len(d["turns"]) == len(sched.turns) == 8
    assert sorted(len(bars) for bars in d["softmax"].values()) == [4] * 6  # 2 warpgroups x 3 tiles, 4 warps each
    assert len(d["issues"]) == sum(len(w.s_issued) + len(w.pv_issued) for w in sched.work)
    assert {"warpgroup 1: turns", "warpgroup 2: turns", "warpgroup 2: softmax", "TMA: Q", "TMA: V, stage 1"} \
        <= set(d["texts"])
    assert any("an order, not a time" in text for text in d["texts"])


def test_step_10_is_drawn_without_turns_and_fails_the_same_checks(runs):
    _, sched, svg = runs["warp_specialized"]
    assert sched.turns == [] and sched.work and sched.copies  # fed by TMA, but no named barriers
    d = read(svg)
    assert d["role"] == "img" and d["label"] == "two consumer warpgroups, no turns: 3 K/V tiles"
    assert d["turns"] == [] and not any("turn" in text and "no turns" not in text for text in d["texts"])
    problems = drawing_problems(svg)
    assert "the turns went to warpgroups []" in problems
    # both warpgroups in their softmax at once: nothing of warpgroup 2's is issued under warpgroup 1's first one
    assert any(p.startswith("no wgmma of the other warpgroup") and "(1, 0)" in p for p in problems)


def test_the_checks_catch_turns_out_of_order(runs):
    from gpukernels.classroom import timeline

    _, sched, _ = runs["ping_pong"]
    turns = sorted(sched.turns, key=lambda t: t.granted)
    # warpgroup 1's second turn given warpgroup 2's place and the other way round: 1, 1, 2, 2, ...
    swapped = {id(turns[1]): turns[2].granted, id(turns[2]): turns[1].granted}
    moved = [dataclasses.replace(t, granted=swapped.get(id(t), t.granted)) for t in sched.turns]
    svg = timeline.pingpong_svg(dataclasses.replace(sched, turns=moved))
    assert any(p.startswith("the turns went to warpgroups [1, 1, 2, 2, 1, 2") for p in drawing_problems(svg))


def test_page_data_picks_the_warpgroups_drawing_only_where_it_applies(runs):
    from gpukernels import classroom
    from gpukernels.classroom import page, timeline

    # a step with named-barrier turns gets them; step 10's drawing is the same one, without turns
    assert classroom._timeline(runs["ping_pong"][0]) == timeline.pingpong_svg(runs["ping_pong"][1])
    assert "its consumer warpgroups, turn by turn" in page._timelines(
        {"timelines": {"ping_pong": runs["ping_pong"][2]}})
    assert "its consumer warpgroups (no turns)" in page._timelines(
        {"timelines": {"warp_specialized": runs["warp_specialized"][2]}})
    # a step without consumer warpgroups fed by TMA draws nothing here (its cp.async or ring timeline, if any)
    from gpukernels import _pplog

    assert timeline.pingpong_svg(_pplog.schedule([])) == ""
    assert "pingpong" not in classroom._timeline(traced("wgmma"))  # step 9: one warpgroup, cp.async


@pytest.fixture(scope="module")
def page_of_10_and_11():
    """page_data and the page for warp_specialized beside ping_pong at SHAPE (~6 s: both traced with the page's full
    event log)."""
    from gpukernels import classroom
    from gpukernels.classroom import page

    data = classroom.page_data("attention", ["warp_specialized", "ping_pong"], SHAPE, broken=False)
    return data, page.render(data)


@pytest.mark.slow  # ~6 s; the default tier checks the same choice through classroom._timeline above
def test_the_page_of_steps_10_and_11_shows_both_drawings(page_of_10_and_11):
    data, html = page_of_10_and_11
    assert [v["name"] for v in data["versions"]] == ["warp_specialized", "ping_pong"]
    assert drawing_problems(data["timelines"]["ping_pong"]) == []
    assert read(data["timelines"]["warp_specialized"])["turns"] == []
    assert "ping_pong: its consumer warpgroups, turn by turn" in html
    assert "warp_specialized: its consumer warpgroups (no turns)" in html
    assert len(html) < 1_500_000  # ~0.6 MB: one block's accesses, far below what a page may hold


@pytest.mark.needs_browser
def test_the_drawings_show_in_a_browser(page_of_10_and_11, browser, tmp_path):
    from .browser import console_errors

    path = tmp_path / "attention.html"
    path.write_text(page_of_10_and_11[1], encoding="utf-8")
    browser.get(path.as_uri())
    assert console_errors(browser) == []
    drawings = browser.find_elements("css selector", "#timelines svg.pingpong")
    assert [d.get_attribute("role") for d in drawings] == ["img", "img"]
    assert all(d.is_displayed() and d.size["width"] > 600 and d.size["height"] > 200 for d in drawings)
    turns = browser.find_elements("css selector", "#timelines svg.pingpong g.turn")
    held = sorted((t.find_element("css selector", "rect.held").location["x"], int(t.get_attribute("data-warpgroup")))
                  for t in turns)
    assert [wg for _, wg in held] == [1, 2] * 4  # drawn left to right in turn, 1, 2, 1, 2, ... (step 10's: none)
