"""Experiments behind benchmarks/NOTES.md: time `softmax.optimized` with other configurations (`softmax.Config`)
than `optimized_config` picks -- lanes per short row, warps per block, launch_bounds, registers alone instead of
registers + shared memory for long rows -- against torch.softmax in the same run. Each variant's output is first
checked (NaN-poisoned) against a float64 softmax; its registers, spills and shared memory are printed from the
compiled kernel. Ten kernels for the four shapes below (each GPU compile ~5 s): about a minute.

    GPUKERNELS_DEVICE=gpu python benchmarks/softmax_variants.py 65536,128 1024,32768 4096,4096 16384,1024
    python benchmarks/softmax_variants.py --resources 65536,128 1024,32768   # no GPU: compile for sm_90 only
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
    (pruned to the ones a question hangs on: each costs a GPU compile of ~5 s and ~1 s of timing)."""
    default = softmax.optimized_config(n)
    out = [("default", default)]
    if not default.cached:
        # Rows past MAX_CACHED (with enough rows: else split_row): the online kernel's block, 512 threads since
        # the ladder's step 3, against the 1024 it had before.
        return out + [("online, 1024 threads (before)", Config(1024, 1, False))]
    if default.threads <= softmax.WARP:
        # Lanes per row (rows per warp and shuffles per reduction follow), warps per block, and a register cap:
        # 8 lanes x 16 values take 55 registers (36 warps per SM); launch_bounds asks for 48.
        for lanes, warps, min_blocks in ((4, 4, 0), (8, 4, 0), (16, 4, 0), (32, 4, 0), (8, 2, 0), (8, 4, 12)):
            elems = softmax._pow2(-(-n // lanes))
            bounds = f", launch_bounds({warps * softmax.WARP}, {min_blocks})" if min_blocks else ""
            out.append((f"{lanes} lanes x {elems} per row, {warps} warps/block{bounds}",
                        Config(lanes, elems, True, warps_per_block=warps, min_blocks=min_blocks)))
    elif default.shared or default.min_blocks:
        # Registers alone (95-96 registers for 32-64 values: one block per SM) against the default (2 per SM).
        elems = softmax._pow2(-(-n // 512))
        out.append((f"512 x {elems} in registers only (old default)", Config(512, elems, True)))
    seen, unique = set(), []
    for label, cfg in out:
        if cfg not in seen and (not cfg.cached or cfg.threads * cfg.elems + cfg.shared >= n):
            seen.add(cfg)
            unique.append((label, cfg))
    return unique


def launches(cfg, x, y):
    """The launches `softmax.optimized` makes for rows run with ``cfg`` in place of ``optimized_config``'s choice."""
    return softmax.config_launches(cfg, x, y)


def describe(cfg):
    return (f"threads={cfg.threads} elems={cfg.elems} cached={cfg.cached} warps/block={cfg.warps_per_block} "
            f"shared={cfg.shared} min_blocks={cfg.min_blocks}")


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
