"""How Hopper's FP8 tensor cores add, on a GPU, against the simulator's model of it (`gpukernels.sim._fp8`: each k32
wgmma's products and accumulator aligned to the largest of them, ``FP8_ACC_BITS`` bits kept, the rest cut).

    GPUKERNELS_DEVICE=gpu python3 benchmarks/fp8_accumulation.py [--out accumulation.npz]

Runs the FP8 GEMM of tensor_core step 10 (`k10_fp8.fp8_gemm`, scales 1) on e4m3 codes made here, on 128 x 128 tiles:

* **one k tile** (K = 32, the rest of the 128-byte tile zero codes; and K = 128, four chained wgmmas): random codes
  of both signs over the whole e4m3 range, so that each sum's products span many binades. Each element of D is
  compared, bit for bit, with the model at 12 to 24 bits kept, cut or rounded to nearest, and with the exact sum
  rounded once to float32: the fraction of elements each reproduces says which the hardware does;
* **long sums** (K = 4096): all-positive codes (where a cut's bias adds up) and make_inputs' normal values with
  outliers, through the step's kernel (each 128-deep k tile promoted to float32 registers) and through one chain of
  wgmmas, each against float64 of the codes -- the error promotion saves, beside the model's prediction.

Prints a table; ``--out`` keeps the codes' seeds and every output (NumPy .npz) for fitting another model later.
Without a Hopper GPU it says why and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

SIDE = 128  # M = N: one block of the GEMM
BITS = range(12, 25)


def model(a, bt, k_tile: int, promote: bool, bits: int, rounding: str) -> np.ndarray:
    """The simulator's adder with ``bits`` kept (``rounding``: "cut" toward zero, or "nearest"), over the k32 slices
    of A (M, K) and B^T (N, K): from zero per k tile and added in float32 (``promote``), or one chain."""
    pad = -a.shape[1] % k_tile  # the kernel multiplies whole k tiles: their codes past K are zeros
    a, bt = np.pad(a, ((0, 0), (0, pad))), np.pad(bt, ((0, 0), (0, pad)))
    acc = np.zeros((a.shape[0], bt.shape[0]), np.float32)
    part = acc
    for s in range(0, a.shape[1], 32):
        if promote and s % k_tile == 0:
            part = np.zeros_like(acc)
        c = part if promote else acc
        terms = np.concatenate([a[:, None, s:s + 32] * bt[None, :, s:s + 32], c.astype(np.float64)[:, :, None]], 2)
        top = np.abs(terms).max(axis=2, keepdims=True)
        _, e = np.frexp(np.where(top > 0, top, 1.0))
        step = np.ldexp(1.0, e - bits)
        q = terms / step
        d = ((np.trunc(q) if rounding == "cut" else np.round(q)) * step).sum(axis=2).astype(np.float32)
        if promote:
            part = d
            if s % k_tile == k_tile - 32 or s + 32 >= a.shape[1]:
                acc = (acc + part).astype(np.float32)
        else:
            acc = d
    return acc


def codes(rng, shape, kind: str) -> np.ndarray:
    if kind == "wide":  # every finite code, both signs
        c = rng.integers(0, 0x7F, shape).astype(np.uint8)
        return c | (rng.integers(0, 2, shape).astype(np.uint8) << 7)
    return rng.integers(0x30, 0x40, shape).astype(np.uint8)  # "positive": 0.5 .. 1.875


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="an .npz file for the seeds and every output")
    args = parser.parse_args(argv)
    try:
        import gpukernels
        from gpukernels._launch import compute_capability
    except Exception as err:
        print(f"fp8_accumulation: skipped: {err}")
        return 0
    if gpukernels.MODE != "gpu" or compute_capability() != (9, 0):
        print(f"fp8_accumulation: skipped: needs a Hopper GPU (mode {gpukernels.MODE})")
        return 0
    from gpukernels import tensor_core as tc
    from gpukernels._fp8 import decode_e4m3
    from gpukernels.tensor_core import k10_fp8

    chained = k10_fp8.make_fp8_kernel(promote=False)

    def gemm(aq, bq_t, kernel=k10_fp8.fp8_kernel):
        from numba import cuda

        out = cuda.to_device(np.full((aq.shape[0], bq_t.shape[0]), np.nan, np.float32))
        ins = [cuda.to_device(x) for x in (aq, bq_t, np.float32([1]), np.float32([1]))]
        k10_fp8.gemm_launch(kernel, *ins, out)()
        return out.copy_to_host()

    saved = {}
    print("one k tile: the fraction of elements of D each model reproduces bit for bit")
    for k in (32, 128):
        for seed in range(3):
            rng = np.random.default_rng(seed)
            aq, bq_t = codes(rng, (SIDE, k), "wide"), codes(rng, (SIDE, k), "wide")
            d = gemm(aq, bq_t)
            saved[f"tile_k{k}_seed{seed}"] = d
            a, bt = decode_e4m3(aq), decode_e4m3(bq_t)
            exact = (a @ bt.T).astype(np.float32)
            line = [f"K={k} seed {seed}: exact-then-float32 {np.mean(d == exact):.3f}"]
            for rounding in ("cut", "nearest"):
                fits = {b: np.mean(d == model(a, bt, 128, True, b, rounding)) for b in BITS}
                best = max(fits, key=fits.get)
                line.append(f"{rounding}: best {best} bits {fits[best]:.3f} (" +
                            " ".join(f"{b}:{f:.2f}" for b, f in fits.items()) + ")")
            print("  " + "; ".join(line), flush=True)

    print("long sums, K = 4096: relative error against float64 of the codes (GPU; the model at FP8_ACC_BITS)")
    from gpukernels.sim._fp8 import FP8_ACC_BITS

    for kind in ("positive", "normal"):
        rng = np.random.default_rng(7)
        if kind == "normal":
            a16, b16 = tc.make_inputs((SIDE, SIDE, 4096), 7)
            aq, bq_t, _, _ = k10_fp8.quantize_reference(a16, b16)
        else:
            aq, bq_t = codes(rng, (SIDE, 4096), kind), codes(rng, (SIDE, 4096), kind)
        a, bt = decode_e4m3(aq), decode_e4m3(bq_t)
        ref = a @ bt.T
        row = []
        for name, kernel, promote in (("promoted", k10_fp8.fp8_kernel, True), ("chained", chained, False)):
            d = gemm(aq, bq_t, kernel)
            saved[f"long_{kind}_{name}"] = d
            m = model(a, bt, 128, promote, FP8_ACC_BITS, "cut")
            err = np.linalg.norm(d - ref) / np.linalg.norm(ref)
            merr = np.linalg.norm(m - ref) / np.linalg.norm(ref)
            row.append(f"{name} {err:.2e} (model {merr:.2e}, equal {np.mean(d == m):.3f})")
        print(f"  {kind}: " + "; ".join(row), flush=True)
    if args.out:
        np.savez_compressed(args.out, **saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
