"""gpukernels.resources: the occupancy calculator against hand-computed values, the assembler-log parser against
a known log, and one real compile (no GPU needed: compile_ptx + nvJitLink)."""

import json

import numpy as np
import pytest

from gpukernels import LESSONS
from gpukernels import resources as R

# --------------------------------------------------------------------------------------------------------
# Occupancy, computed by hand from the sm_90 limits (64 warps, 32 blocks, 65536 registers in 4 sub-partitions
# handed out per warp in units of 256, 228 KB shared memory, 1 KB reserved per block, 128-byte units).
# --------------------------------------------------------------------------------------------------------


def test_tiled_matmul_16x16_fills_the_sm():
    # 256 threads = 8 warps; 32 regs -> 1024 per warp -> 16 warps per sub-partition -> 64 warps -> 8 blocks;
    # threads: 64 / 8 = 8 blocks; smem: 3072 + 1024 = 4096 B -> 233472 // 4096 = 57 blocks.
    occ = R.occupancy("sm_90", 256, registers=32, shared_bytes=3072, barriers=1)
    assert occ.limits["threads"] == 8
    assert occ.limits["registers"] == 8
    assert occ.limits["shared memory"] == 57
    assert occ.limits["blocks"] == 32
    assert occ.limits["barriers"] == 64
    assert (occ.blocks_per_sm, occ.warps_per_sm) == (8, 64)
    assert occ.occupancy == 1.0
    assert set(occ.binding) == {"threads", "registers"}


def test_148_registers_leave_one_block():
    # 148 regs * 32 = 4736 -> 4864 per warp (rounded to 256); 16384 // 4864 = 3 warps per sub-partition
    # -> 12 warps per SM -> one block of 8 warps (12.5 %).
    occ = R.occupancy("sm_90", 256, registers=148, shared_bytes=9216, barriers=1)
    assert occ.regs_per_warp == 4864
    assert occ.limits["registers"] == 1
    assert occ.blocks_per_sm == 1 and occ.warps_per_sm == 8
    assert occ.occupancy == pytest.approx(0.125)
    assert occ.binding == ("registers",)


def test_block_too_big_for_the_register_file():
    # 13 warps round up to 16 for the per-block check: 16 * 4864 = 77824 > 65536 -> cannot launch.
    occ = R.occupancy("sm_90", 416, registers=148)
    assert occ.blocks_per_sm == 0 and occ.occupancy == 0
    assert "registers" in occ.binding


def test_shared_memory_binds():
    # 40 KB static + 1 KB reserved = 41984 B -> 233472 // 41984 = 5 blocks of 4 warps = 20 warps.
    occ = R.occupancy("sm_90", 128, registers=32, shared_bytes=40 * 1024)
    assert occ.smem_per_block == 41984
    assert occ.limits["shared memory"] == 5
    assert occ.binding == ("shared memory",)
    assert occ.warps_per_sm == 20


def test_small_blocks_hit_the_block_limit():
    occ = R.occupancy("sm_90", 32, registers=16)
    assert occ.blocks_per_sm == 32 and occ.binding == ("blocks",)
    assert occ.occupancy == 0.5
    # sm_86 allows only 16 blocks and 48 warps
    occ86 = R.occupancy("sm_86", 32, registers=16)
    assert occ86.blocks_per_sm == 16 and occ86.max_warps_per_sm == 48


def test_barriers_only_limit_sm_90():
    assert R.occupancy("sm_90", 64, registers=16, barriers=5).limits["barriers"] == 12
    assert "barriers" not in R.occupancy("sm_80", 64, registers=16, barriers=5).limits


def test_partial_warp_counts_as_a_whole_warp():
    occ = R.occupancy("sm_90", 100, registers=32)  # 4 warps
    assert occ.warps_per_block == 4 and occ.limits["threads"] == 16


def test_arch_names():
    assert R.get_arch("90").name == R.get_arch("sm90").name == "sm_90"
    with pytest.raises(ValueError, match="known"):
        R.get_arch("sm_12")
    for a in R.ARCHS.values():
        assert a.regs_per_sm == 65536 and a.reg_alloc_unit == 256 and a.warp_size == 32
        assert a.max_warps_per_sm * 32 == a.max_threads_per_sm


