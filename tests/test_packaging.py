"""The packaging stays one working set: pyproject.toml and environment.yml agree, the README's generated
tables are current, and the two commands the README promises exist."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pins(req: str) -> str:
    req = re.sub(r"\[.*?\]", "", req)
    return req[len(_name(req)):].strip().replace(" ", "")


def pyproject_requirements() -> dict:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"])
    for extra in ("cu13", "dev", "notebooks"):
        reqs += data["optional-dependencies"][extra]
    out = {}
    for r in reqs:
        out.setdefault(_name(r), _pins(r))
    return out


def environment_requirements() -> dict:
    out = {}
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("dependencies:", 1)[1].splitlines():
        m = re.match(r"^\s*-\s+([A-Za-z0-9_.\-\[\]]+[^#]*)$", line)
        if not m:
            continue
        spec = m.group(1).strip()
        if spec in ("pip", "pip:", "-e .") or spec.startswith(("python=", "-e")):
            continue
        out.setdefault(_name(spec), _pins(spec))
    return out


def test_environment_yml_matches_pyproject():
    py, env = pyproject_requirements(), environment_requirements()
    assert set(py) == set(env), f"only in pyproject: {set(py) - set(env)}; only in environment.yml: {set(env) - set(py)}"
    for name in py:
        assert py[name] == env[name], f"{name}: pyproject pins {py[name]!r}, environment.yml {env[name]!r}"


def test_numpy_pinned_below_2_5():
    assert "<2.5" in pyproject_requirements()["numpy"]


def test_known_broken_combination_is_reported():
    from gpukernels._device import compatibility_warnings

    bad = compatibility_warnings({"numba-cuda": "0.30.4", "numpy": "2.5.2"})
    assert bad and "row_stack" in bad[0] and "numpy<2.5" in bad[0]
    assert compatibility_warnings({"numba-cuda": "0.30.4", "numpy": "2.4.6"}) == []


def test_readme_tables_are_current():
    result = subprocess.run([sys.executable, "-m", "gpukernels.readme", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_readme_gives_the_two_commands_and_ci_calls_make_test():
    readme = (ROOT / "README.md").read_text()
    assert readme.index("make test") < readme.index("## Install")
    assert "make demo" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:", makefile, re.M) and re.search(r"^demo:", makefile, re.M)


def test_info_command_runs():
    result = subprocess.run([sys.executable, "-m", "gpukernels", "info", "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    assert '"mode"' in result.stdout


def test_gpu_mode_without_gpu_fails_clearly():
    import gpukernels

    if gpukernels.MODE == "gpu":
        pytest.skip("this machine has a GPU")
    env = {"GPUKERNELS_DEVICE": "gpu", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", "import gpukernels"], cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode != 0
    assert "no usable CUDA GPU" in result.stderr and "GPUKERNELS_DEVICE" in result.stderr


def test_demo_runs_in_the_simulator_or_on_the_gpu(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpukernels", "demo", "softmax", "--save", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "softmax" in result.stdout and "optimized" in result.stdout
    figures = sorted(p.name for p in (tmp_path / "softmax").glob("*.png"))
    assert "softmax_performance.png" in figures and "roofline.png" in figures and "softmax_reuse.png" in figures


def test_demo_draws_its_figures_in_a_simulator_child(tmp_path):
    """On a GPU machine the tracer can't run in the demo's process: the figures come from a simulator child."""
    from rich.console import Console

    from gpukernels.demo import save_figures

    names = [p.name for p in save_figures("softmax", tmp_path / "softmax", Console(), in_child=True)]
    assert "softmax_performance.png" in names and "roofline.png" in names and "softmax_reuse.png" in names
