"""Run every attention version once per shape, checked against float64, for compute-sanitizer on a GPU:

    compute-sanitizer --tool racecheck python3 benchmarks/attention_sanitize.py
    compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/attention_sanitize.py [versions]

The shapes are small but take every path: a single key and query, Sq != Sk both ways, several K/V tiles with a
partial last one, D = 16 / 80 / 128 and 30 (rows that are not whole 16-byte pieces), causal and not, and decoding (3
queries against 1000 keys: split_keys' runs, split_keys_f16's slices). The float16 steps get float16 inputs. Then
``split_keys_f16`` with the slices asked for (SPLITS: slices of one K/V tile, blocks of early queries whose slices lie
past their last key under the mask) and ``optimized`` on float16 decoding (its split_keys_f16 path), unless versions
other than those two are named; then the variants of ``pipelined`` that benchmarks/attention_peer.py times (VARIANTS: 32
query rows per warp, shorter K/V tiles, Q's tile in dynamic shared memory), unless versions are named, and those of
``tf32x3`` that split operands as they read them or interleave their mma chains (TF32X3_OPTIONS), unless versions other
than tf32x3 are named. Outputs start as NaN. Exit status 1 on a wrong result.
"""

from __future__ import annotations

import math
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

from gpukernels import attention as at  # noqa: E402
from gpukernels.attention.k05_pipelined import pipelined_launches  # noqa: E402
from gpukernels.attention.k06_tf32x3 import tf32x3_launches  # noqa: E402
from gpukernels.attention.k08_split_keys_f16 import split_keys_f16_launches  # noqa: E402
from gpukernels.check import compare  # noqa: E402

#: (B, H, Sq, Sk, D)
SHAPES = [(1, 1, 1, 1, 16), (1, 2, 70, 33, 80), (2, 1, 33, 150, 128), (1, 1, 129, 129, 64), (1, 2, 45, 37, 30),
          (2, 3, 3, 1000, 64)]
#: (shape, slices asked for) of split_keys_f16_launches
SPLITS = [((1, 2, 70, 130, 16), 3), ((2, 3, 3, 1000, 64), 16), ((1, 1, 5, 530, 128), 3)]
#: keyword arguments of pipelined_launches, as attention_peer.py's pipelined@W,R[,K[,Q]]: both layouts whichever
#: `plan` picks for these small shapes (16 rows per warp; 32, Q in shared memory past D = 64), and the others
VARIANTS = [{"warps": 4, "rows_per_warp": 32}, {"warps": 4, "rows_per_warp": 16},
            {"warps": 4, "rows_per_warp": 32, "q_shared": False},
            {"warps": 4, "rows_per_warp": 32, "keys": 32, "q_shared": True},
            {"warps": 2, "rows_per_warp": 32, "keys": 16}]
#: keyword arguments of tf32x3_launches (also run when "tf32x3" is named): the operands stored as they are and split
#: as read, each n-tile's mma chain issued after the last (the default: four in turn), and blocks of 4 warps with Q
#: split as read (two blocks per SM at D = 128)
TF32X3_OPTIONS = [{"on_read": "q"}, {"on_read": "kv"}, {"on_read": "qkv"}, {"chains": 1}, {"warps": 4, "on_read": "q"}]


def split_keys_f16_cases() -> int:
    """split_keys_f16 with the slices SPLITS asks for, causal and not, and optimized on float16 decoding where it
    takes split_keys_f16; returns the number of wrong results."""
    bad = 0
    for shape, splits in SPLITS:
        for causal in (False, True):
            args = [x.astype(np.float16) for x in at.make_inputs(shape, seed=1)]
            runs = [(f"split_keys_f16@{splits}", lambda out: [la() for la in split_keys_f16_launches(
                *args, out, causal, 1 / math.sqrt(shape[-1]), splits)])]
            if at.optimized.describe(*args, causal=causal).startswith("split_keys_f16"):
                runs.append(("optimized", lambda out: at.optimized(*args, causal=causal, out=out)))
            for label, run in runs:
                out = np.full(shape[:3] + shape[4:], np.nan, np.float32)
                run(out)
                check = compare(out, at.reference(*args, causal=causal), 1e-2)
                bad += not check.ok
                print(f"{label:18s} {'x'.join(map(str, shape)):16s} causal={causal!s:5s} {check}", flush=True)
    return bad


def main() -> int:
    bad = 0
    if not sys.argv[1:] or set(sys.argv[1:]) & {"split_keys_f16", "optimized"}:
        bad += split_keys_f16_cases()
    for shape in SHAPES:
        for causal in (False, True):
            q, k, v = at.make_inputs(shape, seed=1)
            for name, version in at.VERSIONS.items():
                if sys.argv[1:] and name not in sys.argv[1:]:
                    continue
                half = name in at.FLOAT16_VERSIONS or (name == "optimized" and shape[-1] % 16 == 0 and causal)
                if half and shape[-1] % 16:
                    continue
                args = [x.astype(np.float16) for x in (q, k, v)] if half else [q, k, v]
                out = np.full(shape[:3] + shape[4:], np.nan, np.float32)
                version(*args, causal=causal, out=out)
                check = compare(out, at.reference(*args, causal=causal), 1e-2 if half else 1e-4)
                bad += not check.ok
                print(f"{name:12s} {'x'.join(map(str, shape)):16s} causal={causal!s:5s} {check}", flush=True)
            if not sys.argv[1:] or "tf32x3" in sys.argv[1:]:
                for kw in TF32X3_OPTIONS:
                    out = np.full(shape[:3] + shape[4:], np.nan, np.float32)
                    for launch in tf32x3_launches(q, k, v, out, causal, 1 / math.sqrt(shape[-1]), **kw):
                        launch()
                    check = compare(out, at.reference(q, k, v, causal=causal), 1e-4)
                    bad += not check.ok
                    label = "tf32x3@" + ",".join(f"{key}={val}" for key, val in kw.items())
                    print(f"{label:18s} {'x'.join(map(str, shape)):16s} causal={causal!s:5s} {check}", flush=True)
            if sys.argv[1:] or shape[-1] % 16:
                continue
            args = [x.astype(np.float16) for x in (q, k, v)]
            for kw in VARIANTS:
                out = np.full(shape[:3] + shape[4:], np.nan, np.float32)
                for launch in pipelined_launches(*args, out, causal, 1 / math.sqrt(shape[-1]), **kw):
                    launch()
                check = compare(out, at.reference(*args, causal=causal), 1e-2)
                bad += not check.ok
                label = ",".join(str(int(v)) for v in kw.values())
                print(f"pipelined@{label:8s} {'x'.join(map(str, shape)):16s} causal={causal!s:5s} {check}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
