"""The packaging stays one working set: pyproject.toml and environment.yml agree, the built package installs on
every platform a student has, the README's generated tables are current, and the two commands the README promises
exist."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent


def _platform(sys_platform: str, system: str, machine: str) -> dict:
    return {"sys_platform": sys_platform, "platform_system": system, "platform_machine": machine,
            "os_name": "nt" if system == "Windows" else "posix"}


# The platforms students install on, as packaging.markers sees them (python_version: the oldest and newest
# Python the pins have wheels for are both checked).
PLATFORMS = {
    "macOS arm64": _platform("darwin", "Darwin", "arm64"),
    "macOS x86_64": _platform("darwin", "Darwin", "x86_64"),
    "Windows x86_64": _platform("win32", "Windows", "AMD64"),
    "Linux x86_64": _platform("linux", "Linux", "x86_64"),
    "Linux aarch64": _platform("linux", "Linux", "aarch64"),
}
EVERYWHERE = set(PLATFORMS)
NOT_MAC = EVERYWHERE - {"macOS arm64", "macOS x86_64"}
# Which platforms the registry has wheels for, for the pins with platform-specific wheels (everything else in
# the working set -- numpy, matplotlib, greenlet, rich, the dev tools -- has wheels, or is pure Python, for all
# five). Checked on 2026-12 with, per platform tag (macosx_14_0_arm64, macosx_13_0_x86_64, win_amd64,
# manylinux_2_28_x86_64 / _aarch64):
#   pip install --dry-run --ignore-installed --only-binary=:all: --platform TAG --python-version 3.11 \
#       --target /tmp/t "numba-cuda[cu13]==0.30.4"
# numba-cuda publishes no macOS wheel since 0.20.1; numba's last macOS x86_64 wheels are 0.62.1 (llvmlite 0.45.1;
# Python 3.10-3.13); its cu12/cu13 toolchain wheels (cuda-toolkit, nvidia-nvvm, nvidia-nvjitlink) cover the
# same three platforms as numba-cuda.
WHEELS = {
    "numba-cuda": {SpecifierSet(">=0.30.4,<0.31"): NOT_MAC},
    "numba": {SpecifierSet(">=0.68,<0.69"): EVERYWHERE - {"macOS x86_64"}, SpecifierSet(">=0.62,<0.63"): EVERYWHERE},
    "llvmlite": {SpecifierSet(">=0.50,<0.51"): EVERYWHERE - {"macOS x86_64"}, SpecifierSet(">=0.45,<0.46"): EVERYWHERE},
}
EXTRAS = ("", "cu12", "cu13", "dev", "notebooks")


@pytest.fixture(scope="session")  # not "module": xdist interleaves other modules' tests, and each return rebuilt it
def built_requirements(tmp_path_factory) -> list:
    """Requires-Dist of the wheel pip builds from this checkout: what `pip install gpukernels` would read."""
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the checkout: setuptools builds in the source tree (build/, *.egg-info), so two pytest
    # workers building from the checkout itself collided there on the GPU machine ("File exists:
    # build/bdist.linux-x86_64/wheel/...dist-info"), and the checkout would keep the build's leftovers.
    src = tmp_path_factory.mktemp("source") / "gpukernels"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", ".whl", "build", "*.egg-info",
                                                             "__pycache__", ".pytest_cache", "_build"))
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "setuptools" in proc.stdout + proc.stderr:
        # pip could not fetch the build backend into its isolated environment (a machine without an index, such
        # as the GPU machine): build with this environment's setuptools if it has one
        if importlib.util.find_spec("setuptools") is None:
            pytest.skip("pip cannot fetch setuptools to build the wheel here (no package index), and this "
                        "environment has none")
        proc = subprocess.run(cmd + ["--no-build-isolation"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("gpukernels-*.whl")
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
        # the classroom page's script and style are package data (pyproject's [tool.setuptools.package-data])
        assert {"gpukernels/classroom/page.js", "gpukernels/classroom/page.css"} <= set(z.namelist())
    assert set(meta.get_all("Provides-Extra")) >= {"cu12", "cu13", "dev"}
    return [Requirement(r) for r in meta.get_all("Requires-Dist")]


def active(reqs: list, platform: str, extra: str = "", python: str = "3.11") -> list:
    env = dict(PLATFORMS[platform], python_version=python, python_full_version=f"{python}.0", extra=extra)
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


@pytest.mark.slow  # building the wheel and resolving its metadata: 25 s, for what only a release changes
@pytest.mark.xdist_group("wheel")  # one worker builds the wheel once (a module fixture is per worker)
@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_the_built_package_requires_only_what_has_wheels_on(platform, built_requirements):
    """`pip install gpukernels[...]` with any extra asks, on each platform, only for pins that have wheels there:
    on a Mac neither numba-cuda nor its CUDA toolchain, on an Intel Mac the last numba with its wheels."""
    for python in ("3.10", "3.13"):
        for extra in EXTRAS:
            for req in active(built_requirements, platform, extra, python):
                known = WHEELS.get(req.name.lower())
                if known is None:
                    continue
                assert req.specifier in known, (f"{req}: a pin WHEELS does not know; check its wheels with pip "
                                                f"(see the comment above WHEELS) and add it")
                assert platform in known[req.specifier], (f"{req} is required on {platform} (extra {extra!r}), "
                                                          f"which it has no wheels for")
    names = {r.name.lower() for r in active(built_requirements, platform, "cu13")}
    assert {"numba", "llvmlite", "numpy", "matplotlib", "greenlet", "rich"} <= names
    assert ("numba-cuda" in names) == (platform in NOT_MAC)


@pytest.mark.slow
@pytest.mark.xdist_group("wheel")
def test_a_mac_gets_no_cuda_toolchain_from_any_extra(built_requirements):
    for platform in ("macOS arm64", "macOS x86_64"):
        for extra in EXTRAS:
            names = {r.name.lower() for r in active(built_requirements, platform, extra)}
            assert not names & {"numba-cuda", "cuda-bindings", "cuda-toolkit", "nvidia-nvvm"}, (platform, extra)


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pins(req: str) -> str:
    req = re.sub(r"\[.*?\]", "", req.split(";")[0])
    return req[len(_name(req)):].strip().replace(" ", "")


def pyproject_requirements(platform: str = "Linux x86_64") -> dict:
    """name -> pins, as pyproject.toml's markers resolve them on ``platform``, with the cu13, dev and notebooks
    extras."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"])
    for extra in ("cu13", "dev", "notebooks"):
        reqs += data["optional-dependencies"][extra]
    out = {}
    env = PLATFORMS[platform]
    for r in reqs:
        marker = Requirement(r).marker
        if marker is None or marker.evaluate(dict(env, extra="")):
            out.setdefault(_name(r), _pins(r))
    return out


