"""Two forms of Hopper's ``wgmma`` that `gpukernels._mma` does not have, both float16 with float32 accumulators, both
needed by attention (FlashAttention-3's two products), with their twins in the simulator:

* ``wgmma_rs(acc, n, a0, a1, a2, a3, sb, b_off, b_lbo)`` -- **A from registers** (the "RS" form: Register and Shared
  operands): ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {d}, {a0, a1, a2, a3}, b-desc, p, 1, 1, 1``.
  Each of the warpgroup's 128 threads hands in its part of the 64 x 16 tile of A as four 32-bit words of two halves
  (`gpukernels._mma.pack_half2`), laid out as `wgmma_a_coords` says; B (16 x n) is read from shared memory through a
  descriptor, *MN-major* (``trans-b`` = 1: row k of B holds n consecutive halves), as `_mma`'s float16 wgmma reads it
  (`gpukernels._mma.mn_major_byte`, 64-column atoms ``b_lbo`` bytes apart). Attention's O += P V is this form: P is
  made in the registers by the softmax and never goes to shared memory, and V (keys x D, row-major) is MN-major.
* ``wgmma_ss_k(acc, n, sa, a_off, sb, b_off, accumulate)`` -- both operands from shared memory, **B K-major**
  (``trans-b`` = 0: row n of B^T holds its 16 k's), ``... {d}, a-desc, b-desc, p, 1, 1, 0, 0``: A and B both as
  `gpukernels._mma.k_major_byte` places them (rows of 128 bytes, 128-byte swizzle, 8-row groups 1 KB apart).
  Attention's S = Q K^T is this form: K stored keys x D row-major is K^T with each key's D values contiguous -- the
  layout `_mma`'s TF32 wgmma reads B in, here for float16. ``accumulate`` = 0 makes D = A B (the first k16 slice of
  a new tile of scores), 1 D = A B + D.

``n`` is a compile-time constant, any multiple of 8 from 8 to 256 (attention: the head dimension D, or the keys of a
tile). ``acc`` is the thread's n / 2 float32 accumulators, a local array of any shape (C order; element i of it flat
is accumulator i, `gpukernels._mma.wgmma_d_coords`) -- attention keeps them as (n / 8, 4): n-tile j, element q, the
layout of mma.sync's C fragments, so that the online softmax of the mma.sync steps runs on them unchanged.

**The register fragment of A** (PTX ISA, "Register Fragments", the figure "WGMMA .m64nNk16 register fragment layout
for matrix A"): warp w of the warpgroup holds rows 16 w .. 16 w + 15, and within its 16 x 16 slice each lane holds
exactly what it holds of A in ``mma.sync.m16n8k16`` (`gpukernels._mma.a_frag_coords`): word 0 = (g, 2t..2t+1), word
1 = (g + 8, 2t..), word 2 = (g, 8 + 2t..), word 3 = (g + 8, 8 + 2t..), with g = lane / 4, t = lane % 4. Since the
accumulators of a wgmma are laid out as mma's C fragments too, the scores of two adjacent 8-key n-tiles are, in the
same thread, the A fragment of a 16-key slice: P goes from the first wgmma's output to the second's input without a
shuffle (``attention.mma``'s step 3, now per warpgroup).

**Asynchronous, as `_mma`'s wgmma.** Issue with ``wgmma_fence()`` first (it orders the threads' register writes --
the accumulators, A's words -- before the tensor cores read them), ``wgmma_commit()`` after, and read the
accumulators only after the ``wgmma_wait(n)`` that covers them. A's registers must not change until then either (the
compiler keeps them: a wgmma's inputs stay live until the wait). Shared memory that ordinary stores or cp.async wrote
needs ``fence_proxy_async()`` before a wgmma reads it.

**In the simulator** both are warp-collective (a lane missing is a ``WarpMaskError``, as for mma.sync), and each
checks that its warpgroup's 4 warps issue the same wgmmas: the n-th wgmma of each warp of a warpgroup must be the same
instruction, and a warp that issued fewer by the end of the block is an error naming the line (a warpgroup of fewer
than 4 warps too). The shared-memory operands are registered with the asynchronous model (`gpukernels.sim._async`),
as `_mma`'s wgmma's are: read before a cp.async into them was waited for, or without a ``fence_proxy_async`` since it
was written, or overwritten before the ``wgmma_wait`` that covers them, each is an error naming both lines. The
products are exact and summed in float64, rounded once to float32 toward zero (`gpukernels._mma`'s model of the
tensor cores' adder), and written to the accumulators at the covering ``wgmma_wait``.

Both need sm_90a (``wgmma`` is one of Hopper's architecture-specific instructions).
"""

