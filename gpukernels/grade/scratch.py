"""The grader's scratch folder: one per run, in the system's temporary folder, and never left behind for long.

A run works in ``gpukernels-grade-<pid>-<random>`` (inputs, outputs, reports; ``work_folder``) and removes it when
it ends, however it ends in Python (Ctrl-C, SIGTERM and SIGHUP unwind it). SIGKILL, a power cut or the
out-of-memory killer give it no chance, so every run first removes the folders such runs left
(``remove_stale``). A folder is another run's for as long as that run holds an exclusive ``flock`` on it -- taken
right after the folder is made, released by the kernel when the process ends, however it ends. A folder is
removed only when

* it is this user's, a real folder (not a link), named as a run names it;
* nobody holds its lock;
* it is older than a few seconds (a run takes its lock microseconds after making the folder), and its run's
  process is gone -- or, should that process id have been reused, the folder is older than ``GRACE`` seconds.

So a run that is grading, here or in another container sharing the folder, keeps its folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

PREFIX = "gpukernels-grade-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-[\w]+$")
GRACE = 600.0  # seconds: an unlocked folder whose process id is in use again (by another process) is stale past it
YOUNG = 2.0  # seconds: a folder younger than this may be a run's that has not taken its lock yet


def _lock(fd: int, block: bool) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(base: str | os.PathLike | None = None, now: float | None = None) -> list:
    """Remove the scratch folders in ``base`` (default: the system's temporary folder) that ended runs left behind
    (see the module docstring for when a folder is stale). Returns the paths removed."""
    if os.name != "posix":  # no flock: nothing is removed that might be another run's
        return []
    base = Path(base or tempfile.gettempdir())
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for entry in entries:
        m = _NAME.match(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not entry.is_dir(follow_symlinks=False) or st.st_uid != os.getuid():
                continue
            age = now - st.st_mtime
            if age < YOUNG or (_alive(int(m.group(1))) and age < GRACE):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not _lock(fd, block=False):
                continue  # a run holds it: grading right now
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def work_folder():
    """A fresh scratch folder for one run, locked for the run's life and removed at its end; stale folders of
    ended runs are removed first."""
    remove_stale()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    fd = None
    if os.name == "posix":
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by children (O_CLOEXEC)
        _lock(fd, block=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if fd is not None:
            os.close(fd)


__all__ = ["work_folder", "remove_stale", "PREFIX", "GRACE"]
