"""The figures of Hopper's data movement (gpukernels.viz.hopper) show what the simulator did:

* ``tma_box``: where each 16-byte chunk of the box sits in the figure is where the simulator's TMA copy put its
  bytes (checked against a copy of the same matrix by a kernel of this file, and against the drawn cells), which is
  the PTX ISA's 128-byte swizzle: chunk c of row r at c ^ (r % 8); the zeros are the elements past the edge;
* ``ring_timeline``: its record of a run (`gpukernels.trace.Trace.ring`, from the simulator's mbarrier events) is in
  an order a correct ring must have -- every use of a stage filled before its consumers go on and read it, refilled
  only after the consumers released the use before, each use's phase bit the flip of the last -- and, for the
  persistent step, the next tile's copies fly during a tile's epilogue;
* the classroom page draws the same ring for the TMA steps;
* a bad argument is a one-line error that names it.

Each simulation is small (a second or two); the two ring runs are shared by the tests that read them.
"""

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import viz
from gpukernels.viz import hopper

from .test_viz import legibility_problems

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the simulator's TMA copies and mbarrier record")

WS_SHAPE = (8, 8, 320)  # one block, 5 k tiles through 4 stages: stage 0 is used twice (phase bits 0, then 1)
PERSISTENT_SHAPE = (8, 512, 128)  # one block walking 2 tiles of C, 2 k tiles each: tile 1 starts at stage 2


# ----------------------------------------------------------------------------------------------------------
# One box
# ----------------------------------------------------------------------------------------------------------


def _cells(fig, ax_index: int) -> dict:
    """(row, slot) -> the chunk number drawn in that cell of the figure's panel ``ax_index``."""
    ax = fig.axes[ax_index]
    return {(int(t.get_position()[1]), int(t.get_position()[0])): int(t.get_text()) for t in ax.texts}


@pytest.mark.parametrize("swizzle", [128, 0])
def test_the_box_figure_draws_each_chunk_where_the_simulators_copy_put_it(swizzle):
    from .test_tma import one_box

    from gpukernels._tma import TensorMap

    fig = viz.tma_box(swizzle=swizzle)
    data = fig.gpukernels_data
    rows, (row, col) = data["rows"], data["at"]
    slot, line = np.array(data["slot"]), np.array(data["line"])
    landed = np.array(data["landed"], np.float16)
    # the same box copied by a kernel of its own: the same bytes in shared memory
    matrix = np.array(data["matrix"], np.float16)
    out = np.zeros(rows * 128, np.uint8)
    one_box[1, 32](TensorMap(cuda.to_device(matrix), (rows, 64), swizzle=swizzle), out, row, col, rows * 128)
    assert np.array_equal(out.view(np.float16).reshape(rows, 64).view(np.uint16), landed.view(np.uint16))
    # the figure's placement undoes what landed: chunk c of box row r, taken from its slot, is the matrix's
    box = np.zeros((rows, 64), np.float16)
    inside = matrix[row:row + rows, col:col + 64]
    box[:inside.shape[0], :inside.shape[1]] = inside
    for r in range(rows):
        for c in range(8):
            q = slot[r, c]
            assert np.array_equal(landed[line[r, c], 8 * q:8 * q + 8], box[r, 8 * c:8 * c + 8]), (r, c)
    # ... which is the PTX ISA's rule: within its row, chunk c of row r at c ^ (r % 8) (no swizzle: at c)
    expect = [[c ^ (r % 8) if swizzle else c for c in range(8)] for r in range(rows)]
    assert slot.tolist() == expect and line.tolist() == [[r] * 8 for r in range(rows)]
    # and the right panel draws chunk c of row r in that slot
    assert _cells(fig, 1) == {(r, expect[r][c]): c for r in range(rows) for c in range(8)}
    # the zeros are exactly the elements past the matrix's edge: rows 20-23 and columns 72-79 of the default box
    past = np.array(data["past_edge"])
    m, n = data["shape"]
    assert past.sum() == rows * 64 - inside.size and not past[:m - row, :n - col].any()
    assert legibility_problems(fig) == []


# ----------------------------------------------------------------------------------------------------------
# The ring
# ----------------------------------------------------------------------------------------------------------


