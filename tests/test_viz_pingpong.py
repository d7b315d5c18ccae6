"""The figure of attention's ping-pong schedule (gpukernels.viz.pingpong_timeline) shows what the simulator did:

* its record of a run of ``attention.ping_pong`` (`gpukernels._pplog`, from the simulator's wgmma, named-barrier and
  TMA events) holds the schedule FlashAttention-3 draws -- the two consumer warpgroups' turns at the tensor cores
  alternate, each wgmma a warpgroup issues lies inside one of its turns, and while every warp of one warpgroup is in
  its softmax of a tile, the other warpgroup issues wgmmas;
* the same checks fail on a run without ping-pong: step 10 (``warp_specialized``, no turns, both warpgroups in their
  softmax at once) and a step 11 whose warpgroups hand the turn on only after their softmax;
* the figure draws the run legibly; a bad argument is a one-line error that names it.

Each simulation takes a second or two; the runs are kept per process (`pingpong_run`), so the tests share them.
"""

import inspect
import types

import numpy as np
import pytest

import gpukernels
from gpukernels import viz

from .test_viz import legibility_problems

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the simulator's record of wgmmas and named barriers")


def issued_under_softmax(data) -> dict:
    """(warpgroup, tile) -> the other warpgroup's wgmma issues (steps) strictly inside every warp's softmax of the
    tile: worked out here from the figure's data, not by `gpukernels._pplog.under_softmax`."""
    out = {}
    for w in data["work"]:
        spans = w["softmax"]
        assert sorted(warp for _, _, warp in spans) == data["warps"][w["warpgroup"]]  # every warp's, once
        lo, hi = max(a for a, _, _ in spans), min(b for _, b, _ in spans)
        out[(w["warpgroup"], w["tile"])] = sorted(
            s for o in data["work"] if o["warpgroup"] != w["warpgroup"]
            for s, _ in o["s_issued"] + o["pv_issued"] if lo < s < hi)
    return out


def alternation_problems(data) -> list[str]:
    """What is not ping-pong in a run's data: the two warpgroups' turns must alternate, 1, 2, 1, 2, ..., one per
    tile and one more; every wgmma a warpgroup issues lies in one of its turns; and while every warp of one warpgroup
    is in its softmax of a tile, the other issues a wgmma."""
    problems = []
    turns = sorted(data["turns"], key=lambda t: t["granted"])
    order = [t["warpgroup"] for t in turns]
    if order != [1, 2] * (data["tiles"] + 1):
        problems.append(f"the turns went to warpgroups {order}")
    spans = [(t["granted"], max(s for s, _, _ in t["passed"]), t["warpgroup"]) for t in turns]
    if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
        problems.append("two turns overlap")
    for w in data["work"]:
        for s, _ in w["s_issued"] + w["pv_issued"]:
            if not any(a <= s <= b and wg == w["warpgroup"] for a, b, wg in spans):
                problems.append(f"warpgroup {w['warpgroup']} issued a wgmma of tile {w['tile']} outside its turns")
                break
    idle = [key for key, issues in issued_under_softmax(data).items() if not issues]
    if idle:
        problems.append(f"no wgmma of the other warpgroup under the softmax of (warpgroup, tile) {idle}")
    return problems


@pytest.fixture(scope="module")
def ping_pong():
    return viz.pingpong_run()


def test_the_turns_alternate_and_each_warpgroups_softmax_runs_under_the_others_products(ping_pong):
    data = ping_pong
    assert data["shape"] == viz.pingpong.SHAPE and data["tiles"] == 3 and data["warps"] == {1: [4, 5, 6, 7],
                                                                                              2: [8, 9, 10, 11]}
    assert alternation_problems(data) == []
    # the named barriers: warpgroup w waits at barrier w; warpgroup 2's arrival at barrier 1 before anything else
    # lets warpgroup 1 go first; each turn is granted only after the other warpgroup's last turn handed it on
    assert {(t["warpgroup"], t["barrier"]) for t in data["turns"]} == {(1, 1), (2, 2)}
    assert [(wg, bar) for _, wg, _, bar in data["handoffs"]] == [(2, 1)] * 4  # its 4 warps
    turns = sorted(data["turns"], key=lambda t: t["granted"])
    for before, turn in zip(turns, turns[1:]):
        assert {b for _, _, b in before["passed"]} == {turn["barrier"]}
        assert max(s for s, _, _ in before["passed"]) <= turn["granted"]
    # the figure's own reading agrees with the one worked out here
    assert {(u["warpgroup"], u["tile"]): sorted(s for s, _, _ in u["issues"]) for u in data["under_softmax"]} \
        == issued_under_softmax(data)
    # within a warpgroup: its P V of tile t - 1 is still in flight when its softmax of tile t starts
    for w in data["work"]:
        if w["tile"]:
            pv = next(o for o in data["work"] if (o["warpgroup"], o["tile"]) == (w["warpgroup"], w["tile"] - 1))
            assert min(s for s, _ in pv["pv_issued"]) < min(a for a, _, _ in w["softmax"]) \
                < max(s for s, _ in pv["pv_done"])


