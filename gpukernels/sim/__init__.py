"""gpukernels' CUDA simulator: Numba's simulator made fast, deterministic, warp-aware and strict.

``import gpukernels`` in simulator mode calls :func:`install`; from then on every ``@cuda.jit`` kernel launch
(lesson kernels and students' own, even ones defined earlier) runs here:

* **warp-level primitives** with CUDA semantics: ``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``,
  ``shfl_xor_sync`` (optional CUDA C++ ``width``), ``all_sync``, ``any_sync``, ``eq_sync``, ``ballot_sync``,
  ``match_any_sync``, ``match_all_sync``, ``activemask``, ``lanemask_lt``, ``syncwarp``, ``laneid``, ``warpsize``;
* **a cooperative scheduler** (one greenlet per CUDA thread, switching only where a thread must wait), tens
  of times faster than the stock simulator's OS threads, and deterministic: the same launch runs the same
  interleaving every time; ``configure(shuffle=True, seed=...)`` explores others to flush out races;
* **errors that name the bug** (``gpukernels.sim.errors``), each with block, thread and ``file:line``;
* **asynchronous copies that land late** (``cp.async``, ``wgmma``'s operand reads: ``gpukernels.sim._async``): a
  read before the covering wait, an overwrite of what is still in flight, a missing commit, wait count or
  ``fence.proxy.async`` is an ``AsyncHazardError`` naming the issuing line and the access.

Configuration::

    gpukernels.sim.configure(timeout_s=10)                 # from now on
    with gpukernels.sim.configure(shuffle=True, seed=3):   # just for this block
        kernel[grid, block](x)
    gpukernels.sim.last_launch()                           # seed, switches, schedule digest, seconds

    gpukernels.sim.configure(negative_index="wrap")        # a[i - 1] at i = 0 reads a[-1], as on a GPU

Environment: ``GPUKERNELS_SIM_SHUFFLE=1``, ``GPUKERNELS_SIM_SEED=n``, ``GPUKERNELS_SIM_TIMEOUT=s``,
``GPUKERNELS_SIM_NEGATIVE_INDEX=wrap``.
"""

from __future__ import annotations

from dataclasses import fields, replace

from . import _state
from ._async import AsyncHazard, AsyncHazardError
from ._state import ASYNC_HAZARDS, NEGATIVE_INDEX, LaunchInfo, SimConfig
from .errors import (
    BarrierDivergenceError,
    KernelError,
    KernelTimeoutError,
    OutOfBoundsError,
    SimulatorError,
    WarpMaskError,
)
from .install import install, is_installed, uninstall


class _Configured:
    """Returned by :func:`configure`: the change is already made; ``with`` undoes it on exit."""

    def __init__(self, previous: SimConfig):
        self._previous = previous

    def __enter__(self) -> SimConfig:
        return _state.CONFIG

    def __exit__(self, *exc) -> None:
        _state.CONFIG = self._previous


def configure(**changes) -> _Configured:
    """Change simulator settings (see :class:`SimConfig`: seed, shuffle, preempt, timeout_s, record_schedule,
    negative_index, async_hazards).

    Applies at once; used as a context manager, restores the previous settings on exit.
    """
    known = {f.name for f in fields(SimConfig)}
    unknown = set(changes) - known
    if unknown:
        raise TypeError(f"unknown simulator setting(s) {sorted(unknown)}; known: {sorted(known)}")
    if "preempt" in changes and not 0 <= changes["preempt"] <= 1:
        raise ValueError("preempt is a probability, between 0 and 1")
    if "async_hazards" in changes and changes["async_hazards"] not in ASYNC_HAZARDS:
        raise ValueError(f"async_hazards must be one of {', '.join(map(repr, ASYNC_HAZARDS))}; "
                         f"got {changes['async_hazards']!r}")
    if "negative_index" in changes and changes["negative_index"] not in NEGATIVE_INDEX:
        raise ValueError(f"negative_index must be one of {', '.join(map(repr, NEGATIVE_INDEX))}; "
                         f"got {changes['negative_index']!r}")
    previous = _state.CONFIG
    _state.CONFIG = replace(previous, **changes)
    return _Configured(previous)


def config() -> SimConfig:
    """The current settings."""
    return _state.CONFIG


def last_launch() -> LaunchInfo | None:
    """What the most recent simulated launch did (seed, number of switches, schedule digest, time)."""
    return _state.LAST


__all__ = [
    "install",
    "uninstall",
    "is_installed",
    "configure",
    "config",
    "last_launch",
    "SimConfig",
    "LaunchInfo",
    "SimulatorError",
    "BarrierDivergenceError",
    "KernelTimeoutError",
    "OutOfBoundsError",
    "WarpMaskError",
    "KernelError",
    "AsyncHazardError",
    "AsyncHazard",
]
