"""Named barriers on the simulator: the twins of `gpukernels._named_barrier`'s ``bar.sync`` and ``bar.arrive``.

Each barrier number of a block is a :class:`NamedBarrier`: the count its current use was given (by its first
arrival), the threads that have arrived in that use, and the threads parked in ``named_barrier_sync`` until it
completes. A use completes when ``count`` threads have arrived -- by ``sync`` or ``arrive``, in any order -- and then
every parked thread goes on and the barrier starts its next use, as on a GPU.

Checked, each an error naming the kernel's line:

* the barrier number (1 to 15: 0 is ``cuda.syncthreads()``'s) and the count (a multiple of 32 from 32 to 1024, and at
  most the block's threads: a count no block can reach is a hang);
* whole warps: both instructions are warp collectives here -- every lane of the warp executes the same one with the
  same number and count (a lane missing or another lane elsewhere is a ``WarpMaskError``, as for ``cuda.shfl_sync``);
* one count per use: an arrival whose count differs from the one the use began with names both lines;
* **deadlock**: when nothing can run and threads are parked at a named barrier, the launch fails with an
  ``AsyncHazardError`` (hazard ``deadlock``) that says, for each barrier waited at, which warps wait at which line, how
  many of its ``count`` arrivals came and from which lines, and where each warp is that has not arrived (parked on an
  mbarrier, at a ``cuda.syncthreads()``, or exited); threads parked on mbarriers at the same time are described after,
  by `gpukernels.sim._tma`.

Arrivals left in a use that never completes when the block ends are not an error (a block's barriers start fresh).
The twins order who runs when, not memory: a kernel that passed data through shared memory guarded only by a named
barrier would need the race check to know of it, and none here does (their data moves through mbarriers).
"""

from __future__ import annotations

import sys

from . import _async, _ctx
from ._source import describe, location

_KIND = "named_barrier"  # the warp collective both instructions are, in the launch's counts


class NamedBarrier:
    """One barrier number of a block: its current use's count (None before the first arrival), the threads arrived,
    the threads parked in it, where the arrivals came from (warp -> (instruction, site)), and the uses completed."""

    __slots__ = ("number", "count", "arrived", "waiters", "came", "first", "uses")

    def __init__(self, number: int):
        self.number, self.uses = number, 0
        self._reset()

    def _reset(self) -> None:
        self.count, self.arrived, self.first = None, 0, None
        self.waiters: list = []  # (thread, site)
        self.came: dict = {}  # warp -> (instruction, site)


class NamedState:
    """The named barriers of one block."""

    def __init__(self, model, block):
        self.model, self.block = model, block
        self.bars: dict = {}  # number -> NamedBarrier
        self.parked = 0


def _state() -> NamedState:
    model = _async.model()
    st = getattr(model, "named", None)
    if st is None or st.block is not model.launch.blockIdx:  # a new block: fresh barriers
        st = model.named = NamedState(model, model.launch.blockIdx)
    return st


def _collective(vals: dict) -> dict:
    # vals[lane]: (instruction, number, count); .aligned: every lane of the warp executes the same one
    first = vals[0]
    odd = sorted(lane for lane, v in vals.items() if v != first)
    if odd:
        other = vals[odd[0]]
        raise ValueError(f"named barrier: the lanes of a warp executed different ones (bar.{first[0]} {first[1]}, "
                         f"{first[2]} in lane 0, bar.{other[0]} {other[1]}, {other[2]} in lane {odd[0]}): bar.sync and "
                         "bar.arrive are .aligned, every lane of the warp executes the same one")
    return dict.fromkeys(vals)


def _op(op: str, number, count) -> None:
    from .._named_barrier import BARRIERS, count_error

    launch = _ctx.LAUNCH
    name = f"named_barrier_{op}"
    if launch is None:
        raise RuntimeError(f"{name} runs only inside a kernel on gpukernels' simulator")
    frame = sys._getframe(2)  # the kernel's line
    site = _async._site_of(frame)
    if isinstance(number, bool) or not isinstance(number, int) or number not in BARRIERS:
        raise ValueError(f"{name}({number!r}, {count!r}) at {describe(site)}: the barrier number must be 1 to 15 "
                         "(barrier 0 is cuda.syncthreads()'s)")
    why = count_error(name, count)
    if why:
        raise ValueError(f"{why}, at {describe(site)}")
    if count > launch.nthreads:
        raise ValueError(f"{name}({number}, {count}) at {describe(site)}: the block has {launch.nthreads} threads, so "
                         f"{count} can never arrive: the barrier would never complete (a hang on a GPU)")
    launch.warp_op(frame, _KIND, 0xFFFFFFFF, (op, number, count), 0, 32)
    st = _state()
    t = launch.cur
    b = st.bars.get(number)
    if b is None:
        b = st.bars[number] = NamedBarrier(number)
    if b.count is None:
        b.count, b.first = count, site
    elif b.count != count:
        raise ValueError(f"{name}({number}, {count}) at {describe(site)} in warp {t.warp}, but this use of barrier "
                         f"{number} began with a count of {b.count} at {describe(b.first)}: every arrival in one use "
                         "of a named barrier gives the same count")
    b.arrived += 1
    b.came[t.warp] = (op, site)
    model = st.model
    if not t.lane:  # the tracer's record, read by gpukernels._pplog: each warp's sync or arrive, each use completed
        model._event(_KIND, op, t, number, b.uses, site, barrier=f"bar[{number}]")
    if op == "sync":
        b.waiters.append((t, site))
    if b.arrived == b.count:  # complete: the parked threads go on, and the barrier starts its next use
        model._event(_KIND, "complete", t, number, b.uses, site, barrier=f"bar[{number}]")
        waiters = b.waiters
        b.uses += 1
        b._reset()
        for w, _ in waiters:
            if w is not t:
                st.parked -= 1
                w.state = _READY
                w.result = None
                launch.ready.append(w)
        return
    if op == "sync":  # park until the use completes
        st.parked += 1
        model.on_stuck = lambda: _stuck(st)  # (after any mbarrier's: this report includes theirs)
        t.state = _PARKED
        t.frame = frame
        launch.sched.switch()


