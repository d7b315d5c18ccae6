"""Exercise 02 -- matrix add with a 2D grid. Read README.md, then: gpukernels grade 02"""

from numba import cuda


@cuda.jit
def matrix_add(a, b, out):
    # a, b, out: (M, N) float32. Launched with block (16, 16) and grid (ceil(N / 16), ceil(M / 16)):
    # x covers the columns, y the rows.
    # TODO: find this thread's row i and column j.
    # TODO: if (i, j) is inside the matrix, write out[i, j] = a[i, j] + b[i, j].
    pass
