"""Padding a matrix whose rows are not 16-byte aligned, so that the fast steps can copy it with ``cp.async``.

A 16-byte ``cp.async`` needs every row of A and B to start on a 16-byte boundary: K and N multiples of 8 halves.
Other shapes take the slow path of steps 4-6 (loads and stores, ~0.3x cuBLAS at 4095 x 4097 x 4093 on an H200).
The dispatcher instead copies each matrix once into an array whose rows are rounded up to 8 halves, the extra
columns (and, for B, rows) zero -- a zero adds nothing to a product -- and runs the aligned kernel on the copies.
The copy reads and writes 2 (MK + KN) halves, 4 (MK + KN) bytes: at 4095^3, 134 MB, ~35 us at the H200's ~4 TB/s,
against ~0.3 ms of product. C is not padded: the kernels store each element of C under its own bounds check.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .._launch import Launch, ceil_div, is_device_array

THREADS = 256
MAX_ROWS = 65535  # blocks along y (the grid's limit); more rows are taken in strides


@cuda.jit
def pad_kernel(src, dst):
    # dst[i, j] = src[i, j] where src has an element, 0 elsewhere: a block per row (in strides of gridDim.y rows),
    # consecutive threads on consecutive columns
    rows, cols = src.shape
    for i in range(cuda.blockIdx.y, dst.shape[0], cuda.gridDim.y):
        for j in range(cuda.blockIdx.x * THREADS + cuda.threadIdx.x, dst.shape[1], cuda.gridDim.x * THREADS):
            dst[i, j] = src[i, j] if i < rows and j < cols else np.float16(0)


def round8(n: int) -> int:
    return ceil_div(n, 8) * 8


def padded(x, rows: int, cols: int, like) -> tuple:
    """(a zero-padded rows x cols float16 copy of ``x``, the launch that fills it); on the device when ``like`` is a
    device array (a plan made for host arrays gets a host array of the same shape)."""
    out = (cuda.device_array if is_device_array(like) else np.empty)((rows, cols), np.float16)
    grid = (min(ceil_div(cols, THREADS), 64), min(rows, MAX_ROWS))
    return out, Launch(pad_kernel, grid, (THREADS,), (x, out))


def pad_operands(a, b, c) -> tuple:
    """A (M, K) and B (K, N) padded to K8 = K rounded up to 8 and N8 likewise: (a8, b8, launches)."""
    (m, k), n = a.shape, b.shape[1]
    a8, la = padded(a, m, round8(k), c)
    b8, lb = padded(b, round8(k), round8(n), c)
    return a8, b8, [la, lb]
