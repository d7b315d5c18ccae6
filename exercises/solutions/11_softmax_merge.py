"""Exercise 11 -- merging two partial softmax states. Reference solution."""

import math

from numba import cuda, float32

WARP = 32  # lanes per warp: a row's elements d = lane, lane + 32, ...
ROWS = 4  # rows per block (one warp each), fixed by the launch contract


@cuda.jit
def softmax_merge(m1, l1, acc1, m2, l2, acc2, out):
    # m1, l1, m2, l2: (R,) float32; acc1, acc2, out: (R, D) float32. A state (m, l, acc) is empty when m = -inf
    # (then l = 0 and acc = 0); the two states of a row are never both empty.
    # Launched as softmax_merge[ceil(R / ROWS), (WARP, ROWS)](...): warp y of block b owns row r = ROWS * b + y.
    r = cuda.blockIdx.x * ROWS + cuda.threadIdx.y
    if r >= out.shape[0]:
        return  # the whole warp: its row does not exist
    x1 = m1[r]
    x2 = m2[r]
    # Both states to the units of the common max: exp(x_i - m) <= 1 (no overflow, however far apart the maxima),
    # one factor is exactly 1 (so l >= 1), and an empty state's is exp(-inf) = 0.
    m = max(x1, x2)
    a1 = math.exp(x1 - m)
    a2 = math.exp(x2 - m)
    inv = float32(1.0) / (l1[r] * a1 + l2[r] * a2)
    w1 = a1 * inv  # the weight of each state's acc in out = acc / l, once per row
    w2 = a2 * inv
    for d in range(cuda.threadIdx.x, out.shape[1], WARP):  # lane x: d = x, x + 32, ... -- coalesced
        out[r, d] = w1 * acc1[r, d] + w2 * acc2[r, d]
