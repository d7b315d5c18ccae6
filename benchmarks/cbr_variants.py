"""Experiments behind benchmarks/NOTES.md: time every cbr version and tilings of the implicit-GEMM kernel
(`cbr.igemm_launches`: channels per k tile, pixels per block, launch bounds) against cuDNN, in one run, each
checked on a NaN-poisoned output against a float64 reference before it is timed.

    GPUKERNELS_DEVICE=gpu python benchmarks/cbr_variants.py                      # cbr.SHAPES["bench"], ~1.5 min
    GPUKERNELS_DEVICE=gpu python benchmarks/cbr_variants.py 32,64,56,56,64,3,3   # N,C,H,W,K,R,S
    GPUKERNELS_DEVICE=gpu python benchmarks/cbr_variants.py --deep               # also 2 and 3 channels per k tile
    GPUKERNELS_DEVICE=gpu python benchmarks/cbr_variants.py --only=igemm ...     # optimized and names with "igemm"
    GPUKERNELS_DEVICE=gpu python benchmarks/cbr_variants.py --gemm ...           # also matmul on the same GEMM
    GPUKERNELS_DEVICE=gpu python benchmarks/cbr_variants.py --only=winograd ...  # optimized and Winograd

Most of the run is compiling: ~8 s per 3x3 variant (its k loop is unrolled), ~25 s per variant with 2 channels
per k tile, which is why those (--deep) are left out by default.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys

import numpy as np
from numba import cuda

from gpukernels import cbr
from gpukernels.cbr.k05_winograd import winograd_launches
from gpukernels.bench import Timer, _configure_torch
from gpukernels.check import TOLERANCE, compare

#: (name, keyword arguments of cbr.igemm_launches). `optimized` is the first; the others change one thing.
VARIANTS = [
    ("igemm bn=256 lb=(256,2)", {"bn": 256, "min_blocks": 2}),  # = cbr.optimized
    ("igemm bn=256 unbounded", {"bn": 256, "min_blocks": None}),
    ("igemm bn=128 lb=(128,3)", {"bn": 128, "min_blocks": 3}),
    ("igemm bn=128 lb=(128,4)", {"bn": 128, "min_blocks": 4}),
    ("igemm bn=128 unbounded", {"bn": 128, "min_blocks": None}),
    ("igemm bn=256 x2 slices", {"bn": 256, "min_blocks": 2, "splits": 2}),
    ("igemm bn=64 unbounded", {"bn": 64, "min_blocks": None}),  # matmul's estimate picks 64 x 64 tiles here
    ("igemm bn=64 x2 slices", {"bn": 64, "min_blocks": None, "splits": 2}),
    # 128 output channels per block, 16 x 8 outputs per thread (matmul's thread_16x8 inner loop)
    ("igemm 128x256 unbounded", {"bm": 128, "bn": 256, "min_blocks": None}),
    ("igemm 128x256 x2 slices", {"bm": 128, "bn": 256, "min_blocks": None, "splits": 2}),
    ("igemm 128x128 lb=(128,2)", {"bm": 128, "bn": 128, "min_blocks": 2}),
    ("igemm 128x128 unbounded", {"bm": 128, "bn": 128, "min_blocks": None}),
    ("igemm 128x128 lb=(128,2) x2 slices", {"bm": 128, "bn": 128, "min_blocks": 2, "splits": 2}),
]
DEEP = [
    ("igemm bn=128 lb=(128,3) cb=2", {"bn": 128, "min_blocks": 3, "cb": 2}),
    ("igemm bn=128 lb=(128,3) cb=3", {"bn": 128, "min_blocks": 3, "cb": 3}),
    ("igemm bn=256 lb=(256,2) cb=2", {"bn": 256, "min_blocks": 2, "cb": 2}),
]


def variant_launches(x, w, b, y, padding=1, **kwargs):
    """The launches of one implicit-GEMM variant (the same plan `cbr.optimized` makes, other parameters)."""
    return cbr.igemm_launches(x, w, b, y, padding, **kwargs)


def candidates(deep=False):
    """Every version of the lesson, then the implicit-GEMM variants: (name, plan(x, w, b, y) -> launches)."""
    out = [(name, lambda x, w, b, y, v=v: v.plan(x, w, b, y, padding=1)) for name, v in cbr.VERSIONS.items()]
    for name, kw in VARIANTS + (DEEP if deep else []):
        out.append((name, lambda x, w, b, y, kw=kw: variant_launches(x, w, b, y, 1, **kw)))
    # fewer FLOPs instead of a faster GEMM (gpukernels/cbr/k05_winograd.py): 3 x 3 filters only, others are skipped;
    # F(2x2, 3x3) and F(4x4, 3x3), each with every block tile of its products (the version takes output_tile's and
    # products_tile's choices)
    for m, tile in itertools.product((2, 4), ((64, 64), (128, 128), (128, 64), (64, 128))):
        out.append((f"winograd F({m}x{m},3x3) {tile[0]}x{tile[1]}",
                    lambda x, w, b, y, tile=tile, m=m: winograd_launches(x, w, b, y, 1, tile=tile, m=m)))
    return out


def gemm_rate(shape, timer, torch):
    """The matmul lesson on the convolution's GEMM -- (K x C R S) times (C R S x N Ho Wo), an explicit im2col
    matrix, its building not timed: the rate an implicit GEMM at matmul's speed would reach."""
    from gpukernels import matmul

    n, c, h, wd, k, r, s = shape
    p, q = n * h * wd, c * r * s
    a, b = torch.randn(k, q, device="cuda"), torch.randn(q, p, device="cuda")
    out = torch.empty(k, p, device="cuda")
    ref = (a.double() @ b.double()).float()
    t_mm = statistics.median(timer.time(lambda i: torch.mm(a, b, out=out), 1, budget_ms=400, min_runs=10))
    print(f"  gemm {k}x{p}x{q} cuBLAS: {t_mm:.4f} ms {2 * k * p * q / t_mm / 1e9:.1f} TFLOP/s", flush=True)
    for name in ("optimized", "split_k", "vector_loads", "thread_16x8"):
        version = matmul.VERSIONS[name]
        launches = version.plan(cuda.as_cuda_array(a), cuda.as_cuda_array(b), cuda.as_cuda_array(out))
        out.fill_(float("nan"))
        for L in launches:
            L()
        err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()

        def enqueue(i, launches=launches):
            st = timer.stream()
            for L in launches:
                L(stream=st)

        t = statistics.median(timer.time(enqueue, 1, budget_ms=400, min_runs=10))
        print(f"  gemm matmul.{name}: {t:.4f} ms {2 * k * p * q / t / 1e9:.1f} TFLOP/s rel err {err:.1e}", flush=True)


