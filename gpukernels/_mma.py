"""Tensor-core instructions for Numba kernels: ``mma.sync`` (a 16 x 8 x 16 matrix product by a whole warp),
``ldmatrix`` (a warp loads 8 x 8 tiles of shared memory straight into the registers ``mma.sync`` wants), and the
conversions that feed them -- none of which Numba emits by itself, so each is written as inline PTX.

Numba has no tensor-core API: it compiles Python arithmetic to scalar FMAs. A tensor core multiplies small matrices
held *collectively* by the 32 lanes of a warp: ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` takes a 16 x
16 float16 tile of A (8 halves per lane, in 4 registers), a 16 x 8 tile of B (4 halves per lane, 2 registers) and a
16 x 8 float32 tile of C (4 floats per lane) and returns D = A B + C in one instruction -- 4096 FLOPs where an FMA
does 2. Which lane holds which element is fixed by the PTX ISA ("Matrix Fragments for mma.m16n8k16"); the functions
``a_frag_coords``, ``b_frag_coords`` and ``c_frag_coords`` below are those tables, written once, and everything
here that needs the layout (the simulator's versions, the tests, a figure) reads them.

The instructions, each an *intrinsic* (a function that writes LLVM IR; here an ``InlineAsm`` call, as
``gpukernels._intrinsics.copy_async`` does, since libNVVM takes no LLVM intrinsics for them):

* ``pack_half2(lo, hi)`` -> one 32-bit word holding two float16 (``lo`` in the low half): the form in which A and B
  fragments travel. float16 arguments are used as they are; float32 ones are rounded (``cvt.rn.f16.f32``).
* ``mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)`` -> ``(d0, d1, d2, d3)``: ``mma.sync ... m16n8k16 ... f32.f16
  .f16.f32``. a0-a3 and b0-b1 are such words, c and d float32. Products are exact and summed in float32 (with
  truncation: below).
* ``mma_bf16`` and ``pack_bf16x2(lo, hi)``: the same with bfloat16 (float32's range, 8 bits of precision); the
  words are packed from float32 (``cvt.rn.bf16x2.f32``), as NumPy has no bfloat16 arrays.
* ``to_tf32(x)`` -> x rounded to TF32, 10 bits of mantissa (``cvt.rna.tf32.f32``: to nearest, ties away from zero),
  still a float32. ``mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)``: ``mma.sync ... m16n8k8 ... f32.tf32.tf32
  .f32``, a 16 x 8 x 8 product of float32 values that the tensor core reads as TF32 (round them with ``to_tf32``
  first: the PTX ISA does not say what it makes of the 13 low bits).
* ``ldmatrix_x1/x2/x4(smem, offset)`` and ``ldmatrix_x1/x2/x4_trans``: ``ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}
  .shared.b16``. The warp loads 1, 2 or 4 matrices of 8 x 8 halves from a float16 *shared* array; lane ``8 j + r``
  gives the address of row ``r`` of matrix ``j`` as a flat element offset into ``smem`` (lanes beyond 8 x count
  give none that is used) and every lane gets, of each matrix, the word at row ``lane / 4``, columns ``2 (lane % 4)``
  and ``+1`` -- exactly an mma fragment. ``.trans`` gives the transposed matrix's word instead: a row-major tile of B
  comes out as B's fragment. A row is 16 bytes and must start on a 16-byte boundary (declare the shared array with
  ``alignment=16``). One ``ldmatrix.x4`` replaces 4 x 32 two-byte shared loads and their packing. On a float32
  array (a row: 4 floats) each word is one float32, returned as such: lane ``lane`` gets element ``lane % 4`` of
  row ``lane / 4`` -- the TF32 A fragment's layout.
* ``copy_async16_f16(dst, d, src, s, nbytes)``: ``copy_async16`` of `gpukernels._intrinsics` for float16 arrays
  (8 halves): ``nbytes`` of 0-16 are read, the rest of the 16 bytes are zero. Commit and wait with that module's
  ``async_commit`` and ``async_wait`` (re-exported here).

All of them need sm_80 or newer (``mma ... m16n8k16`` and ``.tf32``, ``.bf16``, ``cp.async``); ``ldmatrix`` sm_75.

**Warp-collective.** ``mma`` and ``ldmatrix`` are executed by the warp as one: every lane must execute the same one
(``.sync.aligned``), and a lane that skipped it -- an early ``return`` past the edge of C, say -- leaves the others
with an undefined result on a GPU. In the simulator they are collectives like ``cuda.shfl_sync``: each lane hands
its part to the warp (`gpukernels.sim` gathers them, as it does a shuffle's values), the last to arrive computes the
instruction for all 32 from the layout tables, and a lane that is missing is a ``WarpMaskError`` that says which.
The simulated mma sums the products in float64 and rounds the sum once to float32 *toward zero*. The hardware's
adder tree is unpublished, but its results behave like truncation rather than rounding to nearest, and the bias
adds up along a chain of mmas into one accumulator: 3xTF32 (tensor_core step 6) summed in one chain measured a relative error of 4.7e-7 at
K = 64 on an H200, where this model gives 5.8e-7 and a round-to-nearest one 1.4e-7 (float32 SGEMM: 1.2e-7). So the
simulator shows the same accuracy problem, and the same fix, as the GPU. ``ldmatrix`` checks that its array is
shared memory and its rows are 16-byte aligned.
"""

from __future__ import annotations

import sys

import numpy as np

from ._intrinsics import _simulated, async_commit, async_wait  # noqa: F401  (re-exported: cp.async groups)

__all__ = ["a_frag_coords", "b_frag_coords", "c_frag_coords", "a_tf32_coords", "b_tf32_coords", "ldmatrix_coords",
           "pack_half2", "mma_f16", "pack_bf16x2", "mma_bf16", "to_tf32", "mma_tf32", "ldmatrix_x1",
           "ldmatrix_x2", "ldmatrix_x4", "ldmatrix_x1_trans", "ldmatrix_x2_trans", "ldmatrix_x4_trans",
           "copy_async16_f16", "async_commit", "async_wait", "split_tf32", "split_tf32_clamped", "TF32_MAX"]

# ----------------------------------------------------------------------------------------------------------
# The fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8", and "ldmatrix").
# groupID = lane >> 2 picks the row (of A and C) or the column (of B); threadID_in_group = lane % 4 the pair of
# columns (of A and C) or rows (of B). Each returns (row, column) of element i of the lane's fragment.
# ----------------------------------------------------------------------------------------------------------


