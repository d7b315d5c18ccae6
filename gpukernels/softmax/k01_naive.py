"""Step 1 of the softmax lesson, ``naive``: one thread per row, three serial passes over it.

Every element is read from global memory 3 times and written once: 16 bytes per element. Worse, the 32 lanes of a
warp work on 32 *different rows*, so each load touches 32 sectors N*4 bytes apart (uncoalesced), and only M threads
exist -- a 4096-row matrix keeps 4096 threads busy on a GPU that holds 270 000.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .._launch import Launch, version
from ._common import _check

NAIVE_THREADS = 128


@cuda.jit
def naive_kernel(x, y):
    # Thread i owns row i and makes three passes over it. Traffic per element: 3 loads + 1 store.
    i = cuda.grid(1)
    m, n = x.shape
    if i < m:
        row_max = float32(-math.inf)
        for j in range(n):  # pass 1: max (reads the row)
            row_max = max(row_max, x[i, j])
        total = float32(0.0)
        for j in range(n):  # pass 2: sum of exponentials (reads the row again)
            total += math.exp(x[i, j] - row_max)
        for j in range(n):  # pass 3: normalise (reads it a third time, writes the output)
            y[i, j] = math.exp(x[i, j] - row_max) / total


@version("softmax", _check, kernels=[naive_kernel])
def naive(x, y):
    """One thread per row, three serial passes: reads each element 3 times, lanes of a warp on different rows."""
    m = x.shape[0]
    return [Launch(naive_kernel, (-(-m // NAIVE_THREADS),), (NAIVE_THREADS,), (x, y))]
