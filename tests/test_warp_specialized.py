"""Step 8 of the tensor-core ladder, ``warp_specialized`` (a producer warpgroup issuing TMA copies, consumer warpgroups
issuing wgmma, a full and an empty mbarrier per stage, setmaxnreg), and the ``setmaxnreg`` twin in the simulator:

* the step against float64 at small odd shapes into NaN-poisoned outputs, through the warp-specialized kernel where
  rows are 16-byte multiples apart (several trips round the ring: both barriers' phase bits flip) and step 6's loads
  elsewhere;
* the classic bug planted -- a producer that does not wait for the stage's empty barrier -- is an early overwrite
  naming the producer's line and the copy's; a consumer that releases its stage before its wgmma is done lets the
  producer's copy overwrite the wgmma's operands (an early overwrite naming both lines); a consumer that never
  releases its stage is a deadlock at the producer's wait;
* setmaxnreg misused (a count that is not a multiple of 8 from 24 to 256, executed by part of a warp, or by the warps
  of one warpgroup with different counts) is an error naming the line.

Its PTX (setmaxnreg.inc and .dec honoured by ptxas, both barriers waited on, the bulk copies, wgmma, no local memory)
is checked with the other tensor-core kernels in tests/test_tensor_core.py.
"""

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import tensor_core as tc
from gpukernels._tma import setmaxnreg_dec, setmaxnreg_inc
from gpukernels.check import compare

from .test_tma import TOLERANCE, _line
from .test_tma import _step as tma_step

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="the simulator's mbarriers and setmaxnreg checks")

if SIM:
    from gpukernels.sim import AsyncHazardError


@pytest.fixture
def k08():
    from gpukernels.tensor_core import k08_warp_specialized

    return k08_warp_specialized


def _step(shape, seed, kernel=None):
    tma_step(shape, seed, kernel, tc.warp_specialized)


@pytest.mark.parametrize("shape", [(33, 40, 24), (130, 72, 72), (17, 264, 328)], ids=str)
def test_the_step_matches_float64(shape, seed):
    # (17, 264, 328): 6 k tiles through 4 stages, so stages 0 and 1 are filled twice (both barriers' phase bits flip)
    # and a second column tile whose boxes of B lie wholly past N = 264 (zeros)
    _step(shape, seed, tc.warp_specialized_kernel)


@pytest.mark.parametrize("shape", [(33, 40, 20), (1, 1, 1)], ids=str)
def test_the_step_on_unaligned_rows_takes_step_6s_loads(shape, seed):
    _step(shape, seed, tc.wgmma_sync_kernel)


def test_a_ring_of_two_stages_where_the_consumers_wait_before_the_copies_are_issued(seed):
    # with 2 stages the consumers reach tile 2's full barrier before the producer has refilled stage 0: its copies
    # land on threads already waiting (one consumer warpgroup, 64 x 64 tiles of C; 5 k tiles)
    from gpukernels.tensor_core.k07_tma import tma_launch
    from gpukernels.tensor_core.k08_warp_specialized import make_warp_specialized_kernel

    shape = (40, 72, 328)
    a, b = tc.make_inputs(shape, seed)
    out = np.full(shape[:2], np.nan, np.float32)
    for launch in tma_launch(make_warp_specialized_kernel(64, 2, bm=64), cuda.to_device(a), cuda.to_device(b), out):
        launch()
    assert compare(out, tc.reference(a, b), TOLERANCE).ok


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(257, 520, 584), (130, 264, 1000)], ids=str)
def test_the_step_at_larger_shapes(shape, seed):
    _step(shape, seed, tc.warp_specialized_kernel)


@pytest.mark.slow
@pytest.mark.parametrize("bm,bn,stages", [(64, 128, 8), (128, 128, 4), (128, 256, 2)])
def test_the_steps_other_block_shapes(bm, bn, stages, seed):
    # one consumer warpgroup (bm 64), narrower tiles, and a ring of 2: every stage refilled 5 times
    from gpukernels.tensor_core.k07_tma import tma_launch
    from gpukernels.tensor_core.k08_warp_specialized import make_warp_specialized_kernel

    shape = (200, 328, 648)
    a, b = tc.make_inputs(shape, seed)
    out = np.full(shape[:2], np.nan, np.float32)
    kernel = make_warp_specialized_kernel(bn, stages, bm=bm)
    for launch in tma_launch(kernel, cuda.to_device(a), cuda.to_device(b), out):
        launch()
    assert compare(out, tc.reference(a, b), TOLERANCE).ok


@sim_only
@pytest.mark.slow
# two shuffled thread orders (seeds 1 and 2), as test_persistent.py and test_attention_hopper.py run theirs; a
# third seed was a third order of the same launches at the same shape
@pytest.mark.parametrize("seed", [1, 2])
def test_the_step_is_hazard_free_under_shuffled_schedules(seed):
    from gpukernels import sim

    with sim.configure(shuffle=True, seed=seed):
        _step((130, 264, 328), seed, tc.warp_specialized_kernel)


# ----------------------------------------------------------------------------------------------------------
# The classic bugs, planted
# ----------------------------------------------------------------------------------------------------------


