"""attention.wgmma (step 9: both products as Hopper's warpgroup MMA) and the wgmma forms under it
(gpukernels._wgmma_rs):

* the layouts: the register fragment of A (each of the 64 x 16 elements held once, warp w rows 16 w .., mma.sync's
  A fragment within), the identity that makes two 8-key n-tiles of S the A fragment of a 16-key slice of P, and the
  tiles' swizzled layout against the descriptors' (`k_major_byte`, `mn_major_byte`);
* the simulated instructions against NumPy: A from registers times MN-major B, K-major A times K-major B with
  scale-d 0 and 1; a thread whose fragment is wrong changes exactly its rows of the product; a warp of the warpgroup
  that does not issue the wgmma, or a block without whole warpgroups, is an error naming the line;
* the step against float64 of its float16 inputs, outputs poisoned with NaN: Sq != Sk both ways, partial query and
  K/V tiles, several K/V tiles (the online rescale), D = 16, 64, 128, causal and not; its fallback for unaligned rows,
  its refusal off Hopper, its launch plan and block order; the dispatcher does not choose it yet;
* planted bugs the simulator names by line: the proxy fence left out after the copies, the accumulators of S used
  before the wgmma_wait that covers them (the next copy overwrites K under the tensor cores);
* on the compiler (no GPU): its PTX holds both wgmma forms, no local memory, and ptxas neither spills nor serializes
  the wgmmas.

(tests/test_attention.py runs it with the other float16 steps -- ``FLOAT16_VERSIONS`` --, tests/test_lessons.py with
every version, tests/test_race_check.py under the tracer.)
"""

import json
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import _mma
from gpukernels import attention as at
from gpukernels._launch import LaunchError
from gpukernels._wgmma_rs import wgmma_a_coords, wgmma_rs, wgmma_ss_k
from gpukernels.attention import k09_wgmma
from gpukernels.check import FLOAT16_TOLERANCE, compare

from ._tiers import long_tier_after

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="checks the simulator's instructions and its hazard reports")
TOLERANCE = FLOAT16_TOLERANCE["attention"]
SOURCE = Path(k09_wgmma.__file__)


def _line(marker: str) -> int:
    """The line of k09_wgmma.py that holds ``marker`` (once)."""
    lines = [n for n, text in enumerate(SOURCE.read_text().splitlines(), 1) if marker in text]
    assert len(lines) == 1, f"{marker!r} is on lines {lines} of {SOURCE.name}"
    return lines[0]


