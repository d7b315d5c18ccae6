"""TMA copies and mbarriers (gpukernels._tma) and their simulator twin (gpukernels.sim._tma), and the tensor-core step
that uses them (tensor_core.tma).

* the tensor map's description: what the driver and the PTX ISA refuse is refused where the map is made, and the
  encoder hands the driver the description (dimensions innermost first, strides in bytes, the swizzle);
* a box lands as the hardware writes it: its rows' 16-byte chunks swizzled (0, 32, 64 and 128 bytes), elements past
  the tensor's edges zero; an mbarrier's phases and transaction counts are exact over several rounds of a ring;
* every planted misuse is an error naming the kernel's line: a wait on the wrong phase (the kernel would hang; or
  it returns at once and the stage is read before its copy landed), a stage read with no wait, a destination not
  1024-byte aligned, a box past its shared array, bytes announced that no copy brings, a box the map does not allow;
* the step against float64 at small odd shapes into NaN-poisoned outputs, through the TMA kernel where rows are
  16-byte multiples apart (its phase bit flipping past the fourth k tile) and step 6's loads elsewhere.

The PTX of the step (bulk tensor copies, mbarrier waits, wgmma, no local memory) is checked with the other
tensor-core kernels in tests/test_tensor_core.py.
"""

import inspect

import numpy as np
import pytest
from numba import cuda, types

import gpukernels
from gpukernels import tensor_core as tc
from gpukernels._tma import (TENSOR_MAPS, TensorMap, fence_mbarrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx,
                             mbarrier_init, mbarrier_try_wait, mbarrier_wait, tma_load_2d)
from gpukernels.check import compare

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="the simulator's TMA and mbarrier")

if SIM:
    from gpukernels.sim import AsyncHazardError, KernelError

TOLERANCE = 1e-3  # float16 products summed in float32 against float64 (tests/test_lessons.py's for tensor_core)


def _line(fn, marker: str) -> int:
    """The line of ``fn``'s source (a function, a kernel or a module) that carries ``marker``."""
    fn = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn
    lines, first = inspect.getsourcelines(fn)
    first = max(first, 1)  # (a module's lines are counted from 0)
    for n, text in enumerate(lines):
        if marker in text:
            return first + n
    raise AssertionError(f"no {marker!r} in {fn.__name__}")


# ----------------------------------------------------------------------------------------------------------
# The tensor map's description
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,box,swizzle,message", [
    ((64, 64), (64, 128), 128, r"128-byte swizzle a box row is at most 128 bytes \(64 elements"),
    ((64, 64), (300, 64), 128, r"box's rows must be 1 to 256"),
    ((64, 60), (8, 64), 128, r"rows must start a multiple of 16 bytes apart.*120 bytes"),
    ((64, 64), (8, 4), 0, r"box row must be a multiple of 16 bytes"),
    ((64, 64), (8, 64), 48, r"swizzle must be one of"),
])
def test_a_box_the_map_does_not_allow_is_refused_where_the_map_is_made(shape, box, swizzle, message):
    with pytest.raises(ValueError, match=message):
        TensorMap(np.zeros(shape, np.float16), box, swizzle=swizzle)


def test_encode_gives_the_driver_the_description(monkeypatch):
    drv = pytest.importorskip("cuda.bindings.driver")
    seen = {}

    def encode(*args):
        seen["args"] = args
        return drv.CUresult.CUDA_SUCCESS, drv.CUtensorMap()

    monkeypatch.setattr(drv, "cuTensorMapEncodeTiled", encode)
    a = np.zeros((100, 72), np.float16)  # rows of 144 bytes
    words = TensorMap(a, (128, 64), swizzle=128).encode()
    dtype, rank, address, dims, strides, box, elem, _, swizzle, _, fill = seen["args"]
    assert words.dtype == np.uint64 and words.size == 16  # the 128-byte CUtensorMap
    assert dtype == drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 and rank == 2
    ints = lambda xs: [int(x) for x in xs]  # noqa: E731
    assert address == a.ctypes.data and ints(dims) == [72, 100] and ints(strides) == [144]  # innermost first
    assert ints(box) == [64, 128] and ints(elem) == [1, 1]
    assert swizzle == drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert fill == drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE  # out-of-bounds elements: zero


# ----------------------------------------------------------------------------------------------------------
# The simulator's copies and barriers
# ----------------------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def init_barriers(bars, count):
    # thread 0 initialises every barrier of ``bars`` for ``count`` arrivals a phase, visible to the copy engine; then
    # to every thread
    if cuda.threadIdx.x == 0:
        for s in range(bars.shape[0]):
            mbarrier_init(bars, s, count)
        fence_mbarrier_init()
    cuda.syncthreads()


