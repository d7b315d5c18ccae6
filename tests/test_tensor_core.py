"""The tensor-core lesson and the instructions under it (gpukernels._mma).

* the fragment tables against the PTX ISA's, and each simulated instruction against NumPy on one warp -- mma_f16,
  mma_bf16, mma_tf32, to_tf32, pack_half2, ldmatrix (x1, x2, x4, .trans), copy_async16_f16; a lane missing from a
  warp-collective instruction is an error that says which;
* every version of the lesson under the simulator at small odd shapes, outputs poisoned with NaN, inputs checked
  unmodified, against a float64 reference of the (rounded) inputs; 3xTF32 against float32 SGEMM's own error;
* on the compiler (no GPU): every intrinsic and every kernel compiles for sm_90 to the instructions it is about.
"""

import json

import numpy as np
import pytest
from numba import cuda, float32

import gpukernels
from gpukernels import _mma
from gpukernels.sim import WarpMaskError

from ._tiers import long_tier_after

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="checks the simulator's versions of the instructions")


# ----------------------------------------------------------------------------------------------------------
# The fragment tables
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("coords,count,shape", [
    (_mma.a_frag_coords, 8, (16, 16)), (_mma.b_frag_coords, 4, (16, 8)), (_mma.c_frag_coords, 4, (16, 8)),
    (_mma.a_tf32_coords, 4, (16, 8)), (_mma.b_tf32_coords, 2, (8, 8)),
    (lambda lane, i: _mma.ldmatrix_coords(lane, i), 2, (8, 8)),
    (lambda lane, i: _mma.ldmatrix_coords(lane, i, trans=True), 2, (8, 8)),
])
def test_each_element_is_held_by_exactly_one_lane(coords, count, shape):
    seen = [coords(lane, i) for lane in range(32) for i in range(count)]
    assert sorted(seen) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]


