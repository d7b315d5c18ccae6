"""FP8 for Numba kernels: the conversions between float32 and the two 8-bit floating-point formats, and Hopper's
``wgmma`` on 8-bit tiles -- inline PTX, as `gpukernels._mma` and `gpukernels._tma` write theirs, each with its twin
in the simulator (`gpukernels.sim._fp8`).

**Two formats** (the OCP 8-bit floating point specification, which Hopper's tensor cores implement):

* **e4m3**: 4 exponent bits (bias 7), 3 mantissa bits. Range +-448, smallest subnormal 2^-9, a relative step of
  2^-3 (12.5%) from one value to the next, so a value rounds with at most 6.25% error. No infinities, one NaN
  (S.1111.111). The format for what a network *computes with*: weights and activations, whose range a per-tensor
  scale can fit.
* **e5m2**: 5 exponent bits (bias 15), 2 mantissa bits. Range +-57344, smallest subnormal 2^-16, steps of 25%;
  infinities and NaNs as IEEE's -- it is float16 with the low byte cut off. The format for gradients, whose range
  is wide and whose precision matters less.

NumPy has no FP8 dtype: a code travels as a ``uint8`` (an array of them is a ``uint8`` array), two as 16 bits.

The instructions (sm_89 and newer; wgmma sm_90a):

* ``pack_e4m3x2(lo, hi)`` -> uint16: ``cvt.rn.satfinite.e4m3x2.f32`` -- two float32 (float16 arguments are widened
  first, exactly) rounded to nearest, ties to even, each to its code; ``lo``'s in bits 0-7, ``hi``'s in bits 8-15 (the
  PTX takes them the other way round: its first source goes to the high byte). ``.satfinite`` is part of the
  instruction for these formats: a finite value past the largest (or an infinity) becomes +-448, not NaN -- so a
  value rounded up a little past 448 by the division by its scale still lands on 448. NaN stays NaN.
  ``pack_e5m2x2(lo, hi)``: the same to e5m2 (+-57344).
* ``e4m3x2_to_half2(w)`` -> uint32: ``cvt.rn.f16x2.e4m3x2`` -- two codes to two float16 in one word, the low byte's
  in the low half (as `gpukernels._mma.pack_half2` packs them): exact, every e4m3 value is a float16 value.
  ``e5m2x2_to_half2(w)``: the same from e5m2.
* ``wgmma_e4m3_n64/n128/n256(acc, sa, a_off, sb, b_off, scale_d)``: ``wgmma.mma_async.sync.aligned.m64nNk32.f32
  .e4m3.e4m3`` -- a warpgroup multiplies a 64 x 32 tile of A by a 32 x N tile of B, both e4m3 codes in a shared
  ``uint8`` array, into N / 2 float32 accumulators per thread (the layout of `gpukernels._mma.wgmma_d_coords`).
  32 of K per instruction where float16 takes 16: the same 32 bytes of each row, twice the products -- Hopper's
  FP8 rate is twice its FP16 rate (~1980 against ~990 TFLOP/s dense on an H100 SXM or H200). **Both operands are
  K-major**: the PTX ISA allows the transpose (step 6's N-major B) only for 16-bit types, so B is stored
  transposed, B^T (N x K), each of its rows 128 bytes of K -- as `torch._scaled_mm` wants its second operand too.
  Tiles are 128-byte swizzled, 8-row groups 1024 bytes apart; a k32 slice is 32 bytes into each row (``a_off``,
  ``b_off``: byte offsets, multiples of 32). ``scale_d``: 0 makes D = A B (the accumulators are not read), anything
  else D = A B + D. Fence, commit and wait as for float16 (`gpukernels._mma`'s ``wgmma_fence``, ``wgmma_commit``,
  ``wgmma_wait``).
* ``wgmma_scale(acc, factor, n)``: acc[q] *= factor for the thread's n / 2 accumulators, each by a constant index
  (the array stays in registers): the epilogue's multiplication by the inputs' scales.

The formats themselves, on the host: ``encode_e4m3`` / ``encode_e5m2`` (float32 -> codes, exactly as the cvt
rounds), ``decode_e4m3`` / ``decode_e5m2`` (codes -> float64), ``E4M3_MAX`` and ``E5M2_MAX`` -- the simulator's
conversions, and the references the tests and the FP8 step check against.
"""

from __future__ import annotations

from ._intrinsics import _simulated
from .sim._fp8 import (E4M3_MAX, E4M3_TABLE, E5M2_MAX, E5M2_TABLE, FP8_ACC_BITS, decode_e4m3,  # noqa: F401
                       decode_e5m2, encode_e4m3, encode_e5m2)

__all__ = ["E4M3_MAX", "E5M2_MAX", "encode_e4m3", "encode_e5m2", "decode_e4m3", "decode_e5m2", "pack_e4m3x2",
           "pack_e5m2x2", "e4m3x2_to_half2", "e5m2x2_to_half2", "wgmma_e4m3_n64", "wgmma_e4m3_n128",
           "wgmma_e4m3_n256", "wgmma_scale"]