from __future__ import annotations

import sys

import numpy as np

from ._intrinsics import _simulated
from ._mma import a_frag_coords, k_major_byte, mn_major_byte

__all__ = ["wgmma_a_coords", "wgmma_rs", "wgmma_ss_k", "N_VALUES"]

#: The n a float16 wgmma takes: multiples of 8 from 8 to 256.
N_VALUES = tuple(range(8, 257, 8))


def wgmma_a_coords(thread: int, i: int) -> tuple[int, int]:
    """wgmma m64nNk16 with A in registers (float16): (row, column) in the 64 x 16 tile of A of element ``a_i``
    (i = 0..7, two per 32-bit word: a0 a1 | a2 a3 | a4 a5 | a6 a7) held by ``thread`` (0..127) of the warpgroup.
    Warp ``thread // 32`` holds rows 16 w .. 16 w + 15, each lane of it what `gpukernels._mma.a_frag_coords` gives."""
    if isinstance(thread, (bool, np.bool_)) or not isinstance(thread, (int, np.integer)) or not 0 <= thread < 128:
        raise ValueError(f"wgmma_a_coords: thread must be an int from 0 to 127 (a warpgroup); got {thread!r}")
    r, c = a_frag_coords(int(thread) & 31, i)
    return 16 * (int(thread) >> 5) + r, c


# ----------------------------------------------------------------------------------------------------------
# The simulator's versions
# ----------------------------------------------------------------------------------------------------------

_KINDS = {"rs": "wgmma_rs", "ss_k": "wgmma_ss_k"}


