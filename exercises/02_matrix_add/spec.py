"""Grading spec of exercise 02 (the fields are described in gpukernels/grade/spec.py)."""

import numpy as np

from gpukernels.grade.spec import Coalesced, Exercise, MaxLoadsPerElement, NoRaces, ceil_div, readme_hints

BLOCK = (16, 16)


def make_inputs(shape, seed):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal(shape, dtype=np.float32), "b": rng.standard_normal(shape, dtype=np.float32)}


def reference(a, b):
    return (a.astype(np.float64) + b).astype(np.float32)


EXERCISE = Exercise(
    summary="out = a + b for an (M, N) matrix, x -> column, y -> row",
    kernel="matrix_add",
    args=("a", "b", "out"),
    out="out",
    make_inputs=make_inputs,
    out_shape=lambda shape: shape,
    reference=reference,
    launch=lambda shape: ((ceil_div(shape[1], BLOCK[0]), ceil_div(shape[0], BLOCK[1])), BLOCK),
    shapes=[(1, 1), (17, 33), (40, 19), (5, 100)],
    ranges=[(1, 80), (1, 200)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(16, 64), (32, 128)],  # the technique's shape: drawn fresh each run
    trace_multiples=(1, 8),  # rows start on 32-byte sectors: coalescing without a ragged edge
    tolerance=1e-6,
    technique=[
        MaxLoadsPerElement("a", lambda shape: 1),
        MaxLoadsPerElement("b", lambda shape: 1),
        Coalesced(("a", "b", "out")),
        NoRaces(),
    ],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
