"""FP8 on the simulator: the two 8-bit formats exactly (the OCP 8-bit floating point specification, "OFP8"), and the
twins of `gpukernels._fp8`'s instructions built on them.

**The formats.** A code is 8 bits, sign | exponent | mantissa:

* **e4m3** (S.EEEE.MMM, bias 7): normal values (1 + M/8) 2^(E-7), subnormals (E = 0) M/8 2^-6, the largest finite
  value 1.75 x 2^8 = 448 (S.1111.110), the smallest subnormal 2^-9. No infinities: S.1111.111 is NaN, and it is the
  only NaN -- e4m3 spends the codes IEEE would give infinities and other NaNs on one more binade of finite values.
* **e5m2** (S.EEEEE.MM, bias 15): IEEE-like -- float16's top byte, so every e5m2 value is a float16 value --,
  largest finite 1.75 x 2^15 = 57344, E = 31 infinities (M = 0) and NaNs (M != 0), smallest subnormal 2^-16.

`decode_e4m3` / `decode_e5m2` read codes through tables of all 256 values; `encode_e4m3` / `encode_e5m2` round
float32 values as ``cvt.rn.satfinite`` does: to the nearest code, ties to the even one (even mantissa: the lower
code's last bit), *satfinite* -- a finite value beyond the largest one, or an infinity, becomes the largest finite
value of its sign (448 or 57344) instead of NaN (e4m3 without it) or infinity (e5m2) -- and NaN stays NaN (the code
0x7F). Both are vectorized: a value's magnitude is placed among the midpoints between consecutive codes
(``np.searchsorted``), which are exact in float64, so the rounding is exact for every float32.

**The instructions** (the kernels call them as they call `gpukernels._fp8`'s, whose docstring teaches them):
``pack_e4m3x2`` / ``pack_e5m2x2`` (two float32 -> two codes in 16 bits, ``lo`` in the low byte),
``e4m3x2_to_half2`` / ``e5m2x2_to_half2`` (two codes -> two float16 in 32 bits, as ``pack_half2`` packs them),
``wgmma_e4m3_n64/128/256`` and ``wgmma_scale``. The wgmma reads its tiles where the descriptors point -- both
operands K-major, rows of 128 bytes (128 codes) in 8-row groups 1024 bytes apart, 128-byte swizzle: `_mma`'s model
with 1-byte elements -- and registers the reads with the asynchronous model (`gpukernels.sim._async`) exactly as
the float16 wgmma does: a stage read before its copy landed, or a missing ``fence.proxy.async``, or an operand
overwritten before the ``wgmma_wait`` that covers it, is a hazard naming the lines.

**Its accumulation.** Hopper's FP8 tensor cores do not accumulate in full float32: DeepSeek-V3's report (2024,
section 3.3.2) measured about 14 bits kept on an H800 -- an FP8 product summed over K = 4096 in one chain came out
with a relative error of nearly 2%. The simulated wgmma models that (`FP8_ACC_BITS`): for each element of D, the 32
products of its k32 slice and the accumulator C are aligned to the largest of them, and only the top 14 bits below
that one's leading bit are kept (the rest is cut, toward zero); the sum of what is kept is exact. NVIDIA does not
publish the adder; the model reproduces the effect that matters -- accuracy lost along a long chain of wgmmas into
one accumulator, which `gpukernels.tensor_core.k10_fp8` avoids by "promotion" (each k tile summed from zero, then
added to float32 registers) -- and it is not measured against an H100 or H200 here.
"""

from __future__ import annotations

import sys

import numpy as np

#: The largest finite values: 1.75 x 2^8 and 1.75 x 2^15.
E4M3_MAX, E5M2_MAX = 448.0, 57344.0
#: Significant bits the simulated FP8 wgmma keeps of each sum, counted from the largest addend's leading bit.
FP8_ACC_BITS = 14
NAN_CODE = 0x7F  # the NaN cvt writes for a NaN input (both formats: S.1111.111 in e4m3, a NaN of e5m2)

# ----------------------------------------------------------------------------------------------------------
# The formats: decode tables of all 256 codes, and rounding to them
# ----------------------------------------------------------------------------------------------------------


