"""Hopper's Tensor Memory Accelerator (TMA) and the ``mbarrier`` that says when its copies have landed, as Numba
intrinsics (inline PTX, like `gpukernels._mma`), with their twins in the simulator (`gpukernels.sim._tma`).

With ``cp.async`` (tensor_core steps 4-6) every thread copies its own 16-byte pieces of a tile and waits for its own
groups, then a barrier makes everyone's pieces visible. On Hopper one thread asks the copy engine for a whole tile:
``cp.async.bulk.tensor.2d`` reads a *box* (rows x columns) of a 2-D tensor in global memory and writes it into shared
memory, laid out with the 128-byte swizzle the tensor cores read. Elements of the box past the tensor's edges are
written as zeros. What the copy needs to know about the tensor -- its address, shape, strides (bytes), the box and the
swizzle -- is a 128-byte *tensor map*, made on the host by the driver (`TensorMap`, ``cuTensorMapEncodeTiled``).

A copy says when it is done through an **mbarrier**: an 8-byte object in shared memory that counts *arrivals* and
*transaction bytes*. Each *phase* of the barrier completes when the expected arrivals have arrived and the bytes
announced by ``arrive.expect_tx`` have been written by the copies (``complete_tx``); then the next phase begins.
Phases are told apart by their parity: ``mbarrier_wait(bars, i, parity)`` returns once the phase of that parity has
completed -- the phase bit a ring of stages flips each time round.

The instructions (``bars``: a shared ``uint64`` array of barriers, ``i`` which one; offsets are flat elements):

* ``mbarrier_init(bars, i, count)``: ``mbarrier.init.shared::cta.b64`` -- phase 0, ``count`` arrivals expected per
  phase. One thread initialises; ``fence_mbarrier_init()`` (``fence.mbarrier_init.release.cluster``) then makes the
  initialised barrier visible to the copy engine, and a ``cuda.syncthreads()`` to the other threads.
* ``mbarrier_arrive_expect_tx(bars, i, nbytes)``: ``mbarrier.arrive.expect_tx.shared::cta.b64`` -- one arrival, and
  ``nbytes`` more to be written before the phase can complete. ``mbarrier_arrive(bars, i)``: an arrival alone;
  ``mbarrier_arrive_if(bars, i, pred)``: one by the threads whose ``pred`` holds, as a predicated instruction (a
  branch around it would make the warp diverge, and ptxas serializes wgmmas whose accumulators live across that).
* ``mbarrier_try_wait(bars, i, parity)`` -> bool: ``mbarrier.try_wait.parity.shared::cta.b64`` -- whether the phase
  of that parity has completed (the hardware may suspend the thread a while first). ``mbarrier_wait(bars, i,
  parity)``: the same in a loop until it has. A wait on parity p returns at once when the barrier's current phase
  has the other parity: the phase before it, of parity p, counts as completed. So a wait on the wrong parity either
  returns at once, before the copies landed, or waits for a phase that never completes -- the kernel hangs.
* ``tma_load_2d(smem, dst, tmap, row, col, bars, i)``: ``cp.async.bulk.tensor.2d.shared::cluster.global.tile
  .mbarrier::complete_tx::bytes`` -- the box of ``tmap`` whose first element is (``row``, ``col``) of the tensor,
  into ``smem`` from flat element ``dst`` on, completing its bytes on barrier ``i``. The destination must be
  128-byte aligned, and with a swizzle aligned to the swizzle's period: 1024 bytes for the 128-byte swizzle (its
  pattern repeats every 8 rows of 128 bytes), 512 and 256 for the 64- and 32-byte ones. The PTX takes the
  coordinates innermost first: ``{col, row}``.
* ``fence_proxy_tensormap_acquire(tmap)``: ``fence.proxy.tensormap::generic.acquire.sys`` on the 128 bytes of the
  map, and ``prefetch_tensormap(tmap)``: ``prefetch.tensormap`` (below: why the map needs the fence).
* ``fence_proxy_async()``: ``fence.proxy.async.shared::cta`` (`gpukernels._mma`'s): shared memory written by ordinary
  stores that the copy engine or the tensor cores read next needs it.
* ``setmaxnreg_dec(n)`` / ``setmaxnreg_inc(n)``: ``setmaxnreg.dec/inc.sync.aligned.u32 n`` -- the warpgroup that
  executes it gives registers back to the SM's pool, or takes more from it, until each of its threads has ``n``
  (a constant, a multiple of 8 from 24 to 256). Warp specialization uses it: a producer warpgroup that only issues
  copies needs few, the consumer warpgroups that hold the accumulators many. All 128 threads of a warpgroup execute
  the same one (``.sync.aligned``). ptxas honours it only in a kernel whose registers are capped at its entry -- in
  Numba ``cuda.jit(launch_bounds=(threads, 1))``, which writes ``.maxntid`` and ``.minnctapersm`` into the PTX, so
  the cap is 65536 / threads -- and where each warpgroup's role is one branch of a single if/else; otherwise it
  ignores the instruction and says so (warning C7508). The simulator checks the count and that whole warpgroups
  execute it alike, and otherwise does nothing (it has no registers to move).

**How the kernel gets the tensor map.** CUDA C++ passes a tensor map by value, as a ``const __grid_constant__``
kernel parameter, and the copy reads it from the parameter space. Numba cannot declare such a parameter. So the
128 bytes are copied to global memory (64-byte aligned, as the driver requires) and the kernel receives that
array; a `TensorMap` passed to a kernel becomes it at launch (``cuda.jit(extensions=[TENSOR_MAPS])``, through Numba's
argument extensions; its Numba type is a ``uint64[::1]`` array). The copy engine reads the map through the
*tensormap proxy*, and bytes written by the host's copy are generic-proxy writes: the CUDA programming guide asks
every block, before it uses a map in global memory written that way, for a ``fence.proxy.tensormap::generic
.acquire`` at system scope (``.sys``: the writer was the host) -- by the thread that issues the copies, or by one
thread followed by a barrier. Because the map holds the tensor's address, a launch of a kernel with tensor maps is
never replayed by the launchers' fast path (it declines kernels with argument extensions): every call encodes the
maps for the arrays of that call (cached by address, shape and box).

The simulator runs the same calls: a copy is in flight until a wait needs its bytes, the barrier's phases and
transaction counts are exact, and a wait on the wrong phase, a box past the end of its shared array, a misaligned
destination or a stage read before its barrier completed is an error naming the kernel's line (a box the tensor map
does not allow is refused where the `TensorMap` is made). TMA and mbarriers need sm_90; ``wgmma`` beside them
sm_90a.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ._intrinsics import _simulated

__all__ = ["TensorMap", "TENSOR_MAPS", "SWIZZLES", "mbarrier_init", "fence_mbarrier_init", "mbarrier_arrive",
           "mbarrier_arrive_if", "mbarrier_arrive_expect_tx", "mbarrier_try_wait", "mbarrier_wait", "tma_load_2d",
           "fence_proxy_tensormap_acquire", "prefetch_tensormap", "fence_proxy_async", "setmaxnreg_dec",
           "setmaxnreg_inc", "REG_COUNTS"]

#: The register counts ``setmaxnreg`` takes: multiples of 8 from 24 to 256 (PTX ISA).
REG_COUNTS = range(24, 257, 8)

#: The swizzles a tensor map may have, in bytes (0: none), and the widest row of a box each allows, in bytes.
SWIZZLES = {0: None, 32: 32, 64: 64, 128: 128}
MAX_BOX = 256  # elements per dimension of a box
_DTYPES = {np.dtype(np.float16): "FLOAT16", np.dtype(np.float32): "FLOAT32", np.dtype(np.uint8): "UINT8",
           np.dtype(np.int32): "INT32"}


def _interface(x: Any) -> dict:
    """The array's ``__cuda_array_interface__`` on a GPU, an equivalent for NumPy and the simulator's arrays."""
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return cai
    a = np.asarray(getattr(x, "_ary", x))
    return {"shape": a.shape, "strides": a.strides, "typestr": a.dtype.str, "data": (a.ctypes.data, False)}


@dataclass(frozen=True, eq=False)  # (compared by identity: it holds an array)
class TensorMap:
    """A 2-D tensor as the copy engine sees it: ``tensor`` (rows x cols, any strides whose rows are 16-byte
    multiples), the ``box`` (rows, cols) one copy moves, and the shared-memory ``swizzle`` (bytes: 0, 32, 64, 128;
    with a swizzle a box row is at most that many bytes). Out-of-bounds elements of a box are filled with zeros.

    The one description both the GPU's encoder (`encode`: the driver's ``cuTensorMapEncodeTiled``) and the
    simulator's copies read. Passed to a kernel compiled with ``extensions=[TENSOR_MAPS]`` it arrives as the
    encoded map in global memory (the module docstring says why)."""

    tensor: Any
    box: tuple
    swizzle: int = 128

    def __post_init__(self):
        object.__setattr__(self, "box", tuple(int(b) for b in self.box))
        self.check()

    # -- what the tensor map says ---------------------------------------------------------------------------
    @cached_property
    def _cai(self) -> dict:
        return _interface(self.tensor)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._cai["typestr"])

    @property
    def shape(self) -> tuple:
        return tuple(int(d) for d in self._cai["shape"])

    @property
    def strides(self) -> tuple:
        """Bytes between consecutive elements of each dimension (C order when the interface gives none)."""
        s = self._cai.get("strides")
        if s is None:
            isz = self.dtype.itemsize
            return (self.shape[1] * isz, isz)
        return tuple(int(v) for v in s)

    @property
    def address(self) -> int:
        return int(self._cai["data"][0])

    @property
    def box_bytes(self) -> int:
        """What one copy writes into shared memory (and completes on its barrier): the whole box, zeros included."""
        return self.box[0] * self.box[1] * self.dtype.itemsize

    def check(self) -> None:
        """The driver's and the PTX ISA's rules for a tiled 2-D map, as a ValueError that says which one fails."""
        shape, box = self.shape, self.box
        if len(shape) != 2 or len(box) != 2:
            raise ValueError(f"TensorMap: a 2-D tensor and a 2-D box (rows, cols); got shape {shape}, box {box}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"TensorMap: dtype {self.dtype} is not one of {[str(d) for d in _DTYPES]}")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"TensorMap: swizzle must be one of {list(SWIZZLES)} bytes; got {self.swizzle}")
        for name, b in zip(("rows", "cols"), box):
            if not 0 < b <= MAX_BOX:
                raise ValueError(f"TensorMap: the box's {name} must be 1 to {MAX_BOX}; got {b}")
        isz = self.dtype.itemsize
        row_bytes = box[1] * isz
        if row_bytes % 16:
            raise ValueError(f"TensorMap: a box row must be a multiple of 16 bytes; {box[1]} x {isz} bytes is "
                             f"{row_bytes}")
        span = SWIZZLES[self.swizzle]
        if span is not None and row_bytes > span:
            raise ValueError(f"TensorMap: with the {self.swizzle}-byte swizzle a box row is at most {span} bytes "
                             f"({span // isz} elements of {isz} bytes); the box's rows are {row_bytes}: split the "
                             "box into several copies")
        row_stride, col_stride = self.strides
        if col_stride != isz:
            raise ValueError(f"TensorMap: the elements of a row must be contiguous (stride {isz} bytes); the "
                             f"tensor's is {col_stride}")
        if row_stride % 16 or not 0 < row_stride < 1 << 40:
            raise ValueError(f"TensorMap: the rows must start a multiple of 16 bytes apart (below 2^40); the "
                             f"tensor's rows are {row_stride} bytes apart ({shape[1]} elements of {isz} bytes): pad "
                             "the rows, or copy the tensor with cp.async instead")
        if self.address % 16:
            raise ValueError(f"TensorMap: the tensor must start on a 16-byte boundary; it starts at "
                             f"{self.address:#x}")

    # -- on a GPU: encoded by the driver, copied to global memory -----------------------------------------------
    def encode(self) -> np.ndarray:
        """The 128-byte ``CUtensorMap`` (as 16 uint64) the driver makes for this description: dimensions innermost
        first, the row stride in bytes, element strides 1, no interleave, zeros for out-of-bounds elements."""
        from cuda.bindings import driver as drv

        rows, cols = self.shape
        err, tmap = drv.cuTensorMapEncodeTiled(
            getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DTYPES[self.dtype]), 2, self.address,
            [drv.cuuint64_t(cols), drv.cuuint64_t(rows)], [drv.cuuint64_t(self.strides[0])],
            [drv.cuuint32_t(self.box[1]), drv.cuuint32_t(self.box[0])], [drv.cuuint32_t(1), drv.cuuint32_t(1)],
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_NONE" if not self.swizzle
                    else f"CU_TENSOR_MAP_SWIZZLE_{self.swizzle}B"),
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # NONE: out-of-bounds elements are zero
        if err != drv.CUresult.CUDA_SUCCESS:
            raise ValueError(f"cuTensorMapEncodeTiled refused {self}: {err}")
        return np.array([int(w) for w in tmap.opaque], dtype=np.uint64)  # the 16 words of the opaque struct

    def device_array(self):
        """The encoded map in global memory (allocations start 256-byte aligned: the 64 the map needs), kept for
        the next launch with the same tensor and box."""
        from numba import cuda

        key = (self.address, self.shape, self.strides, self.dtype.str, self.box, self.swizzle)
        d = _ENCODED.pop(key, None)
        if d is None:
            d = cuda.to_device(self.encode())
            if len(_ENCODED) >= 64:
                _ENCODED.pop(next(iter(_ENCODED)))
        _ENCODED[key] = d
        return d

    @property
    def _numba_type_(self):
        from numba import types

        return types.Array(types.uint64, 1, "C")

    def __repr__(self) -> str:
        return (f"TensorMap({self.dtype} {self.shape[0]} x {self.shape[1]}, box {self.box[0]} x {self.box[1]}, "
                f"swizzle {self.swizzle})")


_ENCODED: dict = {}  # (address, shape, strides, dtype, box, swizzle) -> the map in global memory (GPU only)


class _TensorMaps:
    """Numba's argument extension that turns a `TensorMap` into the kernel's argument: on a GPU its encoded map in
    global memory; in the simulator the description itself (which the simulated copy reads)."""

    def __repr__(self) -> str:  # the same in every process: the kernel cache's key holds the kernel's options
        return "gpukernels._tma.TENSOR_MAPS"

    def prepare_args(self, ty, val, stream=0, retr=None):
        if isinstance(val, TensorMap):
            if _simulated():
                return ty, val
            return val._numba_type_, val.device_array()
        return ty, val


#: Pass as ``cuda.jit(extensions=[TENSOR_MAPS])`` to a kernel that takes tensor maps.
TENSOR_MAPS = _TensorMaps()


if _simulated():
    from ._mma import fence_proxy_async  # noqa: F401
    from .sim._tma import (fence_mbarrier_init, fence_proxy_tensormap_acquire, mbarrier_arrive,  # noqa: F401
                           mbarrier_arrive_if,
                           mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_try_wait, mbarrier_wait,
                           prefetch_tensormap, setmaxnreg_dec, setmaxnreg_inc, tma_load_2d)

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    from ._mma import _shared_address, fence_proxy_async  # noqa: F401

    _I32, _I64 = ir.IntType(32), ir.IntType(64)

    def _asm(builder, ret, text, constraints, args):
        # Every one of these touches memory the compiler does not see (a barrier, a copy in flight): side effects,
        # a memory clobber, and convergent (never moved into a branch some threads do not take)
        asm = ir.InlineAsm(ir.FunctionType(ret, [v.type for v in args]), text, constraints, side_effect=True)
        return builder.call(asm, args, attrs=("convergent",))

    def _is_bars(bars, i) -> bool:
        return (isinstance(bars, types.Array) and bars.dtype in (types.uint64, types.int64) and bars.layout == "C"
                and isinstance(i, types.Integer))

    def _bar(context, builder, sig, args, q=0):
        return _shared_address(context, builder, sig.args[q], args[q], args[q + 1], sig.args[q + 1])

    def _i32(context, builder, v, t):
        return context.cast(builder, v, t, types.int32)

    def _global(context, builder, ty, v):
        # the data pointer of a (global) array, as a 64-bit generic address
        return builder.ptrtoint(context.make_array(ty)(context, builder, value=v).data, _I64)

    def _with_operand(name: str, text: str):
        # an instruction on mbarrier bars[i] ($0: its shared address) with one 32-bit operand ($1: a count of
        # arrivals, of bytes, or a parity)
        def typer(typingctx, bars, i, v):
            if not (_is_bars(bars, i) and isinstance(v, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                _asm(builder, ir.VoidType(), text, "r,r,~{memory}",
                     [_bar(context, builder, sig, args), _i32(context, builder, args[2], sig.args[2])])
                return context.get_dummy_value()

            return types.void(bars, i, v), codegen

        typer.__name__ = name
        return intrinsic(typer)

    mbarrier_init = _with_operand("mbarrier_init", "mbarrier.init.shared::cta.b64 [$0], $1;")
    mbarrier_arrive_expect_tx = _with_operand("mbarrier_arrive_expect_tx",
                                              "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;")
    # try_wait in a loop, inside the PTX (labels are local to the braces, so the loop may be inlined many times)
    mbarrier_wait = _with_operand("mbarrier_wait", "{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, "
                                  "[$0], $1; @!p bra WAIT; }")

    @intrinsic
    def mbarrier_arrive(typingctx, bars, i):
        if not _is_bars(bars, i):
            return None

        def codegen(context, builder, sig, args):
            _asm(builder, ir.VoidType(), "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}",
                 [_bar(context, builder, sig, args)])
            return context.get_dummy_value()

        return types.void(bars, i), codegen

    @intrinsic
    def mbarrier_arrive_if(typingctx, bars, i, pred):
        if not (_is_bars(bars, i) and isinstance(pred, (types.Integer, types.Boolean))):
            return None

        def codegen(context, builder, sig, args):
            p = _i32(context, builder, args[2], sig.args[2])
            _asm(builder, ir.VoidType(), "{ .reg .pred p; setp.ne.u32 p, $1, 0; @p mbarrier.arrive.shared::cta.b64 _, "
                 "[$0]; }", "r,r,~{memory}", [_bar(context, builder, sig, args), p])
            return context.get_dummy_value()

        return types.void(bars, i, pred), codegen

    @intrinsic
    def mbarrier_try_wait(typingctx, bars, i, parity):
        if not (_is_bars(bars, i) and isinstance(parity, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            done = _asm(builder, _I32, "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; "
                        "selp.u32 $0, 1, 0, p; }", "=r,r,r,~{memory}",
                        [_bar(context, builder, sig, args), _i32(context, builder, args[2], sig.args[2])])
            return builder.icmp_unsigned("!=", done, ir.Constant(_I32, 0))

        return types.boolean(bars, i, parity), codegen

    def _is_map(tmap) -> bool:
        return isinstance(tmap, types.Array) and tmap.dtype == types.uint64 and tmap.ndim == 1

    @intrinsic
    def tma_load_2d(typingctx, smem, dst, tmap, row, col, bars, i):
        if not (isinstance(smem, types.Array) and smem.layout == "C" and isinstance(dst, types.Integer)
                and _is_map(tmap) and isinstance(row, types.Integer) and isinstance(col, types.Integer)
                and _is_bars(bars, i)):
            return None

        def codegen(context, builder, sig, args):
            to = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            _asm(builder, ir.VoidType(),
                 "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[$0], [$1, {$2, $3}], [$4];", "r,l,r,r,r,~{memory}",
                 [to, _global(context, builder, sig.args[2], args[2]), _i32(context, builder, args[4], sig.args[4]),
                  _i32(context, builder, args[3], sig.args[3]), _bar(context, builder, sig, args, 5)])
            return context.get_dummy_value()

        return types.void(smem, dst, tmap, row, col, bars, i), codegen

    def _on_map(name: str, text: str):
        def typer(typingctx, tmap):
            if not _is_map(tmap):
                return None

            def codegen(context, builder, sig, args):
                _asm(builder, ir.VoidType(), text, "l,~{memory}", [_global(context, builder, sig.args[0], args[0])])
                return context.get_dummy_value()

            return types.void(tmap), codegen

        typer.__name__ = name
        return intrinsic(typer)

    fence_proxy_tensormap_acquire = _on_map("fence_proxy_tensormap_acquire",
                                            "fence.proxy.tensormap::generic.acquire.sys [$0], 128;")
    prefetch_tensormap = _on_map("prefetch_tensormap", "prefetch.tensormap [$0];")

    @intrinsic
    def fence_mbarrier_init(typingctx):
        def codegen(context, builder, sig, args):
            _asm(builder, ir.VoidType(), "fence.mbarrier_init.release.cluster;", "~{memory}", [])
            return context.get_dummy_value()

        return types.void(), codegen

    def _setmaxnreg(name: str, op: str):
        # the count is an immediate of the instruction: a constant the kernel names (a literal or a global)
        def typer(typingctx, count):
            if not isinstance(count, types.IntegerLiteral):
                return None
            n = count.literal_value
            if n not in REG_COUNTS:
                raise ValueError(f"{name}: the register count must be a multiple of 8 from 24 to 256; got {n}")

            def codegen(context, builder, sig, args):
                _asm(builder, ir.VoidType(), f"setmaxnreg.{op}.sync.aligned.u32 {n};", "", [])
                return context.get_dummy_value()

            return types.void(count), codegen

        typer.__name__ = name
        return intrinsic(typer)

    setmaxnreg_dec = _setmaxnreg("setmaxnreg_dec", "dec")
    setmaxnreg_inc = _setmaxnreg("setmaxnreg_inc", "inc")
