"""The tracer's definitions of coalescing efficiency, bank-conflict degree and reuse, against hand-computed cases,
and its public events API (``accesses()``, ``arrays()``, ``lines()``, ``launches``) that gpukernels.viz reads."""

import numpy as np
import pytest

import gpukernels
from gpukernels.trace import (ACCESS_DTYPE, READ, WRITE, coalescing_efficiency, conflict_degree, reuse,
                              sector_counts)

LANES = np.arange(32)


# -- the definitions, by hand (no kernel: these run everywhere) -----------------------------------------------

@pytest.mark.parametrize("elements, itemsize, moved, needed, efficiency", [
    (np.full(32, 5), 4, 1, 1, 1.0),  # broadcast: 4 bytes used of one 32-byte sector, the fewest possible
    (LANES, 4, 4, 4, 1.0),  # fully coalesced: 128 consecutive bytes = 4 sectors, all used
    (2 * LANES, 4, 8, 4, 0.5),  # stride 2: bytes 0..251 span 8 sectors, 128 bytes used need 4
    (64 * LANES, 4, 32, 4, 0.125),  # a row (256 bytes) apart: a sector per lane
    (LANES, 8, 8, 8, 1.0),  # float64, consecutive: 256 bytes
    (LANES[:3] + 7, 4, 2, 1, 0.5),  # 3 lanes at bytes 28..39: straddle a sector boundary
])
def test_sector_counts_and_efficiency_by_hand(elements, itemsize, moved, needed, efficiency):
    assert sector_counts(elements, itemsize) == (moved, needed)
    assert coalescing_efficiency(needed, moved) == efficiency


def test_efficiency_aggregates_as_a_ratio_of_sums():
    # a broadcast (1 of 1) and a row-apart access (4 of 32): (1 + 4) / (1 + 32), not the mean of 1 and 1/8
    (m1, n1), (m2, n2) = sector_counts(np.zeros(32, int)), sector_counts(64 * LANES)
    assert coalescing_efficiency(n1 + n2, m1 + m2) == 5 / 33
    assert coalescing_efficiency(0, 0) == 1.0  # nothing moved: nothing wasted


@pytest.mark.parametrize("elements, degree", [
    (np.full(32, 5), 1),  # one word for every lane: a broadcast, not a conflict
    (LANES, 1),  # 32 consecutive words: 32 banks
    (2 * LANES, 2),  # stride 2: banks 0, 2, ..., 30, each asked for 2 words
    (32 * LANES, 32),  # a 32-word column: all in bank 0
    (33 * LANES, 1),  # the padded column (width 33): every bank once
    (np.r_[np.zeros(16, int), 32 * np.ones(16, int)], 2),  # two words of bank 0, each broadcast to 16 lanes
])
def test_conflict_degree_by_hand(elements, degree):
    assert conflict_degree(elements) == degree


def test_reuse_is_loads_per_element():
    assert reuse(loads=12, elements=4) == 3.0 and reuse(0, 0) == 0.0


# -- the tracer's analyses use them: the same numbers from real launches --------------------------------------

sim_only = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")

if gpukernels.MODE == "sim":
    from numba import cuda, float32

    @cuda.jit
    def strided_read(x, out, stride):
        i = cuda.threadIdx.x
        out[i] = x[i * stride]

    @cuda.jit
    def strided_shared(out, stride):
        s = cuda.shared.array(1024, float32)
        i = cuda.threadIdx.x
        s[i * stride] = i
        cuda.syncthreads()
        out[i] = s[i * stride]


@sim_only
@pytest.mark.parametrize("stride, moved, needed", [(0, 1, 1), (1, 4, 4), (2, 8, 4), (64, 32, 4)])
def test_tracer_coalescing_table_is_the_definition(stride, moved, needed):
    x, out = np.zeros(64 * 32, np.float32), np.zeros(32, np.float32)
    with gpukernels.trace() as t:
        strided_read[1, 32](x, out, stride)
    line = next(c for c in t.coalescing().lines if c.array == "x")
    assert (line.requests, line.sectors, line.min_sectors) == (1, moved, needed)
    assert line.efficiency == coalescing_efficiency(*sector_counts(LANES * stride)[::-1])
    assert t.coalescing().by_array()[("x", "read")] == line.efficiency
    assert t.coalescing().by_array()[("out", "write")] == 1.0