def test_the_checks_fail_without_ping_pong():
    # Step 10: no turns, and both warpgroups in their softmax of a tile together, with no product issued by the
    # other warpgroup under warpgroup 1's
    data = viz.pingpong_run(version="warp_specialized")
    assert data["turns"] == [] and data["handoffs"] == []
    problems = alternation_problems(data)
    assert "the turns went to warpgroups []" in problems
    assert any("no wgmma of the other warpgroup under the softmax" in p and "(1, 0)" in p for p in problems)


def _late_handoff():
    """Step 11 with the turn handed on after the softmax (beside ``wgmma_wait(0)``) instead of as soon as the
    products are issued: still correct, still in turns, but one warpgroup's products never run under the other's
    softmax."""
    from gpukernels.attention import k11_ping_pong as real

    src = inspect.getsource(real)
    early, done = "named_barrier_arrive(other, TURN)  # issued", "wgmma_wait(0)  # O += P V(it - 1) is done"
    assert src.count(early) == 1 and src.count(done) == 1
    src = src.replace(early, "pass  # issued").replace(done, "named_barrier_arrive(other, TURN); wgmma_wait(0)  #")
    module = types.ModuleType(real.__name__ + "_late")
    module.__file__, module.__package__ = real.__file__, real.__package__
    exec(compile(src, real.__file__, "exec"), module.__dict__)  # noqa: S102 - the project's own source
    return module


def test_a_turn_handed_on_after_the_softmax_is_caught():
    from numba import cuda

    from gpukernels import _pplog, attention
    from gpukernels.viz.pingpong import SHAPE

    module = _late_handoff()
    q, k, v = (cuda.to_device(x.astype(np.float16)) for x in attention.make_inputs(SHAPE, 0))
    out = cuda.to_device(np.zeros(SHAPE[:3] + SHAPE[4:], np.float32))
    with gpukernels.trace(count_local=False) as t:
        for launch in module.ping_pong_launches(q, k, v, out, False, 0.25):
            launch()
    sched = _pplog.schedule(t.async_events())
    assert [turn.warpgroup for turn in sorted(sched.turns, key=lambda turn: turn.granted)] == [1, 2] * 4  # in turns
    assert all(not issues for issues in _pplog.under_softmax(sched).values())  # ... but never under a softmax


def test_the_figure_draws_the_run_legibly(ping_pong):
    fig = viz.pingpong_timeline()  # the same run, kept: no second simulation
    data = fig.gpukernels_data
    assert data["work"] == ping_pong["work"] and data["turns"] == ping_pong["turns"]
    labels = [t.get_text() for t in fig.axes[0].texts]
    for tile in range(data["tiles"]):
        assert labels.count(f"S{tile}") == labels.count(f"PV{tile}") == 2  # one per warpgroup
        assert labels.count(f"K{tile}") == labels.count(f"V{tile}") == 1  # one copy each
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "warpgroup 1: turns" in ticks and "warpgroup 2: softmax" in ticks
    assert "an order, not a time" in fig.axes[0].get_xlabel()
    assert legibility_problems(fig) == []


def test_the_figure_of_step_10_has_no_turns_and_says_so():
    fig = viz.pingpong_timeline(version="warp_specialized")
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert not any("turns" in t for t in ticks) and "no turns" in fig.get_suptitle()
    assert legibility_problems(fig) == []


def test_the_figure_is_in_the_gallery_under_the_attention_lesson():
    specs = {s.name: s for s in viz.figure_specs(lessons=["attention"])}
    assert specs["attention_pingpong_timeline"].section == "Lesson: attention"
    assert specs["attention_pingpong_timeline"].needs == "tracer"


# ----------------------------------------------------------------------------------------------------------
# Bad arguments: one line, naming the argument (before anything is simulated)
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call,message", [
    (lambda: viz.pingpong_timeline(version="wgmma"),
     r"^version must be one of \['ping_pong', 'warp_specialized'\]"),
    (lambda: viz.pingpong_timeline((1, 1, 128, 192)), r"^shape must be \(B, H, Sq, Sk, D\), five whole numbers"),
    (lambda: viz.pingpong_timeline((1, 1, 0, 192, 16)), r"^shape must be \(B, H, Sq, Sk, D\)"),
    (lambda: viz.pingpong_timeline((1, 1, 128, 192, 24)), r"^shape: D must be a multiple of 16 up to 128"),
    (lambda: viz.pingpong_timeline((1, 1, 128, 64 * 7, 16)), r"^shape: Sk = 448 is 7 K/V tiles of 64 keys; at most 6"),
    (lambda: viz.pingpong_timeline((2, 2, 128, 192, 16)), r"^shape: B x H x ceil\(Sq / 128\) = 4 blocks; at most 2"),
    (lambda: viz.pingpong_timeline(seed=-1), r"^seed must be a whole number >= 0"),
    (lambda: viz.pingpong_timeline(seed=1.5), r"^seed must be a whole number >= 0"),
])
def test_a_bad_argument_is_one_line_naming_it(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
