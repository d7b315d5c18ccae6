"""Grading spec of exercise 11 (the fields are described in gpukernels/grade/spec.py).

The inputs are real partial states: for each row and each half, a few dozen scores and values are drawn, and the
half's state is what a block that saw only those keys would keep (m, the max of its scores; l, the sum of
exp(s - m); acc, the sum of exp(s - m) * v). Merging two of them is then exactly the softmax over both halves'
keys (tests/test_grade_units.py checks this against a softmax of all the keys). Whatever the seed, the first rows
are the cases a merge gets wrong:

    row 0  both states seen keys, maxima a few units apart (forgetting to rescale, or rescaling the wrong way,
           is far off)
    row 1  state 1 empty: m1 = -inf, l1 = 0, acc1 = 0 -- a block whose keys were all masked (the result is state
           2's own softmax, never NaN)
    row 2  state 2 empty
    row 3  m1 more than 80 above m2; row 4 the other way round (exp(m1 - m2) overflows float32)
    row 5  both maxima above 90 (exp(m) of an unshifted maximum overflows)

and the other rows are drawn among those kinds (most of them ordinary), with now and then the two maxima equal.
Two states are never both empty: every query row sees at least one key, as under the attention lesson's causal
mask.
"""

import numpy as np

from gpukernels.grade.spec import (Coalesced, Exercise, MaxLoadsPerElement, MaxStoresPerElement, NoRaces, ceil_div,
                                   readme_hints)

WARP = 32
ROWS = 4  # rows (warps) per block
THREADS = (WARP, ROWS)  # the launch contract's block
MAX_KEYS = 48  # keys seen by one half of a row, at most

KINDS = ("normal", "empty1", "empty2", "far12", "far21", "big", "equal")
FIRST_ROWS = ("normal", "empty1", "empty2", "far12", "far21", "big")  # present whatever the seed
LATER_ROWS = {"normal": 0.5, "empty1": 0.1, "empty2": 0.1, "far12": 0.1, "far21": 0.1, "big": 0.05, "equal": 0.05}


def partial_state(scores, values):
    """(m, l, acc) of one block that saw keys with ``scores`` (n,) and ``values`` (n, D), in float64: the max, the
    sum of exp(s - m) and the sum of exp(s - m) * v. No keys, or only keys scored -inf (all masked): (-inf, 0,
    zeros) -- the empty state."""
    scores = np.asarray(scores, np.float64)
    values = np.asarray(values, np.float64)
    if scores.ndim != 1 or values.ndim != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError(f"partial_state: expected scores (n,) and values (n, D), got {scores.shape} and "
                         f"{values.shape}")
    if scores.size == 0 or scores.max() == -np.inf:  # exp(-inf - -inf) would be NaN
        return -np.inf, 0.0, np.zeros(values.shape[1])
    m = scores.max()
    p = np.exp(scores - m)
    return m, p.sum(), p @ values


def _maxima(kind, rng):
    """(m1, m2) for a row of ``kind`` (None: that state is empty)."""
    base = rng.uniform(-30.0, 30.0)
    gap = rng.uniform(1.0, 8.0) * rng.choice([-1.0, 1.0])
    if kind == "normal":
        return base, base + gap
    if kind == "equal":
        return base, base
    if kind == "empty1":
        return None, base
    if kind == "empty2":
        return base, None
    if kind in ("far12", "far21"):
        high = rng.uniform(-10.0, 30.0)
        low = high - rng.uniform(81.0, 120.0)
        return (high, low) if kind == "far12" else (low, high)
    if kind == "big":
        high = rng.uniform(95.0, 120.0)
        return high, high - rng.uniform(1.0, 5.0)
    raise ValueError(f"unknown row kind {kind!r}; choose from {', '.join(KINDS)}")


def row_kinds(rows, seed):
    """The kind of each row: FIRST_ROWS, then drawn with LATER_ROWS' weights."""
    rng = np.random.default_rng([seed, 11, 1])
    later = rng.choice(list(LATER_ROWS), size=max(0, rows - len(FIRST_ROWS)), p=list(LATER_ROWS.values()))
    return list(FIRST_ROWS[:rows]) + [str(k) for k in later]


