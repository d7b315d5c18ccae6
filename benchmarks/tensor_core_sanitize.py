"""Run every tensor_core version once per shape, checked against float64, for compute-sanitizer on a GPU:

    compute-sanitizer --tool racecheck python3 benchmarks/tensor_core_sanitize.py
    compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/tensor_core_sanitize.py

The shapes take every path: (33, 17, 31) has rows that are not 16-byte aligned (the ring filled by loads and
stores), odd edges in M, N and K; (256, 264, 72) has aligned rows (cp.async), several k tiles, whole and edge
blocks of 128 x 128 and 64 x 64. tf32x3 gets float32 inputs. Then the dispatcher's split-K, padded and wgmma
split-K paths (DISPATCH), wgmma's other block shapes (BLOCKS), and the tma and warp_specialized steps where their
ring goes round more than once (PHASES). Outputs start as NaN. Exit status 1 on a wrong result.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402

from gpukernels import tensor_core as tc  # noqa: E402
from gpukernels.check import compare  # noqa: E402
from gpukernels.tensor_core.k06_wgmma import make_wgmma_kernel, wgmma_launch  # noqa: E402

SHAPES = [(33, 17, 31), (256, 264, 72)]
#: Shapes that take the dispatcher down its other paths on an H200: K split in slices added by atomics (after a
#: zeroing launch), rows padded to 16 bytes before wgmma (100 tiles of 128 x 256, K and N odd), and split-K inside
#: wgmma (12 tiles of 128 x 256 x 8 slices; 33 tiles of 128 x 128 x 2 slices, N = 100 padded first), and blocks of
#: one warpgroup (72 tiles of 64 x 128, aligned and padded; SHAPES take the 64 x 64 ones)
DISPATCH = [(16, 64, 4096), (1280, 2555, 71), (384, 1024, 16384), (4224, 100, 4096), (520, 1000, 200),
            (517, 999, 203)]
#: wgmma's other block shapes that benchmarks/wgmma_variants.py --small times: (columns, ring stages, block rows),
#: on a shape with whole and edge tiles in both directions and a ragged last k tile
BLOCKS = [(128, 8, 64), (64, 8, 64), (256, 4, 64), (128, 4, 128)]
BLOCK_SHAPE = (200, 328, 200)
#: The tma and warp_specialized steps with more k tiles than their 4 stages (each stage's mbarriers complete a
#: second and third phase: the phase bit flips), whole and edge tiles both ways, B's last boxes wholly past N
PHASES = [(200, 328, 648), (130, 520, 328)]


def run(name: str, version, shape, dtype=np.float16, note=lambda a, b: "") -> int:
    """``version`` on fresh inputs of ``shape`` into a NaN-poisoned output, checked against float64: 1 if wrong."""
    a, b = tc.make_inputs(shape, seed=1, dtype=dtype)
    out = np.full(shape[:2], np.nan, np.float32)
    version(a, b, out=out)
    check = compare(out, tc.reference(a, b), 1e-3)
    print(f"{name:16s} {'x'.join(map(str, shape)):12s} {check}{note(a, b)}", flush=True)
    return int(not check.ok)


def main() -> int:
    bad = 0
    for shape in SHAPES:
        for name, version in tc.VERSIONS.items():
            bad += run(name, version, shape, np.float32 if name == "tf32x3" else np.float16)
    for shape in DISPATCH:
        bad += run("optimized", tc.optimized, shape, note=lambda a, b: f"  [{tc.optimized.describe(a, b)[:60]}]")
    bad += blocks()
    for shape in PHASES:
        bad += run("tma", tc.tma, shape)
        bad += run("warp_specialized", tc.warp_specialized, shape)
    return 1 if bad else 0


def blocks() -> int:
    """wgmma's other block shapes (BLOCKS) on BLOCK_SHAPE: how many are wrong."""
    bad = 0
    a, b = tc.make_inputs(BLOCK_SHAPE, seed=1)
    for bn, stages, bm in BLOCKS:
        out = np.full(BLOCK_SHAPE[:2], np.nan, np.float32)
        for launch in wgmma_launch(make_wgmma_kernel(bn, stages, bm=bm), a, b, out):
            launch()
        check = compare(out, tc.reference(a, b), 1e-3)
        bad += not check.ok
        print(f"wgmma {bm}x{bn}x{stages} {'x'.join(map(str, BLOCK_SHAPE)):12s} {check}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
