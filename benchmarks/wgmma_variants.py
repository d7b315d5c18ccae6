"""Block-tile widths and ring depths of the wgmma step (tensor_core.k06_wgmma.make_wgmma_kernel), timed on a GPU:
the measurements behind step 6's 128 x 256 tile and 4-stage ring.

    GPUKERNELS_DEVICE=gpu python3 benchmarks/wgmma_variants.py [--shapes 4096,4096,4096 ...]

Each variant's result is checked against float64 before it is timed (CUDA events around 10 launches, median);
torch.mm (fp16 in, fp32 out) beside, timed the same way.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from tensor_core_check import rel_error, time_ms  # noqa: E402

from gpukernels import tensor_core as tc  # noqa: E402
from gpukernels.tensor_core.k06_wgmma import make_wgmma_kernel, wgmma_launch  # noqa: E402

# (block columns, ring stages, wgmma groups kept running, tile rows per group of the block order)
VARIANTS = [(256, 4, 1, 8), (256, 4, 0, 8), (256, 4, 1, 1), (256, 4, 1, 16), (256, 3, 0, 8), (128, 4, 1, 8),
            (128, 6, 1, 8), (128, 6, 0, 8)]
BATCH = 10  # launches per timed call: the host's launch work hides behind the GPU's
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1024, 1024, 1024), (2048, 2048, 2048)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    kernels = {v: make_wgmma_kernel(v[0], v[1], keep=v[2], group=v[3]) for v in VARIANTS}
    for shape in shapes:
        m, n, k = shape
        a, b = tc.make_inputs(shape, 0)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ref = ta.double() @ tb.double()
        flop = 2.0 * m * n * k
        peer = time_ms(lambda: [torch.mm(ta, tb, out_dtype=torch.float32) for _ in range(BATCH)]) / BATCH
        print(f"\n{m} x {n} x {k}: torch.mm fp16 -> fp32 {peer:.4f} ms = {flop / peer / 1e9:.0f} TFLOP/s", flush=True)
        for v, kernel in kernels.items():
            out = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
            [launch] = wgmma_launch(kernel, ta, tb, out)
            launch()
            torch.cuda.synchronize()
            err = rel_error(out, ref) if not torch.isnan(out).any() else float("inf")
            ms = time_ms(lambda: [launch() for _ in range(BATCH)]) / BATCH
            print(f"  {v}: {ms:.4f} ms = {flop / ms / 1e9:6.1f} TFLOP/s ({peer / ms:.2f} x torch), rel err {err:.2e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
