"""``pytest --resume-from LOG``: a GPU suite run split over several calls of a time-limited machine."""

import subprocess
import sys

import pytest

from .conftest import finished_in, resume_key


def test_finished_in_reads_passed_and_skipped_with_xdist_groups(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("tests/test_x.py::test_a \n"
                   "[gw3] [ 10%] PASSED tests/test_x.py::test_a \n"
                   "[gw1] [ 20%] SKIPPED tests/test_x.py::test_b[matmul list]@matmul.tiled \n"
                   "[gw2] [ 30%] FAILED tests/test_x.py::test_c \n"
                   "tests/test_x.py::test_d \n"  # started, cut off: not finished
                   "tests/test_x.py::test_e PASSED                [ 40%]\n")  # without xdist
    assert finished_in([log]) == {"tests/test_x.py::test_a", "tests/test_x.py::test_b[matmul list]",
                                 "tests/test_x.py::test_e"}


@pytest.mark.slow  # a pytest run in a child
def test_a_resumed_run_leaves_out_what_finished(tmp_path):
    first = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_resume.py",
                            "-k", "finished_in"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout[-2000:]
    log = tmp_path / "first.log"
    log.write_text(first.stdout)
    again = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_resume.py",
                            "-k", "finished_in", "--resume-from", str(log)], capture_output=True, text=True,
                           timeout=300)
    # -k leaves one test (the one that finished the first time); --resume-from leaves it out too
    assert " 0 selected" in again.stdout and "PASSED" not in again.stdout, again.stdout[-2000:]


@pytest.mark.slow  # a pytest run in a child
def test_a_folder_after_resume_from_is_a_usage_error_not_a_traceback():
    # nargs="+" takes `tests` as one more log; xdist then crashed with an INTERNALERROR in every worker. (The test
    # file named first: the folder is refused after collection, and collecting the whole suite cost 5 CPU-s.)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_resume.py",
                          "--resume-from", "tests"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert "--resume-from: expected pytest -v log files, got 'tests' (not a file)" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr


@pytest.mark.slow  # a pytest run in a child
def test_long_tests_are_collected_first():
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/test_resume.py", "tests/test_notebooks.py"], capture_output=True, text=True,
                         timeout=300)
    ids = [line for line in run.stdout.splitlines() if "::" in line]
    first_other = next(i for i, t in enumerate(ids) if "test_notebook_runs" not in t)
    assert first_other > 0 and all("test_notebook_runs" not in t for t in ids[first_other:]), ids


def test_an_id_with_an_at_sign_of_its_own_is_recognised(tmp_path):
    # "@cuda.jit" inside a parameter id: splitting at the first "@" made six finished tests run again on the H200
    class Item:
        def __init__(self, nodeid, group=None):
            self.nodeid, self.group = nodeid, group

        def get_closest_marker(self, name):
            return type("M", (), {"args": (self.group,), "kwargs": {}})() if self.group else None

    own = "tests/test_g.py::test_a[src\\n@cuda.jit\\ndef k(a):-9-link]"
    assert resume_key(Item(own)) == own
    assert resume_key(Item(own + "@matmul.tiled", "matmul.tiled")) == own
    log = tmp_path / "a.log"
    log.write_text(f"[gw1] [ 5%] PASSED {own} \n[gw2] [ 6%] PASSED {own}x@matmul.tiled \n")
    assert finished_in([log]) == {own, own + "x"}


def test_an_id_that_ends_in_an_at_sign_of_its_own_is_recognised(tmp_path):
    # the grader's admission case ends "-4-@cuda.jit]": read as an xdist group, it ran again in every resumed call
    own = "tests/test_g.py::test_a[from numba import cuda\\ndef helper(x):\\n    return x\\n-4-@cuda.jit]"
    log = tmp_path / "a.log"
    log.write_text(f"[gw1] [ 5%] PASSED {own} \n[gw2] [ 6%] PASSED {own}@grader \n{own} PASSED  [ 7%]\n")
    assert finished_in([log]) == {own}
