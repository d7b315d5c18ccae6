"""attention steps 10 and 11 -- ``warp_specialized`` (a producer warpgroup feeding rings of K and V tiles by TMA) and
``ping_pong`` (FlashAttention-3's turns of the two consumer warpgroups) -- and the named barriers under step 11
(gpukernels._named_barrier):

* the named barriers in the simulator: two warpgroups taking turns, in the order the barriers give them; each misuse
  an error naming the line -- a count that is not a multiple of 32 or more than the block has, barrier 0, two counts
  in one use, a warp whose lanes part around the instruction -- and a turn handed back by no one a deadlock naming the
  lines the warpgroups wait at and where the other warps are;
* both steps against float64 of their float16 inputs into NaN-poisoned outputs: the default tier at one small shape
  each (3 K/V tiles per head through rings of 2 stages, the last tile partial, its box running into the next head's
  keys), the long tier at odd shapes (Sq != Sk both ways, causal, D = 16, 64, 128, many trips round the rings), rings
  of other sizes, under shuffled schedules; the next head's keys a tile's box reads are masked; the fallback for
  arrays a tensor map cannot describe; the launch plan; ping_pong's turns alternate; the dispatcher does not choose
  them yet;
* bugs planted in a copy of each step's source (same file, same lines), named by line: a producer that skips the
  empty wait, a consumer that never releases its stage (step 10); a named-barrier count that counts the producer too,
  a turn never handed back (step 11);
* on the compiler (no GPU): each kernel's PTX and what nvJitLink's ptxas makes of it -- the bulk tensor copies, both
  mbarrier waits, setmaxnreg honoured, both wgmma forms, step 11's bar.sync / bar.arrive with their ids and count,
  no local memory, no spills, no wgmma serialized.

(tests/test_lessons.py runs both with every version; tests/test_attention.py with the float16 steps, the costlier of
those checks in the long tier.)
"""

import inspect
import json
import types

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import attention as at
from gpukernels._launch import LaunchError
from gpukernels.attention import k10_warp_specialized, k11_ping_pong
from gpukernels.check import FLOAT16_TOLERANCE, compare

from ._tiers import long_tier_after

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="checks the simulator's named barriers, mbarriers and hazard reports")
TOLERANCE = FLOAT16_TOLERANCE["attention"]
MODULES = {"warp_specialized": k10_warp_specialized, "ping_pong": k11_ping_pong}
STEPS = list(MODULES)

if SIM:
    from gpukernels.sim import AsyncHazardError, WarpMaskError


def _line(module, marker: str) -> int:
    """The line of ``module``'s file that holds ``marker`` (once)."""
    lines = [n for n, text in enumerate(inspect.getsource(module).splitlines(), 1) if marker in text]
    assert len(lines) == 1, f"{marker!r} is on lines {lines} of {module.__name__}"
    return lines[0]


# ----------------------------------------------------------------------------------------------------------
# Named barriers in the simulator
# ----------------------------------------------------------------------------------------------------------


def _turns_kernel(count=256, arrive=True, first=True, turns=3, lanes=32):
    """Two warpgroups taking ``turns`` turns each, warpgroup 0 first: each waits at its barrier (1 or 2), writes its
    number into the log, and arrives at the other's. ``arrive`` False: warpgroup 0 never hands the turn back;
    ``first`` False: nobody gives warpgroup 0 its first turn; ``lanes`` < 32: in warpgroup 1's first warp only that
    many lanes arrive at the start (the others leave)."""
    from gpukernels._named_barrier import named_barrier_arrive, named_barrier_sync

    @cuda.jit
    def kernel(log, pos):
        t = cuda.threadIdx.x
        wg = t >> 7
        n = count
        if wg == 1 and first:
            if t - 128 < lanes or t >= 160:
                named_barrier_arrive(1, n)  # FIRST_TURN
            else:
                return
        for _ in range(turns):
            named_barrier_sync(1 + wg, n)  # MY_TURN
            if t & 127 == 0:
                log[cuda.atomic.add(pos, 0, 1)] = wg
            if arrive or wg == 1:
                named_barrier_arrive(2 - wg, n)  # YOUR_TURN

    return kernel


