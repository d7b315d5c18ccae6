"""A TMA ring as the tracer saw it run: each use of each stage, read from the simulator's record of its mbarriers,
copies and wgmmas (`gpukernels.trace.Trace.ring`, drawn by `gpukernels.viz.ring_timeline` and the classroom page).

The Hopper steps of the tensor-core lesson (`gpukernels.tensor_core._ring`) fill stage ``s`` of a ring again and
again; its *full* barrier ``full[s]`` completes one phase per fill (the producer's ``arrive.expect_tx`` and the
copies' bytes), and, from step 8 on, its *empty* barrier ``empty[s]`` one phase per release (each consumer warp's
arrival). So use ``u`` of stage ``s`` is phase ``u`` of both, and the producer's wait before it is the wait for phase
``u - 1`` of ``empty[s]`` (phase -1: the fresh barrier, which counts as completed). A wgmma belongs to the use its
thread last waited for on a full barrier.

Positions are the block's ``step``: the order in which the simulator ran the asynchronous events (one clock for
every thread of the block). Nothing here is measured time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class StageUse:
    """Use ``use`` of stage ``stage``: what happened to it and when (each an event's ``step``)."""

    stage: int
    use: int  # the phase of full[stage] this fill completes (and of empty[stage] its release)
    index: int = -1  # use * stages + stage: the k tiles put through the ring before this one (the ring's position)
    empty_wait: tuple | None = None  # the producer's wait for the release before it: (asked, satisfied, at once)
    armed: int | None = None  # the producer's arrive.expect_tx on full[stage]
    nbytes: int = 0  # ... and the bytes it announced
    issued: list = field(default_factory=list)  # each TMA copy issued on this phase of full[stage]
    landed: list = field(default_factory=list)  # each copy's bytes written into shared memory
    full: int | None = None  # full[stage]'s phase completed: every byte landed
    waits: list = field(default_factory=list)  # each consumer thread's wait for it: (step, thread, at once)
    wgmma: list = field(default_factory=list)  # each wgmma issued on it: (step, thread)
    released: list = field(default_factory=list)  # each consumer's arrival on empty[stage]: (step, thread)
    freed: int | None = None  # empty[stage]'s phase completed: the producer may refill the stage

    @property
    def phase_bit(self) -> int:
        """The parity every wait for this use names: flips each time round the ring."""
        return self.use & 1


def _stage(name: str, prefix: str):
    m = re.fullmatch(rf"{re.escape(prefix)}\[(\d+)\]", name)
    return int(m.group(1)) if m else None


def stage_uses(events, launch: int = 0, block=(0, 0, 0), full: str = "full", empty: str = "empty") -> list:
    """[StageUse] of ``block`` of ``launch``, in the ring's order (``index``), from `Trace.async_events()`;
    ``full`` and ``empty``: the kernel's names of its barrier arrays. [] for a launch without TMA copies."""
    mine = sorted((e for e in events if e.launch == launch and tuple(e.block) == tuple(block)), key=lambda e: e.step)
    uses: dict = {}
    done: dict = {}  # (barrier, phase) -> step it completed
    pending: dict = {}  # (empty stage, phase) -> the StageUse whose producer's wait is parked on it
    last_full: dict = {}  # thread -> the StageUse it last waited for

    def use(s, u) -> StageUse:
        if (s, u) not in uses:
            uses[(s, u)] = StageUse(s, u)
        return uses[(s, u)]

    for e in mine:
        bar = e.barrier
        if e.kind == "mbarrier":
            s_full, s_empty = _stage(bar, full), _stage(bar, empty)
            if e.what == "complete":
                done[(bar, e.group)] = e.step
                if s_full is not None:
                    use(s_full, e.group).full = e.step
                elif s_empty is not None:
                    use(s_empty, e.group).freed = e.step
                    waiting = pending.pop((s_empty, e.group), None)
                    if waiting is not None:
                        asked = waiting.empty_wait[0]
                        waiting.empty_wait = (asked, e.step, False)
            elif e.what == "arrive":
                if s_full is not None:
                    u = use(s_full, e.group)
                    u.armed, u.nbytes = e.step, e.op
                elif s_empty is not None:
                    use(s_empty, e.group).released.append((e.step, e.thread))
            elif e.what == "wait":
                at_once = e.group < 0 or (bar, e.group) in done
                if s_full is not None:
                    u = use(s_full, e.group)
                    u.waits.append((e.step, e.thread, at_once))
                    last_full[e.thread] = u
                elif s_empty is not None:  # the producer, before it fills the stage's next use
                    u = use(s_empty, e.group + 1)
                    u.empty_wait = (e.step, e.step if at_once else None, at_once)
                    if not at_once:
                        pending[(s_empty, e.group)] = u
        elif e.kind == "tma" and _stage(bar, full) is not None:
            u = use(_stage(bar, full), e.group)
            (u.issued if e.what == "issue" else u.landed).append(e.step)
        elif e.kind.startswith("wgmma") and e.what == "issue" and e.thread in last_full:
            last_full[e.thread].wgmma.append((e.step, e.thread))
    if not any(u.issued for u in uses.values()):
        return []
    stages = 1 + max(s for s, _ in uses)
    for (s, u), item in uses.items():
        item.index = u * stages + s
    return sorted(uses.values(), key=lambda item: item.index)


def epilogues(uses, k_tiles: int) -> list:
    """[(tile, first step, last step)] of the consumers' epilogue between tile and tile + 1 of C (a persistent
    block's: ``k_tiles`` uses of the ring per tile): from the first release of a tile's last k tile, as the first
    consumer warp starts to store its part of C, to the last consumer's wait for the next tile's first k tile."""
    out = []
    by_index = {u.index: u for u in uses}
    for i in range(k_tiles - 1, max(by_index, default=-1), k_tiles):
        last, first = by_index.get(i), by_index.get(i + 1)
        if last and first and last.released and first.waits:
            out.append((i // k_tiles, min(s for s, _ in last.released), max(s for s, _, _ in first.waits)))
    return out


def clock(uses, marks=()) -> dict:
    """step -> its rank among the steps a timeline of ``uses`` draws (and ``marks``, the epilogues' edges): an axis
    on which every drawn event gets the same room -- the simulated order, not a time."""
    steps = set(marks)
    for u in uses:
        if u.empty_wait:
            steps.update(s for s in u.empty_wait[:2] if s is not None)
        steps.update(u.issued + [s for s, _ in u.wgmma] + [s for s, _ in u.released])
        steps.update(s for s in (u.full, u.freed) if s is not None)
        if u.waits:
            steps.add(min(s for s, _, _ in u.waits))
    return {s: i for i, s in enumerate(sorted(steps))}
