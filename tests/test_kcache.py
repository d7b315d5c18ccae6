"""The shared cache of compiled kernels (gpukernels._kcache): the GPU suite's workers compile each kernel once.

Its entries must never hand a process the wrong kernel: keyed by every source file of the package, one file per
entry named and checked by its whole key, only the package's own kernels, never in the grader's children."""

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from gpukernels import _kcache
from gpukernels._modes import run_in_mode
from gpukernels.grade.pool import child_env

ROOT = Path(__file__).resolve().parents[1]


def test_the_folder_is_named_by_every_source_file(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ROOT / "gpukernels" / "matmul", pkg / "matmul")
    (pkg / "_intrinsics.py").write_text("X = 1\n")
    before = _kcache.source_key(pkg)
    assert before == _kcache.source_key(pkg)
    (pkg / "_intrinsics.py").write_text("X = 2\n")  # a device function's file, not the kernel's: a new folder
    assert _kcache.source_key(pkg) != before
    (pkg / "_intrinsics.py").write_text("X = 1\n")
    (pkg / "matmul" / "k03_new.py").write_text("")  # a new file too
    assert _kcache.source_key(pkg) != before


def test_a_shared_folder_lasts_the_block_unless_the_caller_set_one(monkeypatch, tmp_path):
    monkeypatch.delenv(_kcache.ENV, raising=False)
    with _kcache.shared() as path:
        assert os.environ[_kcache.ENV] == path and Path(path).is_dir()
        assert _kcache.folder().parent == Path(path)  # the processes it starts inherit it
    assert _kcache.ENV not in os.environ and not Path(path).exists() and _kcache.folder() is None
    monkeypatch.setenv(_kcache.ENV, str(tmp_path))  # the caller's: used and kept
    with _kcache.shared() as path:
        assert path == str(tmp_path)
    assert tmp_path.is_dir() and os.environ[_kcache.ENV] == str(tmp_path)
    monkeypatch.setenv(_kcache.ENV, "")  # set empty: no cache
    with _kcache.shared() as path:
        assert path is None
    _kcache._FOLDER.clear()


def test_lookups_are_counted_per_process(tmp_path):
    log = tmp_path / "log"
    log.write_text("11 1.00 0.01 hit gpukernels.m.k (float32[:],)\n12 1.00 2.50 compiled gpukernels.m.k (int32,)\n"
                   "11 2.00 0.02 hit gpukernels.m.j (float32[:],)\n11 3.00 1.00 waited gpukernels.m.i ()\n")
    assert _kcache.lookups(log, 11) == {"hit": 2, "waited": 1}
    assert _kcache.lookups(log) == {"hit": 2, "compiled": 1, "waited": 1}
    assert _kcache.lookups(tmp_path / "missing") == {}


def test_the_graders_children_never_see_it(monkeypatch):
    monkeypatch.setenv(_kcache.ENV, "/tmp/anywhere")
    for mode in ("sim", "compile", "speed"):
        assert _kcache.ENV not in child_env(mode)


_CHILD = textwrap.dedent("""
    import json, os, sys
    from numba import cuda
    from numba.cuda.core.caching import NullCache
    from gpukernels import _kcache
    from gpukernels.matmul import k01_naive

    kernel = k01_naive.naive_kernel
    @cuda.jit
    def theirs(x):  # a kernel of __main__, as a student's would be
        x[0] = 1
    for k in (kernel, theirs):
        _kcache.attach(k)
        _kcache.attach(k)  # idempotent
    out = {"ours": type(kernel._cache).__name__, "theirs": isinstance(theirs._cache, NullCache)}
    if os.environ.get(_kcache.ENV):
        c = kernel._cache
        out["path"] = c.cache_path
        files = c._cache_file
        files.save(("sig", 1), {"data": 1})
        files.save(("sig", 2), {"data": 2})
        out["load"] = [files.load(("sig", 1)), files.load(("sig", 2)), files.load(("sig", 3))]
        a, b = files._file(("sig", 1)), files._file(("sig", 2))
        os.replace(b, a)  # another key's entry under this key's name: refused, not loaded
        out["swapped"] = files.load(("sig", 1))
        open(a, "wb").write(b"torn")  # a partial write: refused
        out["torn"] = files.load(("sig", 1))
        out["left"] = sorted(os.listdir(c.cache_path))
    print(json.dumps(out))
""")


@pytest.mark.needs_cuda_toolchain  # a real numba-cuda dispatcher (the compile target: no GPU needed)
def test_only_the_packages_kernels_one_checked_file_per_entry(tmp_path, monkeypatch):
    monkeypatch.delenv(_kcache.ENV, raising=False)  # (the GPU suite's own folder)
    unset = run_in_mode("compile", _CHILD, env={}, cwd=tmp_path)
    assert unset.returncode == 0, unset.stderr
    assert json.loads(unset.stdout.splitlines()[-1]) == {"ours": "NullCache", "theirs": True}
    got = run_in_mode("compile", _CHILD, env={_kcache.ENV: str(tmp_path / "k")}, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout.splitlines()[-1])
    assert out["ours"] == "SharedCache" and out["theirs"] is True
    assert Path(out["path"]).parent == tmp_path / "k" and Path(out["path"]).name == _kcache.source_key()
    assert out["load"] == [{"data": 1}, {"data": 2}, None]
    assert out["swapped"] is None and out["torn"] is None
    assert not any(".tmp." in f for f in out["left"])  # written under a temporary name, renamed into place


