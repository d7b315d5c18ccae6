"""Step 2 of the matmul ladder, ``coalesced``.

The same arithmetic with threadIdx.x mapped to the *column*: a warp now reads 32 consecutive floats of B (one
128-byte line) and all lanes read the same A element (a broadcast).
"""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import check
from .k01_naive import NAIVE_BLOCK

@cuda.jit
def coalesced_kernel(a, b, c):
    # Same loads as naive, but lanes now differ in the column j: b[k, j..j+31] is one 128-byte line,
    # a[i, k] is the same address for the whole warp (one broadcast), and the store c[i, j..j+31] is one line.
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@version("matmul", check, kernels=[coalesced_kernel])
def coalesced(a, b, c):
    """Coalescing: threadIdx.x walks along a row of C, so a warp's loads of B and stores of C are contiguous."""
    m, n = c.shape
    grid = (ceil_div(n, NAIVE_BLOCK[0]), ceil_div(m, NAIVE_BLOCK[1]))
    return [Launch(coalesced_kernel, grid, NAIVE_BLOCK, (a, b, c))]