def _rz(exact: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded toward zero (the simulated tensor core's adder truncates, as `_mma` models it)."""
    d = exact.astype(np.float32)
    away = np.abs(d.astype(np.float64)) > np.abs(exact)
    d[away] = np.nextafter(d[away], np.float32(0))
    return d


# ----------------------------------------------------------------------------------------------------------
# The layouts
# ----------------------------------------------------------------------------------------------------------


def test_a_register_fragment_holds_each_element_once():
    seen = sorted(wgmma_a_coords(t, i) for t in range(128) for i in range(8))
    assert seen == [(r, c) for r in range(64) for c in range(16)]
    # warp w: rows 16 w .. 16 w + 15, each lane as in mma.sync's A fragment (PTX ISA: the figure of wgmma's A)
    assert all(wgmma_a_coords(32 * w + lane, i) == (16 * w + _mma.a_frag_coords(lane, i)[0],
                                                    _mma.a_frag_coords(lane, i)[1])
               for w in range(4) for lane in range(32) for i in range(8))
    assert [wgmma_a_coords(37, i) for i in range(8)] == [(17, 2), (17, 3), (25, 2), (25, 3), (17, 10), (17, 11),
                                                         (25, 10), (25, 11)]
    with pytest.raises(ValueError, match="thread must be an int from 0 to 127"):
        wgmma_a_coords(128, 0)


def test_two_n_tiles_of_scores_are_the_a_fragment_of_a_16_key_slice():
    # What p_fragment relies on, per thread of the warpgroup: accumulators 8 kk .. 8 kk + 7 of S (n-tiles 2 kk and
    # 2 kk + 1, `wgmma_d_coords`) are elements a0 .. a7 of the RS wgmma's A for keys 16 kk .. 16 kk + 15, in order --
    # which is how p_fragment packs them: (s[2kk, 0], s[2kk, 1]), (s[2kk, 2], s[2kk, 3]), (s[2kk+1, 0], ...), ...
    for t in range(128):
        for kk in range(4):
            for i in range(8):
                r, c = _mma.wgmma_d_coords(t, 8 * kk + i)
                assert wgmma_a_coords(t, i) == (r, c - 16 * kk), (t, kk, i)


@pytest.mark.parametrize("rows", [64, 128])
def test_tiles_lie_where_the_descriptors_read_them(rows):
    at_ = k09_wgmma.tile_at
    # every element of a rows x 128 tile (two 64-column atoms) has its own place
    places = sorted(at_(r, c, rows) for r in range(rows) for c in range(128))
    assert places == list(range(rows * 128))
    # Q and K: K-major -- atom a of the tile starts rows * 128 bytes in, element (r, c) as k_major_byte puts it
    assert all(2 * at_(r, c, rows) == _mma.k_major_byte((c >> 6) * rows * 128, r, c & 63)
               for r in range(rows) for c in range(128))
    # V: MN-major -- k = the row (key), n = the column (dimension), atoms rows * 128 bytes apart (the lbo)
    assert all(2 * at_(k, n, rows) == _mma.mn_major_byte(0, k, n, lbo=rows * 128)
               for k in range(rows) for n in range(128))


# ----------------------------------------------------------------------------------------------------------
# The simulated instructions
# ----------------------------------------------------------------------------------------------------------


def _rs_kernel(n, bad=-1, skip_warp=-1):
    """One warpgroup: A (64 x 16) from global memory into each thread's four words (thread ``bad`` swaps words 0 and
    2), B (16 x n) into a swizzled MN-major tile, D = A B by one wgmma_rs; warp ``skip_warp`` does not issue it."""
    blocks = n // 8

    @cuda.jit
    def kernel(a, b, c):
        sb = cuda.shared.array(16 * 128, np.float16)
        acc = cuda.local.array((blocks, 4), np.float32)
        t = cuda.threadIdx.x
        for e in range(t, 16 * n, cuda.blockDim.x):
            sb[k09_wgmma._tile_at(e // n, e % n, 16)] = b[e // n, e % n]
        for j in range(blocks):
            for e in range(4):
                acc[j, e] = 0.0
        _mma.fence_proxy_async()
        cuda.syncthreads()
        r0, q = 16 * (t >> 5) + ((t & 31) >> 2), t & 3  # wgmma_a_coords: rows r0, r0 + 8; columns 2q.., 8 + 2q..
        w0 = _mma.pack_half2(a[r0, 2 * q], a[r0, 2 * q + 1])
        w1 = _mma.pack_half2(a[r0 + 8, 2 * q], a[r0 + 8, 2 * q + 1])
        w2 = _mma.pack_half2(a[r0, 8 + 2 * q], a[r0, 9 + 2 * q])
        w3 = _mma.pack_half2(a[r0 + 8, 8 + 2 * q], a[r0 + 8, 9 + 2 * q])
        if t == bad:
            w0, w2 = w2, w0
        if t >> 5 != skip_warp:
            _mma.wgmma_fence()
            wgmma_rs(acc, n, w0, w1, w2, w3, sb, 0, 16 * 128)  # WGMMA_RS
            _mma.wgmma_commit()
            _mma.wgmma_wait(0)
        for j in range(blocks):
            for e in range(4):
                c[r0 + 8 * (e >> 1), 8 * j + 2 * q + (e & 1)] = acc[j, e]

    return kernel


def _ab(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((64, 16)).astype(np.float16), rng.standard_normal((16, n)).astype(np.float16)


@sim_only
@pytest.mark.parametrize("n", [16, 80, 128])
def test_wgmma_rs_is_the_product_of_the_register_fragments(n, seed):
    a, b = _ab(n, seed)
    c = np.full((64, n), np.nan, np.float32)
    _rs_kernel(n)[1, 128](a, b, c)
    assert np.array_equal(c, _rz(a.astype(np.float64) @ b.astype(np.float64)))


@sim_only
def test_a_thread_with_a_wrong_fragment_gives_a_wrong_product_in_its_rows(seed):
    # thread 37 (warp 1, lane 5) hands in its word 2 -- row 17, columns 10 and 11 -- as word 0 (row 17, columns 2 and
    # 3) and back: the product is wrong in row 17 and only there, and it is the product of A with those elements
    # swapped -- each thread's words are placed where wgmma_a_coords says, and taken from nowhere else
    n = 64
    a, b = _ab(n, seed)
    c = np.full((64, n), np.nan, np.float32)
    _rs_kernel(n, bad=37)[1, 128](a, b, c)
    good = _rz(a.astype(np.float64) @ b.astype(np.float64))
    assert [r for r in range(64) if not np.array_equal(c[r], good[r])] == [17]
    swapped = a.copy()
    swapped[17, [2, 3, 10, 11]] = a[17, [10, 11, 2, 3]]
    assert np.array_equal(c, _rz(swapped.astype(np.float64) @ b.astype(np.float64)))


@sim_only
def test_every_warp_of_the_warpgroup_issues_the_wgmma():
    from gpukernels.sim import WarpMaskError

    a, b = _ab(16, 0)
    c = np.zeros((64, 16), np.float32)
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# WGMMA_RS" in text)
    with pytest.raises(WarpMaskError, match=rf"wgmma_rs at .*test_attention_wgmma.py:{line}.* without its warp 3"):
        _rs_kernel(16, skip_warp=3)[1, 128](a, b, c)
    with pytest.raises(WarpMaskError, match=r"without its warp 3 \(the block has 96 threads, no such warp"):
        _rs_kernel(16)[1, 96](a, b, c)


def _ss_kernel(n, accumulate):
    @cuda.jit
    def kernel(a, bt, c):
        # A (64 x 32) and B^T (n x 32: row n holds its k's) in K-major tiles; two k16 slices, the first with scale-d
        # = accumulate (0: D = A B, the 7s in acc dropped), the second accumulating
        sa = cuda.shared.array(64 * 64, np.float16)
        sb = cuda.shared.array(128 * 64, np.float16)
        acc = cuda.local.array(n // 2, np.float32)
        t = cuda.threadIdx.x
        for e in range(t, 64 * 32, 128):
            sa[k09_wgmma._tile_at(e // 32, e % 32, 64)] = a[e // 32, e % 32]
        for e in range(t, n * 32, 128):
            sb[k09_wgmma._tile_at(e // 32, e % 32, 128)] = bt[e // 32, e % 32]
        for i in range(n // 2):
            acc[i] = 7.0
        _mma.fence_proxy_async()
        cuda.syncthreads()
        _mma.wgmma_fence()
        wgmma_ss_k(acc, n, sa, 0, sb, 0, accumulate)
        wgmma_ss_k(acc, n, sa, 16, sb, 16, 1)
        _mma.wgmma_commit()
        _mma.wgmma_wait(0)
        _mma.wgmma_store(c, acc, n, 16 * (t // 32) + (t % 32) // 4, 2 * (t % 4))

    return kernel


@sim_only
@pytest.mark.parametrize("accumulate", [0, 1])
def test_wgmma_ss_k_reads_b_k_major_and_scale_d_restarts_the_sum(accumulate, seed):
    n = 48
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 32)).astype(np.float16)
    b = rng.standard_normal((32, n)).astype(np.float16)
    c = np.full((64, n), np.nan, np.float32)
    _ss_kernel(n, accumulate)[1, 128](a, np.ascontiguousarray(b.T), c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    first = _rz(a64[:, :16] @ b64[:16] + (7.0 if accumulate else 0.0))
    assert np.array_equal(c, _rz(a64[:, 16:] @ b64[16:] + first))


# ----------------------------------------------------------------------------------------------------------
# The step
# ----------------------------------------------------------------------------------------------------------


def half_inputs(shape, seed):
    return tuple(x.astype(np.float16) for x in at.make_inputs(shape, seed))


def run_wgmma(shape, seed, causal=False, inputs=None):
    q, k, v = inputs if inputs is not None else half_inputs(shape, seed)
    before = q.copy(), k.copy(), v.copy()
    ref = at.reference(q, k, v, causal=causal)  # float64 of the float16 values
    out = np.full(ref.shape, np.nan, np.float32)  # poison: an element never written fails
    assert at.wgmma(q, k, v, causal=causal, out=out) is out
    check = compare(out, ref, TOLERANCE)
    assert check.ok, f"attention.wgmma shape={q.shape[:3] + k.shape[2:]} causal={causal} seed={seed}: {check}"
    for x, x0 in zip((q, k, v), before):
        assert np.array_equal(x, x0), "attention.wgmma modified its input"
    return out


# Two heads of 130 queries (two blocks of 128, the second ragged) against 70 keys (two K/V tiles, the second ragged)
# at D = 16; Sq < Sk over three tiles at D = 64; Sq > Sk at D = 128 (one partial K/V tile); a block past Sq's
# second warpgroup (17 queries); a single key.
SHAPES = [(2, 1, 130, 70, 16), (1, 2, 17, 150, 64), (1, 1, 150, 40, 128), (1, 1, 70, 130, 128), (1, 1, 1, 1, 16)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", long_tier_after(1, SHAPES), ids=lambda s: "x".join(map(str, s)))
def test_wgmma_matches_float64(shape, causal, seed):
    run_wgmma(shape, seed, causal=causal)


def test_wgmma_rescales_between_tiles(seed):
    # the max of a row grows in the second and third K/V tiles (keys 70 and 140): a lost rescale of O or l between
    # tiles, or one applied to the wrong rows, lands far off
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((1, 1, 20, 16), (1, 1, 150, 16), (1, 1, 150, 16)))
    q[..., ::2, 0] = 60.0
    k[..., 5, 0], k[..., 70, 0], k[..., 140, 0] = 1.0, 2.0, 3.0
    out = run_wgmma(None, seed, inputs=(q, k, v))
    assert np.isfinite(out).all()


def test_wgmma_falls_back_to_step_4_for_unaligned_rows(seed):
    q, k, v = half_inputs((1, 1, 9, 20, 16), seed)
    buf = np.empty(k.size + 1, np.float16)
    k_odd = buf[1:].reshape(k.shape)  # C-contiguous, 2 bytes past a 16-byte boundary: no cp.async
    k_odd[...] = k
    [launch] = at.wgmma.launches(q, k_odd, v)
    assert launch.kernel is at.mma_kernel_for(16)
    run_wgmma(None, seed, causal=True, inputs=(q, k_odd, v))


def test_wgmma_needs_hopper(monkeypatch):
    monkeypatch.setattr(k09_wgmma, "compute_capability", lambda: (8, 0))
    with pytest.raises(LaunchError, match=r"attention.wgmma needs a Hopper GPU .* this one is 8.0. Use "
                                          r"attention.pipelined, or attention.optimized"):
        at.wgmma(*half_inputs((1, 1, 3, 3, 16), 0))


def test_wgmma_launch_plan_and_block_order(monkeypatch):
    q, k, v = half_inputs((3, 2, 300, 50, 80), 0)
    [launch] = at.wgmma.launches(q, k, v)
    kernel = at.wgmma_kernel_for(80)
    assert launch.kernel is kernel and kernel.target == "sm_90a"
    assert launch.grid == (6 * 3,) and launch.block == (256,)  # 3 query tiles of 128 per head, 6 heads
    # Q (128 rows) and K, V (64 keys) in two 64-column atoms each at D = 80, + 1 KB to align
    assert launch.shared_bytes == 2 * (128 + 64 + 64) * 128 + 1024
    assert list(at.VERSIONS).index("wgmma") == list(at.VERSIONS).index("warp_specialized") - 1
    assert "wgmma" in at.FLOAT16_VERSIONS and "wgmma" not in at.optimized.steps
    # the block order is step 5's, in 32-bit divisions
    from gpukernels.attention.k05_pipelined import block_tile

    # (the Python functions of both, udivmod32 as Python's divmod: on a GPU it is an intrinsic only a kernel calls)
    monkeypatch.setattr(k09_wgmma, "udivmod32", lambda a, b: divmod(int(a), int(b)))
    ours, theirs = k09_wgmma.block_tile32.py_func, block_tile.py_func
    for heads in (1, 3, 4, 5, 9):
        for q_tiles in (1, 3, 7):
            assert [ours(x, q_tiles, heads) for x in range(heads * q_tiles)] == \
                [theirs(x, q_tiles, heads) for x in range(heads * q_tiles)]


def test_optimized_does_not_choose_wgmma_until_it_is_timed():
    choice = at.optimized.choose(8, 16, 4096, 4096, 128, half=True, sms=132)
    assert choice.step == "pipelined"
    assert "steps 9-11 (wgmma, warp_specialized, ping_pong) would take it on Hopper" in choice.why
    assert "once a GPU run has timed them" in choice.why
    # decoding: not a shape the predicted rule takes
    assert "wgmma" not in at.optimized.choose(1, 32, 1, 8192, 128, half=True, sms=132).why


# ----------------------------------------------------------------------------------------------------------
# Planted bugs, named by line
# ----------------------------------------------------------------------------------------------------------


@sim_only
def test_a_missing_proxy_fence_is_named(monkeypatch):
    # without fence.proxy.async the tensor cores may not see what the copies wrote: the first wgmma reads Q's tile
    from gpukernels.sim import AsyncHazardError

    monkeypatch.setattr(k09_wgmma, "fence_proxy_async", lambda: None)
    with pytest.raises(AsyncHazardError, match="missing fence") as info:
        at.wgmma(*half_inputs((1, 1, 20, 70, 16), 0))
    assert info.value.issue_location.endswith(f"k09_wgmma.py:{_line('copy_async16_f16(dst, at')}")
    assert info.value.location.endswith(f"k09_wgmma.py:{_line('wgmma_ss_k(s, keys')}")


@sim_only
def test_scores_used_before_their_wgmma_wait_are_named(monkeypatch):
    # The wait after S = Q K^T left out: the softmax would read accumulators the tensor cores have not written, and
    # before that the next tile's copy overwrites K while that wgmma may still be reading it. The simulator reports
    # the overwrite, naming the wgmma and the copy.
    import sys

    from gpukernels.sim import AsyncHazardError

    real, skipped = k09_wgmma.wgmma_wait, _line("wgmma_wait(0)  # S is in the accumulators")

    def wait_but_not_for_s(n):
        if sys._getframe(1).f_lineno != skipped:
            real(n)

    monkeypatch.setattr(k09_wgmma, "wgmma_wait", wait_but_not_for_s)
    with pytest.raises(AsyncHazardError, match="early overwrite") as info:
        at.wgmma(*half_inputs((1, 1, 20, 70, 16), 0))  # two K/V tiles: K(1) refills K(0)'s buffer
    assert info.value.issue_location.endswith(f"k09_wgmma.py:{_line('wgmma_ss_k(s, keys')}")
    assert info.value.location.endswith(f"k09_wgmma.py:{_line('copy_async16_f16(dst, at')}")


# ----------------------------------------------------------------------------------------------------------
# On the compiler
# ----------------------------------------------------------------------------------------------------------

_COMPILE_CHILD = r"""
import json, re, sys
from numba import cuda, types
from gpukernels import attention as at
from gpukernels.resources import _assemble, _jit_options
h3, f3 = types.Array(types.float16, 3, "C"), types.Array(types.float32, 3, "C")
out = {}
for d in map(int, sys.argv[1:]):
    k = at.wgmma_kernel_for(d)
    ptx, _ = cuda.compile_ptx(k.py_func, (h3, h3, h3, f3, types.float32, types.boolean), cc=(9, 0, "a"),
                              **_jit_options(k))  # fastmath, as the kernel runs
    log = _assemble(ptx, k.target)  # nvJitLink -verbose: ptxas's report
    res = re.search(r"used (\d+) registers.*?(\d+) bytes lmem", log, re.S)
    spill = re.search(r"(\d+) bytes spill stores", log)
    ss = (rf"wgmma\.mma_async\.sync\.aligned\.m64n{k.tile[1]}k16\.f32\.f16\.f16 \{{[^}}]*\}}, %rd\d+, %rd\d+, "
          rf"p, 1, 1, 0, 0;")
    rs = (rf"wgmma\.mma_async\.sync\.aligned\.m64n{d}k16\.f32\.f16\.f16 \{{[^}}]*\}}, \{{%r\d+,%r\d+,%r\d+,%r\d+\}}, "
          rf"%rd\d+, p, 1, 1, 1;")
    out[d] = {"registers": int(res[1]), "lmem": int(res[2]), "spill": int(spill[1]) if spill else 0,
              "local": ptx.count("ld.local") + ptx.count("st.local"), "ss": len(re.findall(ss, ptx)),
              "rs": len(re.findall(rs, ptx)), "wait": ptx.count("wgmma.wait_group.sync.aligned 0;"),
              "fence": ptx.count("wgmma.fence.sync.aligned"), "proxy": ptx.count("fence.proxy.async"),
              "mma_sync": ptx.count("mma.sync"), "ldmatrix": ptx.count("ldmatrix"),
              "cp_async": ptx.count("cp.async.cg.shared.global"),
              "serialized": re.findall(r"C75\d\d", log)}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
# the long tier compiles D = 128 (the most registers) and 16, 64, 112 (the smallest, one atom, the last ragged
# one): every D measured on 2026-12-07, all without spills (benchmarks/NOTES.md); each D is ~4 CPU-s of CI
@pytest.mark.parametrize("dims", [pytest.param((128,), id="128", marks=pytest.mark.slow),
                                  pytest.param((16, 64, 112), id="others", marks=pytest.mark.slow)])
def test_wgmma_compiles_to_both_forms_without_local_memory(dims):
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_COMPILE_CHILD, *map(str, dims)))
    for d, r in out.items():
        d = int(d)
        # per K/V tile, unrolled: D / 16 wgmmas for S (both operands from shared memory, B K-major: trans-b 0) and
        # KEYS / 16 for O += P V (A from four registers, B MN-major: trans-b 1); each group fenced and waited for
        assert r["ss"] == d // 16 and r["rs"] == k09_wgmma.KEYS // 16, r
        assert r["wait"] == 2 and r["fence"] == 2 and r["proxy"] == 2, r
        assert r["mma_sync"] == 0 and r["ldmatrix"] == 0 and r["cp_async"] > 0, r
        # the accumulators and P's words in registers: no local memory, no spills, and ptxas serializes no wgmma
        # (C7519: a wgmma inside a branch it cannot prove warpgroup-uniform; C7509: a call, e.g. a 64-bit division)
        assert r["local"] == 0 and r["lmem"] == 0 and r["spill"] == 0, r
        assert not r["serialized"], r
        assert r["registers"] <= 255, r
