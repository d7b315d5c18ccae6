"""The scheduler: deterministic interleavings, shuffle mode, switch counts, and reaching every kernel."""

import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="simulator only")

import gpukernels.sim as sim  # noqa: E402
from numba import cuda, float32  # noqa: E402

FULL = 0xFFFFFFFF


@cuda.jit
def order_kernel(counter, order, x):
    t = cuda.threadIdx.x
    i = t + cuda.blockIdx.x * cuda.blockDim.x
    s = cuda.shared.array(64, float32)
    order[0, cuda.atomic.add(counter, 0, 1)] = i  # who got here first
    s[t] = x[i]
    cuda.syncthreads()
    v = s[(t + 1) % 64]
    v += cuda.shfl_xor_sync(FULL, v, 1)
    order[1, cuda.atomic.add(counter, 1, 1)] = i  # ... and after a barrier and a shuffle
    x[i] = v


def run_order():
    counter = np.zeros(2, np.int64)
    order = np.full((2, 128), -1, np.int64)
    x = np.arange(128, dtype=np.float32)
    order_kernel[2, 64](counter, order, x)
    return order, sim.last_launch()


def test_same_launch_same_interleaving():
    (o1, l1), (o2, l2) = run_order(), run_order()
    assert (o1 == o2).all() and l1.schedule_digest == l2.schedule_digest and l1.switches == l2.switches
    # default order: thread-id order, block by block
    assert o1[0].tolist() == list(range(128))
    assert sorted(o1[1].tolist()) == list(range(128))


def test_shuffle_mode_is_seeded_and_differs():
    plain, _ = run_order()
    with sim.configure(shuffle=True, seed=1):
        a, la = run_order()
        b, lb = run_order()
    with sim.configure(shuffle=True, seed=2):
        c, lc = run_order()
    assert (a == b).all() and la.schedule_digest == lb.schedule_digest and la.seed == 1
    assert not (a == plain).all() and not (a == c).all()
    assert la.schedule_digest != lc.schedule_digest
    for o in (a, c):  # every thread still ran exactly once on each side of the barrier
        assert sorted(o[0].tolist()) == list(range(128)) and sorted(o[1].tolist()) == list(range(128))
    assert not sim.config().shuffle  # restored


def test_shuffle_without_seed_draws_and_reports_one():
    """An unseeded shuffle draws a fresh seed per launch and reports the one it used: replaying with the reported
    seed gives the same interleaving (order of arrival, full schedule) as the first run."""
    with sim.configure(shuffle=True, seed=None, record_schedule=True):
        first, l1 = run_order()
        second, l2 = run_order()
    assert l1.seed != l2.seed  # 1 chance in 2**32 of a false failure
    assert l1.schedule != l2.schedule
    for order, info in ((first, l1), (second, l2)):
        with sim.configure(shuffle=True, seed=info.seed, record_schedule=True):
            replay, again = run_order()
        assert again.seed == info.seed
        assert (replay == order).all(), "the reported seed does not replay the run"
        assert again.schedule == info.schedule and again.schedule_digest == info.schedule_digest


@cuda.jit
def racy_neighbour(out):
    s = cuda.shared.array(64, float32)
    i = cuda.threadIdx.x
    s[i] = i
    # a cuda.syncthreads() is missing here
    out[i] = s[(i + 1) % 64]


def test_shuffle_mode_flushes_out_a_missing_barrier():
    out = np.zeros(64, np.float32)
    racy_neighbour[1, 64](out)
    # in order, thread i reads s[i + 1] before thread i + 1 wrote it: uninitialised (NaN), every time
    assert np.isnan(out[:63]).all() and out[63] == 0
    patterns = set()
    for seed in range(4):
        with sim.configure(shuffle=True, seed=seed):
            racy_neighbour[1, 64](out)
        patterns.add(tuple(np.isnan(out).tolist()))
        assert 0 < np.isnan(out).sum() < 64  # some reads raced ahead of the writes, some did not
    assert len(patterns) == 4


