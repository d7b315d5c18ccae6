"""Grading spec of exercise 09 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels.grade.spec import (DataFlow, Exercise, MaxLoadsPerElement, NoRaces, NoSharedMemory, ceil_div,
                                   grouped_sum, readme_hints, vector_with_outliers)

THREADS = 128
WARP = 32


EXERCISE = Exercise(
    summary="out[w] = sum of warp w's 32 elements, with shfl_down_sync (no shared memory, no barrier)",
    kernel="warp_sum",
    args=("x", "out"),
    out="out",
    make_inputs=vector_with_outliers,
    out_shape=lambda shape: (ceil_div(shape[0], WARP),),
    reference=lambda x: grouped_sum(x, WARP),
    error_scale=lambda x: grouped_sum(abs(x), WARP),  # float32 sums of +-100 terms: errors scale with sum|x|
    launch=lambda shape: (ceil_div(shape[0], THREADS), THREADS),
    shapes=[(1,), (33,), (100,), (1000,)],
    ranges=[(1, 2000)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(200, 2000)],  # the technique's shape: drawn fresh each run
    # whole warps: every sum has 32 terms, so each passes through the shuffles however a kernel treats a ragged end
    trace_multiples=(32,),
    tolerance=1e-5,
    technique=[MaxLoadsPerElement("x", lambda shape: 1), NoSharedMemory(), NoRaces(),
               # the sums travel through the shuffles: with each shuffle's value off by 1, every sum moves
               DataFlow("shfl", why="each warp's sum must be combined across its lanes by warp shuffles")],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