def _table(exp_bits: int, man_bits: int, bias: int, ieee: bool) -> np.ndarray:
    """The value of every code 0..255 (float64): sign | exponent | mantissa."""
    c = np.arange(256)
    e, m = (c >> man_bits) & ((1 << exp_bits) - 1), c & ((1 << man_bits) - 1)
    frac = m / float(1 << man_bits)
    v = np.where(e == 0, frac * 2.0 ** (1 - bias), (1 + frac) * 2.0 ** (e - bias))
    top = e == (1 << exp_bits) - 1
    if ieee:  # e5m2: the top exponent is infinity (M = 0) and NaN
        v = np.where(top, np.where(m == 0, np.inf, np.nan), v)
    else:  # e4m3: only S.1111.111 is NaN; the rest of the top binade is finite
        v = np.where(top & (m == (1 << man_bits) - 1), np.nan, v)
    return np.where(c >> 7, -v, v)


E4M3_TABLE = _table(4, 3, 7, ieee=False)
E5M2_TABLE = _table(5, 2, 15, ieee=True)
E4M3_TABLE.flags.writeable = E5M2_TABLE.flags.writeable = False
# the finite non-negative values in code order (codes 0.., increasing), and the midpoints between neighbours
_POSITIVE = {"e4m3": E4M3_TABLE[:0x7F], "e5m2": E5M2_TABLE[:0x7C]}
_MIDPOINTS = {f: (v[:-1] + v[1:]) / 2 for f, v in _POSITIVE.items()}


def decode_e4m3(codes) -> np.ndarray:
    """The values (float64) of e4m3 codes (any integer array of 0..255)."""
    return E4M3_TABLE[np.asarray(codes, dtype=np.uint8)]


def decode_e5m2(codes) -> np.ndarray:
    """The values (float64) of e5m2 codes."""
    return E5M2_TABLE[np.asarray(codes, dtype=np.uint8)]


def _encode(x, fmt: str) -> np.ndarray:
    values, mids = _POSITIVE[fmt], _MIDPOINTS[fmt]
    with np.errstate(invalid="ignore", over="ignore"):  # (signalling NaNs warn when widened)
        x = np.asarray(x, dtype=np.float32).astype(np.float64)  # the cvt's input is float32: rounded to it first
        a = np.minimum(np.abs(x), values[-1])  # satfinite: past the largest finite value, the largest (NaN stays)
    nan = np.isnan(a)
    a = np.where(nan, 0.0, a)
    i = np.searchsorted(mids, a, side="left")  # mids[i - 1] < a <= mids[i]: code i is nearest, or ties with i + 1
    tie = (i < mids.size) & (a == mids[np.minimum(i, mids.size - 1)])
    code = i + (tie & (i % 2 == 1))  # a tie goes to the even code (its mantissa's last bit 0)
    code = np.where(np.signbit(x), code | 0x80, code)
    return np.where(nan, NAN_CODE, code).astype(np.uint8)


def encode_e4m3(x) -> np.ndarray:
    """float32 values -> e4m3 codes (uint8), as ``cvt.rn.satfinite.e4m3x2.f32`` rounds each: to nearest, ties to
    even, finite overflow and infinities to +-448, NaN to NaN (0x7F), -0 to -0 (0x80)."""
    return _encode(x, "e4m3")


def encode_e5m2(x) -> np.ndarray:
    """float32 values -> e5m2 codes, as ``cvt.rn.satfinite.e5m2x2.f32``: nearest, ties to even, finite overflow and
    infinities to +-57344, NaN to NaN."""
    return _encode(x, "e5m2")


def _half_bits(values: np.ndarray) -> np.ndarray:
    """float64 values that are float16 values (every e4m3 and e5m2 one) -> their float16 bits; NaN as 0x7FFF."""
    bits = values.astype(np.float16).view(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FFF), bits)


E4M3_HALF = _half_bits(E4M3_TABLE)  # code -> float16 bits: cvt.rn.f16x2.e4m3x2, exact (e4m3 is inside float16)
E5M2_HALF = _half_bits(E5M2_TABLE)  # ... e5m2: the code is float16's top byte (its NaNs made 0x7FFF)


# ----------------------------------------------------------------------------------------------------------
# The instructions a kernel calls
# ----------------------------------------------------------------------------------------------------------

_ENCODE = {"e4m3": encode_e4m3, "e5m2": encode_e5m2}
_CACHE: dict = {}  # (format, float32 bits) -> code: a quantize kernel converts many equal values


def _code(x, fmt: str) -> int:
    key = (fmt, int(np.float32(x).view(np.uint32)))
    code = _CACHE.get(key)
    if code is None:
        if len(_CACHE) > 1 << 16:
            _CACHE.clear()
        code = _CACHE[key] = int(_ENCODE[fmt](np.float32(x)))
    return code


def pack_e4m3x2(lo, hi) -> int:
    """``cvt.rn.satfinite.e4m3x2.f32``: lo's code in bits 0-7, hi's in bits 8-15."""
    return _code(lo, "e4m3") | _code(hi, "e4m3") << 8


