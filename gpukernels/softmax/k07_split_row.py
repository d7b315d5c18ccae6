"""Step 7 of the softmax lesson, ``split_row``: several blocks per row, for few long rows.

At 1 x 2^20 a block per row runs on one SM of 132, however fast that block is. Here each row is cut into pieces,
one block each: a first kernel reduces each piece to a (max, sum) pair with the online update of ``online`` and the
warp butterflies of ``block_row``, into a workspace of 8 bytes per piece; a second kernel combines a row's pairs
(sum_c s_c * exp(m_c - max_c m_c)) and normalises its piece. x is read twice, the second time from L2 when it fits
(the suite's few-long-rows shapes are 1 to 8 MB): DRAM sees about 8 bytes per element. ``optimized`` takes this step
when there are fewer rows than SMs and the rows are too long to keep on chip, or long enough and few enough that one
block per row would take longer than the two launches (``use_split_row``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from .._launch import Launch, ceil_div, is_device_array, sm_count, version
from ._common import WARP, _check
from .k02_block_row import warp_max, warp_sum
from .k03_online import online_update, rebase
from .k04_registers import MAX_CACHED

SPLIT_THREADS = 512  # threads per block
SPLIT_WARPS = SPLIT_THREADS // WARP
SPLIT_MIN_CHUNK = SPLIT_THREADS * 8  # a block's piece of a row: at least 8 values per thread
SPLIT_BLOCKS_PER_SM = 4  # the pieces per row aim at this many blocks per SM in all


@cuda.jit(device=True, forceinline=True)
def _block_reduce(v, scratch, is_max):
    # All SPLIT_THREADS threads: the warp butterflies `warp_max` / `warp_sum`, then warp 0's lanes reduce the
    # SPLIT_WARPS warp results left in shared memory, and every thread reads the block's result back.
    lane, warp = cuda.threadIdx.x & (WARP - 1), cuda.threadIdx.x >> 5
    v = warp_max(v) if is_max else warp_sum(v)
    if lane == 0:
        scratch[warp] = v
    cuda.syncthreads()
    v = scratch[lane] if lane < SPLIT_WARPS else (float32(-math.inf) if is_max else float32(0.0))
    v = warp_max(v) if is_max else warp_sum(v)
    cuda.syncthreads()  # scratch is reused by the next reduction
    return v


@cuda.jit
def split_partial_kernel(x, part, chunk):
    # Block (i, c) reads piece c of row i (values c*chunk ... (c+1)*chunk - 1) once, keeping a running max m and
    # a running sum s of exp(x - m) per thread (online, as in step 3); the block's (max, sum) goes to part[i, c].
    # Traffic: one load per element, 8 bytes per piece stored.
    scratch = cuda.shared.array(WARP, float32)
    i, c = cuda.blockIdx.x, cuda.blockIdx.y  # rows on x: grid.y stops at 65535, grid.x at 2^31 - 1
    n = x.shape[1]
    m = float32(-math.inf)
    s = float32(0.0)
    for j in range(c * chunk + cuda.threadIdx.x, min((c + 1) * chunk, n), SPLIT_THREADS):
        m, s = online_update(m, s, x[i, j])
    piece_max = _block_reduce(m, scratch, True)
    piece_sum = _block_reduce(rebase(m, s, piece_max), scratch, False)
    if cuda.threadIdx.x == 0:
        part[i, c, 0] = piece_max
        part[i, c, 1] = piece_sum


@cuda.jit
def split_normalize_kernel(x, part, y, chunk):
    # Block (i, c) combines row i's pieces (at most SPLIT_THREADS of them, one per thread) into the row's max and
    # sum, then writes piece c of y. It reads the piece of x a second time: from L2 when x fits there (the suite's
    # few-long-rows shapes are 1 to 8 MB), so DRAM sees ~8 bytes per element.
    scratch = cuda.shared.array(WARP, float32)
    i, c = cuda.blockIdx.x, cuda.blockIdx.y
    t = cuda.threadIdx.x
    n = x.shape[1]
    pieces = part.shape[1]
    m = part[i, t, 0] if t < pieces else float32(-math.inf)
    s = part[i, t, 1] if t < pieces else float32(0.0)
    row_max = _block_reduce(m, scratch, True)
    inv = float32(1.0) / _block_reduce(rebase(m, s, row_max), scratch, False)
    for j in range(c * chunk + t, min((c + 1) * chunk, n), SPLIT_THREADS):
        y[i, j] = math.exp(x[i, j] - row_max) * inv


def split_pieces(m: int, n: int, sms: int | None = None) -> int:
    """Pieces per row: enough blocks for SPLIT_BLOCKS_PER_SM per SM, each piece >= SPLIT_MIN_CHUNK values, and at
    most SPLIT_THREADS (one per thread of the combining block)."""
    sms = sms or sm_count()
    return max(1, min(ceil_div(sms * SPLIT_BLOCKS_PER_SM, m), n // SPLIT_MIN_CHUNK, SPLIT_THREADS))


def split_row_launches(x, y, pieces: int | None = None) -> list[Launch]:
    m, n = x.shape
    pieces = pieces or split_pieces(m, n)
    chunk = ceil_div(n, pieces)
    # The workspace: (max, sum) per piece, 8 bytes each. A plan made for host arrays (`Version.launches` in a
    # process that only compiles or reports, with no GPU) gets a host array of the same shape.
    part = (cuda.device_array if is_device_array(x) else np.empty)((m, pieces, 2), np.float32)
    grid = (m, pieces)  # rows on x (up to 2^31 - 1 of them), at most SPLIT_THREADS pieces on y (65535 at most)
    return [Launch(split_partial_kernel, grid, (SPLIT_THREADS,), (x, part, chunk)),
            Launch(split_normalize_kernel, grid, (SPLIT_THREADS,), (x, part, y, chunk))]


# A row that fits on chip (``registers``) is split only from SPLIT_MIN_ROW values on, and only while its rows would
# keep fewer than 1 / SPLIT_ROWS_SMS of the SMs busy. Measured on the H200 (benchmarks/NOTES.md): one block streams
# its row at ~15 GB/s -- 8192 values in 3.6 us, 16384 in 5.8, 32768 in 10.1 -- while split_row's two launches cost
# ~8 us however short the row (1 x 8192: 7.8 us, 0.76x torch); and at 64 rows of 32768 the blocks share the memory
# system well enough (0.0136 ms) to beat splitting (0.0164), at 16 rows not (0.0116 against 0.0109).
SPLIT_MIN_ROW = 24576
SPLIT_ROWS_SMS = 4


def use_split_row(m: int, n: int, sms: int | None = None) -> bool:
    """``optimized``'s rule: split rows when a block per row leaves SMs idle (fewer rows than SMs) and either the rows
    are too long to keep on chip (a block would read them twice: ``online``), or long enough (SPLIT_MIN_ROW) that
    streaming one takes a block longer than split_row's two launches while the rows fill few SMs."""
    sms = sms or sm_count()
    if m >= sms or n < 2 * SPLIT_MIN_CHUNK:
        return False
    return n > MAX_CACHED or (n >= SPLIT_MIN_ROW and m * SPLIT_ROWS_SMS < sms)


@version("softmax", _check, kernels=[split_partial_kernel, split_normalize_kernel])
def split_row(x, y):
    """Several blocks per row: each reduces its piece to (max, sum), then each normalises its piece with all of them."""
    return split_row_launches(x, y)
