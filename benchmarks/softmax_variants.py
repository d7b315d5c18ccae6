"""Experiments behind benchmarks/NOTES.md: time `softmax.optimized` with other configurations (`softmax.Config`)
than `optimized_config` picks -- rows per warp, warps per block, threads x values per thread, part of the row
cached in shared memory, launch_bounds -- and the two-pass online kernel, against torch.softmax in the same
run. Each variant's output is first checked (NaN-poisoned) against a float64 softmax; its registers, spills
and shared memory are printed from the compiled kernel.

    GPUKERNELS_DEVICE=gpu python benchmarks/softmax_variants.py 1024,32768 65536,128
    python benchmarks/softmax_variants.py --resources 1024,32768 65536,128   # no GPU: compile for sm_90 only
"""

import os
import statistics
import sys
import warnings

if __name__ == "__main__" and "--resources" in sys.argv:
    # Compiling for sm_90 needs the real numba.cuda, which must be imported before gpukernels picks the
    # simulator (as in gpukernels.resources' worker process).
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.pop("GPUKERNELS_DEVICE", None)
    import numba.cuda  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import gpukernels  # noqa: F401
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    from numba.cuda.core import config

    config.reload_config()

from numba import cuda, types  # noqa: E402

from gpukernels import softmax  # noqa: E402
from gpukernels.check import TOLERANCE, compare  # noqa: E402

Config = softmax.Config


def candidates(n):
    """(label, Config) pairs worth timing for rows of n values: the default first, then the plausible rivals
    (pruned: each costs a compile and ~1 s of GPU time)."""
    default = softmax.optimized_config(n)
    out = [("default", default)]
    if not default.cached:
        return out
    if default.threads == softmax.WARP:
        e = default.elems
        out += [
            ("1 row/warp, 4 warps/block (old default)", Config(32, e, True, 1, 4)),
            ("2 rows/warp, 4 warps/block", Config(32, e, True, 2, 4)),
            ("2 rows/warp, 8 warps/block", Config(32, e, True, 2, 8)),
            ("4 rows/warp, 4 warps/block", Config(32, e, True, 4, 4)),
        ]
    elif n > softmax.MAX_CACHED // 2:
        shared = (softmax.SHARED_MAX // 512) * 512  # 11776 values in shared memory, 46 KB
        out += [
            ("512 x 64 registers (old default)", Config(512, 64, True)),
            ("1024 threads x registers, launch_bounds(1024, 1)", Config(1024, -(-n // 1024), True, min_blocks=1)),
            ("512 threads, registers + 46 KB shared, launch_bounds(512, 2)",
             Config(512, max(1, -(-(n - shared) // 512)), True, shared=shared, min_blocks=2)),
            ("online two-pass, 1024 threads", Config(1024, 1, False)),
        ]
    else:
        # The x[i, uintp(j)] indexing let ptxas take 55 registers for 16 values (48 before: 40 -> 32 warps
        # per SM at 256 threads); launch_bounds for 48 warps per SM gives 37-39 registers, no spills.
        t = default.threads
        out.append((f"launch_bounds({t}, {1536 // t})", Config(t, default.elems, True, min_blocks=1536 // t)))
        for threads in (t // 2, 2 * t):
            if softmax.WARP < threads <= softmax.MAX_THREADS:
                elems = 1 << (max(1, -(-n // threads)) - 1).bit_length()
                out.append((f"{threads} x {elems}", Config(threads, elems, True)))
    seen, unique = set(), []
    for label, cfg in out:
        if cfg not in seen and (not cfg.cached or cfg.threads * cfg.elems + cfg.shared >= n):
            seen.add(cfg)
            unique.append((label, cfg))
    return unique


def launches(cfg, x, y):
    """The launches `softmax.optimized` makes with ``cfg`` in place of ``optimized_config``'s choice."""
    original = softmax.optimized_config
    softmax.optimized_config = lambda n: cfg
    try:
        return softmax.optimized.launches(x, out=y)
    finally:
        softmax.optimized_config = original


def describe(cfg):
    return (f"threads={cfg.threads} elems={cfg.elems} cached={cfg.cached} rows/warp={cfg.rows_per_warp} "
            f"warps/block={cfg.warps_per_block} shared={cfg.shared} min_blocks={cfg.min_blocks}")


def gpu_resources(kernel):
    """Registers, local memory (spills) and static shared memory of the kernel as compiled on this GPU."""
    def one(v):
        return next(iter(v.values())) if isinstance(v, dict) else v

    return (f"regs={one(kernel.get_regs_per_thread())} lmem={one(kernel.get_local_mem_per_thread())} B "
            f"smem={one(kernel.get_shared_mem_per_block())} B")


def compiled_resources(shapes):
    """Without a GPU: compile every candidate for sm_90 and print what ptxas reports, with the occupancy."""
    from gpukernels.resources import _assemble, occupancy, parse_log

    sig = (types.float32[:, ::1], types.float32[:, ::1])
    for text in shapes:
        m, n = (int(v) for v in text.split(","))
        for label, cfg in candidates(n):
            kernel = softmax.optimized_kernel(cfg)
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0),
                                      launch_bounds=kernel.targetoptions.get("launch_bounds"))
            r = parse_log(_assemble(ptx, "sm_90"))
            block = 1
            for d in cfg.block:
                block *= d
            occ = occupancy("sm_90", block, r.registers, r.shared_bytes, r.barriers)
            print(f"softmax {m}x{n} {label} [{describe(cfg)}]: regs={r.registers} spills={r.spill_stores}/"
                  f"{r.spill_loads} B lmem={r.local_bytes} B smem={r.shared_bytes} B -> {occ.explain()}",
                  flush=True)


def main(shapes):
    import torch

    from gpukernels.bench import Timer, _configure_torch

    _configure_torch(torch)
    timer = Timer(torch)
    for text in shapes:
        m, n = (int(v) for v in text.split(","))
        (x,) = softmax.make_inputs((m, n), 0)
        ref = torch.softmax(torch.from_numpy(x).cuda().double(), -1).float().cpu().numpy()
        sets = max(1, min(16, (256 << 20) // (8 * m * n)))  # inputs rotated past the 50 MB L2
        xs = [torch.from_numpy(x).cuda() for _ in range(sets)]
        ys = [torch.empty_like(xs[0]) for _ in range(sets)]
        tt = statistics.median(timer.time(lambda i: torch.softmax(xs[i], -1), sets, budget_ms=800))
        print(f"softmax {m}x{n} torch.softmax: {tt:.4f} ms {8 * m * n / tt / 1e6:.0f} GB/s", flush=True)
        for label, cfg in candidates(n):
            plans = [launches(cfg, cuda.as_cuda_array(xs[i]), cuda.as_cuda_array(ys[i])) for i in range(sets)]
            ys[0].fill_(float("nan"))
            for L in plans[0]:
                L()
            torch.cuda.synchronize()
            check = compare(ys[0].cpu().numpy(), ref, TOLERANCE["softmax"])

            def enqueue(i, plans=plans):
                s = timer.stream()
                for L in plans[i]:
                    L(stream=s)

            t = statistics.median(timer.time(enqueue, sets, budget_ms=800))
            print(f"softmax {m}x{n} {label} [{describe(cfg)}]: {t:.4f} ms ok={check.ok} "
                  f"err={check.rel_error:.1e} {8 * m * n / t / 1e6:.0f} GB/s x torch {tt / t:.2f} "
                  f"{gpu_resources(plans[0][0].kernel)}", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--resources"]
    compiled_resources(args) if "--resources" in sys.argv else main(args)