def _run_turns(**kw):
    log, pos = np.full(6, -1, np.int32), np.zeros(1, np.int32)
    _turns_kernel(**kw)[1, 256](log, pos)
    return log


def _here(marker: str) -> str:
    lines = [n for n, text in enumerate(inspect.getsource(_turns_kernel).splitlines()) if f"# {marker}" in text]
    return f"test_attention_hopper.py:{inspect.getsourcelines(_turns_kernel)[1] + lines[0]}"


@sim_only
def test_named_barriers_hand_turns_back_and_forth():
    # warpgroup 1's first arrival gives warpgroup 0 its turn; from then on each turn ends by giving the other its own
    assert list(_run_turns()) == [0, 1, 0, 1, 0, 1]


@sim_only
@pytest.mark.parametrize("kw, message", [
    ({"count": 100}, r"thread count must be a constant multiple of 32 .* got 100"),
    ({"count": 512}, r"the block has 256 threads, so 512 can never arrive"),
], ids=["not-whole-warps", "more-than-the-block"])
def test_named_barrier_counts_are_checked(kw, message):
    with pytest.raises(Exception, match=message) as info:
        _run_turns(**kw)
    assert _here("FIRST_TURN") in str(info.value) or _here("MY_TURN") in str(info.value), str(info.value)


@sim_only
def test_barrier_zero_is_syncthreads():
    from gpukernels._named_barrier import named_barrier_sync

    @cuda.jit
    def kernel():
        named_barrier_sync(0, 64)

    with pytest.raises(Exception, match=r"barrier number must be 1 to 15 \(barrier 0 is cuda.syncthreads\(\)'s\)"):
        kernel[1, 64]()


@sim_only
def test_two_counts_in_one_use_are_named():
    # warps 0-1 count 128 threads, warps 2-3 96, at one barrier: whichever comes first begins the use, and neither
    # completes it alone (64 threads each), so the other's count contradicts it
    from gpukernels._named_barrier import named_barrier_sync

    @cuda.jit
    def kernel():
        if cuda.threadIdx.x < 64:
            named_barrier_sync(3, 128)  # COUNT_128
        else:
            named_barrier_sync(3, 96)  # COUNT_96

    lines = {m: inspect.getsourcelines(kernel.py_func)[1] + n for n, text in
             enumerate(inspect.getsource(kernel.py_func).splitlines()) for m in ("COUNT_128", "COUNT_96") if m in text}
    with pytest.raises(Exception, match=r"this use of barrier 3 began with a count of (128|96) at "
                                        r".*test_attention_hopper.py:(\d+)") as info:
        kernel[1, 128]()
    assert all(f"test_attention_hopper.py:{n}" in str(info.value) for n in lines.values()), str(info.value)


@sim_only
def test_a_warp_whose_lanes_part_is_named():
    # lanes 16-31 of warp 4 leave before warpgroup 1's first arrival: the hardware counts whole warps
    with pytest.raises(WarpMaskError, match=r"named_barrier .*needs all 32 lanes.*lanes 16-31 have already exited"):
        _run_turns(lanes=16)


@sim_only
@pytest.mark.parametrize("kw", [{"arrive": False}, {"first": False}], ids=["missing-arrive", "no-first-turn"])
def test_a_turn_handed_back_by_no_one_is_a_deadlock(kw):
    with pytest.raises(AsyncHazardError, match=r"named barrier hazard \(deadlock\)") as info:
        _run_turns(**kw)
    text = str(info.value)
    assert info.value.hazard == "deadlock" and info.value.location.endswith(_here("MY_TURN")), text
    assert "128 have arrived" in text and "128 never come" in text, text
    # where the warps that have not arrived are: at the other barrier
    assert "the warps that have not arrived: warps" in text and "waiting at named barrier" in text, text


