"""Run every attention version once per shape, checked against float64, for compute-sanitizer on a GPU:

    compute-sanitizer --tool racecheck python3 benchmarks/attention_sanitize.py
    compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/attention_sanitize.py [versions]

The shapes are small but take every path: a single key and query, Sq != Sk both ways, several K/V tiles with a
partial last one, D = 16 / 80 / 128, causal and not. The float16 steps get float16 inputs. Outputs start as NaN.
Exit status 1 on a wrong result.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

from gpukernels import attention as at  # noqa: E402
from gpukernels.check import compare  # noqa: E402

#: (B, H, Sq, Sk, D)
SHAPES = [(1, 1, 1, 1, 16), (1, 2, 70, 33, 80), (2, 1, 33, 150, 128), (1, 1, 129, 129, 64)]


def main() -> int:
    bad = 0
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
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
