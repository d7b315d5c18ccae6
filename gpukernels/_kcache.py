"""Compiled kernels shared between processes: an opt-in disk cache of the package's own kernels, on a GPU.

With ``GPUKERNELS_KERNEL_CACHE=DIR`` set, a kernel of the package that is launched (a `gpukernels._launch.Launch`)
is compiled once for every process that shares DIR and loaded from DIR afterwards: the GPU test suite's workers
and the notebooks, demo and benchmark children they start all compile the same few hundred kernels, each of which
takes NVVM a second or more. Unset (the default), nothing is cached and nothing here runs.

Numba's own cache (``@cuda.jit(cache=True)``) would not serve here, for three reasons, and this one does:

* Numba keys an entry by the kernel's own bytecode, its closure and its file's time stamp -- not by the device
  functions it calls from other files, nor by the module constants it reads. Here every entry lives in a folder
  named by a hash of every source file of the package and of the numba, numba-cuda, NumPy and Python versions:
  any edit to any file starts from an empty folder.
* Numba keeps one index file per function name and line, which every kernel a factory makes shares (the same
  qualified name, the same line). Two processes compiling two of them at once can each write data file 1 and the
  other's index, and a later load then gets the other kernel. Here each entry is a file of its own, named by a
  hash of its whole key (signature, target, bytecode, closure), which it also stores and checks on load; it is
  written under a temporary name and renamed into place.
* Numba's key holds a pickle of the closure, and a pickled device function or intrinsic carries a UUID drawn in
  each process: a kernel that calls a factory's device function (most tiled kernels) never matched an entry
  another process wrote. Here a closure is keyed by what it holds (`identity`: code, constants, options, and
  the device functions' own closures).

Processes that miss the same entry at once do not all compile it: the first takes a lock beside the entry (an
``flock``, which the system drops if the process dies) and the others wait for it and load what it stored -- the
GPU suite starts the tests of one step on several workers together. A wait is bounded (`WAIT_S`); after it a
process compiles the kernel itself.

``GPUKERNELS_KERNEL_CACHE_LOG=FILE`` appends one line per lookup to FILE (process, start, seconds, ``hit`` /
``waited`` / ``compiled``, kernel, signature): how the suite's compile time is spent.

Only the package's kernels are cached: a student's kernel never is, and the grader's children never see the
setting (`gpukernels.grade.pool.child_env` drops every ``GPUKERNELS_*`` variable).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ENV = "GPUKERNELS_KERNEL_CACHE"
LOG_ENV = "GPUKERNELS_KERNEL_CACHE_LOG"
WAIT_S = 240.0  # the longest a process waits for another that compiles the same kernel

try:
    import fcntl
except ImportError:  # Windows: no lock, each process compiles what it misses
    fcntl = None

_FOLDER: list = []  # [Path or None], resolved on first use
_CLASS: list = []  # [the cache class], made on first use (it needs numba-cuda)


def folder() -> Path | None:
    """Where this process's entries go: $GPUKERNELS_KERNEL_CACHE/<hash of the package's sources and versions>,
    or None when the variable is unset."""
    if not _FOLDER:
        base = os.environ.get(ENV)
        _FOLDER.append(Path(base) / source_key() if base else None)
    return _FOLDER[0]


@contextlib.contextmanager
def shared(prefix: str = "gpukernels-kernels-"):
    """For the length of the block, one folder of compiled kernels for this process and the processes it starts
    (they inherit the variable): the caller's $GPUKERNELS_KERNEL_CACHE where set -- used as it is and kept; set
    empty, no cache -- else a new temporary folder, removed at the end with the variable. Yields the folder, or
    None for no cache."""
    if ENV in os.environ:
        yield os.environ[ENV] or None
        return
    path = tempfile.mkdtemp(prefix=prefix)
    os.environ[ENV] = path
    _FOLDER.clear()
    try:
        yield path
    finally:
        os.environ.pop(ENV, None)
        _FOLDER.clear()
        shutil.rmtree(path, ignore_errors=True)


def source_key(pkg: Path | None = None) -> str:
    """A hash of every ``.py`` file of the package (or of folder ``pkg``) and of the versions the compiled code
    depends on."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "none"

    h = hashlib.sha256()
    pkg = Path(__file__).parent if pkg is None else Path(pkg)
    for f in sorted(pkg.rglob("*.py")):
        h.update(f.relative_to(pkg).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    h.update("|".join([*map(installed, ("numba", "numba-cuda", "numpy")), sys.version]).encode())
    return h.hexdigest()[:24]


def attach(kernel) -> None:
    """Give ``kernel`` the shared cache when GPUKERNELS_KERNEL_CACHE is set and it is one of the package's own
    kernels without a cache of its own (idempotent; a folder that cannot be written leaves it uncached)."""
    if getattr(kernel, "_gpukernels_kcache", False):
        return
    try:
        kernel._gpukernels_kcache = True
    except AttributeError:  # not a Numba dispatcher
        return
    root = folder()
    py_func = getattr(kernel, "py_func", None)
    if root is None or py_func is None or not getattr(py_func, "__module__", "").startswith("gpukernels."):
        return
    from numba.cuda.core.caching import NullCache

    if not isinstance(getattr(kernel, "_cache", None), NullCache):
        return
    try:
        kernel._cache = _cache_class()(py_func)
    except OSError:
        return
    kernel._cache._options = _options(kernel)


def identity(value, _depth: int = 0):
    """What a kernel's closure value contributes to its entry's key, the same in every process: a jitted function
    or an intrinsic by its module, name, bytecode and (recursively) its own closure, anything else by its pickle.

    Numba keys an entry by a pickle of the closure, and pickles a dispatcher or an intrinsic with a UUID drawn in
    each process: a kernel that calls a device function a factory made for it (most of the lessons' tiled kernels)
    never matched another process's entry, and every process compiled it again."""
    if _depth > 16:  # (no lesson nests so deep) a key of its own: compiled here, never loaded from another
        return ("unkeyed", uuid.uuid4().hex)
    func = getattr(value, "py_func", None) or getattr(value, "_defn", None)
    if func is None and callable(value) and hasattr(value, "__code__"):
        func = value
    if func is not None and hasattr(func, "__code__"):
        return ("function", func.__module__, func.__qualname__, _code(func.__code__), _options(value),
                tuple(identity(_cell(c), _depth + 1) for c in func.__closure__ or ()))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(identity(v, _depth + 1) for v in value))
    from numba.cuda.serialize import dumps

    return ("pickle", hashlib.sha256(dumps(value)).hexdigest())


