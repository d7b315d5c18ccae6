"""Run every tile of the matmul dispatcher's estimate (``matmul.k21_optimized.TILES``: whole and split into slices of
K, 16-byte and 4-byte loads) once per shape, checked against float64, for compute-sanitizer on a GPU:

    compute-sanitizer --tool racecheck python3 benchmarks/matmul_tiles_sanitize.py
    compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/matmul_tiles_sanitize.py [TILE ...]

(``TILE``: only the tiles of these names, e.g. ``64x64/128``; ``--fixup``: instead, each tile's split through a
workspace, the kernel ``optimized`` runs for it: ``make_interior_kernel(fixup=True)``, by the cp.async ring on aligned
rows where the tile has one; ``--spread``: instead, the 128 x 128 tile under stream-K's schedule as ``optimized``
spreads it over every SM -- and over 5 blocks, so that some tiles are also whole and others cut in two.)

The shapes take every edge: partial tiles along M and N (ragged by 1 to 63), K not a multiple of the k tile, a
slice count that leaves the last slice short or empty, one element. C starts as NaN (a split zeroes it first).
Exit status 1 on a wrong result.
"""

from __future__ import annotations

import itertools
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

from gpukernels import matmul  # noqa: E402  (before numba.cuda: it picks the simulator or the GPU)
from gpukernels.check import TOLERANCE  # noqa: E402
from gpukernels.matmul._common import fixup_launch, tiled_launch  # noqa: E402
from gpukernels.matmul.k21_optimized import TILES  # noqa: E402

from _sanitize import on_device, run_and_compare  # noqa: E402

#: (M, N, K, slices): aligned rows (N and K multiples of 4) and not
SHAPES = [(70, 72, 40, 3), (130, 68, 100, 2), (64, 64, 64, 2), (1, 4, 4, 1), (257, 260, 516, 5),
          (65, 67, 99, 3), (33, 31, 17, 1), (200, 129, 250, 7)]


def main() -> int:
    bad = 0
    fixup = "--fixup" in sys.argv
    if "--spread" in sys.argv:
        return spread()
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or [t.name for t in TILES]
    for (m, n, k, slices), tile in itertools.product(SHAPES, [t for t in TILES if t.name in names]):
        a, b = matmul.make_inputs((m, n, k), seed=1)
        ref = matmul.reference(a, b)
        aligned = n % 4 == 0 and k % 4 == 0
        if fixup:  # what optimized runs (`Tile.workspace_kernel`: the cp.async ring where the tile has one)
            variants = ([("workspace", (tile.workspace_kernel(True), tile.workspace_kernel(False)), slices)]
                        if tile.split_kernels else [])
        else:
            variants = [("whole", tile.kernels, 1)]
            if tile.split_kernels:
                variants.append(("split", tile.split_kernels, slices))
        for label, pair, s in variants:
            kernel = pair[0 if aligned else 1]
            args = on_device(a, b, np.full((m, n), np.nan, np.float32))
            launch = fixup_launch if label == "workspace" else tiled_launch
            check = run_and_compare(launch(kernel, args[2], tuple(args), s), args[2], ref, TOLERANCE["matmul"])
            bad += not check.ok
            print(f"matmul {tile.name:10s} {label} x{s} {'16-byte' if aligned else '4-byte'} {m}x{n}x{k} {check}",
                  flush=True)
    return 1 if bad else 0


def spread() -> int:
    from gpukernels.matmul import _common
    from gpukernels.matmul.k19_stream_k import stream_k_launches
    from gpukernels.matmul.k21_optimized import SPREAD_TILE

    bad = 0
    for (m, n, k, _), sms in itertools.product(SHAPES, (_common.sm_count(), 5)):
        a, b = matmul.make_inputs((m, n, k), seed=1)
        aligned = n % 4 == 0 and k % 4 == 0
        kernel = SPREAD_TILE.kernels[0 if aligned else 1]
        args = on_device(a, b, np.full((m, n), np.nan, np.float32))
        launches = stream_k_launches(kernel, *args, sms=sms)
        check = run_and_compare(launches, args[2], matmul.reference(a, b), TOLERANCE["matmul"])
        bad += not check.ok
        print(f"matmul 128x128 stream-K over {launches[0].args[3].shape[0]} of {launches[0].grid[0]} blocks "
              f"{'16-byte' if aligned else '4-byte'} {m}x{n}x{k} {check}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
