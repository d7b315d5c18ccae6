"""FP8: the formats and instructions of gpukernels._fp8 (their twins in gpukernels.sim._fp8), and the tensor-core
step built on them, tensor_core.k10_fp8 (``fp8``, and ``fp8_gemm`` on codes quantized beforehand):

* the two formats against the OCP rules, exhaustively: every code decodes to its value (e5m2's are float16's top
  bytes) and encodes back to itself; every float16 value encodes to the nearest code, ties to the even one, as a
  brute-force search over all codes finds it; satfinite's boundaries (448, 57344, infinities), NaN, -0, and float32
  values that lie between float16 values;
* the instructions in a kernel -- on the simulator its twins, on a GPU the hardware, against the same rules -- and on
  the compiler: the PTX holds ``cvt.rn.satfinite.e4m3x2.f32`` and the e4m3 wgmma, nvJitLink reports no spills;
* the e4m3 wgmma reads K-major swizzled tiles (its product is that of the tiles the descriptors describe), scale-d 0
  ignores the accumulators, and its reads are in the asynchronous model: a missing proxy fence, accumulators read
  before the wait and an operand overwritten before the wait are errors naming the line;
* the step against float64 of the dequantized inputs at small odd shapes into NaN-poisoned outputs, its quantize
  pass byte for byte against the NumPy replay, several trips round a ring of 2; fp8_gemm on codes made beforehand;
* planted bugs: consumers that skip the full barrier's wait (an early read naming the wgmma's line), boxes landed
  without the swizzle (a wrong product), and, in the simulator's model of the FP8 adder, one chain of wgmmas
  without promotion (over the tolerance where the step is far under it);
* bad input: one-line errors naming the argument.
"""

import json

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import _fp8, _mma
from gpukernels import tensor_core as tc
from gpukernels._launch import LaunchError
from gpukernels.check import compare
from gpukernels.tensor_core import k10_fp8 as k10

SIM = gpukernels.MODE == "sim"
sim_only = pytest.mark.skipif(not SIM, reason="the simulator's FP8 model and its asynchronous checks")

if SIM:
    from gpukernels.sim import AsyncHazardError

from .test_tma import _line

FORMATS = {"e4m3": (_fp8.encode_e4m3, _fp8.decode_e4m3, _fp8.E4M3_TABLE, 448.0),
           "e5m2": (_fp8.encode_e5m2, _fp8.decode_e5m2, _fp8.E5M2_TABLE, 57344.0)}


# ----------------------------------------------------------------------------------------------------------
# The formats, against the OCP rules
# ----------------------------------------------------------------------------------------------------------


def _ocp_value(code: int, fmt: str) -> float:
    """One code's value, written out from the OCP specification's rules (scalar Python: an oracle independent of the
    tables)."""
    e_bits, m_bits, bias = (4, 3, 7) if fmt == "e4m3" else (5, 2, 15)
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> m_bits) & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
    if fmt == "e4m3" and e == 15 and m == 7:
        return float("nan")  # S.1111.111: e4m3's only NaN; no infinities
    if fmt == "e5m2" and e == 31:
        return sign * float("inf") if m == 0 else float("nan")
    if e == 0:
        return sign * m / (1 << m_bits) * 2.0 ** (1 - bias)
    return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_decodes_to_its_value_and_encodes_back_to_itself(fmt):
    encode, decode, table, top = FORMATS[fmt]
    codes = np.arange(256)
    want = np.array([_ocp_value(c, fmt) for c in codes])
    assert np.array_equal(decode(codes), want, equal_nan=True)
    num = ~np.isnan(want)
    assert np.array_equal(np.signbit(decode(codes))[num], np.signbit(want)[num])  # -0 included
    finite = np.isfinite(table)
    assert np.array_equal(encode(table[finite].astype(np.float32)), codes[finite])  # every code round-trips
    assert np.nanmax(table[finite]) == top and np.all(np.diff(table[:np.argmax(table == top) + 1]) > 0)
    if fmt == "e4m3":  # two NaNs (+-S.1111.111), no infinities; the smallest subnormal 2^-9
        assert np.isnan(table).sum() == 2 and not np.isinf(table).any() and table[1] == 2.0**-9
    else:  # float16's top byte: the same value for every code, NaN where float16 has NaN
        half = (codes.astype(np.uint16) << 8).view(np.float16).astype(np.float64)
        assert np.array_equal(table, half, equal_nan=True) and table[1] == 2.0**-16


