"""The two test tiers (tests/conftest.py): what `make test` leaves out is only what the long tier runs again or
what needs minutes, and the tools that promise something about a tier keep it."""

import configparser
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
