"""numba-cuda's own kernel tests as a peer test of gpukernels' simulator.

    python benchmarks/numba_peer.py                 # every numba.cuda.tests.cudapy module, stock vs gpukernels
    python benchmarks/numba_peer.py --jobs 2 --json peer.json
    python benchmarks/numba_peer.py test_math test_exception   # some modules only

Each module of ``numba.cuda.tests.cudapy`` runs in its own process under ``NUMBA_ENABLE_CUDASIM=1``, once with
Numba's stock simulator and once after ``import gpukernels`` (whose simulator then runs every launch). The
result is the parity table -- tests run, failures + errors, seconds -- and the list of tests that fail
with gpukernels but pass with stock. Those must be none, apart from the deliberate differences: the rows of
the one table in ``docs/simulator.md`` (section "Deliberate differences"), whose first column names the test.
Exit status: 0 when there are no other regressions, 1 otherwise.

Stock's results depend only on the versions installed, so a run can take them from a file instead of running them
again (half the time: the long test tier does): ``--stock-from FILE`` reads a report this script wrote
(``--engine stock --json FILE``) and uses its stock rows when they were measured with the same numba-cuda, Numba,
NumPy and Python; otherwise it runs stock, and says why. ``STOCK_BASELINE`` is the committed one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "simulator.md"
ENGINES = ("stock", "gpukernels")
PACKAGE = "numba.cuda.tests.cudapy"
STOCK_BASELINE = ROOT / "benchmarks" / "numba_peer_stock.json"


def versions() -> dict:
    """What stock's results depend on: the versions of numba-cuda, Numba, NumPy and Python."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("numba-cuda", "numba", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def stock_from(path: Path, names: list) -> tuple[list | None, str]:
    """(stock's rows for ``names`` from the report at ``path``, "") when it was measured with this machine's
    versions and holds every module; (None, why) otherwise."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        return None, f"{path}: unreadable ({err})"
    if report.get("versions") != versions():
        return None, f"{path} was measured with {report.get('versions')}, this machine has {versions()}"
    rows = {r["module"]: r for r in report.get("results", []) if r.get("engine") == "stock"}
    missing = [m for m in names if m not in rows]
    if missing:
        return None, f"{path} has no stock result for {', '.join(missing[:5])}"
    return [rows[m] for m in names], ""


# Seconds per module on 2 cores (the slowest; the rest take about 1 s each), to start the long ones first.
_EXPECTED_SECONDS = {"test_atomics": 33, "test_math": 17, "test_complex": 13, "test_print": 13, "test_sm": 12,
                     "test_random": 9, "test_sync": 7, "test_ufuncs": 6, "test_intrinsics": 5}


def modules() -> list[str]:
    """The test modules of numba-cuda's cudapy suite, found without importing numba.cuda (that would fix the
    simulator setting of this process)."""
    import importlib.util

    for package, below in (("numba_cuda", ("numba", "cuda")), ("numba", ("cuda",))):  # numba-cuda, or Numba's own
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            base = Path(spec.origin).parent.joinpath(*below, "tests", "cudapy")
            if base.is_dir():
                return sorted(p.stem for p in base.glob("test_*.py"))
    return []


def deliberate_differences(doc: Path = DOC) -> dict[str, str]:
    """Test id -> why, from the table under "## Deliberate differences" in docs/simulator.md (one place)."""
    if not doc.exists():
        return {}
    out, inside = {}, False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            inside = line.strip().lower() == "## deliberate differences"
            continue
        m = re.match(r"\|\s*`([\w.]+)`\s*\|(.*)", line) if inside else None
        if m:
            out[m.group(1)] = m.group(2).split("|")[0].strip()
    return out


# -- the child: one module, one engine ----------------------------------------------------------------------------


def _stub_filecheck() -> None:
    """numba.cuda.testing imports ``filecheck`` (of numba-cuda's test extra) when it is imported, for its
    FileCheck assertions on PTX and LLVM IR. The simulator makes neither, and the tests that use them are
    skipped under it, so a stand-in whose names fail if ever called lets the suite run without that package."""
    import importlib.util
    import types

    if importlib.util.find_spec("filecheck") is not None:
        return

    class _Absent:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("filecheck is not installed (pip install filecheck)")

    for name in ("filecheck", "filecheck.matcher", "filecheck.options", "filecheck.parser", "filecheck.finput"):
        sys.modules[name] = mod = types.ModuleType(name)
        for attr in ("Matcher", "Options", "Parser", "pattern_for_opts", "FInput"):
            setattr(mod, attr, _Absent)


def child(module: str, engine: str) -> dict:
    import io
    import unittest

    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    _stub_filecheck()
    if engine == "gpukernels":
        os.environ["GPUKERNELS_DEVICE"] = "sim"
        import gpukernels  # noqa: F401  (installs its simulator)
    started = time.perf_counter()
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(f"{PACKAGE}.{module}")
    except BaseException as why:  # a module that skips itself: unittest's SkipTest, or pytest.skip at import
        if not (isinstance(why, unittest.SkipTest) or type(why).__name__ == "Skipped"):
            raise
        return {"module": module, "engine": engine, "ran": 0, "skipped": 1, "failed": [], "messages": {},
                "skipped_module": str(why), "seconds": time.perf_counter() - started}
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    return {
        "module": module,
        "engine": engine,
        "ran": result.testsRun,
        "skipped": len(result.skipped),
        "failed": sorted(_test_id(t) for t, _ in result.failures + result.errors
                         + [(t, "") for t in result.unexpectedSuccesses]),
        "messages": {_test_id(t): tb.strip().splitlines()[-1][:300] for t, tb in result.failures + result.errors},
        "seconds": time.perf_counter() - started,
    }


def _test_id(test) -> str:
    # "test_math.TestCudaMath.test_math_gamma": short enough for a table, unique within the suite
    return test.id().removeprefix(PACKAGE + ".")


# Some tests (test_print) run their kernels in a fresh ``python -c`` process; with gpukernels engaged, this
# sitecustomize (on PYTHONPATH) makes those processes import gpukernels too, so that they test it as well.
_SITECUSTOMIZE = """import os
if os.environ.get("GPUKERNELS_PEER_ENGINE") == "gpukernels":
    import gpukernels  # noqa: F401
"""


def run_one(module: str, engine: str, timeout: float, site: str) -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GPUKERNELS_PEER_ENGINE=engine, PYTHONPATH=os.pathsep.join(
        p for p in (site, str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("GPUKERNELS_DEVICE", None)
    if engine == "gpukernels":
        env["GPUKERNELS_DEVICE"] = "sim"
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", module, "--engine", engine], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"module": module, "engine": engine, "ran": 0, "skipped": 0, "failed": [f"{module} (timed out)"],
                "messages": {}, "seconds": timeout}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"module": module, "engine": engine, "ran": 0, "skipped": 0, "failed": [f"{module} (crashed)"],
                "messages": {f"{module} (crashed)": tail[0][:300]}, "seconds": time.perf_counter() - started}
    out = json.loads(lines[-1])
    out["wall"] = time.perf_counter() - started
    return out


def compare(results: list[dict], allowed: dict[str, str]) -> dict:
    by = {e: [r for r in results if r["engine"] == e] for e in ENGINES}
    failed = {e: {t for r in by[e] for t in r["failed"]} for e in ENGINES}
    new = failed["gpukernels"] - failed["stock"]
    return {
        "totals": {e: {"ran": sum(r["ran"] for r in by[e]), "failed": len(failed[e]),
                       "seconds": sum(r.get("wall", r["seconds"]) for r in by[e])} for e in ENGINES},
        "regressions": sorted(new - set(allowed)),
        "deliberate": sorted(new & set(allowed)),
        "fixed": sorted(failed["stock"] - failed["gpukernels"]),
        "messages": {t: m for r in results for t, m in r["messages"].items() if r["engine"] == "gpukernels"
                     and t in new},
        "stock_failures": sorted(failed["stock"]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", help="module names, e.g. test_math (default: all)")
    parser.add_argument("--engine", choices=ENGINES + ("both",), default="both")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes at once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per module")
    parser.add_argument("--json", metavar="FILE", help="write every module's result and the comparison")
    parser.add_argument("--stock-from", metavar="FILE", help="take stock's results from this report (written by "
                        "--engine stock --json) when its versions are this machine's; else run stock")
    parser.add_argument("--child", metavar="MODULE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.engine)))
        return 0
    names = args.modules or modules()
    unknown = sorted(set(names) - set(modules()))
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(modules())}")
    engines = ENGINES if args.engine == "both" else (args.engine,)
    recorded = None
    if args.stock_from and "stock" in engines:
        recorded, why = stock_from(Path(args.stock_from), names)
        print(f"stock: from {args.stock_from}" if recorded else f"stock: run now ({why})")
    jobs = [(m, e) for m in names for e in engines if not (e == "stock" and recorded)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as site, ThreadPoolExecutor(max(1, args.jobs)) as pool:
        Path(site, "sitecustomize.py").write_text(_SITECUSTOMIZE)
        # longest first (the ufunc and atomics modules), so that two jobs finish together
        jobs.sort(key=lambda job: -_EXPECTED_SECONDS.get(job[0], 1))
        results = list(pool.map(lambda job: run_one(*job, args.timeout, site), jobs)) + (recorded or [])
    results.sort(key=lambda r: (r["module"], r["engine"]))
    report = compare(results, deliberate_differences())
    report["versions"] = versions()
    report["stock_recorded"] = bool(recorded)
    report["wall_seconds"] = time.perf_counter() - started
    print(f"{'engine':<12} {'ran':>6} {'failures+errors':>16} {'seconds (sum)':>14}")
    for e in engines:
        t = report["totals"][e]
        print(f"{e:<12} {t['ran']:>6} {t['failed']:>16} {t['seconds']:>14.1f}")
    print(f"wall time: {report['wall_seconds']:.1f} s with {args.jobs} job(s)")
    if args.engine == "both":
        for label, key in (("fixed (fail on stock only)", "fixed"), ("deliberate differences", "deliberate"),
                           ("REGRESSIONS", "regressions")):
            for t in report[key]:
                print(f"{label}: {t}" + (f" -- {report['messages'].get(t, '')}" if key == "regressions" else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, **report}, indent=1))
    return 1 if args.engine == "both" and report["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
