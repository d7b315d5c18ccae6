"""The tracer against Nsight Compute: on a GPU, ncu's counters for lesson kernels equal what the
tracer counts in the simulator at the same shape.

    GPUKERNELS_DEVICE=gpu python -m pytest tests/test_tracer_ncu.py      # needs ncu and a GPU

Each case runs twice, in child processes: once on the simulator under ``gpukernels.trace()``, once on the GPU
under ``ncu --clock-control none``, with the same inputs; all launches of the version are summed.

* Global memory: load and store requests (one per warp instruction) and 32-byte sectors must be equal.
* Shared memory: the tracer sees one access per element the Python source reads, and counts one request and
  as many wavefronts as its worst bank needs. That is what the GPU does for 32-bit accesses. When the compiler
  merges a thread's reads of consecutive shared words into one wider load (``LDS.64``/``LDS.128``, seen in
  ``tiled``: 8192 accesses in the tracer, 5120 instructions and 6144 wavefronts in ncu), the GPU needs fewer
  instructions and wavefronts than the tracer counts. The rule tested: where ncu's shared-load instructions
  equal the tracer's requests (no merged loads), wavefronts and bank conflicts are exact; where they are fewer,
  the tracer's requests and wavefronts are upper bounds of ncu's. Stores are always exact.
"""

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpukernels

ROOT = Path(__file__).resolve().parents[1]
NCU = shutil.which("ncu")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(NCU is None, reason="Nsight Compute (ncu) is not on PATH"),
    pytest.mark.skipif(gpukernels.MODE != "gpu", reason="profiles a real GPU (GPUKERNELS_DEVICE=gpu)"),
]

# ncu metric -> the tracer's figure of the same name
METRICS = {
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global_load_requests",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global_store_requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "global_load_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "global_store_sectors",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared_load_wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "shared_store_wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared_load_conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared_store_conflicts",
    "smsp__inst_executed_op_shared_ld.sum": "shared_load_requests",
}

CASES = [("matmul", v, s) for v in ("naive", "coalesced", "tiled", "regblock_2d", "conflict_free")
         for s in ((64, 64, 32), (128, 128, 64))]
CASES += [("softmax", v, (64, 512)) for v in ("naive", "optimized")]

# The child: run one version once (``--trace``: under the tracer, on the simulator) and print JSON figures.
CHILD = """
import json, sys
import gpukernels
lesson, version, shape, traced = sys.argv[1], sys.argv[2], tuple(map(int, sys.argv[3].split(","))), sys.argv[4] == "1"
mod = gpukernels.LESSONS[lesson]
inputs = mod.make_inputs(shape, 0)
if not traced:
    mod.VERSIONS[version](*inputs)
    sys.exit(0)
with gpukernels.trace(count_local=False) as t:  # global and shared memory only
    mod.VERSIONS[version](*inputs)
out = dict.fromkeys(["global_load_requests", "global_store_requests", "global_load_sectors", "global_store_sectors",
                     "shared_load_requests", "shared_load_wavefronts", "shared_store_requests",
                     "shared_store_wavefronts"], 0)
for line in t.coalescing().lines:
    kind = {"read": "load", "write": "store"}.get(line.kind)
    if kind:
        out[f"global_{kind}_requests"] += line.requests
        out[f"global_{kind}_sectors"] += line.sectors
for line in t.bank_conflicts():
    kind = {"read": "load", "write": "store"}.get(line.kind)
    if kind:
        out[f"shared_{kind}_requests"] += line.requests
        out[f"shared_{kind}_wavefronts"] += line.wavefronts
out["shared_load_conflicts"] = out["shared_load_wavefronts"] - out["shared_load_requests"]
out["shared_store_conflicts"] = out["shared_store_wavefronts"] - out["shared_store_requests"]
print(json.dumps(out))
"""


def _env(device: str) -> dict:
    env = dict(os.environ, GPUKERNELS_DEVICE=device, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if device == "sim":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def traced(lesson, version, shape) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, lesson, version, ",".join(map(str, shape)), "1"],
                          env=_env("sim"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def profiled(lesson, version, shape) -> dict:
    """ncu's metrics summed over every kernel the version launched."""
    cmd = [NCU, "--clock-control", "none", "--target-processes", "all", "--csv", "--metrics", ",".join(METRICS),
           sys.executable, "-c", CHILD, lesson, version, ",".join(map(str, shape)), "0"]
    proc = subprocess.run(cmd, env=_env("gpu"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    rows = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    totals = dict.fromkeys(METRICS.values(), 0)
    kernels = set()
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        name = row.get("Metric Name")
        if name in METRICS:
            totals[METRICS[name]] += int(float(row["Metric Value"].replace(",", "")))
            kernels.add(row.get("ID"))
    assert kernels, f"ncu reported no kernel: {proc.stdout[-2000:]}"
    return totals


@pytest.mark.parametrize("lesson, version, shape", CASES, ids=[f"{l}.{v}-{'x'.join(map(str, s))}" for l, v, s in CASES])
def test_tracer_counts_what_nsight_compute_measures(lesson, version, shape):
    sim, gpu = traced(lesson, version, shape), profiled(lesson, version, shape)
    report = f"{lesson}.{version} {shape}: tracer {sim}, ncu {gpu}"
    for key in ("global_load_requests", "global_store_requests", "global_load_sectors", "global_store_sectors",
                "shared_store_wavefronts", "shared_store_conflicts"):
        assert sim[key] == gpu[key], f"{key}: {report}"
    if gpu["shared_load_requests"] == sim["shared_load_requests"]:  # every shared load a 32-bit one: exact
        for key in ("shared_load_wavefronts", "shared_load_conflicts"):
            assert sim[key] == gpu[key], f"{key}: {report}"
    else:  # the compiler merged loads into wider ones: fewer instructions and wavefronts than the tracer counts
        assert gpu["shared_load_requests"] < sim["shared_load_requests"], report
        assert gpu["shared_load_wavefronts"] <= sim["shared_load_wavefronts"], report
