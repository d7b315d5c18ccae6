"""Step 9 of the tensor-core ladder, ``persistent`` (step 8's warp-specialized kernel, one block per SM walking tiles
of C, the ring's position carried from tile to tile):

* the step against float64 at small odd shapes into NaN-poisoned outputs, through the persistent kernel where rows
  are 16-byte multiples apart and step 6's loads elsewhere;
* grids capped below the tile count, so that each block computes several tiles (and its last tile is partial) and
  both barriers' phase bits carry over from one tile to the next -- with rings of 2 and 4 stages, K shorter than the
  ring and longer, one and two consumer warpgroups;
* the bugs of this step, planted in a copy of its source (same file, same lines): the ring's position restarted for
  each tile by the consumers, and a tile's last stage never released -- each is an error naming the kernel's line.

Its PTX (setmaxnreg honoured, both barriers waited on, the bulk copies, wgmma not serialized, no local memory) is
checked with the other tensor-core kernels in tests/test_tensor_core.py.
"""

import inspect
import types

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import tensor_core as tc
from gpukernels.check import compare

from .test_tma import TOLERANCE, _line
from .test_tma import _step as tma_step

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="the simulator's mbarrier checks")

if SIM:
    from gpukernels.sim import AsyncHazardError


def _step(shape, seed, kernel=None):
    tma_step(shape, seed, kernel, tc.persistent)


