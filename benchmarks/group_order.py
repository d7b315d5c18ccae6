"""Experiment behind benchmarks/NOTES.md: does the grouped block order (``swizzled``) pay, per tile and shape?

    GPUKERNELS_DEVICE=gpu python benchmarks/group_order.py 4096,4096,4096 4095,4097,4093

Builds the matmul factory's kernels with 1, 4, 8 and 16 tile rows per group (the 128 x 128 x 16 tile of
``swizzled`` and the 256 x 128 x 8 tile of ``thread_16x8``, scalar loads so that every shape can run them), checks
each against a float64 reference on NaN-poisoned output, then times it with the bench harness against cuBLAS in
the same run.
"""

import statistics
import sys

import torch
from numba import cuda

from gpukernels import matmul
from gpukernels.matmul._common import tiled_launch
from gpukernels.matmul._interior import make_interior_kernel
from gpukernels.bench import Timer, _configure_torch
from gpukernels.check import TOLERANCE, compare

TILES = {"128x128x16": dict(bm=128, bn=128, bk=16), "256x128x8": dict(bm=256, bn=128, bk=8, rows=16)}
GROUPS = (1, 4, 8, 16)


def main(*shapes):
    _configure_torch(torch)
    timer = Timer(torch)
    for text in shapes:
        m, n, k = (int(v) for v in text.split(","))
        a, b = (torch.from_numpy(x).cuda() for x in matmul.make_inputs((m, n, k), 0))
        ref = torch.mm(a.double(), b.double()).float().cpu().numpy()
        peer_ms = statistics.median(timer.time(lambda i: torch.mm(a, b), 1, min_runs=20))
        print(f"{m}x{n}x{k} cuBLAS: {peer_ms:.4f} ms", flush=True)
        c = torch.empty(m, n, device="cuda")
        args = [cuda.as_cuda_array(x) for x in (a, b, c)]
        for tile, params in TILES.items():
            for group in GROUPS:
                kernel = make_interior_kernel(group=group, **params)
                (launch,) = tiled_launch(kernel, args[2], args)
                c.fill_(float("nan"))
                launch()
                cuda.synchronize()
                check = compare(c.cpu().numpy(), ref, TOLERANCE["matmul"])
                t = statistics.median(timer.time(lambda i: launch(stream=timer.stream()), 1))
                print(f"{m}x{n}x{k} {tile} group {group:2d}: {t:.4f} ms  x cuBLAS {peer_ms / t:.3f}  "
                      f"ok={check.ok} err={check.rel_error:.1e}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