# The tests of the traced rings in one xdist group: each run is traced once per process that uses it (3-4 CPU-s),
# and split over both workers persistent_run was traced twice.
RING_RUNS = pytest.mark.xdist_group("viz_hopper.rings")


@pytest.fixture(scope="module")
def ws_run():
    return hopper.ring_run("warp_specialized", WS_SHAPE)


@pytest.fixture(scope="module")
def persistent_run():
    return hopper.ring_run("persistent", PERSISTENT_SHAPE)


def _check_order(run) -> None:
    uses, stages = run["uses"], run["stages"]
    assert [u["index"] for u in uses] == list(range(len(uses)))  # every k tile through the ring, in order
    consumer_warps = 4 * (run["version"] != "tma") * 2  # 2 consumer warpgroups of 4 warps each release
    for u in uses:
        s, n = u["stage"], u["use"]
        assert (s, n) == (u["index"] % stages, u["index"] // stages) and u["phase_bit"] == n % 2
        # filled: armed with the stage's bytes (A's 128 x 64 box and B's four 64 x 64 ones), 5 copies, all landed,
        # and only then the full barrier's phase completes
        assert u["nbytes"] == 2 * (128 * 64 + 64 * 256) and len(u["issued"]) == 5 == len(u["landed"])
        assert u["armed"] < min(u["issued"]) and max(u["landed"]) < u["full"]
        # every consumer's wait for it returns after the producer's copies: at once only after the phase completed
        assert len(u["waits"]) == 256 and all(w > u["full"] for w, _, at_once in u["waits"] if at_once)
        assert all(w > max(u["issued"]) or not at_once for w, _, at_once in u["waits"])
        # the consumers' wgmmas (8 warps x 4 per k tile) read it after it is full, their releases after their wgmmas
        assert len(u["wgmma"]) == 32 and min(s_ for s_, _ in u["wgmma"]) > u["full"]
        if u["released"]:
            # the last consumer warp's arrival completes the empty barrier's phase
            assert len(u["released"]) == consumer_warps and u["freed"] == max(s_ for s_, _ in u["released"]) + 1
            for step, thread in u["released"]:
                assert step > max(s_ for s_, t in u["wgmma"] if t // 32 == thread // 32)  # its own warp's wgmmas
        # refilled only after the consumers released the stage's use before (the first use: a fresh barrier)
        asked, satisfied, at_once = u["empty_wait"]
        if n == 0:
            assert at_once and satisfied == asked
        else:
            before = next(v for v in uses if (v["stage"], v["use"]) == (s, n - 1))
            assert before["freed"] is not None and satisfied >= before["freed"] and u["armed"] > before["freed"]
            assert min(u["issued"]) > before["freed"]


@pytest.mark.slow  # a traced run of a TMA step: 4-6 CPU-s each (the default tier keeps the box figure's)
@RING_RUNS
def test_the_warp_specialized_ring_is_in_a_valid_order_and_its_phase_bits_flip(ws_run):
    _check_order(ws_run)
    uses = ws_run["uses"]
    assert [u["phase_bit"] for u in uses if u["stage"] == 0] == [0, 1]  # round the ring once, and again
    assert uses[-1]["released"] == []  # step 8 never releases its last k tile: the block ends


@pytest.mark.slow  # a traced run of a TMA step: 4-6 CPU-s each (the default tier keeps the box figure's)
@RING_RUNS
def test_the_persistent_ring_carries_over_and_the_next_tiles_copies_fly_during_the_epilogue(persistent_run):
    _check_order(persistent_run)
    uses = persistent_run["uses"]
    assert persistent_run["tiles"] == 2 and [(u["tile"], u["kt"], u["stage"]) for u in uses] == \
        [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]  # tile 1 starts where tile 0 left the ring
    assert all(u["released"] for u in uses)  # step 9 releases a tile's last stages before its epilogue
    [(tile, start, end)] = persistent_run["epilogues"]
    assert tile == 0 and start < end
    # tile 1's first copies were issued before tile 0's epilogue ended (the producer never waits for it)
    assert min(uses[2]["issued"]) < end


@pytest.mark.slow  # a traced run of a TMA step: 4-6 CPU-s each (the default tier keeps the box figure's)
@RING_RUNS
def test_the_ring_figure_draws_the_run_legibly(ws_run, persistent_run):
    for version, shape in (("warp_specialized", WS_SHAPE), ("persistent", PERSISTENT_SHAPE)):
        fig = viz.ring_timeline(version, shape)  # the same run, kept: no second simulation
        assert fig.gpukernels_data["uses"] == (ws_run if version == "warp_specialized" else persistent_run)["uses"]
        labels = [t.get_text() for t in fig.axes[0].texts]
        assert sum("phase bit" in t for t in labels) == len(fig.gpukernels_data["uses"])
        assert sum("epilogue" in t for t in labels) == len(fig.gpukernels_data["epilogues"])
        assert legibility_problems(fig) == []


@RING_RUNS
def test_the_classroom_page_draws_the_ring_of_a_tma_step(persistent_run):
    from gpukernels.classroom import page, timeline

    from gpukernels._ringlog import StageUse

    uses = [StageUse(**{k: v for k, v in u.items() if k not in ("tile", "kt", "phase_bit")})
            for u in persistent_run["uses"]]
    svg = timeline.ring_svg(uses, k_tiles=persistent_run["k_tiles"])
    assert 'class="timeline ring"' in svg and svg.count("<g><title>stage") == len(uses)
    assert "the consumers store tile 0 of C" in svg  # the epilogue, shaded
    assert "its TMA ring, stage by stage" in page._timelines({"timelines": {"persistent": svg}})
    assert timeline.ring_svg([]) == ""


@pytest.mark.slow  # ~5 CPU-s: a TMA step traced twice, with the page's full event log
def test_the_classroom_page_of_a_tma_step_shows_its_ring():
    from gpukernels import classroom
    from gpukernels.classroom import page

    data = classroom.page_data("tensor_core", ["warp_specialized"], (8, 8, 192), broken=False)
    svg = data["timelines"]["warp_specialized"]
    assert 'class="timeline ring"' in svg and svg.count("<g><title>stage") == 3  # its 3 k tiles
    assert "its TMA ring, stage by stage" in page.render(data)


# ----------------------------------------------------------------------------------------------------------
# Bad arguments: one line, naming the argument (before anything is simulated)
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call,message", [
    (lambda: viz.tma_box(shape=(20, 70)), r"^shape: N must be a multiple of 8"),
    (lambda: viz.tma_box(shape=(20,)), r"^shape must be two whole numbers"),
    (lambda: viz.tma_box(shape=(0, 64)), r"^shape must be two whole numbers >= 1"),
    (lambda: viz.tma_box(at=(20, 0)), r"^at: the box's first element must lie in the 20 x 72 matrix"),
    (lambda: viz.tma_box(at=(-1, 0)), r"^at must be two whole numbers >= 0"),
    (lambda: viz.tma_box(rows=33), r"^rows must be a whole number from 1 to 32"),
    (lambda: viz.tma_box(rows=True), r"^rows must be a whole number"),
    (lambda: viz.tma_box(swizzle=64), r"^swizzle must be 128 \(the lesson's\) or 0"),
    (lambda: viz.ring_timeline("wgmma"), r"^version must be one of \['tma', 'warp_specialized', 'persistent'\]"),
    (lambda: viz.ring_timeline("persistent", (8, 8)), r"^shape must be \(M, N, K\)"),
    (lambda: viz.ring_timeline("persistent", (8, 8, 100)), r"^shape: N and K must be multiples of 8"),
    (lambda: viz.ring_timeline("warp_specialized", (8, 8, 64 * 17)), r"^shape: 1 tile\(s\) of C x 17 k tile"),
])
def test_a_bad_argument_is_one_line_naming_it(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_both_figures_are_in_the_gallery_under_the_tensor_core_lesson():
    specs = {s.name: s for s in viz.figure_specs(lessons=["tensor_core"])}
    assert specs["tensor_core_tma_box"].section == specs["tensor_core_ring_timeline"].section == "Lesson: tensor_core"
    assert specs["tensor_core_ring_timeline"].needs == "tracer"
