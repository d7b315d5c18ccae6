"""Exercise 09 -- warp sums with shuffles. Reference solution."""

from numba import cuda, float32

FULL_MASK = 0xFFFFFFFF  # all 32 lanes take part in a shuffle


@cuda.jit
def warp_sum(x, out):
    # x: (n,) float32; out: (ceil(n / 32),) float32. Launched as warp_sum[ceil(n / 128), 128](x, out).
    i = cuda.grid(1)
    warp = i // 32
    v = x[i] if i < x.size else float32(0.0)  # lanes past the end add 0 but still shuffle
    delta = 16
    while delta > 0:  # butterfly down: after 5 steps lane 0 holds the sum of all 32 lanes
        v += cuda.shfl_down_sync(FULL_MASK, v, delta)
        delta //= 2
    if i % 32 == 0 and warp < out.size:
        out[warp] = v
