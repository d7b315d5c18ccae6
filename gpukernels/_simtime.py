"""How long the simulator will take, said before and while it runs (``gpukernels demo`` and ``gpukernels trace``).

The simulator runs every GPU thread in Python: a launch a GPU finishes in a millisecond can take hours here,
and a size typed without thinking (``--size 1024``) must not start a run that silently takes that long.

* Before any array is made, `check_size` refuses a shape whose arrays would not fit in this machine's memory, or
  (on the simulator) whose work could not finish within `limit_s` even at the simulator's best speed --
  ``FASTEST_S_PER_FLOP`` is a lower bound of its cost, so a shape refused here is hopeless, never merely slow.
* While it runs, `watch` draws a progress bar of each launch's blocks with the time the launch projects, says
  once (one line) when the run will be long, and stops a launch whose projected time passes `limit_s`, naming
  the option, the projection and what to do instead (a UsageError: one line, exit status 2).

The limit is ``GPUKERNELS_SIM_LIMIT`` seconds (default 600; 0 turns it off), for who really wants to wait.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager

from .cli import UsageError

LIMIT_S = 600.0
NOTE_S = 20.0  # a run projected to take longer than this is announced (one line)
#: Seconds per FLOP of the cheapest lesson step on the simulator, divided by four for faster machines: measured
#: 2.0e-7 (tensor_core.pipelined at 64^3) to 3.8e-5 (softmax.split_row at 16x512) on two busy cores, untraced.
FASTEST_S_PER_FLOP = 5e-8
MEMORY_SHARE = 0.5  # of this machine's memory, at most, for one shape's arrays (inputs, output, reference)
ARRAYS_PER_BYTE = 4  # inputs and output, a float64 reference and the device copies: ~4x the lesson's min_bytes


def limit_s() -> float:
    """The time limit of a simulator run: ``GPUKERNELS_SIM_LIMIT`` seconds if set (0: none), else LIMIT_S."""
    text = os.environ.get("GPUKERNELS_SIM_LIMIT", "").strip()
    try:
        value = float(text) if text else LIMIT_S
    except ValueError:
        raise UsageError(f"GPUKERNELS_SIM_LIMIT={text!r}: expected seconds (0 for no limit)") from None
    return math.inf if value <= 0 or math.isnan(value) else value


def duration(seconds: float) -> str:
    """``2 h 5 min``, ``4 min``, ``35 s``: a duration in the units a person reads."""
    if not math.isfinite(seconds):
        return "forever"
    if seconds >= 86400 * 365:
        return f"{seconds / (86400 * 365):.2g} years"
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not a POSIX system: no check
        return None


def _size_text(shape) -> str:
    return "x".join(str(d) for d in shape)


def check_size(lesson: str, shape, runs: int = 1, option: str = "--size", simulator: bool = True,
               given: str | None = None) -> None:
    """Refuse (UsageError naming ``option``, and ``given``: the text typed) before any array is made: a shape of
    ``lesson`` whose arrays would not fit in memory, or, with ``simulator``, whose ``runs`` launches (versions)
    could not finish within the limit even at the simulator's best speed."""
    import gpukernels

    mod = gpukernels.LESSONS[lesson]
    shape = tuple(int(d) for d in shape)
    what = f"{option} {given or _size_text(shape)}: {lesson} at {_size_text(shape)}"
    memory = _memory_bytes()
    need = ARRAYS_PER_BYTE * mod.min_bytes(shape)
    if memory is not None and need > MEMORY_SHARE * memory:
        raise UsageError(f"{what} needs about {_bytes(need)} of memory for its arrays, and this machine has "
                         f"{_bytes(memory)}; choose a smaller {option}")
    if not simulator:
        return
    limit = limit_s()
    least = runs * mod.flops(shape) * FASTEST_S_PER_FLOP
    if least > limit:
        default = _size_text(mod.SHAPES["demo_sim"])
        raise UsageError(f"{what} would take at least {duration(least)} on the simulator ({runs} version(s), "
                         f"every GPU thread run in Python; the limit is {duration(limit)}); choose a smaller "
                         f"{option} (e.g. {default}) or run on a GPU")


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.0f} EB"


class TooSlow(UsageError):
    """A simulator launch that projects past the time limit, stopped with the reason."""


@contextmanager
def watch(progress, label: str, option: str = "--size", size: str = "", limit: float | None = None):
    """While the body runs kernels on the simulator: a task of ``progress`` (a rich Progress) following each
    launch's blocks, with the time the launch projects; one line through ``progress.console`` the first time a
    launch projects past NOTE_S; TooSlow when one projects past the limit (after 2 s of measuring).

    The projection is elapsed / blocks done x blocks; inside the first block, elapsed x blocks -- a lower bound,
    since the block running is not finished -- so a launch of a few huge blocks is stopped as early as one of
    many small ones. Does nothing where the simulator has no progress hook (numba's own simulator)."""
    try:
        from .sim import _state
    except ImportError:  # pragma: no cover - gpukernels without its simulator
        yield
        return
    limit = limit_s() if limit is None else limit
    task = progress.add_task(label, total=None)
    told = [False]
    due = [0.0]

    def on_block(launch) -> None:
        now = time.perf_counter()
        if now < due[0] and launch.blocks_done < launch.nblocks:
            return  # called every few thread switches: look at the clock ten times a second
        due[0] = now + 0.1
        elapsed = now - launch.started
        done, total = launch.blocks_done, launch.nblocks
        projected = elapsed / done * total if done else elapsed * total
        left = max(0.0, projected - elapsed)
        progress.update(task, total=total, completed=done,
                        description=f"{label}: {launch.name}, block {done}/{total}, "
                                    f"{'about ' if done else 'at least '}{duration(left)} left")
        if elapsed > 2 and projected > limit:
            raise TooSlow(f"{option} {size}: {label} would take {'about' if done else 'at least'} "
                          f"{duration(projected)} on the simulator ({launch.name}: {done} of {total} blocks in "
                          f"{duration(elapsed)}; the limit is {duration(limit)}, GPUKERNELS_SIM_LIMIT=seconds to "
                          f"change it); choose a smaller {option} or run on a GPU")
        # announced only when it will be allowed to run: a launch projected past the limit is refused (above, once
        # 2 s of it are measured), and "the progress bar shows the time left" just before the refusal misled
        if not told[0] and elapsed > 1 and NOTE_S < projected <= limit:
            told[0] = True
            progress.console.print(f"{label}: this launch alone takes {'about' if done else 'at least'} "
                                   f"{duration(projected)} on the simulator, which runs every GPU thread in Python "
                                   "(a GPU takes milliseconds); the progress bar shows the time left",
                                   highlight=False, markup=False)

    previous, _state.WATCH = _state.WATCH, on_block
    try:
        yield
    finally:
        _state.WATCH = previous
        progress.remove_task(task)


__all__ = ["check_size", "watch", "TooSlow", "duration", "limit_s", "LIMIT_S"]
