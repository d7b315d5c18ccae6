"""What the attention steps share: the argument check (q, k, v, ``causal``, ``scale``), the largest head dimension the
kernels are sized for, and the (B, H, S, D) -> (B*H, S, D) view every kernel indexes."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._launch import LaunchError, called, check_array
from ..tensor_core._common import check_matrix

#: The largest head dimension D: the kernels keep a query row's D values in registers (fused_rows: 4 per lane) and
#: stage D-wide tiles in shared memory (tiled), both sized for at most this.
MAX_D = 128


def check(q, k, v, causal=False, scale=None):
    """``(q, k, v)`` as (B, H, Sq, D), (B, H, Sk, D) and (B, H, Sk, D) float32 arrays, ``causal`` a bool and ``scale``
    a finite number > 0 (None: 1/sqrt(D)); the result is (B, H, Sq, D) float32."""
    q = check_array("q", q, 4, "(B, H, Sq, D)")
    k = check_array("k", k, 4, "(B, H, Sk, D)")
    v = check_array("v", v, 4, "(B, H, Sk, D)")
    return (q, k, v), *check_shapes(q, k, v, causal, scale)


def check_shapes(q, k, v, causal, scale):
    """The checks of ``check`` past the arrays' dtype and rank: shapes that agree, D, Sk >= 1, ``causal``, ``scale``;
    returns (params, out_shape)."""
    b, h, sq, d = q.shape
    if tuple(k.shape[:2]) != (b, h):
        raise LaunchError(f"k must have q's batch and heads (B, H) = ({b}, {h}); got k.shape = (B, H, Sk, D) = "
                          f"{tuple(k.shape)}")
    if k.shape[3] != d:
        raise LaunchError(f"k must have q's head dimension D = {d} (q.shape = {tuple(q.shape)}); got k.shape = "
                          f"(B, H, Sk, D) = {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise LaunchError(f"v must have k's shape (B, H, Sk, D) = {tuple(k.shape)}, one row of values per key; got "
                          f"v.shape = {tuple(v.shape)}")
    if not 1 <= d <= MAX_D:
        raise LaunchError(f"the head dimension D (the last axis of q, k and v) must be between 1 and {MAX_D}; got "
                          f"D = {d} (q.shape = {tuple(q.shape)}): the kernels hold a row of D values in registers "
                          f"and shared memory sized for at most {MAX_D}")
    if k.shape[2] == 0:
        raise LaunchError(f"k and v must hold at least one key (Sk >= 1): a softmax over no keys is undefined; got "
                          f"k.shape = {tuple(k.shape)}")
    if not isinstance(causal, (bool, np.bool_)):
        raise LaunchError(f"causal must be True or False; got {causal!r} ({type(causal).__name__})")
    return {"causal": bool(causal), "scale": resolve_scale(scale, d)}, (b, h, sq, d)


def check_half(q, k, v, causal=False, scale=None):
    """``check`` for the tensor-core step: q, k and v float16 (the mma's inputs) and D a multiple of 16 from 16 to
    128 (the mma's k16 slices of a row); the result is still (B, H, Sq, D) float32."""
    arrays = [half_array(name, x, axes) for name, x, axes in
              (("q", q, "(B, H, Sq, D)"), ("k", k, "(B, H, Sk, D)"), ("v", v, "(B, H, Sk, D)"))]
    d = arrays[0].shape[3]
    if d % 16 or not 16 <= d <= MAX_D:
        raise LaunchError(f"{called('attention.mma')} runs float16 on the tensor cores, which need the head dimension "
                          f"D (the last axis of q, k and v) to be a multiple of 16 from 16 to {MAX_D}; got D = {d} "
                          f"(q.shape = {tuple(arrays[0].shape)}): the tensor cores take a row 16 dimensions at a time "
                          f"(use the float32 steps for other D)")
    return tuple(arrays), *check_shapes(*arrays, causal, scale)


def half_array(name: str, x: Any, axes: str) -> Any:
    """``x`` as a 4-D float16 array: a C-contiguous host array (a copy only when needed) or a device array (the
    tensor-core lesson's check, for four axes)."""
    # the step the user called, by name: a float32 k given to attention.optimized beside a float16 q named mma and
    # pipelined, steps the user never called
    return check_matrix(name, x, axes, (np.float16,), ndim=4,
                        purpose=f" for {called('attention.mma')} (tensor cores multiply float16)",
                        instead=", or use the float32 steps (naive, fused_rows, tiled, optimized)")


def resolve_scale(scale: Any, d: int) -> float:
    """``scale`` as a float: None gives 1/sqrt(D), the scaling that keeps a score of unit-variance q and k at unit
    variance; anything else must be a finite real number > 0."""
    default = 1.0 / math.sqrt(d)
    if scale is None:
        return default
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise LaunchError(f"scale must be a finite number > 0, or None for 1/sqrt(D) = {default:.6g}; got "
                          f"{scale!r} ({type(scale).__name__})")
    value = float(scale)
    if not math.isfinite(value) or value <= 0:
        raise LaunchError(f"scale must be a finite number > 0, or None for 1/sqrt(D) = {default:.6g}; got {value!r}")
    return value


def heads(x: Any) -> Any:
    """(B, H, S, D) viewed as (B*H, S, D), no copy (every array here is C-contiguous): the kernels index one head
    of one batch entry by a single number ``bh``."""
    b, h, s, d = x.shape
    return x.reshape(b * h, s, d)
