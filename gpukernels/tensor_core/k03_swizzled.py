"""Step 3 of the tensor-core ladder, ``swizzled``: step 2's kernel with XOR-swizzled shared tiles.

Shared memory serves a request in one pass only if its addresses fall in distinct banks (32 banks of 4 bytes, so
one pass moves 128 bytes). ``ldmatrix`` reads 8 rows of 16 bytes per pass -- the rows that lanes 0-7 (then 8-15,
...) point at -- so it runs at full speed only when those 8 rows cover all 32 banks, i.e. lie in 8 different
16-byte "columns" of a 128-byte line. In step 2's row-major tiles they do not: 8 consecutive rows of the B tile
(128 bytes each) all start in bank 0 -- one pass per row, an 8-way conflict -- and rows of the A tile (64 bytes)
alternate between two starting banks -- 4-way.

The fix moves data, not threads: the 16-byte chunk ``c`` of row ``r`` is stored at chunk ``c ^ f(r)``, where f
gives 8 consecutive rows 8 different values. A 16-byte chunk stays whole (ldmatrix's rows and the copies' stores
are still contiguous), every chunk of a row still lies in that row, and the XOR is its own inverse, so reading
back uses the same function. For the B tile (8 chunks per row) f(r) = r mod 8; for the A tile (4 chunks per row,
2 rows per 128 bytes) f(r) = (r / 2) mod 4, which with the row's parity picks 8 different 16-byte slots. Nothing
else changes: the two functions below replace step 2's ``a_at`` and ``b_at``.

Here the kernel is still bound by its two-byte global loads (4096^3 on an H200: 8.0 -> 7.7 ms); the swizzle pays
once the copies are cheap -- step 4's cp.async ring takes 0.81 ms on these tiles and 2.0 ms on step 2's
(benchmarks/tensor_core_variants.py, 2026-12-04).
"""

from __future__ import annotations

from numba import cuda

from .._launch import version
from ._common import check, tiled_launch
from .k02_ldmatrix import BK, BN, THREADS, make_ldmatrix_kernel


@cuda.jit(device=True, forceinline=True)
def swizzled_a(row, col):
    # A tile (rows of BK = 32 halves: 4 chunks of 8): chunk (col / 8) of row `row` is stored at chunk
    # (col / 8) ^ ((row / 2) % 4). Rows r..r+7 at one chunk -> 8 different 16-byte slots of 128-byte lines.
    return row * BK + ((((col >> 3) ^ (row >> 1)) & 3) << 3) + (col & 7)


def make_swizzled_b(bn: int):
    """The B tile's layout for rows of ``bn`` halves (bn / 8 chunks, a multiple of 8)."""

    @cuda.jit(device=True, forceinline=True)
    def swizzled_b(row, col):
        # chunk (col / 8) of row `row` is stored at chunk (col / 8) ^ (row % 8): rows r..r+7 at one chunk -> 8
        # different slots (a row is a whole number of 128-byte lines, so a slot is the chunk number mod 8)
        return row * bn + (((col >> 3) ^ (row & 7)) << 3) + (col & 7)

    return swizzled_b


swizzled_b = make_swizzled_b(BN)
swizzled_kernel = make_ldmatrix_kernel(swizzled_a, swizzled_b)


@version("tensor_core", check, kernels=[swizzled_kernel])
def swizzled(a, b, c):
    """ldmatrix on XOR-swizzled shared tiles: the 8 rows of each ldmatrix phase land in 8 different bank groups."""
    return tiled_launch(swizzled_kernel, a, b, c, THREADS)