def test_tables_match_the_ptx_isa_figures():
    # A few cells read off the PTX ISA's figures ("Matrix Fragments for mma.m16n8k16 with floating point type",
    # "... mma.m16n8k8" for .tf32): lane 0 holds A's (0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)
    assert [_mma.a_frag_coords(0, i) for i in range(8)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8),
                                                            (8, 9)]
    assert [_mma.a_frag_coords(31, i) for i in range(8)] == [(7, 6), (7, 7), (15, 6), (15, 7), (7, 14), (7, 15),
                                                             (15, 14), (15, 15)]
    assert [_mma.b_frag_coords(5, i) for i in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [_mma.c_frag_coords(6, i) for i in range(4)] == [(1, 4), (1, 5), (9, 4), (9, 5)]
    assert [_mma.a_tf32_coords(7, i) for i in range(4)] == [(1, 3), (9, 3), (1, 7), (9, 7)]
    assert [_mma.b_tf32_coords(7, i) for i in range(2)] == [(3, 1), (7, 1)]
    assert _mma.ldmatrix_coords(13, 1) == (3, 3) and _mma.ldmatrix_coords(13, 1, trans=True) == (3, 3)
    assert _mma.ldmatrix_coords(9, 0) == (2, 2) and _mma.ldmatrix_coords(6, 0, trans=True) == (4, 1)


# ----------------------------------------------------------------------------------------------------------
# The simulated instructions, one warp at a time
# ----------------------------------------------------------------------------------------------------------


def _mma_kernel(pack, mma):
    """One warp's mma of A (16 x 16) and B (16 x 8) into D = A B + C, the fragments gathered by the layout tables
    themselves (plain Python in the simulator) and packed by ``pack``, D scattered back."""

    @cuda.jit
    def kernel(a, b, c, d):
        lane = cuda.threadIdx.x
        words = []
        for i in range(0, 8, 2):
            (r0, c0), (r1, c1) = _mma.a_frag_coords(lane, i), _mma.a_frag_coords(lane, i + 1)
            words.append(pack(a[r0, c0], a[r1, c1]))
        for i in range(0, 4, 2):
            (r0, c0), (r1, c1) = _mma.b_frag_coords(lane, i), _mma.b_frag_coords(lane, i + 1)
            words.append(pack(b[r0, c0], b[r1, c1]))
        out = mma(*words, *[c[_mma.c_frag_coords(lane, i)] for i in range(4)])
        for i in range(4):
            d[_mma.c_frag_coords(lane, i)] = out[i]

    return kernel


_mma_f16_kernel = _mma_kernel(_mma.pack_half2, _mma.mma_f16)
_mma_bf16_kernel = _mma_kernel(_mma.pack_bf16x2, _mma.mma_bf16)


def _rz(exact: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded toward zero (the tensor core's adder truncates)."""
    d = exact.astype(np.float32)
    away = np.abs(d.astype(np.float64)) > np.abs(exact)
    d[away] = np.nextafter(d[away], np.float32(0))
    return d


@sim_only
def test_mma_f16_is_the_matrix_product(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    _mma_f16_kernel[1, 32](a, b, c, d)
    exact = a.astype(np.float64) @ b.astype(np.float64) + c
    assert np.array_equal(d, _rz(exact)), f"seed={seed}"
    assert not np.array_equal(d, exact.astype(np.float32))  # rounded toward zero, not to nearest


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


@sim_only
def test_mma_bf16_rounds_inputs_to_bfloat16(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    c = np.zeros((16, 8), np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    _mma_bf16_kernel[1, 32](a, b, c, d)
    expected = _rz(_bf16(a).astype(np.float64) @ _bf16(b).astype(np.float64))
    assert np.array_equal(d, expected), f"seed={seed}"
    assert not np.array_equal(d, (a.astype(np.float64) @ b).astype(np.float32))  # it did round


@cuda.jit
def _mma_tf32_kernel(a, b, d):
    lane = cuda.threadIdx.x
    av = [_mma.to_tf32(a[_mma.a_tf32_coords(lane, i)]) for i in range(4)]
    bv = [_mma.to_tf32(b[_mma.b_tf32_coords(lane, i)]) for i in range(2)]
    out = _mma.mma_tf32(*av, *bv, float32(0), float32(0), float32(0), float32(0))
    for i in range(4):
        d[_mma.c_frag_coords(lane, i)] = out[i]


def _tf32(x: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero, keeping 10 mantissa bits (as float32)."""
    x = np.asarray(x, np.float32)
    m, e = np.frexp(x.astype(np.float64))  # x = m 2^e, 0.5 <= |m| < 1: keep 11 significant bits of m
    return (np.sign(m) * np.floor(np.abs(m) * 2**11 + 0.5) / 2**11 * 2.0**e).astype(np.float32)


@sim_only
def test_mma_tf32_multiplies_tf32_rounded_values(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    _mma_tf32_kernel[1, 32](a, b, d)
    expected = _rz(_tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64))
    assert np.array_equal(d, expected), f"seed={seed}"


@cuda.jit
def _scalar_kernel(x, tf32_out, half2_out):
    i = cuda.grid(1)
    if i < x.size:
        tf32_out[i] = _mma.to_tf32(x[i])
        half2_out[i] = _mma.pack_half2(x[i], -x[i])


@sim_only
def test_to_tf32_rounds_ties_away_and_pack_half2_to_nearest_even():
    one = np.float32(1.0)
    ulp = np.float32(2.0**-10)  # TF32's spacing at 1
    x = np.array([1 + ulp / 2, -(1 + ulp / 2), 1 + ulp / 2 - 2.0**-23, 1 + 1.5 * ulp, np.finfo(np.float32).max, np.inf, np.nan,
                  1e-30, 0.1, -7.3e-5], np.float32)
    t = np.full(x.shape, np.nan, np.float32)
    h = np.zeros(x.shape, np.uint32)
    _scalar_kernel[1, 32](x, t, h)
    assert t[0] == one + ulp and t[1] == -(one + ulp)  # a tie goes away from zero (cvt.rna), not to even
    assert t[2] == one and t[3] == one + 2 * ulp
    assert np.isposinf(t[4]) and np.isposinf(t[5]) and np.isnan(t[6])  # past TF32's largest value: infinity
    assert np.array_equal(t[7:], _tf32(x[7:]))
    assert np.all(t.view(np.uint32)[np.isfinite(t)] & 0x1FFF == 0)  # only 19 bits left
    halves = h.view(np.uint16).reshape(-1, 2).view(np.float16)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)  # ties to even, like NumPy; past 65504, infinity
    assert np.array_equal(halves[:, 0], expected, equal_nan=True)
    assert np.array_equal(halves[:, 1], -expected, equal_nan=True)


def _ldmatrix_kernel(count, trans):
    load = getattr(_mma, f"ldmatrix_x{count}" + ("_trans" if trans else ""))

    @cuda.jit
    def kernel(src, rows, out):
        # src: (32, 8) halves = four 8 x 8 matrices; lane 8 j + r points at row rows[8 j + r] of src
        tile = cuda.shared.array((32, 8), np.float16, alignment=16)
        lane = cuda.threadIdx.x
        for q in range(8):
            tile[lane, q] = src[lane, q]
        cuda.syncthreads()
        words = load(tile, rows[lane] * 8)
        if count == 1:
            out[lane, 0] = words
        else:
            for j in range(count):
                out[lane, j] = words[j]

    return kernel


@sim_only
@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_gives_each_lane_its_fragment(count, trans, seed):
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((32, 8)).astype(np.float16)
    rows = rng.permutation(32).astype(np.int32)  # lane i gives the address of src row rows[i]
    out = np.zeros((32, count), np.uint32)
    _ldmatrix_kernel(count, trans)[1, 32](src, rows, out)
    bits = src.view(np.uint16).astype(np.uint32)
    for j in range(count):
        m = bits[rows[8 * j: 8 * j + 8]]  # matrix j: the rows lanes 8j..8j+7 pointed at
        if trans:
            m = m.T
        for lane in range(32):
            r, c = lane // 4, 2 * (lane % 4)  # the PTX ISA's rule, written out independently of the tables
            assert out[lane, j] == m[r, c] | m[r, c + 1] << 16, f"lane {lane}, matrix {j}, seed={seed}"


@cuda.jit
def _ldmatrix_mma_kernel(a, b, d):
    # A (16 x 16) and B (16 x 8) staged in shared memory; fragments by ldmatrix.x4 (A) and ldmatrix.x2.trans (B)
    sa = cuda.shared.array((16, 16), np.float16, alignment=16)
    sb = cuda.shared.array((16, 8), np.float16, alignment=16)
    lane = cuda.threadIdx.x
    for q in range(8):
        sa[lane >> 1, (lane & 1) * 8 + q] = a[lane >> 1, (lane & 1) * 8 + q]
    if lane < 16:
        for q in range(8):
            sb[lane, q] = b[lane, q]
    cuda.syncthreads()
    j, r = lane >> 3, lane & 7  # lane 8 j + r: row r of matrix j (A: j = 0..3 is rows +8 (j & 1), cols +8 (j >> 1))
    a0, a1, a2, a3 = _mma.ldmatrix_x4(sa, (r + 8 * (j & 1)) * 16 + 8 * (j >> 1))
    b0, b1 = _mma.ldmatrix_x2_trans(sb, (r + 8 * (j & 1)) * 8)  # lanes 16-31 give addresses that are not used
    out = _mma.mma_f16(a0, a1, a2, a3, b0, b1, float32(0), float32(0), float32(0), float32(0))
    for i in range(4):
        d[_mma.c_frag_coords(lane, i)] = out[i]


@sim_only
def test_ldmatrix_feeds_mma(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    d = np.full((16, 8), np.nan, np.float32)
    _ldmatrix_mma_kernel[1, 32](a, b, d)
    assert np.array_equal(d, _rz(a.astype(np.float64) @ b.astype(np.float64))), f"seed={seed}"


@cuda.jit
def _copy_kernel(src, dst, nbytes):
    tile = cuda.shared.array(16, np.float16, alignment=16)
    t = cuda.threadIdx.x
    if t < 2:
        _mma.copy_async16_f16(tile, 8 * t, src, 8 * t, nbytes[t])
    _mma.async_commit()
    _mma.async_wait(0)
    cuda.syncthreads()
    if t < 16:
        dst[t] = tile[t]


@sim_only
def test_copy_async16_f16_zero_fills_past_nbytes():
    src = np.arange(1, 17).astype(np.float16)
    dst = np.full(16, np.nan, np.float16)
    _copy_kernel[1, 32](src, dst, np.array([16, 6], np.int32))
    assert np.array_equal(dst, np.concatenate([src[:8], src[8:11], np.zeros(5, np.float16)]))


# -- misuse is an error that says what went wrong -------------------------------------------------------------


@cuda.jit
def _lane_exits_kernel(d):
    lane = cuda.threadIdx.x
    if lane == 5:
        return  # an early exit before a warp-collective instruction
    out = _mma.mma_f16(0, 0, 0, 0, 0, 0, float32(0), float32(0), float32(0), float32(0))
    d[lane] = out[0]


@cuda.jit
def _lanes_split_kernel(d):
    lane = cuda.threadIdx.x
    if lane < 16:
        out = _mma.mma_f16(0, 0, 0, 0, 0, 0, float32(0), float32(0), float32(0), float32(0))
    else:
        out = _mma.mma_f16(0, 0, 0, 0, 0, 0, float32(1), float32(0), float32(0), float32(0))
    d[lane] = out[0]


@sim_only
def test_a_lane_missing_from_mma_is_an_error():
    d = np.zeros(32, np.float32)
    with pytest.raises(WarpMaskError, match=r"mma_f16 .*needs all 32 lanes.*lane 5 has already exited"):
        _lane_exits_kernel[1, 32](d)
    a, b, c = np.zeros((16, 16), np.float16), np.zeros((16, 8), np.float16), np.zeros((16, 8), np.float32)
    with pytest.raises(WarpMaskError, match=r"the block has 20 threads.*whole warps"):
        _mma_f16_kernel[1, 20](a, b, c, c.copy())
    with pytest.raises(WarpMaskError, match=r"lanes of that mask reached a different warp operation"):
        _lanes_split_kernel[1, 32](d)


@cuda.jit
def _misuse_kernel(a, what):
    tile = cuda.shared.array((8, 8), np.float16, alignment=16)
    lane = cuda.threadIdx.x
    if what == 0:
        _mma.ldmatrix_x1(a, lane % 8 * 8)  # a global array
    elif what == 1:
        _mma.ldmatrix_x1(tile, lane % 8 * 8 + 4)  # rows not on a 16-byte boundary
    else:
        _mma.mma_f16(a[0, 0], 0, 0, 0, 0, 0, float32(0), float32(0), float32(0), float32(0))  # a half, not a word


@sim_only
@pytest.mark.parametrize("what,message", [(0, "reads shared memory"), (1, "not on a 16-byte boundary"),
                                          (2, "must be a 32-bit word holding two 16-bit values")])
def test_misused_instructions_say_why(what, message):
    with pytest.raises(Exception, match=message):
        _misuse_kernel[1, 32](np.zeros((8, 8), np.float16), what)


# ----------------------------------------------------------------------------------------------------------
# On the compiler: PTX for sm_90
# ----------------------------------------------------------------------------------------------------------

_INTRINSICS_CHILD = r"""
from numba import cuda, types, float32
from gpukernels import _mma as M

def every_instruction(a, x, c):
    sm = cuda.shared.array((64, 32), types.float16, alignment=16)
    lane = cuda.threadIdx.x
    M.copy_async16_f16(sm, lane * 8, a, lane * 8, 16)
    M.async_commit()
    M.async_wait(0)
    cuda.syncthreads()
    w = M.ldmatrix_x1(sm, lane * 8)
    w0, w1 = M.ldmatrix_x2(sm, lane * 8)
    q0, q1, q2, q3 = M.ldmatrix_x4(sm, lane * 32)
    r0, r1, r2, r3 = M.ldmatrix_x4_trans(sm, lane * 32)
    s0 = M.ldmatrix_x1_trans(sm, lane * 8)
    s1, s2 = M.ldmatrix_x2_trans(sm, lane * 8)
    p = M.pack_half2(a[lane, 0], a[lane, 1])
    p2 = M.pack_half2(x[0], x[1])
    d0, d1, d2, d3 = M.mma_f16(q0, q1, q2, q3, r0, r1, float32(0), float32(0), float32(0), float32(0))
    d0, d1, d2, d3 = M.mma_f16(p, p2, w, w0, w1, s0, d0, d1, d2, d3)
    bb = M.pack_bf16x2(x[0], x[1])
    d0, d1, d2, d3 = M.mma_bf16(bb, r2, r3, bb, s1, s2, d0, d1, d2, d3)
    big = M.to_tf32(x[lane])
    d0, d1, d2, d3 = M.mma_tf32(big, big, big, big, big, big, d0, d1, d2, d3)
    c[lane, 0] = d0; c[lane, 1] = d1; c[lane, 2] = d2; c[lane, 3] = d3

h, f2, f1 = types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C"), types.Array(types.float32, 1, "C")
ptx, _ = cuda.compile_ptx(every_instruction, (h, f1, f2), cc=(9, 0))
from gpukernels.resources import _assemble
log = _assemble(ptx, "sm_90")  # ptxas accepts it for sm_90
names = ["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "cvt.rna.tf32.f32", "cvt.rn.f16.f32",
         "cvt.rn.bf16x2.f32", "cp.async.cg.shared.global", "cp.async.wait_group 0",
         "ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"]
import re
print(json.dumps({"counts": {n: len(re.findall(re.escape(n) + r"[ ;]", ptx)) for n in names}, "local": ptx.count("ld.local"),
                  "log": log}))
"""


@pytest.mark.needs_cuda_toolchain
def test_intrinsics_compile_to_their_instructions():
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_INTRINSICS_CHILD))
    counts = out["counts"]
    assert counts.pop("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 2
    assert counts.pop("cvt.rn.f16.f32") == 2  # pack_half2 of two float32 (halves are packed as they are)
    assert all(n == 1 for n in counts.values()), json.dumps(counts)
    assert out["local"] == 0 and "0 bytes lmem" in out["log"]


# ----------------------------------------------------------------------------------------------------------
# The lesson: every version against float64
# ----------------------------------------------------------------------------------------------------------
from gpukernels import tensor_core as tc  # noqa: E402
from gpukernels._launch import LaunchError  # noqa: E402
from gpukernels.check import TOLERANCE, compare, relative_error  # noqa: E402

FP16_TOLERANCE = TOLERANCE["tensor_core"]  # every version against float64 at SHAPES["test"]: tests/test_lessons.py


def _sgemm_and_tf32_errors(a, b, ref):
    """float32 SGEMM's error against float64 (NumPy's float32 matmul), and a single TF32 product's."""
    sgemm = relative_error(a @ b, ref)
    tf32 = relative_error((_tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64)).astype(np.float32), ref)
    return sgemm, tf32


@pytest.mark.parametrize("shape", tc.SHAPES["test"], ids=str)
# optimized sends float32 inputs to tf32x3 (test_dispatcher_follows_readable_thresholds): the long tier runs it too
@pytest.mark.parametrize("name", ["tf32x3", pytest.param("optimized", marks=pytest.mark.slow)])
def test_tf32x3_is_as_accurate_as_sgemm(name, shape, seed):
    a, b = tc.make_inputs(shape, seed, dtype=np.float32)
    before = a.copy(), b.copy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out = np.full(ref.shape, np.nan, dtype=np.float32)
    tc.VERSIONS[name](a, b, out=out)
    assert np.all(np.isfinite(out)), f"seed={seed}: elements never written"
    err = relative_error(out, ref)
    sgemm, tf32 = _sgemm_and_tf32_errors(a, b, ref)
    # x = big + small keeps 22 of float32's 24 bits: each factor's residual is up to ~2^-22 of it, and the dropped
    # small * small is up to 2^-22 of the product, so one product can be off by ~3 * 2^-22 where SGEMM's is off by at
    # most 2^-24 (K = 1 shows it: 3.5e-7 against 4.9e-8 was seen); over a sum both are rounding errors of float32
    # size. A split that loses a term is off by ~2^-11 (one TF32 product alone: ~1e-4).
    assert err <= 2 * sgemm + 3 * 2.0**-22, f"shape={shape} seed={seed}: 3xTF32 {err:.3g}, SGEMM {sgemm:.3g}"
    if shape[2] >= 16:
        assert err < tf32 / 30, f"shape={shape} seed={seed}: 3xTF32 {err:.3g}, one TF32 product {tf32:.3g}"
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])


def test_device_arrays_and_empty_k(seed):
    a, b = tc.make_inputs((33, 40, 24), seed)
    out = tc.optimized(cuda.to_device(a), cuda.to_device(b))  # a device array in, a device array out
    assert compare(out.copy_to_host(), tc.reference(a, b), FP16_TOLERANCE).ok
    c = tc.block_tiles(np.zeros((5, 0), np.float16), np.zeros((0, 7), np.float16))
    assert c.shape == (5, 7) and c.dtype == np.float32 and not c.any()  # an empty sum is 0


@pytest.mark.parametrize("name", list(tc.VERSIONS))
def test_bad_inputs_say_what_is_wrong(name):
    version = tc.VERSIONS[name]
    with pytest.raises(LaunchError, match="inner dimensions must match"):
        version(np.zeros((4, 5), np.float16), np.zeros((6, 3), np.float16))
    with pytest.raises(LaunchError, match="must be 2-D"):
        version(np.zeros((4, 5, 1), np.float16), np.zeros((5, 3), np.float16))
    with pytest.raises(LaunchError, match="dtype"):
        version(np.zeros((4, 5), np.float64), np.zeros((5, 3), np.float64))
    if name not in ("tf32x3", "optimized"):
        with pytest.raises(LaunchError, match=r"dtype float16; got float32.*astype\(np.float16\).*tf32x3"):
            version(np.zeros((4, 5), np.float32), np.zeros((5, 3), np.float32))


def test_cp_async_where_rows_are_aligned_and_loads_elsewhere():
    aligned = tc.make_inputs((33, 40, 24), 0)  # K = 24 and N = 40 halves: rows of 48 and 80 bytes
    ragged = tc.make_inputs((33, 41, 24), 0)  # N = 41: B's rows are 82 bytes, not a multiple of 16
    for step, fast, slow in (("pipelined", tc.pipelined_kernel, tc.pipelined_sync_kernel),
                             ("block_tiles", tc.block_tiles_kernel, tc.block_tiles_sync_kernel),
                             ("wgmma", tc.wgmma_kernel, tc.wgmma_sync_kernel)):
        assert tc.VERSIONS[step].launches(*aligned)[0].kernel is fast and fast.async_copy
        assert tc.VERSIONS[step].launches(*ragged)[0].kernel is slow and not slow.async_copy


def test_launch_plans():
    a, b = tc.make_inputs((200, 300, 40), 0)
    [launch] = tc.mma_global.launches(a, b)
    assert launch.block == (32, 4) and launch.grid == (10, 13)  # 38 column tiles of 8 by 4 warps, 13 of 16 rows
    [launch] = tc.block_tiles.launches(a, b)
    assert launch.grid == (3, 2) and launch.threads_per_block == 128
    split_a, split_b, launch = tc.tf32x3.launches(a.astype(np.float32), b.astype(np.float32))  # Hopper: split first
    assert split_a.kernel is tc.split_rows_kernel and split_b.kernel is tc.split_cols_kernel
    assert split_a.args[1].shape == (2, 200, 40) and split_b.args[1].shape == (2, 300, 40)  # [big, small], B^T
    assert split_a.grid == (2, 7) and split_b.grid == (2, 10)  # 32 x 32 tiles of the (rows, K4) outputs
    assert launch.kernel is tc.tf32x3_kernel and launch.grid == (3, 2) and launch.threads_per_block == 256
    assert launch.shared_bytes == 3 * 64 * 1024 + 1024  # 3 stages of four 128 x 32 float tiles
    [launch] = tc.wgmma.launches(a, b)  # 128 x 256 tiles, two warpgroups, a 4-stage ring of 48 KB + 1 KB to align
    assert launch.grid == (2, 2) and launch.threads_per_block == 256 and launch.shared_bytes == 4 * 48 * 1024 + 1024
    for name in ("ldmatrix", "swizzled", "pipelined"):
        [launch] = tc.VERSIONS[name].launches(a, b)
        assert launch.grid == (5, 4) and launch.threads_per_block == 128


def test_dispatcher_follows_readable_thresholds():
    def choose(*args, **kw):
        return tc.optimized.choose(*args, hopper=False, **kw)

    assert choose(4096, 4096, 4096, sms=132).step == "block_tiles"  # 1024 tiles of 128 x 128
    assert choose(1024, 1024, 1024, sms=132).step == "pipelined"  # 64 tiles would idle 68 SMs: 256 of 64 x 64
    assert choose(1024, 1024, 1024, sms=48).step == "block_tiles"  # a smaller GPU is filled by them
    assert choose(1823, 781, 129, sms=132).step == "block_tiles"  # 105 tiles: 0.8 of the SMs (measured about even)
    assert choose(4096, 4096, 4096, fp32=True).step == "tf32x3"
    # On Hopper: wgmma's 128 x 256 tiles, TMA-fed by persistent blocks, wherever they fill half of the SMs; below,
    # blocks of one warpgroup
    hopper = tc.optimized.choose

    def tile(*shape, **kw):
        choice = hopper(*shape, sms=132, hopper=True, **kw)
        return choice.step, choice.config.get("tile"), choice.config.get("split_k", 1)

    assert tile(4096, 4096, 4096) == ("persistent", "128x256", 1)  # 512 tiles
    assert tile(2048, 2048, 2048) == ("persistent", "128x256", 1)  # 128 tiles: 0.97 waves
    assert tile(1536, 1536, 1536) == ("persistent", "128x256", 1)  # 72 tiles: 0.55 waves
    assert tile(1408, 1536, 512) == ("persistent", "128x256", 1)  # 11 x 6 = 66 tiles of 128 x 256: exactly half
    assert tile(1280, 1536, 512) == ("wgmma", "64x128", 1)  # 60 of those; 240 of 64 x 128
    assert tile(1024, 1024, 1024) == ("wgmma", "64x128", 1)  # 32 of 128 x 256: 128 of 64 x 128
    assert tile(768, 768, 768) == ("wgmma", "64x128", 1)  # 72 of 64 x 128: 0.55 waves
    assert tile(512, 512, 512) == ("wgmma", "64x64", 1)  # 32 of 64 x 128; 64 of 64 x 64
    assert tile(1, 1, 1) == ("wgmma", "64x64", 1)
    assert hopper(1000, 1000, 1000, sms=132, hopper=True).config["stages"] == 8
    # ... and split-K where the tiles are few and deep (wgmma's above 64 rows, mma.sync's below)
    assert tile(128, 8192, 8192) == ("wgmma", "128x256", 4)
    assert tile(8192, 64, 4096) == ("wgmma", "128x128", 2)
    assert tile(16, 8192, 8192) == ("pipelined", "64x64", 5)
    small = hopper(999, 1001, 997, aligned=False, sms=132, hopper=True)
    assert small.config["padded"] and "padded to 16 bytes" in small.why and "64 x 128" in small.why
    unaligned = hopper(4096, 4096, 4096, aligned=False, sms=132, hopper=True)  # rows padded first, for cp.async
    assert unaligned.step == "persistent" and unaligned.config["padded"] and "padded to 16 bytes" in unaligned.why
    assert hopper(4096, 4096, 4096, fp32=True, hopper=True).step == "tf32x3"
    assert "128 x 256" in hopper(4096, 4096, 4096, sms=132, hopper=True).why
    why = choose(1536, 1408, 512, aligned=False, sms=132).why
    assert "132 tiles of 128 x 128" in why and "not 16-byte aligned" in why
    a, b = tc.make_inputs((33, 40, 24), 0, dtype=np.float32)
    assert tc.optimized.launches(a, b)[-1].kernel is tc.tf32x3_kernel
    assert "tf32x3" in tc.optimized.describe(a, b)


def _bank_groups(layout, elem_bytes, rows, col):
    # the 16-byte slot (of 8 per 128-byte line) where each of the rows' chunk at `col` starts
    f = getattr(layout, "py_func", None) or layout.fn
    return [f(r, col) * elem_bytes // 16 % 8 for r in rows]


def test_swizzle_puts_each_ldmatrix_phase_in_eight_bank_groups():
    from gpukernels.tensor_core import _tf32x3_mma, k02_ldmatrix, k03_swizzled

    for r0 in range(0, 64, 8):  # every phase: 8 consecutive rows at one 16-byte chunk
        for col in range(0, 32, 8):
            assert len(set(_bank_groups(k03_swizzled.swizzled_a, 2, range(r0, r0 + 8), col))) == 8
            assert len(set(_bank_groups(k02_ldmatrix.a_at, 2, range(r0, r0 + 8), col))) == 2  # 4-way conflict
        for col in range(0, 64, 8):
            assert len(set(_bank_groups(k03_swizzled.swizzled_b, 2, range(r0, r0 + 8), col))) == 8
            assert len(set(_bank_groups(k02_ldmatrix.b_at, 2, range(r0, r0 + 8), col))) == 1  # 8-way conflict
        for col in range(0, 16, 4):
            assert len(set(_bank_groups(_tf32x3_mma.at, 4, range(r0, r0 + 8), col))) == 8
    # a swizzle only permutes the chunks within a row: every element keeps one place
    for layout, rows, cols in ((k03_swizzled.swizzled_a, 64, 32), (k03_swizzled.swizzled_b, 32, 64)):
        f = getattr(layout, "py_func", None) or layout.fn
        assert sorted(f(r, c) for r in range(rows) for c in range(cols)) == list(range(rows * cols))


# ----------------------------------------------------------------------------------------------------------
# Every kernel on the compiler
# ----------------------------------------------------------------------------------------------------------

_KERNELS_CHILD = r"""
import re
from numba import cuda, types
from gpukernels import tensor_core as tc
from gpukernels.resources import _assemble
h, f = types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C")
kernels = {"mma_global": tc.mma_global_kernel, "ldmatrix": tc.ldmatrix_kernel, "swizzled": tc.swizzled_kernel,
           "pipelined": tc.pipelined_kernel, "pipelined_sync": tc.pipelined_sync_kernel,
           "block_tiles": tc.block_tiles_kernel, "block_tiles_sync": tc.block_tiles_sync_kernel,
           "tf32x3_mma": tc.tf32x3_mma_kernel, "tf32x3": tc.tf32x3_kernel, "wgmma": tc.wgmma_kernel,
           "wgmma_sync": tc.wgmma_sync_kernel, "split_rows": tc.split_rows_kernel, "split_cols": tc.split_cols_kernel,
           "tma": tc.tma_kernel, "warp_specialized": tc.warp_specialized_kernel, "persistent": tc.persistent_kernel}
from gpukernels.tensor_core.k12_optimized import WGMMA_KERNELS, WGMMA_SPLIT_KERNELS
kernels.update({f"wgmma_split{bn}": k for bn, k in WGMMA_SPLIT_KERNELS.items()})
kernels.update({f"wgmma_{tile}": k for tile, k in WGMMA_KERNELS.items() if tile != "128x256"})
f3 = types.Array(types.float32, 3, "C")
u = types.Array(types.uint64, 1, "C")  # a tensor map in global memory
from gpukernels import _tma


@cuda.jit
def tma_extras(tmap, out):  # the TMA instructions the step does not use
    bars = cuda.shared.array(1, types.uint64)
    _tma.prefetch_tensormap(tmap)
    _tma.mbarrier_arrive(bars, 0)
    out[0, 0] = _tma.mbarrier_try_wait(bars, 0, 1)


kernels["tma_extras"] = tma_extras
sigs = {"tf32x3_mma": (f, f, f), "tf32x3": (f3, f3, f), "split_rows": (f, f3), "split_cols": (f, f3),
        "tma": (h, h, f, u, u), "tma_extras": (u, f), "warp_specialized": (h, h, f, u, u),
        "persistent": (h, h, f, u, u)}
words = {"mma16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma8": "mma.sync.aligned.m16n8k8.row.col.f32.tf32",
         "ldmatrix": "ldmatrix.sync.aligned", "cp.async": "cp.async.cg.shared.global", "local": "ld.local",
         "cvt.rna": "cvt.rna.tf32.f32", "wgmma": "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
         "wgmma.wait": "wgmma.wait_group", "fence.proxy": "fence.proxy.async",
         "wgmma_tf32": "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32",
         "wgmma128": "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "red": "red.global.add.f32",
         "wgmma64": "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16",
         "atom": "atom.global.add.f32",
         "bulk": "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
         "try_wait": "mbarrier.try_wait.parity.shared::cta.b64", "expect_tx": "mbarrier.arrive.expect_tx.shared::cta",
         "arrive": "mbarrier.arrive.shared::cta.b64", "init": "mbarrier.init.shared::cta.b64",
         "tensormap": "fence.proxy.tensormap::generic.acquire", "prefetch": "prefetch.tensormap",
         "setmaxnreg.inc": "setmaxnreg.inc.sync.aligned.u32", "setmaxnreg.dec": "setmaxnreg.dec.sync.aligned.u32",
         "maxntid": ".maxntid", "minnctapersm": ".minnctapersm", "arrive_if": "@p mbarrier.arrive.shared::cta.b64"}


from gpukernels.resources import link_lto  # as a GPU builds it (lto=True): ptxas honours setmaxnreg only so


out = {}
for name, k in kernels.items():
    arch = getattr(k, "target", "sm_90")  # wgmma: sm_90a (TMA and mbarriers: sm_90)
    cc = (9, 0, "a") if arch == "sm_90a" else (9, 0)
    bounds = getattr(k, "targetoptions", {}).get("launch_bounds")  # the register cap at entry setmaxnreg needs
    ptx, _ = cuda.compile_ptx(k.py_func, sigs.get(name, (h, h, f)), cc=cc, launch_bounds=bounds)
    log = link_lto(k, sigs[name], arch) if bounds else _assemble(ptx, arch)
    if bounds:  # ptxas's own report: the stack frame and spills are the local memory
        log = log.replace("\0", "")
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log)
        res = re.search(r"Used (\d+) registers.*?(\d+) bytes smem", log)
        res = (None, res[1], res[2], int(frame[1]) + int(frame[2]))
    else:
        res = re.search(r"used (\d+) registers.*?(\d+) bytes smem.*?(\d+) bytes lmem", log)
    out[name] = {w: ptx.count(s) for w, s in words.items()}
    out[name].update(registers=int(res[1]), smem=int(res[2]), lmem=int(res[3]), serialized="serialized" in log,
                     setmaxnreg_ignored=any(w in log for w in ("C7504", "C7508", "setmaxnreg' ignored")))
print(json.dumps(out))
"""


@pytest.mark.slow  # 18 CPU-s: every tensor-core kernel compiled for sm_90a in a child (test_intrinsics_compile_to_their_instructions stays)
@pytest.mark.needs_cuda_toolchain
def test_kernels_compile_to_tensor_core_instructions():
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_KERNELS_CHILD))
    for name, r in out.items():
        assert r["lmem"] == 0 and r["local"] == 0, f"{name} spills to local memory: {r}"
        if name == "tma":
            # one thread's bulk tensor copies (A's box and B's 4 atoms: the prologue's 2 stages unrolled, then the
            # loop's), an mbarrier per stage initialised, armed with the stage's bytes and waited on by parity, both
            # tensor maps acquired; step 6's 4 wgmmas per k tile and its waits, nothing serialized; no cp.async and no
            # generic-to-async proxy fence (the copy engine and the tensor cores are both the async proxy)
            assert r["bulk"] == 15 and r["expect_tx"] == 3 and r["init"] > 0 and r["try_wait"] > 0, r
            assert r["tensormap"] == 2 and r["wgmma"] == 4 and r["wgmma.wait"] == 2 and not r["serialized"], r
            assert r["cp.async"] == 0 and r["fence.proxy"] == 0 and r["mma16"] == 0, r
            continue
        if name in ("warp_specialized", "persistent"):
            # the producer's setmaxnreg.dec and the consumers' .inc, honoured: the registers capped at entry by the
            # launch bounds (.maxntid 384, .minnctapersm 1: 168 per thread), and no C7504 / C7508 from ptxas;
            # waits on the full and the empty barriers, the consumers' predicated arrivals on the empty ones, the
            # producer's bytes announced and its bulk copies (A's box and B's 4 atoms per stage, the loop unrolled),
            # wgmma never serialized (a release computed inside the loop would make ptxas serialize it)
            assert r["setmaxnreg.inc"] == 1 and r["setmaxnreg.dec"] == 1 and not r["setmaxnreg_ignored"], r
            assert r["maxntid"] == 1 and r["minnctapersm"] == 1 and r["registers"] <= 65536 // 384, r
            assert r["try_wait"] >= 2 and r["arrive_if"] >= 1 and r["expect_tx"] >= 1 and r["init"] >= 2, r
            assert r["bulk"] > 0 and r["bulk"] % 5 == 0 and r["tensormap"] == 2, r
            assert r["wgmma"] > 0 and r["wgmma"] % 4 == 0 and r["wgmma.wait"] > 0 and not r["serialized"], r
            assert r["cp.async"] == 0 and r["fence.proxy"] == 0 and r["mma16"] == 0, r
            continue
        if name == "tma_extras":
            assert r["arrive"] == 1 and r["try_wait"] == 1 and r["prefetch"] == 1, r
            continue
        if name.startswith("wgmma"):
            # 4 wgmmas per 64-deep k tile, the accumulators in registers throughout: ptxas would say the wgmmas are
            # "serialized" if anything read them between a wgmma and its wait (a local array, a 64-bit division)
            # (split-K's: the 128 x 128 tile's m64n128k16, and the products added into C by atomics -- NVVM writes
            # atom.global.add, which ptxas turns into a RED when its result is unused)
            # (the one-warpgroup blocks of rule 5: m64n128k16 or m64n64k16)
            assert r["wgmma"] + r["wgmma128"] + r["wgmma64"] == 4 and r["wgmma.wait"] == 2, r
            assert r["fence.proxy"] == 1 and not r["serialized"], r
            assert (r["wgmma128"] == 4) == (name in ("wgmma_split128", "wgmma_64x128")), r
            assert (r["wgmma64"] == 4) == (name == "wgmma_64x64"), r
            assert r["mma16"] == 0 and r["ldmatrix"] == 0 and (r["cp.async"] > 0) == (name != "wgmma_sync"), r
            assert (r["red"] + r["atom"] > 0) == ("split" in name), r
            continue
        if name.startswith("split"):  # x = big + small: two roundings to TF32 per element
            assert r["cvt.rna"] > 0 and r["mma8"] == r["mma16"] == r["wgmma_tf32"] == 0, r
            continue
        if name == "tf32x3_mma":
            assert r["mma8"] > 0 and r["cvt.rna"] > 0 and r["mma16"] == 0 and r["ldmatrix"] > 0
            continue
        if name == "tf32x3":
            # 3 products x 4 k8 slices per 32-deep k tile, one wait per tile (the partial sum is added after it),
            # the split done beforehand (no cvt), nothing serialized
            assert r["wgmma_tf32"] == 12 and r["wgmma.wait"] == 1 and r["cvt.rna"] == 0 and r["cp.async"] > 0, r
            assert not r["serialized"] and r["mma8"] == 0 and r["ldmatrix"] == 0, r
            continue
        assert r["mma16"] > 0, f"{name}: {r}"
        assert (r["ldmatrix"] > 0) == (name != "mma_global"), f"{name}: {r}"
        assert (r["cp.async"] > 0) == (name in ("pipelined", "block_tiles")), f"{name}: {r}"
    assert out["pipelined"]["smem"] <= 48 * 1024 + 1024  # the rings fit the static limit (+ the 1 KB ptxas counts)
    assert out["block_tiles"]["smem"] <= 48 * 1024 + 1024


# ----------------------------------------------------------------------------------------------------------
# wgmma: the descriptors' layouts, the simulated instruction, the step
# ----------------------------------------------------------------------------------------------------------


def test_wgmma_layouts_place_every_element_once():
    # a K-major 64 x 64 tile (A) fills its 8 KB, an MN-major 64 x 256 tile (B: four 64-column atoms 8 KB apart) 32 KB
    a = {_mma.k_major_byte(0, r, k) for r in range(64) for k in range(64)}
    assert a == set(range(0, 8192, 2))
    b = {_mma.mn_major_byte(0, k, n, lbo=8192) for k in range(64) for n in range(256)}
    assert b == set(range(0, 32768, 2))
    # the swizzle: chunk c of row r at chunk c ^ (r % 8); row 3's chunk 1 is at chunk 2 of its 128 bytes
    assert _mma.swizzle128(3 * 128 + 16) == 3 * 128 + 32 and _mma.swizzle128(8 * 128 + 16) == 8 * 128 + 16
    # the step's own tile layouts are the ones the descriptors describe
    from gpukernels.tensor_core import k06_wgmma

    b_at = k06_wgmma.make_b_at(256)
    assert all(2 * k06_wgmma.a_at(r, k) == _mma.k_major_byte(0, r, k) for r in range(128) for k in range(64))
    assert all(2 * b_at(k, n) == _mma.mn_major_byte(0, k, n, lbo=8192) for k in range(64) for n in range(256))
    # D: each of the 64 x N accumulators held by exactly one of the warpgroup's 128 threads
    seen = sorted(_mma.wgmma_d_coords(t, i) for t in range(128) for i in range(128))
    assert seen == [(r, c) for r in range(64) for c in range(256)]
    assert [_mma.wgmma_d_coords(37, i) for i in (0, 1, 2, 3, 4)] == [(17, 2), (17, 3), (25, 2), (25, 3), (17, 10)]


def _wgmma_product_kernel(n, wait_early=False, store_early=False):
    from gpukernels.tensor_core.k06_wgmma import a_at, make_b_at

    b_at = make_b_at(n)
    mma = {64: _mma.wgmma_n64, 128: _mma.wgmma_n128, 256: _mma.wgmma_n256}[n]

    @cuda.jit
    def kernel(a, b, c, early):
        # one warpgroup: A (64 x 32) and B (32 x n) into swizzled shared tiles, two chained k16 wgmmas, D to c
        sa = cuda.shared.array(64 * 64, np.float16)
        sb = cuda.shared.array(64 * 64 * 4, np.float16)
        acc = cuda.local.array(128, np.float32)
        t = cuda.threadIdx.x
        for e in range(t, 64 * 32, 128):
            sa[a_at(e // 32, e % 32)] = a[e // 32, e % 32]
        for e in range(t, 32 * n, 128):
            sb[b_at(e // n, e % n)] = b[e // n, e % n]
        _mma.wgmma_zero(acc, n)
        _mma.fence_proxy_async()  # the stores (generic proxy) before the tensor cores' reads (async proxy)
        cuda.syncthreads()
        _mma.wgmma_fence()
        for s in range(2):
            mma(acc, sa, s * 16, sb, s * 16 * 64, 64 * 64 * 2)
        _mma.wgmma_commit()
        if wait_early:
            early[t] = acc[0]  # before the wait: the products may not be there yet
        if not store_early:
            _mma.wgmma_wait(0)
        _mma.wgmma_store(c, acc, n, 16 * (t // 32) + (t % 32) // 4, 2 * (t % 4))

    return kernel


@sim_only
@pytest.mark.parametrize("n", [64, 256])
def test_wgmma_is_the_matrix_product(n, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 32)).astype(np.float16)
    b = rng.standard_normal((32, n)).astype(np.float16)
    c = np.full((64, n), np.nan, np.float32)
    early = np.full(128, np.nan, np.float32)
    _wgmma_product_kernel(n, wait_early=True)[1, 128](a, b, c, early)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = _rz(a64[:, :16] @ b64[:16])  # two chained products, each summed exactly and truncated once
    d = _rz(a64[:, 16:] @ b64[16:] + d)
    assert np.array_equal(c, d)
    assert np.all(early == 0)  # read before wgmma_wait: the simulator hands back what was there (the zeros)


@sim_only
def test_wgmma_misuse_says_why():
    a, b = np.zeros((64, 32), np.float16), np.zeros((32, 64), np.float16)
    c, early = np.zeros((64, 64), np.float32), np.zeros(128, np.float32)
    with pytest.raises(RuntimeError, match="not been waited for"):
        _wgmma_product_kernel(64, store_early=True)[1, 128](a, b, c, early)
    with pytest.raises(WarpMaskError, match="the block has 100 threads"):
        _wgmma_product_kernel(64)[1, 100](a, b, c, early)


def _wgmma_tf32_kernel(add_early=False):
    from gpukernels.tensor_core.k11_tf32x3 import at

    @cuda.jit
    def kernel(a, b, c):
        # one warpgroup: A (64 x 16) and B^T (64 x 16) in K-major swizzled float32 tiles; the first k8 product is
        # thrown away by the second's scale-d = 0, the third accumulates; then acc (= 1) += the partial
        sa = cuda.shared.array(64 * 32, np.float32)
        sb = cuda.shared.array(64 * 32, np.float32)
        acc = cuda.local.array(32, np.float32)
        part = cuda.local.array(32, np.float32)
        t = cuda.threadIdx.x
        for e in range(t, 64 * 16, 128):
            sa[at(e // 16, e % 16)] = a[e // 16, e % 16]
            sb[at(e // 16, e % 16)] = b[e % 16, e // 16]
        for q in range(32):
            acc[q] = 1.0
        _mma.fence_proxy_async()
        cuda.syncthreads()
        _mma.wgmma_fence()
        _mma.wgmma_tf32_n64(part, sa, 8, sb, 8, 1)  # discarded by the next one's scale-d = 0
        _mma.wgmma_tf32_n64(part, sa, 0, sb, 0, 0)
        _mma.wgmma_tf32_n64(part, sa, 8, sb, 8, 1)
        _mma.wgmma_commit()
        if not add_early:
            _mma.wgmma_wait(0)
        _mma.wgmma_add(acc, part, 64)
        _mma.wgmma_store(c, acc, 64, 16 * (t // 32) + (t % 32) // 4, 2 * (t % 4))

    return kernel


def test_tf32_wgmma_layouts():
    # step 7's K-major float32 tiles (rows of 32 floats) are the descriptors' layout, every element placed once
    from gpukernels.tensor_core.k11_tf32x3 import at

    f = at.py_func
    assert all(4 * f(r, k) == _mma.k_major_byte(0, r, k, size=4) for r in range(128) for k in range(32))
    assert sorted(f(r, k) for r in range(128) for k in range(32)) == list(range(128 * 32))


@sim_only
def test_tf32_wgmma_rounds_operands_and_scale_d_restarts_the_sum(seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((16, 64)).astype(np.float32)
    c = np.full((64, 64), np.nan, np.float32)
    _wgmma_tf32_kernel()[1, 128](a, b, c)
    # the tensor core reads the top 19 bits of each float32 (TF32: 10 bits of mantissa, cut, not rounded)
    a64, b64 = ((x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64) for x in (a, b))
    part = _rz(a64[:, 8:] @ b64[8:] + _rz(a64[:, :8] @ b64[:8]))
    assert np.array_equal(c, (part.astype(np.float32) + np.float32(1)))
    a_exact = a.astype(np.float64) @ b.astype(np.float64)
    assert 1e-5 < np.abs(c - 1 - a_exact).max() / np.abs(a_exact).max() < 1e-2  # TF32: not float32 products


@sim_only
def test_wgmma_add_before_the_wait_says_why():
    a, b, c = np.zeros((64, 16), np.float32), np.zeros((16, 64), np.float32), np.zeros((64, 64), np.float32)
    with pytest.raises(RuntimeError, match="wgmma_add reads accumulators whose wgmma has not been waited for"):
        _wgmma_tf32_kernel(add_early=True)[1, 128](a, b, c)


def test_tf32x3_without_wgmma_splits_in_its_mma_sync_kernel(monkeypatch, seed):
    from gpukernels.tensor_core import k11_tf32x3

    monkeypatch.setattr(k11_tf32x3, "compute_capability", lambda: (8, 0))
    a, b = tc.make_inputs((33, 40, 20), seed, dtype=np.float32)
    [launch] = tc.tf32x3.launches(a, b)
    assert launch.kernel is tc.tf32x3_mma_kernel
    out = tc.tf32x3(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert relative_error(out, ref) <= 2 * relative_error(a @ b, ref) + 3 * 2.0**-22


def _splitter(split):
    @cuda.jit
    def kernel(x, big, small):
        i = cuda.grid(1)
        if i < x.size:
            big[i], small[i] = split(x[i])

    return kernel


_split_kernel, _split_clamped_kernel = _splitter(_mma.split_tf32), _splitter(_mma.split_tf32_clamped)


def test_split_tf32_keeps_22_bits_and_never_overflows_a_finite_value():
    top = np.finfo(np.float32).max
    x = np.array([1.0, -0.1, 3.0e-39, 1.0e-45, 0.0, top, -top, np.float32(0.99997) * top, _mma.TF32_MAX,
                  np.nextafter(_mma.TF32_MAX, np.float32(np.inf)), np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(51).astype(np.float32) * 1e3])
    big, small = (np.full(x.shape, np.nan, np.float32) for _ in range(2))
    _split_kernel[1, 64](x, big, small)
    finite = np.isfinite(x)
    assert np.all(np.isfinite(big[finite]) & np.isfinite(small[finite])), x[finite & ~np.isfinite(big)]
    assert np.all(big.view(np.uint32)[finite] & 0x1FFF == 0) and np.all(small.view(np.uint32)[finite] & 0x1FFF == 0)
    recon = big[finite].astype(np.float64) + small[finite].astype(np.float64)
    xf = x[finite].astype(np.float64)
    # 22 bits of a normal value; a subnormal one keeps fewer (TF32 cuts the same 13 bits of its stored mantissa), so
    # both parts end at 2^-136: an absolute error of at most half that
    assert np.all(np.abs(recon - xf) <= 2.0**-21 * np.abs(xf) + 2.0**-137), np.abs(recon - xf) / np.abs(xf)
    assert abs(big[5]) == _mma.TF32_MAX and big[6] == -_mma.TF32_MAX  # float32's largest: not rounded to inf
    assert np.isposinf(big[10]) and np.isneginf(big[11]) and np.isnan(small[10:13]).all()  # inf, NaN: as documented


def test_split_tf32_clamped_is_split_tf32_on_every_finite_value():
    # the branch-free split (tile loops that split as they read, attention's tf32x3): the same bits for every finite
    # x, near float32's largest included; inf stays infinite in both parts' sum, NaN stays NaN
    top = np.finfo(np.float32).max
    rng = np.random.default_rng(1)
    x = np.concatenate([np.array([1.0, -0.1, 3.0e-39, 1.0e-45, 0.0, -0.0, top, -top, np.float32(0.99997) * top,
                                  _mma.TF32_MAX, -np.nextafter(_mma.TF32_MAX, np.float32(np.inf))], np.float32),
                        (rng.standard_normal(200) * 10.0 ** rng.integers(-40, 38, 200)).astype(np.float32)])
    outs = []
    for kernel in (_split_kernel, _split_clamped_kernel):
        big, small = (np.full(x.shape, np.nan, np.float32) for _ in range(2))
        kernel[4, 64](x, big, small)
        outs.append((big, small))
    assert np.array_equal(outs[0][0].view(np.uint32), outs[1][0].view(np.uint32))
    assert np.array_equal(outs[0][1].view(np.uint32), outs[1][1].view(np.uint32))
    special = np.array([np.inf, -np.inf, np.nan], np.float32)
    big, small = (np.full(3, 0.0, np.float32) for _ in range(2))
    _split_clamped_kernel[1, 32](special, big, small)
    total = big.astype(np.float64) + small.astype(np.float64)
    assert total[0] == np.inf and total[1] == -np.inf and np.isnan(small[2])


@pytest.mark.parametrize("hopper", [True, False])
def test_tf32x3_is_finite_where_a_value_near_float32s_largest_meets_small_ones(monkeypatch, hopper):
    # TF32 rounding takes 3.4e38 to inf: a split that let it would give inf (or NaN) where SGEMM's C is ~3.4e28
    from gpukernels.tensor_core import k11_tf32x3

    if not hopper:
        monkeypatch.setattr(k11_tf32x3, "compute_capability", lambda: (8, 0))
    a, b = tc.make_inputs((17, 9, 11), 0, dtype=np.float32)
    a[3, 4] = np.finfo(np.float32).max
    a[5, 0] = -np.float32(0.99999) * np.finfo(np.float32).max
    b *= np.float32(1e-10)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out = np.full(ref.shape, np.nan, np.float32)
    tc.tf32x3(a, b, out=out)
    assert np.all(np.isfinite(out))
    assert relative_error(out, ref) <= 2 * relative_error(a @ b, ref) + 3 * 2.0**-22


def test_wgmma_needs_hopper(monkeypatch):
    from gpukernels.tensor_core import k06_wgmma

    monkeypatch.setattr(k06_wgmma, "compute_capability", lambda: (8, 0))
    a, b = tc.make_inputs((64, 64, 64), 0)
    with pytest.raises(LaunchError, match=r"needs a Hopper GPU .*this one is 8\.0.*tensor_core\.optimized"):
        tc.wgmma(a, b)


@pytest.mark.slow  # 3 CPU-s; test_tensor_core_dispatch_paths_have_no_hazards and the suite shapes take the paths
def test_dispatcher_pads_unaligned_rows_and_splits_k(monkeypatch, seed):
    # The two paths the suite's shapes take on an H200 (4095 x 4097 x 4093: rows padded, then step 9; 16 x 8192 x
    # 8192: split-K), taken here at small odd shapes by lending the dispatcher a 1-SM GPU / a shallow split
    from gpukernels.tensor_core import k12_optimized as opt

    choose = opt.choose
    assert choose(4095, 4097, 4093, aligned=False, sms=132, hopper=True).config == {"tile": "128x256", "padded": True}
    assert choose(16, 8192, 8192, sms=132, hopper=True).config == {"tile": "64x64", "split_k": 5}
    assert choose(64, 8192, 4096, sms=132, hopper=True).config["split_k"] == 4  # few rows: 64 x 64 tiles, split
    assert "split_k" not in choose(1024, 1024, 1024, sms=132, hopper=False).config  # one slice of 1024: no split
    monkeypatch.setattr(opt, "sm_count", lambda: 1)
    for shape in ((70, 261, 75), (5, 300, 129)):  # K, N odd: padded to 80 and 264 / 136 and 304
        a, b = tc.make_inputs(shape, seed)
        launches = tc.optimized.launches(a, b)
        assert [x.kernel for x in launches] == [opt.pad_kernel, opt.pad_kernel, tc.persistent_kernel]
        out = np.full(shape[:2], np.nan, np.float32)
        tc.optimized(a, b, out=out)
        assert compare(out, tc.reference(a, b), FP16_TOLERANCE).ok
    monkeypatch.setattr(opt, "sm_count", lambda: 132)
    monkeypatch.setattr(opt, "SPLIT_MIN_K", 32)
    for shape in ((16, 64, 200), (130, 8, 96)):  # 7 k tiles in 6 slices (the last ones empty); 3 in 3
        a, b = tc.make_inputs(shape, seed)
        launches = tc.optimized.launches(a, b)
        assert launches[0].kernel is opt.zero_kernel and launches[1].kernel is opt.pipelined_split_kernel
        assert launches[1].grid[2] >= 3
        out = np.full(shape[:2], np.nan, np.float32)
        tc.optimized(a, b, out=out)
        assert compare(out, tc.reference(a, b), FP16_TOLERANCE).ok


def test_dispatcher_splits_k_inside_wgmma_for_few_deep_tiles():
    """Rule 3 by its thresholds: too few 128 x 256 tiles, deep K, more than 64 rows, at least half the SMs busy."""
    from gpukernels.tensor_core import k12_optimized as opt

    choose = opt.choose
    for shape, tile, slices in [((128, 8192, 8192), "128x256", 4), ((8192, 64, 4096), "128x128", 2),
                                ((1024, 1024, 16384), "128x256", 4)]:
        c = choose(*shape, sms=132, hopper=True)
        assert c.step == "wgmma" and c.config["tile"] == tile and c.config["split_k"] == slices, c
    assert choose(1023, 1021, 16381, aligned=False, sms=132, hopper=True).config["padded"]
    for n in (1000, 1024):  # slices of 256: their atomics cost more than the split gains (measured)
        assert "split_k" not in choose(n, n, n, sms=132, hopper=True).config
    for shape in [(16, 8192, 8192), (64, 8192, 8192)]:  # few rows: the 64 x 64 tiles of rule 4
        assert choose(*shape, sms=132, hopper=True).step == "pipelined"
    assert "split_k" not in choose(2048, 2048, 2048, sms=132, hopper=True).config  # enough tiles: rule 2
    assert "split_k" not in choose(512, 512, 512, sms=132, hopper=True).config  # 16 blocks: most SMs idle
    assert choose(1024, 1024, 1024, sms=132, hopper=False).step == "pipelined"  # no wgmma before Hopper
    assert choose(1024, 1024, 1024, sms=132, hopper=True, fp32=True).step == "tf32x3"


@pytest.mark.parametrize("shape,sms,slices", long_tier_after((1,), [
    ((130, 300, 330), 10, 2),  # 4 tiles of 128 x 256 (under half of 10 SMs) x 2 slices of 3 k tiles
    ((70, 100, 200), 6, 3),  # N <= 128: one 128 x 128 tile, 4 k tiles in slices of 2, 2 and none
    ((130, 261, 333), 10, 2),  # rows not 16-byte aligned: padded copies first
], multi=True))
def test_wgmma_split_k_is_correct(shape, sms, slices, monkeypatch, seed):
    from gpukernels._pad import pad_kernel
    from gpukernels.tensor_core import k12_optimized as opt

    monkeypatch.setattr(opt, "sm_count", lambda: sms)
    monkeypatch.setattr(opt, "WG_SPLIT_MIN_K", 64)
    a, b = tc.make_inputs(shape, seed)
    launches = tc.optimized.launches(a, b)
    kernels = [x.kernel for x in launches if x.kernel is not pad_kernel]
    bn = 128 if shape[1] <= 128 else 256
    assert kernels == [opt.zero_kernel, opt.WGMMA_SPLIT_KERNELS[bn]] and launches[-1].grid[2] == slices
    assert (launches[0].kernel is pad_kernel) == (shape[1] % 8 != 0 or shape[2] % 8 != 0)
    out = np.full(shape[:2], np.nan, np.float32)
    tc.optimized(a, b, out=out)
    check = compare(out, tc.reference(a, b), FP16_TOLERANCE)
    assert check.ok, f"{shape} seed={seed}: {check}"


@pytest.mark.parametrize("bm,bn,stages,async_copy,shape", [
    (64, 128, 8, True, (70, 136, 200)),  # one warpgroup: 2 row tiles (the second mostly past M), 4 k tiles, edges
    (64, 64, 4, True, (130, 72, 136)),  # 64-column atoms: one per tile; 3 row tiles x 2 column tiles
    (64, 256, 4, False, (33, 261, 75)),  # rows not 16-byte aligned: the ring filled by loads and stores
    (128, 128, 4, True, (130, 136, 72)),  # two warpgroups of 128 x 128 (what the dispatcher's split-K builds)
])
def test_wgmma_block_shapes_are_correct(bm, bn, stages, async_copy, shape, seed):
    # make_wgmma_kernel's other block shapes (bm / 64 warpgroups of bm x bn), which benchmarks/wgmma_variants.py
    # times on a GPU: each must be the product, on odd edges, into a NaN-poisoned C
    from gpukernels.tensor_core.k06_wgmma import make_wgmma_kernel, wgmma_launch

    kernel = make_wgmma_kernel(bn, stages, async_copy=async_copy, bm=bm)
    assert kernel.tile == (bm, bn) and kernel.threads == 2 * bm
    a, b = tc.make_inputs(shape, seed)
    out = np.full(shape[:2], np.nan, np.float32)
    [launch] = wgmma_launch(kernel, a, b, out)
    launch()
    check = compare(out, tc.reference(a, b), FP16_TOLERANCE)
    assert check.ok, f"{bm}x{bn} {shape} seed={seed}: {check}"


@sim_only
def test_tracer_counts_ldmatrix_wavefronts_per_phase_of_8_lanes():
    # An ldmatrix.x4 is served 8 lanes (8 rows of 16 bytes) at a time: the swizzled tiles are conflict-free (one
    # wavefront per phase), step 2's row-major tiles are 4-way (A) and 8-way (B) conflicted, as the layouts say
    # (test_swizzle_puts_each_ldmatrix_phase_in_eight_bank_groups). wgmma's tiles are read by the tensor cores, not
    # by lanes: they are in the race check (test_race_check) but not in the bank-conflict table.
    a, b = tc.make_inputs((64, 64, 64), 0)
    degrees = {}
    for name in ("ldmatrix", "swizzled", "wgmma"):
        with gpukernels.trace(count_local=False) as t:  # shared-memory wavefronts only
            tc.VERSIONS[name](a, b)
        degrees[name] = {(x.array, x.kind): (x.requests, x.wavefronts, x.max_degree) for x in t.bank_conflicts()}
    # per array: 4 warps x 2 k tiles of 32 x 2 k16 slices x 2 ldmatrix.x4 = 32 instructions, 4 phases each
    assert degrees["swizzled"][("sa", "read")] == (128, 128, 1)
    assert degrees["swizzled"][("sb", "read")] == (128, 128, 1)
    assert degrees["ldmatrix"][("sa", "read")] == (128, 512, 4)
    assert degrees["ldmatrix"][("sb", "read")] == (128, 1024, 8)
    assert all(kind == "write" for _, kind in degrees["wgmma"])