def pack_e5m2x2(lo, hi) -> int:
    """``cvt.rn.satfinite.e5m2x2.f32``: lo's code in bits 0-7, hi's in bits 8-15."""
    return _code(lo, "e5m2") | _code(hi, "e5m2") << 8


def _pair(name: str, w) -> int:
    if isinstance(w, (bool, np.bool_)) or not isinstance(w, (int, np.integer)) or not 0 <= w < 1 << 16:
        raise TypeError(f"{name}: w must be 16 bits holding two FP8 codes (from pack_e4m3x2 or pack_e5m2x2); got "
                        f"{w!r} of type {type(w).__name__}")
    return int(w)


def e4m3x2_to_half2(w) -> int:
    """``cvt.rn.f16x2.e4m3x2``: two e4m3 codes -> two float16 in one 32-bit word (the low byte's in the low half)."""
    w = _pair("e4m3x2_to_half2", w)
    return int(E4M3_HALF[w & 0xFF]) | int(E4M3_HALF[w >> 8]) << 16


def e5m2x2_to_half2(w) -> int:
    """``cvt.rn.f16x2.e5m2x2``: two e5m2 codes -> two float16 (each code is its float16's top byte)."""
    w = _pair("e5m2x2_to_half2", w)
    return int(E5M2_HALF[w & 0xFF]) | int(E5M2_HALF[w >> 8]) << 16