def _code(code) -> tuple:
    """A code object's bytecode and constants, nested code objects included (whose repr names an address)."""
    consts = tuple(_code(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts)
    return (hashlib.sha256(code.co_code).hexdigest(), consts, code.co_names)


def _options(dispatcher) -> str:
    """A dispatcher's decorator options (launch bounds, fastmath, device, inline...), which change its code."""
    return repr(sorted((k, repr(v)) for k, v in (getattr(dispatcher, "targetoptions", None) or {}).items()))


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return None


def _cache_class():
    if _CLASS:
        return _CLASS[0]
    from numba.cuda.core.caching import _CacheLocator
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl
    from numba.cuda.serialize import dumps

    class Files:
        """What Numba's IndexDataCacheFile does, with one file per entry and no index."""

        def __init__(self, path: str, base: str):
            self.path, self.base = path, base

        def _file(self, key) -> str:
            return os.path.join(self.path, f"{self.base}-{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}.nbc")

        def load(self, key):
            try:
                stored, data = pickle.loads(Path(self._file(key)).read_bytes())
            except Exception:  # noqa: BLE001 - missing, partly written by a process that died, unreadable
                return None
            return data if stored == repr(key) else None

        def save(self, key, data) -> None:
            path = self._file(key)
            tmp = f"{path}.tmp.{uuid.uuid4().hex[:16]}"
            try:
                with open(tmp, "wb") as f:
                    f.write(dumps((repr(key), data)))
                os.replace(tmp, path)
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

        def flush(self) -> None:
            pass

    class Locator(_CacheLocator):
        """Every entry of the process in `folder()`."""

        def __init__(self, py_func, py_file):
            self._path, self._lineno = str(folder()), py_func.__code__.co_firstlineno

        def get_cache_path(self):
            return self._path

        def get_source_stamp(self):
            return None  # the folder's name is the sources' hash

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            loc = cls(py_func, py_file)
            loc.ensure_cache_path()  # OSError when the folder cannot be written: attach() leaves the kernel uncached
            return loc

    class Impl(CUDACacheImpl):
        _locator_classes = [Locator]

    class SharedCache(CUDACache):
        _impl_class = Impl

        def __init__(self, py_func):
            super().__init__(py_func)
            self._cache_file = Files(self._cache_path, self._impl.filename_base)
            self._held = None  # (lock descriptor, start) while this process compiles an entry
            self._kname = f"{py_func.__module__}.{py_func.__qualname__}"

        _options = ""  # the kernel's decorator options (attach): launch bounds change the code

        def _index_key(self, sig, codegen):
            # Numba's key with its pickle of the closure (a UUID per process for a device function) replaced by
            # `identity`, which every process computes alike
            import numba_cuda

            return (sig, codegen.magic_tuple(), numba_cuda.__version__, identity(self._py_func), self._options)

        def load_overload(self, sig, target_context):
            # Numba calls this, compiles on None, then calls save_overload, all under its compiler lock: so one
            # entry at a time is ever held per process, and a lock left by a compile that raised is dropped here.
            self._release()
            start = time.time()
            data = super().load_overload(sig, target_context)
            if data is not None:
                _log("hit", start, self._kname, sig)
                return data
            if fcntl is None:
                self._held = (None, start)
                return None
            lock = self._cache_file._file(self._index_key(sig, target_context.codegen())) + ".lock"
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return None
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.time() - start > WAIT_S:  # compile it here as well
                        os.close(fd)
                        return None
                    time.sleep(0.05)
            data = super().load_overload(sig, target_context)  # stored while this process waited
            if data is not None:
                os.close(fd)
                _log("waited", start, self._kname, sig)
                return data
            self._held = (fd, start)
            return None

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            finally:
                held = self._held
                self._release()
                _log("compiled", held[1] if held else None, self._kname, sig)

        def _release(self):
            if self._held is not None:
                if self._held[0] is not None:
                    os.close(self._held[0])  # drops the flock
                self._held = None

    _CLASS.append(SharedCache)
    return SharedCache


def lookups(path, pid: int | None = None) -> dict:
    """{event: count} of the lookups ``GPUKERNELS_KERNEL_CACHE_LOG`` file ``path`` holds (of process ``pid`` only,
    if given): ``hit``, ``waited`` (for another process's compile), ``compiled``. Nothing when it cannot be read."""
    counts: dict = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return counts
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and (pid is None or parts[0] == str(pid)):
            counts[parts[3]] = counts.get(parts[3], 0) + 1
    return counts


def _log(event: str, start, name: str, sig) -> None:
    path = os.environ.get(LOG_ENV)
    if not path or start is None:
        return
    now = time.time()
    try:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {start:.2f} {now - start:.2f} {event} {name} {sig}\n")
    except OSError:
        pass


__all__ = ["ENV", "LOG_ENV", "WAIT_S", "attach", "folder", "identity", "lookups", "shared", "source_key"]
