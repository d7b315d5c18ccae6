"""Experiment behind benchmarks/NOTES.md: for long rows, is it faster to cache the row in registers
(512 threads x 64 values, one read, 1 block per SM) or to use the two-pass online kernel (1024 threads,
the second read mostly from L2)? Times `softmax.optimized` with the cached-row limit moved.

    GPUKERNELS_DEVICE=gpu python benchmarks/softmax_variants.py 1024,32768 16384,2048
"""

import statistics
import sys

import torch

from gpukernels import softmax
from gpukernels.bench import Timer, _configure_torch
from gpukernels.check import TOLERANCE, compare
from numba import cuda


def main(shapes):
    _configure_torch(torch)
    timer = Timer(torch)
    for text in shapes:
        m, n = (int(v) for v in text.split(","))
        (x,) = softmax.make_inputs((m, n), 0)
        ref = torch.softmax(torch.from_numpy(x).cuda().double(), -1).float().cpu().numpy()
        sets = 4
        xs = [torch.from_numpy(x).cuda() for _ in range(sets)]
        ys = [torch.empty_like(xs[0]) for _ in range(sets)]
        for limit in (4096, 8192, 16384, 32768):
            softmax.MAX_CACHED = limit
            plans = [softmax.optimized.launches(cuda.as_cuda_array(xs[i]), out=cuda.as_cuda_array(ys[i]))
                     for i in range(sets)]
            ys[0].fill_(float("nan"))
            for L in plans[0]:
                L()
            torch.cuda.synchronize()
            ok = compare(ys[0].cpu().numpy(), ref, TOLERANCE["softmax"]).ok

            def enqueue(i, plans=plans):
                s = timer.stream()
                for L in plans[i]:
                    L(stream=s)

            t = statistics.median(timer.time(enqueue, sets))
            cfg = softmax.optimized_config(n)
            print(f"softmax {m}x{n} cached-limit {limit}: config {cfg} {t:.4f} ms ok={ok} "
                  f"({8 * m * n / t / 1e6:.0f} GB/s)", flush=True)
        tt = statistics.median(timer.time(lambda i: torch.softmax(xs[i], -1), sets))
        print(f"softmax {m}x{n} torch.softmax: {tt:.4f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