@cuda.jit(extensions=[TENSOR_MAPS])
def one_box(tmap, out, row, col, nbytes):
    smem = cuda.shared.array(2048, types.uint8)
    bars = cuda.shared.array(1, types.uint64)
    t = cuda.threadIdx.x
    init_barriers(bars, 1)
    if t == 0:
        mbarrier_arrive_expect_tx(bars, 0, nbytes)
        tma_load_2d(smem, 0, tmap, row, col, bars, 0)
    mbarrier_wait(bars, 0, 0)
    for e in range(t, nbytes, cuda.blockDim.x):
        out[e] = smem[e]


def _landed(tensor: np.ndarray, box, row: int, col: int, swizzle: int) -> np.ndarray:
    """The bytes a box at (row, col) leaves in shared memory from a 1024-byte aligned destination: zeros past the
    tensor's edges, each row's 16-byte chunk c at c ^ (row % (swizzle / 16))."""
    rows, cols = box
    full = np.zeros((rows, cols), tensor.dtype)
    for r in range(rows):
        for c in range(cols):
            if 0 <= row + r < tensor.shape[0] and 0 <= col + c < tensor.shape[1]:
                full[r, c] = tensor[row + r, col + c]
    data = full.view(np.uint8).reshape(-1)
    out = np.zeros_like(data)
    for byte in range(data.size):
        at = byte ^ (((byte >> 7) & (swizzle // 16 - 1)) << 4) if swizzle else byte
        out[at] = data[byte]
    return out


@sim_only
@pytest.mark.parametrize("swizzle,dtype", [(128, np.float16), (64, np.float32), (32, np.float16), (0, np.float32)])
@pytest.mark.parametrize("row,col", [(3, 5), (-2, -3), (17, 40)], ids=["inside", "before", "past"])
def test_a_box_lands_swizzled_with_zeros_past_the_edges(swizzle, dtype, row, col):
    tensor = (np.arange(20 * 48) % 997 + 1).astype(dtype).reshape(20, 48)
    box = (8, (swizzle or 32) // np.dtype(dtype).itemsize)  # rows of the swizzle's span (32 bytes without)
    nbytes = box[0] * box[1] * np.dtype(dtype).itemsize
    out = np.zeros(nbytes, np.uint8)
    one_box[1, 32](TensorMap(cuda.to_device(tensor), box, swizzle=swizzle), out, row, col, nbytes)
    assert np.array_equal(out, _landed(tensor, box, row, col, swizzle))


@cuda.jit(extensions=[TENSOR_MAPS])
def ring(tmap, out, rounds):
    # two stages, each barrier expecting two arrivals per phase (thread 0's with the bytes, thread 1's alone); round
    # q copies rows 8 q .. 8 q + 7 into stage q % 2, and every thread waits on phase q // 2 of its barrier
    smem = cuda.shared.array(2048, types.float16)
    bars = cuda.shared.array(2, types.uint64)
    t = cuda.threadIdx.x
    init_barriers(bars, 2)
    for q in range(rounds):
        s = q % 2
        if t == 0:
            mbarrier_arrive_expect_tx(bars, s, 8 * 64 * 2)
            tma_load_2d(smem, s * 1024, tmap, 8 * q, 0, bars, s)
        if t == 1:
            mbarrier_arrive(bars, s)
        assert mbarrier_try_wait(bars, s, (q // 2) & 1)
        out[q, t] = smem[s * 1024 + t]  # row 0, chunk 0 (unswizzled in row 0): element t of row 8 q
        cuda.syncthreads()  # everyone has read stage s before round q + 2 refills it


@sim_only
def test_an_mbarrier_completes_one_phase_per_round_and_its_parity_flips():
    tensor = np.arange(48 * 64, dtype=np.float16).reshape(48, 64) % 1000
    out = np.zeros((6, 64), np.float16)
    ring[1, 64](TensorMap(cuda.to_device(tensor), (8, 64)), out, 6)
    assert np.array_equal(out, tensor[0::8, :64])


@cuda.jit(extensions=[TENSOR_MAPS])
def planted(tmap, out, what):
    smem = cuda.shared.array(2816, types.float16)  # 5.5 KB
    bars = cuda.shared.array(1, types.uint64)
    t = cuda.threadIdx.x
    init_barriers(bars, 1)
    if t == 0:
        dst = 0
        if what == 1:
            dst = 64  # byte 128: not the 1024 the 128-byte swizzle needs
        if what == 2:
            dst = 2560  # byte 5120: the box's 1 KB would end past the array's 5.5 KB
        mbarrier_arrive_expect_tx(bars, 0, 1024 + (16 if what == 3 else 0))
        tma_load_2d(smem, dst, tmap, 0, 0, bars, 0)  # marker: copy
    if what == 4:
        out[t] = smem[t]  # marker: read without a wait
    mbarrier_wait(bars, 0, 0)
    if what == 5:
        mbarrier_wait(bars, 0, 1)  # marker: the next phase, which no one fills
    out[t] = smem[t]


def _run_planted(what: int):
    tensor = np.ones((8, 64), np.float16)
    planted[1, 32](TensorMap(cuda.to_device(tensor), (8, 64)), np.zeros(32, np.float16), what)


@sim_only
def test_a_wait_on_a_phase_that_never_completes_is_a_deadlock_naming_the_line():
    with pytest.raises(AsyncHazardError, match=r"deadlock.*parity 1 of mbarrier bars\[0\], which is phase 1: 1 of its "
                                               r"1 arrival never come.*On a GPU the kernel hangs") as info:
        _run_planted(5)
    assert info.value.hazard == "deadlock"
    assert info.value.location.endswith(f":{_line(planted, 'marker: the next phase')}"), str(info.value)


@sim_only
def test_bytes_announced_that_no_copy_brings_hang_and_say_so():
    with pytest.raises(AsyncHazardError, match=r"still expects 16 transaction bytes that no copy in flight brings"):
        _run_planted(3)


@sim_only
def test_a_stage_read_before_its_barrier_completed_names_both_lines():
    with pytest.raises(AsyncHazardError, match=r"has not waited on mbarrier bars\[0\]") as info:
        _run_planted(4)
    assert info.value.hazard == "early read"
    assert info.value.location.endswith(f":{_line(planted, 'marker: read without a wait')}"), str(info.value)
    assert info.value.issue_location.endswith(f":{_line(planted, 'marker: copy')}"), str(info.value)


@sim_only
@pytest.mark.parametrize("what,error,message", [
    (1, ValueError, r"byte 128 of shared memory, not a multiple of 1024: a TMA copy with the 128-byte swizzle"),
    (2, IndexError, r"the box's 1024 bytes from element 2560 of 'smem' run past its end \(5632 bytes\)"),
])
def test_a_misplaced_destination_is_an_error_at_the_copy(what, error, message):
    with pytest.raises(KernelError, match=message) as info:
        _run_planted(what)
    assert isinstance(info.value, error)
    assert info.value.location.endswith(f":{_line(planted, 'marker: copy')}"), str(info.value)


# ----------------------------------------------------------------------------------------------------------
# The step
# ----------------------------------------------------------------------------------------------------------


def _step(shape, seed, kernel=None, step=None):
    """``step`` (tma; tests/test_warp_specialized.py's: warp_specialized) at ``shape`` into a NaN-poisoned output,
    against float64; ``kernel``: the kernel its last launch must run."""
    step = step or tc.tma
    a, b = tc.make_inputs(shape, seed)
    if kernel is not None:
        assert step.launches(a, b)[-1].kernel is kernel
    out = np.full(shape[:2], np.nan, np.float32)
    before = a.copy(), b.copy()
    step(a, b, out=out)
    check = compare(out, tc.reference(a, b), TOLERANCE)
    assert check.ok, f"{shape} seed={seed}: {check}"
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])


@pytest.mark.parametrize("shape", [(33, 40, 24), (130, 72, 72), (17, 264, 328)], ids=str)
def test_the_step_through_tma_matches_float64(shape, seed):
    # rows 16-byte multiples apart: the TMA kernel; (17, 264, 328): 6 k tiles, so stages 0 and 1 complete a second
    # phase (parity 1), and a second column tile whose boxes of B lie wholly past N = 264 (zeros)
    _step(shape, seed, tc.tma_kernel)


@pytest.mark.parametrize("shape", [(33, 40, 20), (130, 70, 72), (1, 1, 1)], ids=str)
def test_the_step_on_unaligned_rows_takes_step_6s_loads(shape, seed):
    _step(shape, seed, tc.wgmma_sync_kernel)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(257, 520, 584), (129, 264, 1000)], ids=str)
def test_the_step_at_larger_shapes(shape, seed):
    _step(shape, seed, tc.tma_kernel)


@pytest.mark.slow
@pytest.mark.parametrize("bm,bn,stages", [(64, 128, 8), (64, 64, 8), (128, 128, 4)])
def test_the_steps_other_block_shapes(bm, bn, stages, seed):
    # step 6's block shapes (benchmarks/wgmma_variants.py), fed by TMA: A's box follows the block's rows
    from gpukernels.tensor_core.k07_tma import make_tma_kernel, tma_launch

    shape = (200, 328, 648)  # whole and edge tiles both ways, 11 k tiles: every stage's barrier completes 2 phases
    a, b = tc.make_inputs(shape, seed)
    out = np.full(shape[:2], np.nan, np.float32)
    for launch in tma_launch(make_tma_kernel(bn, stages, bm=bm), cuda.to_device(a), cuda.to_device(b), out):
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
        _step((130, 264, 328), seed, tc.tma_kernel)


@pytest.fixture
def k07():
    from gpukernels.tensor_core import k07_tma

    return k07_tma


@sim_only
def test_the_step_waiting_on_the_other_parity_reads_a_stage_early(monkeypatch, k07):
    # the ring's wait_full (gpukernels.tensor_core._ring) asking for the other parity
    monkeypatch.setattr(k07, "wait_full", lambda full, kt, stages: mbarrier_wait(full, kt % stages,
                                                                                 ((kt // stages) & 1) ^ 1))
    with pytest.raises(AsyncHazardError, match=r"asked for parity 1, and returned at once: the barrier was in phase "
                                               r"0 .* The copy completes phase 0: wait on parity 0") as info:
        _step((33, 40, 24), 0)
    assert info.value.hazard == "wrong phase"
    assert info.value.location.endswith(f":{_line(k07, 'mma(acc, smem')}"), str(info.value)
    assert info.value.issue_location.endswith(f":{_line(k07, 'tma_load_2d(smem, base, ta')}")


@sim_only
def test_the_step_without_its_wait_reads_a_stage_early(monkeypatch, k07):
    monkeypatch.setattr(k07, "wait_full", lambda full, kt, stages: None)
    with pytest.raises(AsyncHazardError, match=r"early read.*has not waited on mbarrier full\[0\]") as info:
        _step((33, 40, 24), 0)
    assert info.value.location.endswith(f":{_line(k07, 'mma(acc, smem')}"), str(info.value)


@sim_only
def test_the_step_without_its_1024_byte_alignment_says_which_copy(monkeypatch, k07):
    monkeypatch.setattr(k07, "align1024", lambda smem: 64)  # the ring 128 bytes past a 1024-byte boundary
    with pytest.raises(KernelError, match=r"byte 128 of shared memory, not a multiple of 1024") as info:
        _step((33, 40, 24), 0)
    assert info.value.location.endswith(f":{_line(k07, 'tma_load_2d(smem, base, ta')}"), str(info.value)


@sim_only
def test_the_step_announcing_too_many_bytes_hangs_at_its_wait(monkeypatch, k07):
    real = k07.mbarrier_arrive_expect_tx
    monkeypatch.setattr(k07, "mbarrier_arrive_expect_tx", lambda bars, i, n: real(bars, i, n + 16))
    with pytest.raises(AsyncHazardError, match=r"deadlock.*mbarrier full\[0\].*16 transaction bytes") as info:
        _step((33, 40, 24), 0)
    assert info.value.location.endswith(f":{_line(k07, 'wait_full(full, kt, stages)')}"), str(info.value)


def test_a_box_wider_than_the_swizzle_is_refused_at_the_launch(monkeypatch, k07):
    monkeypatch.setattr(k07, "ATOM", 128)  # B's boxes 256 bytes wide: more than a 128-byte swizzled row
    with pytest.raises(ValueError, match=r"at most 128 bytes"):
        tc.tma.launches(*tc.make_inputs((33, 40, 24), 0))


def test_optimized_takes_tma_through_step_9():
    # measured on an H100: the TMA steps beat step 6's cp.async at every aligned shape timed; optimized runs step 9
    # (which is step 7's copies with roles and persistent blocks) rather than step 7 itself
    for shape in ((4096, 4096, 4096), (1024, 1024, 1024), (128, 4096, 4096)):
        choice = tc.choose(*shape, hopper=True, sms=132)
        assert choice.step != "tma", choice
    assert "copied by TMA" in tc.choose(8192, 8192, 8192, hopper=True, sms=132).why