@pytest.mark.gpu
def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    code = textwrap.dedent("""
        import json, sys
        import numpy as np
        import gpukernels
        from gpukernels import matmul
        a, b = matmul.make_inputs((33, 31, 40), int(sys.argv[1]))
        ref = matmul.reference(a, b)
        err, hits, misses = 0.0, 0, 0
        for version in (matmul.tiled, matmul.swizzled):  # swizzled's kernel calls device functions of a factory
            c = version(a, b)
            err = max(err, float(np.abs(c - ref).max() / np.abs(ref).max()))
            hits += sum(sum(v._cache_hits.values()) for v in version.kernels)
            misses += sum(sum(v._cache_misses.values()) for v in version.kernels)
        print(json.dumps({"err": err, "hits": hits, "misses": misses}))
    """)
    runs = []
    for seed in (1, 2):
        r = run_in_mode("gpu", code, args=[seed], env={_kcache.ENV: str(tmp_path)})
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.splitlines()[-1]))
    assert runs[0]["misses"] >= 2 and runs[0]["hits"] == 0, runs
    assert runs[1]["hits"] >= 2 and runs[1]["misses"] == 0, runs
    assert all(r["err"] < 1e-5 for r in runs), runs


@pytest.mark.gpu
def test_processes_that_miss_together_compile_each_kernel_once(tmp_path):
    """Three processes that launch the same kernels at once: one compiles each, the others wait for its entry
    (or find it), and every result is still correct."""
    from gpukernels._modes import start_in_mode

    code = textwrap.dedent("""
        import json, sys
        import numpy as np
        from gpukernels import matmul
        a, b = matmul.make_inputs((45, 37, 29), int(sys.argv[1]))
        c = matmul.tiled(a, b)
        ref = matmul.reference(a, b)
        print(json.dumps({"err": float(np.abs(c - ref).max() / np.abs(ref).max())}))
    """)
    log = tmp_path / "log.txt"
    env = {_kcache.ENV: str(tmp_path / "k"), _kcache.LOG_ENV: str(log)}
    kids = [start_in_mode("gpu", code, args=[seed], env=env, stdout=-1, stderr=-1, text=True) for seed in (1, 2, 3)]
    outs = [kid.communicate(timeout=600) for kid in kids]
    for kid, (out, err) in zip(kids, outs):
        assert kid.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["err"] < 1e-5
    lines = [line.split(" ", 5) for line in log.read_text().splitlines()]
    assert len({line[0] for line in lines}) == 3, lines  # every process looked its kernels up
    by_kernel: dict = {}
    for pid, _start, _secs, event, name, sig in lines:
        by_kernel.setdefault((name, sig), []).append(event)
    for key, events in by_kernel.items():
        assert sorted(events) in (["compiled", "hit", "hit"], ["compiled", "hit", "waited"],
                                  ["compiled", "waited", "waited"]), (key, events)


_KEYS = textwrap.dedent("""
    import json
    from gpukernels import _kcache, resources

    class Codegen:  # the target's own asks the (absent) GPU for its compute capability
        def magic_tuple(self):
            return ("nvptx64-nvidia-cuda", (9, 0), "")

    codegen = Codegen()
    keys, device_functions = {}, 0
    shapes = (("matmul", (300, 200, 100)), ("cbr", (2, 8, 9, 9, 8, 3, 3)), ("attention", (1, 2, 40, 70, 64)))
    for lesson, shape in shapes:
        for version, launches in resources.plans_for(lesson, shape).items():
            for launch in launches:
                kernel = launch.kernel
                _kcache.attach(kernel)
                cells = [c.cell_contents for c in kernel.py_func.__closure__ or ()]
                device_functions += any(hasattr(c, "py_func") for c in cells)
                name = f"{lesson}.{version}.{kernel.py_func.__qualname__}{launch.sig}"
                keys[name] = repr(kernel._cache._index_key(launch.sig, codegen))
    print(json.dumps({"keys": keys, "device_functions": device_functions}))
""")


@pytest.mark.needs_cuda_toolchain
def test_every_process_keys_a_kernel_alike(tmp_path):
    """A kernel whose closure holds a device function (a factory's) gets the same key in every process, so the
    GPU suite's workers and the benchmark's compile-ahead processes load what another compiled: Numba's own key
    pickles the device function with a UUID drawn per process, and two thirds of matmul's kernels never matched."""
    runs = []
    for _ in range(2):
        r = run_in_mode("compile", _KEYS, env={_kcache.ENV: str(tmp_path)}, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.splitlines()[-1]))
    assert runs[0]["device_functions"] >= 5, runs[0]  # the case the key is for is there
    assert runs[0]["keys"] == runs[1]["keys"]
    by_key: dict = {}
    for name, key in runs[0]["keys"].items():
        by_key.setdefault(key, set()).add(name.split(".", 2)[2])
    assert all(len(names) == 1 for names in by_key.values()), [n for n in by_key.values() if len(n) > 1]