# ----------------------------------------------------------------------------------------------------------
# The steps
# ----------------------------------------------------------------------------------------------------------


def half_inputs(shape, seed):
    return tuple(x.astype(np.float16) for x in at.make_inputs(shape, seed))


def run_step(name, shape, seed, causal=False, inputs=None, launches=None):
    """``name`` at ``shape`` (or on ``inputs``) into a NaN-poisoned output, against float64 of the float16 inputs;
    ``launches(q, k, v, out)``: run these launches instead of the version."""
    q, k, v = inputs if inputs is not None else half_inputs(shape, seed)
    before = q.copy(), k.copy(), v.copy()
    ref = at.reference(q, k, v, causal=causal)
    out = np.full(ref.shape, np.nan, np.float32)
    if launches is None:
        assert at.VERSIONS[name](q, k, v, causal=causal, out=out) is out
    else:
        d_out = cuda.to_device(out)
        for launch in launches(*(cuda.to_device(x) for x in (q, k, v)), d_out):
            launch()
        out = d_out.copy_to_host()
    check = compare(out, ref, TOLERANCE)
    assert check.ok, f"attention.{name} shape={q.shape[:3] + k.shape[2:]} causal={causal} seed={seed}: {check}"
    for x, x0 in zip((q, k, v), before):
        assert np.array_equal(x, x0), f"attention.{name} modified its input"
    return out


# Two heads of 20 queries against 150 keys (3 K/V tiles of 64 through rings of 2 stages: stage 0 used twice, its
# phase bits flip; the last tile partial, its box reading the next head's first 42 keys, or zeros past the last head);
# then Sq > Sk over two ragged query tiles at D = 128, Sq < Sk with many trips round the rings at D = 64, two heads
# at D = 16 with blocks past Sq's second warpgroup, a single key.
SHAPES = [(1, 2, 20, 150, 16), (1, 1, 150, 40, 128), (1, 2, 17, 600, 64), (2, 1, 130, 70, 16), (1, 1, 70, 330, 128),
          (1, 1, 1, 1, 16)]


@pytest.mark.parametrize("name", STEPS)
@pytest.mark.parametrize("causal", long_tier_after(1, [False, True]), ids=["full", "causal"])
@pytest.mark.parametrize("shape", long_tier_after(1, SHAPES), ids=lambda s: "x".join(map(str, s)))
def test_the_step_matches_float64(name, shape, causal, seed):
    run_step(name, shape, seed, causal=causal)


@pytest.mark.parametrize("name", long_tier_after(1, STEPS))
def test_the_next_heads_keys_a_box_reads_are_masked(name, seed):
    # Head 0's last tile (keys 64..69 of 70) is a box of 64 rows: rows 70..127 of the (B*H*Sk, D) view are head 1's
    # keys 0..57. Give them scores far above head 0's and values far from its: unmasked, they would take all of
    # head 0's weight.
    q, k, v = half_inputs((1, 2, 9, 70, 16), seed)
    k[0, 1, :58] = 8.0 * np.sign(q[0, 0].sum(0))  # a score of 8 * sum |q_d| / 4 for every query of head 0
    v[0, 1, :58] = 1000.0
    out = run_step(name, None, seed, inputs=(q, k, v))
    assert np.abs(out[0, 0]).max() < 100


@pytest.mark.slow
@pytest.mark.parametrize("name", STEPS)
@pytest.mark.parametrize("keys, stages", [(64, 3), (128, 2), (32, 4)], ids=["64x3", "128x2", "32x4"])
def test_other_tiles_and_rings(name, keys, stages, seed):
    launches = MODULES[name].__dict__[f"{name}_launches"]
    scale = 1 / np.sqrt(64)
    run_step(name, None, seed, causal=True, inputs=half_inputs((1, 1, 140, 530, 64), seed),
             launches=lambda q, k, v, out: launches(q, k, v, out, True, scale, keys, stages))


