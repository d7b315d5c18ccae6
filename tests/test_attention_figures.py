"""The attention lesson's figures show what the kernels do: the traffic figure's bytes are the tracer's, and equal the
model (min_bytes, plus 16 bytes per stored score for naive); the online-softmax figure's steps are the kernels' update
and reproduce the full softmax -- and a wrong update (no rescale) is caught."""

import math

import numpy as np
import pytest

import gpukernels
from gpukernels import attention as at
from gpukernels import viz
from gpukernels.viz import attention as va

from .test_viz import legibility_problems

sim_only = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")


# ----------------------------------------------------------------------------------------------------------
# Global-memory bytes against S
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traffic_fig():
    return viz.attention_traffic()  # the tracer's runs are cached per process: drawn once for the tests below


#: ... in one process: the figure's tests share an xdist group (split over both workers, each traced every step)
TRAFFIC = pytest.mark.xdist_group("attention_figures.traffic")


@sim_only
@pytest.mark.slow  # the traffic figure traces every attention step (10 CPU-s)
@TRAFFIC
def test_fused_steps_move_exactly_min_bytes(traffic_fig):
    data = traffic_fig.gpukernels_data
    d = data["d"]
    for version in ("fused_rows", "tiled"):
        assert data["measured"][version] == [at.min_bytes((1, 1, s, s, d)) for s in data["sizes"]], version
    # fused_rows re-reads K and V once per query row: counted in every access, not in what DRAM moves
    assert all(a > b for a, b in zip(data["accessed"]["fused_rows"], data["measured"]["fused_rows"]))


@sim_only
@pytest.mark.slow  # the traffic figure traces every attention step (10 CPU-s)
@TRAFFIC
def test_naive_exceeds_the_fused_steps_by_the_predicted_score_traffic(traffic_fig):
    data = traffic_fig.gpukernels_data
    sizes = np.array(data["sizes"])
    excess = np.array(data["measured"]["naive"]) - np.array(data["measured"]["fused_rows"])
    predicted = np.array(data["score_passes"]) * np.array(data["score_pass_bytes"])
    np.testing.assert_allclose(excess, predicted, rtol=1e-9)  # the plan's S, four passes: exact
    assert data["score_passes"] == [4] * len(sizes)  # written, read + written by the softmax, read by P V
    np.testing.assert_array_equal(excess, 16 * sizes ** 2)  # 16 bytes per score: the lesson's docstring
    # quadratic: excess / S^2 is one constant, and doubling S quadruples it
    assert len(set((excess / sizes ** 2).tolist())) == 1
    i, j = list(sizes).index(16), list(sizes).index(32)
    assert excess[j] == 4 * excess[i]
    # the model lines drawn pass through the measured points
    assert data["model"]["naive"] == data["measured"]["naive"]
    assert data["model"]["fused"] == data["measured"]["tiled"]


@sim_only
@pytest.mark.slow  # the traffic figure traces every attention step (10 CPU-s)
@TRAFFIC
def test_the_traffic_figure_is_legible_and_its_extrapolation_is_the_lessons_numbers(traffic_fig):
    assert legibility_problems(traffic_fig) == []
    ext = traffic_fig.gpukernels_data["extrapolated"]
    i = ext["sizes"].index(4096)
    shape = (8, 16, 4096, 4096, 128)
    assert ext["fused"][i] == at.min_bytes(shape)  # 1.1 GB
    assert ext["naive"][i] - ext["fused"][i] == 16 * 8 * 16 * 4096 ** 2  # "naive moves 34 GB for S alone"
    assert round((ext["naive"][i] - ext["fused"][i]) / 1e9) == 34


def test_score_traffic_is_counted_from_the_plan_and_the_stand_in_agrees(monkeypatch):
    small = va.naive_score_traffic((2, 3, 5, 7, 16))
    assert small["shape"] == (30, 7) and small["passes"] == 4 and small["bytes"] == 16 * 2 * 3 * 5 * 7
    long_rows = va.naive_score_traffic((1, 1, 2, 70000, 16))  # few long rows: the softmax's split_row reads S twice
    assert long_rows["passes"] == 5
    monkeypatch.setattr(va, "PLAN_MAX_SCORES", 0)  # every shape through the stand-in of S
    assert va.naive_score_traffic((2, 3, 5, 7, 16)) == small
    assert va.naive_score_traffic((1, 1, 2, 70000, 16)) == long_rows
    assert va.naive_score_traffic((8, 16, 4096, 4096, 128))["bytes"] == 16 * 8 * 16 * 4096 ** 2


# ----------------------------------------------------------------------------------------------------------
# The online softmax, step by step
# ----------------------------------------------------------------------------------------------------------


