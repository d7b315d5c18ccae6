"""Exercise 03 -- block sum in shared memory. Reference solution."""

from numba import cuda, float32

THREADS = 128  # threads per block, fixed by the launch contract


@cuda.jit
def block_sum(x, partial):
    # x: (n,) float32; partial: (ceil(n / 128),) float32. Launched as block_sum[ceil(n / 128), 128](x, partial).
    buf = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else float32(0.0)  # one global load per element; 0 past the end
    cuda.syncthreads()  # every element is in buf before anyone adds
    s = THREADS // 2
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()  # outside the if: every thread of the block must reach it
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = buf[0]
