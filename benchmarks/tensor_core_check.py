"""Check every tensor_core version on a GPU against float64, and time it against torch.mm in float16.

    GPUKERNELS_DEVICE=gpu python3 benchmarks/tensor_core_check.py                 # the three shapes below
    GPUKERNELS_DEVICE=gpu python3 benchmarks/tensor_core_check.py --shapes 2048,2048,2048 --json out.json

(On the H200 machine, first install the carried wheels: /work/shared/DEVICE.md.) For each shape (M, N, K): fresh
float16 inputs (`tensor_core.make_inputs`), the float64 reference computed by torch on the GPU, every version of
`tensor_core.VERSIONS` run into an output poisoned with NaN and checked (relative error <= 1e-3: float16 products
are exact and summed in float32, so a correct kernel lands near 1e-7), then timed with CUDA events -- the median of
repeated calls after warm-ups -- against torch.mm on the same float16 tensors (cuBLAS; its result is float16, so its
own error is ~1e-4, or infinite where a sum passes float16's largest value, 65504). Then tf32x3 on float32 inputs, against torch.mm in float32 with TF32 off (cuBLAS SGEMM): time,
and both errors against float64 -- 3xTF32 should match SGEMM's accuracy. The exit status is 1 if any check failed.
Times include the launcher's host work (its fast path on a GPU); at the smallest shape that is all they measure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpukernels import tensor_core as tc  # noqa: E402
from gpukernels.check import compare  # noqa: E402

SHAPES = [(4096, 4096, 4096), (1823, 781, 129), (33, 17, 31)]
TOLERANCE = 1e-3


def time_ms(fn, min_reps: int = 5, max_reps: int = 50, budget_ms: float = 300.0) -> float:
    """Median milliseconds of fn() by CUDA events: 2 warm-ups, then calls until ``budget_ms`` or ``max_reps``."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    while len(times) < min_reps or (len(times) < max_reps and sum(times) < budget_ms):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm((out.double() - ref)) / torch.linalg.norm(ref)) if ref.numel() else 0.0


def check_shape(shape, seed: int) -> tuple[list[dict], bool]:
    m, n, k = shape
    flop = 2.0 * m * n * k
    a, b = tc.make_inputs(shape, seed)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ref = ta.double() @ tb.double()
    rows, ok = [], True
    peer_ms = time_ms(lambda: torch.mm(ta, tb))
    rows.append({"shape": shape, "version": "torch.mm (cuBLAS, fp16 out)", "ms": peer_ms,
                 "rel_error": rel_error(torch.mm(ta, tb), ref), "ok": True})
    for name, version in tc.VERSIONS.items():
        out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
        version(ta, tb, out=out)
        torch.cuda.synchronize()
        check = compare(out.cpu().numpy(), ref.cpu().numpy(), TOLERANCE)
        ok &= check.ok
        row = {"shape": shape, "version": name, "rel_error": check.rel_error, "ok": check.ok}
        if not check.ok:
            row["check"] = str(check)
        if name == "optimized":
            row["choice"] = tc.optimized.describe(ta, tb)
        row["ms"] = time_ms(lambda: version(ta, tb, out=out))
        rows.append(row)
    # 3xTF32: float32 inputs against SGEMM, time and accuracy
    a32, b32 = tc.make_inputs(shape, seed + 1, dtype=np.float32)
    ta32, tb32 = torch.from_numpy(a32).cuda(), torch.from_numpy(b32).cuda()
    ref32 = ta32.double() @ tb32.double()
    torch.backends.cuda.matmul.allow_tf32 = False
    sgemm_err = rel_error(torch.mm(ta32, tb32), ref32)
    rows.append({"shape": shape, "version": "torch.mm fp32 (cuBLAS SGEMM, TF32 off)",
                 "ms": time_ms(lambda: torch.mm(ta32, tb32)), "rel_error": sgemm_err, "ok": True})
    out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    tc.tf32x3(ta32, tb32, out=out)
    torch.cuda.synchronize()
    err = rel_error(out, ref32) if not torch.isnan(out).any() else float("inf")
    good = err <= 2 * sgemm_err + 2.0**-22
    ok &= good
    rows.append({"shape": shape, "version": "tf32x3 (fp32 in)", "rel_error": err, "ok": good,
                 "ms": time_ms(lambda: tc.tf32x3(ta32, tb32, out=out))})
    for row in rows:
        row["tflops"] = flop / (row["ms"] * 1e-3) / 1e12
        row["x_torch_fp16"] = peer_ms / row["ms"]
    return rows, ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=None, help="M,N,K ... (default: %(default)s -> "
                        + " ".join(",".join(map(str, s)) for s in SHAPES) + ")")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    print(f"{torch.cuda.get_device_name()}, gpukernels mode {os.environ.get('GPUKERNELS_DEVICE')}", flush=True)
    all_rows, all_ok = [], True
    for shape in shapes:
        rows, ok = check_shape(shape, args.seed)
        all_rows += rows
        all_ok &= ok
        print(f"\n{shape[0]} x {shape[1]} x {shape[2]}")
        print(f"  {'version':40s} {'ms':>9s} {'TFLOP/s':>8s} {'x fp16 torch':>12s} {'rel err':>9s}  check")
        for r in rows:
            print(f"  {r['version']:40s} {r['ms']:9.4f} {r['tflops']:8.1f} {r['x_torch_fp16']:12.3f} "
                  f"{r['rel_error']:9.2e}  {'ok' if r['ok'] else 'FAILED: ' + r.get('check', '')}"
                  + ("  (float16 output overflows)" if r["rel_error"] == float("inf") and r["ok"] else "")
                  + (f"  [{r['choice']}]" if "choice" in r else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(r, shape=list(r["shape"])) for r in all_rows], f, indent=1)
    print("\nall checks passed" if all_ok else "\nSOME CHECKS FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
