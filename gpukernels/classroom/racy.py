"""Deliberately broken kernels for the race view: a lesson kernel with one barrier removed.

Each is a copy of the lesson's kernel, line for line, except that the barrier named in ``BROKEN[...].missing`` is
gone -- so the tracer's race report names lines of this file, and the diff against the lesson's file is that
one line. They are teaching material, never used for results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import cuda, float32

from .._launch import ceil_div
from ..matmul.k03_tiled import TILE


@cuda.jit
def tiled_no_first_barrier_kernel(a, b, c):
    # matmul's tiled_kernel without the barrier after the tile loads: threads start multiplying while other
    # threads of the block are still writing the tile -- a read-after-write race on a_tile and b_tile.
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, kdim = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, kdim, TILE):
        a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < kdim else float32(0.0)
        b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < kdim and col < n else float32(0.0)
        # (the cuda.syncthreads() that waits for the whole tile is missing here)
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc


def tiled_no_first_barrier(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Run the broken tiled kernel with tiled's launch configuration (host arrays in, C out)."""
    m, n = a.shape[0], b.shape[1]
    c = np.zeros((m, n), np.float32)
    tiled_no_first_barrier_kernel[(ceil_div(n, TILE), ceil_div(m, TILE)), (TILE, TILE)](a, b, c)
    return c


@dataclass(frozen=True)
class Broken:
    """A lesson version with one barrier removed: ``run(*inputs)`` launches it; ``of`` is the version it breaks."""

    name: str
    of: str
    missing: str
    run: Callable


#: lesson -> its broken variant (a lesson without one shows no race view)
BROKEN = {
    "matmul": Broken("tiled_no_first_barrier", "tiled", "the cuda.syncthreads() after the tile loads",
                     tiled_no_first_barrier),
}
