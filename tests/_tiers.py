"""The test tiers' budgets and their measurements (tests/conftest.py imports these hooks).

``make test`` is the command run after every change: it must stay fast on the smallest machine the course supports,
2 cores without a GPU. Its budget is counted in CPU seconds, every process of the run together (the pytest
controller, its xdist workers and what they waited for: a grader's pool, a notebook's kernel), because CPU time is
what a busy machine does not change much and what the run's wall time on 2 cores is made of (9 CPU-minutes on 2
cores is 4-5 minutes of wall time; five runs of one commit on a quiet 2-core machine spent 7.6 to 8.9). A default-tier run over the whole ``tests`` folder that spends more fails, naming
its costliest tests: the tier cannot creep past its budget unnoticed. Move what is expensive to the long tier
(``@pytest.mark.slow``): more seeds, larger shapes, notebooks, peers.

``--record-tier NAME`` (``make test RECORD=1``, ``make test-all RECORD=1``, ...) writes what the run measured --
date, machine, counts, wall and CPU time -- into ``tests/tiers.json``, from which ``python -m gpukernels.readme``
regenerates the README's table of tiers (never typed by hand; ``tests/test_tiers.py`` holds the two together and the
recorded default tier to its budget).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Where --record-tier writes: tests/tiers.json, or GPUKERNELS_TIER_RECORD (benchmarks/gpu_session.py puts the GPU
#: suite's record in its results folder).
RECORD = Path(os.environ.get("GPUKERNELS_TIER_RECORD") or ROOT / "tests" / "tiers.json")

#: The default tier's budget, CPU seconds of all the run's processes together, and the wall time it must fit on the
#: reference machine (2 cores, no GPU).
DEFAULT_CPU_BUDGET_S = 540.0  # 9 CPU-minutes: above five runs of one commit, 7.6 to 8.9 (benchmarks/NOTES.md)
DEFAULT_WALL_BUDGET_S = 300.0
#: How many of the costliest tests a run over budget names.
NAME_COSTLIEST = 8

#: A folder: each worker appends "worker start end cpu-seconds nodeid" per test to timeline-<worker>.txt there --
#: where a parallel run's wall time goes (which tests ran last, on which worker); the shared kernel cache and the
#: notebook tests log there too (tests/conftest.py).
TIMELINE = os.environ.get("GPUKERNELS_TEST_TIMELINE")
_TEST_CPU: dict[str, float] = {}
_STATE: dict = {"start": time.time(), "workers_cpu": 0.0, "workers_tests": {}, "workers": 0}


def cpu_seconds(children: bool = True) -> float:
    """CPU time of this process (and of the children it has waited for)."""
    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) if children else (resource.RUSAGE_SELF,)
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, who))


def add_option(parser) -> None:
    parser.addoption("--record-tier", metavar="NAME", default=None,
                     help="write this run's date, machine, counts, wall and CPU time into tests/tiers.json as tier "
                          "NAME (default, all, nocuda, gpu); python -m gpukernels.readme then regenerates the "
                          "README's table of tiers")


def budget_s() -> float:
    """The default tier's CPU budget: DEFAULT_CPU_BUDGET_S, or GPUKERNELS_TIER_BUDGET_S (the budget's own tests)."""
    return float(os.environ.get("GPUKERNELS_TIER_BUDGET_S") or DEFAULT_CPU_BUDGET_S)


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def is_whole_default_tier(config) -> bool:
    """A run of the default tier (``-m "not slow"``) over the whole tests folder, nothing else selected away."""
    if (config.getoption("markexpr") or "").strip() != "not slow" or config.getoption("keyword"):
        return False
    if config.getoption("--resume-from", None):
        return False
    tests = Path(config.rootpath) / "tests"
    args = [Path(a.split("::")[0]) for a in config.args] or [tests]
    return all((Path(config.invocation_params.dir) / a).resolve() == tests for a in args)


def machine() -> str:
    """'2 cores (AMD EPYC ...), 23 GiB, no GPU': what the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (AttributeError, OSError, ValueError):
        memory = ""
    import gpukernels

    gpu = "no GPU"
    if gpukernels.MODE == "gpu":
        try:
            from numba import cuda

            gpu = cuda.get_current_device().name.decode() if isinstance(
                cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name)
        except Exception:  # noqa: BLE001 - the record names what it can
            gpu = "a CUDA GPU"
    return f"{os.cpu_count()} cores ({cpu}){memory}, {gpu}"