@sim_only
def test_a_producer_that_skips_the_empty_wait_overwrites_a_stage_naming_both_lines(monkeypatch, k08):
    monkeypatch.setattr(k08, "wait_empty", lambda empty, kt, stages: None)
    with pytest.raises(AsyncHazardError, match=r"early overwrite.*arms mbarrier full\[\d\] for a new fill.*wait on "
                                               r"the stage's empty barrier") as info:
        _step((17, 264, 328), 0)  # 6 k tiles: tile 4 goes into stage 0 (or 5 into 1) before its tile was consumed
    from gpukernels.tensor_core import k07_tma  # (the stage's copies: step 7's load_stage, which step 8 shares)

    assert info.value.hazard == "early overwrite"
    assert info.value.location.endswith(f":{_line(k07_tma, 'mbarrier_arrive_expect_tx(full, s, stage_bytes)')}")
    assert info.value.issue_location.endswith(f":{_line(k07_tma, 'tma_load_2d(smem, base, ta')}"), str(info.value)


@sim_only
def test_a_release_before_the_wgmma_is_done_lets_the_producer_overwrite_its_operands(monkeypatch, k08):
    from gpukernels.tensor_core import k07_tma

    real = k08.wgmma_wait
    monkeypatch.setattr(k08, "wgmma_wait", lambda n: real(n + 1))  # tile kt - 1 released with its products pending
    with pytest.raises(AsyncHazardError, match=r"issues a TMA copy that writes .* while the wgmma_n256 .* may still "
                                               r"be reading it") as info:
        _step((17, 264, 328), 0)
    assert info.value.hazard == "early overwrite"
    assert info.value.location.endswith(f":{_line(k07_tma, 'tma_load_2d(smem, base, ta')}"), str(info.value)
    assert info.value.issue_location.endswith(f":{_line(k08, 'mma(acc, smem')}"), str(info.value)


@sim_only
def test_consumers_that_never_release_a_stage_hang_the_producer(monkeypatch, k08):
    monkeypatch.setattr(k08, "release", lambda empty, kt, stages, pred: None)
    # the producer waits for the release of tile 0 before refilling its stage with tile 4; the consumers wait for
    # tile 4: both named
    with pytest.raises(AsyncHazardError, match=r"deadlock.*mbarrier empty\[0\].*8 of its 8 arrivals never") as info:
        _step((17, 264, 328), 0)
    assert f"k08_warp_specialized.py:{_line(k08, 'wait_empty(empty, kt, stages)')}" in str(info.value)
    assert f"k08_warp_specialized.py:{_line(k08, 'wait_full(full, kt, stages)')}" in str(info.value)


# ----------------------------------------------------------------------------------------------------------
# setmaxnreg in the simulator: checked, otherwise nothing
# ----------------------------------------------------------------------------------------------------------


@cuda.jit
def roles(out, how):
    wg = cuda.threadIdx.x >> 7
    if how == 0:  # right: one role per warpgroup
        if wg == 0:
            setmaxnreg_dec(40)
        else:
            setmaxnreg_inc(232)
    elif how == 1:  # one thread of the warpgroup
        if cuda.threadIdx.x == 0:
            setmaxnreg_dec(40)  # partial warp
    elif how == 2:  # the warps of warpgroup 0 disagree
        if cuda.threadIdx.x < 64:
            setmaxnreg_dec(40)
        else:
            setmaxnreg_dec(48)  # warps disagree
    elif how == 3:
        setmaxnreg_inc(36)  # not a multiple of 8
    out[cuda.threadIdx.x] = wg


@sim_only
@pytest.mark.parametrize("how,threads,message,marker", [
    (1, 256, r"needs all 32 lanes", "# partial warp"),
    (2, 256, r"warp \d of the same warpgroup 0 executed setmaxnreg_dec\(\d\d\)", "# warps disagree"),
    (3, 128, r"a multiple of 8 from 24 to 256", "# not a multiple of 8"),
    (0, 96, r"without its warp 3 \(the block has no such warp", "setmaxnreg_dec(40)\n"),
], ids=["part_of_a_warp", "warps_disagree", "count", "partial_warpgroup"])
def test_setmaxnreg_misuse_is_an_error_naming_the_line(how, threads, message, marker):
    out = np.zeros(threads, np.int32)
    with pytest.raises(Exception, match=message) as info:
        roles[1, threads](out, how)
    if marker.endswith("\n"):
        line = _line(roles, "setmaxnreg_dec(40)")
        assert f"test_warp_specialized.py:{line}" in str(info.value), str(info.value)
    else:
        assert f"test_warp_specialized.py:{_line(roles, marker)}" in str(info.value), str(info.value)


@sim_only
def test_setmaxnreg_by_whole_warpgroups_does_nothing_else():
    out = np.zeros(384, np.int32)
    roles[1, 384](out, 0)
    assert (out == np.arange(384) // 128).all()


def test_optimized_takes_the_roles_through_step_9():
    for shape in ((4096, 4096, 4096), (1024, 1024, 1024), (128, 4096, 4096)):
        assert tc.choose(*shape, hopper=True, sms=132).step != "warp_specialized"
    assert "by a producer warpgroup" in tc.choose(8192, 8192, 8192, hopper=True, sms=132).why
