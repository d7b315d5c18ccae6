"""The FP8 GEMM of tensor_core step 10 (``k10_fp8.fp8_gemm``: e4m3 codes quantized beforehand, per-tensor scales,
float32 out) against ``torch._scaled_mm`` (cuBLASLt's FP8 GEMM) on the same codes and scales, on a GPU.

    GPUKERNELS_DEVICE=gpu python3 benchmarks/fp8_peer.py [--shapes M,N,K ...] [--json out.json]

(On the GPU machine, first install the carried wheels: /work/shared/DEVICE.md.) For each shape: fresh float16
inputs (`tensor_core.make_inputs`: normal values with ~1% outliers of 100x), quantized on the GPU by the step's own
kernels (`k10_fp8.quantize`: scale = amax / 448, B transposed to (N, K), K-major, as both GEMMs read it); the
float64 product of the *dequantized* inputs, (Aq scale_a) @ (Bq scale_b), computed on the GPU; then

* ``fp8_gemm`` into an output poisoned with NaN (each k tile's products promoted to float32 registers),
* the same kernel without promotion (one chain of wgmmas into the accumulators: what Hopper's reduced-precision
  FP8 accumulation does to a long sum),
* ``torch._scaled_mm(Aq, Bq, scale_a, scale_b, out_dtype=float32)`` (bfloat16 out where this torch refuses float32,
  said in the table), with cuBLASLt's promotion (``use_fast_accum=False``, the default) and without it (True),

each checked (relative Frobenius error against that float64 product) and timed as the standard benchmark times
(`gpukernels._timing.Timer`: CUDA-graph replay of many launches between torch events, warm-up first, input sets
rotated past L2, the median of many runs). The quantize pass is not timed: both GEMMs start from the same codes.
Without a GPU (or without torch) the script says why and exits 0, writing that reason to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

#: 4096^3 and 8192^3, then the transformer shapes of the tensor-core suite (an MLP's up and down projections)
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 11008), (2048, 12288, 4096)]


def unavailable() -> str | None:
    """Why the benchmark cannot run here (no torch, no CUDA GPU, the simulator), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if os.environ.get("GPUKERNELS_DEVICE") == "sim":
        return "GPUKERNELS_DEVICE=sim: the simulator would take hours at these shapes"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import gpukernels
    except Exception as err:  # gpukernels.DeviceError: no usable GPU for Numba
        return f"gpukernels cannot use the GPU: {err}"
    if gpukernels.MODE != "gpu":
        return f"gpukernels runs in {gpukernels.MODE} mode"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"FP8 wgmma needs a Hopper GPU (9.0); this one is {torch.cuda.get_device_capability()}"
    return None


def rel_error(out, ref) -> float:
    import torch

    if torch.isnan(out).any():
        return math.inf
    return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) if ref.numel() else 0.0


def scaled_mm(torch, a8, b8, sa, sb, out_dtype, fast=False):
    # b8: (N, K) row-major; _scaled_mm wants its second operand (K, N) column-major: its transpose view is exactly that
    return torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype, use_fast_accum=fast)


