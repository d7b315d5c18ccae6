"""``load4`` and ``store4``: one 128-bit global load (store) of 4 consecutive float32, and ``copy_async``: a global ->
shared copy that skips the registers -- instructions Numba does not emit by itself.

Numba indexes arrays one element at a time, and the compiler may merge 4 neighbouring 4-byte loads into one
16-byte load (``LDG.E.128``) only when it can prove the address is a multiple of 16. For shared memory the
kernels declare it (``alignment=16``); for an array argument nothing tells the compiler where the data starts
or whether a row is a multiple of 16 bytes long, so every global load stays 4 bytes wide: four instructions
and four trips through the L1 pipeline where CUDA C would need one.

``load4(x, i, j)`` returns ``x[i, j:j + 4]`` as a 4-tuple. On the GPU it is a Numba *intrinsic*: a function
that writes LLVM IR directly -- here a ``<4 x float>`` load with ``align 16`` -- which NVVM turns into
``ld.global.v4.f32``. The caller promises the alignment: the address of ``x[i, j]`` must be a multiple of 16
bytes (`aligned16` checks that on the host; a misaligned vector load is a fatal CUDA error, not a slow path).
In the simulator, which runs kernels as Python, it is four ordinary element reads.

``copy_async(dst, d, src, s, nbytes)`` copies 4 bytes (``copy_async16``: 16) from ``src.flat[s]`` in global memory
to ``dst.flat[d]`` in shared memory without passing through registers: Ampere's ``cp.async`` (SASS ``LDGSTS``),
written as inline PTX because libNVVM does not take LLVM's ``llvm.nvvm.cp.async`` intrinsics. The offsets are flat
element offsets that the kernel advances itself (one add per copy). ``nbytes`` may be 0: that writes zeros and
reads nothing (a tile that crosses the end of K). A thread's copies complete in the order of its
``async_commit()`` groups; ``async_wait(n)`` waits until at most ``n`` of its groups are still in flight, and a
barrier after it makes every thread's copies visible to the block; ``async_wait_all()`` commits and waits for all.
The simulator keeps each copy in flight until a wait covers it and reports a read (or overwrite) that comes too early
as a hazard naming both lines (`gpukernels.sim._async`, docs/simulator.md). ``cp.async`` needs sm_80 or newer.
"""

from __future__ import annotations

from typing import Any

from numba import cuda


def _simulated() -> bool:
    # gpukernels.resources compiles for the real target in a process where numba.cuda was imported first, so
    # ask numba.cuda what it is rather than gpukernels' own mode.
    return cuda.jit.__module__.startswith("numba.cuda.simulator")


