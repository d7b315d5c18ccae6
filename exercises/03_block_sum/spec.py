"""Grading spec of exercise 03 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels.grade.spec import (Exercise, MaxLoadsPerElement, NoRaces, UsesShared, ceil_div, grouped_sum,
                                   readme_hints, vector_with_outliers)

THREADS = 128


EXERCISE = Exercise(
    summary="partial[b] = sum of block b's 128 elements, a tree reduction in shared memory",
    kernel="block_sum",
    args=("x", "partial"),
    out="partial",
    make_inputs=vector_with_outliers,
    out_shape=lambda shape: (ceil_div(shape[0], THREADS),),
    reference=lambda x: grouped_sum(x, THREADS),
    error_scale=lambda x: grouped_sum(abs(x), THREADS),  # float32 sums of +-100 terms: errors scale with sum|x|
    launch=lambda shape: (ceil_div(shape[0], THREADS), THREADS),
    shapes=[(1,), (127,), (129,), (1000,)],
    ranges=[(1, 2000)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(200, 2000)],  # the technique's shape: drawn fresh each run
    tolerance=1e-5,
    technique=[MaxLoadsPerElement("x", lambda shape: 1), UsesShared(), NoRaces()],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