def make_inputs(shape, seed):
    """Two partial states per row, float32: m1, l1 (R,), acc1 (R, D), and the same for state 2."""
    if (len(shape) != 2 or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in shape)
            or min(shape) < 1):
        raise ValueError(f"softmax_merge: shape must be (R, D), two ints >= 1; got {tuple(shape)}")
    rows, dim = (int(s) for s in shape)
    rng = np.random.default_rng([seed, 11])
    ms, ls, accs = np.empty((2, rows)), np.empty((2, rows)), np.empty((2, rows, dim))
    for r, kind in enumerate(row_kinds(rows, seed)):
        for half, top in enumerate(_maxima(kind, rng)):
            n = 0 if top is None else int(rng.integers(1, MAX_KEYS + 1))
            scores = rng.standard_normal(n) * rng.uniform(0.5, 4.0)
            scores += (0.0 if top is None else top) - (scores.max() if n else 0.0)  # the state's max is `top`
            ms[half, r], ls[half, r], accs[half, r] = partial_state(scores, rng.standard_normal((n, dim)))
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return {"m1": f32(ms[0]), "l1": f32(ls[0]), "acc1": f32(accs[0]),
            "m2": f32(ms[1]), "l2": f32(ls[1]), "acc2": f32(accs[1])}


def reference(m1, l1, acc1, m2, l2, acc2):
    """out = acc / l of the merged state, in float64: both states rescaled to the common max m = max(m1, m2) --
    l = l1 exp(m1 - m) + l2 exp(m2 - m), acc likewise -- an empty state (m = -inf) weighing exp(-inf) = 0."""
    m1, l1, acc1, m2, l2, acc2 = (np.asarray(a, np.float64) for a in (m1, l1, acc1, m2, l2, acc2))
    if acc1.ndim != 2 or acc2.shape != acc1.shape or m1.shape != (acc1.shape[0],) or not (
            m1.shape == l1.shape == m2.shape == l2.shape):
        raise ValueError(f"softmax_merge reference: expected m, l of shape (R,) and acc of shape (R, D), got "
                         f"{m1.shape}, {l1.shape}, {acc1.shape}, {m2.shape}, {l2.shape}, {acc2.shape}")
    both = np.isneginf(m1) & np.isneginf(m2)
    if both.any():
        raise ValueError(f"softmax_merge reference: row {int(np.argmax(both))} has two empty states (no key seen): "
                         "its softmax is undefined")
    m = np.maximum(m1, m2)
    a1, a2 = np.exp(m1 - m), np.exp(m2 - m)  # m finite: exp(-inf - m) = 0 for an empty state
    l = a1 * l1 + a2 * l2
    return (a1[:, None] * acc1 + a2[:, None] * acc2) / l[:, None]


def error_scale(m1, l1, acc1, m2, l2, acc2):
    """The magnitude of each output's float32 rounding error: the merge of |acc1| and |acc2|. The two weighted
    terms may cancel (an output near 0 from terms near +-1), and their own rounding remains."""
    return reference(m1, l1, np.abs(acc1), m2, l2, np.abs(acc2))


EXERCISE = Exercise(
    summary="merge two partial softmax states (m, l, acc) per row -- split-KV attention's last step -- a warp per row",
    kernel="softmax_merge",
    args=("m1", "l1", "acc1", "m2", "l2", "acc2", "out"),
    out="out",
    make_inputs=make_inputs,
    out_shape=lambda shape: tuple(shape),
    reference=reference,  # float64 of the float32 states
    error_scale=error_scale,
    launch=lambda shape: (ceil_div(shape[0], ROWS), THREADS),
    shapes=[(1, 1), (3, 33), (7, 80), (33, 128)],
    ranges=[(1, 66), (1, 160)],  # fresh shapes each run, besides the listed ones
    trace_ranges=[(8, 40), (32, 128)],  # the technique's shape: drawn fresh each run
    # rows start on 32-byte sectors and every lane has its d = x, x + 32, ... (idle lanes count as waste)
    trace_multiples=(1, 32),
    # a few float32 roundings and one exp per state: a correct kernel lands near 1e-7, a missing or wrong rescale
    # near 1
    tolerance=1e-5,
    technique=[
        Coalesced(("acc1", "acc2"), kinds=("load",)),
        Coalesced(("out",), kinds=("store",)),
        MaxLoadsPerElement("acc1", lambda shape: 1, why="read each element once"),
        MaxLoadsPerElement("acc2", lambda shape: 1, why="read each element once"),
        MaxStoresPerElement("out", 1, max_loads=0, why="write each output once, never read it back"),
        NoRaces(),
    ],
    points={"correctness": 5, "compiles": 2, "technique": 3},
    hints=readme_hints(__file__),
)
