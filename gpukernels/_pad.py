"""Padding a matrix whose rows are not 16-byte aligned, so that the fast kernels can read it 16 bytes at a time.

A 16-byte load (``load4``) or a 16-byte ``cp.async`` needs every row of A and B to start on a 16-byte boundary:
the data does, and a row is a whole number of 16 bytes long (K and N multiples of 4 floats, or of 8 halves). A
product on other rows takes the slow path -- 4-byte loads, four times as many instructions. A dispatcher may
instead copy A and B once into arrays whose rows are rounded up, the extra columns (and, for B, rows) zero -- a zero
adds nothing to a product -- and run the aligned kernel on the copies. Only the matrices that need it are copied:
A when K is not a whole number of 16 bytes (or its data starts off a boundary), B when K or N is not. The copy
reads and writes each copied element once: at 4095^3 in float16, 134 MB, ~35 us at the H200's ~4 TB/s, against
~0.7 ms of product. C is not padded: the kernels store each element of C under its own bounds check (C's own
shape), so what the padded columns of B produce is never stored.

Used by ``tensor_core.optimized`` (float16, rows rounded to 8): there the alternative is the slow path of loads and
stores. The matmul lesson's float32 kernels were tried on such copies and measured slower or no faster than on the
rows as they are (H200, benchmarks/NOTES.md), so its dispatcher does not pad.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ._intrinsics import address
from ._launch import Launch, ceil_div, is_device_array

THREADS = 256
MAX_ROWS = 65535  # blocks along y (the grid's limit); more rows are taken in strides


@cuda.jit
def pad_kernel(src, dst):
    # dst[i, j] = src[i, j] where src has an element, 0 elsewhere: a block per row (in strides of gridDim.y rows),
    # consecutive threads on consecutive columns. One kernel for any dtype (Numba compiles one per signature).
    rows, cols = src.shape
    for i in range(cuda.blockIdx.y, dst.shape[0], cuda.gridDim.y):
        for j in range(cuda.blockIdx.x * THREADS + cuda.threadIdx.x, dst.shape[1], cuda.gridDim.x * THREADS):
            if i < rows and j < cols:
                dst[i, j] = src[i, j]
            else:
                dst[i, j] = 0


def round_up(n: int, multiple: int) -> int:
    return ceil_div(n, multiple) * multiple


def padded(x, rows: int, cols: int, like) -> tuple:
    """(a zero-padded rows x cols copy of ``x``, of its dtype, and the launch that fills it); on the device when
    ``like`` is a device array (a plan made for host arrays gets a host array of the same shape)."""
    out = (cuda.device_array if is_device_array(like) else np.empty)((rows, cols), x.dtype)
    grid = (min(ceil_div(cols, THREADS), 64), min(rows, MAX_ROWS))
    return out, Launch(pad_kernel, grid, (THREADS,), (x, out))


def needs_copy(x, rows: int, cols: int) -> bool:
    """Whether ``x`` must be copied to be read as a rows x cols matrix of 16-byte rows: its shape differs, or its
    data does not start on a 16-byte boundary."""
    return tuple(x.shape) != (rows, cols) or address(x) % 16 != 0


def pad_operands(a, b, c, multiple: int) -> tuple:
    """A (M, K) and B (K, N) as arrays with K and N rounded up to ``multiple`` elements and their data 16-byte
    aligned: (a, b, launches), copying only the ones that are not already so."""
    (m, k), n = a.shape, b.shape[1]
    kp, np_ = round_up(k, multiple), round_up(n, multiple)
    launches = []
    if needs_copy(a, m, kp):
        a, la = padded(a, m, kp, c)
        launches.append(la)
    if needs_copy(b, kp, np_):
        b, lb = padded(b, kp, np_, c)
        launches.append(lb)
    return a, b, launches