def test_seeded_shuffle_replays_schedule_and_output_and_seeds_differ():
    """The same seed gives the same schedule (every switch, preemptions included) and the same output of a
    racy kernel, bit for bit; different seeds give different schedules and outputs."""
    runs = {}
    for seed in (11, 11, 12, 13):
        out = np.zeros(64, np.float32)
        with sim.configure(shuffle=True, seed=seed, preempt=0.2, record_schedule=True):
            racy_neighbour[1, 64](out)
        info = sim.last_launch()
        assert info.seed == seed and info.shuffle
        runs.setdefault(seed, []).append((info.schedule, out.tobytes(), info.switches))
    (s1, o1, n1), (s2, o2, n2) = runs[11]
    assert s1 == s2 and o1 == o2 and n1 == n2
    assert n1 > 64  # preemptions happened: more switches than one start per thread
    schedules = {tuple(r[0][0]) for r in runs.values()}
    outputs = {r[0][1] for r in runs.values()}
    assert len(schedules) == 3 and len(outputs) == 3


@cuda.jit
def two_barriers(x):
    i = cuda.threadIdx.x
    x[i] += 1
    cuda.syncthreads()
    x[i] += 1
    cuda.syncthreads()


@cuda.jit
def no_barrier(x):
    i = cuda.grid(1)
    x[i] += 1


def test_switch_counts_threads_without_barriers_run_straight_through():
    x = np.zeros(256, np.float32)
    no_barrier[4, 64](x)
    assert sim.last_launch().switches == 256 and (x == 1).all()
    with sim.configure(record_schedule=True):
        two_barriers[1, 4](x)
    # 4 starts; thread 3 arrives last at the first barrier and carries on without a switch, so it is first at
    # the second one, where thread 2 arrives last: after each barrier the 3 threads that waited resume
    assert [tid for _, tid in sim.last_launch().schedule] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert sim.last_launch().switches == 10


def test_install_is_idempotent_and_reaches_kernels_defined_before_it():
    sim.uninstall()
    try:

        @cuda.jit
        def early(out):
            i = cuda.threadIdx.x
            out[i] = cuda.shfl_down_sync(FULL, i, 1)

        out = np.zeros(32, np.int64)
        with pytest.raises(AttributeError, match="shfl_down_sync"):  # the stock simulator has no shuffles
            early[1, 32](out)
    finally:
        sim.install()
    call = type(early).__call__
    sim.install()
    assert type(early).__call__ is call and sim.is_installed()
    early[1, 32](out)
    assert out.tolist() == list(range(1, 32)) + [31]


def test_cuda_bound_in_a_closure_and_device_functions():
    from numba import cuda as cu

    @cu.jit(device=True)
    def lane_times(k):
        return cu.laneid * k

    @cu.jit
    def kernel(out):
        out[cu.threadIdx.x] = lane_times(3)

    out = np.zeros(8, np.int64)
    kernel[1, 8](out)
    assert out.tolist() == [0, 3, 6, 9, 12, 15, 18, 21]
    assert cu is cuda  # the closure cell was put back


def test_device_arrays_and_transfer_hints():
    @cuda.jit
    def double(a):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] *= 2

    d = cuda.to_device(np.arange(5, dtype=np.float32))
    double[1, 8](d)
    assert d.copy_to_host().tolist() == [0, 2, 4, 6, 8]
    h = np.arange(3, dtype=np.float32)
    double[1, 4](cuda.InOut(h))
    assert h.tolist() == [0, 2, 4]


def test_configure_rejects_unknown_settings():
    with pytest.raises(TypeError, match="unknown simulator setting"):
        sim.configure(shufle=True)
    with pytest.raises(ValueError):
        sim.configure(preempt=2)


def test_tiled_matmul_lesson_shape_is_exact_and_quick():
    TILE = 8

    @cuda.jit
    def tiled(a, b, c):
        sA = cuda.shared.array((TILE, TILE), float32)
        sB = cuda.shared.array((TILE, TILE), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.grid(2)
        acc = float32(0)
        for t in range(a.shape[1] // TILE):
            sA[ty, tx] = a[row, t * TILE + tx]
            sB[ty, tx] = b[t * TILE + ty, col]
            cuda.syncthreads()
            for k in range(TILE):
                acc += sA[ty, k] * sB[k, tx]
            cuda.syncthreads()
        c[row, col] = acc

    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 32)).astype(np.float32)
    b = rng.standard_normal((32, 32)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    tiled[(4, 4), (8, 8)](a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    info = sim.last_launch()
    # 16 blocks x (64 starts + 8 barriers x 63 waiting threads)
    assert info.switches == 16 * (64 + 8 * 63)
    assert info.seconds < 3.0  # the stock simulator needs ~5 s; benchmarks/sim_speed.py measures the ratio