def fp8_product(a: np.ndarray, bt: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A B + C as the simulated FP8 tensor core sums it: A (r, k) and B^T (n, k) FP8 values, C (r, n) float32.
    Each element's k products (exact: 4 x 4 significant bits) and its C are cut to multiples of 2^(E - 13), E the
    exponent of the largest of them (FP8_ACC_BITS = 14 bits kept), then summed exactly; the result is float32 (a sum
    of k + 1 multiples of that step below 2^(E+1) each has few enough bits to be one exactly)."""
    terms = np.concatenate([a[:, None, :] * bt[None, :, :], np.asarray(c, np.float64)[:, :, None]], axis=2)
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.max(np.abs(terms), axis=2, keepdims=True)
        _, e = np.frexp(np.where(np.isfinite(top), top, 1.0))  # top = f 2^e, f in [0.5, 1): leading bit 2^(e-1)
        step = np.ldexp(1.0, e - FP8_ACC_BITS)
        d = (np.trunc(terms / step) * step).sum(axis=2)
        return d.astype(np.float32)


def _raw(x) -> np.ndarray:
    return np.asarray(getattr(x, "_a", x)).reshape(-1)


def _index(a_off: int, b_off: int, n: int, rows) -> tuple[np.ndarray, np.ndarray]:
    """Flat byte indices of A's ``rows`` (row r: its 32 k's) and of B^T (row c of N: its 32 k's), both K-major, where
    the descriptors find them: 128-byte rows, 8-row groups 1024 bytes apart, the 128-byte swizzle
    (`gpukernels._mma.k_major_byte` with 1-byte elements, vectorized)."""
    from .._mma import _swizzle128_np

    k = np.arange(32)[None, :]
    r = np.asarray(rows)[:, None]
    c = np.arange(n)[:, None]
    ia = _swizzle128_np(int(a_off) + (r >> 3) * 1024 + (r & 7) * 128 + k)
    ib = _swizzle128_np(int(b_off) + (c >> 3) * 1024 + (c & 7) * 128 + k)
    return ia, ib


def _check(kind: str, sa, a_off, sb, b_off) -> None:
    for name, x in (("sa", sa), ("sb", sb)):
        if getattr(x, "space", "shared") != "shared":
            raise TypeError(f"{kind}: {name} must be a shared-memory uint8 array of e4m3 codes; {x!r} is in "
                            f"{x.space} memory")
        if np.dtype(x.dtype) != np.uint8:
            raise TypeError(f"{kind}: {name} must hold e4m3 codes as uint8; got {x.dtype}")
    for name, off in (("a_off", a_off), ("b_off", b_off)):
        if int(off) % 32:
            raise ValueError(f"{kind}: {name} = {off} bytes is not on a 32-byte boundary: a k32 slice of a 128-byte "
                             "swizzled row of e4m3 codes is 32 bytes")


def _wgmma_all(n: int):
    from .._mma import _index as frag_index, c_frag_coords

    rows, cols = frag_index(c_frag_coords, 4)
    blocks = n // 8
    kind = f"wgmma_e4m3_n{n}"

    def collective(vals: dict) -> dict:
        # vals[lane]: ((sa, a_off, sb, b_off), warp of the warpgroup, this lane's n / 2 accumulators)
        desc, w4 = vals[0][0], vals[0][1]
        if any(vals[lane][0][1:] != desc[1:] or vals[lane][0][0] is not desc[0] or vals[lane][0][2] is not desc[2]
               for lane in range(32)):
            raise ValueError(f"{kind}: the lanes of a warp gave different operands (arrays or offsets); a wgmma's "
                             "descriptors are the warpgroup's, the same in every thread")
        sa, a_off, sb, b_off = desc
        ia, ib = _index(a_off, b_off, n, np.arange(16 * w4, 16 * w4 + 16))
        ra, rb = _raw(sa), _raw(sb)
        for name, idx, raw in (("A", ia, ra), ("B", ib, rb)):
            if idx.max() >= raw.size:
                raise IndexError(f"{kind}: the {name} tile reaches byte {int(idx.max())} of a shared array of "
                                 f"{raw.size}: the descriptor points past its end")
        c = np.zeros((16, n))
        accs = np.array([vals[lane][2] for lane in range(32)], dtype=np.float32).reshape(32, blocks, 4)
        for j in range(blocks):
            c[rows, cols + 8 * j] = accs[:, j, :]
        d = fp8_product(E4M3_TABLE[ra[ia]], E4M3_TABLE[rb[ib]], c)
        out = np.stack([d[rows, cols + 8 * j] for j in range(blocks)], axis=1)  # (32, blocks, 4)
        return {lane: out[lane].reshape(-1) for lane in range(32)}

    return collective


def _sim_wgmma_e4m3(n: int):
    kind = f"wgmma_e4m3_n{n}"
    count = n // 2

    def wgmma(acc, sa, a_off, sb, b_off, scale_d):
        # scale_d: 0 makes D = A B (the accumulators' old values are ignored), else D = A B + D. One function, named
        # wgmma, called by the kernel itself: the tracer and the collectives read its frame and its caller's.
        from .._mma import _collective

        launch = _ctx.LAUNCH
        if launch is None:
            raise RuntimeError(f"{kind} is a warpgroup instruction: it runs only inside a kernel on gpukernels' "
                               "simulator")
        if len(acc) < count:
            raise ValueError(f"{kind}: acc must hold the thread's {count} float32 accumulators; it has {len(acc)}")
        _check(kind, sa, a_off, sb, b_off)
        model = _async.model()
        if launch.cur.lane == 0:  # the tensor cores' shared reads, in flight until the wgmma_wait that covers them
            w4 = launch.cur.warp % 4
            ia, ib = _index(a_off, b_off, n, np.arange(16 * w4, 16 * w4 + 16))
            elems = [(x, getattr(x, "offset", 0) + idx.ravel()) for x, idx in (((sa, ia), (sb, ib)) if w4 == 0
                                                                               else ((sa, ia),))]
            hook, reads = launch.trace_hook, None
            if hook is not None:
                reads = [(x, e) for x, idx in elems for e in idx.tolist()]
                _async._hook_reads(hook, reads)
            model.wgmma_reads(launch.cur, _async._site_of(sys._getframe(1)), kind, elems, reads)
        st = model.state()
        prior = st.chained(acc)
        if not scale_d:
            c = np.zeros(count, dtype=np.float32)
        else:
            c = prior if prior is not None else np.array([acc[q] for q in range(count)], dtype=np.float32)
        d = _collective(kind, ((sa, int(a_off), sb, int(b_off)), launch.cur.warp % 4, c))
        st.wg_pending[id(acc)] = [acc, d, None]

    wgmma.__name__ = wgmma.__qualname__ = kind
    return wgmma


wgmma_e4m3_n64, wgmma_e4m3_n128, wgmma_e4m3_n256 = (_sim_wgmma_e4m3(n) for n in (64, 128, 256))


def wgmma_scale(acc, factor, n):
    """acc[q] *= factor for q < n / 2, float32 multiplies (the epilogue's scales)."""
    from .._mma import _not_waited

    _not_waited("wgmma_scale", acc)
    f = np.float32(factor)
    for q in range(int(n) // 2):
        acc[q] = np.float32(acc[q] * f)


from . import _async, _ctx  # noqa: E402
from .api import COLLECTIVES  # noqa: E402

for _n in (64, 128, 256):
    COLLECTIVES[f"wgmma_e4m3_n{_n}"] = _wgmma_all(_n)
_async.register(wgmma_e4m3_n64, wgmma_e4m3_n128, wgmma_e4m3_n256, proxy=True)
