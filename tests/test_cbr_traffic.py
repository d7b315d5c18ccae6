"""The CBR docstring's traffic formulas (cbr.global_loads) equal what the tracer counts, exactly."""

import pytest

import gpukernels
from gpukernels import cbr


@pytest.mark.parametrize("shape,padding", [((1, 3, 7, 6, 5, 3, 3), 1), ((1, 1, 2, 66, 17, 1, 1), 0),
                                           ((1, 2, 5, 5, 3, 1, 1), 0), ((1, 2, 6, 4, 2, 5, 5), 2),
                                           ((1, 1, 3, 4, 65, 1, 1), 0)])  # K = 65: two channel blocks
@pytest.mark.parametrize("version", list(cbr.VERSIONS))
def test_counted_traffic_matches_formula(version, shape, padding):
    if gpukernels.MODE != "sim":
        pytest.skip("the tracer runs on the simulator")
    x, w, b = cbr.make_inputs(shape, 1)
    with gpukernels.trace() as t:
        cbr.VERSIONS[version](x, w, b, padding=padding)
    counted = {"x": 0, "w": 0, "b": 0, "y_loads": 0, "y_stores": 0}
    for a in t.traffic("global"):
        if a.array == "y":
            counted["y_loads"] += a.loads
            counted["y_stores"] += a.stores
        else:
            counted[a.array] += a.loads
    assert counted == cbr.global_loads(version, x.shape, w.shape, padding)


@pytest.mark.parametrize("fused_version", ["fused_direct", "implicit_gemm"])
def test_fusion_saves_the_two_extra_passes(fused_version):
    shape = (2, 5, 9, 70, 17, 3, 3)  # formulas only, nothing is traced
    n, c, h, wd, k, r, s = shape
    naive = cbr.global_loads("naive", (n, c, h, wd), (k, c, r, s))
    fused = cbr.global_loads(fused_version, (n, c, h, wd), (k, c, r, s))
    outputs = n * k * h * wd
    assert naive["y_loads"] + naive["y_stores"] - fused["y_stores"] == 4 * outputs  # 2 reads + 2 extra writes
    assert fused["x"] < naive["x"] and fused["w"] < naive["w"]