def environment_requirements() -> dict:
    out = {}
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("dependencies:", 1)[1].splitlines():
        m = re.match(r"^\s*-\s+[\"']?([A-Za-z0-9_.\-\[\]]+[^#]*)$", line)
        if not m:
            continue
        spec = m.group(1).strip().strip("\"'")
        if spec in ("pip", "pip:", "-e .") or spec.startswith(("python=", "-e")):
            continue
        out.setdefault(_name(spec), _pins(spec))
    return out


def test_environment_yml_installs_no_cuda_toolchain_on_a_mac():
    """environment.yml's pip lines carry pyproject's markers, so `conda env create` works on a Mac too."""
    text = (ROOT / "environment.yml").read_text()
    pip_lines = [ln.strip()[2:].strip().strip("\"'") for ln in text.split("- pip:", 1)[1].splitlines()
                 if ln.strip().startswith("- ")]
    cuda = [Requirement(ln) for ln in pip_lines if _name(ln) == "numba-cuda"]
    assert cuda, "environment.yml installs numba-cuda with pip"
    for req in cuda:
        for platform in PLATFORMS:
            assert (req.marker is not None and req.marker.evaluate(PLATFORMS[platform])) == (platform in NOT_MAC), \
                (str(req), platform)


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


@pytest.mark.parametrize("uname, cuda, extras", [
    ("Darwin", None, "dev"),          # a Mac: no numba-cuda wheels, so no CUDA extra at all
    ("Linux", None, "cu13,dev"),      # no driver: the CUDA 13 compiler (resources, the compile gate)
    ("Linux", "12.4", "cu12,dev"),
    ("Linux", "13.0", "cu13,dev"),
    ("MINGW64_NT-10.0", "12.8", "cu12,dev"),  # make in Git Bash on Windows
])
def test_make_chooses_the_extras_from_the_platform_and_the_driver(tmp_path, uname, cuda, extras):
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uname").write_text(f"#!/bin/sh\necho {uname}\n")
    # a stand-in nvidia-smi first on PATH: the driver's line, or (no driver) one that fails as a missing one would;
    # the real one (on a GPU machine, often in /usr/bin beside make itself) is never reached
    (fake / "nvidia-smi").write_text(f"#!/bin/sh\necho '| NVIDIA-SMI 570.00  Driver Version: 570.00  CUDA Version: "
                                     f"{cuda}     |'\n" if cuda else "#!/bin/sh\nexit 127\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    path = os.pathsep.join([str(fake), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if k not in ("EXTRAS", "MAKEFLAGS", "MFLAGS")}
    result = subprocess.run(["make", "-s", "extras"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env=dict(env, PATH=path))
    assert result.returncode == 0, result.stderr
    assert f'pip install -e ".[{extras}]"' in result.stdout, result.stdout


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


def test_info_names_the_backend_and_what_is_unavailable():
    import json

    result = subprocess.run([sys.executable, "-m", "gpukernels", "info", "--json"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    info = json.loads(result.stdout)
    assert any(word in info["backend"] for word in ("numba-cuda on a GPU", "numba-cuda's simulator",
                                                    "Numba's built-in simulator")), info["backend"]
    assert isinstance(info["unavailable"], list) and info["cuda_toolchain"]
    table = subprocess.run([sys.executable, "-m", "gpukernels", "info"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert f"Kernels run on {info['backend']}." in table.stdout
    for line in info["unavailable"]:
        assert f"unavailable here: {line}" in table.stdout


@pytest.mark.parametrize("how", ["-m", "script"])
def test_a_bad_device_value_is_one_line_not_a_traceback(how):
    script = Path(sys.executable).with_name("gpukernels" + (".exe" if os.name == "nt" else ""))
    if how == "script" and not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    cmd = [sys.executable, "-m", "gpukernels", "info"] if how == "-m" else [str(script), "info"]
    env = dict(os.environ, GPUKERNELS_DEVICE="bogus", PYTHONPATH=str(ROOT))
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    assert "GPUKERNELS_DEVICE" in result.stderr and "auto, gpu, sim" in result.stderr and "'bogus'" in result.stderr


def test_gpu_mode_without_gpu_fails_clearly():
    import gpukernels

    if gpukernels.MODE == "gpu":
        pytest.skip("this machine has a GPU")
    env = {"GPUKERNELS_DEVICE": "gpu", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", "import gpukernels"], cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode != 0
    assert "no usable CUDA GPU" in result.stderr and "GPUKERNELS_DEVICE" in result.stderr


@pytest.mark.slow  # 8 CPU-s: every version of every lesson in a child process (test_lessons runs each of them)
def test_demo_runs_in_the_simulator_or_on_the_gpu(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpukernels", "demo", "softmax"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "softmax" in result.stdout and "optimized" in result.stdout
    assert not any(tmp_path.iterdir()), "demo without --save wrote files"


@pytest.mark.slow  # the figures trace every version in the simulator: a minute and a half of CPU
def test_demo_saves_its_figures(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpukernels", "demo", "softmax", "--save", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "softmax" in result.stdout and "optimized" in result.stdout
    figures = sorted(p.name for p in (tmp_path / "softmax").glob("*.png"))
    assert "softmax_performance.png" in figures and "roofline.png" in figures and "softmax_reuse.png" in figures


@pytest.mark.slow  # test_demo_saves_its_figures runs the demo itself (above); this draws every figure again in a child
def test_demo_draws_its_figures_in_a_simulator_child(tmp_path):
    """On a GPU machine the tracer can't run in the demo's process: the figures come from a simulator child."""
    from rich.console import Console

    from gpukernels.demo import save_figures

    names = [p.name for p in save_figures("softmax", tmp_path / "softmax", Console(), in_child=True)]
    assert "softmax_performance.png" in names and "roofline.png" in names and "softmax_reuse.png" in names