@sim_only
@pytest.mark.slow
@pytest.mark.parametrize("name", STEPS)
@pytest.mark.parametrize("seed", [1, 2])
def test_the_step_is_hazard_free_under_shuffled_schedules(name, seed):
    from gpukernels import sim

    with sim.configure(shuffle=True, seed=seed):
        run_step(name, (1, 2, 70, 330, 64), seed, causal=bool(seed & 1))


@pytest.mark.parametrize("name", STEPS)
def test_unaligned_arrays_take_step_9s_path(name, seed):
    # a tensor map needs its array on a 16-byte boundary; so does cp.async: step 9's path is then step 4's kernel
    q, k, v = half_inputs((1, 1, 9, 20, 16), seed)
    buf = np.empty(v.size + 1, np.float16)
    v_odd = buf[1:].reshape(v.shape)  # C-contiguous, 2 bytes past a 16-byte boundary
    v_odd[...] = v
    [launch] = at.VERSIONS[name].launches(q, k, v_odd)
    assert launch.kernel is at.mma_kernel_for(16)
    run_step(name, None, seed, causal=True, inputs=(q, k, v_odd))


@pytest.mark.parametrize("name", STEPS)
def test_the_launch_plan(name):
    from gpukernels._tma import TensorMap

    q, k, v = half_inputs((3, 2, 300, 50, 80), 0)
    [launch] = at.VERSIONS[name].launches(q, k, v)
    kernel = MODULES[name].__dict__[f"{name}_kernel_for"](80)
    assert launch.kernel is kernel and kernel.target == "sm_90a" and kernel.stages == 2
    assert launch.grid == (6 * 3,) and launch.block == (384,)  # 3 query tiles of 128 per head, 6 heads; 3 warpgroups
    # Q's tile (128 rows), then 2 stages of K and 2 of V (64 keys), each in two 64-column atoms at D = 80, + 1 KB
    assert launch.shared_bytes == 2 * (128 + 2 * 64 + 2 * 64) * 128 + 1024
    maps = [a for a in launch.args if isinstance(a, TensorMap)]
    assert [(m.shape, m.box, m.swizzle) for m in maps] == [((6 * 300, 80), (128, 64), 128),
                                                           ((6 * 50, 80), (64, 64), 128), ((6 * 50, 80), (64, 64), 128)]
    names = list(at.VERSIONS)
    assert names.index(name) == names.index("wgmma") + 1 + STEPS.index(name) and names[-1] == "optimized"
    assert name in at.FLOAT16_VERSIONS and name not in at.optimized.steps


@pytest.mark.parametrize("name", STEPS)
def test_the_step_needs_hopper(name, monkeypatch):
    from gpukernels.attention import k09_wgmma

    monkeypatch.setattr(k09_wgmma, "compute_capability", lambda: (8, 9))
    with pytest.raises(LaunchError, match=rf"attention.{name} needs a Hopper GPU .* this one is 8.9. Use "
                                          r"attention.pipelined, or attention.optimized"):
        at.VERSIONS[name](*half_inputs((1, 1, 3, 3, 16), 0))


def test_optimized_does_not_choose_the_hopper_steps_until_they_are_timed():
    choice = at.optimized.choose(8, 16, 4096, 4096, 128, half=True, sms=132)
    assert choice.step == "pipelined"
    assert "steps 9-11 (wgmma, warp_specialized, ping_pong) would take it on Hopper, ping_pong predicted fastest" \
        in choice.why and "once a GPU run has timed them" in choice.why
    assert "ping_pong" not in at.optimized.choose(1, 32, 1, 8192, 128, half=True, sms=132).why  # decoding


