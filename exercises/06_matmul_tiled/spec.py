"""Grading spec of exercise 06 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels import matmul
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import (Exercise, MaxLoadsPerElement, NoRaces, Speed, UsesShared, ceil_div,
                                   readme_hints)

TILE = 16


def make_inputs(shape, seed):
    a, b = matmul.make_inputs(shape, seed)  # the lesson's inputs (with outliers)
    return {"a": a, "b": b}


EXERCISE = Exercise(
    summary="c = a @ b with 16 x 16 tiles of a and b staged in shared memory",
    kernel="matmul_tiled",
    args=("a", "b", "c"),
    out="c",
    make_inputs=make_inputs,
    out_shape=lambda shape: (shape[0], shape[1]),
    reference=matmul.reference,
    launch=lambda shape: ((ceil_div(shape[1], TILE), ceil_div(shape[0], TILE)), (TILE, TILE)),
    shapes=[(1, 1, 1), (17, 19, 23), (33, 16, 40), (16, 48, 32)],
    ranges=[(1, 66), (1, 96), (1, 80)],  # fresh shapes each run, besides the listed ones
    beyond_ranges=[(67, 72), (97, 104), (81, 120)],  # past the ranges, K the most (the simulator's time: M N K)
    trace_ranges=[(17, 64), (17, 64), (17, 48)],  # the technique's shape: drawn fresh each run
    tolerance=TOLERANCE["matmul"],
    technique=[
        # shape = (M, N, K): A is re-read once per block column of C, B once per block row.
        MaxLoadsPerElement("a", lambda shape: ceil_div(shape[1], TILE), why="stage tiles of a in shared memory"),
        MaxLoadsPerElement("b", lambda shape: ceil_div(shape[0], TILE), why="stage tiles of b in shared memory"),
        UsesShared(),
        NoRaces(),
    ],
    speed=Speed((2048, 2048, 2048), matmul.VERSIONS["naive"], min_speedup=4.0),
    hints=readme_hints(__file__),
)
