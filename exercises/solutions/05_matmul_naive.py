"""Exercise 05 -- matrix multiplication, one thread per output. Reference solution."""

from numba import cuda, float32


@cuda.jit
def matmul(a, b, c):
    # a: (M, K), b: (K, N), c: (M, N), float32.
    # Launched with block (16, 16) and grid (ceil(N / 16), ceil(M / 16)): x covers columns, y rows.
    j, i = cuda.grid(2)  # x -> column: a warp reads consecutive b[k, j] and shares a[i, k]
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc
