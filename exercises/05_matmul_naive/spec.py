"""Grading spec of exercise 05 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels import matmul
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import Coalesced, Exercise, NoRaces, Speed, ceil_div, readme_hints

BLOCK = (16, 16)


def make_inputs(shape, seed):
    a, b = matmul.make_inputs(shape, seed)  # the lesson's inputs (with outliers)
    return {"a": a, "b": b}


EXERCISE = Exercise(
    summary="c = a @ b, one thread per output, x -> column",
    kernel="matmul",
    args=("a", "b", "c"),
    out="c",
    make_inputs=make_inputs,
    out_shape=lambda shape: (shape[0], shape[1]),
    reference=matmul.reference,
    launch=lambda shape: ((ceil_div(shape[1], BLOCK[0]), ceil_div(shape[0], BLOCK[1])), BLOCK),
    shapes=[(1, 1, 1), (17, 19, 5), (33, 20, 7), (8, 40, 33)],
    ranges=[(1, 66), (1, 80), (1, 66)],  # fresh shapes each run, besides the listed ones
    beyond_ranges=[(67, 72), (81, 90), (67, 132)],  # past the ranges, K the most (the simulator's time: M N K)
    trace_ranges=[(16, 48), (32, 64), (8, 32)],  # the technique's shape: drawn fresh each run
    # rows start on 32-byte sectors and every lane of a warp has a column (idle lanes count as waste)
    trace_multiples=(1, 32, 1),
    tolerance=TOLERANCE["matmul"],
    technique=[Coalesced(("b",), kinds=("load",)), Coalesced(("c",), kinds=("store",)), NoRaces()],
    speed=Speed((2048, 2048, 2048), matmul.VERSIONS["naive"], min_speedup=1.0),
    hints=readme_hints(__file__),
)
