"""The tensor-core lesson's figures read the layout code the kernels and the simulator use, and show what it says."""

import numpy as np
import pytest

from gpukernels import viz
from gpukernels.viz import fragments


@pytest.mark.parametrize("shape", sorted(fragments.SHAPES))
def test_every_element_of_a_b_and_c_is_held_by_exactly_one_lane(shape):
    owners = fragments.fragment_owners(shape)
    _, a_shape, b_shape, na, nb = fragments.SHAPES[shape]
    for name, dims, per_lane in (("A", a_shape, na), ("B", b_shape, nb), ("C", (16, 8), 4)):
        lane, elem = owners[name]
        assert lane.shape == dims
        assert sorted(np.bincount(lane.ravel(), minlength=32)) == [per_lane] * 32  # each lane holds per_lane


def test_the_figure_says_what_the_ptx_isa_table_says():
    # PTX ISA, mma.m16n8k16 fragments: groupID = lane >> 2, threadID_in_group = lane % 4; lane 5 is (1, 1)
    owners = fragments.fragment_owners("m16n8k16")
    lane, elem = owners["A"]
    assert (lane[1, 2], elem[1, 2]) == (5, 0) and (lane[1, 3], elem[1, 3]) == (5, 1)  # a0, a1: row g, cols 2t, 2t+1
    assert (lane[9, 2], elem[9, 2]) == (5, 2) and (lane[1, 10], elem[1, 10]) == (5, 4)  # a2: row g + 8; a4: col + 8
    lane, elem = owners["B"]
    assert (lane[2, 1], elem[2, 1]) == (5, 0) and (lane[10, 1], elem[10, 1]) == (5, 2)  # b0: row 2t, col g; b2: +8
    lane, elem = owners["C"]
    assert (lane[1, 2], elem[1, 2]) == (5, 0) and (lane[9, 3], elem[9, 3]) == (5, 3)
    fig = viz.mma_fragments()
    assert fig.gpukernels_data["A"]["lane"][1][2] == 5


def test_a_wrong_table_is_refused(monkeypatch):
    from gpukernels import _mma

    monkeypatch.setattr(_mma, "c_frag_coords", lambda lane, i: (lane % 16, i))  # two lanes on one element
    with pytest.raises(ValueError, match="is held by lanes"):
        fragments.fragment_owners("m16n8k16")
    with pytest.raises(ValueError, match="shape must be one of"):
        fragments.fragment_owners("m16n8k32")


def test_ldmatrix_banks_before_and_after_the_swizzle():
    phases = fragments.ldmatrix_phases()
    assert phases[("B", "ldmatrix")]["passes"] == 8  # 128-byte rows: every row of the pass starts in bank 0
    assert phases[("A", "ldmatrix")]["passes"] == 4  # 64-byte rows: two starting bank groups
    for tile in ("A", "B"):
        assert sorted(phases[(tile, "swizzled")]["slots"]) == list(range(8))  # one pass
    fig = viz.ldmatrix_banks()
    assert fig.gpukernels_data["B-swizzled"]["passes"] == 1


@pytest.mark.parametrize("x", [1 / 3, np.pi, -2.5e-3, 1.0, 3.4e38, 1e-40])
def test_the_tf32_split_figure_is_the_simulators_split(x):
    from gpukernels import _mma

    p = fragments.tf32_parts(np.float32(x))
    x32 = np.float32(x)
    assert p["big"] == float(_mma._tf32(x32)) and p["small"] == float(_mma._tf32(np.float32(x32 - np.float32(p["big"]))))
    assert p["big"] + p["small"] + p["rest"] == float(x32)  # the three parts are x, exactly
    for name in ("big", "small"):  # a TF32 part: at most 11 significant bits, in x's columns
        ones = [i for i, b in enumerate(p["bits"][name]) if b]
        assert not ones or ones[-1] - ones[0] < 11, (name, p["bits"][name])
    # the bits are the values: sum of bit * 2^(e + 1 - column)
    for name in ("x", "big", "small", "rest"):
        mag = sum(b * 2.0 ** (p["exponent"] + 1 - c) for c, b in enumerate(p["bits"][name]))
        assert mag == abs(p[name]) and (p["signs"][name] == "-") == (p[name] < 0)
    if abs(x32) >= np.finfo(np.float32).tiny:  # a normal float: 22 of its 24 bits kept, the rest below 2^-21 of its
        assert abs(p["rest"]) <= 2.0 ** (p["exponent"] - 21)  # lead (a subnormal has fewer bits, TF32 fewer still)


def test_the_tf32_split_figure_refuses_what_has_no_significand():
    for bad in (0.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="finite, nonzero float32"):
            fragments.tf32_parts(np.float32(bad))
    fig = viz.tf32_split()
    assert fig.gpukernels_data["bits"]["big"][:13] == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]  # 1/3: 0.0101...
