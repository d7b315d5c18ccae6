"""Run Python in the other numba.cuda mode, in a child process: the one place that knows how.

Numba decides once per process, at the first ``import numba.cuda``, whether ``numba.cuda`` is the simulator or
the real CUDA target (``NUMBA_ENABLE_CUDASIM``), and ``gpukernels`` makes that choice at its import
(``gpukernels._device``). So work that needs the *other* mode runs in a child Python:

* ``"sim"``      kernels on the simulator (the tracer, the figures drawn from it) while this process may
                 hold a GPU -- ``gpukernels trace`` and the demo's figures on a GPU machine, the notebooks'
                 ``on_simulator``, the grader's correctness and technique gates;
* ``"compile"``  ``numba.cuda`` as the real compiler, no GPU needed (``gpukernels resources``, the grader's
                 compile gate) while this process runs the simulator;
* ``"gpu"``      a real GPU, required (the grader's speed gate).

``mode_env`` is the environment of such a child; ``run_in_mode`` runs one and waits, ``start_in_mode`` starts
one and returns it (for a child that serves many requests). Both put this checkout first on ``PYTHONPATH``,
so the child imports the same ``gpukernels`` as the parent. The grader builds its sandboxed children itself
(``gpukernels.grade.pool``: a scrubbed environment, a zygote, limits) and takes only ``mode_env`` from here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MODES = ("sim", "compile", "gpu")
ROOT = Path(__file__).resolve().parent.parent  # the folder that holds the gpukernels package

# A "compile" child with no GPU would have gpukernels pick the simulator (mode auto, no device): so it imports
# numba.cuda first, with NUMBA_ENABLE_CUDASIM=0, and only then gpukernels.
COMPILE_PREAMBLE = r"""
import json, os, sys, warnings
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ.pop("GPUKERNELS_DEVICE", None)
import numba.cuda                       # the compiler, not the simulator (Numba decides at first import)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")     # gpukernels warns that numba.cuda came first: that is the point
    import gpukernels
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # gpukernels set it to 1; numba re-reads its config when compiling
from numba.cuda.core import config
config.reload_config()
if not numba.cuda.is_available():
    # The lessons' device functions are inlined by NVVM (forceinline), so numba-cuda compiles each one on its own,
    # for "the current device" -- which a machine without a GPU does not have. Lend them sm_90's compute
    # capability: NVVM compiles the kernel, inlined device functions and all, for the arch that was asked for, and
    # what numba-cuda lowers differently by compute capability (atomics before 6.0) is the same for every arch
    # the toolkit reports on.
    import numba.cuda.dispatcher
    numba.cuda.dispatcher.get_current_device = lambda: type("NoGPU", (), {"compute_capability": (9, 0)})()
"""


def mode_env(mode: str, base: dict | None = None, **extra: str) -> dict:
    """The environment of a child in ``mode``: ``base`` (default: this process's environment) with the two
    variables that choose numba.cuda's target set for that mode, then ``extra``.

    sim: ``GPUKERNELS_DEVICE=sim`` and ``NUMBA_ENABLE_CUDASIM=1`` (the second for a child that imports
    numba.cuda before gpukernels); compile: ``NUMBA_ENABLE_CUDASIM=0``, ``GPUKERNELS_DEVICE`` unset (no GPU is
    needed to compile); gpu: ``NUMBA_ENABLE_CUDASIM=0`` and ``GPUKERNELS_DEVICE=gpu`` (an error without one)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    env = dict(os.environ if base is None else base)
    if mode == "sim":
        env.update(GPUKERNELS_DEVICE="sim", NUMBA_ENABLE_CUDASIM="1")
    else:
        env["NUMBA_ENABLE_CUDASIM"] = "0"
        if mode == "gpu":
            env["GPUKERNELS_DEVICE"] = "gpu"
        else:
            env.pop("GPUKERNELS_DEVICE", None)
    env.update(extra)
    return env


def _command(mode: str, code: str | None, module: str | None, args, env: dict | None) -> tuple[list, dict]:
    if (code is None) == (module is None):
        raise ValueError("give the child's code or its module, not both")
    if mode == "compile" and module is not None:
        raise ValueError("a compile child runs code (after COMPILE_PREAMBLE), not a module")
    full = mode_env(mode, **(env or {}))
    full["PYTHONPATH"] = str(ROOT) + (os.pathsep + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
    if module is not None:
        return [sys.executable, "-m", module, *map(str, args)], full
    return [sys.executable, "-c", (COMPILE_PREAMBLE if mode == "compile" else "") + code, *map(str, args)], full


def run_in_mode(mode: str, code: str | None = None, *, module: str | None = None, args=(), stdin: str | None = None,
                env: dict | None = None, capture: bool = True, cwd=None) -> subprocess.CompletedProcess:
    """Run ``python -c code`` (or ``python -m module``) with ``args`` in a child in ``mode`` and wait for it.
    ``stdin`` is its input (text); with ``capture`` its stdout and stderr come back as text, otherwise they
    are this process's. ``env``: more variables. A compile child's code runs after COMPILE_PREAMBLE."""
    argv, full = _command(mode, code, module, args, env)
    return subprocess.run(argv, input=stdin, capture_output=capture, text=True, env=full, cwd=cwd)


def start_in_mode(mode: str, code: str | None = None, *, module: str | None = None, args=(), env: dict | None = None,
                  cwd=None, **popen) -> subprocess.Popen:
    """Start the child that ``run_in_mode`` would run and return it (``popen``: ``subprocess.Popen``'s
    arguments, e.g. pipes)."""
    argv, full = _command(mode, code, module, args, env)
    return subprocess.Popen(argv, env=full, cwd=cwd, **popen)


__all__ = ["MODES", "COMPILE_PREAMBLE", "mode_env", "run_in_mode", "start_in_mode"]
