"""Grading spec of exercise 10 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels import tensor_core
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import (DataFlow, Exercise, MaxLoadsPerElement, MaxStoresPerElement, NoRaces,
                                   WarpInstructions, ceil_div, readme_hints)

TILE_M, TILE_N, TILE_K = 16, 8, 16  # mma.sync.m16n8k16: the tile of C a warp computes, and K per instruction


def make_inputs(shape, seed):
    a, b = tensor_core.make_inputs(shape, seed)  # the lesson's float16 inputs (with outliers)
    return {"a": a, "b": b}


def mmas(shape):
    """One mma per warp (16 x 8 tile of C) and 16 of K."""
    m, n, k = shape
    return ceil_div(m, TILE_M) * ceil_div(n, TILE_N) * ceil_div(k, TILE_K)


EXERCISE = Exercise(
    summary="c = a @ b in float16 on tensor cores: the fragments of one mma.sync.m16n8k16 per warp and 16 of K",
    kernel="mma_matmul",
    args=("a", "b", "c"),
    out="c",
    make_inputs=make_inputs,
    out_shape=lambda shape: (shape[0], shape[1]),
    reference=tensor_core.reference,  # float64 sums of the float16 inputs
    launch=lambda shape: ((ceil_div(shape[1], TILE_N), ceil_div(shape[0], TILE_M)), 32),
    shapes=[(1, 1, 1), (17, 9, 31), (16, 8, 16), (33, 17, 40)],
    ranges=[(1, 66), (1, 34), (1, 80)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(17, 48), (9, 32), (17, 48)],  # the technique's shape: drawn fresh each run
    tolerance=TOLERANCE["tensor_core"],
    technique=[
        WarpInstructions("mma_f16", mmas, why="one per warp and 16 of K"),
        # ... and C is built from their products: with the mma's products doubled, C must double
        DataFlow("mma_f16", expect="doubles", why="C must be the sum of the mma's products, not FMAs beside a decoy"),
        # shape = (M, N, K): each warp reads its 16 rows of a and its 8 columns of b once
        MaxLoadsPerElement("a", lambda shape: ceil_div(shape[1], TILE_N), why="load each fragment element once"),
        MaxLoadsPerElement("b", lambda shape: ceil_div(shape[0], TILE_M), why="load each fragment element once"),
        MaxStoresPerElement("c", 1, why="store the accumulators once, after the k loop"),
        NoRaces(),
    ],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