def _lane_element(fn: str, lane: int, i: int, count: int) -> None:
    """The fragment tables' arguments: a lane of the warp and one of its ``count`` elements (a ValueError naming
    them, not a coordinate outside the tile)."""
    for name, value, top in (("lane", lane, 31), ("i", i, count - 1)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value <= top:
            raise ValueError(f"{fn}: {name} must be an int from 0 to {top}; got {value!r}")


def a_frag_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k16, A (16 x 16, float16/bfloat16): element ``a_i``, i = 0..7, two per register (a0 a1 | a2 a3 | ...)."""
    _lane_element("a_frag_coords", lane, i, 8)
    g, t = lane >> 2, lane % 4
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def b_frag_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k16, B (16 x 8, k x n): element ``b_i``, i = 0..3, two per register (b0 b1 | b2 b3)."""
    _lane_element("b_frag_coords", lane, i, 4)
    g, t = lane >> 2, lane % 4
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def c_frag_coords(lane: int, i: int) -> tuple[int, int]:
    """C and D (16 x 8, float32) of m16n8k16 and m16n8k8: element ``c_i``, i = 0..3."""
    _lane_element("c_frag_coords", lane, i, 4)
    g, t = lane >> 2, lane % 4
    return g + 8 * (i >> 1), 2 * t + (i & 1)


def a_tf32_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k8 with TF32, A (16 x 8): element ``a_i``, i = 0..3, one per register."""
    _lane_element("a_tf32_coords", lane, i, 4)
    g, t = lane >> 2, lane % 4
    return g + 8 * (i & 1), t + 4 * (i >> 1)


def b_tf32_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k8 with TF32, B (8 x 8, k x n): element ``b_i``, i = 0..1."""
    _lane_element("b_tf32_coords", lane, i, 2)
    g, t = lane >> 2, lane % 4
    return t + 4 * i, g


def ldmatrix_coords(lane: int, i: int, trans: bool = False) -> tuple[int, int]:
    """(row, column) in an 8 x 8 matrix of the half ``i`` (0: low, 1: high) of the word ``lane`` receives from it
    (lane ``8 j + r`` gave the address of row ``r`` of matrix ``j``)."""
    _lane_element("ldmatrix_coords", lane, i, 2)
    row, col = lane >> 2, 2 * (lane % 4) + i
    return (col, row) if trans else (row, col)


def wgmma_d_coords(thread: int, i: int) -> tuple[int, int]:
    """wgmma m64nNk16, D (64 x N, float32) held by a warpgroup's 128 threads: (row, column) of accumulator ``i``
    (0 .. N/2 - 1) of ``thread`` (0..127). Warp w = thread // 32 holds rows 16 w .. 16 w + 15, laid out as
    mma.m16n8's C fragment (`c_frag_coords`) repeated for every 8 columns: i = 4 j + q is element q of block j."""
    warp, lane = thread >> 5, thread & 31
    r, c = c_frag_coords(lane, i & 3)
    return 16 * warp + r, 8 * (i >> 2) + c


def swizzle128(byte: int) -> int:
    """The 128-byte swizzle of a shared-memory byte address: its 16-byte chunk (bits 4-6) XOR its 128-byte row
    within each 1024-byte block (bits 7-9) -- chunk c of row r lands at chunk c ^ (r % 8)."""
    return byte ^ (((byte >> 7) & 7) << 4)


def k_major_byte(start: int, r: int, k: int, sbo: int = 1024, size: int = 2) -> int:
    """Where a wgmma descriptor with start address ``start``, 128-byte swizzle and stride byte offset ``sbo`` finds
    element (r, k) of a *K-major* operand of ``size``-byte elements (A: row r of M, k of K; for TF32 B too, row r of
    N): rows of 128 bytes (64 halves, 32 floats), 8-row groups ``sbo`` apart."""
    return swizzle128(start + (r >> 3) * sbo + (r & 7) * 128 + size * k)


def mn_major_byte(start: int, k: int, n: int, lbo: int, sbo: int = 1024) -> int:
    """Where a descriptor (128-byte swizzle) finds element (k, n) of an *MN-major* float16 operand (B read with
    ``trans-b``: k row k holds 64 consecutive n): 64-column atoms ``lbo`` bytes apart, 8-row groups of k ``sbo``."""
    return swizzle128(start + (n >> 6) * lbo + (k >> 3) * sbo + (k & 7) * 128 + 2 * (n & 63))


def _index(coords, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The table as two (32, count) arrays of rows and columns, for NumPy's fancy indexing."""
    rc = np.array([[coords(lane, i) for i in range(count)] for lane in range(32)])
    return rc[..., 0], rc[..., 1]


_SWIZZLE_128B = 1  # the descriptor's swizzle mode field (bits 62-63): 1 = 128-byte swizzle

_A, _B, _C = _index(a_frag_coords, 8), _index(b_frag_coords, 4), _index(c_frag_coords, 4)
_A32, _B32 = _index(a_tf32_coords, 4), _index(b_tf32_coords, 2)
_LD = {trans: _index(lambda lane, i: ldmatrix_coords(lane, i, trans), 2) for trans in (False, True)}


# ----------------------------------------------------------------------------------------------------------
# The simulator's versions
# ----------------------------------------------------------------------------------------------------------

def _bf16_bits(x) -> int:
    """float32 -> the 16 bits of the nearest bfloat16 (ties to even), as cvt.rn.bf16 rounds; NaN stays NaN."""
    bits = int(np.float32(x).view(np.uint32))
    if bits & 0x7FFFFFFF > 0x7F800000:
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def _tf32(x) -> np.float32:
    """cvt.rna.tf32.f32: keep 10 mantissa bits, rounding to nearest with ties away from zero (add half of the last
    kept bit's weight to the magnitude, then cut); infinities and NaN pass unchanged."""
    bits = int(np.float32(x).view(np.uint32))
    if bits & 0x7F800000 != 0x7F800000:
        bits = (bits + 0x1000) & 0xFFFFE000
    return np.uint32(bits).view(np.float32)


def _mma_product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A B + C with exact products summed in float64, rounded once to float32 toward zero (the tensor core's
    adder truncates; see the module docstring)."""
    exact = a.astype(np.float64) @ b.astype(np.float64) + c
    d = exact.astype(np.float32)
    away = np.abs(d.astype(np.float64)) > np.abs(exact)  # rounded up in magnitude: one step back toward zero
    d[away] = np.nextafter(d[away], np.float32(0))
    return d


def _mma_f16_all(vals: dict, bf16: bool = False) -> dict:
    # Each lane's value: ((a0..a3, b0, b1) as 32-bit words, (c0..c3)). A word's low half is element 2i, high 2i+1.
    words = np.array([vals[lane][0] for lane in range(32)], dtype=np.uint32)
    if not bf16:
        halves = words.view(np.float16).astype(np.float64)  # (32, 12): a0..a7, b0..b3
    else:  # bfloat16: the high 16 bits of a float32
        h = words.view(np.uint16).astype(np.uint32) << 16
        halves = h.view(np.float32).astype(np.float64)
    a = np.zeros((16, 16))
    a[_A] = halves[:, :8]
    b = np.zeros((16, 8))
    b[_B] = halves[:, 8:]
    c = np.zeros((16, 8))
    c[_C] = np.array([vals[lane][1] for lane in range(32)], dtype=np.float32)
    d = _mma_product(a, b, c)[_C]  # (32, 4): each lane's d0..d3
    return {lane: tuple(d[lane]) for lane in range(32)}


def _mma_tf32_all(vals: dict) -> dict:
    # Each lane's value: (a0..a3, b0, b1, c0..c3) as float32; the tensor core reads the top 19 bits of a and b.
    x = np.array([vals[lane] for lane in range(32)], dtype=np.float32)
    ab = (x[:, :6].view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    a = np.zeros((16, 8))
    a[_A32] = ab[:, :4]
    b = np.zeros((8, 8))
    b[_B32] = ab[:, 4:6]
    c = np.zeros((16, 8))
    c[_C] = x[:, 6:]
    d = _mma_product(a, b, c)[_C]
    return {lane: tuple(d[lane]) for lane in range(32)}


def _ldmatrix_all(count: int, trans: bool):
    rows_idx, cols_idx = _LD[trans]

    def collective(vals: dict) -> dict:
        # vals[8 j + r]: row r of matrix j, 8 halves as uint16 (None from lanes whose address is not used)
        out = np.empty((32, count), dtype=np.uint32)
        for j in range(count):
            m = np.array([vals[8 * j + r] for r in range(8)], dtype=np.uint32)  # (8, 8)
            h = m[rows_idx, cols_idx]  # (32, 2): the low and high half each lane receives
            out[:, j] = h[:, 0] | (h[:, 1] << np.uint32(16))
        if count == 1:
            return {lane: int(out[lane, 0]) for lane in range(32)}
        return {lane: tuple(int(w) for w in out[lane]) for lane in range(32)}

    return collective


def _word(name: str, arg: str, v) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= v < 1 << 32:
        raise TypeError(f"{name}: {arg} must be a 32-bit word holding two 16-bit values (from pack_half2, "
                        f"pack_bf16x2 or ldmatrix), got {v!r} of type {type(v).__name__}")
    return int(v)


def _collective(kind: str, value):
    """Hand this lane's part of a warp-collective instruction to the simulator; return this lane's result. The
    frame two up is the kernel code that called the instruction (the site errors name)."""
    launch = _ctx.LAUNCH
    if launch is None:
        raise RuntimeError(f"{kind} is a warp-collective instruction: it runs only inside a kernel launched on "
                           "gpukernels' simulator (import gpukernels with GPUKERNELS_DEVICE=sim)")
    return launch.warp_op(sys._getframe(2), kind, 0xFFFFFFFF, value, 0, 32)


def _half_bits(x) -> int:
    # float16 round to nearest even (NumPy's cast, as cvt.rn.f16.f32); past the largest half, infinity without
    # NumPy's overflow warning
    if x.__class__ is not np.float16 and not -65520.0 < float(x) < 65520.0 and x == x:
        return 0x7C00 if x > 0 else 0xFC00
    return int(np.float16(x).view(np.uint16))


def _sim_pack_half2(lo, hi) -> int:
    return _half_bits(lo) | _half_bits(hi) << 16


def _sim_pack_bf16x2(lo, hi) -> int:
    return _bf16_bits(lo) | _bf16_bits(hi) << 16


def _sim_mma(kind):
    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        words = (a0, a1, a2, a3, b0, b1)
        for name, v in zip(("a0", "a1", "a2", "a3", "b0", "b1"), words):
            if v.__class__ is not int or not 0 <= v <= 0xFFFFFFFF:
                _word(kind, name, v)
        return _collective(kind, (words, (c0, c1, c2, c3)))

    mma.__name__ = mma.__qualname__ = kind
    return mma


def _sim_mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return _collective("mma_tf32", (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))


def _sim_ldmatrix(count: int, trans: bool):
    kind = f"ldmatrix_x{count}" + ("_trans" if trans else "")

    def ldmatrix(smem, offset):
        launch = _ctx.LAUNCH
        lane = launch.cur.lane if launch is not None else 0
        row = None
        size = np.dtype(smem.dtype).itemsize
        if lane < 8 * count:  # this lane's address is used: read its row of 16 bytes (bounds-checked, traced)
            if getattr(smem, "space", "shared") != "shared":
                raise TypeError(f"{kind} reads shared memory; {smem!r} is in {smem.space} memory (stage the tile "
                                "in a cuda.shared.array first)")
            if size not in (2, 4):
                raise TypeError(f"{kind} loads 16- or 32-bit elements; {smem!r} has dtype {smem.dtype}")
            offset, per_row = int(offset), 16 // size
            if offset % per_row:
                raise ValueError(f"{kind}: lane {lane} gives row address {offset} (elements), which is not on a "
                                 f"16-byte boundary (a multiple of {per_row} elements): each row of an 8 x 8 "
                                 "matrix of halves is one 16-byte load")
            flat = smem.reshape(smem.size)
            row = np.empty(per_row, dtype=smem.dtype)
            for q in range(per_row):  # (a loop, not a comprehension: the tracer reads this frame's name)
                row[q] = flat[offset + q]
            row = row.view(np.uint16)
        words = _collective(kind, row)
        if np.dtype(smem.dtype) == np.float32:  # a word is then one float32 of the row: hand it out as one
            return (np.uint32(words).view(np.float32) if count == 1
                    else tuple(np.uint32(w).view(np.float32) for w in words))
        return words

    ldmatrix.__name__ = ldmatrix.__qualname__ = kind
    return ldmatrix


def _raw(x) -> np.ndarray:
    return np.asarray(getattr(x, "_a", x)).reshape(-1)


def _swizzle128_np(byte: np.ndarray) -> np.ndarray:
    return byte ^ (((byte >> 7) & 7) << 4)


# The two operand formats of the simulated wgmma: float16 (m64nNk16, B N-major read with trans-b) and TF32
# (m64nNk8: float32 elements, both operands K-major, as the PTX ISA requires for .tf32)
_WG_FORMATS = {"f16": (np.float16, 16, "float16"), "tf32": (np.float32, 8, "float32")}


def _wgmma_check(kind: str, fmt: str, sa, a_off, sb, b_off, b_lbo) -> None:
    dtype, kstep, name_t = _WG_FORMATS[fmt]
    for name, x in (("sa", sa), ("sb", sb)):
        if getattr(x, "space", "shared") != "shared":
            raise TypeError(f"{kind}: {name} must be a shared-memory {name_t} array; {x!r} is in {x.space} memory")
        if np.dtype(x.dtype) != dtype:
            raise TypeError(f"{kind}: {name} must hold {name_t}; got {x.dtype}")
    for name, off in (("a_off", a_off), ("b_off", b_off)):
        if int(off) % kstep:
            raise ValueError(f"{kind}: {name} = {off} elements is not on a 32-byte boundary (a multiple of {kstep} "
                             f"{'halves' if fmt == 'f16' else 'floats'}): a k{kstep} slice of a 128-byte swizzled row "
                             "is 32 bytes")
    if fmt == "f16" and (int(b_lbo) % 16 or not 0 < int(b_lbo) < 1 << 18):
        raise ValueError(f"{kind}: b_lbo must be a positive multiple of 16 bytes below 256 KB; got {b_lbo}")


def _operand_index(fmt: str, n: int, a_off, b_off, b_lbo, rows) -> tuple[np.ndarray, np.ndarray]:
    """Flat element indices of A's ``rows`` (k along the columns) and of B (k x n) where the descriptors find them:
    `k_major_byte` and `mn_major_byte`, vectorized."""
    dtype, kstep, _ = _WG_FORMATS[fmt]
    size = np.dtype(dtype).itemsize
    r, k = np.asarray(rows)[:, None], np.arange(kstep)[None, :]
    ia = _swizzle128_np(size * int(a_off) + (r >> 3) * 1024 + (r & 7) * 128 + size * k) // size
    kk, c = np.arange(kstep)[:, None], np.arange(n)[None, :]
    if fmt == "tf32":  # K-major B: row c of N holds its k's
        ib = _swizzle128_np(size * int(b_off) + (c >> 3) * 1024 + (c & 7) * 128 + size * kk) // size
    else:  # N-major B (trans-b): 64-column atoms b_lbo bytes apart
        ib = _swizzle128_np(size * int(b_off) + (c >> 6) * int(b_lbo) + (kk >> 3) * 1024 + (kk & 7) * 128
                            + size * (c & 63)) // size
    return ia, ib


def _wgmma_operands(kind: str, fmt: str, n: int, sa, a_off, sb, b_off, b_lbo) -> tuple[np.ndarray, np.ndarray]:
    """The warpgroup's A (64 x k) and B (k x n) as the descriptors find them, in float64 (TF32: the top 19 bits of
    each float32, all the tensor core reads)."""
    ra, rb = _raw(sa), _raw(sb)
    ia, ib = _operand_index(fmt, n, a_off, b_off, b_lbo, np.arange(64))
    for name, idx, raw in (("A", ia, ra), ("B", ib, rb)):
        if idx.max() >= raw.size:
            raise IndexError(f"{kind}: the {name} tile reaches element {int(idx.max())} of a shared array of "
                             f"{raw.size}: the descriptor points past its end")
    a, b = ra[ia], rb[ib]
    if fmt == "tf32":
        a, b = ((x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b))
    return a.astype(np.float64), b.astype(np.float64)


def _operand_elements(fmt, n, sa, a_off, sb, b_off, b_lbo, w4) -> list:
    """[(array, flat elements)] a warp's part of a wgmma reads from shared memory: its 16 rows of A, and all of B for
    the warpgroup's first warp (B is read once for the 4 warps: one reader is enough for the race check)."""
    ia, ib = _operand_index(fmt, n, a_off, b_off, b_lbo, np.arange(16 * w4, 16 * w4 + 16))
    return [(x, getattr(x, "offset", 0) // getattr(x, "isz", np.dtype(x.dtype).itemsize) + idx.ravel())
            for x, idx in (((sa, ia), (sb, ib)) if w4 == 0 else ((sa, ia),))]


def _wgmma_kind(fmt: str, n: int) -> str:
    return f"wgmma_n{n}" if fmt == "f16" else f"wgmma_{fmt}_n{n}"


def _wgmma_all(n: int, fmt: str = "f16"):
    rows, cols = _index(c_frag_coords, 4)
    blocks = n // 8
    kind = _wgmma_kind(fmt, n)

    def collective(vals: dict) -> dict:
        # vals[lane]: ((sa, a_off, sb, b_off, b_lbo), warp of the warpgroup, this lane's n / 2 accumulators); the
        # operands are the warpgroup's, the same for every lane (the instruction is .aligned)
        desc, w4 = vals[0][0], vals[0][1]
        if any(vals[lane][0][1:] != desc[1:] or vals[lane][0][0] is not desc[0] or vals[lane][0][2] is not desc[2]
               for lane in range(32)):
            raise ValueError(f"{kind}: the lanes of a warp gave different operands (arrays or offsets); a wgmma's "
                             "descriptors are the warpgroup's, the same in every thread")
        a, b = _wgmma_operands(kind, fmt, n, *desc)
        c = np.zeros((16, n))
        accs = np.array([vals[lane][2] for lane in range(32)], dtype=np.float32).reshape(32, blocks, 4)
        for j in range(blocks):
            c[rows, cols + 8 * j] = accs[:, j, :]
        d = _mma_product(a[16 * w4:16 * w4 + 16], b, c)
        out = np.stack([d[rows, cols + 8 * j] for j in range(blocks)], axis=1)  # (32, blocks, 4)
        return {lane: out[lane].reshape(-1) for lane in range(32)}

    return collective


def _sim_wgmma(n: int, fmt: str = "f16"):
    kind = _wgmma_kind(fmt, n)
    count = n // 2

    def wgmma(acc, sa, a_off, sb, b_off, last):
        # last: b_lbo (float16: B's atoms are N-major) or accumulate (TF32: 0 makes D = A B). One function, named
        # wgmma, called by the kernel itself: the tracer and the collectives read its frame and its caller's.
        b_lbo, accumulate = (last, True) if fmt == "f16" else (0, last)
        launch = _ctx.LAUNCH
        if launch is None:
            raise RuntimeError(f"{kind} is a warpgroup instruction: it runs only inside a kernel on gpukernels' "
                               "simulator")
        if len(acc) < count:
            raise ValueError(f"{kind}: acc must hold the thread's {count} float32 accumulators; it has {len(acc)}")
        _wgmma_check(kind, fmt, sa, a_off, sb, b_off, b_lbo)
        # The tensor cores' shared reads, as the warp's lane 0's: in flight from here to the wgmma_wait that covers
        # them (the asynchronous model checks they have landed and are fenced, and that nothing overwrites them
        # before). Traced, the reads are also accesses at the wgmma and again at that wgmma_wait.
        model = _async.model()
        if launch.cur.lane == 0:
            elems = _operand_elements(fmt, n, sa, a_off, sb, b_off, b_lbo, launch.cur.warp % 4)
            hook, reads = launch.trace_hook, None
            if hook is not None:
                reads = [(x, e) for x, idx in elems for e in idx.tolist()]
                _async._hook_reads(hook, reads)
            model.wgmma_reads(launch.cur, _async._site_of(sys._getframe(1)), kind, elems, reads)
        st = model.state()
        prior = st.chained(acc)
        if not accumulate:  # scale-d = 0: D = A B, whatever the accumulators held
            c = np.zeros(count, dtype=np.float32)
        else:
            c = prior if prior is not None else np.array([acc[q] for q in range(count)], dtype=np.float32)
        d = _collective(kind, ((sa, int(a_off), sb, int(b_off), int(b_lbo)), launch.cur.warp % 4, c))
        st.wg_pending[id(acc)] = [acc, d, None]

    wgmma.__name__ = wgmma.__qualname__ = kind
    return wgmma


def _sim_wgmma_zero(acc, n):
    for q in range(int(n) // 2):
        acc[q] = np.float32(0)


def _not_waited(name: str, acc) -> None:
    if _async.model().state().chained(acc) is not None:
        raise RuntimeError(f"{name} reads accumulators whose wgmma has not been waited for (wgmma_commit, then "
                           "wgmma_wait(0)): on a GPU they may not hold the products yet")


def _sim_wgmma_add(acc, part, n):
    _not_waited("wgmma_add", part)
    for q in range(int(n) // 2):
        acc[q] = np.float32(acc[q] + part[q])


def _sim_wgmma_store(c, acc, n, row, col):
    _not_waited("wgmma_store", acc)
    m_dim, n_dim = c.shape
    for q in range(int(n) // 2):
        r, k = row + 8 * ((q >> 1) & 1), col + 8 * (q >> 2) + (q & 1)
        if r < m_dim and k < n_dim:
            c[r, k] = acc[q]


def _sim_wgmma_store_add(c, acc, n, row, col):
    _not_waited("wgmma_store_add", acc)
    m_dim, n_dim = c.shape
    for q in range(int(n) // 2):
        r, k = row + 8 * ((q >> 1) & 1), col + 8 * (q >> 2) + (q & 1)
        if r < m_dim and k < n_dim:
            _sim_atomic_add(c, (r, k), acc[q])


if _simulated():
    import sys

    from .sim import _async, _ctx
    from .sim.api import COLLECTIVES, SimAtomic

    COLLECTIVES.update({"mma_f16": _mma_f16_all, "mma_bf16": lambda vals: _mma_f16_all(vals, bf16=True),
                        "mma_tf32": _mma_tf32_all})
    for _n in (1, 2, 4):
        for _t in (False, True):
            COLLECTIVES[f"ldmatrix_x{_n}" + ("_trans" if _t else "")] = _ldmatrix_all(_n, _t)

    pack_half2 = _sim_pack_half2
    pack_bf16x2 = _sim_pack_bf16x2
    mma_f16 = _sim_mma("mma_f16")
    mma_bf16 = _sim_mma("mma_bf16")
    mma_tf32 = _sim_mma_tf32
    to_tf32 = _tf32
    ldmatrix_x1, ldmatrix_x2, ldmatrix_x4 = (_sim_ldmatrix(n, False) for n in (1, 2, 4))
    ldmatrix_x1_trans, ldmatrix_x2_trans, ldmatrix_x4_trans = (_sim_ldmatrix(n, True) for n in (1, 2, 4))
    copy_async16_f16 = _async.copy_async16_f16
    for _n in (64, 128, 256):
        for _fmt in _WG_FORMATS:
            COLLECTIVES[_wgmma_kind(_fmt, _n)] = _wgmma_all(_n, _fmt)
    wgmma_n64, wgmma_n128, wgmma_n256 = (_sim_wgmma(n) for n in (64, 128, 256))
    wgmma_tf32_n64, wgmma_tf32_n128, wgmma_tf32_n256 = (_sim_wgmma(n, "tf32") for n in (64, 128, 256))
    _async.register(wgmma_n64, wgmma_n128, wgmma_n256, wgmma_tf32_n64, wgmma_tf32_n128, wgmma_tf32_n256, proxy=True)
    fence_proxy_async, wgmma_fence = _async.fence_proxy_async, _async.wgmma_fence
    wgmma_commit, wgmma_wait = _async.wgmma_commit, _async._sim_wgmma_wait
    wgmma_zero, wgmma_store, wgmma_add = _sim_wgmma_zero, _sim_wgmma_store, _sim_wgmma_add
    _sim_atomic_add = SimAtomic().add  # as cuda.atomic.add in a kernel: indivisible, and traced as an atomic
    wgmma_store_add = _sim_wgmma_store_add

    def align1024(smem):
        return 0  # the simulator's shared arrays start on a 1024-byte boundary (as the swizzle's rows count)

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    from ._intrinsics import _asm, _cp_async

    _I16, _I32, _F32 = ir.IntType(16), ir.IntType(32), ir.FloatType()

    def _call(builder, ret, text, constraints, args, side_effect=False):
        # An inline-PTX call. Warp-collective ones are marked convergent, so that LLVM never moves one into a
        # branch that some lanes do not take.
        asm = ir.InlineAsm(ir.FunctionType(ret, [v.type for v in args]), text, constraints, side_effect=side_effect)
        return builder.call(asm, args, attrs=("convergent",))

    def _tuple(context, builder, sig, struct, n):
        return context.make_tuple(builder, sig.return_type, [builder.extract_value(struct, q) for q in range(n)])

    @intrinsic
    def pack_half2(typingctx, lo, hi):
        if not all(v in (types.float16, types.float32, types.float64) for v in (lo, hi)):
            return None
        sig = types.uint32(lo, hi)

        def codegen(context, builder, sig, args):
            bits = []
            for v, t in zip(args, sig.args):
                if t == types.float16:  # already a half: its 16 bits as they are
                    bits.append(builder.bitcast(v, _I16))
                else:
                    v = context.cast(builder, v, t, types.float32)
                    asm = ir.InlineAsm(ir.FunctionType(_I16, [_F32]), "cvt.rn.f16.f32 $0, $1;", "=h,f")
                    bits.append(builder.call(asm, [v]))
            lo_w, hi_w = (builder.zext(b, _I32) for b in bits)  # NVVM makes this one mov.b32 {lo, hi}
            return builder.or_(lo_w, builder.shl(hi_w, ir.Constant(_I32, 16)))

        return sig, codegen

    @intrinsic
    def pack_bf16x2(typingctx, lo, hi):
        if not all(isinstance(v, types.Float) for v in (lo, hi)):
            return None
        sig = types.uint32(lo, hi)

        def codegen(context, builder, sig, args):
            lo_f, hi_f = (context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args))
            # cvt.rn.bf16x2.f32 d, a, b puts a in the high half and b in the low one
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32, _F32]), "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f")
            return builder.call(asm, [hi_f, lo_f])

        return sig, codegen

    def _mma_16816(kind, ab_type):
        text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{ab_type}.{ab_type}.f32 "
                "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")

        def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            if not (all(isinstance(v, types.Integer) for v in (a0, a1, a2, a3, b0, b1))
                    and all(isinstance(v, types.Float) for v in (c0, c1, c2, c3))):
                return None
            sig = types.UniTuple(types.float32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

            def codegen(context, builder, sig, args):
                words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[:6], sig.args[:6])]
                accs = [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], sig.args[6:])]
                d = _call(builder, ir.LiteralStructType([_F32] * 4), text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
                          words + accs)
                return _tuple(context, builder, sig, d, 4)

            return sig, codegen

        typer.__name__ = kind
        return intrinsic(typer)

    mma_f16 = _mma_16816("mma_f16", "f16")
    mma_bf16 = _mma_16816("mma_bf16", "bf16")

    @intrinsic
    def to_tf32(typingctx, x):
        if not isinstance(x, types.Float):
            return None
        sig = types.float32(x)

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], sig.args[0], types.float32)
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32]), "cvt.rna.tf32.f32 $0, $1;", "=r,f")
            return builder.bitcast(builder.call(asm, [v]), _F32)

        return sig, codegen

    @intrinsic
    def mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        if not all(isinstance(v, types.Float) for v in (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)):
            return None
        sig = types.UniTuple(types.float32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

        def codegen(context, builder, sig, args):
            vals = [context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args)]
            words = [builder.bitcast(v, _I32) for v in vals[:6]]  # TF32 operands are .b32 registers
            d = _call(builder, ir.LiteralStructType([_F32] * 4),
                      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                      "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                      "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", words + vals[6:])
            return _tuple(context, builder, sig, d, 4)

        return sig, codegen

    def _shared_address(context, builder, ary_t, ary_v, off_v, off_t):
        # &ary.flat[off] as a 32-bit shared-window address (no bounds check, no wraparound)
        data = context.make_array(ary_t)(context, builder, value=ary_v).data
        ptr = builder.gep(data, [context.cast(builder, off_v, off_t, types.intp)])
        return builder.ptrtoint(builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, 3)), _I32)

    # 16-bit elements (the words hold two), or 32-bit ones (a word is one element: float32 ones come back as float32)
    _LDMATRIX_TYPES = (types.float16, types.int16, types.uint16, types.float32, types.int32, types.uint32)

    def _ldmatrix(count: int, trans: bool):
        regs = ",".join(f"${q}" for q in range(count))
        text = (f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 "
                f"{{{regs}}}, [${count}];")
        constraints = ",".join(["=r"] * count + ["r", "~{memory}"])

        def typer(typingctx, smem, offset):
            if not (isinstance(smem, types.Array) and smem.dtype in _LDMATRIX_TYPES and smem.layout == "C"
                    and isinstance(offset, types.Integer)):
                return None
            word = types.float32 if smem.dtype == types.float32 else types.uint32
            sig = (word if count == 1 else types.UniTuple(word, count))(smem, offset)

            def codegen(context, builder, sig, args):
                addr = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
                # side_effect: it reads shared memory, so it must stay between the barriers around it
                if count == 1:
                    out = [_call(builder, _I32, text, constraints, [addr], side_effect=True)]
                else:
                    struct = _call(builder, ir.LiteralStructType([_I32] * count), text, constraints, [addr],
                                   side_effect=True)
                    out = [builder.extract_value(struct, q) for q in range(count)]
                if word == types.float32:
                    out = [builder.bitcast(v, _F32) for v in out]
                return out[0] if count == 1 else context.make_tuple(builder, sig.return_type, out)

            return sig, codegen

        typer.__name__ = f"ldmatrix_x{count}" + ("_trans" if trans else "")
        return intrinsic(typer)

    ldmatrix_x1, ldmatrix_x2, ldmatrix_x4 = (_ldmatrix(n, False) for n in (1, 2, 4))
    ldmatrix_x1_trans, ldmatrix_x2_trans, ldmatrix_x4_trans = (_ldmatrix(n, True) for n in (1, 2, 4))

    # cp.async.cg (through L2 only) of 16 bytes (8 halves), of which the first nbytes are read and the rest
    # zero-filled: the matmul lesson's copy_async16, typed for float16 arrays
    copy_async16_f16 = _cp_async(16, types.float16, "copy_async16_f16")

    # ------------------------------------------------------------------------------------------------------
    # wgmma (sm_90a): a warpgroup's asynchronous product, both operands read from shared memory by descriptor
    # ------------------------------------------------------------------------------------------------------
    _I64 = ir.IntType(64)

    def _descriptor(builder, addr, lbo: int, sbo: int):
        # The 64-bit shared-memory matrix descriptor (`descriptor` below, in IR): the start address and the two
        # byte offsets in units of 16 bytes, 128-byte swizzle. lbo may be an IR value (bytes) or an int.
        start = builder.zext(builder.lshr(builder.and_(addr, ir.Constant(_I32, 0x3FFFF)), ir.Constant(_I32, 4)),
                             _I64)
        if isinstance(lbo, int):
            lbo_field = ir.Constant(_I64, (lbo >> 4) << 16)
        else:
            lbo_field = builder.shl(builder.and_(builder.lshr(builder.zext(lbo, _I64), ir.Constant(_I64, 4)),
                                                 ir.Constant(_I64, 0x3FFF)), ir.Constant(_I64, 16))
        fixed = ir.Constant(_I64, ((sbo >> 4) << 32) | (_SWIZZLE_128B << 62))
        return builder.or_(builder.or_(start, lbo_field), fixed)

    def _wgmma(n: int, fmt: str = "f16"):
        # float16 (m64nNk16): B read N-major (trans-b = 1), its atoms `b_lbo` bytes apart, D accumulated (scale-d 1).
        # TF32 (m64nNk8): float32 tiles (the tensor core reads their top 19 bits), both K-major (the PTX ISA allows
        # no transpose for .tf32), and the last argument is scale-d, a run-time flag: 0 makes D = A B, 1 D = A B + D
        count = n // 2  # float32 accumulators per thread: 64 x n over 128 threads
        regs = ",".join(f"${q}" for q in range(count))
        shape, tail, elem = ((f"m64n{n}k16.f32.f16.f16", "p, 1, 1, 0, 1;", types.float16) if fmt == "f16" else
                             (f"m64n{n}k8.f32.tf32.tf32", "p, 1, 1;", types.float32))
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${count + 2}, 0; "
                f"wgmma.mma_async.sync.aligned.{shape} {{{regs}}}, ${count}, ${count + 1}, {tail} }}")
        constraints = ",".join(["=f"] * count + ["l", "l", "r"] + [str(q) for q in range(count)] + ["~{memory}"])

        def typer(typingctx, acc, sa, a_off, sb, b_off, last):
            if not (isinstance(acc, types.Array) and acc.dtype == types.float32 and acc.layout == "C"
                    and all(isinstance(x, types.Array) and x.dtype == elem and x.layout == "C" for x in (sa, sb))
                    and all(isinstance(v, (types.Integer, types.Boolean)) for v in (a_off, b_off, last))):
                return None
            sig = types.void(acc, sa, a_off, sb, b_off, last)

            def codegen(context, builder, sig, args):
                ptrs = _acc_pointers(context, builder, sig.args[0], args[0], count)
                accs = [builder.load(p) for p in ptrs]
                a_addr = _shared_address(context, builder, sig.args[1], args[1], args[2], sig.args[2])
                b_addr = _shared_address(context, builder, sig.args[3], args[3], args[4], sig.args[4])
                last = context.cast(builder, args[5], sig.args[5], types.int32)
                da = _descriptor(builder, a_addr, 16, 1024)
                if fmt == "f16":  # N-major B: last is the byte offset between its 64-column atoms; accumulate
                    db, scale = _descriptor(builder, b_addr, last, 1024), ir.Constant(_I32, 1)
                else:  # K-major B, like A: 8-row groups 1 KB apart; last is scale-d
                    db, scale = _descriptor(builder, b_addr, 16, 1024), last
                out = _call(builder, ir.LiteralStructType([_F32] * count), text, constraints,
                            [da, db, scale] + accs, side_effect=True)
                for q in range(count):
                    builder.store(builder.extract_value(out, q), ptrs[q])
                return context.get_dummy_value()

            return sig, codegen

        typer.__name__ = _wgmma_kind(fmt, n)
        return intrinsic(typer)

    wgmma_n64, wgmma_n128, wgmma_n256 = (_wgmma(n) for n in (64, 128, 256))

    def _acc_pointers(context, builder, acc_t, acc_v, count):
        data = context.make_array(acc_t)(context, builder, value=acc_v).data
        return [builder.gep(data, [ir.Constant(ir.IntType(64), q)]) for q in range(count)]

    @intrinsic
    def wgmma_zero(typingctx, acc, n):
        # acc[0 : n / 2] = 0, each element by a constant index (so the array stays in registers)
        if not (isinstance(acc, types.Array) and acc.dtype == types.float32 and isinstance(n, types.IntegerLiteral)):
            return None
        count = n.literal_value // 2

        def codegen(context, builder, sig, args):
            for p in _acc_pointers(context, builder, sig.args[0], args[0], count):
                builder.store(ir.Constant(_F32, 0.0), p)
            return context.get_dummy_value()

        return types.void(acc, n), codegen

    wgmma_tf32_n64, wgmma_tf32_n128, wgmma_tf32_n256 = (_wgmma(n, "tf32") for n in (64, 128, 256))

    @intrinsic
    def wgmma_add(typingctx, acc, part, n):
        # acc[q] += part[q] for q < n / 2, each by a constant index (both arrays stay in registers): float32 adds,
        # which round to nearest, of a partial sum the tensor cores made
        if not (all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (acc, part))
                and isinstance(n, types.IntegerLiteral)):
            return None
        count = n.literal_value // 2

        def codegen(context, builder, sig, args):
            to = _acc_pointers(context, builder, sig.args[0], args[0], count)
            frm = _acc_pointers(context, builder, sig.args[1], args[1], count)
            for p, q in zip(to, frm):
                builder.store(builder.fadd(builder.load(p), builder.load(q)), p)
            return context.get_dummy_value()

        return types.void(acc, part, n), codegen

    def _d_store_types(c, acc, n, row, col) -> bool:
        # the arguments of wgmma_store and wgmma_store_add: C (float32, 2-D, C order), the accumulators, N, and the
        # thread's first row and column of C
        return (isinstance(c, types.Array) and c.ndim == 2 and c.dtype == types.float32 and c.layout == "C"
                and isinstance(acc, types.Array) and acc.dtype == types.float32
                and isinstance(n, types.IntegerLiteral) and isinstance(row, types.Integer)
                and isinstance(col, types.Integer))

    def _d_store_values(context, builder, sig, args, count):
        # (C's array struct, its rows, its columns, the row, the column, pointers to the accumulators)
        cary = context.make_array(sig.args[0])(context, builder, value=args[0])
        m_dim, n_dim = (builder.extract_value(cary.shape, q) for q in range(2))
        r = context.cast(builder, args[3], sig.args[3], types.intp)
        c0 = context.cast(builder, args[4], sig.args[4], types.intp)
        return cary, m_dim, n_dim, r, c0, _acc_pointers(context, builder, sig.args[1], args[1], count)

    @intrinsic
    def wgmma_store(typingctx, c, acc, n, row, col):
        # c[row + 8 (i // 2), col + 8 j + i % 2] = acc[4 j + i] inside c: the D fragment of m64nNk16 (wgmma_d_coords)
        if not _d_store_types(c, acc, n, row, col):
            return None
        count = n.literal_value // 2

        def codegen(context, builder, sig, args):
            cary, m_dim, n_dim, r, c0, ptrs = _d_store_values(context, builder, sig, args, count)
            i64 = ir.IntType(64)
            vec = ir.VectorType(_F32, 2)
            # The two columns a thread holds side by side (c0 + 8 j and + 1, c0 even) are one 8-byte store when
            # C's rows are 8-byte aligned (N even, the data aligned) and both are inside C; else two guarded ones.
            base = builder.ptrtoint(cary.data, i64)
            pairs = builder.and_(builder.icmp_signed("==", builder.and_(n_dim, ir.Constant(i64, 1)),
                                                     ir.Constant(i64, 0)),
                                 builder.icmp_signed("==", builder.and_(base, ir.Constant(i64, 7)),
                                                     ir.Constant(i64, 0)))
            for half in range(2):
                rr = builder.add(r, ir.Constant(i64, 8 * half))
                row_in = builder.icmp_signed("<", rr, m_dim)
                with builder.if_then(row_in):
                    row_base = builder.mul(rr, n_dim)
                    for j in range(count // 4):
                        cc = builder.add(c0, ir.Constant(i64, 8 * j))
                        lo, hi = (builder.load(ptrs[4 * j + 2 * half + odd]) for odd in range(2))
                        both = builder.and_(pairs, builder.icmp_signed("<", builder.add(cc, ir.Constant(i64, 1)),
                                                                       n_dim))
                        with builder.if_else(both) as (wide, narrow):
                            with wide:
                                v = builder.insert_element(ir.Constant(vec, ir.Undefined), lo, ir.Constant(_I32, 0))
                                v = builder.insert_element(v, hi, ir.Constant(_I32, 1))
                                ptr = builder.gep(cary.data, [builder.add(row_base, cc)])
                                builder.store(v, builder.bitcast(ptr, vec.as_pointer()), align=8)
                            with narrow:
                                for odd, val in ((0, lo), (1, hi)):
                                    c_odd = builder.add(cc, ir.Constant(i64, odd))
                                    with builder.if_then(builder.icmp_signed("<", c_odd, n_dim)):
                                        ptr = builder.gep(cary.data, [builder.add(row_base, c_odd)])
                                        builder.store(val, ptr)
            return context.get_dummy_value()

        return types.void(c, acc, n, row, col), codegen

    @intrinsic
    def wgmma_store_add(typingctx, c, acc, n, row, col):
        # c[row + 8 (i // 2), col + 8 j + i % 2] += acc[4 j + i] inside c, each add atomic (red.global.add.f32):
        # wgmma_store for blocks that share their elements of C (split-K)
        if not _d_store_types(c, acc, n, row, col):
            return None
        count = n.literal_value // 2

        def codegen(context, builder, sig, args):
            from numba.cuda import nvvmutils

            cary, m_dim, n_dim, r, c0, ptrs = _d_store_values(context, builder, sig, args, count)
            i64 = ir.IntType(64)
            add = nvvmutils.declare_atomic_add_float32(builder.module)  # what cuda.atomic.add calls
            for half in range(2):
                rr = builder.add(r, ir.Constant(i64, 8 * half))
                with builder.if_then(builder.icmp_signed("<", rr, m_dim)):
                    row_base = builder.mul(rr, n_dim)
                    for j in range(count // 4):
                        for odd in range(2):
                            cc = builder.add(c0, ir.Constant(i64, 8 * j + odd))
                            with builder.if_then(builder.icmp_signed("<", cc, n_dim)):
                                ptr = builder.gep(cary.data, [builder.add(row_base, cc)])
                                builder.call(add, (ptr, builder.load(ptrs[4 * j + 2 * half + odd])))
            return context.get_dummy_value()

        return types.void(c, acc, n, row, col), codegen

    @intrinsic
    def align1024(typingctx, smem):
        # elements from smem's start to its first 1024-byte boundary in the shared window (the 128-byte swizzle
        # repeats every 8 rows of 128 bytes, and the tensor core takes it from the address bits)
        if not (isinstance(smem, types.Array) and smem.layout == "C"):
            return None
        sig = types.int32(smem)

        def codegen(context, builder, sig, args):
            addr = _shared_address(context, builder, sig.args[0], args[0], ir.Constant(_I32, 0), types.int32)
            pad = builder.and_(builder.neg(addr), ir.Constant(_I32, 1023))
            size = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
            return builder.udiv(pad, ir.Constant(_I32, size))

        return sig, codegen

    def _plain(name: str, text: str):
        def typer(typingctx):
            def codegen(context, builder, sig, args):
                builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True),
                             [], attrs=("convergent",))
                return context.get_dummy_value()

            return types.void(), codegen

        typer.__name__ = name
        return intrinsic(typer)

    wgmma_fence = _plain("wgmma_fence", "wgmma.fence.sync.aligned;")
    wgmma_commit = _plain("wgmma_commit", "wgmma.commit_group.sync.aligned;")
    fence_proxy_async = _plain("fence_proxy_async", "fence.proxy.async.shared::cta;")

    @intrinsic
    def wgmma_wait(typingctx, n):
        if not isinstance(n, types.IntegerLiteral):  # the count is part of the instruction
            return None
        count = n.literal_value

        def codegen(context, builder, sig, args):
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), f"wgmma.wait_group.sync.aligned {count};",
                                      "~{memory}", side_effect=True), [], attrs=("convergent",))
            return context.get_dummy_value()

        return types.void(n), codegen


