"""Grading spec of exercise 09 (the fields are described in gpukernels/grade/spec.py)."""

import numpy as np

from gpukernels.grade.spec import Exercise, MaxLoadsPerElement, NoRaces, ceil_div, readme_hints

THREADS = 128
WARP = 32


def make_inputs(shape, seed):
    (n,) = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.float32)
    x[rng.integers(0, n, size=max(1, n // 50))] *= 100.0  # outliers: a lost element cannot hide
    return {"x": x}


def reference(x):
    warps = ceil_div(x.size, WARP)
    padded = np.zeros(warps * WARP)
    padded[: x.size] = x
    return padded.reshape(warps, WARP).sum(axis=1).astype(np.float32)


EXERCISE = Exercise(
    summary="out[w] = sum of warp w's 32 elements, with shfl_down_sync (no shared memory, no barrier)",
    kernel="warp_sum",
    args=("x", "out"),
    out="out",
    make_inputs=make_inputs,
    out_shape=lambda shape: (ceil_div(shape[0], WARP),),
    reference=reference,
    launch=lambda shape: (ceil_div(shape[0], THREADS), THREADS),
    shapes=[(1,), (33,), (100,), (1000,)],
    tolerance=1e-5,
    technique=[MaxLoadsPerElement("x", lambda shape: 1), NoRaces()],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