def main(argv):
    import torch
    import torch.nn.functional as F

    deep = "--deep" in argv
    only = [a.split("=", 1)[1] for a in argv if a.startswith("--only=")]  # variants whose name contains this
    texts = [a for a in argv if not a.startswith("--")]
    shapes = [tuple(int(v) for v in t.split(",")) for t in texts] or cbr.SHAPES["bench"]
    _configure_torch(torch)
    timer = Timer(torch)
    for shape in shapes:
        x, w, b = cbr.make_inputs(shape, 0)
        flops = cbr.flops(shape)
        tx, tw, tb = (torch.from_numpy(a).cuda() for a in (x, w, b))
        with torch.no_grad():
            ref = torch.relu(F.conv2d(tx.double(), tw.double(), tb.double(), padding=1)).float().cpu().numpy()
        set_bytes = 4 * (x.size + w.size + b.size + ref.size)
        sets = int(min(16, max(1, math.ceil(4 * 60e6 / set_bytes))))  # rotate inputs past the 60 MB L2
        ins = [(tx, tw, tb)] + [tuple(t.clone() for t in (tx, tw, tb)) for _ in range(sets - 1)]
        outs = [torch.empty(ref.shape, device="cuda") for _ in range(sets)]
        label = "x".join(map(str, shape))

        with torch.no_grad():
            cudnn = F.relu(F.conv2d(tx, tw, tb, padding=1))
            ok = compare(cudnn.cpu().numpy(), ref, TOLERANCE["cbr"] * 10).ok
            t_peer = statistics.median(timer.time(lambda i: F.relu(F.conv2d(*ins[i], padding=1)), sets,
                                                  budget_ms=600, min_runs=10))
        print(f"cbr {label} cuDNN: {t_peer:.4f} ms ok={ok} {flops / t_peer / 1e9:.1f} TFLOP/s", flush=True)
        if "--gemm" in argv:
            gemm_rate(shape, timer, torch)

        for name, plan in candidates(deep):
            if only and not any(o in name for o in only) and name != "optimized":
                continue
            nb = [[cuda.as_cuda_array(t) for t in s] for s in ins]
            try:
                plans = [plan(*nb[i], cuda.as_cuda_array(outs[i])) for i in range(sets)]
            except Exception as err:  # a tiling that does not apply to this filter
                print(f"cbr {label} {name}: skipped ({err})", flush=True)
                continue
            outs[0].fill_(float("nan"))
            for L in plans[0]:
                L()
            torch.cuda.synchronize()
            check = compare(outs[0].cpu().numpy(), ref, TOLERANCE["cbr"])
            if not check.ok:
                print(f"cbr {label} {name}: WRONG, not timed: {check}", flush=True)
                continue

            def enqueue(i, plans=plans):
                s = timer.stream()
                for L in plans[i]:
                    L(stream=s)

            t = statistics.median(timer.time(enqueue, sets, budget_ms=600, min_runs=10))
            regs = [L.kernel.get_regs_per_thread() if hasattr(L.kernel, "get_regs_per_thread") else None
                    for L in plans[0]]
            print(f"cbr {label} {name}: {t:.4f} ms ok={check.ok} {flops / t / 1e9:.1f} TFLOP/s "
                  f"x cuDNN {t_peer / t:.2f} regs={regs}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