def _run(shape, seed, blocks, kernel=None, module=None):
    """The persistent kernel (``kernel``, or ``module``'s default one) at ``shape`` on a grid of at most ``blocks``
    blocks, into a NaN-poisoned output, against float64."""
    from gpukernels.tensor_core.k09_persistent import persistent_launch

    kernel = kernel or (module.make_persistent_kernel() if module else tc.persistent_kernel)
    a, b = tc.make_inputs(shape, seed)
    out = np.full(shape[:2], np.nan, np.float32)
    launches = persistent_launch(kernel, cuda.to_device(a), cuda.to_device(b), out, blocks=blocks)
    assert launches[-1].grid[0] == min(blocks, -(-shape[0] // kernel.tile[0]) * -(-shape[1] // kernel.tile[1]))
    for launch in launches:
        launch()
    check = compare(out, tc.reference(a, b), TOLERANCE)
    assert check.ok, f"{shape} blocks={blocks} seed={seed}: {check}"


@pytest.mark.parametrize("shape", [(33, 40, 24), (130, 72, 72)], ids=str)
def test_the_step_matches_float64(shape, seed):
    _step(shape, seed, tc.persistent_kernel)


def test_the_step_on_unaligned_rows_takes_step_6s_loads(seed):
    _step((33, 40, 20), seed, tc.wgmma_sync_kernel)


def test_the_grid_is_one_block_per_sm_at_most():
    from gpukernels._launch import sm_count

    a, b = tc.make_inputs((4096, 4096, 64), 0)
    assert tc.persistent.launches(a, b)[-1].grid == (sm_count(),)  # 512 tiles of 128 x 256
    a, b = tc.make_inputs((130, 264, 64), 0)
    assert tc.persistent.launches(a, b)[-1].grid == (4,)  # 2 x 2 tiles: one block each


def test_blocks_walk_several_tiles_and_the_ring_carries_over(seed):
    # 3 x 2 = 6 tiles (the last row of tiles partial: 300 = 2 x 128 + 44) on 2 blocks: 3 tiles each; 4 k tiles per
    # tile through 4 stages, so each stage's phase bit flips from tile to tile
    _run((300, 264, 200), seed, blocks=2)


@pytest.mark.slow
@pytest.mark.parametrize("bm,bn,stages,shape,blocks", [
    (64, 128, 2, (200, 328, 648), 3),  # one consumer warpgroup, a ring of 2: 11 k tiles per tile, 12 tiles on 3
    (128, 128, 4, (257, 264, 40), 4),  # one k tile per tile, shorter than the ring: 9 tiles on 4 blocks
    (128, 256, 3, (260, 520, 328), 5),  # 3 x 3 tiles, 6 k tiles through 3 stages, blocks with 1 or 2 tiles
])
def test_other_block_shapes_and_rings(bm, bn, stages, shape, blocks, seed):
    from gpukernels.tensor_core.k09_persistent import make_persistent_kernel

    _run(shape, seed, blocks, make_persistent_kernel(bn, stages, bm=bm))


@sim_only
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_the_step_is_hazard_free_under_shuffled_schedules(seed):
    from gpukernels import sim

    with sim.configure(shuffle=True, seed=seed):
        _run((300, 264, 200), seed, blocks=2)


# ----------------------------------------------------------------------------------------------------------
# The bugs of this step, planted in a copy of its source
# ----------------------------------------------------------------------------------------------------------


def _mutant(old: str, new: str):
    """k09_persistent's kernel factory with ``old`` replaced by ``new`` on the same line: compiled under the module's
    own file name, so that the simulator names the real file's lines."""
    from gpukernels.tensor_core import k09_persistent as k09

    src = inspect.getsource(k09)
    assert src.count(old) == 1, old
    src = src.replace(old, new).split("\n\npersistent_kernel = ")[0]  # the factory, not the registered version
    module = types.ModuleType("k09_persistent_mutant")
    module.__file__, module.__package__ = k09.__file__, k09.__package__  # (its relative imports)
    exec(compile(src, k09.__file__, "exec"), module.__dict__)  # noqa: S102 - the project's own source, one line changed
    return module, k09


@sim_only
def test_consumers_that_restart_the_ring_for_each_tile_are_caught(seed):
    # the consumers count the ring from the tile's own k tile, as step 8 could: on the block's second tile they wait
    # on the phase of the first tile's stage, which completed long ago, and read a stage the producer is refilling
    module, k09 = _mutant("wait_full(full, it, stages)", "wait_full(full, kt, stages)")
    with pytest.raises(AsyncHazardError, match=r"wrong phase.*returned at once") as info:
        _run((300, 264, 200), seed, blocks=2, module=module)
    assert f"k09_persistent.py:{_line(k09, 'mma(acc, smem, sa')}" in str(info.value), str(info.value)


@sim_only
def test_a_tiles_last_stage_never_released_hangs_the_producer(seed):
    # step 8 never released its last stage (the block ended); a persistent block must, or its producer waits for
    # that stage forever on the next tile while the consumers wait for the next tile's copies
    module, k09 = _mutant("release(empty, it - min(keep, k_tiles) + j, stages, releases)", "pass")
    with pytest.raises(AsyncHazardError, match=r"deadlock.*mbarrier empty") as info:
        _run((300, 264, 200), seed, blocks=2, module=module)
    assert f"k09_persistent.py:{_line(k09, 'wait_empty(empty, it, stages)')}" in str(info.value), str(info.value)
    assert f"k09_persistent.py:{_line(k09, 'wait_full(full, it, stages)')}" in str(info.value), str(info.value)


def test_optimized_chooses_the_step_where_its_tiles_fill_half_the_sms():
    # measured on an H100: 1.01x cuBLAS at 4096^3, 0.97x at 8192^3 (step 6: 0.74x, 0.73x)
    for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (1408, 1536, 512)]:  # the last: 66 tiles, exactly half
        choice = tc.choose(*shape, hopper=True, sms=132)
        assert choice.step == "persistent" and "persistent blocks" in choice.why, choice
    assert tc.choose(1280, 1536, 512, hopper=True, sms=132).step == "wgmma"  # 60 tiles: one-warpgroup blocks
    assert tc.choose(4096, 4096, 4096, hopper=False, sms=132).step == "block_tiles"  # no TMA before Hopper
    unaligned = tc.choose(4095, 4097, 4093, aligned=False, hopper=True, sms=132)
    assert unaligned.step == "persistent" and unaligned.config["padded"] and "tensor map" in unaligned.why


def test_optimized_runs_it_on_padded_copies_of_unaligned_rows(monkeypatch, seed):
    # on a 1-SM GPU the dispatcher's rule 2 takes small odd shapes: K and N padded to 8, then the persistent kernel
    from gpukernels.tensor_core import k12_optimized as opt

    monkeypatch.setattr(opt, "sm_count", lambda: 1)
    shape = (70, 261, 75)
    a, b = tc.make_inputs(shape, seed)
    assert [x.kernel for x in tc.optimized.launches(a, b)] == [opt.pad_kernel, opt.pad_kernel, tc.persistent_kernel]
    out = np.full(shape[:2], np.nan, np.float32)
    tc.optimized(a, b, out=out)
    assert compare(out, tc.reference(a, b), TOLERANCE).ok
