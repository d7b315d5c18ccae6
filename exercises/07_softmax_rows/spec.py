"""Grading spec of exercise 07 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels import softmax
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import Coalesced, Exercise, MaxLoadsPerElement, NoRaces, Speed, readme_hints

THREADS = 64


def make_inputs(shape, seed):
    (x,) = softmax.make_inputs(shape, seed)  # the lesson's inputs: outliers of +-1e4 and some -inf
    return {"x": x}


EXERCISE = Exercise(
    summary="softmax over each row, a block of 64 threads per row, shared-memory reductions",
    kernel="softmax_rows",
    args=("x", "y"),
    out="y",
    make_inputs=make_inputs,
    out_shape=lambda shape: shape,
    reference=softmax.reference,
    launch=lambda shape: (shape[0], THREADS),
    shapes=[(1, 1), (3, 5), (4, 100), (2, 257)],
    trace_shape=(4, 256),
    tolerance=TOLERANCE["softmax"],
    technique=[
        Coalesced(("x",), kinds=("load",)),
        Coalesced(("y",), kinds=("store",)),
        MaxLoadsPerElement("x", lambda shape: 3),
        NoRaces(),
    ],
    speed=Speed((4096, 4096), softmax.VERSIONS["naive"], min_speedup=2.0),
    hints=readme_hints(__file__),
)
