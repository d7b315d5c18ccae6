"""Experiments behind benchmarks/NOTES.md: time lesson kernels compiled with different jit options
(launch_bounds, fastmath) on the GPU, with the same harness as `gpukernels bench`, against the library peer
measured in the same run.

    GPUKERNELS_DEVICE=gpu python benchmarks/variants.py matmul unrolled,interior 4096,4096,4096 1024,1024,1024

Each variant's output is poisoned with NaN, checked against a float64 reference, then timed (CUDA-graph
replays, median). Registers per thread come from the driver.
"""

import os
import statistics
import sys

import torch
from numba import cuda

from gpukernels import LESSONS
from gpukernels.bench import Timer, _configure_torch, _peer
from gpukernels.check import TOLERANCE, compare

OPTIONS = [{}, {"launch_bounds": (256, 1)}, {"launch_bounds": (256, 2)}]
if os.environ.get("VARIANT_BLOCKS"):  # e.g. VARIANT_BLOCKS=0,2: default and launch_bounds(256, 2) only
    OPTIONS = [{"launch_bounds": (256, int(b))} if int(b) else {} for b in os.environ["VARIANT_BLOCKS"].split(",")]


def _rebuild(kernel, opts):
    keep = {k: v for k, v in kernel.targetoptions.items() if k in ("fastmath", "launch_bounds") and k not in opts}
    return cuda.jit(**opts, **keep)(kernel.py_func)


def run(lesson, version, shape, timer, peer_ms, inputs, ref, t_in, out):
    mod = LESSONS[lesson]
    launches = mod.VERSIONS[version].launches(*[cuda.as_cuda_array(x) for x in t_in], out=cuda.as_cuda_array(out))
    for opts in OPTIONS:
        threads = launches[0].threads_per_block
        if "launch_bounds" in opts and opts["launch_bounds"][0] != threads:  # same registers per thread
            opts = {"launch_bounds": (threads, opts["launch_bounds"][1] * max(1, 256 // threads))}
        plans = [(_rebuild(L.kernel, opts), L) for L in launches]
        out.fill_(float("nan"))
        s = timer.stream()
        for kernel, L in plans:
            kernel[L.grid, L.block, s](*L.args)
        torch.cuda.synchronize()
        check = compare(out.cpu().numpy(), ref, TOLERANCE[lesson])

        def enqueue(i, plans=plans):
            s = timer.stream()
            for kernel, L in plans:
                kernel[L.grid, L.block, s](*L.args)

        t = statistics.median(timer.time(enqueue, 1))
        regs = []
        for kernel, _ in plans:
            try:
                regs.append(kernel.get_regs_per_thread())
            except Exception:  # noqa: BLE001 - informational only
                regs.append(None)
        print(f"{lesson} {version} {shape} {opts or 'default'}: {t:.4f} ms  x peer {peer_ms / t:.2f}  "
              f"ok={check.ok} err={check.rel_error:.2e} regs={regs}", flush=True)


def main(lesson, versions, *shapes):
    _configure_torch(torch)
    mod = LESSONS[lesson]
    timer = Timer(torch)
    for shape_text in shapes:
        shape = tuple(int(v) for v in shape_text.split(","))
        inputs = mod.make_inputs(shape, 0)
        t_in = [torch.from_numpy(x).cuda() for x in inputs]
        if lesson == "matmul":
            ref = torch.mm(t_in[0].double(), t_in[1].double()).float().cpu().numpy()
        else:
            ref = mod.reference(*inputs)
        name, peer = _peer(lesson, torch)
        peer_ms = statistics.median(timer.time(lambda i: peer(*t_in), 1, min_runs=20))
        print(f"{lesson} {shape} {name}: {peer_ms:.4f} ms", flush=True)
        out = torch.empty(ref.shape, device="cuda")
        for version in versions.split(","):
            run(lesson, version, shape, timer, peer_ms, inputs, ref, t_in, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
