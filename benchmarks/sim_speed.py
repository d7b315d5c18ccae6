"""How much faster is gpukernels' simulator than Numba's stock CUDA simulator? Both run here, in one go.

    python benchmarks/sim_speed.py            # all cases, prints a table of seconds and ratios
    python benchmarks/sim_speed.py --repeat 5

Each (engine, case) runs in its own subprocess, so the stock run never sees gpukernels' scheduler
(``gpukernels.sim.uninstall()`` puts the stock ``FakeCUDAKernel.__call__`` back before anything runs).
Correctness is checked before the time is taken; the time is the best of ``--repeat`` launches.

Cases (the kernels are defined here, so the figures do not move when a lesson changes):

* ``tiled``        32x32 float32 matmul, 8x8 tiles in shared memory, 8x8 blocks -- the simulator's first benchmark;
* ``naive``        the same product, one thread per output element, no shared memory;
* ``softmax_shfl`` row softmax of 16x256, a block of 128 threads per row, warp-shuffle (shfl_xor_sync)
                   reductions -- the stock simulator has no shuffles, so it reports "not runnable";
* ``softmax_smem`` the same softmax with shared-memory tree reductions (syncthreads only): the like-for-like
                   ratio for the optimized softmax.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

CASES = ["tiled", "naive", "softmax_shfl", "softmax_smem"]
ENGINES = ["stock", "gpukernels"]


def _kernels():
    # `cuda` must be a module global of the kernels: the stock simulator swaps globals, not closure cells
    global cuda, float32
    from numba import cuda, float32

    TILE = 8
    THREADS = 128
    FULL = 0xFFFFFFFF

    @cuda.jit
    def tiled(a, b, c):
        sa = cuda.shared.array((TILE, TILE), float32)
        sb = cuda.shared.array((TILE, TILE), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.grid(2)
        acc = float32(0.0)
        for k0 in range(0, a.shape[1], TILE):
            sa[ty, tx] = a[row, k0 + tx]
            sb[ty, tx] = b[k0 + ty, col]
            cuda.syncthreads()
            for k in range(TILE):
                acc += sa[ty, k] * sb[k, tx]
            cuda.syncthreads()
        c[row, col] = acc

    @cuda.jit
    def naive(a, b, c):
        col, row = cuda.grid(2)
        if row < c.shape[0] and col < c.shape[1]:
            acc = float32(0.0)
            for k in range(a.shape[1]):
                acc += a[row, k] * b[k, col]
            c[row, col] = acc

    @cuda.jit
    def softmax_shfl(x, y):
        scratch = cuda.shared.array(32, float32)
        row, t = cuda.blockIdx.x, cuda.threadIdx.x
        lane, warp = t % 32, t // 32
        n = x.shape[1]
        m = float32(-math.inf)
        for j in range(t, n, THREADS):
            m = max(m, x[row, j])
        for off in (16, 8, 4, 2, 1):
            m = max(m, cuda.shfl_xor_sync(FULL, m, off))
        if lane == 0:
            scratch[warp] = m
        cuda.syncthreads()
        m = scratch[lane] if lane < THREADS // 32 else float32(-math.inf)
        for off in (16, 8, 4, 2, 1):
            m = max(m, cuda.shfl_xor_sync(FULL, m, off))
        cuda.syncthreads()
        s = float32(0.0)
        for j in range(t, n, THREADS):
            s += math.exp(x[row, j] - m)
        for off in (16, 8, 4, 2, 1):
            s += cuda.shfl_xor_sync(FULL, s, off)
        if lane == 0:
            scratch[warp] = s
        cuda.syncthreads()
        s = scratch[lane] if lane < THREADS // 32 else float32(0.0)
        for off in (16, 8, 4, 2, 1):
            s += cuda.shfl_xor_sync(FULL, s, off)
        for j in range(t, n, THREADS):
            y[row, j] = math.exp(x[row, j] - m) / s

    @cuda.jit
    def softmax_smem(x, y):
        buf = cuda.shared.array(THREADS, float32)
        row, t = cuda.blockIdx.x, cuda.threadIdx.x
        n = x.shape[1]
        m = float32(-math.inf)
        for j in range(t, n, THREADS):
            m = max(m, x[row, j])
        buf[t] = m
        cuda.syncthreads()
        step = THREADS // 2
        while step > 0:
            if t < step:
                buf[t] = max(buf[t], buf[t + step])
            cuda.syncthreads()
            step //= 2
        m = buf[0]
        cuda.syncthreads()
        s = float32(0.0)
        for j in range(t, n, THREADS):
            s += math.exp(x[row, j] - m)
        buf[t] = s
        cuda.syncthreads()
        step = THREADS // 2
        while step > 0:
            if t < step:
                buf[t] += buf[t + step]
            cuda.syncthreads()
            step //= 2
        s = buf[0]
        for j in range(t, n, THREADS):
            y[row, j] = math.exp(x[row, j] - m) / s

    return {"tiled": tiled, "naive": naive, "softmax_shfl": softmax_shfl, "softmax_smem": softmax_smem}, THREADS


def _worker(engine: str, case: str, repeat: int) -> dict:
    os.environ["GPUKERNELS_DEVICE"] = "sim"
    import numpy as np

    import gpukernels.sim as sim

    if engine == "stock":
        sim.uninstall()
    kernels, threads = _kernels()
    rng = np.random.default_rng(0)
    if case in ("tiled", "naive"):
        a = rng.standard_normal((32, 32)).astype(np.float32)
        b = rng.standard_normal((32, 32)).astype(np.float32)
        c = np.zeros((32, 32), np.float32)
        args, launch = (a, b, c), ((4, 4), (8, 8))
        expected, out = a.astype(np.float64) @ b, c
    else:
        x = rng.standard_normal((16, 256)).astype(np.float32)
        y = np.zeros_like(x)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        args, launch = (x, y), ((16,), (threads,))
        expected, out = e / e.sum(axis=1, keepdims=True), y
    kernel = kernels[case][launch]
    best = math.inf
    for _ in range(repeat):
        out[...] = 0
        t0 = time.perf_counter()
        try:
            kernel(*args)
        except AttributeError as exc:  # the stock simulator has no warp shuffles
            return {"engine": engine, "case": case, "seconds": None, "error": str(exc)}
        best = min(best, time.perf_counter() - t0)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    return {"engine": engine, "case": case, "seconds": best, "error": None}


def _run(engine: str, case: str, repeat: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--case", case, "--repeat", str(repeat)]
    env = dict(os.environ, GPUKERNELS_DEVICE="sim")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{engine}/{case} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="launches per case; the best time counts")
    parser.add_argument("--cases", nargs="*", default=CASES, choices=CASES)
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.case, args.repeat)))
        return 0
    results = {}
    for case in args.cases:
        for engine in ENGINES:
            # the stock simulator is slow and its times vary little: one launch is enough
            results[engine, case] = _run(engine, case, 1 if engine == "stock" else args.repeat)
    print(f"{'case':<14} {'stock (s)':>10} {'gpukernels (s)':>15} {'ratio':>8}")
    for case in args.cases:
        s, g = results["stock", case]["seconds"], results["gpukernels", case]["seconds"]
        ratio = f"{s / g:7.1f}x" if s and g else "      --"
        stock = f"{s:10.3f}" if s is not None else f"{'n/a':>10}"
        print(f"{case:<14} {stock} {g:15.4f} {ratio}")
        if results["stock", case]["error"]:
            print(f"{'':<14} stock simulator cannot run it: {results['stock', case]['error']}")
    if "softmax_shfl" in args.cases and "softmax_smem" in args.cases:
        s, g = results["stock", "softmax_smem"]["seconds"], results["gpukernels", "softmax_shfl"]["seconds"]
        if s and g:
            print(f"optimized softmax (shuffles, ours) vs its shared-memory variant on stock: {s / g:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
