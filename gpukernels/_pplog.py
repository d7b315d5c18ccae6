"""Two consumer warpgroups as the tracer saw them run: for each K/V tile, when each warpgroup issued its products,
when it ran its softmax, and the turns its named barriers handed back and forth -- read from the simulator's record
of the run (`gpukernels.trace.Trace.async_events`, drawn by `gpukernels.viz.pingpong_timeline`).

The attention lesson's steps 10 and 11 (`gpukernels.attention.k10_warp_specialized`, `k11_ping_pong`) give each
consumer warpgroup (1 and 2; warpgroup 0 is the producer) 64 query rows and walk every K/V tile: S = Q K^T by wgmmas
reading shared memory (``wgmma_ss_k``), the online softmax on the threads, O += P V by wgmmas with P in registers
(``wgmma_rs``). The simulator records each warp's wgmma as it is issued and again when a ``wgmma_wait`` covers it
(the register form's once per warpgroup, by its first warp); the k-th commit group of S's wgmmas a warp issued is
tile k's S, and the same for P V.

A warp's **softmax** of tile t -- with the rest of its work on the threads, rescaling O and packing P -- runs from
the wait that tells it S(t) is done to the first of: its next wait for operands (an mbarrier's full phase), its next
wait for a turn (``named_barrier_sync``) or its next wgmma. Every position is lane 0's, read per warp.

Step 11's **turns**: the simulator records each warp's ``named_barrier_sync`` and ``named_barrier_arrive`` (kind
"named_barrier", ``op`` the barrier's number, ``group`` its use) and each use completed (`gpukernels.sim.
_named_barrier`). A warp's n-th sync asks for turn n of its warpgroup; the turn is granted when that use of the
barrier completes; the warp's arrivals on another barrier before its next sync hand the turn on.

Positions are the block's ``step``: the order in which the simulator ran these events (one clock for every thread
of the block). Nothing here is measured time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

S_KIND, PV_KIND = "wgmma_ss_k", "wgmma_rs"  # S = Q K^T from shared memory; O += P V with P in registers
NAMED = "named_barrier"


@dataclass
class TileWork:
    """What consumer warpgroup ``warpgroup`` did with K/V tile ``tile``; each list holds (step, warp)."""

    warpgroup: int
    tile: int
    s_issued: list = field(default_factory=list)  # each of S's wgmmas issued
    s_done: list = field(default_factory=list)  # each wgmma_wait that found one of them done
    softmax: list = field(default_factory=list)  # (first step, last step, warp): each warp's softmax of the tile
    pv_issued: list = field(default_factory=list)  # each of P V's wgmmas issued
    pv_done: list = field(default_factory=list)  # ... and found done


@dataclass
class Turn:
    """Turn ``turn`` of consumer warpgroup ``warpgroup`` at the tensor cores (step 11), waited for at named barrier
    ``barrier``."""

    warpgroup: int
    turn: int
    barrier: int
    asked: list = field(default_factory=list)  # (step, warp): each warp's named_barrier_sync
    granted: int | None = None  # the step that use of the barrier completed: the turn begins
    passed: list = field(default_factory=list)  # (step, warp, barrier): its arrivals that hand the turn on


@dataclass
class Copy:
    """A TMA copy the producer issued: ``tensor`` (Q, K or V, from the name of its full barrier), its ``tile`` and
    the ``stage`` of the tensor's ring it fills; the steps it was issued and landed at."""

    tensor: str
    tile: int
    stage: int
    issued: int
    landed: int | None = None


@dataclass
class Schedule:
    """One block's consumer warpgroups: ``work`` ([TileWork], by warpgroup then tile), ``turns`` ([Turn]: none
    without named barriers), ``handoffs`` ((step, warpgroup, warp, barrier): arrivals before a warp's first turn,
    the one that lets the other warpgroup start), ``copies`` ([Copy]) and ``warps`` (warpgroup -> its warps)."""

    work: list
    turns: list
    handoffs: list
    copies: list
    warps: dict


def _full(name: str):
    m = re.fullmatch(r"(\w+)_full\[(\d+)\]", name)
    return (m.group(1).upper(), int(m.group(2))) if m else None


