"""gpukernels.trace: exact access counts, coalescing, bank conflicts and races, on planted-bug kernels."""

import json
import math

import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")

from numba import cuda, float32  # noqa: E402

from gpukernels import _mma, cbr, matmul, softmax  # noqa: E402
from gpukernels.trace import trace_main  # noqa: E402
from ._tags import line_finder  # noqa: E402

line_of = line_finder(__file__)


def by_array(t):
    return {(x.kernel, x.array): x for x in t.traffic()}


# -- traffic: the formulas ----------------------------------------------------------------------------------


def test_naive_and_tiled_matmul_global_loads_follow_the_formulas():
    m, n, k = 20, 40, 24  # ragged: neither 20 nor 40 is a multiple of the tile
    a, b = matmul.make_inputs((m, n, k), 0)
    with gpukernels.trace() as naive:
        matmul.VERSIONS["naive"](a, b)
    with gpukernels.trace() as tiled:
        c = matmul.VERSIONS["tiled"](a, b)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    T = matmul.TILE
    na, ta = by_array(naive), by_array(tiled)
    (kn,) = {key[0] for key in na}
    (kt,) = {key[0] for key in ta}
    # naive: every C element reads a row of A and a column of B -> A read N times, B read M times
    assert na[kn, "a"].loads == m * n * k and na[kn, "a"].loads_per_element == n
    assert na[kn, "b"].loads == m * n * k and na[kn, "b"].loads_per_element == m
    assert na[kn, "c"].stores == m * n and na[kn, "c"].loads == 0
    # tiled: each A element once per block column, each B element once per block row
    assert ta[kt, "a"].loads == m * k * math.ceil(n / T) == 20 * 24 * 3
    assert ta[kt, "b"].loads == k * n * math.ceil(m / T) == 24 * 40 * 2
    assert ta[kt, "a"].loads_per_element == math.ceil(n / T)
    assert ta[kt, "c"].stores == m * n
    assert tiled.global_bytes() == 4 * (20 * 24 * 3 + 24 * 40 * 2 + 20 * 40)


def test_optimized_softmax_reads_each_element_once_naive_three_times():
    (x,) = softmax.make_inputs((5, 100), 0)
    with gpukernels.trace() as opt:
        softmax.VERSIONS["optimized"](x)
    with gpukernels.trace() as naive:
        softmax.VERSIONS["naive"](x)
    [xo] = [t for t in opt.traffic() if t.array == "x"]
    [yo] = [t for t in opt.traffic() if t.array == "y"]
    assert (xo.loads, yo.stores, xo.loads_per_element) == (500, 500, 1.0)  # the docstring: read once, write once
    assert opt.global_bytes() == 8 * 500  # softmax.min_bytes: 8 bytes per element
    [xn] = [t for t in naive.traffic() if t.array == "x"]
    assert (xn.loads, xn.loads_per_element) == (1500, 3.0)


def test_fused_cbr_moves_fewer_global_bytes_than_the_three_unfused_kernels():
    shape = (1, 3, 7, 6, 5, 3, 3)  # N C H W K R S, ragged against the fused kernel's tiles
    inputs = cbr.make_inputs(shape, 0)
    with gpukernels.trace() as unfused:
        y1 = cbr.VERSIONS["naive"](*inputs)
    with gpukernels.trace() as fused:
        y2 = cbr.VERSIONS["implicit_gemm"](*inputs)  # the fused kernel (optimized would slice this small image)
    np.testing.assert_allclose(y1, y2, rtol=1e-4, atol=1e-4)
    outputs = y1.size
    per_launch: dict = {}
    for t in unfused.traffic():
        per_launch[t.launch] = per_launch.get(t.launch, 0) + t.bytes_loaded + t.bytes_stored
    assert len(per_launch) == 3 and len(fused.launches) == 1
    # the docstring: passes (b) and (c) move 16 bytes per output (2 reads + 2 writes of y) plus one load of b
    assert per_launch[1] + per_launch[2] == 16 * outputs + 4 * outputs
    assert fused.global_bytes() < unfused.global_bytes()
    assert unfused.global_bytes() - fused.global_bytes() >= 16 * outputs
    # ... and by exactly the amount the lesson's formulas compute (cbr.global_loads, in elements)
    x, w, _ = inputs
    formula = {v: 4 * sum(cbr.global_loads(v, x.shape, w.shape).values()) for v in ("naive", "implicit_gemm")}
    assert (unfused.global_bytes(), fused.global_bytes()) == (formula["naive"], formula["implicit_gemm"])


