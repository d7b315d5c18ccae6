"""Experiments behind benchmarks/NOTES.md: time one lesson kernel compiled with different jit options
(launch_bounds, fastmath) on the GPU, with the same harness as `gpukernels bench`.

    GPUKERNELS_DEVICE=gpu python benchmarks/variants.py matmul double_buffered 4096,4096,4096
"""

import statistics
import sys

import numpy as np
import torch
from numba import cuda

from gpukernels import LESSONS
from gpukernels.bench import Timer, _configure_torch
from gpukernels.check import TOLERANCE, compare

OPTIONS = [{}, {"launch_bounds": (256, 1)}, {"launch_bounds": (256, 2)}]


def main(lesson, version, shape_text):
    _configure_torch(torch)
    mod = LESSONS[lesson]
    shape = tuple(int(v) for v in shape_text.split(","))
    inputs = mod.make_inputs(shape, 0)
    ref = mod.reference(*inputs) if lesson != "matmul" else None
    t_in = [torch.from_numpy(x).cuda() for x in inputs]
    if ref is None:
        ref = torch.mm(t_in[0].double(), t_in[1].double()).float().cpu().numpy()
    out = torch.empty(ref.shape, device="cuda")
    launches = mod.VERSIONS[version].launches(*[cuda.as_cuda_array(x) for x in t_in], out=cuda.as_cuda_array(out))
    timer = Timer(torch)
    for opts in OPTIONS:
        plans = []
        for L in launches:
            kernel = cuda.jit(**opts, **{k: v for k, v in L.kernel.targetoptions.items()
                                         if k in ("fastmath", "launch_bounds") and k not in opts})(L.kernel.py_func)
            plans.append((kernel, L))
        out.fill_(float("nan"))
        s = timer.stream()
        for kernel, L in plans:
            kernel[L.grid, L.block, s](*L.args)
        torch.cuda.synchronize()
        check = compare(out.cpu().numpy(), ref, TOLERANCE[lesson])

        def enqueue(i):
            s = timer.stream()
            for kernel, L in plans:
                kernel[L.grid, L.block, s](*L.args)

        times = timer.time(enqueue, 1)
        regs = [k.get_regs_per_thread() if hasattr(k, "get_regs_per_thread") else None for k, _ in plans]
        print(f"{lesson} {version} {shape} {opts}: {statistics.median(times):.4f} ms  ok={check.ok} "
              f"err={check.rel_error:.2e} regs={regs}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