def _n_of(kind: str, n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or int(n) not in N_VALUES:
        raise ValueError(f"{kind}: n must be a multiple of 8 from 8 to 256 (the N of m64nNk16); got {n!r}")
    return int(n)


def _shared_f16(kind: str, name: str, x) -> None:
    if getattr(x, "space", "shared") != "shared":
        raise TypeError(f"{kind}: {name} must be a shared-memory float16 array; {x!r} is in {x.space} memory")
    if np.dtype(x.dtype) != np.float16:
        raise TypeError(f"{kind}: {name} must hold float16; got {x.dtype}")


def _slice_offset(kind: str, name: str, off) -> int:
    if int(off) % 16:
        raise ValueError(f"{kind}: {name} = {off} elements is not on a 32-byte boundary (a multiple of 16 halves): a "
                         "k16 slice of a 128-byte swizzled row is 32 bytes")
    return int(off)


def _b_index(form: str, n: int, b_off: int, b_lbo: int) -> np.ndarray:
    """(16, n) flat element indices of B's k16 x n tile where its descriptor finds it: K-major (``ss_k``: row c of N
    holds its 16 k's, `k_major_byte`) or MN-major (``rs``: row k holds the n's, `mn_major_byte`)."""
    k, c = np.arange(16)[:, None], np.arange(n)[None, :]
    if form == "ss_k":
        return k_major_byte(2 * b_off, c, k) // 2
    return mn_major_byte(2 * b_off, k, c, b_lbo) // 2


def _a_index(a_off: int, w4: int) -> np.ndarray:
    """(16, 16) flat element indices of warp ``w4``'s 16 rows of a K-major A tile (`k_major_byte`)."""
    r, k = np.arange(16 * w4, 16 * w4 + 16)[:, None], np.arange(16)[None, :]
    return k_major_byte(2 * a_off, r, k) // 2


def _values(kind: str, what: str, x, idx: np.ndarray) -> np.ndarray:
    raw = np.asarray(getattr(x, "_a", x)).reshape(-1)
    if idx.max() >= raw.size:
        raise IndexError(f"{kind}: the {what} tile reaches element {int(idx.max())} of a shared array of {raw.size}: "
                         "the descriptor points past its end")
    return raw[idx].astype(np.float64)


def _elements(x, idx: np.ndarray) -> tuple:
    # (array, element numbers from its allocation's start): what the asynchronous model keys its records by
    return x, getattr(x, "offset", 0) // getattr(x, "isz", np.dtype(x.dtype).itemsize) + idx.ravel()


def _collective_all(form: str):
    kind = _KINDS[form]

    def collective(vals: dict) -> dict:
        # vals[lane]: ((arrays, numbers), warp of the warpgroup, A's four words (rs) or None, this lane's n / 2
        # accumulators). The operands are the warpgroup's, the same in every lane (the instruction is .aligned).
        (arrays, numbers), w4 = vals[0][0], vals[0][1]
        for lane in range(32):
            theirs, nums = vals[lane][0]
            if nums != numbers or any(x is not y for x, y in zip(theirs, arrays)):
                raise ValueError(f"{kind}: the lanes of a warp gave different operands (arrays, offsets or n); a "
                                 "wgmma's descriptors and shape are the warpgroup's, the same in every thread")
        if form == "rs":
            (sb,), (n, b_off, b_lbo) = arrays, numbers
            words = np.array([vals[lane][2] for lane in range(32)], dtype=np.uint32)  # (32, 4)
            a = np.zeros((16, 16))
            a[_A_RS] = words.view(np.float16).astype(np.float64)  # (32, 8): a0..a7 of each lane
        else:
            (sa, sb), (n, a_off, b_off) = arrays, numbers
            a = _values(kind, "A", sa, _a_index(a_off, w4))
            b_lbo = 0
        b = _values(kind, "B", sb, _b_index(form, n, b_off, b_lbo))
        blocks = n // 8
        c = np.zeros((16, n))
        accs = np.array([vals[lane][3] for lane in range(32)], dtype=np.float32).reshape(32, blocks, 4)
        for j in range(blocks):
            c[_C_ROWS, _C_COLS + 8 * j] = accs[:, j, :]
        d = _mma_product(a, b, c)
        out = np.stack([d[_C_ROWS, _C_COLS + 8 * j] for j in range(blocks)], axis=1)  # (32, blocks, 4)
        return {lane: out[lane].reshape(-1) for lane in range(32)}

    return collective


class _Issues:
    """One block's wgmmas of these forms, per warpgroup and warp: ``runs[wg][w4]`` = [(kind, site)], so that the n-th
    of each warp can be compared with the n-th of the others, and the counts at the block's end."""

    def __init__(self, model):
        self.model, self.block, self.runs = model, model.launch.blockIdx, {}

    def issue(self, t, kind: str, site) -> None:
        wg, w4 = t.warp // 4, t.warp % 4
        runs = self.runs.setdefault(wg, {})
        mine = runs.setdefault(w4, [])
        mine.append((kind, site))
        n = len(mine) - 1
        for other, theirs in runs.items():
            if other != w4 and len(theirs) > n and theirs[n] != (kind, site):
                raise WarpMaskError(f"{kind} at {describe(site)} in warp {t.warp}, but warp {4 * wg + other} of the "
                                    f"same warpgroup {wg} issued {theirs[n][0]} at {describe(theirs[n][1])} there: the "
                                    "4 warps of a warpgroup issue the same wgmmas, in the same order")

    def check(self) -> None:
        """At the block's end: every warp of a warpgroup that issued these wgmmas issued as many."""
        launch = self.model.launch
        warps = -(-launch.nthreads // 32)
        for wg, runs in self.runs.items():
            longest = max(runs.values(), key=len)
            for w4 in range(4):
                got = len(runs.get(w4, ()))
                if got < len(longest):
                    kind, site = longest[got]
                    absent = 4 * wg + w4 >= warps
                    raise WarpMaskError(
                        f"{kind} at {describe(site)} was issued by warpgroup {wg} without its warp {4 * wg + w4}"
                        + (f" (the block has {launch.nthreads} threads, no such warp: a warpgroup is 4 warps, 128 "
                           "threads)" if absent else "")
                        + ": a wgmma is executed by all 128 threads of a warpgroup")


def _issues(model) -> _Issues:
    st = getattr(model, "wgmma_issues", None)
    if st is None or st.block is not model.launch.blockIdx:  # a new block
        st = model.wgmma_issues = _Issues(model)
        model.at_end.append(st.check)
    return st


def _begin(kind: str, acc, n: int):
    """(launch, model, the kernel's frame, the accumulators as a flat array) for a wgmma of ``n`` columns."""
    launch = _ctx.LAUNCH
    if launch is None:
        raise RuntimeError(f"{kind} is a warpgroup instruction: it runs only inside a kernel on gpukernels' simulator")
    flat = acc.reshape(acc.size) if getattr(acc, "ndim", 1) != 1 else acc
    if flat.size < n // 2:
        raise ValueError(f"{kind}: acc must hold the thread's {n // 2} float32 accumulators (n = {n}); it has "
                         f"{flat.size}")
    return launch, _async.model(), user_frame(sys._getframe(2)), flat


def _register(launch, model, frame, kind: str, elems: list) -> list | None:
    """Lane 0 of each warp: check its warpgroup issues this wgmma whole, and register the tensor cores' shared reads
    ([(array, elements)]) with the asynchronous model; returns the tracer's (array, element) reads to report."""
    t = launch.cur
    if t.lane:
        return None
    site = _async._site_of(frame)
    _issues(model).issue(t, kind, site)
    reads = None
    if elems:
        if launch.trace_hook is not None:
            reads = [(x, e) for x, idx in elems for e in idx.tolist()]
        model.wgmma_reads(t, site, kind, elems, reads)
    return reads


def _finish(launch, model, frame, kind: str, acc, flat, n: int, operands: tuple, words, accumulate: bool) -> None:
    """The product, as a warp collective, pending until the wgmma_wait that covers it (`gpukernels._mma`'s rule)."""
    st = model.state()
    count = n // 2
    prior = st.chained(acc)
    if not accumulate:  # scale-d = 0: D = A B, whatever the accumulators held
        c = np.zeros(count, dtype=np.float32)
    else:
        c = prior if prior is not None else np.array([flat[q] for q in range(count)], dtype=np.float32)
    d = launch.warp_op(frame, kind, 0xFFFFFFFF, (operands, launch.cur.warp % 4, words, c), 0, 32)
    st.wg_pending[id(acc)] = [flat, d, None]


def _sim_rs():
    kind = "wgmma_rs"

    def wgmma(acc, n, a0, a1, a2, a3, sb, b_off, b_lbo):
        # (named wgmma: the tracer knows the tensor cores' reads by the frame that reports them)
        n = _n_of(kind, n)
        words = (a0, a1, a2, a3)
        for name, v in zip(("a0", "a1", "a2", "a3"), words):
            if v.__class__ is not int or not 0 <= v <= 0xFFFFFFFF:
                _word(kind, name, v)
        _shared_f16(kind, "sb", sb)
        b_off, b_lbo = _slice_offset(kind, "b_off", b_off), int(b_lbo)
        if b_lbo % 16 or not 0 < b_lbo < 1 << 18:
            raise ValueError(f"{kind}: b_lbo must be a positive multiple of 16 bytes below 256 KB; got {b_lbo}")
        launch, model, frame, flat = _begin(kind, acc, n)
        # A is in registers: the shared reads are B's, registered once for the warpgroup (by its first warp)
        elems = [_elements(sb, _b_index("rs", n, b_off, b_lbo))] if launch.cur.warp % 4 == 0 else []
        reads = _register(launch, model, frame, kind, elems)
        if reads:
            _async._hook_reads(launch.trace_hook, reads)
        _finish(launch, model, frame, kind, acc, flat, n, ((sb,), (n, b_off, b_lbo)), tuple(int(w) for w in words),
                True)

    wgmma.__name__ = wgmma.__qualname__ = kind
    return wgmma


def _sim_ss_k():
    kind = "wgmma_ss_k"

    def wgmma(acc, n, sa, a_off, sb, b_off, accumulate):
        n = _n_of(kind, n)
        _shared_f16(kind, "sa", sa)
        _shared_f16(kind, "sb", sb)
        a_off, b_off = _slice_offset(kind, "a_off", a_off), _slice_offset(kind, "b_off", b_off)
        launch, model, frame, flat = _begin(kind, acc, n)
        w4 = launch.cur.warp % 4
        # this warp's 16 rows of A; B once for the warpgroup (by its first warp)
        elems = [_elements(sa, _a_index(a_off, w4))] + ([_elements(sb, _b_index("ss_k", n, b_off, 0))]
                                                        if w4 == 0 else [])
        reads = _register(launch, model, frame, kind, elems)
        if reads:
            _async._hook_reads(launch.trace_hook, reads)
        _finish(launch, model, frame, kind, acc, flat, n, ((sa, sb), (n, a_off, b_off)), None, bool(accumulate))

    wgmma.__name__ = wgmma.__qualname__ = kind
    return wgmma


if _simulated():
    from ._mma import _index, _mma_product, _word, c_frag_coords
    from .sim import _async, _ctx
    from .sim._source import describe, user_frame
    from .sim.api import COLLECTIVES
    from .sim.errors import WarpMaskError

    _A_RS = _index(wgmma_a_coords, 8)  # warp 0's lanes: rows 0..15 (each warp's own rows, in its collective)
    _C_ROWS, _C_COLS = _index(c_frag_coords, 4)
    COLLECTIVES.update({kind: _collective_all(form) for form, kind in _KINDS.items()})
    wgmma_rs, wgmma_ss_k = _sim_rs(), _sim_ss_k()
    _async.register(wgmma_rs, wgmma_ss_k, proxy=True)

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    from ._mma import _F32, _I32, _acc_pointers, _call, _descriptor, _shared_address

    def _acc_ok(acc) -> bool:
        return isinstance(acc, types.Array) and acc.dtype == types.float32 and acc.layout == "C"

    def _f16_ok(x) -> bool:
        return isinstance(x, types.Array) and x.dtype == types.float16 and x.layout == "C"

    def _n_ok(n) -> bool:
        return isinstance(n, types.IntegerLiteral) and n.literal_value in N_VALUES

    def _text(n: int, operands: str, tail: str, scale_at: int) -> str:
        count = n // 2
        regs = ",".join(f"${q}" for q in range(count))
        return (f"{{ .reg .pred p; setp.ne.b32 p, ${scale_at}, 0; "
                f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, {operands}, {tail} }}")

    @intrinsic
    def wgmma_rs(typingctx, acc, n, a0, a1, a2, a3, sb, b_off, b_lbo):
        # A: four .f16x2 registers per thread; B: MN-major (trans-b 1), its 64-column atoms b_lbo bytes apart;
        # D accumulated (scale-d 1)
        if not (_acc_ok(acc) and _n_ok(n) and _f16_ok(sb)
                and all(isinstance(v, types.Integer) for v in (a0, a1, a2, a3, b_off, b_lbo))):
            return None
        count = n.literal_value // 2
        c = count
        text = _text(n.literal_value, f"{{${c},${c + 1},${c + 2},${c + 3}}}, ${c + 4}", "p, 1, 1, 1;", c + 5)
        constraints = ",".join(["=f"] * count + ["r"] * 4 + ["l", "r"] + [str(q) for q in range(count)] + ["~{memory}"])
        sig = types.void(acc, n, a0, a1, a2, a3, sb, b_off, b_lbo)

        def codegen(context, builder, sig, args):
            ptrs = _acc_pointers(context, builder, sig.args[0], args[0], count)
            accs = [builder.load(p) for p in ptrs]
            words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[2:6], sig.args[2:6])]
            b_addr = _shared_address(context, builder, sig.args[6], args[6], args[7], sig.args[7])
            lbo = context.cast(builder, args[8], sig.args[8], types.int32)
            db = _descriptor(builder, b_addr, lbo, 1024)
            out = _call(builder, ir.LiteralStructType([_F32] * count), text, constraints,
                        words + [db, ir.Constant(_I32, 1)] + accs, side_effect=True)
            for q in range(count):
                builder.store(builder.extract_value(out, q), ptrs[q])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def wgmma_ss_k(typingctx, acc, n, sa, a_off, sb, b_off, accumulate):
        # A and B both K-major (trans-a 0, trans-b 0), 8-row groups 1 KB apart; accumulate: scale-d, a run-time flag
        if not (_acc_ok(acc) and _n_ok(n) and _f16_ok(sa) and _f16_ok(sb)
                and all(isinstance(v, (types.Integer, types.Boolean)) for v in (a_off, b_off, accumulate))):
            return None
        count = n.literal_value // 2
        text = _text(n.literal_value, f"${count}, ${count + 1}", "p, 1, 1, 0, 0;", count + 2)
        constraints = ",".join(["=f"] * count + ["l", "l", "r"] + [str(q) for q in range(count)] + ["~{memory}"])
        sig = types.void(acc, n, sa, a_off, sb, b_off, accumulate)

        def codegen(context, builder, sig, args):
            ptrs = _acc_pointers(context, builder, sig.args[0], args[0], count)
            accs = [builder.load(p) for p in ptrs]
            a_addr = _shared_address(context, builder, sig.args[2], args[2], args[3], sig.args[3])
            b_addr = _shared_address(context, builder, sig.args[4], args[4], args[5], sig.args[5])
            scale = context.cast(builder, args[6], sig.args[6], types.int32)
            out = _call(builder, ir.LiteralStructType([_F32] * count), text, constraints,
                        [_descriptor(builder, a_addr, 16, 1024), _descriptor(builder, b_addr, 16, 1024), scale] + accs,
                        side_effect=True)
            for q in range(count):
                builder.store(builder.extract_value(out, q), ptrs[q])
            return context.get_dummy_value()

        return sig, codegen
