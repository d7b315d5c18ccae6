"""Block-tile widths and ring depths of the wgmma step (tensor_core.k06_wgmma.make_wgmma_kernel), timed on a GPU:
the measurements behind step 6's 128 x 256 tile and 4-stage ring. ``--tma`` times each variant's twin from step 7
(tensor_core.k07_tma.make_tma_kernel: the same kernel fed by TMA) and from step 8
(tensor_core.k08_warp_specialized.make_warp_specialized_kernel: a producer warpgroup and the consumers) beside it.

    GPUKERNELS_DEVICE=gpu python3 benchmarks/wgmma_variants.py [--shapes 4096,4096,4096 ...] [--small] [--tma]

Each variant's result is checked against float64 (on a NaN-poisoned output) before it is timed as the benchmark
times (`gpukernels._timing.Timer`: CUDA-graph replay, input sets rotated past L2, median); torch.mm (fp16 in, fp32
out) beside, timed the same way. (Until 2026-12-05 the script timed 10 back-to-back launches by events: at 1024^3 and
below that measured the host's launches, ~80 us, not the kernels.)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import torch  # noqa: E402
from numba import cuda  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from tensor_core_check import rel_error  # noqa: E402

from gpukernels import tensor_core as tc  # noqa: E402
from gpukernels._timing import Timer, _configure_torch  # noqa: E402
from gpukernels._tma import TensorMap  # noqa: E402
from gpukernels.tensor_core.k06_wgmma import make_wgmma_kernel, wgmma_launch  # noqa: E402
from gpukernels.tensor_core.k07_tma import make_tma_kernel, tma_launch  # noqa: E402
from gpukernels.tensor_core.k08_warp_specialized import make_warp_specialized_kernel  # noqa: E402

# (block columns, ring stages, wgmma groups kept running, tile rows per group of the block order[, block rows])
VARIANTS = [(256, 4, 1, 8), (256, 4, 0, 8), (256, 4, 1, 1), (256, 4, 1, 16), (256, 3, 0, 8), (128, 4, 1, 8),
            (128, 6, 1, 8), (128, 6, 0, 8)]
#: --small: the tiles for products too small to fill the SMs with 128 x 256 (one warpgroup per 64 rows)
SMALL = [(256, 4, 1, 8), (128, 4, 1, 8), (128, 6, 1, 8), (256, 4, 1, 8, 64), (128, 4, 1, 8, 64), (128, 8, 1, 8, 64),
         (64, 8, 1, 8, 64), (64, 4, 1, 8, 64)]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1024, 1024, 1024), (2048, 2048, 2048)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*")
    parser.add_argument("--small", action="store_true", help="the small-tile variants (SMALL)")
    parser.add_argument("--tma", action="store_true", help="each variant fed by TMA too (steps 7 and 8's kernels)")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    variants = SMALL if args.small else VARIANTS
    kernels = {v: make_wgmma_kernel(v[0], v[1], keep=v[2], group=v[3], bm=v[4] if len(v) > 4 else 128)
               for v in variants}
    tma_kernels = {v: make_tma_kernel(v[0], v[1], keep=v[2], group=v[3], bm=v[4] if len(v) > 4 else 128)
                   for v in (variants if args.tma else ())}
    tma_kernels.update({("ws",) + v: make_warp_specialized_kernel(v[0], v[1], keep=v[2], group=v[3],
                                                                  bm=v[4] if len(v) > 4 else 128)
                        for v in (variants if args.tma else ())})
    _configure_torch(torch)
    timer = Timer(torch)
    for shape in shapes:
        m, n, k = shape
        a, b = tc.make_inputs(shape, 0)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ref = ta.double() @ tb.double()
        flop = 2.0 * m * n * k
        sets = int(min(16, max(1, math.ceil(4 * 60e6 / (2 * (a.size + b.size) + 4 * m * n)))))  # past the L2
        ins = [(ta, tb)] + [(ta.clone(), tb.clone()) for _ in range(sets - 1)]
        outs = [torch.empty((m, n), dtype=torch.float32, device="cuda") for _ in range(sets)]
        peer = statistics.median(timer.time(lambda i: torch.mm(*ins[i], out_dtype=torch.float32), sets))
        print(f"\n{m} x {n} x {k}: torch.mm fp16 -> fp32 {peer:.4f} ms = {flop / peer / 1e9:.0f} TFLOP/s "
              f"({timer.method}, {sets} input sets)", flush=True)
        candidates = [("optimized (today's plan)", lambda x, y, z: tc.optimized.plan(x, y, z))]
        candidates += [(v, lambda x, y, z, kernel=kernel: wgmma_launch(kernel, x, y, z)) for v, kernel in kernels.items()]
        candidates += [(f"tma {v}", lambda x, y, z, kernel=kernel: tma_launch(kernel, x, y, z))
                       for v, kernel in tma_kernels.items()]
        for v, plan in candidates:
            try:  # Numba's views of the tensors, as the benchmark passes them; one failing variant skips only itself
                plans = [plan(*(cuda.as_cuda_array(t) for t in ins[i]), cuda.as_cuda_array(outs[i]))
                         for i in range(sets)]
                for x in (x for p in plans for launch in p for x in launch.args if isinstance(x, TensorMap)):
                    x.device_array()  # every input set's maps encoded now: none may be copied during a graph capture
                outs[0].fill_(float("nan"))
                for launch in plans[0]:
                    launch()
                torch.cuda.synchronize()
            except Exception as err:
                print(f"  {v}: FAILED ({type(err).__name__}: {err})", flush=True)
                continue
            err = rel_error(outs[0], ref) if not torch.isnan(outs[0]).any() else float("inf")

            def enqueue(i, plans=plans):
                s = timer.stream()
                for launch in plans[i]:
                    launch(stream=s)

            ms = statistics.median(timer.time(enqueue, sets, budget_ms=400))
            print(f"  {v}: {ms:.4f} ms = {flop / ms / 1e9:6.1f} TFLOP/s ({peer / ms:.2f} x torch), rel err {err:.2e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