@sim_only
@pytest.mark.parametrize("stride, degree", [(1, 1), (2, 2), (32, 32)])
def test_tracer_bank_conflicts_are_the_definition(stride, degree):
    out = np.zeros(32, np.float32)
    with gpukernels.trace() as t:
        strided_shared[1, 32](out, stride)
    rows = {b.kind: b for b in t.bank_conflicts()}
    assert rows["write"].max_degree == rows["read"].max_degree == degree == conflict_degree(LANES * stride)
    assert rows["read"].wavefronts == degree and rows["read"].mean_degree == degree


# -- the public events API ------------------------------------------------------------------------------------

@sim_only
def test_accesses_arrays_and_lines_describe_every_access():
    out = np.zeros(48, np.float32)
    with gpukernels.trace(events=True) as t:
        strided_shared[2, 24](out, 2)
    acc, arrays, lines = t.accesses(), t.arrays(), t.lines()
    assert acc.dtype == ACCESS_DTYPE and acc.dtype.itemsize <= 64  # numbers only: viz keeps 500 000 of them
    # per block and thread: write s, read s, write out -- 2 blocks x 24 threads x 3
    assert len(acc) == 2 * 24 * 3 == len(t.events())
    names = {a.name: a for a in arrays}
    assert (names["s"].space, names["s"].size, names["out"].space, names["out"].shape) == ("shared", 1024, "global",
                                                                                            (48,))
    first = acc[acc["order"] == 0]  # each thread's first access, whatever order the simulator ran threads in
    assert len(first) == 48 and {arrays[i].name for i in first["array"]} == {"s"} and set(first["kind"]) == {WRITE}
    s_write = acc[(acc["array"] == names["s"].index) & (acc["kind"] == WRITE)]
    assert sorted(s_write["element"][s_write["block"][:, 0] == 1].tolist()) == list(range(0, 48, 2))
    assert set(acc["interval"][acc["kind"] == READ].tolist()) == {1}  # after the barrier
    assert set(acc["kind"].tolist()) == {READ, WRITE}  # no ATOMIC in this kernel
    assert t.launches[0].block == (24, 1, 1) and set(acc["launch"].tolist()) == {0}
    # the public columns agree with events(), which spells the same accesses out
    ev = t.events()
    assert ev["element"].tolist() == acc["element"].tolist() and ev["order"].tolist() == acc["order"].tolist()
    assert ev["lane"].tolist() == (acc["thread"] % 32).tolist()
    locs = [f"{f}:{n}" for f, n in lines]
    assert all(any(loc.endswith(e.split("/")[-1]) for loc in locs) for e in set(ev["location"].tolist()))


@sim_only
def test_accesses_need_the_event_log():
    with gpukernels.trace() as t:
        strided_read[1, 32](np.zeros(32, np.float32), np.zeros(32, np.float32), 1)
    with pytest.raises(RuntimeError, match="events=True"):
        t.accesses()
    assert [a.name for a in t.arrays()] == ["x", "out"]  # arrays and lines are kept without it


@sim_only
@pytest.mark.slow  # 6 CPU-s: a lesson traced twice
def test_an_event_log_without_local_arrays_counts_them_the_same():
    # regblock_2d keeps its accumulators in local arrays: local=False leaves them out of the log, not the counts;
    # count_local=False leaves them unobserved (no counts either) and every other figure as it was
    from gpukernels import matmul

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((33, 17)).astype(np.float32), rng.standard_normal((17, 31)).astype(np.float32)
    logs, other = {}, {}
    for local in (True, False, "unobserved"):
        with gpukernels.trace(events=True, local=local is True, count_local=local != "unobserved") as t:
            matmul.regblock_2d(a, b)
        spaces = {arr.index: arr.space for arr in t.arrays()}
        logs[local] = ({spaces[i] for i in t.accesses()["array"].tolist()},
                       [(x.array, x.space, x.loads, x.stores) for x in t.traffic(space=None)], len(t.accesses()))
        other[local] = {k: v for k, v in t.summary().to_dict().items() if k != "seconds"}  # every analysis
    assert "local" in logs[True][0] and "local" not in logs[False][0]
    assert logs[True][1] == logs[False][1] and any(s == "local" and n for _, s, n, _ in logs[False][1])
    assert logs[False][2] < logs[True][2]
    assert "local" not in {s for _, s, _, _ in logs["unobserved"][1]} and "local" not in logs["unobserved"][0]
    assert logs["unobserved"][2] == logs[False][2] and other["unobserved"] == other[False] == other[True]
