"""Run Winograd's F(2x2, 3x3) and F(4x4, 3x3) convolutions (gpukernels/cbr/k05_winograd.py) once per shape, checked
against float64, for compute-sanitizer on a GPU:

    compute-sanitizer --tool racecheck python3 benchmarks/winograd_sanitize.py
    compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/winograd_sanitize.py

The shapes take every edge: partial block tiles of the products on every side (70 output channels: two block rows;
P not a multiple of 64), a channel count that is not a multiple of the k tile, odd outputs (tiles half outside),
padding 0 to 2, a one-pixel image; each with both output tiles (2 x 2 and 4 x 4) and every block tile of the products
(64 or 128 a side). Outputs and the intermediates start as NaN. Exit status 1 on a wrong result.
"""

from __future__ import annotations

import itertools
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

from gpukernels import cbr  # noqa: E402  (before numba.cuda: it picks the simulator or the GPU)
from gpukernels.cbr.k05_winograd import winograd_launches  # noqa: E402
from gpukernels.check import TOLERANCE  # noqa: E402

from _sanitize import on_device, run_and_compare  # noqa: E402

#: ((N, C, H, W, K, 3, 3), padding)
SHAPES = [((2, 9, 11, 10, 70, 3, 3), 1), ((1, 3, 5, 7, 2, 3, 3), 1), ((2, 17, 9, 8, 6, 3, 3), 0),
          ((1, 2, 4, 3, 3, 3, 3), 2), ((1, 1, 1, 1, 1, 3, 3), 1), ((3, 20, 37, 41, 65, 3, 3), 1),
          ((1, 12, 30, 36, 130, 3, 3), 1)]  # 130 channels: a second row of 128-row tiles; P = 270: a third column
TILES = [(64, 64), (128, 128), (128, 64), (64, 128)]


def main() -> int:
    import gpukernels

    on_gpu = gpukernels.MODE == "gpu"
    bad = 0
    for (shape, padding), m, tile in itertools.product(SHAPES, (2, 4), TILES):
        x, w, b = cbr.make_inputs(shape, seed=1)
        ref = cbr.reference(x, w, b, padding)
        args = on_device(x, w, b, np.full(ref.shape, np.nan, np.float32))
        launches = winograd_launches(*args, padding, tile=tile, m=m)
        for t in (launches[0].args[1], launches[1].args[1], launches[2].args[2]):  # U, V, M start as NaN too
            if on_gpu:
                t.copy_to_device(np.full(t.shape, np.nan, np.float32))
            else:
                t.fill(np.nan)
        check = run_and_compare(launches, args[3], ref, TOLERANCE["cbr"])
        bad += not check.ok
        print(f"winograd F({m}x{m}) {'x'.join(map(str, shape)):18s} padding={padding} tile={tile} {check}",
              flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
