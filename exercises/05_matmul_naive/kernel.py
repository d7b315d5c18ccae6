"""Exercise 05 -- matrix multiplication, one thread per output. Read README.md, then: gpukernels grade 05"""

from numba import cuda, float32  # noqa: F401


@cuda.jit
def matmul(a, b, c):
    # a: (M, K), b: (K, N), c: (M, N), float32.
    # Launched with block (16, 16) and grid (ceil(N / 16), ceil(M / 16)): x covers columns, y rows.
    # TODO: this thread's row i and column j of c.
    # TODO: if inside c: acc = sum over k of a[i, k] * b[k, j] (in float32), then c[i, j] = acc.
    pass
