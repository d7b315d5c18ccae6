"""Exercise 01 -- vector add with a bounds guard. Read README.md, then: gpukernels grade 01"""

from numba import cuda


@cuda.jit
def vector_add(a, b, out):
    # a, b, out: (n,) float32. Launched as vector_add[ceil(n / 64), 64](a, b, out).
    # TODO: compute this thread's global index.
    # TODO: if it is inside the arrays, write out[i] = a[i] + b[i].
    pass
