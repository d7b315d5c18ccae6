"""Planted bugs: each must produce the documented gpukernels.sim error, naming block, thread and kernel line."""


import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="simulator only")

from numba import cuda, float32  # noqa: E402

from gpukernels.sim import (  # noqa: E402
    BarrierDivergenceError,
    KernelError,
    KernelTimeoutError,
    OutOfBoundsError,
    SimulatorError,
    WarpMaskError,
)

FULL = 0xFFFFFFFF
from ._tags import line_finder  # noqa: E402
from gpukernels._intrinsics import load4  # noqa: E402
from gpukernels._mma import mma_f16  # noqa: E402

line_of = line_finder(__file__)


# -- barrier divergence -------------------------------------------------------------------------------------


@cuda.jit
def early_exit_then_barrier(x):
    i = cuda.threadIdx.x
    if i >= 20:
        return
    x[i] = 1.0
    cuda.syncthreads()  # BARRIER-AFTER-RETURN
    x[i] += x[(i + 1) % 20]


def test_barrier_after_early_return():
    x = np.zeros(32, np.float32)
    with pytest.raises(BarrierDivergenceError) as info:
        early_exit_then_barrier[1, 32](x)
    err = info.value
    msg = str(err)
    assert line_of("BARRIER-AFTER-RETURN") in msg
    assert "20 threads" in msg and "12 threads" in msg and "exited" in msg
    assert "(0, 0, 0)" in msg and "(20, 0, 0)" in msg
    assert err.block == (0, 0, 0)
    [(where, threads)] = err.waiting.items()
    assert where.endswith(line_of("BARRIER-AFTER-RETURN")) and threads == [(i, 0, 0) for i in range(20)]
    assert err.exited == [(i, 0, 0) for i in range(20, 32)]


@cuda.jit
def barrier_in_both_branches(x):
    i = cuda.threadIdx.x
    if i % 2 == 0:
        cuda.syncthreads()  # EVEN-BARRIER
    else:
        cuda.syncthreads()  # ODD-BARRIER
    x[i] = i


def test_barriers_at_different_lines_diverge():
    x = np.zeros(8, np.float32)
    with pytest.raises(BarrierDivergenceError) as info:
        barrier_in_both_branches[(2, 1), 8](x)
    msg = str(info.value)
    assert line_of("EVEN-BARRIER") in msg and line_of("ODD-BARRIER") in msg
    assert "block (0, 0, 0)" in msg and "4 threads" in msg


# -- time-outs ----------------------------------------------------------------------------------------------


@cuda.jit
def spin_wait(flag, out):
    i = cuda.threadIdx.x
    if i == 0:
        while flag[0] == 0:  # SPIN
            pass
    else:
        flag[0] = 1
    out[i] = 1


@cuda.jit
def infinite_loop(out):
    i = cuda.threadIdx.x
    k = 0
    while k >= 0:  # FOREVER
        k = (k + 1) % 7
    out[i] = k


def test_infinite_loop_times_out_and_says_where():
    out = np.zeros(4, np.float32)
    with gpukernels.sim.configure(timeout_s=0.3):
        with pytest.raises(KernelTimeoutError) as info:
            infinite_loop[1, 4](out)
    msg = str(info.value)
    assert "did not finish within the time limit: no progress for 0.3 s" in msg and line_of("FOREVER") in msg
    assert "thread (0, 0, 0) was running at" in msg
    assert "3 threads" in msg and "has not started" in msg
    assert gpukernels.sim.config().timeout_s != 0.3  # the with block restored the setting


def test_spin_wait_on_another_thread_times_out():
    flag = np.zeros(1, np.int32)
    out = np.zeros(2, np.float32)
    with gpukernels.sim.configure(timeout_s=0.3):
        with pytest.raises(KernelTimeoutError) as info:
            spin_wait[1, 2](flag, out)
    assert line_of("SPIN") in str(info.value)
    where = info.value.running[(0, 0, 0)]
    assert where.startswith("running at ") and where.endswith(line_of("SPIN"))
    # the simulator is usable afterwards
    ok = np.zeros(4, np.float32)
    early = np.zeros(32, np.float32)
    with pytest.raises(BarrierDivergenceError):
        early_exit_then_barrier[1, 32](early)
    barrier_ok[1, 4](ok)
    assert ok.tolist() == [1, 1, 1, 1]


