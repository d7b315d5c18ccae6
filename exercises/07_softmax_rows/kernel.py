"""Exercise 07 -- row softmax, a block per row. Read README.md, then: gpukernels grade 07"""

import math  # noqa: F401

from numba import cuda, float32  # noqa: F401

THREADS = 64  # threads per block (per row), fixed by the launch contract


@cuda.jit
def softmax_rows(x, y):
    # x, y: (M, N) float32. Launched as softmax_rows[M, THREADS](x, y): block i handles row i.
    # TODO: a shared array of THREADS values for the reductions.
    # TODO: pass 1: this thread's maximum over columns t, t + THREADS, ...; reduce to the row maximum.
    # TODO: pass 2: this thread's sum of exp(x - row_max); reduce to the row sum.
    # TODO: pass 3: write y = exp(x - row_max) / row_sum.
    pass