def run_shape(shape, timer, torch, seed: int = 0) -> list[dict]:
    from numba import cuda

    from gpukernels import tensor_core as tc
    from gpukernels._fp8 import E4M3_TABLE
    from gpukernels._tma import TensorMap
    from gpukernels.tensor_core import k10_fp8

    m, n, k = shape
    flop = 2.0 * m * n * k
    a, b = tc.make_inputs(shape, seed)
    aq, bq_t, sa, sb = k10_fp8.quantize(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
    taq, tbq = torch.as_tensor(aq, device="cuda"), torch.as_tensor(bq_t, device="cuda")
    tsa, tsb = torch.as_tensor(sa, device="cuda"), torch.as_tensor(sb, device="cuda")
    table = torch.tensor(E4M3_TABLE, dtype=torch.float64, device="cuda")
    ref = (table[taq.long()] * tsa.double()) @ (table[tbq.long()] * tsb.double()).t()
    # input sets past the L2 (50 MB on an H100 or H200): ~4 x 60 MB of codes and outputs in turn
    sets = int(min(16, max(1, math.ceil(4 * 60e6 / (taq.numel() + tbq.numel() + 4 * m * n)))))
    ins = [(taq, tbq)] + [(taq.clone(), tbq.clone()) for _ in range(sets - 1)]
    outs = [torch.empty((m, n), dtype=torch.float32, device="cuda") for _ in range(sets)]
    rows = []

    def record(name, ms, err, note=""):
        rows.append({"shape": list(shape), "name": name, "median_ms": ms, "tflops": flop / ms / 1e9 if ms else None,
                     "rel_error": err, "note": note})
        print(f"  {name:28s} {ms:8.4f} ms {flop / ms / 1e9:7.1f} TFLOP/s  rel err {err:.2e} {note}", flush=True)

    for name, kernel in (("fp8_gemm", k10_fp8.fp8_kernel),
                         ("fp8_gemm, no promotion", k10_fp8.make_fp8_kernel(promote=False))):
        plans = [[k10_fp8.gemm_launch(kernel, *(cuda.as_cuda_array(t) for t in ins[i]), cuda.as_cuda_array(tsa),
                                      cuda.as_cuda_array(tsb), cuda.as_cuda_array(outs[i]))] for i in range(sets)]
        for x in (x for p in plans for launch in p for x in launch.args if isinstance(x, TensorMap)):
            x.device_array()  # every input set's maps encoded now: none may be copied during a graph capture
        outs[0].fill_(float("nan"))
        for launch in plans[0]:
            launch()
        torch.cuda.synchronize()
        err = rel_error(outs[0], ref)

        def enqueue(i, plans=plans):
            s = timer.stream()
            for launch in plans[i]:
                launch(stream=s)

        record(name, statistics.median(timer.time(enqueue, sets, budget_ms=400)), err)

    a8 = [x.view(torch.float8_e4m3fn) for x, _ in ins]
    b8 = [y.view(torch.float8_e4m3fn) for _, y in ins]
    out_dtype, note = torch.float32, ""
    try:
        res = scaled_mm(torch, a8[0], b8[0], tsa, tsb, out_dtype)
    except RuntimeError as err:  # a torch whose _scaled_mm refuses float32 out
        out_dtype, note = torch.bfloat16, f"(bfloat16 out: float32 refused: {str(err).splitlines()[0][:80]})"
        res = scaled_mm(torch, a8[0], b8[0], tsa, tsb, out_dtype)
    for fast in (False, True):  # cuBLASLt's own promotion, and its "fast accumulation" (the tensor cores' sums alone)
        res = scaled_mm(torch, a8[0], b8[0], tsa, tsb, out_dtype, fast)
        torch.cuda.synchronize()
        ms = statistics.median(timer.time(lambda i: scaled_mm(torch, a8[i], b8[i], tsa, tsb, out_dtype, fast), sets,
                                          budget_ms=400))
        record("torch._scaled_mm" + (", fast accum" if fast else ""), ms, rel_error(res.float(), ref), note)
    ours, peer = rows[-4]["median_ms"], rows[-2]["median_ms"]
    print(f"  fp8_gemm: {peer / ours:.2f} x torch._scaled_mm ({timer.method}, {sets} input sets)", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", help="M,N,K ... (default: 4096^3, 8192^3 and three LLM shapes)")
    parser.add_argument("--json", help="write the rows and the environment here")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    why = unavailable()
    if why:
        print(f"fp8_peer: skipped: {why}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"skipped": why}, f, indent=1)
        return 0
    import torch

    from gpukernels._timing import Timer, _configure_torch, environment

    _configure_torch(torch)
    timer = Timer(torch)
    rows = []
    for shape in shapes:
        print(f"\n{' x '.join(map(str, shape))}:", flush=True)
        rows += run_shape(shape, timer, torch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "method": timer.method, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
