"""Grading spec of exercise 12 (the fields are described in gpukernels/grade/spec.py).

The kernel is exercise 06's tiled product with its tiles copied by cp.async into a ring of two stages: tile t + 1
is on its way while tile t is used. The simulator keeps each copy in flight until the wait that covers it, so a
missing or miscounted wait, a missing commit or barrier is a hazard the correctness runs report with both lines
(gpukernels.sim._async), not a result that happens to come out right.
"""

from gpukernels import matmul
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import (DataFlow, Exercise, MaxLoadsPerElement, NoRaces, UsesShared, WarpInstructions,
                                   ceil_div, readme_hints)

TILE = 16
THREADS = TILE * TILE


def make_inputs(shape, seed):
    a, b = matmul.make_inputs(shape, seed)  # the lesson's inputs (with outliers)
    return {"a": a, "b": b}


def copies(shape):
    """cp.async warp instructions: two per thread and k tile (a's element and b's, zeros outside), 8 warps a block."""
    m, n, k = shape
    return ceil_div(m, TILE) * ceil_div(n, TILE) * ceil_div(k, TILE) * 2 * (THREADS // 32)


EXERCISE = Exercise(
    summary="c = a @ b with its 16 x 16 tiles copied by cp.async into a two-stage shared ring",
    kernel="matmul_async",
    args=("a", "b", "c"),
    out="c",
    make_inputs=make_inputs,
    out_shape=lambda shape: (shape[0], shape[1]),
    reference=matmul.reference,
    launch=lambda shape: ((ceil_div(shape[1], TILE), ceil_div(shape[0], TILE)), (TILE, TILE)),
    shapes=[(1, 1, 1), (17, 19, 23), (33, 16, 64), (16, 40, 48)],
    ranges=[(1, 40), (1, 40), (1, 64)],  # fresh shapes each run, besides the listed ones
    beyond_ranges=[(41, 48), (41, 48), (65, 80)],  # past them, K the most (the simulator's time: M N K)
    trace_ranges=[(17, 32), (17, 32), (33, 48)],  # the technique's shape: drawn fresh each run
    tolerance=TOLERANCE["matmul"],
    technique=[
        WarpInstructions("cp.async", copies, why="every thread copies its element of both tiles of every k tile"),
        DataFlow("cp.async", why="multiply from the tiles the copies bring, not from global memory"),
        MaxLoadsPerElement("a", lambda shape: ceil_div(shape[1], TILE), why="stage tiles of a in shared memory"),
        MaxLoadsPerElement("b", lambda shape: ceil_div(shape[0], TILE), why="stage tiles of b in shared memory"),
        UsesShared(),
        NoRaces(),
    ],
    hints=readme_hints(__file__),
)