if _simulated():
    from .sim._fp8 import (e4m3x2_to_half2, e5m2x2_to_half2, pack_e4m3x2, pack_e5m2x2,  # noqa: F401
                           wgmma_e4m3_n64, wgmma_e4m3_n128, wgmma_e4m3_n256, wgmma_scale)

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    from ._mma import _acc_pointers, _call, _descriptor, _shared_address

    _I16, _I32, _F32 = ir.IntType(16), ir.IntType(32), ir.FloatType()

    def _pack(name: str, fmt: str):
        # cvt.rn.satfinite.{fmt}x2.f32 d, a, b: a's code in d's high byte, b's in its low one
        text = f"cvt.rn.satfinite.{fmt}x2.f32 $0, $1, $2;"

        def typer(typingctx, lo, hi):
            if not all(isinstance(v, types.Float) for v in (lo, hi)):
                return None
            sig = types.uint16(lo, hi)

            def codegen(context, builder, sig, args):
                lo_f, hi_f = (context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args))
                asm = ir.InlineAsm(ir.FunctionType(_I16, [_F32, _F32]), text, "=h,f,f")
                return builder.call(asm, [hi_f, lo_f])

            return sig, codegen

        typer.__name__ = name
        return intrinsic(typer)

    pack_e4m3x2 = _pack("pack_e4m3x2", "e4m3")
    pack_e5m2x2 = _pack("pack_e5m2x2", "e5m2")

    def _unpack(name: str, fmt: str):
        # cvt.rn.f16x2.{fmt}x2 d, a: a's high byte to d's high half, its low byte to the low half
        text = f"cvt.rn.f16x2.{fmt}x2 $0, $1;"

        def typer(typingctx, w):
            if not isinstance(w, types.Integer):
                return None
            sig = types.uint32(w)

            def codegen(context, builder, sig, args):
                v = builder.trunc(context.cast(builder, args[0], sig.args[0], types.uint32), _I16)
                return builder.call(ir.InlineAsm(ir.FunctionType(_I32, [_I16]), text, "=r,h"), [v])

            return sig, codegen

        typer.__name__ = name
        return intrinsic(typer)

    e4m3x2_to_half2 = _unpack("e4m3x2_to_half2", "e4m3")
    e5m2x2_to_half2 = _unpack("e5m2x2_to_half2", "e5m2")

    def _wgmma_e4m3(n: int):
        # m64nNk32, both operands K-major (no transpose exists for FP8), their descriptors as TF32's in _mma: 8-row
        # groups 1 KB apart, 128-byte swizzle; scale-d a run-time flag (0: D = A B), the inputs' signs not flipped
        count = n // 2  # float32 accumulators per thread: 64 x n over 128 threads
        regs = ",".join(f"${q}" for q in range(count))
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${count + 2}, 0; "
                f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs}}}, ${count}, ${count + 1}, "
                "p, 1, 1; }")
        constraints = ",".join(["=f"] * count + ["l", "l", "r"] + [str(q) for q in range(count)] + ["~{memory}"])

        def typer(typingctx, acc, sa, a_off, sb, b_off, scale_d):
            if not (isinstance(acc, types.Array) and acc.dtype == types.float32 and acc.layout == "C"
                    and all(isinstance(x, types.Array) and x.dtype == types.uint8 and x.layout == "C"
                            for x in (sa, sb))
                    and all(isinstance(v, (types.Integer, types.Boolean)) for v in (a_off, b_off, scale_d))):
                return None
            sig = types.void(acc, sa, a_off, sb, b_off, scale_d)

            def codegen(context, builder, sig, args):
                ptrs = _acc_pointers(context, builder, sig.args[0], args[0], count)
                accs = [builder.load(p) for p in ptrs]
                a_addr = _shared_address(context, builder, sig.args[1], args[1], args[2], sig.args[2])
                b_addr = _shared_address(context, builder, sig.args[3], args[3], args[4], sig.args[4])
                scale = context.cast(builder, args[5], sig.args[5], types.int32)
                da, db = _descriptor(builder, a_addr, 16, 1024), _descriptor(builder, b_addr, 16, 1024)
                out = _call(builder, ir.LiteralStructType([_F32] * count), text, constraints, [da, db, scale] + accs,
                            side_effect=True)
                for q in range(count):
                    builder.store(builder.extract_value(out, q), ptrs[q])
                return context.get_dummy_value()

            return sig, codegen

        typer.__name__ = f"wgmma_e4m3_n{n}"
        return intrinsic(typer)

    wgmma_e4m3_n64, wgmma_e4m3_n128, wgmma_e4m3_n256 = (_wgmma_e4m3(n) for n in (64, 128, 256))

    @intrinsic
    def wgmma_scale(typingctx, acc, factor, n):
        # acc[q] *= factor for q < n / 2, each by a constant index (the array stays in registers)
        if not (isinstance(acc, types.Array) and acc.dtype == types.float32 and isinstance(factor, types.Float)
                and isinstance(n, types.IntegerLiteral)):
            return None
        count = n.literal_value // 2

        def codegen(context, builder, sig, args):
            f = context.cast(builder, args[1], sig.args[1], types.float32)
            for p in _acc_pointers(context, builder, sig.args[0], args[0], count):
                builder.store(builder.fmul(builder.load(p), f), p)
            return context.get_dummy_value()

        return types.void(acc, factor, n), codegen
