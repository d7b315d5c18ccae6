"""TMA copies and mbarriers on the simulator: the twins of `gpukernels._tma`'s instructions, on the asynchronous
model of `gpukernels.sim._async`.

**mbarrier.** Each barrier (an element of a shared ``uint64`` array) is a :class:`Barrier`: the arrivals it expects
per phase, those still pending in the current phase, its transaction count (bytes announced by
``arrive.expect_tx`` and not yet written by a copy), and the number of phases completed. A phase completes when no
arrival is pending and the transaction count is zero -- exactly as the PTX ISA says -- and the next begins with the
full count of arrivals. ``mbarrier_wait(bars, i, parity)`` returns at once when the current phase's parity is not
``parity`` (the phase before counts as completed, as on the hardware); otherwise the thread is *parked* until the
phase completes, and the scheduler runs the others. When every live thread is parked or at a barrier, the kernel
would hang on a GPU: the simulator raises an :class:`~gpukernels.sim._async.AsyncHazardError` ("deadlock") that says
which threads wait, at which line, for which phase, and what that phase still lacks (arrivals, or bytes no copy in
flight brings). ``mbarrier_try_wait`` waits the same way and returns True (the hardware may give up earlier and
return False; a loop around it behaves the same).

**TMA copies.** ``tma_load_2d`` checks the destination's alignment (128 bytes; 1024 with the 128-byte swizzle, whose
pattern repeats every 1024 bytes), that the box fits the shared array from there and that its coordinates are in
the 32-bit range a tensor map takes (the box itself -- at most 256 per dimension, a row at most the swizzle's span,
rows 16-byte multiples apart -- is checked where the `TensorMap` is made), and keeps the copy in flight: a
:class:`TmaCopy`, an ``InFlight`` of its own rules. It lands -- the box read from the tensor, elements past its
edges as zeros, each row's 16-byte chunks swizzled as the map says, its bytes taken off the barrier's transaction
count -- when a thread waits for the barrier's phase and no arrival is pending (the latest point the hardware
allows; at issue when threads already wait for it), or, in shuffle mode, on a seeded draw at issue. Its destination is readable by a thread only after that
thread's own wait has seen the phase it completed: a read before (a wait on the phase of the wrong parity returns at
once, before the copy landed) is an "early read", or a "wrong phase" when the thread's last wait on that barrier
returned at once on the phase before; a copy into a stage that a ``wgmma`` in flight still reads, or that another
copy in flight still writes, is an "early overwrite". Both name the copy's line and the access's.

**Warp specialization.** An arrival *releases* and a wait that sees the phase complete *acquires*: the wgmma reads
a consumer thread had waited for (``wgmma_wait``) before it arrived on a stage's empty barrier are done for every
thread that then sees that phase complete -- so a producer may refill the stage after its wait, with no
``cuda.syncthreads()``. A producer that arms a stage's full barrier again (``arrive.expect_tx``) while the copies of
the stage's previous fill are still unconsumed -- it skipped the empty wait -- is an "early overwrite" naming its
line and the copy's. ``setmaxnreg_dec`` / ``setmaxnreg_inc`` check their count (a multiple of 8 from 24 to 256) and
that all 4 warps of a warpgroup execute the same one, every lane of each (at the block's end: no warp missing), and
otherwise do nothing.

What is not modelled: the tensor map's L2 promotion and cache hints, multicast, clusters (a block is its own
cluster), and the proxy fence the tensor map itself needs (the simulator's map is a Python object). A thread may read
a stage only after its own wait (CUTLASS's consumers all wait); reaching it through another thread's wait and a
``cuda.syncthreads()`` is reported too.
"""

from __future__ import annotations

import sys

import numpy as np

from . import _async
from ._async import READ, InFlight
from ._source import describe

_MAX_COUNT = (1 << 20) - 1  # arrivals per phase, and transaction bytes, an mbarrier counts (PTX ISA)
_ALIGN = {0: 128, 32: 256, 64: 512, 128: 1024}  # destination alignment by swizzle: its pattern's period


