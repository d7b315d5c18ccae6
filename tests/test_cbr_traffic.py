"""The CBR docstring's traffic formulas (cbr.global_loads) equal what the tracer counts, exactly."""

import numpy as np
import pytest

import gpukernels
from gpukernels import cbr
from gpukernels.check import supports


@pytest.mark.parametrize("shape,padding", [((1, 3, 7, 6, 5, 3, 3), 1), ((1, 1, 2, 66, 17, 1, 1), 0),
                                           ((1, 2, 5, 5, 3, 1, 1), 0),
                                           # 5 x 5, padding 2: 22 s of tracing over the versions; the formulas at
                                           # 5 x 5 are also checked against a count below, in the default tier
                                           pytest.param((1, 2, 6, 4, 2, 5, 5), 2, marks=pytest.mark.slow),
                                           ((1, 1, 3, 4, 65, 1, 1), 0)])  # K = 65: two channel blocks
@pytest.mark.parametrize("version", list(cbr.VERSIONS))
def test_counted_traffic_matches_formula(version, shape, padding):
    if gpukernels.MODE != "sim":
        pytest.skip("the tracer runs on the simulator")
    if not supports("cbr", version, shape):
        pytest.skip(f"{version} takes 3 x 3 filters only")
    x, w, b = cbr.make_inputs(shape, 1)
    with gpukernels.trace(count_local=False) as t:  # global traffic only
        cbr.VERSIONS[version](x, w, b, padding=padding)
    counted = {"x": 0, "w": 0, "b": 0, "y_loads": 0, "y_stores": 0}
    for a in t.traffic("global"):
        if a.array in ("x", "w", "b"):
            counted[a.array] += a.loads
        else:  # y, and the arrays a version makes for itself (winograd's transforms u, v and m)
            counted[f"{a.array}_loads"] = counted.get(f"{a.array}_loads", 0) + a.loads
            counted[f"{a.array}_stores"] = counted.get(f"{a.array}_stores", 0) + a.stores
    assert counted == cbr.global_loads(version, x.shape, w.shape, padding)


def _in_bounds_taps(h, wd, r, s, padding):
    """Taps (r, s) of every output pixel that land inside the image, counted one by one."""
    ho, wo = h + 2 * padding - r + 1, wd + 2 * padding - s + 1
    i, j, rr, ss = np.meshgrid(np.arange(ho), np.arange(wo), np.arange(r), np.arange(s), indexing="ij")
    hi, wi = i + rr - padding, j + ss - padding
    return int(((0 <= hi) & (hi < h) & (0 <= wi) & (wi < wd)).sum()), ho * wo


