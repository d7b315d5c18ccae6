"""Attention against torch's scaled_dot_product_attention on a GPU, peer in the same run:

    python3 benchmarks/attention_peer.py [--quick | --decode | --shape=B,H,SQ,SK,D[,causal] ...] [--half]
        [--json FILE] [VERSION ...]

``--quick``: the first four shapes only; ``--decode``: only the decoding shapes (Sq <= 8); ``--shape``: only these
shapes (``causal`` as a sixth field, 1 or 0).
VERSION: a name of ``attention.VERSIONS`` (default: all but naive) or a variant -- ``pipelined@W`` (W warps per
block), ``pipelined@W,32``, ``pipelined@W,32,K`` or ``pipelined@W,32,K,1`` (32 query rows per warp -- two m16 tiles
--, K keys per K/V tile, and 1: Q's tile kept in shared memory), ``tf32x3@W`` or ``tf32x3@W,K`` (K keys per K/V
tile, a multiple of 16), ``split_keys_f16@N`` (about N slices of the keys instead of its plan's, e.g. to time its
SLICE_BLOCKS rule: ``--decode --half split_keys_f16 split_keys_f16@8 split_keys_f16@32``), ``wgmma@K`` (K keys per
K/V tile, a multiple of 16 up to 256: FlashAttention-3 takes 128 at D = 64 and 128; ``--half pipelined wgmma
wgmma@128``; Hopper only), ``warp_specialized@K`` or ``warp_specialized@K,S`` and ``ping_pong@K`` or ``ping_pong@K,S``
(K keys per K/V tile, S stages in each of the K and V rings: ``--half wgmma warp_specialized ping_pong ping_pong@128
ping_pong@64,3``; Hopper only).

float16 steps (``attention.FLOAT16_VERSIONS``) against SDPA's flash backend on float16 inputs; float32 steps
against SDPA in float32 (whichever backend torch picks: flash takes no float32). CUDA-graph replay (torch events),
inputs rotated past L2, median of the runs; every output checked against SDPA in float64 first (NaN-poisoned).
Prints one line per (shape, causal, version) and writes JSON to FILE (default: attention_peer.json in $OUT, else in
benchmarks/results), after every case.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from numba import cuda  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from gpukernels import attention as at  # noqa: E402
from gpukernels.bench import Timer, _l2_bytes  # noqa: E402
from gpukernels.check import compare  # noqa: E402

CASES = [((8, 16, 4096, 4096, 128), False), ((8, 16, 4096, 4096, 128), True), ((4, 32, 8192, 8192, 64), False),
         ((32, 16, 1024, 1024, 64), False)]
MORE = [((4, 32, 8192, 8192, 64), True), ((16, 12, 512, 512, 64), False), ((16, 8, 1024, 77, 64), False),
        ((8, 16, 4096, 256, 80), False), ((64, 32, 1, 4096, 128), False), ((1, 4, 512, 512, 64), False),
        ((1, 32, 16384, 16384, 128), True), ((32, 16, 1024, 1024, 64), True), ((8, 32, 1, 32768, 128), False),
        ((1, 32, 1, 8192, 128), False), ((1, 32, 4, 8192, 128), False)]


def sdpa(backend):
    def run(q, k, v, causal):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def reference(q, k, v, causal):
    """SDPA's math backend in float64, a few heads at a time (the whole score matrix in float64 would not fit)."""
    b, h, sq, d = q.shape
    step = max(1, int(4e9 // (8 * sq * k.shape[2] * 3)))
    out = np.empty((b, h, sq, d), np.float32)
    for i in range(b):
        for j in range(0, h, step):
            part = [x[i:i + 1, j:j + step].double() for x in (q, k, v)]
            out[i:i + 1, j:j + step] = sdpa(SDPBackend.MATH)(*part, causal).float().cpu().numpy()
    return out


def _plans(name, sets_in, sets_out, causal, d):
    """The launches of version or variant ``name`` (the module's docstring) for each input set."""
    sets = len(sets_in)
    version = at.VERSIONS[name.split("@")[0]]
    if "@" in name:  # a variant (the module's docstring)
        base, spec = name.split("@")
        knobs = ({"splits": int(spec)} if base == "split_keys_f16" else {"keys": int(spec)} if base == "wgmma"
                 else {"keys": int(spec.split(",")[0])} if base in ("warp_specialized", "ping_pong")
                 else {"warps": int(spec.split(",")[0])})
        more = [int(x) for x in spec.split(",")[1:]]
        if base == "tf32x3" and more:  # keys per K/V tile
            knobs["keys"] = more[0]
        elif base in ("warp_specialized", "ping_pong") and more:  # stages of each ring
            knobs["stages"] = more[0]
        elif more and base == "pipelined":  # query rows per warp (16 or 32), keys per K/V tile, Q's tile in shared
            knobs.update(zip(("rows_per_warp", "keys", "q_shared"), more))
        launches = {"pipelined": at.pipelined_launches, "tf32x3": at.tf32x3_launches,
                    "split_keys_f16": at.split_keys_f16_launches, "wgmma": at.wgmma_launches,
                    "warp_specialized": at.warp_specialized_launches, "ping_pong": at.ping_pong_launches}[base]
        plans = [launches(*(cuda.as_cuda_array(x) for x in sets_in[i]), cuda.as_cuda_array(sets_out[i]),
                          causal, 1 / math.sqrt(d), **knobs) for i in range(sets)]
    else:
        plans = [version.launches(*(cuda.as_cuda_array(x) for x in sets_in[i]),
                                  out=cuda.as_cuda_array(sets_out[i]), causal=causal) for i in range(sets)]
    return plans


def time_case(shape, causal, versions, timer, log):
    b, h, sq, sk, d = shape
    q, k, v = at.make_inputs(shape, seed=7)
    rows = []
    for dtype in (np.float16, np.float32):
        names = [n for n in versions if (n.split("@")[0] in at.FLOAT16_VERSIONS) == (dtype == np.float16)]
        if dtype == np.float32 and HALF_ONLY:
            continue
        if dtype == np.float16 and d % 16:
            names = []
        t_in = [torch.from_numpy(x.astype(dtype)).cuda() for x in (q, k, v)]
        with torch.no_grad():
            ref = reference(*t_in, causal)
        if not names and HALF_ONLY:
            continue
        set_bytes = sum(x.nbytes for x in t_in) + 4 * b * h * sq * d
        sets = int(min(8, max(1, math.ceil(4 * _l2_bytes() / set_bytes))))
        sets_in = [t_in] + [[x.clone() for x in t_in] for _ in range(sets - 1)]
        sets_out = [torch.empty((b, h, sq, d), device="cuda") for _ in range(sets)]
        tol = 1e-2 if dtype == np.float16 else 1e-4
        for name in names:
            try:
                plans = _plans(name, sets_in, sets_out, causal, d)
                sets_out[0].fill_(float("nan"))
                for launch in plans[0]:
                    launch()
                cuda.synchronize()
            except Exception as err:  # a variant that cannot run here skips only itself
                log(f"{shape} causal={causal} {name}: FAILED ({type(err).__name__}: {err})")
                continue
            check = compare(sets_out[0].cpu().numpy(), ref, tol)
            if not check.ok:
                log(f"{shape} causal={causal} {name}: WRONG {check}")
                rows.append({"shape": shape, "causal": causal, "name": name, "ok": False, "check": str(check)})
                continue

            def enqueue(i, plans=plans):
                s = timer.stream()
                for launch in plans[i]:
                    launch(stream=s)

            ms = statistics.median(timer.time(enqueue, sets, min_runs=10, budget_ms=400))
            rows.append({"shape": shape, "causal": causal, "name": name, "dtype": np.dtype(dtype).name, "ms": ms,
                         "tflops": at.flops(shape, causal) / ms / 1e9, "rel_error": check.rel_error})
            log(f"{shape} causal={causal!s:5} {name:12} {np.dtype(dtype).name}: {ms:8.3f} ms "
                f"{rows[-1]['tflops']:6.1f} TFLOP/s  err {check.rel_error:.1e}")
        peers = [("flash", SDPBackend.FLASH_ATTENTION)] if dtype == np.float16 else [("sdpa-default", None)]
        for pname, backend in peers:
            fn = sdpa(backend)
            with torch.no_grad():
                try:
                    check = compare(fn(*t_in, causal).float().cpu().numpy(), ref, tol * 10)
                    ms = statistics.median(timer.time(lambda i: fn(*sets_in[i], causal), sets, min_runs=10,
                                                      budget_ms=400))
                except RuntimeError as err:
                    log(f"{shape} {pname}: {err}".splitlines()[0])
                    continue
            rows.append({"shape": shape, "causal": causal, "name": pname, "dtype": np.dtype(dtype).name, "ms": ms,
                         "tflops": at.flops(shape, causal) / ms / 1e9, "rel_error": check.rel_error, "peer": True})
            log(f"{shape} causal={causal!s:5} {pname:12} {np.dtype(dtype).name}: {ms:8.3f} ms "
                f"{rows[-1]['tflops']:6.1f} TFLOP/s  err {check.rel_error:.1e}")
        del sets_in, sets_out
        torch.cuda.empty_cache()
    return rows


HALF_ONLY = "--half" in sys.argv


def parse_shape(text: str):
    """(shape, causal) from ``B,H,SQ,SK,D[,causal]``, or None after a one-line error."""
    try:
        fields = [int(x) for x in text.split(",")]
    except ValueError:
        fields = []
    if len(fields) not in (5, 6) or min(fields[:5]) < 1 or fields[5:] not in ([], [0], [1]):
        print(f"attention_peer.py: --shape must be B,H,SQ,SK,D (positive integers) with an optional causal 0 or 1; "
              f"got {text!r}", file=sys.stderr)
        return None
    return tuple(fields[:5]), bool(fields[5:] == [1])


def main() -> int:
    quick = "--quick" in sys.argv
    args = [a for i, a in enumerate(sys.argv[1:]) if not (i and sys.argv[i] == "--json")]  # less --json's path
    versions = [a for a in args if not a.startswith("--")] or [n for n in at.VERSIONS if n != "naive"]
    timer = Timer(torch)
    rows = []
    cases = CASES + ([] if quick else MORE)
    if "--decode" in sys.argv:  # only the decoding shapes (a few queries per head)
        cases = [(shape, causal) for shape, causal in CASES + MORE if shape[2] <= 8]
    shapes = [parse_shape(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--shape=")]
    if None in shapes:
        return 2
    cases = shapes or cases
    path = (sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv[:-1] else
            os.path.join(os.environ.get("OUT", "benchmarks/results"), "attention_peer.json"))
    for shape, causal in cases:
        rows += time_case(shape, causal, versions, timer, lambda s: print(s, flush=True))
        with open(path, "w") as f:  # after every case: a run cut at a time limit keeps what it measured
            json.dump({"device": torch.cuda.get_device_name(), "method": timer.method, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
