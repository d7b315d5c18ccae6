"""Child processes: start them in a session of their own, feed them their job, and end the whole session
when they end -- not only on a time-out -- so that nothing a submission started outlives its grading. Nor does a
child outlive the grader, however the grader ends: Ctrl-C and SIGTERM unwind it (``run_pool`` kills what runs),
and on Linux each child also has the kernel kill it when its parent dies (``_child.die_with_parent``), SIGKILL
of the grader included.

A child gets an empty working directory, its job on stdin (``protocol``), and its environment cleaned of
``NUMBA_*`` / ``GPUKERNELS_*`` settings except the mode it runs in. ``run_pool`` runs many children a few at a
time; children that time kernels on the GPU run alone.

Where ``os.fork`` exists, simulator and compile children are forked by a *zygote* of their mode -- a process
that imported numba and gpukernels once (``_child.zygote``) -- instead of starting a new interpreter each: a
class of 100 students is 1800 children, and the imports were most of a child's time. A forked child is as
separate as a started one (its own process, session, working directory and files); the speed child, which
holds a CUDA context, is always started afresh.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .._modes import mode_env
from ._child import FILE_LIMIT, OUTPUT_BUDGET, CappedSink, die_with_parent  # here: no import between fork and exec
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
    zygote: "Zygote | None" = None
    proc: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0
    returncode: int | None = None
    timed_out: bool = False
    report: Report | None = None
    stdout: str = ""  # what the child printed, as far as it was kept (_child.OUTPUT_BUDGET bytes)
    stderr: str = ""
    printed: list = field(default_factory=lambda: [[0, 0], [0, 0]])  # [bytes, lines] of stdout and stderr, all
    _sinks: list = field(default_factory=list)
    _id: int = 0

    def start(self) -> None:
        out_dir = Path(self.job.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        cwd = out_dir / "cwd"  # empty: nothing of the grading lies where the submission runs
        cwd.mkdir(exist_ok=True)
        header = {"mode": self.job.mode, "filename": self.job.filename, "source": self.job.source,
                  "out_dir": self.job.out_dir}
        import json

        payload = json.dumps(header) + "\n" + self.job.to_json() + "\n"
        self.started = time.monotonic()
        if self.zygote is not None:
            self._id = self.zygote.fork(cwd, out_dir / "stdout", out_dir / "stderr", payload)
            return
        kwargs = {}
        if os.name == "posix":
            kwargs.update(start_new_session=True, preexec_fn=functools.partial(_child_limits, os.getpid()))
        self.proc = subprocess.Popen([sys.executable, str(CHILD)], cwd=str(cwd), env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
        threading.Thread(target=_feed, args=(self.proc.stdin, payload.encode()), daemon=True).start()
        for pipe, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr")):  # capped, as a zygote's
            sink = CappedSink(os.dup(pipe.fileno()), str(out_dir / name))
            pipe.close()
            thread = threading.Thread(target=_drain, args=(sink,), daemon=True)
            thread.start()
            self._sinks.append((sink, thread))

    def poll(self) -> bool:
        """True once the child has ended (killing it when it ran past its time limit)."""
        if self.zygote is not None:
            code = self.zygote.exit_code(self._id)
            if code is None:
                if time.monotonic() - self.started <= self.timeout:
                    return False
                self.timed_out = True
                code = self.zygote.kill(self._id)
            self.returncode = code
            self.printed = self.zygote.printed.pop(self._id, self.printed)
        else:
            if self.proc.poll() is None:
                if time.monotonic() - self.started <= self.timeout:
                    return False
                self.timed_out = True
            kill_session(self.proc)  # whatever it left running goes with it
            self.returncode = self.proc.returncode
            for sink, thread in self._sinks:  # its writers are gone: the pipes end
                thread.join(timeout=5)
            self.printed = [sink.close() for sink, _ in self._sinks]
        self.seconds = time.monotonic() - self.started
        out_dir = Path(self.job.out_dir)
        for name in ("stdout", "stderr"):
            try:
                with open(out_dir / name, "rb") as handle:
                    setattr(self, name, handle.read(OUTPUT_BUDGET).decode("utf-8", "replace"))
            except OSError:
                setattr(self, name, "")
        self.report = Report.load(self.job.report)
        return True


class Zygote:
    """A ``_child.py --zygote MODE`` process and the bookkeeping of the children it forked."""

    def __init__(self, mode: str):
        import json

        self._json = json
        # A session of its own: a Ctrl-C at the terminal reaches the grader alone, which ends the zygote (its
        # stdin closes) -- not the zygote too, half-way, with a traceback. It dies with the grader however that
        # ends (_child_limits), and its children with it (die_with_parent in each fork).
        posix = {"start_new_session": True, "preexec_fn": functools.partial(_child_limits, os.getpid())}
        self.proc = subprocess.Popen([sys.executable, str(CHILD), "--zygote", mode], env=child_env(mode),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=os.path.dirname(CHILD),
                                     **(posix if os.name == "posix" else {}))
        self._lock = threading.Lock()
        self._next = 0
        self.pids: dict = {}
        self.exits: dict = {}
        self.printed: dict = {}  # id -> [[bytes, lines] of stdout, of stderr], as the zygote counted them
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            msg = self._json.loads(line)
            with self._lock:
                if "pid" in msg:
                    self.pids[msg["id"]] = msg["pid"]
                else:
                    self.printed[msg["id"]] = msg.get("printed") or [[0, 0], [0, 0]]
                    self.exits[msg["id"]] = msg["exit"]

    def fork(self, cwd, stdout, stderr, payload: str) -> int:
        with self._lock:
            self._next += 1
            ident = self._next
        req = {"id": ident, "cwd": str(cwd), "stdout": str(stdout), "stderr": str(stderr), "payload": payload}
        self.proc.stdin.write((self._json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        return ident

    def exit_code(self, ident: int):
        with self._lock:
            if ident in self.exits:
                return self.exits[ident]
        if self.proc.poll() is not None:  # the zygote itself died: its children are gone with it
            return -signal.SIGKILL
        return None

    def kill(self, ident: int) -> int:
        """Kill a child that ran past its time (its whole session); its exit code once the zygote reaped it."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._lock:
                pid = self.pids.get(ident)
                if ident in self.exits:
                    return self.exits[ident]
            if pid is not None:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
        return -signal.SIGKILL

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the zygote kills what is left and exits
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def _drain(sink) -> None:
    """A started child's output stream, drained into its capped file until every writer has closed it."""
    import select

    try:
        while not sink.ended:
            select.select([sink.fd], [], [], 1.0)
            sink.pump()
    except (OSError, ValueError):  # closed by Child.poll after its time: what was read is kept
        pass