@cuda.jit
def long_but_healthy(out):
    i = cuda.grid(1)
    acc = 0
    for k in range(30000):
        acc += k % 7
    out[i] = acc


def test_a_long_launch_that_keeps_switching_is_not_cut_short():
    out = np.zeros(256, np.int64)
    long_but_healthy[4, 64](out)  # no limit: how long the launch takes on this machine
    limit = gpukernels.sim.last_launch().seconds / 3
    out[:] = 0
    with gpukernels.sim.configure(timeout_s=limit):
        long_but_healthy[4, 64](out)
    assert gpukernels.sim.last_launch().seconds > limit  # longer than the limit in total, but always progressing
    assert (out == sum(k % 7 for k in range(30000))).all()


@cuda.jit
def barrier_ok(x):
    i = cuda.threadIdx.x
    x[i] = 1
    cuda.syncthreads()


# -- out of bounds ------------------------------------------------------------------------------------------


@cuda.jit
def one_past_the_end(a, out):
    i = cuda.grid(1)
    out[i] = a[i + 1]  # PAST-END


@cuda.jit
def shared_oob(out):
    s = cuda.shared.array((4, 8), float32)
    i = cuda.threadIdx.x
    s[i % 4, i] = 1.0  # SHARED-OOB
    out[i] = 0


@cuda.jit
def local_negative(out):
    buf = cuda.local.array(3, float32)
    i = cuda.threadIdx.x
    buf[2 - i] = 1.0  # LOCAL-NEG
    out[i] = buf[0]


@cuda.jit
def write_2d_oob(c):
    x, y = cuda.grid(2)
    c[y, x] = 1.0  # NO-GUARD