# --------------------------------------------------------------------------------------------------------
# The assembler log
# --------------------------------------------------------------------------------------------------------

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN6tiled_kernel' for 'sm_90'
ptxas info    : Function properties for _ZN6tiled_kernel
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 31 registers, used 1 barriers, 3072 bytes smem, 384 bytes cmem[0]
ptxas info    : Compile time = 40.1 ms
info    : 8 bytes gmem
info    : Function properties for '_ZN6tiled_kernel':
info    : used 31 registers, used 1 barriers, 16 stack, 3072 bytes smem, 744 bytes cmem[0], 16 bytes lmem
"""


def test_parse_log():
    r = R.parse_log(LOG, "sm_90")
    # sm_90's figure includes the 1 KB the driver reserves per block: the driver counts 2048 static bytes.
    assert (r.registers, r.shared_bytes, r.log_shared_bytes, r.local_bytes, r.barriers) == (31, 2048, 3072, 16, 1)
    assert (r.stack_bytes, r.spill_stores, r.spill_loads, r.const_bytes) == (16, 8, 12, 744)
    assert R.parse_log(LOG, "sm_80").shared_bytes == 3072


def test_parse_log_barriers_come_from_ptxas():
    # The linker's summary says 5 barriers for kernels without any barrier instruction; ptxas says 0.
    log = ("ptxas info    : Used 28 registers, used 0 barriers\n"
           "info    : used 28 registers, used 5 barriers, 0 stack, 0 bytes smem, 744 bytes cmem[0], 0 bytes lmem\n")
    assert R.parse_log(log).barriers == 0
    with pytest.raises(ValueError):
        R.parse_log("nothing here")


# --------------------------------------------------------------------------------------------------------
# One real compile: matmul.tiled, 16 x 16 tiles of float32 in shared memory
# --------------------------------------------------------------------------------------------------------


@pytest.mark.needs_cuda_toolchain
def test_compile_tiled_matmul(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUKERNELS_CACHE", str(tmp_path))
    rows = R.report(["matmul"], "sm_90", versions={"matmul": ["tiled"]})
    (row,) = rows
    assert row.kernel == "tiled_kernel"
    assert row.block == (16, 16) and row.grid == (256, 256)  # the launcher's configuration at 4096^3
    assert row.resources.shared_bytes == 2 * 16 * 16 * 4  # two float32 tiles, as the driver counts them
    assert row.resources.log_shared_bytes == 2 * 16 * 16 * 4 + 1024  # nvJitLink adds sm_90's reserved 1 KB
    assert row.resources.local_bytes == 0 and row.resources.spill_stores == 0
    assert row.resources.barriers == 1  # both syncthreads use barrier 0
    assert 16 <= row.resources.registers <= 64
    # The occupancy from the sm_90 limits, by hand: 8 warps per block; registers per warp rounded up to 256, a
    # sub-partition's 16384 of them hold whole warps, 4 sub-partitions; 2048 + 1024 B of shared memory per block
    # out of 233472; 64 warps, 32 blocks, 64 barrier slots for one barrier per block.
    regs = row.resources.registers
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = 4 * (16384 // per_warp) // 8
    blocks = min(64 // 8, 32, by_regs, 233472 // (2048 + 1024), 64 // 1)
    occ = row.occupancy
    assert occ.regs_per_warp == per_warp and occ.limits["registers"] == by_regs
    assert (occ.blocks_per_sm, occ.warps_per_sm) == (blocks, 8 * blocks)
    assert occ.occupancy == pytest.approx(8 * blocks / 64)
    # cached: a second report reads the file instead of compiling
    assert list(tmp_path.rglob("*.json"))
    again = R.report(["matmul"], "sm_90", versions={"matmul": ["tiled"]})
    assert again[0].resources == row.resources
    d = row.to_dict()
    json.dumps(d)
    assert d["occupancy"] == row.occupancy.occupancy and d["limited_by"] == list(row.occupancy.binding)


def test_cli_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUKERNELS_CACHE", str(tmp_path / "cache"))
    # Pre-fill the cache from a fake log so the CLI test does not compile: it checks the plumbing only.
    import gpukernels

    for lesson in gpukernels.LESSONS:
        for plans in R.plans_for(lesson, R.lesson_shape(lesson)).values():
            for launch in plans:
                R._cache_put(R.cache_key(launch, "sm_80"), {"log": LOG})
    out = tmp_path / "r.json"
    assert R.resources_main(["--arch", "sm_80", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["arch"]["name"] == "sm_80"
    assert {r["lesson"] for r in data["rows"]} == set(gpukernels.LESSONS)
    assert all(r["registers"] == 31 and r["shared_bytes"] == 3072 for r in data["rows"])
    assert "Resources and occupancy on sm_80" in capsys.readouterr().out


def test_compiles_are_spread_over_child_processes_in_order(monkeypatch):
    """Uncached compiles go to several children at once (every jobs-th request to each); the results come back in
    the order of the requests whatever the split, and GPUKERNELS_COMPILE_JOBS chooses how many."""
    calls = []

    def child(chunk):
        calls.append([r["index"] for r in chunk])
        return [{"compiled": r["index"]} for r in chunk]

    monkeypatch.setattr(R, "_compile_in_child", child)
    monkeypatch.setattr(R, "require_toolchain", lambda *a: None)
    requests = [{"index": i} for i in range(7)]
    monkeypatch.setenv("GPUKERNELS_COMPILE_JOBS", "3")
    assert R.compile_requests(requests) == [{"compiled": i} for i in range(7)]
    assert sorted(calls) == [[0, 3, 6], [1, 4], [2, 5]]
    assert R.compile_jobs(2) == 2 and R.compile_jobs(1) == 1
    monkeypatch.setenv("GPUKERNELS_COMPILE_JOBS", "")
    assert 1 <= R.compile_jobs(100) <= R.MAX_COMPILE_JOBS


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_plans_from_the_input_shapes_are_the_plans_of_real_inputs(lesson):
    """`plans_for` plans on zeros of each lesson's `input_shapes` (attention's random inputs at its GPU shape took
    5 s): the shapes and dtypes are `make_inputs`'s, and every version's launches are the same as on real inputs."""
    from gpukernels.check import supports, version_inputs
    from gpukernels.resources import LaunchPlan, _signature

    mod = LESSONS[lesson]
    for shape in [tuple(s) for s in mod.SHAPES["test"] + mod.SHAPES["test_gpu"]]:
        real = mod.make_inputs(shape, 1)
        assert [(x.shape, x.dtype) for x in real] == [(tuple(s), np.dtype(d)) for s, d in mod.input_shapes(shape)]
        R._PLANS.pop((lesson, shape), None)
        planned = R.plans_for(lesson, shape)
        for name, v in mod.VERSIONS.items():
            want = ([LaunchPlan(l.kernel, tuple(l.grid), tuple(l.block), l.shared_bytes, _signature(l))
                     for l in v.launches(*version_inputs(lesson, name, real))] if supports(lesson, name, shape) else [])
            assert planned[name] == want, f"{lesson}.{name} at {shape}"