def _here() -> tuple:
    return _async._site_of(sys._getframe())


class Barrier:
    """One mbarrier: its arrival count per phase, the arrivals still pending, its transaction count, the phases
    completed (``phase`` is the current one's index: its parity is ``phase & 1``), and the copies in flight on it."""

    __slots__ = ("name", "count", "pending", "tx", "phase", "copies", "init_tid", "init_bar", "init_site", "fenced",
                 "waiters", "last_arrive")

    def __init__(self, name, count, t, site):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0
        self.copies: list = []
        self.init_tid, self.init_bar, self.init_site, self.fenced = t.tid, t.barriers, site, False
        self.waiters: list = []  # (thread, parity, site)
        self.last_arrive = None  # (thread index, site)


class TmaCopy(InFlight):
    """A ``cp.async.bulk.tensor`` in flight: it lands on its barrier's phase, and a thread may read its destination
    once its own wait has seen that phase complete."""

    __slots__ = ("state", "bar", "nbytes", "phase", "tmap", "coords", "dst_byte", "raw")
    own_rules = True

    def visible(self, t) -> bool:
        return self.landed and self.state.seen.get((t.tid, self.bar), -1) >= self.phase

    def land(self) -> None:
        if self.landed:
            return
        self.landed = True
        b = self.state.bars[self.bar]
        self.phase = b.phase  # the phase its bytes complete
        rows, cols = self.tmap.box
        r0, c0 = self.coords
        src = np.asarray(getattr(self.tmap.tensor, "_ary", self.tmap.tensor))
        box = np.zeros((rows, cols), dtype=src.dtype)  # past the tensor's edges: zeros
        ra, rb = max(r0, 0), min(r0 + rows, src.shape[0])
        ca, cb = max(c0, 0), min(c0 + cols, src.shape[1])
        if ra < rb and ca < cb:
            box[ra - r0:rb - r0, ca - c0:cb - c0] = src[ra:rb, ca:cb]
        data = box.view(np.uint8).reshape(-1)
        at = self.dst_byte + np.arange(data.size)
        span = self.tmap.swizzle
        if span:  # 16-byte chunk c of a row of the swizzle's span lands at chunk c ^ (row % (span / 16))
            at = at ^ (((at >> 7) & (span // 16 - 1)) << 4)
        self.raw[at] = data
        b.tx -= self.nbytes
        b.copies.remove(self)
        model = self.state.model
        rid, e0, n = self.dst
        w = model.writes.get(rid)
        if w:  # the last write of these elements is now the copy engine's (the async proxy), not a thread's
            for e in range(e0, e0 + n):
                w.pop(e, None)
        model._event("tma", "land", model.launch.cur, self.num, self.phase, self.site, self.array, b.name)

    def hazard(self, model, arr, elem, kind, site):
        t = model.launch.cur
        b = self.state.bars[self.bar]
        if kind != READ:
            return model._raise("early overwrite", self, arr, elem, site,
                                f"writes {arr.space} array {arr.name!r} (element {elem}) at {describe(site)} while the "
                                f"TMA copy issued by thread {self.idx} at {describe(self.site)} is still to land there "
                                f"(it completes on mbarrier {b.name}): wait for its phase first")
        last = self.state.last_wait.get((t.tid, self.bar))
        phase = self.phase if self.landed else b.phase
        hazard = "early read"
        if last is None:
            why = f"this thread has not waited on mbarrier {b.name} (mbarrier_wait) for the phase the copy completes"
        elif last[2]:
            hazard = "wrong phase"
            cur = last[3] + 1
            why = (f"this thread's wait at {describe(last[0])} asked for parity {last[1]}, and returned at once: the "
                   f"barrier was in phase {cur} (parity {cur & 1}), so the phase of parity {last[1]} it "
                   f"counted as completed was the one before. The copy completes phase {phase}: wait on parity "
                   f"{phase & 1} (a ring of S stages: k tile kt completes phase kt // S of its barrier)")
        else:
            why = (f"this thread's last wait on it, at {describe(last[0])}, saw phase {last[3]} complete; the copy "
                   f"completes phase {phase}")
        model._raise(hazard, self, arr, elem, site,
                     f"reads {arr.space} array {arr.name!r} (element {elem}) at {describe(site)} before the TMA copy "
                     f"issued by thread {self.idx} at {describe(self.site)} has completed its phase of mbarrier "
                     f"{b.name} for this thread: {why}")


class TmaState:
    """The barriers of one block and what each thread has seen of them."""

    def __init__(self, model, block):
        self.model, self.block = model, block
        self.bars: dict = {}  # (root id, element) -> Barrier
        self.seen: dict = {}  # (tid, barrier key) -> the latest phase the thread's waits saw completed
        self.last_wait: dict = {}  # (tid, barrier key) -> (site, parity, returned at once, phase index seen)
        self.parked = 0
        self.regs: dict = {}  # warpgroup -> {warp of the warpgroup: [(setmaxnreg op, count, site)]}
        self.released: dict = {}  # barrier key -> {phase: the wgmma reads its arrivals had waited for}

    def check_regs(self) -> None:
        """At the block's end: every warp of a warpgroup that executed setmaxnreg executed it as often."""
        launch = self.model.launch
        warps = -(-launch.nthreads // 32) if hasattr(launch, "nthreads") else None
        for wg, runs in self.regs.items():
            ops = max(runs.values(), key=len)
            for w4 in range(4):
                w = 4 * wg + w4
                if len(runs.get(w4, ())) < len(ops):
                    op, count, site = ops[len(runs.get(w4, ()))]
                    absent = warps is not None and w >= warps
                    raise ValueError(f"setmaxnreg_{op}({count}) at {describe(site)} was executed by warpgroup {wg} "
                                     f"without its warp {w}" + (" (the block has no such warp: a warpgroup is 4 "
                                                                "warps, 128 threads)" if absent else "")
                                     + ": setmaxnreg is executed by all 4 warps of a warpgroup")


def _state() -> TmaState:
    model = _async.model()
    st = getattr(model, "tma", None)
    if st is None or st.block is not model.launch.blockIdx:  # a new block: new barriers
        st = model.tma = TmaState(model, model.launch.blockIdx)
        model.on_stuck = lambda: _stuck(st)
    return st


def _key(bars, i, what: str) -> tuple:
    if getattr(bars, "space", None) != "shared" or np.dtype(bars.dtype).itemsize != 8:
        raise TypeError(f"{what}: an mbarrier is an 8-byte element of a shared array (cuda.shared.array(n, "
                        f"types.uint64)); got {bars!r}")
    flat = bars.reshape(bars.size)
    i = int(i)
    if not 0 <= i < flat.size:
        raise IndexError(f"{what}: mbarrier {i} of {bars.name!r}, which holds {flat.size}")
    return (id(flat.root), (flat.offset + i * flat.st[0]) // flat.isz)


def _name(bars, i) -> str:
    return f"{bars.name}[{int(i)}]"


def _barrier(st: TmaState, bars, i, what: str) -> tuple:
    key = _key(bars, i, what)
    b = st.bars.get(key)
    if b is None:
        raise RuntimeError(f"{what} on mbarrier {_name(bars, i)}, which was never initialised: one thread calls "
                           "mbarrier_init(bars, i, count) first, then fence_mbarrier_init() and cuda.syncthreads()")
    t = st.model.launch.cur
    if t.tid != b.init_tid and t.barriers <= b.init_bar:
        raise RuntimeError(f"{what} on mbarrier {b.name}, initialised by another thread at {describe(b.init_site)} "
                           "with no cuda.syncthreads() since: this thread may see it uninitialised")
    return key, b


# -- the instructions -------------------------------------------------------------------------------------------


def mbarrier_init(bars, i, count):
    st = _state()
    count = int(count)
    if not 0 < count <= _MAX_COUNT:
        raise ValueError(f"mbarrier_init: count must be 1 to {_MAX_COUNT}; got {count}")
    key = _key(bars, i, "mbarrier_init")
    old = st.bars.get(key)
    if old is not None and (old.copies or old.waiters):
        raise RuntimeError(f"mbarrier_init on mbarrier {old.name} while copies or waits on it are in flight")
    st.bars[key] = Barrier(_name(bars, i), count, st.model.launch.cur, _here())


def fence_mbarrier_init():
    """``fence.mbarrier_init.release.cluster``: the thread's initialised barriers are visible to the copy engine."""
    st = _state()
    tid = st.model.launch.cur.tid
    for b in st.bars.values():
        if b.init_tid == tid:
            b.fenced = True


def _arrive(st, b, key, tx, what):
    t = st.model.launch.cur
    if b.pending == 0 and b.copies and tx:
        _refill_hazard(st, b, what)
    if b.pending == 0:
        raise RuntimeError(f"{what} on mbarrier {b.name}: phase {b.phase} already has all its {b.count} "
                           f"arrival{'s' if b.count != 1 else ''} (the last by thread {b.last_arrive[0]} at "
                           f"{describe(b.last_arrive[1])}) and waits only for bytes: one arrival too many")
    b.tx += tx
    if abs(b.tx) > _MAX_COUNT:
        raise ValueError(f"{what} on mbarrier {b.name}: {b.tx} transaction bytes pending, more than the {_MAX_COUNT} "
                         "a barrier counts")
    b.pending -= 1
    b.last_arrive = ((t.idx.x, t.idx.y, t.idx.z), _here())
    st.model._event("mbarrier", "arrive", t, tx, b.phase, b.last_arrive[1], b.name, b.name)  # (op: its bytes)
    # what this thread has waited for (its wgmma's reads of a stage) is done for every thread that sees this phase
    # complete: the arrive releases, the wait acquires
    done = [op for op in st.model.waited if op.tid == t.tid]
    if done:
        st.released.setdefault(key, {}).setdefault(b.phase, []).extend(done)
    _progress(st, b, key)


def _acquire(st, key, tid, seen) -> None:
    """Thread ``tid``'s wait saw phase ``seen`` of barrier ``key`` complete: the reads its arrivals released up to
    that phase are done for it."""
    phases = st.released.get(key)
    if not phases:
        return
    granted = st.model.released
    for p in [p for p in phases if p <= seen]:
        for op in phases[p]:
            granted.setdefault(op, set()).add(tid)


def _refill_hazard(st, b, what):
    """An arrive.expect_tx on a stage's full barrier while the copies of its previous fill are still in flight: the
    producer is refilling a stage that no consumer has taken yet (it skipped the stage's empty barrier)."""
    from ._source import location

    launch = st.model.launch
    t, site = launch.cur, _here()
    c = b.copies[0]
    block = (launch.blockIdx.x, launch.blockIdx.y, launch.blockIdx.z)
    text = (f"early overwrite in kernel {launch.name!r}, block {block}: {what} at {describe(site)} arms mbarrier "
            f"{b.name} for a new fill of its stage, but phase {b.phase} of that barrier is still waiting for the TMA "
            f"copy issued by thread {c.idx} at {describe(c.site)}, which no thread has waited for: its tile has not "
            f"been consumed, and the new copies would overwrite it. The producer refills a stage only after the "
            f"consumers have released it: wait on the stage's empty barrier (its phase bit) first")
    raise _async.AsyncHazardError(text, hazard="early overwrite", issue_location=location(*c.site),
                                  issue_thread=c.idx, kernel=launch.name, block=block,
                                  thread=(t.idx.x, t.idx.y, t.idx.z), location=location(*site))


def mbarrier_arrive_expect_tx(bars, i, nbytes):
    st = _state()
    key, b = _barrier(st, bars, i, "mbarrier_arrive_expect_tx")
    nbytes = int(nbytes)
    if not 0 <= nbytes <= _MAX_COUNT:
        raise ValueError(f"mbarrier_arrive_expect_tx: nbytes must be 0 to {_MAX_COUNT}; got {nbytes}")
    _arrive(st, b, key, nbytes, "mbarrier_arrive_expect_tx")


def mbarrier_arrive(bars, i):
    st = _state()
    key, b = _barrier(st, bars, i, "mbarrier_arrive")
    _arrive(st, b, key, 0, "mbarrier_arrive")


def mbarrier_arrive_if(bars, i, pred):
    """A predicated arrival: the threads whose ``pred`` holds arrive."""
    st = _state()
    key, b = _barrier(st, bars, i, "mbarrier_arrive_if")
    if pred:
        _arrive(st, b, key, 0, "mbarrier_arrive_if")


def _progress(st, b, key, land=False) -> None:
    """Complete the barrier's phase if it can: no arrival pending and, once the copies in flight on it have landed
    (at once when a thread waits: ``land``), no bytes outstanding."""
    if b.pending:
        return
    if b.tx and b.copies and (land or b.waiters):
        for op in list(b.copies):
            op.land()
    if b.tx == 0:
        done = b.phase
        b.phase += 1
        b.pending = b.count
        launch = st.model.launch
        waiters, b.waiters = b.waiters, []
        for t, parity, site in waiters:
            st.seen[(t.tid, key)] = done
            _acquire(st, key, t.tid, done)
            st.last_wait[(t.tid, key)] = (site, parity, False, done)
            st.parked -= 1
            if t is not launch.cur:  # (the thread that completed it by its own wait just goes on)
                t.state = _READY
                t.result = None
                launch.ready.append(t)
        st.model._event("mbarrier", "complete", launch.cur, -1, done, waiters[0][2] if waiters else _here(), b.name,
                        b.name)


def mbarrier_wait(bars, i, parity):
    st = _state()
    key, b = _barrier(st, bars, i, "mbarrier_wait")
    parity = int(parity)
    if parity not in (0, 1):
        raise ValueError(f"mbarrier_wait: parity is a phase bit, 0 or 1; got {parity}")
    launch = st.model.launch
    t, site = launch.cur, _here()
    st.model._event("mbarrier", "wait", t, -1, b.phase - (b.phase & 1 != parity), site, b.name, b.name)  # its phase
    if b.phase & 1 != parity:  # the phase before the current one, of this parity, counts as completed
        seen = b.phase - 1
        st.seen[(t.tid, key)] = max(st.seen.get((t.tid, key), -1), seen)
        st.last_wait[(t.tid, key)] = (site, parity, True, seen)
        _acquire(st, key, t.tid, seen)
        return
    b.waiters.append((t, parity, site))
    st.parked += 1
    _progress(st, b, key, land=True)
    if any(w[0] is t for w in b.waiters):  # still incomplete: park until another thread completes it
        t.state = _PARKED
        t.frame = sys._getframe(1)
        launch.sched.switch()


def mbarrier_try_wait(bars, i, parity):
    """The simulator's try_wait waits until the phase completes, then returns True."""
    mbarrier_wait(bars, i, parity)
    return True


def tma_load_2d(smem, dst, tmap, row, col, bars, i):
    from .._tma import TensorMap

    st = _state()
    model = st.model
    t, site = model.launch.cur, _here()
    if not isinstance(tmap, TensorMap):
        raise TypeError(f"tma_load_2d: tmap must be a TensorMap passed to the kernel (cuda.jit(extensions="
                        f"[TENSOR_MAPS])); got {type(tmap).__name__}")
    key, b = _barrier(st, bars, i, "tma_load_2d")
    if not b.fenced:
        raise RuntimeError(f"tma_load_2d completes on mbarrier {b.name}, initialised at {describe(b.init_site)} "
                           "with no fence_mbarrier_init() after it: the copy engine may not see the initialised "
                           "barrier")
    if getattr(smem, "space", None) != "shared":
        raise TypeError(f"tma_load_2d writes shared memory; {smem!r} is not a shared array")
    flat = smem.reshape(smem.size)
    dst, row, col = int(dst), int(row), int(col)
    byte = flat.offset + dst * flat.st[0]
    align = _ALIGN[tmap.swizzle]
    if byte % align:
        raise ValueError(f"tma_load_2d: the destination, element {dst} of {smem.name!r}, is byte {byte} of shared "
                         f"memory, not a multiple of {align}: a TMA copy "
                         + ("with the 128-byte swizzle needs a 1024-byte aligned destination (the swizzle's pattern "
                            "is 8 rows of 128 bytes, taken from the address bits)" if tmap.swizzle == 128 else
                            f"{'with the ' + str(tmap.swizzle) + '-byte swizzle ' if tmap.swizzle else ''}needs a "
                            f"{align}-byte aligned destination"))
    rows, cols = tmap.box
    if not (-(1 << 31) <= row < 1 << 31 and -(1 << 31) <= col < 1 << 31):
        raise ValueError(f"tma_load_2d: the coordinates ({row}, {col}) are past the 32-bit range a tensor map takes")
    span = tmap.swizzle
    if span and cols * tmap.dtype.itemsize != span:
        raise NotImplementedError(f"tma_load_2d: the simulator copies swizzled boxes whose rows are exactly the "
                                  f"swizzle's {span} bytes; this box's rows are {cols * tmap.dtype.itemsize}")
    nbytes = tmap.box_bytes
    isz = flat.isz
    if byte + nbytes > flat.root.nbytes:
        raise IndexError(f"tma_load_2d: the box's {nbytes} bytes from element {dst} of {smem.name!r} run past its "
                         f"end ({flat.root.nbytes} bytes)")
    rid, e0, count = id(flat.root), byte // isz, -(-nbytes // isz)
    model.num += 1
    op = TmaCopy("tma", model.num, t, site, (rid, e0, count), None, None, smem.name)
    op.landed = False
    op.state, op.bar, op.nbytes, op.tmap, op.coords, op.dst_byte = st, key, nbytes, tmap, (row, col), byte
    op.raw = flat.root.reshape(-1).view(np.uint8)
    op.phase = -1
    m_dst = model.dst.setdefault(rid, {})
    srcs = model.src.get(rid)
    for e in range(e0, e0 + count):
        other = m_dst.get(e)
        if other is not None and not other.landed:
            model._overwrite(other, flat, e, site, "issues a TMA copy that writes", destination=True)
        if srcs:
            other = srcs.get(e)
            if other is not None and not model._read_done(other, t):
                model._overwrite(other, flat, e, site, "issues a TMA copy that writes")
        m_dst[e] = op
    b.copies.append(op)
    model._event("tma", "issue", t, op.num, b.phase, site, smem.name, b.name)
    hook = model.launch.trace_hook
    if hook is not None:  # the tracer sees the copy where it is issued (as a cp.async's): the box's reads, its writes
        _trace_box(hook, model.launch, tmap, row, col, flat, e0 - flat.offset // isz, count)
    if model.rng is not None and model.rng.random() < 0.5:  # shuffle: this copy lands at once
        op.land()
        _progress(st, b, key)
    elif b.waiters:  # threads already wait for this phase (a consumer ahead of its producer): the copies land now
        _progress(st, b, key, land=True)


def _trace_box(hook, launch, tmap, row, col, flat, first, count) -> None:
    """What the tracer sees of one copy, as one instruction of the kernel's line: the box's elements inside the tensor
    read from the kernel's own argument that holds it (when it is one), then the ``count`` elements written from
    ``first`` of the shared array ``flat``."""
    from numpy.lib.array_utils import byte_bounds

    data = np.asarray(getattr(tmap.tensor, "_ary", tmap.tensor))
    lo, hi = byte_bounds(data)
    # the argument is the tensor itself, or an argument whose memory holds it (a map may view a kernel's (BH, S, D)
    # argument as (BH * S, D))
    arg = next((x for x in launch.kargs if getattr(x, "root", None) is data), None) or next(
        (x for x in launch.kargs if isinstance(getattr(x, "root", None), np.ndarray) and x.root.dtype == data.dtype
         and byte_bounds(x.root)[0] <= lo and hi <= byte_bounds(x.root)[1]), None)
    if arg is not None:
        rows, cols = tmap.box
        m, n = tmap.shape
        st0, st1 = data.strides
        at = lo - byte_bounds(arg.root)[0]  # bytes from the start of the argument's allocation to the tensor's
        for r in range(max(row, 0), min(row + rows, m)):
            base = at + r * st0
            for c in range(max(col, 0), min(col + cols, n)):
                hook(arg, (base + c * st1) // arg.isz, READ)
    for e in range(first, first + count):
        hook(flat, e, _async.WRITE)


def fence_proxy_tensormap_acquire(tmap):
    """``fence.proxy.tensormap::generic.acquire``: the simulator's tensor map is a Python object (nothing to order)."""


def prefetch_tensormap(tmap):
    """``prefetch.tensormap``: a hint."""


# -- setmaxnreg: a warpgroup's register count -------------------------------------------------------------------


def _setmaxnreg_all(vals: dict) -> dict:
    # vals[lane]: (instruction, count); .sync.aligned: every lane of the warp executes the same one
    first = vals[0]
    odd = sorted(lane for lane, v in vals.items() if v != first)
    if odd:
        raise ValueError(f"setmaxnreg: the lanes of a warp executed different ones ({first[0]} {first[1]} in lane 0, "
                         f"{vals[odd[0]][0]} {vals[odd[0]][1]} in lane {odd[0]}): setmaxnreg is .sync.aligned")
    return dict.fromkeys(vals)


def _setmaxnreg(op: str, count) -> None:
    from .._tma import REG_COUNTS
    from . import _ctx

    launch = _ctx.LAUNCH
    if launch is None:
        raise RuntimeError(f"setmaxnreg_{op} runs only inside a kernel on gpukernels' simulator")
    frame = sys._getframe(2)  # the kernel's line
    site = _async._site_of(frame)
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)) or count not in REG_COUNTS:
        raise ValueError(f"setmaxnreg_{op}({count!r}) at {describe(site)}: the register count must be a constant, a "
                         "multiple of 8 from 24 to 256")
    st = _state()
    t = launch.cur
    launch.warp_op(frame, "setmaxnreg", 0xFFFFFFFF, (op, int(count)), 0, 32)
    if t.lane:
        return
    # the warp's lanes agree; do the warpgroup's 4 warps? (the n-th setmaxnreg of each warp is the same instruction)
    wg, w4 = t.warp // 4, t.warp % 4
    runs = st.regs.setdefault(wg, {})
    mine = runs.setdefault(w4, [])
    mine.append((op, int(count), site))
    n = len(mine) - 1
    for other, theirs in runs.items():
        if other != w4 and len(theirs) > n and theirs[n][:2] != (op, int(count)):
            raise ValueError(f"setmaxnreg_{op}({count}) at {describe(site)} in warp {t.warp}, but warp "
                             f"{4 * wg + other} of the same warpgroup {wg} executed setmaxnreg_{theirs[n][0]}"
                             f"({theirs[n][1]}) at {describe(theirs[n][2])} there: the 4 warps of a warpgroup "
                             "execute the same setmaxnreg (one role per warpgroup)")
    if len(st.model.at_end) == 0 or st.model.at_end[-1] is not st.check_regs:
        st.model.at_end.append(st.check_regs)


def setmaxnreg_dec(count):
    """``setmaxnreg.dec.sync.aligned.u32``: checked (a legal count, executed by whole warpgroups alike); the
    simulator has no registers to give back."""
    _setmaxnreg("dec", count)


def setmaxnreg_inc(count):
    """``setmaxnreg.inc.sync.aligned.u32``: checked as `setmaxnreg_dec`."""
    _setmaxnreg("inc", count)


# -- when nothing can run ----------------------------------------------------------------------------------------


def _stuck(st: TmaState):
    """Threads parked on mbarrier phases that will never complete: the kernel hangs on a GPU."""
    if not st.parked:
        return None
    launch = st.model.launch
    parts, first, arrivals = [], None, False
    for b in st.bars.values():
        if not b.waiters:
            continue
        t, parity, site = b.waiters[0]
        first = first or (t, site, b)
        who = (f"{len(b.waiters)} thread{'s' if len(b.waiters) != 1 else ''} "
               + ", ".join(str((w.idx.x, w.idx.y, w.idx.z)) for w, _, _ in b.waiters[:4])
               + (", ..." if len(b.waiters) > 4 else ""))
        if b.pending:
            arrivals = True
            lacks = (f"{b.pending} of its {b.count} arrival{'s' if b.count != 1 else ''} never come"
                     + (f" (the last one came from thread {b.last_arrive[0]} at {describe(b.last_arrive[1])}, in "
                        f"an earlier phase or this one)" if b.last_arrive else " (no thread ever arrived)"))
        elif b.tx > 0:
            lacks = (f"it still expects {b.tx} transaction bytes that no copy in flight brings (arrive.expect_tx "
                     "announced more bytes than the copies on this barrier write)")
        else:
            lacks = (f"the copies on it wrote {-b.tx} bytes more than arrive.expect_tx announced, so its "
                     "transaction count never returns to zero")
        parts.append(f"{who} wait at {describe(site)} for the phase of parity {parity} of mbarrier {b.name}, which "
                     f"is phase {b.phase}: {lacks}")
    others = [t for t in launch.threads if t.state not in (_PARKED, _DONE)]
    if others:
        parts.append(f"thread {(others[0].idx.x, others[0].idx.y, others[0].idx.z)} {others[0].where()}")
    t, site, b = first
    block = (launch.blockIdx.x, launch.blockIdx.y, launch.blockIdx.z)
    text = (f"mbarrier hazard (deadlock) in kernel {launch.name!r}, block {block}: " + "; ".join(parts)
            + ". On a GPU the kernel hangs here."
            + (" A wait on the wrong phase? The phase a wait asks for is the barrier's next completion: its parity "
               "flips each time the barrier completes (a ring of S stages: k tile kt is phase kt // S of its "
               "barrier, parity (kt // S) & 1)" if arrivals else ""))
    from ._source import location

    return _async.AsyncHazardError(text, hazard="deadlock", issue_location=location(*b.init_site),
                                   issue_thread=None, kernel=launch.name, block=block,
                                   thread=(t.idx.x, t.idx.y, t.idx.z), location=location(*site))


from ._launch import DONE as _DONE, READY as _READY  # noqa: E402

_PARKED = 5  # a thread state of its own: waiting for an mbarrier phase

from .api import COLLECTIVES  # noqa: E402

COLLECTIVES["setmaxnreg"] = _setmaxnreg_all

_async.register(setmaxnreg_dec, setmaxnreg_inc)
_async.register(mbarrier_init, fence_mbarrier_init, mbarrier_arrive, mbarrier_arrive_if, mbarrier_arrive_expect_tx,
                mbarrier_wait, mbarrier_try_wait, tma_load_2d, fence_proxy_tensormap_acquire, prefetch_tensormap,
                proxy=True)
