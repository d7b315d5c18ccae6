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
           "copy_async16_f16", "async_commit", "async_wait"]

# ----------------------------------------------------------------------------------------------------------
# The fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8", and "ldmatrix").
# groupID = lane >> 2 picks the row (of A and C) or the column (of B); threadID_in_group = lane % 4 the pair of
# columns (of A and C) or rows (of B). Each returns (row, column) of element i of the lane's fragment.
# ----------------------------------------------------------------------------------------------------------


def a_frag_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k16, A (16 x 16, float16/bfloat16): element ``a_i``, i = 0..7, two per register (a0 a1 | a2 a3 | ...)."""
    g, t = lane >> 2, lane % 4
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def b_frag_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k16, B (16 x 8, k x n): element ``b_i``, i = 0..3, two per register (b0 b1 | b2 b3)."""
    g, t = lane >> 2, lane % 4
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def c_frag_coords(lane: int, i: int) -> tuple[int, int]:
    """C and D (16 x 8, float32) of m16n8k16 and m16n8k8: element ``c_i``, i = 0..3."""
    g, t = lane >> 2, lane % 4
    return g + 8 * (i >> 1), 2 * t + (i & 1)


def a_tf32_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k8 with TF32, A (16 x 8): element ``a_i``, i = 0..3, one per register."""
    g, t = lane >> 2, lane % 4
    return g + 8 * (i & 1), t + 4 * (i >> 1)


def b_tf32_coords(lane: int, i: int) -> tuple[int, int]:
    """m16n8k8 with TF32, B (8 x 8, k x n): element ``b_i``, i = 0..1."""
    g, t = lane >> 2, lane % 4
    return t + 4 * i, g


def ldmatrix_coords(lane: int, i: int, trans: bool = False) -> tuple[int, int]:
    """(row, column) in an 8 x 8 matrix of the half ``i`` (0: low, 1: high) of the word ``lane`` receives from it
    (lane ``8 j + r`` gave the address of row ``r`` of matrix ``j``)."""
    row, col = lane >> 2, 2 * (lane % 4) + i
    return (col, row) if trans else (row, col)


def _index(coords, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The table as two (32, count) arrays of rows and columns, for NumPy's fancy indexing."""
    rc = np.array([[coords(lane, i) for i in range(count)] for lane in range(32)])
    return rc[..., 0], rc[..., 1]


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
            row = np.array([flat[offset + q] for q in range(per_row)], dtype=smem.dtype).view(np.uint16)
        words = _collective(kind, row)
        if np.dtype(smem.dtype) == np.float32:  # a word is then one float32 of the row: hand it out as one
            return (np.uint32(words).view(np.float32) if count == 1
                    else tuple(np.uint32(w).view(np.float32) for w in words))
        return words

    ldmatrix.__name__ = ldmatrix.__qualname__ = kind
    return ldmatrix


def _sim_copy_async16_f16(dst, d, src, s, nbytes):
    fd, fs = dst.reshape(dst.size), src.reshape(src.size)
    for q in range(8):
        fd[d + q] = fs[s + q] if 2 * q < nbytes else np.float16(0)


if _simulated():
    from .sim import _ctx
    from .sim.api import COLLECTIVES

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
    copy_async16_f16 = _sim_copy_async16_f16

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
