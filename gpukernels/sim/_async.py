"""Asynchronous operations on the simulator: ``cp.async`` copies, ``wgmma``'s shared-memory operand reads and the
proxy fence between them -- data that moves *after* the instruction that asked for it.

On a GPU a thread that issues ``cp.async`` goes on at once; the copy lands some time before the ``wait_group`` that
covers it, and other threads may use it only after that wait *and* a barrier. The simulator keeps each such
operation as an :class:`InFlight` record (who issued it, at which line, which elements it will write and read, its
commit group) and completes it at a point it chooses: by default at the covering wait, the latest point the rules
allow (so a kernel that reads early reads what was there before, as a GPU often does); in shuffle mode a seeded
draw lands some groups as soon as they are committed, so that ``configure(shuffle=True, seed=...)`` explores both.

Every access of an array a launch with asynchronous operations makes is checked against the records in flight
(``arrays.HOOK``/``arrays.CHECK``: such launches use the observed array classes, others do not pay for this):

* **early read** -- an element read before the copy that writes it was waited for (by the reader itself, or by
  the issuing thread followed by ``cuda.syncthreads()``); the special cases **missing commit** (the copy was never
  committed to a group, so no ``wait_group`` covers it) and **wrong wait count** (the issuing thread waited, but
  its count left this copy's group in flight) are named as such;
* **early overwrite** -- an element written while an operation in flight still has to read it (a ``cp.async``'s
  source before it landed, a ``wgmma`` operand before ``wgmma_wait`` covered the group) or write it (another
  copy's destination);
* **missing fence** -- a ``wgmma`` (the async proxy) reading shared memory that a thread last wrote (a store, or a
  ``cp.async`` it waited for: the generic proxy) with no ``fence.proxy.async`` between, neither by the writer after
  its write nor by the reader after a barrier that follows the write (PTX ISA, "proxies").

A hazard raises :class:`AsyncHazardError` naming both lines (the issue and the access, each with its thread) --
``configure(async_hazards="report")`` collects them in ``last_launch().async_hazards`` instead and lets the kernel
run on with the values a GPU might have given it. ``docs/simulator.md`` says what this model leaves out.

The record is the base of the next asynchronous operations (TMA copies, ``mbarrier`` transaction counts): an
operation is an :class:`InFlight` with destination and source ranges and a way to complete it (:meth:`InFlight.land`),
completed by whatever waits for it (a ``wait_group`` here, an ``mbarrier`` phase there) through
:meth:`AsyncModel.complete`.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from . import _ctx, arrays
from ._source import describe, location, user_frame
from .errors import SimulatorError

READ, WRITE = arrays.READ, arrays.WRITE

#: The hazard kinds, in the words the messages use.
HAZARDS = ("early read", "missing commit", "wrong wait count", "early overwrite", "missing fence",
           "wrong phase", "deadlock")  # the last two: mbarrier waits (gpukernels.sim._tma)


class AsyncHazardError(SimulatorError):
    """Memory used while an asynchronous operation on it was still in flight (see the module docstring).
    ``hazard``: one of ``HAZARDS``; ``issue_location`` / ``issue_thread``: where and by whom the operation was
    issued; ``location`` / ``thread``: the access."""

    def __init__(self, message, *, hazard=None, issue_location=None, issue_thread=None, **kw):
        super().__init__(message, **kw)
        self.hazard = hazard
        self.issue_location = issue_location
        self.issue_thread = issue_thread


@dataclass(frozen=True)
class AsyncHazard:
    """One hazard of a launch run with ``async_hazards="report"`` (``last_launch().async_hazards``)."""

    hazard: str
    kernel: str
    block: tuple
    issue_location: str
    issue_thread: tuple
    location: str
    thread: tuple
    array: str
    message: str


@dataclass(frozen=True, slots=True)
class AsyncEvent:
    """What the tracer records of an asynchronous operation: ``what`` is "issue", "commit", "land" or "wait";
    ``op`` the operation's number in its block (one per ``cp.async`` or warp's ``wgmma``; -1 for a commit or a
    wait), ``group`` the issuing thread's commit group (-1 before the commit), ``step`` the position in the block's
    sequence of asynchronous events (the timeline's clock), ``interval`` the thread's barrier interval.

    A TMA copy's ``group`` is the phase of its mbarrier (``barrier``: ``full[2]``) that its bytes complete. An
    mbarrier's own events (kind "mbarrier", ``array`` and ``barrier`` its name, ``group`` a phase index) are
    "arrive" (``op``: the transaction bytes it announces), "wait" (a thread asks for phase ``group``: -1 is the
    fresh barrier's phase before its first) and "complete" (phase ``group`` completed): `gpukernels._ringlog`
    reads them as a ring's stages. A named barrier's (kind "named_barrier", ``op`` its number, ``group`` its use,
    ``barrier`` "bar[n]") are each warp's "sync" and "arrive" (lane 0's) and "complete": `gpukernels._pplog` reads
    them as turns."""

    kind: str  # "cp.async", "wgmma...", "tma", "mbarrier" or "named_barrier"
    what: str
    block: tuple
    thread: int
    op: int
    group: int
    step: int
    interval: int
    location: str
    array: str
    launch: int = -1  # the tracer's index of the launch
    barrier: str = ""  # the mbarrier of a TMA copy or of an mbarrier event


def launch_events(launch, index: int) -> list:
    """The events a traced launch recorded, stamped with its index among the tracer's launches."""
    model = getattr(launch, "async_model", None)
    if model is None or not model.events:
        return []
    return [replace(e, launch=index) for e in model.events]


class InFlight:
    """One asynchronous operation: its issue site and thread, the elements it will write (``dst``: array root id
    -> flat elements) and read (``src``), its commit group, and whether it has landed (its data moved) and been
    waited for (``wait_bar``: the barrier interval of the wait; after the next barrier every thread may use it)."""

    __slots__ = ("kind", "num", "tid", "warp", "idx", "site", "dst", "src", "move", "group", "landed", "wait_bar",
                 "wait_site", "array", "reads")
    #: True for an operation that completes on its own terms (a TMA copy, on an mbarrier's phase): its subclass says
    #: to whom it is visible (``visible(t)``) and reports a use too early itself (``hazard(model, arr, elem, kind,
    #: site)``)
    own_rules = False

    def __init__(self, kind, num, t, site, dst, src, move, array):
        self.kind, self.num, self.site, self.dst, self.src, self.move, self.array = kind, num, site, dst, src, move, array
        self.tid, self.warp, self.idx = t.tid, t.warp, (t.idx.x, t.idx.y, t.idx.z)
        self.group = None
        self.landed = move is None
        self.wait_bar = None
        self.wait_site = None
        self.reads = None  # the tracer's (array, element) reads of a wgmma, replayed where it completes

    def land(self) -> None:
        """Move the data (once)."""
        if not self.landed:
            self.landed = True
            dv, d, sv, s, nsrc, n = self.move
            if nsrc:
                dv[d:d + nsrc] = sv[s:s + nsrc]
            if nsrc < n:
                dv[d + nsrc:d + n] = 0


class ThreadAsync:
    """One thread's asynchronous bookkeeping: its copies not yet committed, its committed groups not yet waited,
    its proxy fences, and its wgmma groups (accumulators written at the wait that covers them)."""

    __slots__ = ("pending", "groups", "committed", "last_wait", "fences", "fence_bar", "wg_pending", "wg_ops",
                 "wg_groups", "wg_done", "issued")

    def __init__(self):
        self.issued = 0  # cp.async instructions
        self.pending = []
        self.groups = deque()  # (group number, [InFlight]) committed, oldest first
        self.committed = 0
        self.last_wait = None  # (site, n, groups committed then)
        self.fences = 0
        self.fence_bar = -1
        self.wg_pending = {}  # id(acc) -> [acc, values, group]
        self.wg_ops = []  # wgmma InFlight records not yet covered by a wgmma_wait
        self.wg_groups = 0
        self.wg_done = 0

    def chained(self, acc):
        entry = self.wg_pending.get(id(acc))
        return entry[1] if entry is not None else None


def _in_bounds(flat, start: int, count: int) -> None:
    """The first or last element of a copy outside its (flat) array: the simulator's out-of-bounds error."""
    if start < 0:
        flat[start]  # noqa: B018
    elif start + count > flat.size:
        flat[start + count - 1]  # noqa: B018


def _xyz(t) -> tuple:
    return (t.idx.x, t.idx.y, t.idx.z)


def _access_site() -> tuple:
    f = user_frame(sys._getframe(2))
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("<unknown>", 0)


class AsyncModel:
    """The operations in flight of one launch (reset at each block). ``check`` is the per-access hook."""

    def __init__(self, launch):
        self.launch = launch
        self.rng = launch.rng  # shuffle mode: some groups land at their commit
        self.report = getattr(launch.config, "async_hazards", "error") == "report"
        self.hazards: list = []
        self._seen = set()
        self.events = [] if launch.tracer is not None else None
        # the last generic write of each shared element, for the proxy-fence check (kernels with wgmma only)
        self.track_writes = uses_async(launch.fn, PROXY_OPS)
        self.new_block()

    def new_block(self) -> None:
        self.threads: dict = {}
        self.dst: dict = {}  # root id -> {element: InFlight} writes not yet visible to every thread
        self.src: dict = {}  # root id -> {element: InFlight} reads not yet done
        self.writes: dict = {}  # root id -> {element: (tid, fences, interval, site)}: the last generic write
        self.waited: list = []  # waited for, visible to all after the next barrier
        self.flats: dict = {}  # id(array) -> (array, flat view, first element): see _flat
        #: set by a blocking operation's model (an mbarrier wait): the error to raise when nothing can run and threads
        #: are parked in it, or None when none are (the launch's own diagnosis then)
        self.on_stuck = None
        self.num = 0
        self.step = 0
        #: an InFlight read (a wgmma's) -> threads an mbarrier has ordered its completion before: the waited-for read's
        #: thread arrived on a barrier whose phase they saw complete (sim/_tma), as a cuda.syncthreads() would
        self.released: dict = {}
        self.at_end: list = []  # checks to run when the block ends (sim/_tma: whole warpgroups ran setmaxnreg)

    def end_block(self) -> None:
        """Count the block's cp.async as warp instructions (a warp's lanes issue them together: the most any lane of
        the warp issued) among the launch's collectives, where the tracer and the grader read them."""
        per_warp: dict = {}
        for tid, st in self.threads.items():
            if st.issued:
                per_warp[tid // 32] = max(per_warp.get(tid // 32, 0), st.issued)
        if per_warp:
            c = self.launch.collectives
            c["cp.async"] = c.get("cp.async", 0) + sum(per_warp.values())
        for check in self.at_end:
            check()

    def state(self, t=None) -> ThreadAsync:
        t = t or self.launch.cur
        st = self.threads.get(t.tid)
        if st is None:
            st = self.threads[t.tid] = ThreadAsync()
        return st

    # -- the per-access check ---------------------------------------------------------------------------
    def check(self, arr, elem, kind):
        rid = id(arr.root)
        m = self.dst.get(rid)
        if m:
            op = m.get(elem)
            if op is not None and not self._visible(op, self.launch.cur):
                self._dst_hazard(op, arr, elem, kind, _access_site())
        if kind != READ:
            m = self.src.get(rid)
            if m:
                op = m.get(elem)
                if op is not None and not self._read_done(op, self.launch.cur):
                    self._overwrite(op, arr, elem, _access_site(), "writes")
            if self.track_writes and arr.space is arrays.SHARED:
                t = self.launch.cur
                self.writes.setdefault(rid, {})[elem] = (t.tid, self.state(t).fences, t.barriers, _access_site())

    def _visible(self, op, t) -> bool:
        if op.own_rules:
            return op.visible(t)
        return op.wait_bar is not None and (op.tid == t.tid or t.barriers > op.wait_bar)

    def _read_done(self, op, t) -> bool:
        if op.kind == "cp.async":
            return op.landed
        if op.wait_bar is not None and (op.tid == t.tid or t.barriers > op.wait_bar
                                        or t.tid in self.released.get(op, ())):
            return True
        return op.warp == t.warp and self.state(t).wg_done > op.group if op.group is not None else False

    # -- hazards ------------------------------------------------------------------------------------------
    def _dst_hazard(self, op, arr, elem, kind, site):
        if op.own_rules:
            return op.hazard(self, arr, elem, kind, site)
        t = self.launch.cur
        if kind != READ:
            return self._overwrite(op, arr, elem, site, "writes", destination=True)
        owner = self.threads.get(op.tid)
        who = "it" if op.tid == t.tid else f"thread {op.idx}"
        if op.group is None:
            hazard = "missing commit"
            why = (f"{who} never committed it to a group (async_commit, cp.async.commit_group), so no "
                   "async_wait covers it: commit after the copies, then wait")
        elif op.wait_bar is not None:
            hazard = "early read"
            why = (f"{who} waited for it at {describe(op.wait_site)}, but no cuda.syncthreads() separates that wait "
                   "from this read: another thread's copies are visible only after a barrier")
        elif op.tid != t.tid and self.state(t).committed <= op.group:
            hazard = "early read"  # the reader has not reached that group itself: it still uses the stage's old tile
            why = (f"{who} issued it to refill the stage while this thread still reads the tile that was there: a "
                   "cuda.syncthreads() must separate the last reads of a stage from the copies that refill it")
        elif owner is not None and owner.last_wait is not None and owner.last_wait[2] > op.group:
            hazard = "wrong wait count"
            wsite, n, committed = owner.last_wait
            left = committed - op.group - 1
            why = (f"{who} waited with async_wait({n}) at {describe(wsite)}, which leaves its {n} most recent groups "
                   f"in flight, and this copy's group was one of them: async_wait({left}) covers it")
        else:
            hazard = "early read"
            why = f"{who} has not waited for it (async_wait) since it was committed"
        self._raise(hazard, op, arr, elem, site,
                    f"reads {arr.space} array {arr.name!r} (element {elem}) at {describe(site)} before the "
                    f"{op.kind} that writes it, issued by thread {op.idx} at {describe(op.site)}, has landed: {why}")

    def _overwrite(self, op, arr, elem, site, verb, destination=False):
        if destination:
            what = (f"the {op.kind} issued by thread {op.idx} at {describe(op.site)} is still to write it: wait for "
                    "its group (async_wait, then cuda.syncthreads()) before using its destination")
        elif op.kind == "cp.async":
            what = (f"the cp.async issued by thread {op.idx} at {describe(op.site)} has not read it yet (its source "
                    "is read when it lands): wait for its group before reusing the source")
        else:
            what = (f"the {op.kind} issued by thread {op.idx} (warp {op.warp}) at {describe(op.site)} may still be "
                    "reading it: wgmma_wait must cover that group (and a cuda.syncthreads() follow, for other warps) "
                    "before its operands are overwritten")
        self._raise("early overwrite", op, arr, elem, site,
                    f"{verb} {arr.space} array {arr.name!r} (element {elem}) at {describe(site)} while {what}")

    def _raise(self, hazard, op, arr, elem, site, text, kind=None):
        launch, t = self.launch, self.launch.cur
        block = (launch.blockIdx.x, launch.blockIdx.y, launch.blockIdx.z)
        message = (f"{kind or op.kind} hazard ({hazard}) in kernel {launch.name!r}, block {block}: thread {_xyz(t)} {text}")
        if self.report:
            key = (hazard, op.site, site)
            if key not in self._seen:
                self._seen.add(key)
                self.hazards.append(AsyncHazard(hazard, launch.name, block, location(*op.site), op.idx,
                                                location(*site), _xyz(t), arr.name, message))
            return
        raise AsyncHazardError(message, hazard=hazard, issue_location=location(*op.site), issue_thread=op.idx,
                               kernel=launch.name, block=block, thread=_xyz(t), location=location(*site))

    # -- events for the tracer -------------------------------------------------------------------------
    def _event(self, kind, what, t, op, group, site, array="", barrier=""):
        self.step += 1
        if self.events is not None:
            b = self.launch.blockIdx
            self.events.append(AsyncEvent(kind, what, (b.x, b.y, b.z), t.tid, op, group, self.step, t.barriers,
                                          location(*site), array, -1, barrier))

    # -- cp.async ------------------------------------------------------------------------------------------
    def issue_copy(self, dst, d, src, s, n, nsrc, site) -> None:
        """Thread ``cur`` copies ``nsrc`` elements ``src.flat[s:]`` to ``dst.flat[d:]`` and zero-fills the rest of ``n``."""
        t = self.launch.cur
        dv, dbase = self._flat(dst)
        sv, sbase = self._flat(src)
        if d < 0 or d + n > len(dv):
            _in_bounds(dst.reshape(dst.size), d, n)
        if nsrc and (s < 0 or s + nsrc > len(sv)):
            _in_bounds(src.reshape(src.size), s, nsrc)
        e0, s0 = dbase + d, sbase + s
        rid, sid = id(dst.root), id(src.root)
        self.num += 1
        op = InFlight("cp.async", self.num, t, site, (rid, e0, n), (sid, s0, nsrc), (dv, d, sv, s, nsrc, n), dst.name)
        fd = dst
        m = self.dst.get(rid)
        srcs = self.src.get(rid)
        for e in range(e0, e0 + n):
            if m:
                other = m.get(e)
                if other is not None and not self._visible(other, t) and (other.tid != t.tid or other.group is None):
                    self._overwrite(other, fd, e, site, "issues a cp.async that writes", destination=True)
            if srcs:
                other = srcs.get(e)
                if other is not None and not self._read_done(other, t):
                    self._overwrite(other, fd, e, site, "issues a cp.async that writes")
        m = self.dst.setdefault(rid, {})
        for e in range(e0, e0 + n):
            m[e] = op
        if nsrc:
            m = self.src.setdefault(sid, {})
            for e in range(s0, s0 + nsrc):
                m[e] = op
        st = self.state(t)
        st.pending.append(op)
        st.issued += 1
        self._event("cp.async", "issue", t, op.num, -1, site, dst.name)

    def _flat(self, x) -> tuple:
        """(a flat NumPy view of ``x``'s elements, the element of its allocation where it starts), kept per array:
        a kernel hands the same arrays to every copy."""
        got = self.flats.get(id(x))
        if got is None or got[0] is not x:
            a = x._a
            if a.flags.c_contiguous:
                got = (x, a.reshape(-1), x.offset // x.isz)
            else:  # the simulator's own view (a copy would be refused there, named)
                f = x.reshape(x.size)
                got = (x, f._a, f.offset // f.isz)
            self.flats[id(x)] = got
        return got[1], got[2]

    def commit(self, site) -> None:
        t = self.launch.cur
        st = self.state(t)
        group, ops = st.committed, st.pending
        st.committed += 1
        st.pending = []
        for op in ops:
            op.group = group
        st.groups.append((group, ops))
        self._event("cp.async", "commit", t, -1, group, site)
        if self.rng is not None and ops and self.rng.random() < 0.5:  # shuffle: this group lands early
            self._land(t, ops, site)

    def _land(self, t, ops, site):
        for op in ops:
            if not op.landed:
                op.land()
                self._drop(self.src, op.src, op)
                self._event(op.kind, "land", t, op.num, op.group, site, op.array)

    def wait(self, n: int, site) -> None:
        """``cp.async.wait_group n``: the thread's committed groups but the ``n`` most recent land and are waited for."""
        t = self.launch.cur
        st = self.state(t)
        while len(st.groups) > n:
            group, ops = st.groups.popleft()
            self.complete(t, ops, site)
        st.last_wait = (site, n, st.committed)
        self._event("cp.async", "wait", t, -1, st.committed - n - 1, site)

    def complete(self, t, ops, site) -> None:
        """``ops`` land (if they have not) and are waited for by thread ``t`` at ``site``: what a wait does."""
        self._land(t, ops, site)
        self.waited_for(t, self.state(t), ops, site)

    def waited_for(self, t, st, ops, site) -> None:
        """Mark ``ops`` waited for by ``t`` (visible to it now, to every thread after the next barrier), and their
        destinations written by ``t`` as far as a proxy fence is concerned."""
        for op in ops:
            op.wait_bar = t.barriers
            op.wait_site = site
            self.waited.append(op)
            if op.dst is not None:
                rid, e0, count = op.dst
                w = self.writes.setdefault(rid, {})
                rec = (t.tid, st.fences, t.barriers, op.site)
                for e in range(e0, e0 + count):
                    w[e] = rec

    # -- barriers and exits ---------------------------------------------------------------------------------
    def on_barrier(self) -> None:
        """A block-wide barrier completed: everything waited for before it is now visible to every thread."""
        for op in self.waited:
            self._drop(self.dst, op.dst, op)
            if op.kind != "cp.async":
                self._drop(self.src, op.src, op)
        self.waited = []

    def on_exit(self, t) -> None:
        """A thread returned: what it left in flight completes (the hardware finishes it)."""
        st = self.threads.get(t.tid)
        if st is None:
            return
        ops = st.pending + [op for _, g in st.groups for op in g]
        st.pending, st.groups = [], deque()
        self._land(t, ops, ("<exit>", 0))
        for op in ops:
            op.wait_bar, op.wait_site = t.barriers, ("<exit>", 0)
            self.waited.append(op)

    @staticmethod
    def _drop(maps, spans, op) -> None:
        """Forget ``op`` at its elements: ``spans`` is (root id, first, count) or a list of (root id, [elements])."""
        if spans is None:
            return
        for rid, elems in ([(spans[0], range(spans[1], spans[1] + spans[2]))] if isinstance(spans, tuple) else spans):
            m = maps.get(rid)
            if m:
                for e in elems:
                    if m.get(e) is op:
                        del m[e]

    # -- proxy fences and wgmma ----------------------------------------------------------------------------
    def fence(self) -> None:
        t = self.launch.cur
        st = self.state(t)
        st.fences += 1
        st.fence_bar = t.barriers

    def wgmma_reads(self, t, site, kind, arrays_elems, reads) -> None:
        """The tensor cores of warp ``t.warp`` will read ``arrays_elems`` ([(array, flat elements)]) until the
        wgmma_wait that covers this wgmma: check they have landed and are fenced, and keep them in flight."""
        st = self.state(t)
        self.num += 1
        for arr, elems in arrays_elems:
            rid = id(arr.root)
            m = self.dst.get(rid)
            w = self.writes.get(rid)
            for e in elems.tolist() if (m or w) else ():
                if m:
                    op = m.get(e)
                    if op is not None and not self._visible(op, t):
                        self._dst_hazard(op, arr, e, READ, site)
                rec = w.get(e) if w else None
                if rec is not None and not self._fenced(rec, t, st):
                    self._missing_fence(rec, arr, e, site, kind)
        op = InFlight(kind, self.num, t, site, None, None, None, arrays_elems[0][0].name)
        op.reads = reads
        spans = []
        for arr, elems in arrays_elems:
            rid = id(arr.root)
            m = self.src.setdefault(rid, {})
            lst = elems.ravel().tolist()
            for e in lst:
                m[e] = op
            spans.append((rid, lst))
        op.src = spans
        st.wg_ops.append(op)
        self._event(kind, "issue", t, op.num, -1, site, op.array)

    def _fenced(self, rec, t, st) -> bool:
        wtid, fences, bar = rec[0], rec[1], rec[2]
        if wtid == t.tid:
            return st.fences > fences
        writer = self.threads.get(wtid)
        return (writer is not None and writer.fences > fences) or st.fence_bar > bar

    def _missing_fence(self, rec, arr, elem, site, kind):
        wtid, wsite = rec[0], rec[3]
        writer = self.launch.threads[wtid]
        op = InFlight("generic write", 0, writer, wsite, None, None, None, arr.name)
        self._raise("missing fence", op, arr, elem, site,
                    f"issues a {kind} at {describe(site)} that reads {arr.space} array {arr.name!r} (element {elem}), "
                    f"written through the generic proxy by thread {op.idx} at {describe(wsite)} with no "
                    "fence.proxy.async (fence_proxy_async) since: the tensor cores read through the async proxy and "
                    "may not see the write. Fence after the write (or after the barrier that follows it)", kind)

    def wgmma_commit(self, t) -> None:
        st = self.state(t)
        for entry in st.wg_pending.values():
            if entry[2] is None:
                entry[2] = st.wg_groups
        for op in st.wg_ops:
            if op.group is None:
                op.group = st.wg_groups
        st.wg_groups += 1

    def wgmma_wait(self, t, n: int, site) -> list:
        """``wgmma.wait_group n``: the accumulators of the groups it covers are written; returns those wgmmas."""
        st = self.state(t)
        done = st.wg_groups - int(n)  # groups below this one are complete
        st.wg_done = max(st.wg_done, done)
        for key, (acc, values, group) in list(st.wg_pending.items()):
            if group is not None and group < done:
                for q, v in enumerate(values):
                    acc[q] = v
                del st.wg_pending[key]
        keep = []
        finished = []
        for op in st.wg_ops:
            if op.group is not None and op.group < done:
                finished.append(op)
                self._event(op.kind, "wait", t, op.num, op.group, site, op.array)
            else:
                keep.append(op)
        st.wg_ops = keep
        for op in finished:
            op.wait_bar, op.wait_site = t.barriers, site
            self.waited.append(op)
        return finished


def _hook_reads(hook, reads) -> None:
    # Called by wgmma and wgmma_wait: the tracer's hook reads the frame two up, which is theirs (an instruction of
    # gpukernels, so the reads are one access at the kernel line that called them).
    for x, e in reads:
        hook(x, e, READ)


# ---------------------------------------------------------------------------------------------------------------
# Which launches need the model: the kernel (or a device function it calls) names an asynchronous instruction.

#: ids of the simulator's asynchronous instructions (the functions below, and gpukernels._mma's wgmma) ...
ASYNC_OPS: set = set()
#: ... and of those that read shared memory through the async proxy or fence it (wgmma, fence.proxy.async)
PROXY_OPS: set = set()
_USES: dict = {}


def register(*fns, proxy: bool = False) -> None:
    ASYNC_OPS.update(id(f) for f in fns)
    if proxy:
        PROXY_OPS.update(id(f) for f in fns)


def uses_async(fn, ops: set = ASYNC_OPS) -> bool:
    """Whether ``fn`` or anything it calls by name (device functions, helpers, closures) is one of ``ops``.
    Asked once per kernel function."""
    key = (fn, id(ops))
    known = _USES.get(key)
    if known is None:
        known = _USES[key] = _scan(fn, set(), ops)
    return known


def _scan(fn, seen, ops) -> bool:
    fn = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn
    code = getattr(fn, "__code__", None)
    if code is None or id(fn) in seen:
        return False
    seen.add(id(fn))
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    g = getattr(fn, "__globals__", {})
    objs = [g[n] for n in names if n in g]
    objs += [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
    for obj in objs:
        if id(obj) in ops:
            return True
        if type(obj).__name__ == "module":
            if any(id(getattr(obj, n, None)) in ops for n in names):
                return True
        elif isinstance(obj, dict):
            if any(id(v) in ops or _scan(v, seen, ops) for v in obj.values() if callable(v)):
                return True
        elif callable(obj) and _scan(obj, seen, ops):
            return True
    return False


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
        return True
    except ValueError:
        return False


def model() -> AsyncModel:
    """The running launch's model; made on first use where the scan did not foresee one (its accesses are then
    checked only from here on)."""
    launch = _ctx.LAUNCH
    if launch is None:
        raise RuntimeError("asynchronous copies and wgmma run only inside a kernel on gpukernels' simulator")
    m = launch.async_model
    if m is None:
        m = launch.start_async()
    return m


# ---------------------------------------------------------------------------------------------------------------
# The instructions, as the simulator runs them (gpukernels._intrinsics and gpukernels._mma hand these out)


def _site() -> tuple:
    f = user_frame(sys._getframe(2))
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("<unknown>", 0)


def _copy(dst, d, src, s, nbytes, count):
    m = model()
    size = np.dtype(dst.dtype).itemsize
    nsrc = min(count, -(-int(nbytes) // size)) if nbytes else 0
    site = _site_of(sys._getframe(2))
    m.issue_copy(dst, int(d), src, int(s), count, nsrc, site)
    hook = m.launch.trace_hook
    if hook is not None:  # the tracer sees the copy where it is issued, as one instruction of the kernel's line
        _trace_copy(hook, dst, int(d), src, int(s), count, nsrc)


def _site_of(frame) -> tuple:
    f = user_frame(frame)
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("<unknown>", 0)


def _trace_copy(hook, dst, d, src, s, count, nsrc):
    fd, fs = dst.reshape(dst.size), src.reshape(src.size)
    e0 = (fd.offset + d * fd.st[0]) // fd.isz
    s0 = (fs.offset + s * fs.st[0]) // fs.isz
    for q in range(count):
        if q < nsrc:
            hook(fs, s0 + q, READ)
        hook(fd, e0 + q, WRITE)


def copy_async(dst, d, src, s, nbytes):
    """``cp.async.ca.shared.global`` of 4 bytes (one element; ``nbytes`` 0: a zero)."""
    _copy(dst, d, src, s, nbytes, 1)


def copy_async16(dst, d, src, s, nbytes):
    """``cp.async.cg.shared.global`` of 16 bytes: 4 float32 (``nbytes`` below 16: zeros past it)."""
    _copy(dst, d, src, s, nbytes, 4)


def copy_async16_f16(dst, d, src, s, nbytes):
    """``cp.async.cg.shared.global`` of 16 bytes: 8 float16 (``nbytes`` below 16: zeros past it)."""
    _copy(dst, d, src, s, nbytes, 8)


def async_commit():
    """``cp.async.commit_group``: the thread's copies since the last commit become one group."""
    model().commit(_site())


def async_wait(n):
    """``cp.async.wait_group n``: wait until at most ``n`` of the thread's committed groups are in flight."""
    model().wait(int(n), _site())


def async_wait_all():
    """``cp.async.wait_all``: commit, then wait for every group."""
    m = model()
    site = _site()
    m.commit(site)
    m.wait(0, site)


def fence_proxy_async():
    """``fence.proxy.async.shared::cta``: the thread's generic-proxy accesses to shared memory before it are ordered
    with async-proxy accesses (wgmma's operand reads, TMA) after it."""
    model().fence()


def wgmma_fence():
    """``wgmma.fence``: orders the warpgroup's register accesses with its wgmma (registers: nothing to model)."""


def wgmma_commit():
    m = model()
    m.wgmma_commit(m.launch.cur)


def _sim_wgmma_wait(n):
    # (named so: the tracer knows this frame's reads as the wgmma's, repeated where it completes)
    m = model()
    hook = m.launch.trace_hook
    for op in m.wgmma_wait(m.launch.cur, n, _site()):
        if hook is not None and op.reads:
            _hook_reads(hook, op.reads)  # the tensor cores' reads end here, at the kernel's wgmma_wait


register(copy_async, copy_async16, copy_async16_f16, async_commit, async_wait, async_wait_all)
register(fence_proxy_async, wgmma_fence, wgmma_commit, _sim_wgmma_wait, proxy=True)