@sim_only
def test_ping_pong_turns_alternate(seed):
    # In the simulator's record of the run, the wgmmas of the two consumer warpgroups come in turns: all of warpgroup
    # 1's for a turn, then all of warpgroup 2's, ... -- tiles + 1 turns each (3 tiles: S alone, S + P V twice, P V
    # alone). Step 10, with no turns, issues them in whatever order its warps run.
    q, k, v = half_inputs((1, 1, 20, 150, 16), seed)
    with gpukernels.trace() as t:
        at.ping_pong(q, k, v)
    issuers = [e.thread // 128 for e in t.async_events() if e.kind.startswith("wgmma") and e.what == "issue"]
    turns = [wg for i, wg in enumerate(issuers) if i == 0 or issuers[i - 1] != wg]
    assert turns == [1, 2] * 4, turns


# ----------------------------------------------------------------------------------------------------------
# Planted bugs, named by line
# ----------------------------------------------------------------------------------------------------------


def _mutant(name: str, old: str, new: str):
    """Step ``name``'s module with ``old`` replaced by ``new`` on the same line, compiled under the module's own file
    name, so that the simulator names the real file's lines."""
    real = MODULES[name]
    src = inspect.getsource(real)
    assert src.count(old) == 1, old
    module = types.ModuleType(real.__name__ + "_mutant")
    module.__file__, module.__package__ = real.__file__, real.__package__  # (its relative imports)
    exec(compile(src.replace(old, new), real.__file__, "exec"), module.__dict__)  # noqa: S102 - the project's own
    return module


def _run_mutant(name, module, shape=(1, 1, 20, 300, 16)):
    q, k, v = (cuda.to_device(x) for x in half_inputs(shape, 0))
    out = cuda.to_device(np.zeros(shape[:3] + shape[4:], np.float32))
    for launch in module.__dict__[f"{name}_launches"](q, k, v, out, False, 0.25):
        launch()


@sim_only
def test_a_producer_that_skips_the_empty_wait_is_caught():
    # The producer refills K's stage 0 with tile 2 without waiting for the consumers to release tile 0: the
    # simulator names the producer's line that re-arms the stage and the copy's that is still to be consumed.
    k10 = k10_warp_specialized
    module = _mutant("warp_specialized", "wait_empty(k_empty, it, stages)", "pass")
    with pytest.raises(AsyncHazardError, match="early overwrite") as info:
        _run_mutant("warp_specialized", module)
    text = str(info.value)
    assert f"k10_warp_specialized.py:{_line(k10, 'mbarrier_arrive_expect_tx(k_full, s,')}" in text, text
    assert info.value.issue_location.endswith(f"k10_warp_specialized.py:{_line(k10, 'tma_load_2d(smem, at + a')}")


@sim_only
def test_a_consumer_that_never_releases_hangs_the_producer():
    # The consumers never release K's stages: the producer waits for tile 2's stage forever, the consumers for tile
    # 2's copies -- a deadlock naming both waits.
    k10 = k10_warp_specialized
    module = _mutant("warp_specialized", "release(k_empty, it, stages, releases)", "pass")
    with pytest.raises(AsyncHazardError, match=r"deadlock.*mbarrier k_empty") as info:
        _run_mutant("warp_specialized", module)
    text = str(info.value)
    assert f"k10_warp_specialized.py:{_line(k10, 'wait_empty(k_empty, it, stages)')}" in text, text
    assert f"k10_warp_specialized.py:{_line(k10, 'wait_full(k_full, it, stages)')}" in text, text


@sim_only
def test_a_turn_that_counts_the_producer_too_is_a_deadlock():
    # 384 threads counted at each named barrier, but the producer's 128 never arrive: the first turn never comes
    k11 = k11_ping_pong
    module = _mutant("ping_pong", "TURN = 128 * CONSUMERS", "TURN = 128 * (1 + CONSUMERS)")
    with pytest.raises(AsyncHazardError, match=r"named barrier hazard \(deadlock\)") as info:
        _run_mutant("ping_pong", module)
    text = str(info.value)
    assert "wait at named barrier 1" in text and "for 384 threads: 256 have arrived" in text, text
    assert info.value.location.endswith(f"k11_ping_pong.py:{_line(k11, 'named_barrier_sync(mine, TURN)  #')}"), text
    assert f"k11_ping_pong.py:{_line(k11, 'named_barrier_arrive(1, TURN)')}" in text, text  # warpgroup 2's arrival
    assert "warps 1-3: exited" in text, text  # the producer's idle warps


@sim_only
def test_a_turn_never_handed_back_is_a_deadlock():
    # Each warpgroup takes its turn but never gives the other one: warpgroup 1 has its first turn (warpgroup 2's
    # arrival at the start), then both wait at their barriers forever
    k11 = k11_ping_pong
    module = _mutant("ping_pong", "named_barrier_arrive(other, TURN)  # issued", "pass  # issued")
    with pytest.raises(AsyncHazardError, match=r"named barrier hazard \(deadlock\)") as info:
        _run_mutant("ping_pong", module)
    text = str(info.value)
    at_sync = f"k11_ping_pong.py:{_line(k11, 'named_barrier_sync(mine, TURN)  #')}"
    assert "wait at named barrier 1" in text and "wait at named barrier 2" in text and at_sync in text, text
    assert "128 have arrived" in text and "128 never come" in text, text


# ----------------------------------------------------------------------------------------------------------
# On the compiler
# ----------------------------------------------------------------------------------------------------------

_COMPILE_CHILD = r"""
import json, re, sys
from numba import cuda, types
from gpukernels import attention as at
h3, f3 = types.Array(types.float16, 3, "C"), types.Array(types.float32, 3, "C")
u = types.Array(types.uint64, 1, "C")  # a tensor map in global memory
sig = (h3, h3, h3, f3, u, u, u, types.float32, types.boolean)
from gpukernels.resources import link_lto as _link_lto


def link_lto(k):
    return _link_lto(k, sig, fastmath=True)  # as a GPU builds it (gpukernels.resources.link_lto)


out = {}
for name in sys.argv[1].split(","):
    for d in map(int, sys.argv[2:]):
        k = getattr(at, f"{name}_kernel_for")(d)
        ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0, "a"), launch_bounds=k.targetoptions["launch_bounds"],
                                  fastmath=True)
        log = link_lto(k)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        wgmma = r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16 \{[^}]*\}, "
        out[f"{name}/{d}"] = {
            "registers": int(re.search(r"Used (\d+) registers", log)[1]),
            "stack": int(frame[1]), "spill": int(frame[2]) + int(frame[3]),
            "local": ptx.count("ld.local") + ptx.count("st.local"),
            "ss": re.findall(wgmma + r"%rd\d+, %rd\d+, p, 1, 1, 0, 0;", ptx),
            "rs": re.findall(wgmma + r"\{%r\d+,%r\d+,%r\d+,%r\d+\}, %rd\d+, p, 1, 1, 1;", ptx),
            "bulk": ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"),
            "try_wait": ptx.count("mbarrier.try_wait.parity.shared::cta.b64"),
            "expect_tx": ptx.count("mbarrier.arrive.expect_tx.shared::cta.b64"),
            "release": ptx.count("@p mbarrier.arrive.shared::cta.b64"),
            "tensormap": ptx.count("fence.proxy.tensormap::generic.acquire"),
            "inc": ptx.count("setmaxnreg.inc.sync.aligned.u32 232;"),
            "dec": ptx.count("setmaxnreg.dec.sync.aligned.u32 40;"),
            "maxntid": re.findall(r"\.maxntid (\d+), 1, 1", ptx), "minnctapersm": ".minnctapersm 1" in ptx,
            "bar_sync": re.findall(r"bar\.sync \t?(%r\d+|\d+)(?:, (\d+))?;", ptx),
            "bar_arrive": re.findall(r"bar\.arrive (%r\d+|\d+), (\d+);", ptx),
            "waits": re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx),
            "cp_async": ptx.count("cp.async.cg"), "proxy_fence": ptx.count("fence.proxy.async"),
            "codes": sorted(set(re.findall(r"C75\d\d", log))),
        }
print(json.dumps(out))
"""


def compiled(names, dims) -> dict:
    from gpukernels.resources import run_with_real_cuda

    return json.loads(run_with_real_cuda(_COMPILE_CHILD, ",".join(names), *map(str, dims)))


@pytest.mark.needs_cuda_toolchain
# the long tier compiles D = 128 (the most registers) and 16, 64, 112 (the smallest, one atom, the last ragged
# one): every D measured on 2026-12-07, all without spills (benchmarks/NOTES.md); each D is ~10 CPU-s of CI
@pytest.mark.parametrize("dims", [pytest.param((128,), id="128", marks=pytest.mark.slow),
                                  pytest.param((16, 64, 112), id="others", marks=pytest.mark.slow)])
def test_the_steps_compile_as_planned(dims):
    out = compiled(STEPS, dims)
    for key, r in out.items():
        name, d = key.split("/")
        d = int(d)
        bar_sync, bar_arrive = [tuple(b) for b in r["bar_sync"]], [tuple(b) for b in r["bar_arrive"]]
        # the producer: Q's boxes and each tile's K and V boxes (64-column atoms; the loop unrolled), each armed with
        # its bytes and waited for by parity; the three maps acquired; no cp.async, no generic-to-async proxy fence
        atoms = -(-d // 64)
        assert r["bulk"] > 0 and r["bulk"] % atoms == 0 and r["expect_tx"] >= 3 and r["tensormap"] == 3, (key, r)
        assert r["try_wait"] >= 4 and r["release"] >= 2 and r["cp_async"] == 0 and r["proxy_fence"] == 0, (key, r)
        # setmaxnreg honoured: the registers capped at entry by the launch bounds (384 threads, 1 block per SM:
        # 65536 / 384 = 168), the producer's .dec and the consumers' .inc, and ptxas ignores neither (C7504, C7508)
        assert r["maxntid"] == ["384"] and r["minnctapersm"] and r["registers"] <= 168, (key, r)
        assert r["inc"] == 1 and r["dec"] == 1, (key, r)
        # both wgmma forms: S = Q K^T (both operands from shared memory, B K-major) over D / 16 slices, O += P V (A
        # from four registers, B MN-major) over 64 / 16 -- step 11 issues P V at two places (in the loop, and the last
        # turn's after it)
        turns = 1 if name == "warp_specialized" else 2
        assert len(r["ss"]) == d // 16 and set(r["ss"]) == {"64"}, (key, r)
        assert len(r["rs"]) == turns * 4 and set(r["rs"]) == {str(d)}, (key, r)
        # everything in registers, and ptxas serializes no wgmma (C7515 and its kin)
        assert r["local"] == 0 and r["stack"] == 0 and r["spill"] == 0 and not r["codes"], (key, r)
        if name == "warp_specialized":  # each product waited for at once; one barrier of the whole block, at the start
            assert r["waits"] == ["0", "0"] and bar_sync == [("0", "")] and bar_arrive == [], (key, r)
        else:  # S waited for while P V runs (1), then P V (0), and the last turn's P V (0); the turns' named
            # barriers, their ids in registers, each counting 256 threads
            assert r["waits"] == ["1", "0", "0"], (key, r)
            assert bar_sync[0] == ("0", "") and len(bar_sync) == 3, (key, r)
            assert all(b[0].startswith("%r") and b[1] == "256" for b in bar_sync[1:] + bar_arrive), (key, r)
            assert len(bar_arrive) == 3, (key, r)  # warpgroup 2's first, and one per kind of turn
