"""The two test tiers (tests/conftest.py): what `make test` leaves out is only what the long tier runs again or
what needs minutes, and the tools that promise something about a tier keep it."""

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import LONG_TIER

ROOT = Path(__file__).resolve().parents[1]


def _collect(*args) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 5), run.stdout[-2000:] + run.stderr[-2000:]
    return [line for line in run.stdout.splitlines() if "::" in line]


@pytest.mark.slow  # two collections in children
def test_the_mutation_samples_tests_are_all_in_the_default_tier():
    """tools/mutate.py runs setup.cfg's selection of unit tests against each mutant: when none of them is in the
    long tier, the default tier kills every mutant the whole suite kills there (tests/MUTATION.md)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    selection = cfg["mutmut"]["pytest_add_cli_args_test_selection"].split()
    assert selection and all((ROOT / p).is_file() for p in selection), selection
    assert _collect("-m", "slow", *selection) == []
    assert len(_collect("-m", "not slow", *selection)) > 100


def test_long_tier_markers_are_registered_and_the_makefile_names_real_tests():
    text = (ROOT / "pyproject.toml").read_text()
    for marker in ("slow", *LONG_TIER):
        assert f'"{marker}:' in text, f"marker {marker} is not registered in pyproject.toml"
    make = (ROOT / "Makefile").read_text()
    assert re.search(r'^test:.*\n\t.*-m "not slow" tests$', make, re.M), "make test must deselect the long tier"
    assert re.search(r"^test-all:.*\n\t.*pytest .* tests$", make, re.M)
    block = re.search(r"^NOCUDA_TESTS \?=((?:.*\\\n)*.*)$", make, re.M).group(1)
    files = re.findall(r"tests/\S+\.py", block)
    assert files and all((ROOT / f).is_file() for f in files), files
    assert "tests/test_no_toolchain.py" in files  # what a Mac gets without the compiler


def _outside_the_pins(*names) -> str:
    """Why this interpreter is not the project's environment (a package of ``names`` outside the version range
    pyproject.toml pins, or missing), or "" where it is: a GPU machine's own Python runs the suite with what it has
    preinstalled (pytest 9.2 there), and a test of the project's pins is no test of that machine."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    text = (ROOT / "pyproject.toml").read_text()
    for name in names:
        pins = re.findall(rf'"({re.escape(name)}\s*[<>=!~][^";]*)', text)
        try:
            have = version(name)
        except PackageNotFoundError:
            return f"{name} is not installed"
        for pin in pins:
            if not Requirement(pin).specifier.contains(have, prereleases=True):
                return f"{name} {have} is outside the project's pin {pin!r}: not the project's environment"
    return ""


@pytest.mark.skipif(bool(_outside_the_pins("pytest", "pytest-xdist")),
                    reason=_outside_the_pins("pytest", "pytest-xdist") or "in the pins")
def test_xdist_groups_keep_their_tests_on_one_worker(tmp_path):
    """`make test` runs `--dist loadgroup`: the tests of one `xdist_group` (a wheel built once, a lesson version's
    compiled kernels) run on one worker. pytest 9 with pytest-xdist 3 dropped the groups silently (xdist marks the
    node id through an attribute pytest 9 no longer reads), which is why pyproject.toml pins pytest below 9."""
    (tmp_path / "test_group.py").write_text(
        "import os, pytest\n\n"
        "@pytest.mark.xdist_group('one')\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_member(i):\n"
        "    print('WORKER', os.environ.get('PYTEST_XDIST_WORKER'))\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup", "-p",
                          "no:cacheprovider", "-s", str(tmp_path / "test_group.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    workers = set(re.findall(r"\[(gw\d+)\][^\n]*PASSED", run.stdout))
    assert len(workers) == 1, f"one group ran on {sorted(workers)}:\n{run.stdout[-2000:]}"


# --- the default tier's budget (tests/_tiers.py) -------------------------------------------------------------------

def _child_project(tmp_path, burn_s: float) -> Path:
    """A project of one test that burns ``burn_s`` CPU-seconds, with the tiers' hooks as this suite has them."""
    (tmp_path / "tests").mkdir(parents=True)
    (tmp_path / "tests" / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('tiers_under_test', {str(ROOT / 'tests' / '_tiers.py')!r})\n"
        "tiers = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(tiers)\n"
        "pytest_runtest_protocol = tiers.pytest_runtest_protocol\n"
        "pytest_sessionfinish = tiers.pytest_sessionfinish\n"
        "pytest_testnodedown = tiers.pytest_testnodedown\n\n"
        "def pytest_addoption(parser):\n"
        "    tiers.add_option(parser)\n"
        "    parser.addoption('--resume-from', default=None)\n")
    (tmp_path / "tests" / "test_burn.py").write_text(
        "import time\n\n"
        "def test_burns_cpu():\n"
        f"    end = time.process_time() + {burn_s}\n"
        "    while time.process_time() < end:\n"
        "        pass\n\n"
        "def test_cheap():\n"
        "    pass\n")
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\nmarkers = ['slow: long tier']\n")
    return tmp_path


def _run_child(project: Path, *args, budget=None, record=None):
    env = dict(os.environ, GPUKERNELS_TIER_BUDGET_S=str(budget) if budget is not None else "",
               GPUKERNELS_TIER_RECORD=str(record) if record else "")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_default_tier_run_over_its_cpu_budget_fails_naming_its_costliest_test(tmp_path):
    project = _child_project(tmp_path, burn_s=0.6)
    over = _run_child(project, "-m", "not slow", "tests", budget=0.3)
    assert over.returncode == 1, over.stdout[-2000:] + over.stderr[-2000:]
    assert "over budget" in over.stdout and "test_burn.py::test_burns_cpu" in over.stdout, over.stdout[-2000:]
    within = _run_child(project, "-m", "not slow", "tests", budget=100)
    assert within.returncode == 0 and "default tier:" in within.stdout, within.stdout[-2000:]
    # not the whole default tier (one file, or the long tier too): no budget to hold it to
    part = _run_child(project, "-m", "not slow", "tests/test_burn.py", budget=0.3)
    assert part.returncode == 0 and "default tier:" not in part.stdout, part.stdout[-2000:]


def test_record_tier_writes_what_the_run_measured(tmp_path):
    project = _child_project(tmp_path / "p", burn_s=0.2)
    record = tmp_path / "tiers.json"
    run = _run_child(project, "tests", "--record-tier", "all", record=record)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rec = json.loads(record.read_text())["all"]
    assert rec["passed"] == 2 and rec["failed"] == 0 and rec["skipped"] == 0
    assert rec["cpu_s"] >= 0.2 and rec["wall_s"] >= 0.2 and "cores" in rec["machine"], rec


def test_the_readme_tier_table_is_the_recorded_measurement():
    """The README's table of tiers is generated from tests/tiers.json (python -m gpukernels.readme; the check that
    the whole README is current is test_packaging's): the recorded default tier is whole and within its budget, so
    a tier that crept past it cannot be recorded as if it had not. (Its failures are shown in the table, not held to
    zero here: a run records itself after its tests, so the tests of a run read the record before it.)"""
    from gpukernels.readme import README, tiers_markdown

    from ._tiers import DEFAULT_CPU_BUDGET_S, DEFAULT_WALL_BUDGET_S, RECORD

    assert tiers_markdown() in README.read_text()
    rec = json.loads(RECORD.read_text())["default"]
    assert rec["passed"] > 1000, rec
    assert rec["cpu_s"] <= DEFAULT_CPU_BUDGET_S and rec["wall_s"] <= DEFAULT_WALL_BUDGET_S, rec
