"""Grading spec of exercise 07 (the fields are described in gpukernels/grade/spec.py)."""

from gpukernels import softmax
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import Coalesced, Exercise, MaxLoadsPerElement, NoRaces, Speed, readme_hints

THREADS = 64


def make_inputs(shape, seed):
    """The lesson's inputs (outliers of +-1e4 and some -inf, at random), with the cases a softmax gets wrong
    always present, whatever the seed: row 0 holds only large negative values (a maximum that starts at 0
    makes every exp underflow: 0/0), row 1 holds +-1e4 (exp overflows without the maximum subtracted) and
    row 2 some -inf among finite values (exp(-inf) = 0, never nan)."""
    import numpy as np

    (x,) = softmax.make_inputs(shape, seed)
    rows, cols = x.shape
    rng = np.random.default_rng([seed, 7])
    x[0] = -1e4 - 100 * rng.random(cols, dtype=np.float32)
    if rows > 1:
        x[1] = rng.choice(np.array([-1e4, 1e4], dtype=np.float32), cols) + rng.standard_normal(cols, np.float32)
    if rows > 2 and cols > 1:
        x[2, rng.integers(0, cols, size=max(1, cols // 4))] = -np.inf
        x[2, rng.integers(0, cols)] = 1.0  # at least one finite value in the row
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
    ranges=[(1, 8), (1, 514)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(2, 6), (100, 400)],  # the technique's shape: drawn fresh each run
    trace_multiples=(1, 8),  # rows start on 32-byte sectors: coalescing without a ragged edge
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
