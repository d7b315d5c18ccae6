"""gpukernels._modes: the one way to run Python in the other numba.cuda mode (the notebooks' simulator child,
``gpukernels trace`` and the demo's figures on a GPU machine, ``gpukernels resources``' compiler), and the grader's
environments, which take only its choice of mode."""

import os

import pytest

from gpukernels import _modes
from gpukernels._modes import mode_env, run_in_mode, start_in_mode
from gpukernels.grade import pool

DIRTY = {"NUMBA_ENABLE_CUDASIM": "0", "GPUKERNELS_DEVICE": "gpu", "NUMBA_OPT": "0", "KEEP": "me"}


@pytest.mark.parametrize("mode, device, cudasim", [("sim", "sim", "1"), ("compile", None, "0"), ("gpu", "gpu", "0")])
def test_mode_env_sets_the_two_variables_that_choose_the_target(mode, device, cudasim):
    env = mode_env(mode, base=DIRTY, MPLBACKEND="Agg")
    assert (env.get("GPUKERNELS_DEVICE"), env["NUMBA_ENABLE_CUDASIM"]) == (device, cudasim)
    assert env["KEEP"] == "me" and env["NUMBA_OPT"] == "0" and env["MPLBACKEND"] == "Agg"
    assert DIRTY["GPUKERNELS_DEVICE"] == "gpu"  # the base is copied, not changed


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        mode_env("cuda")
    with pytest.raises(ValueError, match="not both"):
        run_in_mode("sim", "pass", module="gpukernels")
    with pytest.raises(ValueError, match="not both"):
        run_in_mode("sim")
    with pytest.raises(ValueError, match="COMPILE_PREAMBLE"):
        run_in_mode("compile", module="gpukernels")


def test_a_sim_child_imports_this_checkouts_gpukernels_in_simulator_mode(tmp_path, monkeypatch):
    # another checkout's gpukernels on PYTHONPATH must not win (the rest of PYTHONPATH stays: on a machine whose
    # dependencies live there, the child needs them)
    decoy = tmp_path / "other" / "gpukernels"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the other checkout was imported')\n")
    rest = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(decoy.parent) + (os.pathsep + rest if rest else ""))
    code = ("import sys, gpukernels; print(gpukernels.MODE, gpukernels.__file__, sys.argv[1:], sys.stdin.read(), "
            "sep='|')")
    proc = run_in_mode("sim", code, args=["a", 2], stdin="fed", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    mode, path, argv, stdin = proc.stdout.strip().split("|")
    assert mode == "sim" and os.path.realpath(path) == os.path.realpath(_modes.ROOT / "gpukernels" / "__init__.py")
    assert (argv, stdin) == ("['a', '2']", "fed")


def test_a_module_child_and_a_started_child():
    proc = run_in_mode("sim", module="gpukernels", args=["trace", "--help"])
    assert proc.returncode == 0 and "gpukernels trace" in proc.stdout
    import subprocess

    child = start_in_mode("sim", "import os; print(os.environ['NUMBA_ENABLE_CUDASIM'])", stdout=subprocess.PIPE,
                          text=True)
    assert child.communicate(timeout=60)[0].strip() == "1"


@pytest.mark.needs_numba_cuda  # the compile preamble reloads numba-cuda's config
def test_a_compile_child_has_the_real_target():
    proc = run_in_mode("compile", "from numba.cuda.core import config as c; print(c.ENABLE_CUDASIM)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_the_graders_children_keep_their_scrubbed_environment(monkeypatch):
    """The grader takes only the choice of mode from _modes: none of its own NUMBA_* / GPUKERNELS_* settings and no
    PYTHONPATH of ours reach a submission; Python is pinned (no bytecode files, unbuffered, fixed hash seed)."""
    for k, v in DIRTY.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pinned = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "0"}
    expect = {"sim": {"GPUKERNELS_DEVICE": "sim", "NUMBA_ENABLE_CUDASIM": "1"},
              "compile": {"NUMBA_ENABLE_CUDASIM": "0"},
              "speed": {"GPUKERNELS_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0"}}
    for mode, chosen in expect.items():
        env = pool.child_env(mode)
        ours = {k: v for k, v in env.items() if k.startswith(("NUMBA_", "GPUKERNELS_"))}
        assert ours == chosen, mode
        assert {k: env[k] for k in pinned} == pinned and env["KEEP"] == "me" and "PYTHONPATH" not in env
