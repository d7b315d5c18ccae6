"""Shared test fixtures. ``import gpukernels`` picks the device (GPUKERNELS_DEVICE=sim|gpu|auto).

Tests that need more than the simulator say so with a marker, and are skipped here, with the reason, where that
is missing -- the same answers a student's Mac gets (``make test-nocuda`` runs the whole suite without numba-cuda):

* ``gpu``: a real CUDA GPU;
* ``needs_cuda_toolchain``: numba-cuda's compiler (NVVM and nvJitLink; no GPU) -- resources, the grader's
  compile gate;
* ``needs_numba_cuda``: numba-cuda itself (its own test suite);
* ``no_cuda_toolchain``: checks what a machine *without* that compiler gets; skipped where it is installed;
* ``needs_browser``: headless Chromium through selenium (tests/browser.py; .ci/run installs it).

Two tiers, chosen by the ``slow`` marker (the README says what each runs and how long it takes):

* the default tier, ``make test`` (``pytest -m "not slow"``): every lesson version correct under the simulator
  at small odd shapes with NaN-poisoned outputs and float64 references, the tracer, the simulator's primitives,
  the grader against every fixture (one seed), the CLI, bad input -- whatever catches a wrong kernel or a broken
  command, in minutes;
* the long tier, ``make test-all`` (everything): the same checks with more seeds and larger shapes, plus the
  notebooks executed top to bottom, numba-cuda's own suite on the simulator, the mutation sample and the browser
  tests. A test is in the long tier when it is marked ``slow``, or marked ``long``, ``mutation`` or
  ``needs_browser`` (`LONG_TIER`), which makes it ``slow`` too.
"""

import importlib.util
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import gpukernels
from gpukernels import _kcache
from gpukernels._device import cuda_toolchain_missing

from . import _tiers
from . import browser as _browser
# the tiers' budget and records, and the per-test CPU timeline (GPUKERNELS_TEST_TIMELINE)
from ._tiers import pytest_runtest_protocol, pytest_sessionfinish, pytest_testnodedown  # noqa: F401

GPU = gpukernels.MODE == "gpu"


def same_kernels_as(group: str):
    """A mark for tests that launch the same large kernels as the lesson step ``group`` ("matmul.async_copy"): on
    a GPU they join its xdist group, so that one worker compiles those kernels once and runs them all (seven
    async-ring tests on seven workers each spent 45-53 s in NVVM on the same two kernels); in the simulator, where
    nothing is compiled, they stay free to balance the workers."""
    return pytest.mark.xdist_group(group) if GPU else pytest.mark.same_kernels(group)


def pytest_report_header(config):
    toolchain = cuda_toolchain_missing()
    return [f"gpukernels mode: {gpukernels.MODE} ({gpukernels._device.REASON})",
            f"gpukernels backend: {gpukernels._device.backend()}",
            f"CUDA toolchain: {'not available: ' + toolchain if toolchain else 'available'}"]


def _skips() -> dict:
    """marker -> skip reason, for the markers whose requirement this machine lacks."""
    skips = {}
    if not GPU:
        skips["gpu"] = "needs a CUDA GPU (run with GPUKERNELS_DEVICE=gpu on a GPU machine)"
    missing = cuda_toolchain_missing()
    if missing:
        skips["needs_cuda_toolchain"] = f"needs the CUDA toolchain (numba-cuda's compiler, no GPU): {missing}"
    else:
        skips["no_cuda_toolchain"] = ("checks a machine without the CUDA toolchain (a Mac), and this one has it; "
                                      "make test-nocuda runs it")
    if importlib.util.find_spec("numba_cuda") is None:
        skips["needs_numba_cuda"] = "needs numba-cuda (its own test suite), which is not installed"
    no_browser = _browser.missing()
    if no_browser:
        skips["needs_browser"] = f"needs headless Chromium: {no_browser}"
    return skips


#: Test modules started first under xdist (their tests take longest); see pytest_collection_modifyitems.
HEAVY_FIRST = ("test_grade.py", "test_packaging.py", "test_classroom_page.py", "test_matmul_paths.py",
               "test_dispatch.py", "test_lessons.py",
               # the site's modules: one xdist group of 2-3 minutes (one build, then the browser; tests/_site.py),
               # which started last would end last
               "test_site.py", "test_site_pages.py", "test_site_student.py")

#: Markers that put a test in the long tier (``make test-all``) as if it were marked ``slow``.
LONG_TIER = ("long", "mutation", "needs_browser")