# -- coalescing ---------------------------------------------------------------------------------------------


@cuda.jit
def read_rows(a, out):
    r, i = cuda.blockIdx.x, cuda.threadIdx.x
    out[r, i] = a[r, i]  # ROW-READ


@cuda.jit
def read_cols(a, out):
    r, i = cuda.blockIdx.x, cuda.threadIdx.x
    v = a[i, r]  # COL-READ
    out[r, i] = v


def test_strided_reads_are_one_eighth_efficient_rows_are_perfect():
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    with gpukernels.trace() as t:
        read_rows[32, 32](a, out)
        read_cols[32, 32](a, out)
    np.testing.assert_array_equal(out, a.T)
    lines = {(x.location.split("/")[-1], x.array): x for x in t.coalescing().lines}
    row, col = lines[line_of("ROW-READ"), "a"], lines[line_of("COL-READ"), "a"]
    assert (row.requests, row.sectors, row.min_sectors, row.efficiency) == (32, 128, 128, 1.0)
    assert (col.requests, col.sectors, col.min_sectors, col.efficiency) == (32, 1024, 128, 0.125)
    per_kernel = t.coalescing().per_kernel
    assert per_kernel["read_rows"] == 1.0 and per_kernel["read_cols"] == (128 + 128) / (1024 + 128)


# -- bank conflicts -----------------------------------------------------------------------------------------


@cuda.jit
def column_read_32(a, out):
    tile = cuda.shared.array((32, 32), float32)
    i = cuda.threadIdx.x
    for r in range(32):
        tile[r, i] = a[r, i]  # ROW-WRITE-32
    cuda.syncthreads()
    for c in range(32):
        out[c, i] = tile[i, c]  # COL-READ-32


@cuda.jit
def column_read_33(a, out):
    tile = cuda.shared.array((32, 33), float32)
    i = cuda.threadIdx.x
    for r in range(32):
        tile[r, i] = a[r, i]
    cuda.syncthreads()
    for c in range(32):
        out[c, i] = tile[i, c]  # COL-READ-33


def test_column_reads_of_a_32_wide_tile_conflict_32_ways_padding_removes_it():
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    with gpukernels.trace() as t:
        column_read_32[1, 32](a, out)
        np.testing.assert_array_equal(out, a.T)
        column_read_33[1, 32](a, out)
    np.testing.assert_array_equal(out, a.T)
    lines = {x.location.split("/")[-1]: x for x in t.bank_conflicts()}
    write, bad, padded = lines[line_of("ROW-WRITE-32")], lines[line_of("COL-READ-32")], lines[line_of("COL-READ-33")]
    assert (write.requests, write.max_degree, write.wavefronts) == (32, 1, 32)
    assert (bad.requests, bad.max_degree, bad.mean_degree, bad.wavefronts) == (32, 32, 32.0, 1024)
    assert (padded.requests, padded.max_degree, padded.wavefronts) == (32, 1, 32)
    assert bad.array == "tile" and bad.kind == "read"


@cuda.jit
def broadcast_read(out):
    s = cuda.shared.array(64, float32)
    i = cuda.threadIdx.x
    s[i] = i
    s[i + 32] = i
    cuda.syncthreads()
    out[i] = s[0] + s[(i % 2) * 32]  # BROADCAST


