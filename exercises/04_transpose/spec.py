"""Grading spec of exercise 04 (the fields are described in gpukernels/grade/spec.py)."""

import numpy as np

from gpukernels.grade.spec import (Coalesced, Exercise, NoBankConflicts, NoRaces, UsesShared, ceil_div,
                                   readme_hints)

TILE, ROWS = 32, 8


def make_inputs(shape, seed):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal(shape, dtype=np.float32)}


def reference(a):
    return np.ascontiguousarray(a.T)


EXERCISE = Exercise(
    summary="out = a.T through a padded shared-memory tile",
    kernel="transpose",
    args=("a", "out"),
    out="out",
    make_inputs=make_inputs,
    out_shape=lambda shape: (shape[1], shape[0]),
    reference=reference,
    launch=lambda shape: ((ceil_div(shape[1], TILE), ceil_div(shape[0], TILE)), (TILE, ROWS)),
    shapes=[(1, 1), (33, 65), (40, 19), (32, 64)],
    ranges=[(1, 80), (1, 130)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(32, 96), (32, 96)],  # the technique's shape: drawn fresh each run
    # whole tiles: rows start on 32-byte sectors and every lane of a warp has an element (idle lanes count as waste)
    trace_multiples=(32, 32),
    tolerance=0.0,
    technique=[Coalesced(("a", "out")), UsesShared(), NoBankConflicts(), NoRaces()],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
