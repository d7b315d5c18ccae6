"""Exercise 07 -- row softmax, a block per row. Reference solution."""

import math

from numba import cuda, float32

THREADS = 64  # threads per block (per row), fixed by the launch contract


@cuda.jit
def softmax_rows(x, y):
    # x, y: (M, N) float32. Launched as softmax_rows[M, THREADS](x, y): block i handles row i.
    # Traffic per element: 3 loads of x (one per pass) and 1 store of y, all coalesced.
    buf = cuda.shared.array(THREADS, float32)
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = x.shape[1]

    m = float32(-math.inf)
    for j in range(t, n, THREADS):  # thread t: columns t, t + 64, ... -> a warp reads 32 consecutive floats
        m = max(m, x[row, j])
    buf[t] = m
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:  # tree reduction of the maximum
        if t < s:
            buf[t] = max(buf[t], buf[t + s])
        cuda.syncthreads()
        s //= 2
    row_max = buf[0]
    cuda.syncthreads()  # everyone has read buf[0] before it is overwritten below

    total = float32(0.0)
    for j in range(t, n, THREADS):
        total += math.exp(x[row, j] - row_max)
    buf[t] = total
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:  # tree reduction of the sum
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    total = buf[0]

    for j in range(t, n, THREADS):
        y[row, j] = math.exp(x[row, j] - row_max) / total