def test_same_word_is_a_broadcast_two_words_in_one_bank_conflict_twice():
    out = np.zeros(32, np.float32)
    with gpukernels.trace() as t:
        broadcast_read[1, 32](out)
    rows = [x for x in t.bank_conflicts() if x.location.endswith(line_of("BROADCAST"))]
    assert sorted((x.requests, x.max_degree) for x in rows) == [(2, 2)]  # s[0]: degree 1; s[0]/s[32]: 2
    assert rows[0].wavefronts == 1 + 2


# -- hazards ------------------------------------------------------------------------------------------------

TILE = 8


@cuda.jit
def tiled_missing_second_sync(a, b, c):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.grid(2)
    acc = float32(0.0)
    for k0 in range(0, a.shape[1], TILE):
        sA[ty, tx] = a[row, k0 + tx]  # LOAD-A-1
        sB[ty, tx] = b[k0 + ty, col]  # LOAD-B-1
        cuda.syncthreads()
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]  # FMA-1
        # the second cuda.syncthreads() is missing here
    c[row, col] = acc


@cuda.jit
def tiled_no_sync(a, b, c):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.grid(2)
    acc = float32(0.0)
    for k0 in range(0, a.shape[1], TILE):
        sA[ty, tx] = a[row, k0 + tx]  # LOAD-A-0
        sB[ty, tx] = b[k0 + ty, col]  # LOAD-B-0
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]  # FMA-0
    c[row, col] = acc


@cuda.jit
def tiled_correct(a, b, c):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col, row = cuda.grid(2)
    acc = float32(0.0)
    for k0 in range(0, a.shape[1], TILE):
        sA[ty, tx] = a[row, k0 + tx]
        sB[ty, tx] = b[k0 + ty, col]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]
        cuda.syncthreads()
    c[row, col] = acc


def races_of(kernel):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    c = np.zeros((16, 16), np.float32)
    with gpukernels.trace() as t:
        kernel[(2, 2), (TILE, TILE)](a, b, c)
    races = t.hazards().races
    return {(r.array, r.hazard, r.first_location.split("/")[-1], r.second_location.split("/")[-1]) for r in races}, t


def test_missing_second_syncthreads_is_a_write_after_read_race():
    found, t = races_of(tiled_missing_second_sync)
    assert found == {
        ("sA", "write-after-read", line_of("FMA-1"), line_of("LOAD-A-1")),
        ("sB", "write-after-read", line_of("FMA-1"), line_of("LOAD-B-1")),
    }
    race = t.hazards().races[0]
    assert "cuda.syncthreads() is missing after" in race.hint and line_of("FMA-1") in race.hint
    assert race.space == "shared" and race.elements > 0 and race.example_threads[0] != race.example_threads[1]


def test_missing_both_syncthreads_races_at_both_places():
    found, _ = races_of(tiled_no_sync)
    assert found == {
        ("sA", "read-after-write", line_of("LOAD-A-0"), line_of("FMA-0")),
        ("sB", "read-after-write", line_of("LOAD-B-0"), line_of("FMA-0")),
        ("sA", "write-after-read", line_of("FMA-0"), line_of("LOAD-A-0")),
        ("sB", "write-after-read", line_of("FMA-0"), line_of("LOAD-B-0")),
    }


def test_correct_tiled_matmul_has_no_hazards():
    found, t = races_of(tiled_correct)
    assert found == set() and t.hazards().uninitialized == []
    assert sum(x.requests for x in t.bank_conflicts()) > 0  # it was traced


@cuda.jit
def reads_before_writes(out):
    s = cuda.shared.array(32, float32)
    i = cuda.threadIdx.x
    out[i] = s[(i + 1) % 32]  # UNINIT
    s[i] = i


def test_uninitialised_shared_read():
    out = np.zeros(32, np.float32)
    with gpukernels.trace() as t:
        reads_before_writes[1, 32](out)
    (u,) = t.hazards().uninitialized
    # thread 31 reads s[0], which thread 0 wrote before it, in the simulated order: 31 of 32 reads
    assert (u.array, u.reads, u.example_element, u.example_thread) == ("s", 31, (1,), (0, 0, 0))
    assert u.location.endswith(line_of("UNINIT"))


