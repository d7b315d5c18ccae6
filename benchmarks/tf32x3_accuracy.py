"""3xTF32 against cuBLAS SGEMM on every shape of the FP32 matmul suite: error against float64, and call time.

    GPUKERNELS_DEVICE=gpu python3 benchmarks/tf32x3_accuracy.py [--shapes M,N,K ...] [--seeds 3] [--json out.json]

(On the H200 machine, first install the carried wheels: /work/shared/DEVICE.md.) For each shape and seed: fresh
float32 inputs (`matmul.make_inputs`: normal values with ~1% outliers of 100x), the float64 product computed by torch
on the GPU, ``tensor_core.tf32x3`` into an output poisoned with NaN, and torch.mm in float32 with TF32 off (cuBLAS
SGEMM); both relative Frobenius errors against float64. Times are *call* times (CUDA events around one call,
median of repeated calls after warm-ups, the same inputs each time: L2 may hold them at small shapes); the kernel
times of the standard benchmark are `gpukernels bench tensor_core` (CUDA-graph replay, inputs rotated past L2).
The exit status is 1 if tf32x3 is less accurate than SGEMM (by more than 2^-24 of slack) on any shape and seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpukernels import matmul, tensor_core as tc  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from tensor_core_check import rel_error, time_ms  # noqa: E402

EXTRA = [(1, 1, 1), (33, 17, 31), (1823, 781, 129), (8192, 8192, 8192)]


def shapes_of_suite() -> list[tuple[int, int, int]]:
    return [s for group in matmul.SHAPES["suite"].values() for s in group] + EXTRA


def check(shape, seed: int) -> dict:
    m, n, k = shape
    a, b = matmul.make_inputs(shape, seed)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ref = ta.double() @ tb.double()
    torch.backends.cuda.matmul.allow_tf32 = False
    sgemm = torch.mm(ta, tb)
    out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    tc.tf32x3(ta, tb, out=out)
    torch.cuda.synchronize()
    err = rel_error(out, ref) if not torch.isnan(out).any() else float("inf")
    row = {"shape": list(shape), "seed": seed, "tf32x3_error": err, "sgemm_error": rel_error(sgemm, ref)}
    row["ok"] = err <= row["sgemm_error"] + 2.0**-24
    if seed == 0:
        row["tf32x3_ms"] = time_ms(lambda: tc.tf32x3(ta, tb, out=out))
        row["sgemm_ms"] = time_ms(lambda: torch.mm(ta, tb))
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", help="M,N,K ... (default: the matmul suite and a few more)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else shapes_of_suite()
    print(f"{torch.cuda.get_device_name()}; errors against float64, call times (ms)", flush=True)
    print(f"{'shape':>22s} {'seed':>4s} {'tf32x3 err':>10s} {'SGEMM err':>10s} {'tf32x3 ms':>10s} {'SGEMM ms':>9s} "
          f"{'x SGEMM':>7s}")
    rows = []
    for shape in shapes:
        for seed in range(args.seeds):
            r = check(shape, seed)
            rows.append(r)
            times = (f"{r['tf32x3_ms']:10.4f} {r['sgemm_ms']:9.4f} {r['sgemm_ms'] / r['tf32x3_ms']:7.3f}"
                     if "tf32x3_ms" in r else "")
            print(f"{'x'.join(map(str, shape)):>22s} {seed:4d} {r['tf32x3_error']:10.3g} {r['sgemm_error']:10.3g} "
                  f"{times}{'' if r['ok'] else '  LESS ACCURATE THAN SGEMM'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} at SGEMM's accuracy or better")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
