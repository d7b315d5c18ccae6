"""Where in the kernel source something happened: frames -> ``file:line`` and the line's text."""

from __future__ import annotations

import ast
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


#: gpukernels' instructions written in Python for the simulator (``load4``, ``copy_async16``, ``mma_f16``, ``ldmatrix``,
#: ...): each call is one instruction on the GPU, so what goes wrong inside one is reported at the kernel's line that
#: issued it (and the tracer counts it as one request there).
INTRINSICS = (tuple(os.path.join(os.path.dirname(_SIM_DIR), name) for name in ("_intrinsics.py", "_mma.py",
                                                                             "_wgmma_rs.py", "_named_barrier.py"))
              + (os.path.join(_SIM_DIR, "_async.py"),  # cp.async, its groups and waits
                 os.path.join(_SIM_DIR, "_tma.py"),  # TMA copies and mbarriers
                 os.path.join(_SIM_DIR, "_named_barrier.py"),  # bar.sync and bar.arrive
                 os.path.join(_SIM_DIR, "_fp8.py"),  # FP8 conversions and wgmma
                 os.path.join(os.path.dirname(_SIM_DIR), "tensor_core", "_ring.py")))  # the stages' waits on them

# Frames in these directories (and the files above) are machinery, never "the kernel's line" -- except test suites
# shipped inside them (numba-cuda's own kernel tests, which benchmarks/numba_peer.py runs on this simulator).
_SKIP = _machinery_dirs() + INTRINSICS
_TESTS = (os.sep + "tests" + os.sep,)


def is_machinery(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    return filename.startswith(_SKIP) and not any(t in filename for t in _TESTS)


#: The folder that holds the gpukernels package: the repository in a checkout, site-packages in an install.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(_SIM_DIR))


#: The file IPython compiles a notebook cell into (/tmp/ipykernel_784/394826653.py): named as a cell, not as a path
_NOTEBOOK_CELL = re.compile(r"[\\/]ipykernel_\d+[\\/]\d+\.py$")
_CELLS: dict[str, str] = {}  # "<notebook cell>" -> the last such file named so (full_path reads it back)


def short_path(filename: str) -> str:
    """A path as a student would type it, never one of this machine's absolute paths where a shorter one names the
    file: relative to the working directory when below it, else relative to the folder holding the package
    (``gpukernels/matmul/k01_naive.py`` from a notebook's folder too); a notebook cell's file is ``<notebook cell>``
    (its line numbers are the cell's); other files keep their path."""
    if _NOTEBOOK_CELL.search(filename):
        _CELLS["<notebook cell>"] = filename
        return "<notebook cell>"
    for base in (os.getcwd(), _PACKAGE_PARENT):
        try:
            rel = os.path.relpath(filename, base)
        except ValueError:  # another drive on Windows
            continue
        if not rel.startswith(".."):
            return rel
    return filename


def full_path(path: str) -> str:
    """The file a `short_path` names, wherever the working directory is now (linecache needs it)."""
    if path in _CELLS:
        return _CELLS[path]
    if os.path.isabs(path) or os.path.exists(path):
        return path
    below = os.path.join(_PACKAGE_PARENT, path)
    return below if os.path.exists(below) else path


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


_ATOMIC_INDEX_ARG = 1  # cuda.atomic.OP(array, index, value...): the index is the second argument
_literals_cache: dict = {}


def _is_literal_int(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def literal_index(frame) -> tuple | None:
    """Which components of the index that ``frame`` is using right now are integer literals in the source.

    ``a[-1]`` -> ``(True,)``; ``a[i, -1]`` -> ``(False, True)``; ``a[i - 1]`` -> ``(False,)``; also for the index
    argument of ``cuda.atomic.add(a, -1, v)``. ``None`` when the source cannot tell (no source, or Python
    before 3.11, which has no column positions). Read from the expression's own columns
    (``code.co_positions()``), so other subscripts on the same line do not count.
    """
    code, lasti = frame.f_code, frame.f_lasti
    key = (code, lasti)
    if key in _literals_cache:
        return _literals_cache[key]
    out = None
    try:
        positions = list(code.co_positions())[lasti // 2]
    except (AttributeError, IndexError):  # Python 3.10
        positions = None
    if positions is not None and None not in positions:
        line0, line1, col0, col1 = positions
        lines = [linecache.getline(code.co_filename, n).encode() for n in range(line0, line1 + 1)]
        if all(lines):
            lines[-1] = lines[-1][:col1]
            lines[0] = lines[0][col0:]
            try:
                node = ast.parse(b"".join(lines).decode().strip(), mode="eval").body
            except SyntaxError:
                node = None
            index = None
            if isinstance(node, ast.Subscript):
                index = node.slice
            elif isinstance(node, ast.Call) and len(node.args) > _ATOMIC_INDEX_ARG:
                index = node.args[_ATOMIC_INDEX_ARG]
            if isinstance(index, ast.Tuple):
                out = tuple(_is_literal_int(c) for c in index.elts)
            elif index is not None:
                out = (_is_literal_int(index),)
    _literals_cache[key] = out
    return out