def pytest_itemcollected(item):
    # At collection, before ``-m "not slow"`` deselects: a notebook run, the mutation sample or a browser test is
    # in the long tier whatever else it is marked.
    if item.get_closest_marker("slow") is None and any(item.get_closest_marker(m) for m in LONG_TIER):
        item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    # Under xdist every worker gets its share of the cores for what it starts itself: OpenBLAS's threads (the
    # float64 references; idle ones spin) and the resource report's compile children. Left alone, each of 16
    # workers ran 16 BLAS threads and 8 compile children on a 16-core H200 host: a load average of 60.
    workers = getattr(config.option, "numprocesses", None)
    if not hasattr(config, "workerinput") and isinstance(workers, int) and workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GPUKERNELS_COMPILE_JOBS"):
            os.environ.setdefault(var, share)
    # On a GPU, every worker, notebook and demo child of this run shares one folder of compiled kernels
    # (gpukernels._kcache): each of the package's kernels is compiled once per run, not once per process that
    # launches it. The controller makes the folder before the workers start (they inherit the variable) and
    # removes it at the end; a folder set by the caller is used as it is and kept (set empty: no cache).
    if GPU and not hasattr(config, "workerinput") and _kcache.ENV not in os.environ:
        config._kcache_dir = tempfile.mkdtemp(prefix="gpukernels-kernels-")
        os.environ[_kcache.ENV] = config._kcache_dir
        if TIMELINE and _kcache.LOG_ENV not in os.environ:  # and which process compiled what, when, for how long
            os.environ[_kcache.LOG_ENV] = str(Path(TIMELINE) / "kcache-log.txt")


def pytest_unconfigure(config):
    path = getattr(config, "_kcache_dir", None)
    if path:
        os.environ.pop(_kcache.ENV, None)
        shutil.rmtree(path, ignore_errors=True)


TIMELINE = _tiers.TIMELINE  # the per-test timeline's folder (GPUKERNELS_TEST_TIMELINE; tests/_tiers.py)


def pytest_addoption(parser):
    _tiers.add_option(parser)
    parser.addoption(
        "--resume-from", nargs="+", metavar="LOG", default=None,
        help="leave out the tests that PASSED or SKIPPED in these `pytest -v` logs (a GPU suite run split over "
             "several calls of a time-limited machine: each call resumes where the last one was cut off)")


# `pytest -v -n N` writes "[gw3] [ 10%] PASSED tests/...::name"; without xdist, "tests/...::name PASSED [ 10%]".
# xdist's "@group" suffix comes after the parameters' "]": an "@" inside them ("...@cuda.jit]") is the id's own.
_GROUP = r"(?:@[^\s\]]+)?"
_RESULT = re.compile(rf"(?:PASSED|SKIPPED) (tests/\S+::.+?){_GROUP} *$", re.M)
_RESULT_SERIAL = re.compile(rf"^(tests/\S+::.+?){_GROUP} (?:PASSED|SKIPPED)\b", re.M)


def finished_in(logs) -> set:
    """Node ids that passed or were skipped in ``pytest -v`` logs (xdist's ``@group`` suffix dropped)."""
    done = set()
    for log in logs:
        if not Path(log).is_file():
            # `--resume-from LOG tests`: nargs="+" takes the test folder as a log too; name the fix, not a traceback
            raise pytest.UsageError(f"--resume-from: expected pytest -v log files, got {log!r} (not a file); "
                                    "put the test paths before --resume-from")
        text = Path(log).read_text(errors="replace")
        done.update(m.strip() for m in _RESULT.findall(text) + _RESULT_SERIAL.findall(text))
    return done


def resume_key(item) -> str:
    """The node id as `finished_in` reads it from a log: without xdist's ``@group`` suffix, and only that (an id
    may hold an ``@`` of its own: the grader's admission cases carry ``@cuda.jit`` in their source)."""
    mark = item.get_closest_marker("xdist_group")
    group = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None
    suffix = f"@{group}"
    return item.nodeid[: -len(suffix)] if group is not None and item.nodeid.endswith(suffix) else item.nodeid


def pytest_collection_modifyitems(config, items):
    logs = config.getoption("--resume-from")
    if logs:
        done = finished_in(logs)
        keep = [i for i in items if resume_key(i) not in done]
        config.hook.pytest_deselected(items=[i for i in items if resume_key(i) in done])
        items[:] = keep
    # Tests marked `long` (minutes: a notebook on the GPU) first: under xdist they then overlap everything else
    # instead of starting last and running alone (01_matmul was the last ~7 minutes of an H200 suite run).
    # Then the modules whose tests take longest (seconds to a minute each: grading submissions in child processes,
    # matmul's large tiles in the simulator), so that the last test to end is a short one: ordering only.
    items.sort(key=lambda item: (item.get_closest_marker("long") is None,
                                 item.path.name not in HEAVY_FIRST))  # stable: the rest keep their order
    skips = {name: pytest.mark.skip(reason=why) for name, why in _skips().items()}
    for item in items:
        for name, mark in skips.items():
            if item.get_closest_marker(name) is not None or (name == "gpu" and "gpu" in item.keywords):
                item.add_marker(mark)
                break


@pytest.fixture
def seed():
    """A fresh seed for every test (printed in failure messages so that a failure can be replayed)."""
    return int(np.random.SeedSequence().entropy % (2**32))


@pytest.fixture
def browser():
    """A headless Chromium at 1920 x 1080 (tests/browser.py); the test is marked ``needs_browser``."""
    with _browser.chromium() as driver:
        yield driver
