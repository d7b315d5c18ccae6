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