# -- divergence, events, CLI --------------------------------------------------------------------------------


@cuda.jit
def half_active(x):
    i = cuda.threadIdx.x
    if i % 4 == 0:
        x[i] = 1.0  # QUARTER


def test_divergence_counts_active_lanes_per_warp_and_line():
    x = np.zeros(48, np.float32)
    with gpukernels.trace(events=True) as t:
        half_active[1, 48](x)
    rows = {(d.warp, d.lanes_in_warp): d for d in t.divergence() if d.location.endswith(line_of("QUARTER"))}
    assert (rows[0, 32].mean_active, rows[0, 32].min_active, rows[0, 32].executions) == (8, 8, 1)
    assert (rows[1, 16].mean_active, rows[1, 16].min_active) == (4, 4)
    ev = t.events()
    assert len(ev) == 12 and set(ev["kind"]) == {"write"} and ev["element"].tolist() == list(range(0, 48, 4))
    assert ev["lane"].tolist() == [0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12]
    assert ev["array"][0] == "x" and ev["location"][0].endswith(line_of("QUARTER"))


def test_cli_prints_tables_and_writes_json(tmp_path, capsys):
    out = tmp_path / "trace.json"
    assert trace_main(["softmax", "--version", "optimized", "--size", "4,64", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Global memory traffic" in text and "Coalescing" in text and "Hazards" in text
    data = json.loads(out.read_text())
    x = [row for row in data["traffic"] if row["array"] == "x"]
    assert x and x[0]["loads"] == 4 * 64 and data["extra"]["version"] == "optimized"
    assert data["hazards"]["races"] == []


# -- atomics, views, distinct elements, barriers (what the grader counts) ---------------------------


@cuda.jit
def read_by_atomic(a, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = cuda.atomic.add(a, i, 0.0)  # READ-BY-ATOMIC


@cuda.jit
def bias_relu_in_place(y, bias):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = 0.0
        cuda.atomic.add(y, i, bias[i])
        cuda.atomic.max(y, i, 0.0)


def test_an_atomic_is_a_load_and_a_store_of_its_element():
    a = np.arange(40, dtype=np.float32)
    out = np.zeros(40, np.float32)
    with gpukernels.trace() as t:
        read_by_atomic[2, 32](a, out)
    ta = by_array(t)["read_by_atomic", "a"]
    assert (ta.loads, ta.stores, ta.atomics) == (40, 40, 40)
    assert (ta.elements_loaded, ta.elements_stored, ta.bytes_loaded) == (40, 40, 160)
    assert t.global_bytes() == 4 * (40 + 40 + 40)  # a loaded and stored by the atomics, out stored
    (line,) = [x for x in t.coalescing().lines if x.array == "a"]
    assert line.kind == "atomic" and line.location.endswith(line_of("READ-BY-ATOMIC"))
    y = np.full(8, -3, np.float32)
    with gpukernels.trace() as t:
        bias_relu_in_place[1, 8](y, np.arange(8, dtype=np.float32) - 4)
    ty = by_array(t)["bias_relu_in_place", "y"]
    assert (ty.stores, ty.loads, ty.atomics) == (8 * 3, 8 * 2, 8 * 2)  # "stored once" must see three stores
    assert y.tolist() == [0, 0, 0, 0, 0, 1, 2, 3]


@cuda.jit
def shared_histogram(x, hist):
    s = cuda.shared.array(4, float32)
    i = cuda.threadIdx.x
    if i < 4:
        s[i] = 0.0
    cuda.syncthreads()
    cuda.atomic.add(s, int(x[i]) % 4, 1.0)
    cuda.syncthreads()
    if i < 4:
        hist[i] = s[i]


@cuda.jit
def atomic_against_plain_read(x, hist):
    s = cuda.shared.array(4, float32)
    i = cuda.threadIdx.x
    if i < 4:
        s[i] = 0.0
    cuda.syncthreads()
    cuda.atomic.add(s, int(x[i]) % 4, 1.0)  # ATOMIC-ADD
    if i < 4:
        hist[i] = s[i]  # UNSYNCED-READ


@cuda.jit
def atomic_on_uninitialised(x, hist):
    s = cuda.shared.array(4, float32)
    i = cuda.threadIdx.x
    cuda.atomic.add(s, int(x[i]) % 4, 1.0)  # NO-ZEROING
    cuda.syncthreads()
    if i < 4:
        hist[i] = s[i]


def test_atomics_race_against_plain_accesses_but_not_each_other():
    x = np.arange(32, dtype=np.float32)
    hist = np.zeros(4, np.float32)
    with gpukernels.trace() as t:
        shared_histogram[1, 32](x, hist)
    assert hist.tolist() == [8, 8, 8, 8]
    assert t.hazards().races == [] and t.hazards().uninitialized == []
    with gpukernels.trace() as t:
        atomic_against_plain_read[1, 32](x, hist)
    (race,) = t.hazards().races
    assert (race.array, race.space, race.first_kind, race.second_kind) == ("s", "shared", "atomic", "read")
    assert race.hazard == "read-after-write"
    assert race.first_location.endswith(line_of("ATOMIC-ADD")) and race.second_location.endswith(line_of("UNSYNCED-READ"))
    with gpukernels.trace() as t:
        atomic_on_uninitialised[1, 32](x, hist)
    (u,) = t.hazards().uninitialized
    assert u.array == "s" and u.location.endswith(line_of("NO-ZEROING"))


@cuda.jit
def read_through_transpose(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a.T[i % 4, i // 4] + a[1:][0, i % 4] + a.ravel()[i]


def test_views_are_traced_as_the_base_array():
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros(8, np.float32)
    with gpukernels.trace(events=True) as t:
        read_through_transpose[1, 8](a, out)
    ta = by_array(t)["read_through_transpose", "a"]
    assert ta.shape == (2, 4) and ta.loads == 3 * 8 and ta.elements_loaded == 8 and ta.elements_stored == 0
    ev = t.events()
    first = ev[(ev["array"] == "a") & (ev["thread"][:, 0] == 5)]["element"].tolist()
    assert first == [1 * 4 + 1, 4 + 1, 5]  # a.T[1, 1] is a[1, 1]; a[1:][0, 1] is a[1, 1]; ravel()[5] is a[1, 1]
    assert a.T[1, 1] + a[1:][0, 1] + a.ravel()[5] == out[5]


@cuda.jit
def reads_every_other(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[2 * i] + a[2 * i]


@cuda.jit
def local_sums(x, out):
    acc = cuda.local.array(4, float32)  # per thread: 4 stores, then 4 + 4 loads (two elements read twice)
    i = cuda.grid(1)
    for q in range(4):
        acc[q] = x[i] * q
    s = float32(0.0)
    for q in range(4):
        s += acc[q] + acc[q & 1]
    out[i] = s


def test_local_arrays_are_counted_logged_or_left_unobserved():
    """A thread's local array: counted without the event log (local=False keeps it out of the log, not the
    counts), in the log with local=True, and not observed at all with count_local=False -- the other arrays' figures
    the same every way."""
    threads = 64
    x = np.arange(threads, dtype=np.float32)
    figures = {}
    for how in ("counted", "logged", "unlogged", "unobserved"):
        kw = {"counted": {}, "logged": dict(events=True), "unlogged": dict(events=True, local=False),
              "unobserved": dict(count_local=False)}[how]
        out = np.full(threads, np.nan, np.float32)
        with gpukernels.trace(**kw) as t:
            local_sums[2, 32](x, out)
        assert np.array_equal(out, x * 6 + x * 2)  # 0+1+2+3 + (0+1+0+1)... of x * q: 6x + 2x
        rows = {r.array: r for r in t.traffic(space=None)}
        figures[how] = {a: (r.space, r.loads, r.stores, r.elements_loaded, r.elements_stored)
                        for a, r in rows.items() if a != "acc"}
        if how == "unobserved":
            assert "acc" not in rows
        else:
            acc = rows["acc"]
            assert (acc.space, acc.loads, acc.stores) == ("local", 8 * threads, 4 * threads), acc
            assert (acc.elements_loaded, acc.elements_stored) == (4, 4), acc  # one array per line, every thread's
        if how in ("logged", "unlogged"):
            spaces = {a.index: a.space for a in t.arrays()}
            logged = sum(spaces[i] == "local" for i in t.accesses()["array"].tolist())
            assert logged == (12 * threads if how == "logged" else 0)
    assert figures["counted"] == figures["logged"] == figures["unlogged"] == figures["unobserved"]


def test_elements_loaded_counts_distinct_elements():
    a = np.arange(16, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with gpukernels.trace() as t:
        reads_every_other[1, 8](a, out)
    ta, to = by_array(t)["reads_every_other", "a"], by_array(t)["reads_every_other", "out"]
    assert (ta.loads, ta.elements_loaded, ta.elements) == (16, 8, 16)
    assert (to.stores, to.elements_stored) == (8, 8)


@cuda.jit
def warp_sum_no_shared(x, out):
    i = cuda.grid(1)
    v = x[i]
    for d in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, d)
    cuda.syncwarp()
    if i % 32 == 0:
        cuda.atomic.add(out, 0, v)


def test_barriers_syncwarps_and_shared_arrays_per_launch():
    x = np.ones(64, np.float32)
    out = np.zeros(1, np.float32)
    hist = np.zeros(4, np.float32)
    with gpukernels.trace() as t:
        warp_sum_no_shared[2, 32](x, out)
        shared_histogram[3, 32](x[:32], hist)
    b0, b1 = t.barriers()
    assert out[0] == 64
    assert (b0.kernel, b0.syncthreads, b0.syncwarp, b0.syncwarp_calls, b0.shared_arrays) == (
        "warp_sum_no_shared", 0, 2, 64, [])
    assert (b1.syncthreads, b1.syncthreads_calls, b1.syncwarp, b1.shared_arrays) == (2 * 3, 2 * 3 * 32, 0, ["s"])
    assert b1.shared_accesses == 3 * (4 + 32 + 4)
    assert t.summary().to_dict()["barriers"][1]["shared_arrays"] == ["s"]


@cuda.jit
def mma_steps(a, out, steps):
    # every warp: `steps` mmas of all-ones tiles (each adds 16 to d0), then each lane stores d0
    i = cuda.grid(1)
    w = _mma.pack_half2(a[0], a[0])
    d0 = d1 = d2 = d3 = float32(0.0)
    for _ in range(steps):
        d0, d1, d2, d3 = _mma.mma_f16(w, w, w, w, w, w, d0, d1, d2, d3)
    out[i] = d0


def test_warp_collectives_are_counted_per_warp_kind_and_launch():
    """One per warp and call, by kind, per launch (none for a launch that failed): what the grader checks a
    tensor-core exercise's mma use with -- FMAs give 0."""
    a = np.ones(1, np.float16)
    out = np.zeros(96, np.float32)
    with gpukernels.trace() as t:
        mma_steps[1, 64](a, out, 2)  # 2 warps x 2
        mma_steps[3, 32](a, out, 1)  # 3 warps x 1
        mma_steps[1, 32](a, out, 0)  # none
        with pytest.raises(IndexError):
            mma_steps[1, 32](a, out[:16], 1)  # lanes 16-31 store past the end
    assert t.collectives() == [{"mma_f16": 4}, {"mma_f16": 3}, {}, {}]
    assert out[0] == 0 and out[95] == 16
