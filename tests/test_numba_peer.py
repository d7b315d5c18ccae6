"""numba-cuda's own kernel tests pass with gpukernels' simulator at least as well as with Numba's stock one,
apart from the deliberate differences tabled in docs/simulator.md; and no slower."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpukernels

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "numba_peer.py"

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="compares simulators")


def _peer():
    spec = importlib.util.spec_from_file_location("numba_peer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_peer(tmp_path, *modules, stock_from=None) -> dict:
    out = tmp_path / "peer.json"
    extra = ["--stock-from", str(stock_from)] if stock_from else []
    proc = subprocess.run([sys.executable, str(SCRIPT), *modules, *extra, "--jobs", str(os.cpu_count() or 1),
                           "--json", str(out)], capture_output=True, text=True, timeout=1800)
    assert out.exists(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["regressions"] == [], proc.stdout  # the script's exit status says the same
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return report


@pytest.mark.needs_numba_cuda  # the table names numba-cuda's test modules
def test_every_deliberate_difference_names_a_real_test():
    peer = _peer()
    table = peer.deliberate_differences()
    assert table, "docs/simulator.md has no 'Deliberate differences' table"
    modules = set(peer.modules())
    for test_id, why in table.items():
        assert test_id.split(".")[0] in modules and test_id.count(".") == 2, test_id
        assert why, f"{test_id}: say what the GPU does"


#: The quick slice's modules: run with both simulators here, and left out of the whole suite's run below (which
#: holds gpukernels to stock's recorded results; the slice holds it to stock's own run, no deliberate differences
#: allowed: the stricter check of the two)
QUICK_SLICE = ("test_userexc", "test_exception", "test_math")


@pytest.mark.slow  # 8 CPU-s: two simulators side by side
def test_exceptions_and_math_modules_match_stock(tmp_path):
    """A quick slice of the peer suite for every CI run: user exceptions (message, thread and block), debug
    mode, math (math.gamma crashed once) -- both simulators run now, so their times compare too: inside the tests
    gpukernels is faster, and with start-up (Python and Numba's import, about the same for both) no slower, give or
    take a shared machine."""
    report = run_peer(tmp_path, *QUICK_SLICE)
    totals = report["totals"]
    assert not report["stock_recorded"]
    assert totals["gpukernels"]["ran"] == totals["stock"]["ran"] > 50
    assert totals["gpukernels"]["failed"] <= totals["stock"]["failed"]
    _no_slower(report)


def _no_slower(report):
    def total(key):
        return {e: sum(r.get(key, 0) for r in report["results"] if r["engine"] == e) for e in ("stock", "gpukernels")}

    tests, wall = total("seconds"), total("wall")
    assert tests["gpukernels"] <= tests["stock"], tests
    assert wall["gpukernels"] <= 1.1 * wall["stock"], wall


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_numba_cuda_suite_passes_with_gpukernels_as_with_stock_and_no_slower(tmp_path):
    """The whole suite, but the quick slice's modules (above). Stock's results come from the committed report
    (`numba_peer.STOCK_BASELINE`) when it was measured with the versions installed here -- they depend on nothing
    else -- and are run now otherwise; the times are compared only when both ran here (the quick slice above always
    compares them)."""
    peer = _peer()
    # every module but the quick slice's, which test_exceptions_and_math_modules_match_stock runs in the same tier
    # (they were run twice under gpukernels' simulator: ~10 CPU-s of CI's)
    rest = [m for m in peer.modules() if m not in QUICK_SLICE]
    assert len(rest) == len(peer.modules()) - len(QUICK_SLICE), "a quick-slice module is no longer in the suite"
    report = run_peer(tmp_path, *rest, stock_from=peer.STOCK_BASELINE)
    totals = report["totals"]
    allowed = len(report["deliberate"])
    assert totals["gpukernels"]["ran"] == totals["stock"]["ran"] > 1000
    assert totals["gpukernels"]["failed"] <= totals["stock"]["failed"] + allowed
    if not report["stock_recorded"]:
        _no_slower(report)
