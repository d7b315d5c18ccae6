"""A bounded mutation sample in CI: a seeded sample of mutants of the comparison every test and the
grader trust (gpukernels/check.py) and of the grader's technique checks and points (grade/spec.py), each run
against the fast unit tests that call the mutated function (tools/mutate.py, setup.cfg's [mutmut] section). The
floor is below the full scores of tests/MUTATION.md (98% and 88% of 80 each), so a change that leaves a test unable
to catch a mutant of these modules fails here; `make mutate` gives every module's score."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE, FLOOR = 8, 75

pytestmark = [pytest.mark.mutation,
              pytest.mark.skipif(importlib.util.find_spec("mutmut") is None, reason="mutmut is not installed")]


@pytest.mark.timeout(900)
def test_a_seeded_mutation_sample_is_killed(tmp_path):
    # In a fresh copy: mutmut keeps each mutant's result under mutants/, and a checkout's stale results (or another
    # run's) must not stand in for this run's
    work = tmp_path / "repo"
    for name in ("gpukernels", "tests", "exercises", "tools"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("setup.cfg", "pyproject.toml"):
        shutil.copy(ROOT / name, work / name)
    run = subprocess.run([sys.executable, str(work / "tools" / "mutate.py"), "--sample", str(SAMPLE), "--modules",
                          "check", "spec", "--min-score", str(FLOOR), "--max-children", "1"],
                         cwd=work, capture_output=True, text=True, timeout=880)
    table = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, table
    # the table names both modules with a score: the sample really ran
    assert all(f"\n{m} " in "\n" + run.stdout for m in ("check", "spec")), table
