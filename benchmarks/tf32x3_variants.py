"""Partial-sum lengths of the 3xTF32 step (tensor_core.k11_tf32x3.make_tf32x3_kernel), timed on a GPU: the
measurements behind step 7's ``FLUSH``, the k tiles whose products the tensor cores sum before float32 adds take
over. Longer partials wait for the tensor cores less often and are less accurate (the tensor core's adder truncates).

    GPUKERNELS_DEVICE=gpu python3 benchmarks/tf32x3_variants.py [--shapes 4096,4096,4096 ...]

Per shape: float32 inputs (`matmul.make_inputs`), split once (`split_operands`, not timed), then each variant's
product kernel checked against float64 (its relative error printed beside cuBLAS SGEMM's, TF32 off) and timed
(CUDA events around 10 launches, median); the split kernels timed alone, and torch.mm in float32 the same way.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from tensor_core_check import rel_error, time_ms  # noqa: E402

from gpukernels import matmul  # noqa: E402
from gpukernels.tensor_core.k11_tf32x3 import make_tf32x3_kernel, product_launch, split_operands  # noqa: E402

VARIANTS = [(1, 8), (2, 8), (10**6, 8)]  # (k tiles per partial sum, tile rows per group); 10**6: one partial for all of K (the speed with no waits, at the accuracy of the truncating adder)
BATCH = 10
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 11008, 4096), (512, 512, 16384)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    kernels = {v: make_tf32x3_kernel(flush=v[0], group=v[1]) for v in VARIANTS}
    torch.backends.cuda.matmul.allow_tf32 = False
    for shape in shapes:
        m, n, k = shape
        a, b = matmul.make_inputs(shape, 0)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ref = ta.double() @ tb.double()
        flop = 2.0 * m * n * k
        peer = time_ms(lambda: [torch.mm(ta, tb) for _ in range(BATCH)]) / BATCH
        print(f"\n{m} x {n} x {k}: SGEMM {peer:.4f} ms = {flop / peer / 1e9:.1f} TFLOP/s, rel err "
              f"{rel_error(torch.mm(ta, tb), ref):.2e}", flush=True)
        out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
        a2, b2, splits = split_operands(ta, tb, out)
        for launch in splits:
            launch()
        split_ms = time_ms(lambda: [launch() for _ in range(BATCH) for launch in splits]) / BATCH
        print(f"  split (both operands): {split_ms:.4f} ms", flush=True)
        for v, kernel in kernels.items():
            out.fill_(float("nan"))
            launch = product_launch(kernel, a2, b2, out)
            launch()
            torch.cuda.synchronize()
            err = rel_error(out, ref) if not torch.isnan(out).any() else float("inf")
            ms = time_ms(lambda: [launch() for _ in range(BATCH)]) / BATCH
            total = ms + split_ms
            print(f"  flush {v[0]}, group {v[1]:2d}: {ms:.4f} ms (+ split {total:.4f}) = {flop / total / 1e9:6.1f} "
                  f"TFLOP/s ({peer / total:.2f} x SGEMM), rel err {err:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
