"""Exercise 03 -- block sum in shared memory. Read README.md, then: gpukernels grade 03"""

from numba import cuda, float32  # noqa: F401  (float32: the dtype of your shared array)

THREADS = 128  # threads per block, fixed by the launch contract


@cuda.jit
def block_sum(x, partial):
    # x: (n,) float32; partial: (ceil(n / 128),) float32. Launched as block_sum[ceil(n / 128), 128](x, partial).
    # TODO: a shared array of THREADS float32 values, one per thread of the block.
    # TODO: each thread stores its element of x there (0 past the end of x); wait for everyone.
    # TODO: tree reduction: s = 64, 32, ..., 1 -- threads t < s add buf[t + s] into buf[t]; wait after each step.
    # TODO: thread 0 writes buf[0] to partial[blockIdx.x].
    pass