if _simulated():

    @cuda.jit(device=True, forceinline=True)
    def load4(x, i, j):
        return x[i, j], x[i, j + 1], x[i, j + 2], x[i, j + 3]

    @cuda.jit(device=True, forceinline=True)
    def store4(x, i, j, v0, v1, v2, v3):
        x[i, j] = v0
        x[i, j + 1] = v1
        x[i, j + 2] = v2
        x[i, j + 3] = v3

    from .sim._async import async_commit, async_wait, async_wait_all, copy_async, copy_async16  # noqa: F401

    def udivmod32(a, b):
        return divmod(int(a), int(b))

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load4(typingctx, x, i, j):
        if not (isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.float32 and x.layout == "C"
                and isinstance(i, types.Integer) and isinstance(j, types.Integer)):
            return None
        sig = types.UniTuple(types.float32, 4)(x, i, j)

        def codegen(context, builder, sig, args):
            x_t, i_t, j_t = sig.args
            ary = context.make_array(x_t)(context, builder, value=args[0])
            idx = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], (i_t, j_t))]
            ptr = cgutils.get_item_pointer(context, builder, x_t, ary, idx, wraparound=False)
            vec_t = ir.VectorType(ir.FloatType(), 4)
            vec = builder.load(builder.bitcast(ptr, vec_t.as_pointer()), align=16)
            vals = [builder.extract_element(vec, ir.Constant(ir.IntType(32), q)) for q in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    @intrinsic
    def store4(typingctx, x, i, j, v0, v1, v2, v3):
        # x[i, j:j + 4] = (v0, v1, v2, v3) as one 16-byte store (``st.global.v4.f32``); the same promise as load4.
        if not (isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.float32 and x.layout == "C"
                and isinstance(i, types.Integer) and isinstance(j, types.Integer)
                and all(v == types.float32 for v in (v0, v1, v2, v3))):
            return None
        sig = types.void(x, i, j, v0, v1, v2, v3)

        def codegen(context, builder, sig, args):
            x_t, i_t, j_t = sig.args[:3]
            ary = context.make_array(x_t)(context, builder, value=args[0])
            idx = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:3], (i_t, j_t))]
            ptr = cgutils.get_item_pointer(context, builder, x_t, ary, idx, wraparound=False)
            vec_t = ir.VectorType(ir.FloatType(), 4)
            vec = ir.Constant(vec_t, ir.Undefined)
            for q in range(4):
                vec = builder.insert_element(vec, args[3 + q], ir.Constant(ir.IntType(32), q))
            builder.store(vec, builder.bitcast(ptr, vec_t.as_pointer()), align=16)
            return context.get_dummy_value()

        return sig, codegen

    def _asm(builder, text, constraints, args):
        fnty = ir.FunctionType(ir.VoidType(), [v.type for v in args])
        builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), args)

    def _cp_async(width, dtype=types.float32, name=None):
        # cp.async.{ca,cg}.shared.global [shared address], [global address], width, bytes-to-read: ".ca" keeps
        # the 4-byte copies' lines in L1 (a warp's 32 copies read 4 rows x 32 bytes), ".cg" (16 bytes only)
        # goes through L2 alone, as a 128-byte run read once should. The "memory" clobber keeps the compiler from
        # moving shared loads or stores across the copy. ``dtype``: the arrays' elements (offsets count them);
        # the tensor-core lesson copies float16 (gpukernels._mma.copy_async16_f16).
        cache = "cg" if width == 16 else "ca"

        def typer(typingctx, dst, d, src, s, nbytes):
            if not (isinstance(dst, types.Array) and dst.dtype == dtype and dst.layout == "C"
                    and isinstance(src, types.Array) and src.dtype == dtype and src.layout == "C"
                    and all(isinstance(v, types.Integer) for v in (d, s, nbytes))):
                return None
            sig = types.void(dst, d, src, s, nbytes)

            def codegen(context, builder, sig, args):
                def ptr(ary_t, ary_v, off_v, off_t):  # &ary.flat[off]: no bounds, no wraparound
                    data = context.make_array(ary_t)(context, builder, value=ary_v).data
                    return builder.gep(data, [context.cast(builder, off_v, off_t, types.intp)])

                d = ptr(sig.args[0], args[0], args[1], sig.args[1])
                g = ptr(sig.args[2], args[2], args[3], sig.args[3])
                d = builder.ptrtoint(builder.addrspacecast(d, ir.PointerType(d.type.pointee, 3)), ir.IntType(32))
                g = builder.ptrtoint(builder.addrspacecast(g, ir.PointerType(g.type.pointee, 1)), ir.IntType(64))
                n = context.cast(builder, args[4], sig.args[4], types.int32)
                _asm(builder, f"cp.async.{cache}.shared.global [$0], [$1], {width}, $2;", "r,l,r,~{memory}",
                     [d, g, n])
                return context.get_dummy_value()

            return sig, codegen

        typer.__name__ = name or f"copy_async{width if width == 16 else ''}"
        return intrinsic(typer)

    copy_async = _cp_async(4)
    copy_async16 = _cp_async(16)

    @intrinsic
    def udivmod32(typingctx, a, b):
        # (a // b, a % b) of two non-negative integers below 2**31, in 32 bits: Numba widens integer arithmetic to
        # 64 bits, and a 64-bit division is a subroutine call in SASS (wgmma kernels must not call anything).
        if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
            return None
        sig = types.UniTuple(types.int32, 2)(a, b)

        def codegen(context, builder, sig, args):
            x, y = (context.cast(builder, v, t, types.int32) for v, t in zip(args, sig.args))
            q = builder.udiv(x, y)
            return context.make_tuple(builder, sig.return_type, [q, builder.sub(x, builder.mul(q, y))])

        return sig, codegen

    @intrinsic
    def async_commit(typingctx):
        def codegen(context, builder, sig, args):
            _asm(builder, "cp.async.commit_group;", "~{memory}", [])
            return context.get_dummy_value()

        return types.void(), codegen

    @intrinsic
    def async_wait(typingctx, n):
        # The count is part of the instruction, so it must be a compile-time constant.
        if not isinstance(n, types.IntegerLiteral):
            return None
        count = n.literal_value

        def codegen(context, builder, sig, args):
            _asm(builder, f"cp.async.wait_group {count};", "~{memory}", [])
            return context.get_dummy_value()

        return types.void(n), codegen

    @intrinsic
    def async_wait_all(typingctx):
        def codegen(context, builder, sig, args):
            _asm(builder, "cp.async.wait_all;", "~{memory}", [])
            return context.get_dummy_value()

        return types.void(), codegen


def address(x: Any) -> int:
    """Where the data of a device array (or, in the simulator, a host array) starts."""
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return int(x.__array_interface__["data"][0])


def aligned16(*arrays: Any) -> bool:
    """True when every row of every (C-contiguous, float32) array starts on a 16-byte boundary, i.e. the data
    starts on one and rows are a multiple of 4 elements long -- the precondition of `load4`."""
    return all(address(x) % 16 == 0 and x.shape[len(x.shape) - 1] % 4 == 0 for x in arrays)