def _feed(pipe, payload: bytes) -> None:
    try:
        pipe.write(payload)
        pipe.close()
    except (BrokenPipeError, OSError):
        pass  # the child ended before reading its job: its report says how far it got


def _child_limits(parent: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfaulting submission leaves no core file
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))  # no file past FILE_LIMIT
    die_with_parent(parent)  # the grader's end, however it comes (SIGKILL too), is this child's end


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


def run_pool(children: list, jobs: int, on_done, on_progress=None, fork: bool | None = None) -> None:
    """Run children ``jobs`` at a time; ``on_done(child)`` may return further children to run. Children that
    time kernels on the GPU (``exclusive``) run one at a time, so that no two timings share the GPU."""
    queue, running = list(children), []
    fork = hasattr(os, "fork") and os.environ.get("GPUKERNELS_GRADE_FORK", "1") != "0" if fork is None else fork
    zygotes: dict = {}

    def start(child):
        mode = child.job.mode
        if fork and mode in ("sim", "compile"):
            if mode not in zygotes:
                zygotes[mode] = Zygote(mode)
            child.zygote = zygotes[mode]
        child.start()

    try:
        while queue or running:
            busy_gpu = any(c.exclusive for c in running)
            for child in list(queue):
                if len(running) >= jobs:
                    break
                if child.exclusive and (busy_gpu or running):
                    continue
                queue.remove(child)
                start(child)
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
            if child.zygote is not None:
                child.zygote.kill(child._id)
            else:
                kill_session(child.proc)
        for z in zygotes.values():
            z.close()


def child_env(mode: str) -> dict:
    """The environment of a child in ``mode`` (``sim``, ``compile`` or ``speed``).

    Only the choice of numba.cuda's target is shared with the rest of the package (``_modes.mode_env``, the
    one definition of the sim / compile / gpu modes). The rest is the grader's own and stays here: no NUMBA_*
    or GPUKERNELS_* setting of the grader's environment reaches a submission, no PYTHONPATH is added (the
    child is a script that loads its siblings by path), and Python is pinned down; the children themselves
    (zygote forks, sessions, limits) are started by this module, not by ``_modes.run_in_mode``. In sim mode
    ``NUMBA_ENABLE_CUDASIM=1`` comes with ``GPUKERNELS_DEVICE=sim``: the child imports gpukernels before
    numba.cuda, which sets the same value, so the submission sees the environment it saw before."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "GPUKERNELS_"))}
    env = mode_env(_MODE_OF[mode], base=base)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ next to the submission
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    return env


_MODE_OF = {"sim": "sim", "compile": "compile", "speed": "gpu"}  # the grader's gates -> numba.cuda's modes


__all__ = ["Child", "run_pool", "child_env", "kill_session", "CHILD"]
