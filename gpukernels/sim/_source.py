"""Where in the kernel source something happened: frames -> ``file:line`` and the line's text."""

from __future__ import annotations

import linecache
import os
import re

_SIM_DIR = os.path.dirname(os.path.abspath(__file__))
def _machinery_dirs() -> tuple[str, ...]:
    dirs = {_SIM_DIR}
    import importlib.util

    for name in ("numpy", "numba", "numba_cuda", "greenlet"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            dirs.add(os.path.dirname(os.path.abspath(spec.origin)))
    return tuple(os.path.join(d, "") for d in dirs)


# Frames in these directories are machinery, never "the kernel's line".
_SKIP = _machinery_dirs()


def is_machinery(filename: str) -> bool:
    return filename.startswith(_SKIP) or filename.startswith("<frozen")


def short_path(filename: str) -> str:
    """A path as a student would type it: relative to the working directory when below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive on Windows
        return filename
    return filename if rel.startswith("..") else rel


def location(filename: str, lineno: int) -> str:
    return f"{short_path(filename)}:{lineno}"


def source_line(filename: str, lineno: int) -> str:
    return linecache.getline(filename, lineno).strip()


def user_frame(frame):
    """The innermost frame at or above ``frame`` that is kernel code rather than simulator machinery."""
    while frame is not None and is_machinery(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def frame_site(frame) -> tuple[str, int]:
    frame = user_frame(frame)
    if frame is None:
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


def traceback_site(tb) -> tuple[str, int]:
    """file, line of the innermost kernel-code frame of a traceback."""
    site = ("<unknown>", 0)
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not is_machinery(filename):
            site = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return site


_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=\s*(?:\w+\.)*(?:shared|local)\.array\b")


def assigned_name(filename: str, lineno: int, fallback: str) -> str:
    """``sA`` for a line ``sA = cuda.shared.array(...)``; ``fallback`` otherwise."""
    m = _ASSIGN.match(linecache.getline(filename, lineno))
    return m.group(1) if m else fallback


def describe(site: tuple[str, int]) -> str:
    """``file:line (`the source`)``."""
    filename, lineno = site
    text = source_line(filename, lineno)
    return f"{location(filename, lineno)}" + (f" (`{text}`)" if text else "")
