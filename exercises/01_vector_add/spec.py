"""Grading spec of exercise 01 (the fields are described in gpukernels/grade/spec.py)."""

import numpy as np

from gpukernels.grade.spec import Coalesced, Exercise, MaxLoadsPerElement, NoRaces, ceil_div, readme_hints

THREADS = 64


def make_inputs(shape, seed):
    (n,) = shape
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal(n, dtype=np.float32), "b": rng.standard_normal(n, dtype=np.float32)}


def reference(a, b):
    return (a.astype(np.float64) + b).astype(np.float32)


EXERCISE = Exercise(
    summary="out[i] = a[i] + b[i], one thread per element, with a bounds guard",
    kernel="vector_add",
    args=("a", "b", "out"),
    out="out",
    make_inputs=make_inputs,
    out_shape=lambda shape: shape,
    reference=reference,
    launch=lambda shape: (ceil_div(shape[0], THREADS), THREADS),
    shapes=[(1,), (63,), (65,), (1000,)],
    ranges=[(1, 2000)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(200, 2000)],  # the technique's shape: drawn fresh each run
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