def named_barrier_sync(bar, count):
    """``bar.sync bar, count``: arrive at named barrier ``bar`` and wait until ``count`` threads have arrived."""
    _op("sync", bar, count)


def named_barrier_arrive(bar, count):
    """``bar.arrive bar, count``: arrive at named barrier ``bar`` without waiting."""
    _op("arrive", bar, count)


# -- when nothing can run --------------------------------------------------------------------------------------


def _warps(ws) -> str:
    ws = sorted(ws)
    runs, start = [], None
    for i, w in enumerate(ws):
        if start is None:
            start = w
        if i + 1 == len(ws) or ws[i + 1] != w + 1:
            runs.append(str(start) if start == w else f"{start}-{w}")
            start = None
    return ("warp " if len(ws) == 1 else "warps ") + ", ".join(runs)


def _where(t, st) -> str:
    """Where a thread that has not arrived is, in words."""
    if t.state == _DONE:
        return "exited"
    if t.state == _PARKED:
        tma = getattr(st.model, "tma", None)
        if tma is not None:
            for b in tma.bars.values():
                for w, parity, site in b.waiters:
                    if w is t:
                        return f"waiting on mbarrier {b.name} at {describe(site)}"
        for b in st.bars.values():
            for w, site in b.waiters:
                if w is t:
                    return f"waiting at named barrier {b.number} at {describe(site)}"
    return t.where()


def _stuck(st: NamedState):
    """Threads parked at named barriers that will never complete (and, maybe, others on mbarriers): a hang on a GPU."""
    model = st.model
    launch = model.launch
    tma = getattr(model, "tma", None)
    tma_error = None
    if tma is not None and tma.block is launch.blockIdx:
        from ._tma import _stuck as tma_stuck

        tma_error = tma_stuck(tma)
    if not st.parked:
        return tma_error
    parts, first = [], None
    by_warp: dict = {}
    for t in launch.threads:
        by_warp.setdefault(t.warp, []).append(t)
    for b in sorted(st.bars.values(), key=lambda b: b.number):
        if not b.waiters:
            continue
        t0, site = b.waiters[0]
        first = first or (t0, site)
        waiting = {t.warp for t, _ in b.waiters}
        sites = sorted({s for _, s in b.waiters})
        came: dict = {}
        for w, (op, s) in b.came.items():
            came.setdefault((op, s), []).append(w)
        arrivals = "; ".join(f"{_warps(ws)} by named_barrier_{op} at {describe(s)}" for (op, s), ws in came.items())
        missing: dict = {}
        for w, ts in by_warp.items():
            if w not in b.came:
                missing.setdefault(_where(ts[0], st), []).append(w)
        elsewhere = "; ".join(f"{_warps(ws)}: {where}" for where, ws in missing.items())
        parts.append(f"{_warps(waiting)} wait at named barrier {b.number} at "
                     + " and ".join(describe(s) for s in sites)
                     + f" for {b.count} threads: {b.arrived} have arrived ({arrivals}), {b.count - b.arrived} never "
                       f"come" + (f" -- the warps that have not arrived: {elsewhere}" if elsewhere else ""))
    t0, site = first
    block = (launch.blockIdx.x, launch.blockIdx.y, launch.blockIdx.z)
    text = (f"named barrier hazard (deadlock) in kernel {launch.name!r}, block {block}: " + "; ".join(parts)
            + ". On a GPU the kernel hangs here. A named barrier completes when `count` threads have arrived at it "
              "(bar.sync or bar.arrive): is the count the number of threads that take part, and does every group "
              "that should arrive arrive each time?"
            + (f" Besides: {tma_error}" if tma_error is not None else ""))
    return _async.AsyncHazardError(text, hazard="deadlock", issue_location=None, issue_thread=None, kernel=launch.name,
                                   block=block, thread=(t0.idx.x, t0.idx.y, t0.idx.z), location=location(*site))


from ._launch import DONE as _DONE, READY as _READY  # noqa: E402
from ._tma import _PARKED  # noqa: E402  (the state of a thread parked on an asynchronous wait)
from .api import COLLECTIVES  # noqa: E402

COLLECTIVES[_KIND] = _collective
_async.register(named_barrier_sync, named_barrier_arrive)