# ----------------------------------------------------------------------------------------------------------
# 3xTF32's split, on the instructions above (the GPU's or the simulator's)
# ----------------------------------------------------------------------------------------------------------

from numba import cuda as _cuda  # noqa: E402  (the simulator's cuda in simulator mode: installed before this loads)

#: The largest TF32 value, 2^127 (2 - 2^-10): float32's largest with its 13 low mantissa bits cut.
TF32_MAX = np.uint32(0x7F7FE000).view(np.float32)
_FLOAT32_MAX = np.finfo(np.float32).max


@_cuda.jit(device=True, forceinline=True)
def split_tf32(x):
    """(big, small): x = big + small to 22 significant bits, each a TF32 value -- big = tf32(x) its top 11 bits,
    small = tf32(x - big) the next 11 (x - big is exact in float32). A finite x within half a TF32 step of float32's
    largest would round to infinity: big is then the largest TF32 value, of x's sign, and small the rest. An
    infinite or NaN x gives big = x and small NaN."""
    big = to_tf32(x)
    if abs(big) > TF32_MAX and abs(x) <= _FLOAT32_MAX:  # rounding overflowed a finite x (both false for NaN)
        big = TF32_MAX if x > 0 else -TF32_MAX
    return big, to_tf32(x - big)


@_cuda.jit(device=True, forceinline=True)
def split_tf32_clamped(x):
    """`split_tf32` without a branch, for loops that split many values and must unroll (a branch per value stops
    NVVM unrolling them, and a local array indexed by a loop's counter then lives in local memory): x is clamped to
    +-TF32_MAX before it is rounded. The same (big, small) for every finite x; an infinite x gives (+-TF32_MAX, +-inf)
    and a NaN a NaN small, so a product of either is still infinite or NaN."""
    big = to_tf32(min(max(x, -TF32_MAX), TF32_MAX))
    return big, to_tf32(x - big)