def _nearest_codes(x: np.ndarray, fmt: str) -> np.ndarray:
    """The OCP rule by brute force: the code of the finite value nearest |x| (ties: the code with an even mantissa,
    i.e. even), clamped to the largest finite value (satfinite), the sign copied, NaN for NaN."""
    table, top = FORMATS[fmt][2], FORMATS[fmt][3]
    values = table[:0x80]
    codes = np.flatnonzero(np.isfinite(values) & (values >= 0) & ~np.signbit(values))
    with np.errstate(invalid="ignore"):  # (signalling NaNs warn when widened)
        mag = np.minimum(np.abs(x.astype(np.float64)), top)
    mag = np.where(np.isnan(mag), 0.0, mag)
    dist = np.abs(mag[:, None] - values[codes][None, :])  # exact: both sides are float16 / float32 values
    best = dist == dist.min(axis=1, keepdims=True)
    pick = np.where(best.sum(axis=1) == 1, codes[best.argmax(axis=1)],
                    codes[np.argmax(best & (codes[None, :] % 2 == 0), axis=1)])  # a tie: the even code
    pick = np.where(np.signbit(x), pick | 0x80, pick)
    return np.where(np.isnan(x), 0x7F, pick).astype(np.uint8)


def _same_codes(got, want, fmt) -> np.ndarray:
    """Element-wise: the same code, or both NaN (a NaN's sign and payload are not specified)."""
    decode = FORMATS[fmt][1]
    return (got == want) | (np.isnan(decode(got)) & np.isnan(decode(want)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_float16_value_encodes_to_the_nearest_code_ties_to_even(fmt):
    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)  # infinities and NaNs included
    got = FORMATS[fmt][0](x)
    want = _nearest_codes(x, fmt)
    bad = ~_same_codes(got, want, fmt)
    assert not bad.any(), f"{bad.sum()} wrong, e.g. {x[bad][:5]} -> {got[bad][:5]}, not {want[bad][:5]}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_float32_values_between_float16_values_round_to_nearest_even(fmt, seed):
    rng = np.random.default_rng(seed)
    x = (rng.uniform(0.5, 1, 20000) * 2.0 ** rng.integers(-20, 18, 20000)).astype(np.float32)
    x *= rng.choice([-1, 1], x.size).astype(np.float32)
    got = FORMATS[fmt][0](x)
    assert np.array_equal(got, _nearest_codes(x, fmt)), f"seed={seed}"


SPECIALS = [  # (float32 value, its e4m3 code, its e5m2 code)
    (448.0, 0x7E, 0x5F), (float(np.nextafter(np.float32(448), np.float32(1e9))), 0x7E, 0x5F),
    (464.0, 0x7E, 0x5F),  # e4m3: halfway to the 480 it lacks: satfinite, 448 (e5m2: between 448 and 512, to 448)
    (1e30, 0x7E, 0x7B), (float("inf"), 0x7E, 0x7B), (float("-inf"), 0xFE, 0xFB),  # satfinite: +-448, +-57344
    (57344.0, 0x7E, 0x7B), (61440.0, 0x7E, 0x7B),  # e5m2: 61440 would round up to 65536, i.e. infinity
    (-0.0, 0x80, 0x80), (0.0, 0x00, 0x00),
    (2.0**-10, 0x00, 0x14),  # e4m3: halfway between 0 and 2^-9: to 0 (even)
    (3 * 2.0**-10, 0x02, 0x1A),  # e4m3: halfway between 2^-9 (code 1) and 2^-8 (code 2): to code 2
    (float(np.nextafter(np.float32(2.0**-10), np.float32(1))), 0x01, 0x14),
    (1 + 2.0**-4, 0x38, 0x3C),  # halfway between 1 and 1.125: to 1 (0x38, mantissa 000)
    (1 + 2.0**-4 + 2.0**-20, 0x39, 0x3C),  # just above halfway (a float32, not a float16): up
    (2.0**-17, 0x00, 0x00),  # e5m2: halfway between 0 and 2^-16: to 0
]


def test_satfinite_boundaries_nan_and_signed_zero():
    x = np.array([v[0] for v in SPECIALS], np.float32)
    for q, fmt in enumerate(FORMATS):
        want = np.array([v[q + 1] for v in SPECIALS], np.uint8)
        got = FORMATS[fmt][0](x)
        assert np.array_equal(got, want), f"{fmt}: {x[got != want]} -> {got[got != want]}, not {want[got != want]}"
        assert np.array_equal(got, _nearest_codes(x, fmt))
        assert FORMATS[fmt][0](np.float32([np.nan]))[0] == 0x7F and np.isnan(FORMATS[fmt][1](0x7F))


# ----------------------------------------------------------------------------------------------------------
# The instructions in a kernel: the simulator's twins, or a GPU's hardware
# ----------------------------------------------------------------------------------------------------------


@cuda.jit
def convert(x, e4, e5, h4, h5):
    # two values per thread: to e4m3 and e5m2 codes (one cvt each), and each pair of codes back to two halves
    i = cuda.grid(1)
    if 2 * i + 1 < x.size:
        w = _fp8.pack_e4m3x2(x[2 * i], x[2 * i + 1])
        v = _fp8.pack_e5m2x2(x[2 * i], x[2 * i + 1])
        e4[2 * i], e4[2 * i + 1] = w & 0xFF, w >> 8
        e5[2 * i], e5[2 * i + 1] = v & 0xFF, v >> 8
        h4[i] = _fp8.e4m3x2_to_half2(w)
        h5[i] = _fp8.e5m2x2_to_half2(v)


# on a GPU every float16 value (the hardware is what is checked); on the simulator every 7th in the default tier (its
# twins are the formats' functions, checked exhaustively above: here the byte order and the packing), all in the long
STRIDES = ([pytest.param(7, id="sampled"), pytest.param(1, id="every", marks=pytest.mark.slow)] if SIM
           else [pytest.param(1, id="every")])


@pytest.mark.parametrize("stride", STRIDES)
def test_the_conversions_in_a_kernel_follow_the_rules(stride):
    every = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    x = np.concatenate([every[::stride], np.array([v[0] for v in SPECIALS], np.float32)])
    x = x[: x.size // 2 * 2]
    n = x.size
    e4, e5 = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    h4, h5 = np.zeros(n // 2, np.uint32), np.zeros(n // 2, np.uint32)
    convert[(n // 2 + 255) // 256, 256](x, e4, e5, h4, h5)
    for fmt, got, halves in (("e4m3", e4, h4), ("e5m2", e5, h5)):
        ok = _same_codes(got, _nearest_codes(x, fmt), fmt)
        assert ok.all(), f"{fmt}: {x[~ok][:5]} -> {got[~ok][:5]}"
        back = halves.view(np.float16).astype(np.float64)  # the low half from the low byte, as pack_half2 packs
        assert np.array_equal(back, FORMATS[fmt][1](got), equal_nan=True), fmt


_COMPILE_CHILD = r"""
import json, re
from numba import cuda, types
from gpukernels import _fp8, _mma
from gpukernels.resources import _assemble

def instructions(x, out, c):
    sa = cuda.shared.array(8192, types.uint8)
    acc = cuda.local.array(64, types.float32)
    t = cuda.threadIdx.x
    w = _fp8.pack_e4m3x2(x[0], x[1])
    v = _fp8.pack_e5m2x2(x[2], x[3])
    out[t] = _fp8.e4m3x2_to_half2(w) ^ _fp8.e5m2x2_to_half2(v)
    sa[t] = w & 0xFF
    _mma.fence_proxy_async()
    cuda.syncthreads()
    _mma.wgmma_fence()
    _fp8.wgmma_e4m3_n128(acc, sa, 0, sa, 32, 0)
    _mma.wgmma_commit()
    _mma.wgmma_wait(0)
    _fp8.wgmma_scale(acc, x[0], 128)
    _mma.wgmma_store(c, acc, 128, t // 4, 2 * (t % 4))

f1, u1 = types.Array(types.float32, 1, "C"), types.Array(types.uint32, 1, "C")
ptx, _ = cuda.compile_ptx(instructions, (f1, u1, types.Array(types.float32, 2, "C")), cc=(9, 0, "a"))
log = _assemble(ptx, "sm_90a")
names = ["cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.f16x2.e4m3x2", "cvt.rn.f16x2.e5m2x2",
         "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"]
print(json.dumps({"counts": {n: ptx.count(n) for n in names}, "local": ptx.count("ld.local"), "log": log}))
"""


@pytest.mark.needs_cuda_toolchain
def test_the_instructions_compile_to_their_ptx():
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_COMPILE_CHILD))
    assert all(n == 1 for n in out["counts"].values()), out["counts"]
    assert out["local"] == 0 and "0 bytes lmem" in out["log"] and "serialized" not in out["log"], out["log"]


_KERNELS_CHILD = r"""
import json, re
from numba import cuda, types
from gpukernels.tensor_core import k10_fp8 as F
from gpukernels.resources import _assemble
u8, f, f1 = types.Array(types.uint8, 2, "C"), types.Array(types.float32, 2, "C"), types.Array(types.float32, 1, "C")
h, u = types.Array(types.float16, 2, "C"), types.Array(types.uint64, 1, "C")

from gpukernels.resources import link_lto  # as a GPU builds it: setmaxnreg is honoured only so


gemm = (u8, u8, f1, f1, f, u, u)
out = {}
for name, k, sig in [("fp8", F.fp8_kernel, gemm), ("chained", F.make_fp8_kernel(promote=False), gemm),
                     ("amax", F.amax_kernel, (h, h, f)), ("scales", F.scales_kernel, (f, f1)),
                     ("rows", F.quantize_rows_kernel, (h, f1, u8)), ("cols", F.quantize_cols_kernel, (h, f1, u8))]:
    bounds = k.targetoptions.get("launch_bounds")
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0, "a"), launch_bounds=bounds)
    log = link_lto(k, sig) if bounds else _assemble(ptx, "sm_90a")
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    regs = re.search(r"[Uu]sed (\d+) registers", log)
    out[name] = {"wgmma": ptx.count("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"),
                 "cvt": ptx.count("cvt.rn.satfinite.e4m3x2.f32"), "bulk": ptx.count("cp.async.bulk.tensor.2d"),
                 "setmaxnreg": ptx.count("setmaxnreg."), "local": ptx.count("ld.local") + ptx.count("st.local"),
                 "spills": int(frame[1]) + int(frame[2]), "registers": int(regs[1]), "serialized": "serialized" in log,
                 "setmaxnreg_ignored": any(w in log for w in ("C7504", "C7508"))}
print(json.dumps(out))
"""


@pytest.mark.slow  # the step's six kernels compiled for sm_90a in a child (the instructions' compile stays default)
@pytest.mark.needs_cuda_toolchain
def test_the_steps_kernels_compile_without_spills():
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_KERNELS_CHILD))
    for name, r in out.items():
        assert r["spills"] == 0 and r["local"] == 0 and not r["serialized"], (name, r)
    # the GEMM: 4 e4m3 wgmmas per 128-byte k tile, the producer's 2 boxes per stage, setmaxnreg honoured under the
    # entry cap of 384 threads (65536 / 384 -> 168), every accumulator in registers
    for name in ("fp8", "chained"):
        r = out[name]
        assert r["wgmma"] > 0 and r["wgmma"] % 4 == 0 and r["bulk"] > 0 and r["bulk"] % 2 == 0, (name, r)
        assert r["setmaxnreg"] == 2 and not r["setmaxnreg_ignored"] and r["registers"] <= 168, (name, r)
    assert out["rows"]["cvt"] > 0 and out["cols"]["cvt"] > 0 and out["fp8"]["cvt"] == 0, out


# ----------------------------------------------------------------------------------------------------------
# The e4m3 wgmma: its operands, scale-d, and the asynchronous model
# ----------------------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def k_major(r, k):
    # byte (r, k) of a K-major tile of 128-byte rows (8-row groups 1 KB apart), 16-byte chunk k / 16 at chunk
    # (k / 16) ^ (r % 8): what the descriptors describe (`_mma.k_major_byte` with 1-byte elements)
    return r * 128 + ((((k >> 4) ^ (r & 7))) << 4) + (k & 15)


@cuda.jit
def e4m3_product(aq, bq_t, c, how):
    # one warpgroup: A (64 x 64 codes) and B^T (64 x 64) into swizzled K-major tiles, then two k32 wgmmas -- the first
    # with scale-d 0 over accumulators holding NaN, the second accumulating. how: 0 right, 1 no proxy fence, 2 the
    # accumulators stored before the wait, 3 an operand overwritten before the wait
    sa = cuda.shared.array(8192, np.uint8)
    sb = cuda.shared.array(8192, np.uint8)
    acc = cuda.local.array(32, np.float32)
    t = cuda.threadIdx.x
    for e in range(t, 64 * 64, 128):
        sa[k_major(e // 64, e % 64)] = aq[e // 64, e % 64]
        sb[k_major(e // 64, e % 64)] = bq_t[e // 64, e % 64]
    for q in range(32):
        acc[q] = np.nan
    if how != 1:
        _mma.fence_proxy_async()  # the stores (generic proxy) before the tensor cores' reads (async proxy)
    cuda.syncthreads()
    _mma.wgmma_fence()
    _fp8.wgmma_e4m3_n64(acc, sa, 0, sb, 0, 0)  # scale-d 0: D = A B, the NaNs unread
    _fp8.wgmma_e4m3_n64(acc, sa, 32, sb, 32, 1)
    _mma.wgmma_commit()
    if how == 3:
        sa[t] = 0  # overwrite
    if how != 2:
        _mma.wgmma_wait(0)
    _mma.wgmma_store(c, acc, 64, 16 * (t // 32) + (t % 32) // 4, 2 * (t % 4))


def _codes(rng, shape):
    # random finite e4m3 codes of both signs (no NaN), subnormals included
    codes = rng.integers(0, 0x7F, shape).astype(np.uint8)
    return codes | (rng.integers(0, 2, shape).astype(np.uint8) << 7)


def test_the_e4m3_wgmma_multiplies_the_tiles_the_descriptors_describe(seed):
    assert all(k_major.py_func(r, k) == _mma.k_major_byte(0, r, k, size=1) for r in range(64) for k in range(128))
    rng = np.random.default_rng(seed)
    aq, bq_t = _codes(rng, (64, 64)), _codes(rng, (64, 64))
    c = np.full((64, 64), np.nan, np.float32)
    e4m3_product[1, 128](aq, bq_t, c, 0)
    a, bt = _fp8.decode_e4m3(aq), _fp8.decode_e4m3(bq_t)
    # the products of the tiles the descriptors describe (a byte read from elsewhere would be off by O(1)), summed
    # with the tensor cores' short adder (the simulator keeps 14 bits of each sum's largest addend: ~1e-4 here)
    check = compare(c, a @ bt.T, 2.0**-8)
    assert check.ok, f"seed={seed}: {check}"
    if SIM:  # the simulator's adder model, exactly: two k32 sums, the second on top of the first
        first = _fp8_model(a[:, :32], bt[:, :32], np.zeros((64, 64)))
        assert np.array_equal(c, _fp8_model(a[:, 32:], bt[:, 32:], first)), f"seed={seed}"


def _fp8_model(a, bt, c):
    from gpukernels.sim._fp8 import fp8_product

    return fp8_product(a, bt, c)


@sim_only
@pytest.mark.parametrize("how,error,message,marker", [
    (1, "AsyncHazardError", r"missing fence.*wgmma_e4m3_n64", "_fp8.wgmma_e4m3_n64(acc, sa, 0, sb, 0, 0)"),
    (2, "RuntimeError", r"wgmma_store reads accumulators whose wgmma has not been waited for", None),
    (3, "AsyncHazardError", r"early overwrite.*wgmma_e4m3_n64", "sa[t] = 0  # overwrite"),
], ids=["no_fence", "store_before_wait", "overwrite_before_wait"])
def test_the_e4m3_wgmma_is_in_the_asynchronous_model(how, error, message, marker):
    aq = bq_t = np.zeros((64, 64), np.uint8)
    c = np.zeros((64, 64), np.float32)
    with pytest.raises(AsyncHazardError if error == "AsyncHazardError" else RuntimeError, match=message) as info:
        e4m3_product[1, 128](aq, bq_t, c, how)
    if marker:
        assert f"test_fp8.py:{_line(e4m3_product, marker)}" in str(info.value), str(info.value)


@pytest.mark.parametrize("row,col", [(3, 16), (-2, -48), (17, 96)], ids=["inside", "before", "past"])
def test_a_box_of_codes_lands_swizzled_with_zeros_past_the_edges(row, col):
    # 1-byte elements: a box row of 128 codes is the 128-byte swizzle's span, as the step's maps of Aq and Bq^T ask
    from gpukernels._tma import TensorMap

    from .test_tma import _landed, one_box

    tensor = (np.arange(20 * 160) % 251 + 1).astype(np.uint8).reshape(20, 160)
    out = np.zeros(8 * 128, np.uint8)
    one_box[1, 32](TensorMap(cuda.to_device(tensor), (8, 128), swizzle=128), out, row, col, 8 * 128)
    assert np.array_equal(out, _landed(tensor, (8, 128), row, col, 128))


# ----------------------------------------------------------------------------------------------------------
# The step
# ----------------------------------------------------------------------------------------------------------


def _step(shape, seed, inputs=None):
    """fp8's launches at ``shape`` on device arrays, into a NaN-poisoned output: (out, aq, bq_t, scale_a, scale_b, a,
    b) back on the host."""
    a, b = inputs or tc.make_inputs(shape, seed)
    out = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
    launches = k10.fp8.launches(cuda.to_device(a), cuda.to_device(b), out=out)
    assert launches[-1].kernel is k10.fp8_kernel
    for launch in launches:
        launch()
    return (out.copy_to_host(),) + tuple(x.copy_to_host() for x in launches[-1].args[:4]) + (a, b)


@pytest.mark.parametrize("shape", [(33, 40, 24), (1, 1, 1), (130, 72, 200),
                                   pytest.param((17, 264, 328), marks=pytest.mark.slow)], ids=str)
def test_the_step_matches_float64_of_the_dequantized_inputs(shape, seed):
    # (130, 72, 200): two row tiles, K padded 200 -> 208 (two k tiles, the second mostly past K); (17, 264, 328): a
    # third column tile whose box of Bq^T lies mostly past N, 3 k tiles; (1, 1, 1): every box almost all zeros
    out, aq, bq_t, sa, sb, a, b = _step(shape, seed)
    want = k10.quantize_reference(a, b)
    assert np.array_equal(aq, want[0]) and np.array_equal(bq_t, want[1]), f"seed={seed}"  # byte for byte
    assert sa[0] == want[2] and sb[0] == want[3], f"seed={seed}"
    check = compare(out, k10.dequantized_product(aq, bq_t, sa, sb), k10.TOLERANCE)
    assert check.ok, f"{shape} seed={seed}: {check}"


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(257, 520, 584), (130, 264, 1000)], ids=str)
def test_the_step_at_larger_shapes(shape, seed):
    out, aq, bq_t, sa, sb, _, _ = _step(shape, seed)
    check = compare(out, k10.dequantized_product(aq, bq_t, sa, sb), k10.TOLERANCE)
    assert check.ok, f"{shape} seed={seed}: {check}"


@sim_only
@pytest.mark.slow
# two shuffled thread orders (seeds 1 and 2), as test_persistent.py and test_attention_hopper.py run theirs; a
# third seed was a third order of the same launches at the same shape
@pytest.mark.parametrize("seed", [1, 2])
def test_the_step_is_hazard_free_under_shuffled_schedules(seed):
    from gpukernels import sim

    with sim.configure(shuffle=True, seed=seed):
        out, aq, bq_t, sa, sb, _, _ = _step((130, 264, 328), seed)
    assert compare(out, k10.dequantized_product(aq, bq_t, sa, sb), k10.TOLERANCE).ok


def test_the_version_takes_host_arrays_and_leaves_them_alone(seed):
    shape = (33, 40, 24)
    a, b = tc.make_inputs(shape, seed)
    before = a.copy(), b.copy()
    out = np.full(shape[:2], np.nan, np.float32)
    assert k10.fp8(a, b, out=out) is out
    check = compare(out, k10.reference(a, b), k10.TOLERANCE)
    assert check.ok, f"seed={seed}: {check}"
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])
    # FP8 is not float16: against float64 of the float16 inputs, e4m3's rounding shows (a few percent)
    assert 1e-3 < compare(out, tc.reference(a, b), 1).rel_error < 0.1


def _gemm(kernel, aq, bq_t, sa, sb, shape):
    out = cuda.to_device(np.full(shape[:2], np.nan, np.float32))
    args = [cuda.to_device(np.ascontiguousarray(x)) for x in (aq, bq_t, np.float32([sa]), np.float32([sb]))]
    k10.gemm_launch(kernel, *args, out)()
    return out.copy_to_host()


@pytest.mark.slow  # 1.7 CPU-s; the default tier's phase flips are the shared ring's (tests/test_persistent.py)
def test_several_trips_round_a_ring_of_two(seed):
    # K = 1000 -> 1008: 8 k tiles through 2 stages, both barriers of each stage flipping their phase 4 times; the
    # second column tile's box of Bq^T lies partly past N = 136
    shape = (40, 136, 1000)
    a, b = tc.make_inputs(shape, seed)
    aq, bq_t, sa, sb = k10.quantize_reference(a, b)
    out = _gemm(k10.make_fp8_kernel(stages=2), aq, bq_t, sa, sb, shape)
    check = compare(out, k10.dequantized_product(aq, bq_t, sa, sb), k10.TOLERANCE)
    assert check.ok, f"seed={seed}: {check}"


def test_fp8_gemm_on_codes_made_beforehand(seed):
    shape = (33, 40, 24)
    a, b = tc.make_inputs(shape, seed)
    aq, bq_t, sa, sb = k10.quantize(a, b)  # the quantize kernels, on host arrays: host arrays back
    assert isinstance(aq, np.ndarray) and aq.shape == (33, 32) and bq_t.shape == (40, 32)
    out = k10.fp8_gemm(aq, bq_t, float(sa[0]), sb)  # a number or a one-element array
    assert compare(out, k10.dequantized_product(aq, bq_t, sa, sb), k10.TOLERANCE).ok
    assert np.array_equal(out, k10.fp8(a, b))  # the same kernel on the same codes: the same bits


def test_empty_and_all_zero_inputs(seed):
    a, b = np.zeros((5, 0), np.float16), np.zeros((0, 7), np.float16)
    assert np.array_equal(k10.fp8(a, b), np.zeros((5, 7), np.float32))  # K = 0: an empty sum
    a, b = np.zeros((16, 16), np.float16), np.zeros((16, 8), np.float16)  # amax 0: the scale is 1, not 0 (no NaN)
    out, _, _, sa, sb, _, _ = _step((16, 8, 16), seed, (a, b))
    assert np.array_equal(out, np.zeros((16, 8), np.float32)) and sa[0] == sb[0] == 1


@sim_only
def test_promotion_keeps_the_tensor_cores_short_sums_short():
    # all-positive inputs, K = 1024: one chain of 32 wgmmas into the accumulators (each cut to 14 bits of its
    # largest addend, the running sum among them) drifts toward zero; summing each k tile from zero and adding it in
    # float32 keeps the error to one tile's
    rng = np.random.default_rng(0)
    shape = (64, 128, 1024)
    a = rng.uniform(0, 1, shape[::2]).astype(np.float16)
    b = rng.uniform(0, 1, shape[:0:-1]).astype(np.float16)
    aq, bq_t, sa, sb = k10.quantize_reference(a, b)
    ref = k10.dequantized_product(aq, bq_t, sa, sb)
    promoted = compare(_gemm(k10.fp8_kernel, aq, bq_t, sa, sb, shape), ref, k10.TOLERANCE).rel_error
    chained = compare(_gemm(k10.make_fp8_kernel(promote=False), aq, bq_t, sa, sb, shape), ref, 1).rel_error
    assert promoted < k10.TOLERANCE / 4 and chained > k10.TOLERANCE, (promoted, chained)


# ----------------------------------------------------------------------------------------------------------
# Planted bugs
# ----------------------------------------------------------------------------------------------------------


@sim_only
def test_consumers_that_skip_the_full_wait_read_a_stage_before_its_copy_landed(monkeypatch):
    monkeypatch.setattr(k10, "wait_full", lambda full, kt, stages: None)
    with pytest.raises(AsyncHazardError, match=r"early read.*before the TMA copy") as info:
        _step((33, 40, 24), 0)
    assert info.value.hazard == "early read"
    assert info.value.location.endswith(f":{_line(k10, 'wgmma_e4m3_n128(part, smem')}"), str(info.value)
    assert info.value.issue_location.endswith(f":{_line(k10, 'tma_load_2d(smem, base, ta')}"), str(info.value)


def test_boxes_landed_without_the_swizzle_give_a_wrong_product(monkeypatch, seed):
    # the descriptors read 128-byte swizzled tiles; copies that land them unswizzled put row r's chunks where the
    # tensor cores read row r's chunk c ^ (r % 8): the check fails, on most elements
    real = k10.TensorMap
    monkeypatch.setattr(k10, "TensorMap", lambda t, box, swizzle=128: real(t, box, swizzle=0))
    out, aq, bq_t, sa, sb, _, _ = _step((33, 40, 24), seed)
    check = compare(out, k10.dequantized_product(aq, bq_t, sa, sb), k10.TOLERANCE)
    assert not check.ok and check.rel_error > 0.1, check


# ----------------------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------------------

_A, _B = np.zeros((4, 32), np.uint8), np.zeros((8, 32), np.uint8)


@pytest.mark.parametrize("call,name", [
    (lambda: k10.fp8(np.zeros((4, 16), np.float32), np.zeros((16, 8), np.float16)), "a must have dtype float16"),
    (lambda: k10.fp8(np.zeros((4, 16), np.float16), np.zeros((15, 8), np.float16)), "inner dimensions must match"),
    (lambda: k10.fp8_gemm(np.zeros((4, 32), np.float16), _B, 1.0, 1.0), "aq must hold e4m3 codes as uint8"),
    (lambda: k10.fp8_gemm(_A, np.zeros((8, 48), np.uint8), 1.0, 1.0), "aq and bq_t must both be K bytes wide"),
    (lambda: k10.fp8_gemm(_A[:, :24], _B[:, :24], 1.0, 1.0), "multiple of 16 bytes"),
    (lambda: k10.fp8_gemm(_A, _B, np.ones(2, np.float32), 1.0), "scale_a must hold one element"),
    (lambda: k10.fp8_gemm(_A, _B, 1.0, "2"), "scale_b must be a NumPy or CUDA float32 array"),
    (lambda: k10.fp8_gemm(_A, _B, True, 1.0), "scale_a must be a positive float32 number"),
    (lambda: k10.fp8_gemm(_A, _B.reshape(-1), 1.0, 1.0), "bq_t must be 2-D"),
], ids=["a_float32", "k_mismatch", "aq_float16", "aq_bq_k", "k_unpadded", "scale_shape", "scale_str", "scale_bool",
        "bq_1d"])
def test_bad_input_is_one_line_naming_the_argument(call, name):
    with pytest.raises(LaunchError, match=name) as info:
        call()
    assert "\n" not in str(info.value)


def test_a_gpu_without_fp8_wgmma_is_refused(monkeypatch):
    monkeypatch.setattr(k10, "compute_capability", lambda: (8, 9))
    with pytest.raises(LaunchError, match=r"tensor_core.fp8 needs a Hopper GPU .* this one is 8.9"):
        k10.fp8(np.ones((4, 16), np.float16), np.ones((16, 8), np.float16))
