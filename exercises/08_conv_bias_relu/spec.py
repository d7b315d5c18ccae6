"""Grading spec of exercise 08 (the fields are described in gpukernels/grade/spec.py).

A shape is (N, C, H, W, K, R, S, padding)."""

from gpukernels import cbr
from gpukernels.check import TOLERANCE
from gpukernels.grade.spec import (Coalesced, Exercise, MaxStoresPerElement, NoRaces, Speed, ceil_div,
                                   readme_hints)

THREADS = 128


def make_inputs(shape, seed):
    x, w, b = cbr.make_inputs(shape[:7], seed)  # the lesson's inputs: outliers, and biases that make ReLU work
    return {"x": x, "w": w, "b": b}


def out_shape(shape):
    n, c, h, wd, k, r, s, p = shape
    return cbr.out_shape((n, c, h, wd), (k, c, r, s), p)


def constrain(shape):
    """A drawn shape made valid: the filter fits the padded image."""
    n, c, h, wd, k, r, s, p = shape
    return (n, c, h, wd, k, min(r, h + 2 * p), min(s, wd + 2 * p), p)


def launch(shape):
    size = 1
    for d in out_shape(shape):
        size *= d
    return ceil_div(size, THREADS), THREADS


EXERCISE = Exercise(
    summary="y = relu(conv2d(x, w, padding) + b), one thread per output, bias and ReLU before the one store",
    kernel="conv_bias_relu",
    args=("x", "w", "b", "y", "padding"),
    out="y",
    make_inputs=make_inputs,
    out_shape=out_shape,
    reference=cbr.reference,
    launch=launch,
    params=lambda shape: {"padding": shape[7]},
    shapes=[(1, 1, 1, 1, 1, 1, 1, 0), (1, 3, 5, 7, 2, 3, 3, 1), (2, 2, 6, 9, 3, 3, 3, 1), (1, 2, 7, 5, 3, 5, 5, 2)],
    ranges=[(1, 2), (1, 4), (1, 14), (1, 18), (1, 6), (1, 5), (1, 5), (0, 2)],  # fresh shapes each run, besides the listed ones
    # past the ranges: channels and filter past theirs, the image just past (the simulator's time grows with all)
    beyond_ranges=[(3, 3), (5, 5), (15, 16), (19, 20), (7, 7), (6, 7), (6, 6), (3, 3)],
    constrain=constrain,
    trace_ranges=[(1, 2), (1, 3), (6, 12), (6, 12), (2, 5), (3, 3), (3, 3), (1, 1)],  # the technique's shape: drawn fresh each run
    tolerance=TOLERANCE["cbr"],
    technique=[
        MaxStoresPerElement("y", 1, max_loads=0, why="fuse: keep the sum in a register, store y once"),
        Coalesced(("y",), kinds=("store",)),
        NoRaces(),
    ],
    # A pointwise (1x1) convolution: little arithmetic per output, so the two passes fusion saves show.
    speed=Speed((16, 8, 56, 56, 64, 1, 1, 0), cbr.VERSIONS["naive"], min_speedup=1.1),
    hints=readme_hints(__file__),
)