def schedule(events, launch: int = 0, block=(0, 0, 0)) -> Schedule:
    """The `Schedule` of ``block`` of ``launch`` from `Trace.async_events()`."""
    mine = sorted((e for e in events if e.launch == launch and tuple(e.block) == tuple(block)), key=lambda e: e.step)
    lane0 = [e for e in mine if e.thread % 32 == 0]
    wgmmas = [e for e in lane0 if e.kind in (S_KIND, PV_KIND) and e.thread >= 128]
    group = {(e.thread, e.op): e.group for e in wgmmas if e.what == "wait"}
    warps: dict = {}
    for e in lane0:
        if e.thread >= 128 and (e.kind in (S_KIND, PV_KIND, NAMED)):
            warps.setdefault(e.thread // 128, set()).add(e.thread // 32)
    warps = {wg: sorted(ws) for wg, ws in sorted(warps.items())}

    # each warp's commit groups of S and of P V, in order: the k-th is tile k's
    work: dict = {}
    tile_of: dict = {}  # (warp, kind, commit group) -> tile
    for e in wgmmas:
        if e.what != "issue":
            continue
        warp, g = e.thread // 32, group.get((e.thread, e.op))
        key = (warp, e.kind)
        seen = tile_of.setdefault(key, {})
        if g not in seen:
            seen[g] = len(seen)
        tile = seen[g]
        w = work.setdefault((e.thread // 128, tile), TileWork(e.thread // 128, tile))
        (w.s_issued if e.kind == S_KIND else w.pv_issued).append((e.step, warp))
    for e in wgmmas:
        if e.what == "wait":
            warp = e.thread // 32
            tile = tile_of.get((warp, e.kind), {}).get(e.group)
            if tile is not None:
                w = work[(e.thread // 128, tile)]
                (w.s_done if e.kind == S_KIND else w.pv_done).append((e.step, warp))

    # each warp's softmax: from the wait that found S(t) done to its next wait for operands or a turn, or wgmma
    ends: dict = {}  # warp -> the steps that end a softmax
    for e in lane0:
        if ((e.kind == "mbarrier" and e.what == "wait" and _full(e.barrier)) or (e.kind == NAMED and e.what == "sync")
                or (e.kind in (S_KIND, PV_KIND) and e.what == "issue")):
            ends.setdefault(e.thread // 32, []).append(e.step)
    for w in work.values():
        last: dict = {}
        for step, warp in w.s_done:
            last[warp] = max(step, last.get(warp, step))
        for warp, start in sorted(last.items()):
            end = min((s for s in ends.get(warp, ()) if s > start), default=None)
            if end is not None:
                w.softmax.append((start, end, warp))

    # the turns: each warp's n-th sync asks for turn n; arrivals before its next sync hand the turn on
    turns: dict = {}
    handoffs = []
    done = {(e.op, e.group): e.step for e in mine if e.kind == NAMED and e.what == "complete"}
    count: dict = {}  # warp -> the syncs it has made
    for e in (e for e in lane0 if e.kind == NAMED and e.what in ("sync", "arrive")):
        warp, wg = e.thread // 32, e.thread // 128
        if e.what == "sync":
            n = count[warp] = count.get(warp, -1) + 1
            t = turns.setdefault((wg, n), Turn(wg, n, e.op))
            t.asked.append((e.step, warp))
            t.granted = done.get((e.op, e.group), t.granted)
        elif warp in count:
            turns[(wg, count[warp])].passed.append((e.step, warp, e.op))
        else:
            handoffs.append((e.step, wg, warp, e.op))

    # the producer's copies: tile = phase x stages + stage of the full barrier they complete
    issued = [e for e in mine if e.kind == "tma" and e.what == "issue" and _full(e.barrier)]
    stages = {}
    for e in issued:
        name, s = _full(e.barrier)
        stages[name] = max(stages.get(name, 0), s + 1)
    landed = {e.op: e.step for e in mine if e.kind == "tma" and e.what == "land"}
    copies = []
    for e in issued:
        name, s = _full(e.barrier)
        copies.append(Copy(name, e.group * stages[name] + s, s, e.step, landed.get(e.op)))
    return Schedule(sorted(work.values(), key=lambda w: (w.warpgroup, w.tile)),
                    sorted(turns.values(), key=lambda t: (t.warpgroup, t.turn)), handoffs, copies, warps)


def clock(sched: Schedule) -> dict:
    """step -> its rank among the steps a timeline of ``sched`` draws (copies issued and landed, wgmmas issued and
    found done, softmax edges, turns asked, granted and handed on): an axis on which every drawn event gets the same
    room -- the simulated order, not a time (`gpukernels.viz.pingpong_timeline`, the classroom page's timeline)."""
    steps = {c.issued for c in sched.copies} | {c.landed for c in sched.copies if c.landed is not None}
    for w in sched.work:
        steps.update(s for s, _ in w.s_issued + w.s_done + w.pv_issued + w.pv_done)
        steps.update(s for a, b, _ in w.softmax for s in (a, b))
    for turn in sched.turns:
        steps.update(s for s, _ in turn.asked)
        steps.update(s for s, _, _ in turn.passed)
        if turn.granted is not None:
            steps.add(turn.granted)
    steps.update(s for s, _, _, _ in sched.handoffs)
    return {s: i for i, s in enumerate(sorted(steps))}


def under_softmax(sched: Schedule) -> dict:
    """(warpgroup, tile) -> [(step, other warpgroup, "S" or "PV")]: the wgmmas the other warpgroups issued while
    every warp of this one was in its softmax of the tile (strictly between each warp's first and last step)."""
    issues = [(s, w.warpgroup, "S") for w in sched.work for s, _ in w.s_issued]
    issues += [(s, w.warpgroup, "PV") for w in sched.work for s, _ in w.pv_issued]
    out = {}
    for w in sched.work:
        spans = w.softmax
        if len(spans) < len(sched.warps.get(w.warpgroup, ())) or not spans:
            out[(w.warpgroup, w.tile)] = []
            continue
        lo, hi = max(a for a, _, _ in spans), min(b for _, b, _ in spans)
        out[(w.warpgroup, w.tile)] = sorted(i for i in issues if i[1] != w.warpgroup and lo < i[0] < hi)
    return out
