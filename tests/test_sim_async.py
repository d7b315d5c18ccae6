"""The simulator's asynchronous operations (gpukernels.sim._async): cp.async lands at the wait that covers it, and
every way of using its memory too early is a hazard that names the issuing line and the access.

Each planted hazard kind (tests/fixtures/async_hazards.py) is reported with both lines; the correct twins run clean;
each lesson's pipeline with its wait count one too high fails here, in the default tier; the lessons' pipelines are
hazard-free under shuffled schedules (long tier)."""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the simulator's asynchronous model")

if gpukernels.MODE == "sim":
    from gpukernels import sim
    from gpukernels.sim import AsyncHazardError

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "async_hazards.py"


def _fixture():
    spec = importlib.util.spec_from_file_location("async_hazards_fixture", FIXTURE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fx():
    return _fixture()


def _line_of(kernel, marker: str) -> int:
    """The line of ``kernel``'s source (in the fixture file) that carries ``marker``."""
    fn = kernel.py_func if hasattr(kernel, "py_func") else kernel.fn
    lines = FIXTURE.read_text().splitlines()
    first = fn.__code__.co_firstlineno
    for n in range(first, len(lines) + 1):
        if marker in lines[n - 1]:
            return n
    raise AssertionError(f"no {marker!r} in {fn.__name__}")


def _copy_inputs():
    return np.arange(64, dtype=np.float32), np.zeros(64, np.float32)


def test_correct_copies_land_by_the_wait(fx):
    src, out = _copy_inputs()
    fx.correct[1, 32](src, out)
    assert np.array_equal(out, np.concatenate([np.roll(src[:32], -1), np.roll(src[32:], -1)]))


@pytest.mark.parametrize("hazard,kernel,marker", [
    ("early read", "early_read", "# early read"),
    ("early read", "no_barrier_after_wait", "# early read"),
    ("missing commit", "missing_commit", "# missing commit"),
    ("wrong wait count", "wrong_wait_count", "# wrong wait count"),
    ("early overwrite", "early_overwrite", "# early overwrite"),
    ("early overwrite", "source_overwrite", "# early overwrite"),
])
def test_each_planted_copy_hazard_names_both_lines(fx, hazard, kernel, marker):
    k = getattr(fx, kernel)
    src, out = _copy_inputs()
    with pytest.raises(AsyncHazardError) as info:
        k[1, 32](src, out)
    err = info.value
    issue, access = _line_of(k, "# ISSUE"), _line_of(k, marker)
    assert err.hazard == hazard, str(err)
    assert err.issue_location.endswith(f"async_hazards.py:{issue}"), str(err)
    assert err.location.endswith(f"async_hazards.py:{access}"), str(err)
    text = str(err)
    assert f"async_hazards.py:{issue}" in text and f"async_hazards.py:{access}" in text
    assert re.search(r"thread \(\d+, 0, 0\)", text) and "block (0, 0, 0)" in text


def test_wait_all_commits_and_waits_for_everything():
    from numba import cuda

    from gpukernels import _intrinsics as I  # noqa: N812

    @cuda.jit
    def kernel(src, out):
        tile = cuda.shared.array(128, np.float32)
        t = cuda.threadIdx.x
        I.copy_async16(tile, 4 * t, src, 4 * t if t < 16 else 0, 16 if t < 16 else 0)  # lanes 16-31: zeros
        I.async_wait_all()  # no commit of its own: wait_all commits first
        cuda.syncthreads()
        out[t] = tile[(4 * t + 5) % 128]

    src, out = _copy_inputs()
    kernel[1, 32](src, out)
    tile = np.concatenate([src, np.zeros(64, np.float32)])
    assert np.array_equal(out[:32], tile[(4 * np.arange(32) + 5) % 128])


def test_ignored_hazard_gives_the_late_value(fx):
    # reported instead of raised: the read came before the copy landed, so it saw the poisoned shared memory
    src, out = _copy_inputs()
    with sim.configure(async_hazards="report"):
        fx.early_read[1, 32](src, out)
    hazards = sim.last_launch().async_hazards
    assert [h.hazard for h in hazards] == ["early read"]
    # (a neighbour whose thread has waited by then -- its wait lands its copy -- reads the copied value)
    assert np.isnan(out[:32]).sum() > 16


def _wgmma_inputs(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((16, 64)).astype(np.float16)
    return a, b, np.full((64, 64), np.nan, np.float32)


def test_wgmma_with_its_fence_runs_clean(fx):
    a, b, c = _wgmma_inputs()
    fx.wgmma_correct[1, 128](a, b, c)
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() < 1e-2


@pytest.mark.parametrize("hazard,kernel,issue,access", [
    ("missing fence", "wgmma_missing_fence", "# WRITE", "# WGMMA"),
    ("early overwrite", "wgmma_early_overwrite", "# WGMMA", "# early overwrite"),
])
def test_wgmma_hazards_name_both_lines(fx, hazard, kernel, issue, access):
    k = getattr(fx, kernel)
    with pytest.raises(AsyncHazardError) as info:
        k[1, 128](*_wgmma_inputs())
    err = info.value
    assert err.hazard == hazard, str(err)
    assert err.issue_location.endswith(f":{_line_of(k, issue)}"), str(err)
    assert err.location.endswith(f":{_line_of(k, access)}"), str(err)


# -- the lessons' pipelines ------------------------------------------------------------------------------------
# Each lesson's wait count one too high (the copy of the stage about to be used still in flight) must fail, in the
# default tier: the lesson module's own `async_wait` (or `wgmma_wait`) is swapped for one that waits for one group
# fewer, which is what the off-by-one in the source does.

def _lesson(lesson, version, shape, seed=0):
    from gpukernels import LESSONS
    from gpukernels.check import version_inputs

    mod = LESSONS[lesson]
    inputs = version_inputs(lesson, version, mod.make_inputs(shape, seed))
    return mod, inputs


PIPELINES = [  # (lesson, version, module whose wait is miscounted, the wait, a shape with several k tiles)
    # (wgmma_wait: the loop's count; its wgmma_wait(0) before the store stays right)
    ("matmul", "async_copy", "gpukernels.matmul._interior", "async_wait", (256, 128, 24)),
    ("tensor_core", "pipelined", "gpukernels.tensor_core.k04_pipelined", "async_wait", (64, 64, 96)),
    ("tensor_core", "wgmma", "gpukernels.tensor_core.k06_wgmma", "async_wait", (128, 256, 192)),
    ("tensor_core", "wgmma", "gpukernels.tensor_core.k06_wgmma", "wgmma_wait", (128, 256, 320)),
    ("tensor_core", "tf32x3", "gpukernels.tensor_core.k11_tf32x3", "async_wait", (128, 128, 96)),
    ("attention", "pipelined", "gpukernels.attention.k05_pipelined", "async_wait", (1, 1, 16, 96, 64)),
    ("attention", "tf32x3", "gpukernels.attention.k06_tf32x3", "async_wait", (1, 1, 16, 96, 64)),
    # decoding's slices run pipelined's loop (tile_walk): its wait, miscounted there, fails here too
    ("attention", "split_keys_f16", "gpukernels.attention.k05_pipelined", "async_wait", (1, 2, 4, 96, 64)),
    # wgmma's tiles, read by the tensor cores: K(0) still in flight at the first wgmma
    ("attention", "wgmma", "gpukernels.attention.k09_wgmma", "async_wait", (1, 1, 16, 96, 64)),
]


@pytest.mark.parametrize("lesson,version,module,wait,shape", PIPELINES,
                         ids=[f"{p[0]}.{p[1]}.{p[3]}" for p in PIPELINES])
def test_a_wait_count_off_by_one_fails(monkeypatch, lesson, version, module, wait, shape):
    mod = sys.modules.get(module) or importlib.import_module(module)
    real = getattr(mod, wait)

    def one_group_fewer(n):
        real(n + 1 if n or wait == "async_wait" else n)

    monkeypatch.setattr(mod, wait, one_group_fewer)
    lesson_mod, inputs = _lesson(lesson, version, shape)
    with pytest.raises(AsyncHazardError) as info:
        lesson_mod.VERSIONS[version](*inputs)
    assert info.value.hazard in ("wrong wait count", "early overwrite"), str(info.value)


def test_a_missing_proxy_fence_in_the_wgmma_lesson_is_named(monkeypatch):
    from gpukernels.tensor_core import k06_wgmma

    monkeypatch.setattr(k06_wgmma, "fence_proxy_async", lambda: None)
    lesson_mod, inputs = _lesson("tensor_core", "wgmma", (128, 256, 64))
    with pytest.raises(AsyncHazardError, match=r"missing fence") as info:
        lesson_mod.VERSIONS["wgmma"](*inputs)
    assert "k06_wgmma.py" in info.value.issue_location and "k06_wgmma.py" in info.value.location


@pytest.mark.slow
@pytest.mark.parametrize("lesson,version,shape", sorted({p[:2] + (p[4],) for p in PIPELINES}))
# two shuffled thread orders (seeds 1 and 2), as test_persistent.py and test_attention_hopper.py run theirs; a
# third seed was a third order of the same launches at the same shape
@pytest.mark.parametrize("seed", [1, 2])
def test_lesson_pipelines_are_hazard_free_under_shuffled_schedules(lesson, version, shape, seed):
    lesson_mod, inputs = _lesson(lesson, version, shape, seed)
    with sim.configure(shuffle=True, seed=seed):  # a hazard in any of the version's launches raises
        lesson_mod.VERSIONS[version](*inputs)


# -- two smaller gaps ------------------------------------------------------------------------------------------

def test_mma_tf32_cuts_raw_float32_inputs_to_19_bits():
    # inputs NOT rounded by to_tf32 first: the tensor core reads only the top 19 bits of each float32 (truncation)
    from numba import cuda, float32

    from gpukernels import _mma

    @cuda.jit
    def kernel(a, b, d):
        lane = cuda.threadIdx.x
        av = [a[_mma.a_tf32_coords(lane, i)] for i in range(4)]
        bv = [b[_mma.b_tf32_coords(lane, i)] for i in range(2)]
        out = _mma.mma_tf32(*av, *bv, float32(0), float32(0), float32(0), float32(0))
        for i in range(4):
            d[_mma.c_frag_coords(lane, i)] = out[i]

    rng = np.random.default_rng(7)
    a = (1 + rng.random((16, 8))).astype(np.float32)  # low mantissa bits set almost everywhere
    b = (1 + rng.random((8, 8))).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    kernel[1, 32](a, b, d)
    cut = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)  # noqa: E731
    exact = cut(a) @ cut(b)
    expected = exact.astype(np.float32)
    away = np.abs(expected.astype(np.float64)) > np.abs(exact)
    expected[away] = np.nextafter(expected[away], np.float32(0))
    assert np.array_equal(d, expected)
    assert not np.array_equal(d, (a.astype(np.float64) @ b).astype(np.float32))  # the cut shows


_PRINTDIM3 = """
import gpukernels
from numba import cuda
from gpukernels import sim

@cuda.jit
def printdim3():
    print(cuda.threadIdx)

for seed in range(4):
    with sim.configure(shuffle=True, seed=seed, preempt=1.0):
        printdim3[1, (2, 2, 2)]()
"""


def test_each_print_in_a_kernel_is_one_whole_line():
    # numba-cuda's test_print.test_dim3, under shuffled schedules: no thread's text or newline inside another's line
    env = dict(os.environ, GPUKERNELS_DEVICE="sim")
    out = subprocess.run([sys.executable, "-c", _PRINTDIM3], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    lines = [ln.strip() for ln in out.splitlines()]
    assert sorted(lines) == sorted([str(i) for i in np.ndindex(2, 2, 2)] * 4)


# -- the record: the tracer's events and the classroom's timeline ------------------------------------------------

def test_tracer_records_copies_issued_landed_waited_and_the_timeline_draws_them(fx):
    from gpukernels.classroom import page, timeline

    src, out = _copy_inputs()
    with gpukernels.trace() as t:
        fx.correct[1, 32](src, out)
    events = t.async_events()
    mine = [(e.what, e.group) for e in events if e.thread == 5]
    # two copies, each in its own group; async_wait(1) lands group 0, async_wait(0) group 1
    assert mine == [("issue", -1), ("commit", 0), ("issue", -1), ("commit", 1), ("land", 0), ("wait", 0),
                    ("land", 1), ("wait", 1)]
    assert {e.launch for e in events} == {0} and all(e.location.endswith(".py:" + e.location.split(":")[-1])
                                                      for e in events)
    rows = timeline.stages(events, thread=5)
    assert [(r["group"], r["copies"]) for r in rows] == [(0, 1), (1, 1)]
    first, second = rows
    assert first["issued"][0] < first["committed"][0] < first["landed"][0] <= first["waited"][0]
    assert first["waited"][1] == 0 and second["waited"][1] == 1  # group 1 waited for after the first barrier
    assert first["wait_line"] != second["wait_line"]
    svg = timeline.svg(events, thread=5)
    assert svg.startswith("<svg") and svg.count("group ") >= 2 and "barrier 1" in svg
    assert 'id="timelines"' in page._timelines({"timelines": {"correct": svg, "plain": ""}})
    assert page._timelines({"timelines": {"plain": ""}}) == ""
    assert t.collectives() == [{"cp.async": 2}]  # one warp, two copy instructions