def test_read_past_the_end_of_a_global_array():
    a = np.zeros(64, np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        one_past_the_end[2, 32](a, out)
    err = info.value
    msg = str(err)
    assert isinstance(err, IndexError)
    assert "global array 'a'" in msg and "index 64" in msg and "shape (64,)" in msg
    assert "thread (31, 0, 0) of block (1, 0, 0)" in msg and line_of("PAST-END") in msg
    assert (err.array, err.index, err.shape, err.thread, err.block) == ("a", 64, (64,), (31, 0, 0), (1, 0, 0))


def test_shared_and_local_arrays_are_bounds_checked():
    out = np.zeros(16, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        shared_oob[1, 16](out)
    msg = str(info.value)
    assert "shared array 's'" in msg and "index (0, 8)" in msg and "shape (4, 8)" in msg
    assert "thread (8, 0, 0)" in msg and line_of("SHARED-OOB") in msg

    with pytest.raises(OutOfBoundsError) as info:
        local_negative[1, 4](out)
    msg = str(info.value)
    assert "local array 'buf'" in msg and "index -1" in msg and "thread (3, 0, 0)" in msg
    assert line_of("LOCAL-NEG") in msg


def test_2d_write_without_a_guard():
    c = np.zeros((5, 6), np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        write_2d_oob[(2, 2), (4, 4)](c)
    msg = str(info.value)
    assert "write of global array 'c' at index (0, 6)" in msg and "on axis 1" in msg
    assert "thread (2, 0, 0) of block (1, 0, 0)" in msg and line_of("NO-GUARD") in msg


# -- warp masks ---------------------------------------------------------------------------------------------


@cuda.jit
def half_mask(x, out):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_xor_sync(0x0000FFFF, x[i], 1)  # HALF-MASK


@cuda.jit
def shuffle_in_branch_then_barrier(x, out):
    i = cuda.threadIdx.x
    v = x[i]
    if i < 16:
        v += cuda.shfl_xor_sync(FULL, v, 1)  # BRANCH-SHFL
    cuda.syncthreads()  # AFTER-BRANCH
    out[i] = v


@cuda.jit
def shuffle_reads_exited_lane(x, out):
    i = cuda.threadIdx.x
    if i >= 16:
        return
    out[i] = cuda.shfl_down_sync(FULL, x[i], 8)  # READS-EXITED


def test_mask_without_the_calling_lane():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    with pytest.raises(WarpMaskError) as info:
        half_mask[1, 32](x, out)
    msg = str(info.value)
    assert "0x0000ffff" in msg and "calling lane 16" in msg and "thread (16, 0, 0)" in msg
    assert line_of("HALF-MASK") in msg


def test_lanes_named_in_the_mask_that_never_arrive():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    with pytest.raises(WarpMaskError) as info:
        shuffle_in_branch_then_barrier[1, 32](x, out)
    msg = str(info.value)
    assert "lanes 0-15 wait at cuda.shfl_xor_sync" in msg and line_of("BRANCH-SHFL") in msg
    assert "lanes 16-31" in msg and line_of("AFTER-BRANCH") in msg


def test_shuffle_reading_a_lane_that_exited():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    with pytest.raises(WarpMaskError) as info:
        shuffle_reads_exited_lane[1, 32](x, out)
    msg = str(info.value)
    assert "reads lane 16, which has already exited" in msg and line_of("READS-EXITED") in msg


# -- any other exception ------------------------------------------------------------------------------------


@cuda.jit
def divide_by_zero(x, out):
    i = cuda.threadIdx.x
    out[i] = 1 // (int(x[i]) - 3)  # DIVIDE


def test_other_exceptions_keep_their_type_and_gain_thread_and_line():
    x = np.arange(8, dtype=np.int64)
    out = np.zeros(8, np.int64)
    with pytest.raises(KernelError) as info:
        divide_by_zero[1, 8](x, out)
    err = info.value
    assert isinstance(err, ZeroDivisionError) and isinstance(err, SimulatorError)
    assert isinstance(err.__cause__, ZeroDivisionError)
    msg = str(err)
    assert "thread (3, 0, 0) of block (0, 0, 0)" in msg and line_of("DIVIDE") in msg
    assert err.location.endswith(line_of("DIVIDE"))


@cuda.jit
def mma_of_a_float(c):
    z = float32(0.0)
    c[0, 0] = mma_f16(float32(1.0), 0, 0, 0, 0, 0, z, z, z, z)[0]  # MMA_CALL


@cuda.jit
def load4_past_the_end(x, out):
    out[0] = load4(x, 0, 6)[0]  # LOAD4_CALL


def test_an_error_inside_an_instruction_is_reported_at_the_kernels_line():
    """mma_f16, load4 and the other instructions of gpukernels._mma and gpukernels._intrinsics are Python in the
    simulator but one instruction on a GPU: an error inside one names the student's line that issued it, not a
    line of the library."""
    with pytest.raises(KernelError) as info:
        mma_of_a_float[1, 32](np.zeros((16, 8), np.float32))
    assert info.value.location.endswith(line_of("MMA_CALL")) and "mma_f16: a0 must be" in str(info.value)
    assert "_mma.py" not in str(info.value).split(": tid=")[0]
    with pytest.raises(OutOfBoundsError) as info:
        load4_past_the_end[1, 1](np.zeros((1, 8), np.float32), np.zeros(1, np.float32))
    assert line_of("LOAD4_CALL") in str(info.value) and "_intrinsics.py" not in str(info.value)


def test_every_error_is_a_simulator_error():
    for cls in (BarrierDivergenceError, KernelTimeoutError, OutOfBoundsError, WarpMaskError, KernelError):
        assert issubclass(cls, SimulatorError)


def test_a_launch_beyond_the_gpus_limits_is_refused_as_the_driver_would():
    """grid.y and grid.z stop at 65535 and a block at 1024 threads on every GPU: the simulator refuses what the
    driver would (softmax's split_row once put 65536 rows on grid.y; it passed here and failed on the H200)."""
    import numpy as np
    import pytest
    from numba import cuda

    from gpukernels.sim.errors import LaunchConfigError

    @cuda.jit
    def touch(a):
        a[0] = 1.0

    a = np.zeros(1, np.float32)
    with pytest.raises(LaunchConfigError, match="65536 blocks along y, more than the 65535"):
        touch[(1, 65536), 1](a)
    with pytest.raises(LaunchConfigError, match="1056 threads, more than the 1024"):
        touch[1, (33, 32)](a)
    with pytest.raises(LaunchConfigError, match="65 threads along z"):
        touch[1, (1, 1, 65)](a)
    touch[(70000, 1), 1](a)  # x may be large
    assert a[0] == 1.0
