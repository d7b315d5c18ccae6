"""Exercise 01 -- vector add with a bounds guard. Reference solution."""

from numba import cuda


@cuda.jit
def vector_add(a, b, out):
    # a, b, out: (n,) float32. Launched as vector_add[ceil(n / 64), 64](a, b, out).
    i = cuda.grid(1)
    if i < out.size:  # the last block has threads past the end: they must not touch memory
        out[i] = a[i] + b[i]