# --- hooks (imported by tests/conftest.py) ----------------------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, cpu = time.time(), cpu_seconds()
    yield
    spent = cpu_seconds() - cpu
    _TEST_CPU[item.nodeid] = _TEST_CPU.get(item.nodeid, 0.0) + spent
    if TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(Path(TIMELINE) / f"timeline-{worker}.txt", "a") as f:
            f.write(f"{worker} {start:.2f} {time.time():.2f} {spent:.2f} {item.nodeid}\n")


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist there are no workers
def pytest_testnodedown(node, error):
    """A worker's CPU time and its costliest tests, reported when it ends (xdist)."""
    out = getattr(node, "workeroutput", {}) or {}
    _STATE["workers_cpu"] += float(out.get("tier_cpu_s", 0.0))
    _STATE["workers_tests"].update(out.get("tier_tests", {}))
    _STATE["workers"] += 1


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if _is_worker(config):
        costliest = sorted(_TEST_CPU.items(), key=lambda kv: -kv[1])[:50]
        config.workeroutput["tier_cpu_s"] = cpu_seconds()
        config.workeroutput["tier_tests"] = dict(costliest)
        return
    # The controller's own time (without its reaped workers, which reported theirs) plus the workers', or, without
    # xdist, this one process and its children.
    cpu = cpu_seconds(children=False) + _STATE["workers_cpu"] if _STATE["workers"] else cpu_seconds()
    wall = time.time() - _STATE["start"]
    tests = {**_TEST_CPU, **_STATE["workers_tests"]}
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.ensure_newline()
    if is_whole_default_tier(config):
        budget = budget_s()
        line = (f"default tier: {cpu / 60:.1f} CPU-minutes (budget {budget / 60:.1f}), {wall / 60:.1f} min wall")
        if cpu > budget:
            costly = ", ".join(f"{name} {sec:.0f} s" for name, sec in
                               sorted(tests.items(), key=lambda kv: -kv[1])[:NAME_COSTLIEST])
            if reporter:
                reporter.write_line(f"FAILED {line}: over budget. Costliest tests: {costly}. Move what is "
                                    "expensive to the long tier (@pytest.mark.slow; tests/_tiers.py)", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif reporter:
            reporter.write_line(line)
    name = config.getoption("--record-tier")
    if name:
        stats = reporter.stats if reporter else {}
        count = {k: len([r for r in stats.get(k, []) if getattr(r, "when", "call") in ("call", "setup")])
                 for k in ("passed", "failed", "skipped", "error")}
        record(name, {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), "machine": machine(),
                      "passed": count["passed"], "failed": count["failed"] + count["error"],
                      "skipped": count["skipped"], "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                      "workers": _STATE["workers"] or 1, "exitstatus": int(session.exitstatus)})
        if reporter:
            reporter.write_line(f"recorded tier {name!r} in {RECORD.name}: python -m gpukernels.readme "
                                "regenerates the README's table")


def record(name: str, entry: dict, path: Path = RECORD) -> None:
    """Merge one tier's measurement into ``path`` (JSON: tier name -> its newest measurement)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = entry
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def long_tier_after(keep, values, multi: bool = False) -> list:
    """``values`` for ``pytest.mark.parametrize``: the first ``keep`` (or the indices in ``keep``, a tuple) run in
    the default tier, the rest only in the long tier (marked ``slow``). The default tier checks each idea at one or
    two small odd cases; the long tier at all of them. ``multi``: each value is a tuple of several arguments
    (``"shape,splits"``), not one argument."""
    from _pytest.mark.structures import ParameterSet

    values = list(values)
    kept = set(keep) if isinstance(keep, tuple) else set(range(keep))
    out = []
    for i, v in enumerate(values):
        if i in kept:
            out.append(v)
        elif isinstance(v, ParameterSet):
            out.append(pytest.param(*v.values, marks=[*v.marks, pytest.mark.slow], id=v.id))
        else:
            out.append(pytest.param(*(v if multi else (v,)), marks=pytest.mark.slow))
    return out
