"""Grading spec of exercise 03 (the fields are described in gpukernels/grade/spec.py)."""

import numpy as np

from gpukernels.grade.spec import Exercise, MaxLoadsPerElement, NoRaces, UsesShared, ceil_div, readme_hints

THREADS = 128


def make_inputs(shape, seed):
    (n,) = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.float32)
    x[rng.integers(0, n, size=max(1, n // 50))] *= 100.0  # outliers: a lost element cannot hide
    return {"x": x}


def reference(x):
    blocks = ceil_div(x.size, THREADS)
    padded = np.zeros(blocks * THREADS)
    padded[: x.size] = x
    return padded.reshape(blocks, THREADS).sum(axis=1).astype(np.float32)


EXERCISE = Exercise(
    summary="partial[b] = sum of block b's 128 elements, a tree reduction in shared memory",
    kernel="block_sum",
    args=("x", "partial"),
    out="partial",
    make_inputs=make_inputs,
    out_shape=lambda shape: (ceil_div(shape[0], THREADS),),
    reference=reference,
    launch=lambda shape: (ceil_div(shape[0], THREADS), THREADS),
    shapes=[(1,), (127,), (129,), (1000,)],
    tolerance=1e-5,
    technique=[MaxLoadsPerElement("x", lambda shape: 1), UsesShared(), NoRaces()],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
