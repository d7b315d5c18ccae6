"""Child processes: start them in a session of their own, feed them their job, and end the whole session
when they end -- not only on a time-out -- so that nothing a submission started outlives its grading.

A child gets an empty working directory, its job on stdin (``protocol``), and its environment cleaned of
``NUMBA_*`` / ``GPUKERNELS_*`` settings except the mode it runs in. ``run_pool`` runs many children a few at a
time; children that time kernels on the GPU run alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .protocol import Job, Report

CHILD = Path(__file__).with_name("_child.py")


@dataclass
class Child:
    """One child process: its job, how it ended, and its report."""

    key: tuple
    job: Job
    env: dict
    timeout: float
    exclusive: bool = False  # times kernels on the GPU: runs alone
    proc: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    report: Report | None = None
    stdout: str = ""
    stderr: str = ""
    _files: list = field(default_factory=list)

    def start(self) -> None:
        out_dir = Path(self.job.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        cwd = out_dir / "cwd"  # empty: nothing of the grading lies where the submission runs
        cwd.mkdir(exist_ok=True)
        out, err = open(out_dir / "stdout", "w+b"), open(out_dir / "stderr", "w+b")
        self._files = [out, err]
        kwargs = {}
        if os.name == "posix":
            kwargs.update(start_new_session=True, preexec_fn=_child_limits)
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, str(CHILD)], cwd=str(cwd), env=self.env,
                                     stdin=subprocess.PIPE, stdout=out, stderr=err, **kwargs)
        header = {"mode": self.job.mode, "filename": self.job.filename, "source": self.job.source,
                  "out_dir": self.job.out_dir}
        import json

        payload = (json.dumps(header) + "\n" + self.job.to_json() + "\n").encode()
        threading.Thread(target=_feed, args=(self.proc.stdin, payload), daemon=True).start()

    def poll(self) -> bool:
        """True once the child has ended (killing it when it ran past its time limit)."""
        if self.proc.poll() is None:
            if time.monotonic() - self.started <= self.timeout:
                return False
            self.timed_out = True
        kill_session(self.proc)  # whatever it left running goes with it
        self.seconds = time.monotonic() - self.started
        self.returncode = self.proc.returncode
        for name, handle in zip(("stdout", "stderr"), self._files):
            handle.seek(0)
            setattr(self, name, handle.read(200_000).decode("utf-8", "replace"))
            handle.close()
        self.report = Report.load(self.job.report)
        return True


def _feed(pipe, payload: bytes) -> None:
    try:
        pipe.write(payload)
        pipe.close()
    except (BrokenPipeError, OSError):
        pass  # the child ended before reading its job: its report says how far it got


def _child_limits() -> None:  # pragma: no cover - runs in the child between fork and exec
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfaulting submission leaves no core file


def kill_session(proc: subprocess.Popen) -> None:
    """Kill the child and everything in its session (it leads its own process group)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:  # pragma: no cover
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_pool(children: list, jobs: int, on_done, on_progress=None) -> None:
    """Run children ``jobs`` at a time; ``on_done(child)`` may return further children to run. Children that
    time kernels on the GPU (``exclusive``) run one at a time, so that no two timings share the GPU."""
    queue, running = list(children), []
    try:
        while queue or running:
            busy_gpu = any(c.exclusive for c in running)
            for child in list(queue):
                if len(running) >= jobs:
                    break
                if child.exclusive and (busy_gpu or running):
                    continue
                queue.remove(child)
                child.start()
                running.append(child)
                busy_gpu |= child.exclusive
                if child.exclusive:
                    break
            time.sleep(0.02)
            for child in [c for c in running if c.poll()]:
                running.remove(child)
                queue = list(on_done(child) or []) + queue
                if on_progress is not None:
                    on_progress(child)
    finally:
        for child in running:
            kill_session(child.proc)


def child_env(mode: str) -> dict:
    """The environment of a child in ``mode`` (``sim``, ``compile`` or ``speed``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "GPUKERNELS_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ next to the submission
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    if mode == "sim":
        env["GPUKERNELS_DEVICE"] = "sim"
    else:
        env["NUMBA_ENABLE_CUDASIM"] = "0"
        if mode == "speed":
            env["GPUKERNELS_DEVICE"] = "gpu"
    return env


__all__ = ["Child", "run_pool", "child_env", "kill_session", "CHILD"]
