"""Exercise 02 -- matrix add with a 2D grid. Reference solution."""

from numba import cuda


@cuda.jit
def matrix_add(a, b, out):
    # a, b, out: (M, N) float32. Launched with block (16, 16) and grid (ceil(N / 16), ceil(M / 16)).
    j, i = cuda.grid(2)  # x -> column j: consecutive lanes read consecutive addresses of a row
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a[i, j] + b[i, j]
