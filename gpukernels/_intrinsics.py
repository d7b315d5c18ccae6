"""``load4`` and ``store4``: one 128-bit global load (store) of 4 consecutive float32 -- instructions Numba does not
emit by itself.

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
"""

from __future__ import annotations

from typing import Any

from numba import cuda


def _simulated() -> bool:
    # gpukernels.resources compiles for the real target in a process where numba.cuda was imported first, so
    # ask numba.cuda what it is rather than gpukernels' own mode.
    return cuda.jit.__module__.startswith("numba.cuda.simulator")


if _simulated():

    @cuda.jit(device=True, inline=True)
    def load4(x, i, j):
        return x[i, j], x[i, j + 1], x[i, j + 2], x[i, j + 3]

    @cuda.jit(device=True, inline=True)
    def store4(x, i, j, v0, v1, v2, v3):
        x[i, j] = v0
        x[i, j + 1] = v1
        x[i, j + 2] = v2
        x[i, j + 3] = v3

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
