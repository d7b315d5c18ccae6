"""Exercise 08 -- fused convolution + bias + ReLU. Reference solution."""

from numba import cuda, float32


@cuda.jit
def conv_bias_relu(x, w, b, y, padding):
    # x: (N, C, H, W)  w: (K, C, R, S)  b: (K,)  y: (N, K, Ho, Wo), float32; padding: int.
    # Launched as conv_bias_relu[ceil(y.size / 128), 128](x, w, b, y, padding): one thread per output.
    idx = cuda.grid(1)
    if idx < y.size:
        n_, k_, ho, wo = y.shape
        j = idx % wo  # consecutive threads -> consecutive j: coalesced stores of y
        i = (idx // wo) % ho
        k = (idx // (wo * ho)) % k_
        n = idx // (wo * ho * k_)
        c_, h, wd = x.shape[1], x.shape[2], x.shape[3]
        acc = b[k]  # the bias, in a register
        for c in range(c_):
            for r in range(w.shape[2]):
                hi = i + r - padding
                if 0 <= hi < h:  # rows outside x are the zero padding: skip them
                    for s in range(w.shape[3]):
                        wi = j + s - padding
                        if 0 <= wi < wd:
                            acc += x[n, c, hi, wi] * w[k, c, r, s]
        y[n, k, i, j] = max(acc, float32(0.0))  # ReLU in the register, then the only store of y