def _staged_halo(h, wd, r, s, padding, th, tw):
    """In-bounds elements of every (th + r - 1) x (tw + s - 1) input tile with halo, counted element by element."""
    ho, wo = h + 2 * padding - r + 1, wd + 2 * padding - s + 1
    total = 0
    for ti in range(-(-ho // th)):
        for tj in range(-(-wo // tw)):
            rows = np.arange(th + r - 1) + ti * th - padding
            cols = np.arange(tw + s - 1) + tj * tw - padding
            total += int(((rows >= 0) & (rows < h)).sum()) * int(((cols >= 0) & (cols < wd)).sum())
    return total


@pytest.mark.parametrize("shape,padding", [((2, 5, 9, 70, 17, 3, 3), 1), ((1, 3, 20, 13, 70, 5, 5), 2),
                                           ((3, 2, 6, 6, 4, 1, 1), 0)])
def test_formulas_against_a_count_made_here(shape, padding):
    """cbr.global_loads against counts made element by element here, from each version's description, at shapes
    too large to trace (so this runs on a GPU machine too): the naive conv reads x and w once per in-bounds tap,
    the bias and ReLU passes add 2 loads and 2 stores of y per output; fused_direct stages each tile with its halo
    once per block of KB output channels and stores y once; implicit_gemm gathers each tap once per block of IG_BM
    output channels and reads all of W once per block of IG_BN pixels; split_c adds its three passes over y."""
    n, c, h, wd, k, r, s = shape
    taps, pixels = _in_bounds_taps(h, wd, r, s, padding)
    outputs = n * k * pixels
    got = {v: cbr.global_loads(v, (n, c, h, wd), (k, c, r, s), padding) for v in cbr.VERSIONS
           if supports("cbr", v, shape)}
    assert got["naive"] == {"x": n * k * c * taps, "w": n * k * c * taps, "b": outputs,
                            "y_loads": 2 * outputs, "y_stores": 3 * outputs}
    ho, wo = h + 2 * padding - r + 1, wd + 2 * padding - s + 1
    tiles = -(-ho // cbr.TH) * -(-wo // cbr.TW)
    kblocks = -(-k // cbr.KB)
    assert got["fused_direct"] == {"x": n * kblocks * c * _staged_halo(h, wd, r, s, padding, cbr.TH, cbr.TW),
                                   "w": n * tiles * k * c * r * s, "b": outputs, "y_loads": 0, "y_stores": outputs}
    pblocks = -(-n * pixels // cbr.IG_BN)
    assert got["implicit_gemm"] == {"x": -(-k // cbr.IG_BM) * n * c * taps, "w": pblocks * k * c * r * s,
                                    "b": pblocks * (cbr.IG_BN // 8) * k, "y_loads": 0, "y_stores": outputs}
    # split_c: the same gathers and W reads for its tile (the slices partition the channels), then y starts at the
    # bias (b loaded and y stored once per output), every slice adds with an atomic (a load and a store), and the
    # ReLU pass loads and stores y once more
    zeros = [np.zeros(sh, np.float32) for sh in ((n, c, h, wd), (k, c, r, s), (k,))]
    launches = cbr.VERSIONS["split_c"].launches(*zeros, padding=padding)
    conv = next(la for la in launches if la.kernel not in (cbr.bias_fill_kernel, cbr.relu_kernel))
    bn, slices = conv.block[0], conv.grid[2]
    xw = {"x": -(-k // cbr.IG_BM) * n * c * taps, "w": -(-n * pixels // bn) * k * c * r * s}
    if slices == 1:  # one k tile of channels in all: nothing to slice, the plain kernel
        assert len(launches) == 1
        assert got["split_c"] == {**xw, "b": -(-n * pixels // bn) * (bn // 8) * k, "y_loads": 0, "y_stores": outputs}
    else:
        assert got["split_c"] == {**xw, "b": outputs, "y_loads": slices * outputs + outputs,
                                  "y_stores": outputs + slices * outputs + outputs}
    # fusion saves the bias and ReLU passes: 2 reads and 2 extra writes of y per output
    for fused in ("fused_direct", "implicit_gemm"):
        assert (got["naive"]["y_loads"] + got["naive"]["y_stores"]) - got[fused]["y_stores"] == 4 * outputs


def _patches(h, wd, padding, th, tw, m):
    """In-bounds elements of every m x m output tile's (m + 2) x (m + 2) input patch, counted element by element."""
    total = 0
    for ti in range(th):
        for tj in range(tw):
            rows, cols = np.arange(m + 2) + m * ti - padding, np.arange(m + 2) + m * tj - padding
            total += int(((rows >= 0) & (rows < h)).sum()) * int(((cols >= 0) & (cols < wd)).sum())
    return total


@pytest.mark.parametrize("shape,padding", [((2, 5, 9, 70, 17, 3, 3), 1), ((3, 70, 6, 7, 130, 3, 3), 0),
                                           ((1, 2, 5, 4, 3, 3, 3), 2), ((40, 3, 9, 9, 130, 3, 3), 1),
                                           ((2, 5, 2, 9, 7, 3, 3), 1), ((3, 4, 6, 5, 9, 3, 3), 1),
                                           ((16, 3, 17, 13, 5, 3, 3), 1)])
def test_winograd_formula_against_a_count_made_here(shape, padding):
    """winograd, F(m x m, 3 x 3) with a = m + 2: each tile's a x a patch of x once per channel (in-bounds elements
    only), w once; U, V and M each stored once; U read once per column of the products' blocks, V once per row of
    them (the block grid as the launch makes it), M once by the output transform, which also loads one bias per
    (channel, tile). m is read from the launch: 4 where it makes fewer multiplications and at least F4_MIN_TILES
    tiles of 4 x 4 (the fourth and last shapes), else 2."""
    n, c, h, wd, k, r, s = shape
    ho, wo = h + 2 * padding - 2, wd + 2 * padding - 2
    x, w, b = (np.zeros(sh, np.float32) for sh in ((n, c, h, wd), (k, c, r, s), (k,)))
    products = cbr.winograd.launches(x, w, b, padding=padding)[2]
    cols, rows, a2 = products.grid
    m = {16: 2, 36: 4}[a2]
    fours = n * -(-ho // 4) * -(-wo // 4)
    assert m == (4 if 36 * fours < 16 * n * -(-ho // 2) * -(-wo // 2) and fours >= cbr.F4_MIN_TILES else 2)
    th, tw = -(-ho // m), -(-wo // m)
    p = n * th * tw
    assert cbr.global_loads("winograd", (n, c, h, wd), (k, c, r, s), padding) == {
        "x": n * c * _patches(h, wd, padding, th, tw, m), "w": 9 * k * c, "b": k * p, "y_loads": 0,
        "y_stores": n * k * ho * wo, "u_loads": a2 * cols * k * c, "u_stores": a2 * k * c,
        "v_loads": a2 * rows * c * p, "v_stores": a2 * c * p, "m_loads": a2 * k * p, "m_stores": a2 * k * p}
    with pytest.raises(ValueError, match="3 x 3"):
        cbr.global_loads("winograd", (n, c, h, wd), (k, c, 5, 5), padding)
