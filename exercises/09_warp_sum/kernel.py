"""Exercise 09 -- warp sums with shuffles. Read README.md, then: gpukernels grade 09"""

from numba import cuda, float32  # noqa: F401

FULL_MASK = 0xFFFFFFFF  # all 32 lanes take part in a shuffle


@cuda.jit
def warp_sum(x, out):
    # x: (n,) float32; out: (ceil(n / 32),) float32. Launched as warp_sum[ceil(n / 128), 128](x, out).
    # TODO: this thread's global index, its warp and its lane.
    # TODO: load its element of x (0 past the end).
    # TODO: five shuffle-down steps (delta = 16, 8, 4, 2, 1), taken by all 32 lanes.
    # TODO: lane 0 stores the warp's sum in out[warp] (if warp < out.size).
    pass
