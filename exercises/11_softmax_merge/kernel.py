"""Exercise 11 -- merging two partial softmax states. Read README.md, then: gpukernels grade 11"""

import math  # noqa: F401

from numba import cuda, float32  # noqa: F401

WARP = 32  # lanes per warp: a row's elements d = lane, lane + 32, ...
ROWS = 4  # rows per block (one warp each), fixed by the launch contract


@cuda.jit
def softmax_merge(m1, l1, acc1, m2, l2, acc2, out):
    # m1, l1, m2, l2: (R,) float32; acc1, acc2, out: (R, D) float32. A state (m, l, acc) is empty when m = -inf
    # (then l = 0 and acc = 0); the two states of a row are never both empty.
    # Launched as softmax_merge[ceil(R / ROWS), (WARP, ROWS)](...): warp y of block b owns row r = ROWS * b + y.
    # TODO: this warp's row r; a warp past the last row returns.
    # TODO: the common max m = max(m1[r], m2[r]) and each state's factor exp(m_i - m) (at most 1; 0 when empty).
    # TODO: the merged sum l = l1 * factor1 + l2 * factor2.
    # TODO: for d = lane, lane + WARP, ...: out[r, d] = (acc1[r, d] * factor1 + acc2[r, d] * factor2) / l.
    pass
