"""What the CBR steps share: the argument check, the output shape, and the result of a zero-size problem."""

from __future__ import annotations

import math

import numpy as np

from .._launch import LaunchError, check_array


#: The most output elements a CBR launcher takes: the largest count an int32 index, or a grid's x, can number.
MAX_OUT_ELEMENTS = 2**31 - 1


def out_shape(x_shape, w_shape, padding: int = 1) -> tuple:
    n, _, h, wd = x_shape
    k, _, r, s = w_shape
    return (n, k, h + 2 * padding - r + 1, wd + 2 * padding - s + 1)




def _check(x, w, b, padding=1):
    x = check_array("x", x, 4, "(N, C, H, W)")
    w = check_array("w", w, 4, "(K, C, R, S)")
    b = check_array("b", b, 1, "(K,)")
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)):
        raise LaunchError(f"padding must be a non-negative int; got {padding!r}")
    padding = int(padding)
    if padding < 0:
        raise LaunchError(f"padding must be >= 0; got {padding}")
    n, c, h, wd = x.shape
    k, cw, r, s = w.shape
    if cw != c:
        raise LaunchError(
            f"channel mismatch: x has C = {c} channels (x.shape = {tuple(x.shape)}) but w expects "
            f"C = {cw} (w.shape = (K, C, R, S) = {tuple(w.shape)})"
        )
    if r < 1 or s < 1:  # an empty filter: no output size follows from it (C = 0 is an empty sum; R = 0 is not)
        raise LaunchError(f"w must have R, S >= 1 (w.shape = (K, C, R, S)); got (R, S) = ({r}, {s})")
    if b.shape[0] != k:
        raise LaunchError(f"b must have one value per output channel, shape ({k},); got shape {tuple(b.shape)}")
    if r > h + 2 * padding or s > wd + 2 * padding:
        raise LaunchError(
            f"the kernel (R, S) = ({r}, {s}) is larger than the padded input (H + 2p, W + 2p) = "
            f"({h + 2 * padding}, {wd + 2 * padding}); use a smaller kernel or more padding"
        )
    shape = out_shape(x.shape, w.shape, padding)
    if math.prod(shape) > MAX_OUT_ELEMENTS:  # before anything is allocated: NumPy's "array is too big" names nothing
        raise LaunchError(
            f"padding = {padding} makes the output (N, K, H + 2p - R + 1, W + 2p - S + 1) = {shape}, "
            f"{math.prod(shape):.3g} elements, more than the 2**31 - 1 the launchers handle; use a smaller padding "
            f"(beyond max(R, S) - 1 = {max(r, s) - 1} it only adds outputs that read nothing of x)"
        )
    return (x, w, b), {"padding": padding}, shape


def _empty(x, w, b, shape, padding=1):
    # A zero-size dimension. With no input channels (C = 0) the convolution is an empty sum, so y = relu(b).
    y = np.zeros(shape, dtype=np.float32)
    if x.shape[1] == 0 and y.size:
        y[...] = np.maximum(np.asarray(b, np.float32), 0)[None, :, None, None]
    return y