def softmax64(q, k, v):
    s = k.astype(np.float64) @ q.astype(np.float64) / math.sqrt(len(q))
    p = np.exp(s - s.max())
    return p @ v.astype(np.float64) / p.sum()


def outlier_rows():
    """Rows of make_inputs, each with an outlier of 40 sqrt(D) in q: scores spanning more than 80."""
    rows = []
    for seed in range(8):
        for sk in (7, 32, 50):
            q, k, v = (x[0, 0] for x in at.make_inputs((1, 1, 1, sk, 16), seed))
            q = q[0].copy()
            q[seed % 16] = 40 * math.sqrt(16) * (1 if seed % 2 else -1)  # make sure: one per row, either sign
            rows.append((q, k, v))
    return rows


@pytest.mark.parametrize("tile", [1, 3, 8, 16, 64])
def test_steps_reproduce_the_float64_softmax_on_rows_with_outliers(tile):
    for q, k, v in outlier_rows():
        s = k.astype(np.float64) @ q / math.sqrt(16)
        assert s.max() - s.min() > 80  # exp() of an unshifted score would overflow float32
        run = va.online_softmax_steps(q, k, v, tile)
        np.testing.assert_allclose(run["out"], softmax64(q, k, v), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(run["out"], at.reference(q[None, None, None], k[None, None], v[None, None])[0, 0, 0],
                                   rtol=1e-6, atol=1e-6)
        assert run["steps"][-1]["m_new"] == pytest.approx(s.max())
        assert all(0 <= st["alpha"] <= 1 for st in run["steps"])


@pytest.mark.parametrize("tile", [1, 3, 8])
def test_without_the_rescale_the_steps_are_wrong(tile):
    caught = 0
    for q, k, v in outlier_rows():
        run = va.online_softmax_steps(q, k, v, tile)
        grew = [st for st in run["steps"][1:] if st["m_new"] > st["m_old"] + 1]  # the max rose after the first tile
        broken = va.online_softmax_steps(q, k, v, tile, rescale=False)
        if grew:
            assert not np.allclose(broken["out"], softmax64(q, k, v), rtol=1e-3, atol=1e-3)
            caught += 1
        else:  # a max reached in the first tile never needs a rescale: both agree
            np.testing.assert_allclose(broken["out"], run["out"], rtol=1e-12)
    assert caught >= 5  # the rows exercise the rescale, so this test can fail


def test_the_example_row_grows_its_max_a_little_then_a_lot_then_not():
    q, k, v = va.rescaling_example()
    alphas = [st["alpha"] for st in va.online_softmax_steps(q, k, v, 8)["steps"]]
    assert len(alphas) == 4 and alphas[0] == 0.0  # the first tile clears the empty state
    assert 0.05 < alphas[1] < 0.9 and alphas[2] < 1e-3 and alphas[3] == 1.0


def test_the_online_figure_ends_at_the_softmax_and_is_legible():
    fig = viz.online_rescaling()
    data = fig.gpukernels_data
    np.testing.assert_allclose(data["out"], data["reference"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(data["kernel"], data["reference"], rtol=1e-5, atol=1e-5)  # attention.tiled, float32
    assert not np.allclose(data["no_rescale"], data["reference"], rtol=1e-2)
    assert [st["keys"] for st in data["steps"]] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert legibility_problems(fig) == []


def test_the_online_figure_refuses_a_wrong_update(monkeypatch):
    steps = va.online_softmax_steps
    monkeypatch.setattr(va, "online_softmax_steps", lambda q, k, v, tile=8, **kw: steps(q, k, v, tile, rescale=False)
                        if not kw else steps(q, k, v, tile, **kw))
    with pytest.raises(RuntimeError, match="does not reproduce the softmax"):
        viz.online_rescaling()


def test_bad_rows_are_refused_with_what_was_given():
    q, k, v = va.rescaling_example()
    with pytest.raises(ValueError, match=r"q must be one row \(D,\).*k \(32, 7\)"):
        va.online_softmax_steps(q, k[:, :7], v)
    with pytest.raises(ValueError, match="tile must be a whole number of keys >= 1; got 0"):
        va.online_softmax_steps(q, k, v, tile=0)
    for scale in (-1.0, 0.0, float("nan"), "0.5"):  # the launchers' rule for scale, not a silent float()
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            va.online_softmax_steps(q, k, v, scale=scale)


# ----------------------------------------------------------------------------------------------------------
# The gallery
# ----------------------------------------------------------------------------------------------------------


def test_the_gallery_lists_both_figures_under_the_attention_lesson():
    specs = {s.name: s for s in viz.figure_specs()}
    assert specs["attention_traffic"].section == specs["attention_online_softmax"].section == "Lesson: attention"
    assert specs["attention_traffic"].needs == "tracer"
    assert "attention_traffic" not in {s.name for s in viz.figure_specs(lessons=["softmax"])}
