"""Process-wide settings of the simulator and what the last launch did."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace


NEGATIVE_INDEX = ("error", "wrap")
ASYNC_HAZARDS = ("error", "report")


@dataclass(frozen=True)
class SimConfig:
    """How the simulator schedules threads.

    seed        -- seeds the shuffle mode's random choices; ``None`` draws a fresh seed per launch (it is
                   reported in ``last_launch().seed`` so a failing run can be replayed).
    shuffle     -- run other interleavings on purpose: random block order, random thread order at the start
                   and at every barrier, and (with probability ``preempt``) a switch to another thread at a
                   memory access. Off: thread-id order, one thread at a time between barriers.
    preempt     -- probability of a switch at each array element access in shuffle mode.
    timeout_s   -- a launch in which no thread switches to another for this long (an endless loop, a thread
                   spinning on memory that another thread should write) raises KernelTimeoutError; a long
                   but healthy launch is never cut short (``None`` or 0: no limit).
    record_schedule -- keep the full list of (block, thread id) switches in ``last_launch().schedule``.
    negative_index -- what a negative array index computed at run time does (``a[i - 1]`` at ``i = 0``):
                   ``"error"`` (default) raises OutOfBoundsError, since it is almost always a bug; ``"wrap"``
                   counts it from the end, as Numba's GPU code does silently. Literal ones (``a[-1]``) always
                   count from the end, as in Python.
    async_hazards -- what memory used while a cp.async or wgmma on it is still in flight does (an early read,
                   an early overwrite, a missing commit, fence or wait; ``gpukernels.sim._async``): ``"error"``
                   (default) raises AsyncHazardError naming both lines; ``"report"`` lets the kernel run on with the
                   values a GPU may give it and lists the hazards in ``last_launch().async_hazards``.
    """

    seed: int | None = 0
    shuffle: bool = False
    preempt: float = 0.05
    timeout_s: float | None = 60.0
    record_schedule: bool = False
    negative_index: str = "error"
    async_hazards: str = "error"


@dataclass
class LaunchInfo:
    """What the last simulated launch did (``gpukernels.sim.last_launch()``)."""

    kernel: str
    grid: tuple
    block: tuple
    seed: int
    shuffle: bool
    switches: int
    schedule_digest: int
    seconds: float
    schedule: list | None = field(default=None, repr=False)
    async_hazards: list = field(default_factory=list)  # [AsyncHazard] under configure(async_hazards="report")


def _from_env() -> SimConfig:
    cfg = SimConfig()
    if os.environ.get("GPUKERNELS_SIM_SHUFFLE", "0") not in ("", "0"):
        cfg = replace(cfg, shuffle=True, seed=None)
    if os.environ.get("GPUKERNELS_SIM_SEED"):
        cfg = replace(cfg, seed=int(os.environ["GPUKERNELS_SIM_SEED"]))
    if os.environ.get("GPUKERNELS_SIM_NEGATIVE_INDEX"):
        cfg = replace(cfg, negative_index=os.environ["GPUKERNELS_SIM_NEGATIVE_INDEX"].strip().lower())
    if os.environ.get("GPUKERNELS_SIM_ASYNC_HAZARDS"):
        cfg = replace(cfg, async_hazards=os.environ["GPUKERNELS_SIM_ASYNC_HAZARDS"].strip().lower())
    if os.environ.get("GPUKERNELS_SIM_TIMEOUT"):
        cfg = replace(cfg, timeout_s=float(os.environ["GPUKERNELS_SIM_TIMEOUT"]))
    return cfg


CONFIG = _from_env()
if CONFIG.negative_index not in NEGATIVE_INDEX:
    raise ValueError(f"GPUKERNELS_SIM_NEGATIVE_INDEX must be one of {', '.join(NEGATIVE_INDEX)}; "
                     f"got {CONFIG.negative_index!r}")
TRACER = None  # set by gpukernels.trace while tracing
#: Called as WATCH(launch) after each block of a launch and every 16 thread switches within one (the launch's
#: ``blocks_done``, ``nblocks`` and ``started`` say how far it is): the command line's progress bar and time
#: limit (gpukernels._simtime). It may raise to stop the launch.
WATCH = None
LAST: LaunchInfo | None = None


def record(launch) -> None:
    global LAST
    LAST = LaunchInfo(
        kernel=launch.name,
        grid=launch.grid,
        block=launch.block,
        seed=launch.seed,
        shuffle=launch.shuffle,
        switches=launch.switches,
        schedule_digest=launch.digest,
        seconds=getattr(launch, "seconds", 0.0),
        schedule=launch.schedule,
        async_hazards=list(launch.async_model.hazards) if getattr(launch, "async_model", None) is not None else [],
    )
