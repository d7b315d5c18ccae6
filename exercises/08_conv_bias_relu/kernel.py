"""Exercise 08 -- fused convolution + bias + ReLU. Read README.md, then: gpukernels grade 08"""

from numba import cuda, float32  # noqa: F401


@cuda.jit
def conv_bias_relu(x, w, b, y, padding):
    # x: (N, C, H, W)  w: (K, C, R, S)  b: (K,)  y: (N, K, Ho, Wo), float32; padding: int.
    # Launched as conv_bias_relu[ceil(y.size / 128), 128](x, w, b, y, padding): one thread per output.
    # TODO: this thread's flat index; return (do nothing) if it is past the end of y.
    # TODO: unflatten it into (n, k, i, j).
    # TODO: acc = b[k] + sum over c, r, s of x[n, c, i + r - padding, j + s - padding] * w[k, c, r, s],
    #       skipping taps outside x (zero padding).
    # TODO: store max(acc, 0) -- once.
    pass
