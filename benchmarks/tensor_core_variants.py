"""Tile, warp and ring sizes of the tensor-core pipeline (tensor_core.k04_pipelined.make_pipelined_kernel), timed
on a GPU at a few shapes: the measurements behind step 5's 128 x 128 tile and the dispatcher's threshold.

    GPUKERNELS_DEVICE=gpu python3 benchmarks/tensor_core_variants.py [--shapes 4096,4096,4096 ...]

Each variant's result is checked against float64 before it is timed (CUDA events, median); torch.mm (fp16) beside.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from tensor_core_check import rel_error, time_ms  # noqa: E402

from gpukernels import tensor_core as tc  # noqa: E402
from gpukernels.tensor_core._common import tiled_launch  # noqa: E402
from gpukernels.tensor_core.k04_pipelined import make_pipelined_kernel  # noqa: E402

# (block rows, block columns, warps along M, warps along N, ring stages, swizzled); shared memory 2 (bm + bn) 32 stages
# and whether the tiles are swizzled (step 3) or row-major (step 2)
VARIANTS = [(64, 64, 2, 2, 3, True), (64, 64, 2, 2, 3, False), (128, 128, 2, 2, 3, True), (128, 128, 2, 2, 2, True),
            (128, 128, 2, 2, 2, False), (128, 128, 2, 4, 3, True), (128, 256, 2, 4, 2, True),
            (256, 128, 4, 2, 2, True)]
SHAPES = [(4096, 4096, 4096), (1024, 1024, 1024), (8192, 8192, 8192)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    kernels = {v: make_pipelined_kernel(*v[:5], swizzle=v[5]) for v in VARIANTS}
    for shape in shapes:
        m, n, k = shape
        a, b = tc.make_inputs(shape, 0)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ref = ta.double() @ tb.double()
        flop = 2.0 * m * n * k
        peer = time_ms(lambda: torch.mm(ta, tb))
        print(f"\n{m} x {n} x {k}: torch.mm fp16 {peer:.4f} ms = {flop / peer / 1e9:.0f} TFLOP/s", flush=True)
        for v, kernel in kernels.items():
            out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
            [launch] = tiled_launch(kernel, ta, tb, out, kernel.threads)
            launch()
            torch.cuda.synchronize()
            err = rel_error(out, ref) if not torch.isnan(out).any() else float("inf")
            ms = time_ms(launch)
            print(f"  {v}: {ms:.4f} ms = {flop / ms / 1e9:6.1f} TFLOP/s ({peer / ms:.2f} x torch), rel err {err:.2e}",
                  flush=True)
        a32, b32 = (torch.from_numpy(x).cuda() for x in tc.make_inputs(shape, 1, dtype=np.float32))
        torch.backends.cuda.matmul.allow_tf32 = False
        sg = time_ms(lambda: torch.mm(a32, b32))
        out = torch.empty((m, n), dtype=torch.float32, device="cuda")
        t3 = time_ms(lambda: tc.tf32x3(a32, b32, out=out))
        torch.backends.cuda.matmul.allow_tf32 = True
        tf = time_ms(lambda: torch.mm(a32, b32))
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"  tf32x3 {t3:.4f} ms = {flop / t3 / 1e9:.1f} TFLOP/s; cuBLAS SGEMM {sg:.4f} ms = {flop / sg / 1e9:.1f}; "
              f"cuBLAS TF32 {tf:.4f} ms = {flop / tf / 1e9:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
