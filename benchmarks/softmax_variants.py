"""Experiments behind benchmarks/NOTES.md: time `softmax.optimized` with other launch configurations than
`optimized_config` picks (threads per row, cached values per thread, rows per block for warp-per-row), and
the two-pass online kernel, against torch.softmax in the same run.

    GPUKERNELS_DEVICE=gpu python benchmarks/softmax_variants.py 16384,1024 65536,128
"""

import statistics
import sys

import torch
from numba import cuda

from gpukernels import softmax
from gpukernels.bench import Timer, _configure_torch
from gpukernels.check import TOLERANCE, compare


def candidates(n):
    """(threads, elems, cached, rows per block) configurations that fit a row of n."""
    out = [softmax.optimized_config(n) + (softmax.WARP_ROWS,)]
    for threads in (32, 64, 128, 256, 512, 1024):
        elems = 1 << (max(1, -(-n // threads)) - 1).bit_length()
        if elems > 64 or (threads == 1024 and elems > 16) or elems < 2:
            continue
        for rows in ((4, 8, 16) if threads == 32 else (1,)):
            cfg = (threads, elems, True, rows)
            if cfg not in out:
                out.append(cfg)
    out.append((1024, 1, False, 1))
    return out


def main(shapes):
    _configure_torch(torch)
    timer = Timer(torch)
    original = softmax.optimized_config, softmax.WARP_ROWS
    for text in shapes:
        m, n = (int(v) for v in text.split(","))
        (x,) = softmax.make_inputs((m, n), 0)
        ref = torch.softmax(torch.from_numpy(x).cuda().double(), -1).float().cpu().numpy()
        sets = max(1, min(16, (256 << 20) // (8 * m * n)))
        xs = [torch.from_numpy(x).cuda() for _ in range(sets)]
        ys = [torch.empty_like(xs[0]) for _ in range(sets)]
        tt = statistics.median(timer.time(lambda i: torch.softmax(xs[i], -1), sets))
        print(f"softmax {m}x{n} torch.softmax: {tt:.4f} ms", flush=True)
        for threads, elems, cached, rows in candidates(n):
            softmax.optimized_config = lambda n, c=(threads, elems, cached): c
            softmax.WARP_ROWS = rows
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
            print(f"softmax {m}x{n} threads={threads} elems={elems} cached={cached} rows/block={rows}: "
                  f"{t:.4f} ms ok={ok} {8 * m * n / t / 1e6:.0f} GB/s x torch {tt / t:.2f}", flush=True)
        softmax.optimized_config, softmax.WARP_ROWS = original


if __name__ == "__main__":
    main(sys.argv[1:])
