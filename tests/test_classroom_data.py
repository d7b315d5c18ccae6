"""The classroom page's data (gpukernels.classroom.data) against the tracer's own numbers: loads per step add
up to traffic(), per-warp-access sectors and conflict degrees add up to coalescing() and bank_conflicts(), and
the racing elements of each pair of lines are as many as hazards() says. Small sizes: each trace is a second."""

import pytest

import gpukernels
from gpukernels.classroom import data, racy

SHAPE = (32, 32, 32)
#: The tracer runs in this process only on the simulator; on a GPU machine the page is traced in a simulator child
#: (the last test, which runs everywhere).
sim_only = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the tracer runs on the simulator")


@pytest.fixture(scope="module")
def traced():
    mod = gpukernels.matmul
    inputs = mod.make_inputs(SHAPE, 0)
    out = {}
    for name, run in (("naive", mod.naive), ("tiled", mod.tiled), ("broken", racy.tiled_no_first_barrier)):
        out[name] = data.record(run, inputs)[0]
    return out


@sim_only
@pytest.mark.parametrize("name", ["naive", "tiled", "broken"])
def test_loads_per_step_add_up_to_the_tracers_traffic(traced, name):
    t = traced[name]
    d = data.version_data(t, name, "")
    for a in t.traffic():
        g = next(x for x in d["global"] if x["name"] == a.array)
        assert g["loads"] == a.loads and g["stores"] == a.stores
        assert sum(sum(s["loads"].get(a.array, [])) for s in d["steps"]) == a.loads


@pytest.mark.slow  # 3 CPU-s: a lesson traced
@sim_only
def test_tiled_steps_are_its_k_phases(traced):
    d = data.version_data(traced["tiled"], "tiled", "", "K phase")
    assert [s["label"] for s in d["steps"]] == ["tiled_kernel: K phase 1 of 2", "tiled_kernel: K phase 2 of 2"]
    # each phase loads every element of A and B once per block column / row: half of the total each
    for s in d["steps"]:
        assert sum(s["loads"]["a"]) == sum(s["loads"]["b"]) == 1024
    # block 0's A tile in phase 2 holds a[0:16, 16:32]
    tile = next(x for x in d["shared"] if x["name"] == "a_tile")
    cells = tile["cells"]["1:0"]
    assert tile["source"] == "a"
    assert sorted(cells[1::2]) == sorted(r * 32 + c for r in range(16) for c in range(16, 32))


@sim_only
@pytest.mark.parametrize("name", ["naive", "tiled"])
def test_warp_accesses_use_the_tracers_definitions(traced, name):
    t = traced[name]
    accesses = data.Events(t).warp_accesses()
    for line in t.coalescing().lines:
        mine = [w for w in accesses if (w["location"], w["array"], w["kind"]) == (line.location, line.array, line.kind)]
        assert len(mine) == line.requests
        assert sum(w["sectors"] for w in mine) == line.sectors
        assert sum(w["min_sectors"] for w in mine) == line.min_sectors
    for line in t.bank_conflicts():
        mine = [w for w in accesses if (w["location"], w["array"], w["kind"]) == (line.location, line.array, line.kind)]
        assert len(mine) == line.requests
        assert sum(w["degree"] for w in mine) == line.wavefronts
        assert max(w["degree"] for w in mine) == line.max_degree


@sim_only
def test_the_race_view_draws_as_many_elements_as_the_tracer_counts(traced):
    t = traced["broken"]
    d = data.version_data(t, "broken", "", races=True)
    races = t.hazards().races
    assert races and len(d["races"]) == len(races)
    for r, page in zip(races, d["races"]):
        assert page["elements"] == r.elements == len(page["cells"]) // 3
        assert page["first"]["source"].startswith(f"{r.array}[ty, tx] = ")  # the tile store
        assert "a_tile[ty, kk] * b_tile[kk, tx]" in page["second"]["source"]


def test_runs():
    assert data.runs([0, 1, 2, 3, 8, 16]) == [(0, 1, 4), (8, 8, 2)]
    assert data.runs([5]) == [(5, 1, 1)]
    assert data.runs([3, 1, 9, 7, 5, 2]) == [(1, 1, 3), (5, 2, 3)]
    assert sum((data.expand(*r) for r in data.runs([3, 1, 9, 7, 5, 2])), []) == [1, 2, 3, 5, 7, 9]


@sim_only
def test_a_size_too_large_for_a_page_is_refused():
    mod = gpukernels.matmul
    with pytest.raises(data.TooLarge, match="choose a smaller --size"):
        data.record(mod.naive, mod.make_inputs((16, 16, 16), 0), "matmul.naive", limit=100)


def test_on_a_gpu_machine_the_page_is_traced_in_a_simulator_child(monkeypatch):
    from gpukernels import classroom

    monkeypatch.setattr(gpukernels, "MODE", "gpu")  # as on a GPU machine: the child runs on the simulator
    d = classroom.page_data_anywhere("matmul", ["naive", "tiled"], (8, 8, 8))
    assert [v["name"] for v in d["versions"]] == ["naive", "tiled"] and d["broken"]["races"]
    with pytest.raises(data.TooLarge, match="would record millions of accesses"):  # one line, not a traceback
        classroom.page_data_anywhere("matmul", None, (4096, 4096, 4096))


@sim_only
def test_a_16_byte_access_is_one_request_at_the_kernels_line():
    """softmax's short rows take vector_rows: each lane loads 16 bytes with load4. The GPU issues that as one
    request per warp -- 32 lanes x 16 bytes, 16 sectors, all needed -- and so do the tracer and the page, at the
    kernel's line that called load4 (not a line of gpukernels/_intrinsics.py)."""
    mod = gpukernels.softmax
    t, _ = data.record(mod.optimized, mod.make_inputs((32, 64), 0))
    lines = t.coalescing().lines
    assert {x.location.rsplit(":", 1)[0] for x in lines} == {"gpukernels/softmax/k06_vector_rows.py"}
    load = next(x for x in lines if x.kind == "read")
    assert "load4(" in load.source and load.efficiency == 1.0
    assert load.requests * 16 == load.sectors == 32 * 64 * 4 // 32  # a request per warp and run: 16 sectors
    d = data.version_data(t, "optimized", "")
    line = next(x for x in d["lines"] if x["kind"] == "read")
    assert line["width"] == 4 and line["location"] == load.location
    accesses = [w for w in data.Events(t).warp_accesses() if w["kind"] == "read"]
    assert len(accesses) == load.requests
    assert all(w["sectors"] == w["min_sectors"] == 16 for w in accesses)  # 4 rows x 8 lanes x 16 contiguous bytes


@sim_only
def test_a_shared_cell_the_block_computes_is_not_a_copy():
    """registers' block reduction stores partial maxima in shared memory: cells the block computed (-2), not
    values of x copied there (the global element a thread loaded last is not what it stores)."""
    mod = gpukernels.softmax
    t, _ = data.record(mod.optimized, mod.make_inputs((4, 1024), 0))
    d = data.version_data(t, "optimized", "")
    tile = d["shared"][0]
    cells = [c for k, v in tile["cells"].items() for c in v[1::2]]
    assert tile["source"] is None and cells and set(cells) == {-2}
    # tiled matmul's tiles are copies of a and b
    t, _ = data.record(gpukernels.matmul.tiled, gpukernels.matmul.make_inputs((16, 16, 16), 0))
    d = data.version_data(t, "tiled", "")
    assert {x["source"] for x in d["shared"]} == {"a", "b"}
    assert all(c >= 0 for x in d["shared"] for v in x["cells"].values() for c in v[1::2])
