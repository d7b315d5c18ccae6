"""Lesson 2 -- row softmax of a float32 matrix x: (M, N), over the last axis, numerically stable.

    y[i, j] = exp(x[i, j] - max_j x[i, :]) / sum_j exp(x[i, j] - max_j x[i, :])

Subtracting the row maximum changes nothing mathematically but keeps exp() finite: exp(1e4) overflows float32
(max ~3.4e38 = e^88.7), exp(1e4 - 1e4) = 1 does not.

A NaN anywhere in a row makes that whole row NaN, in every version as in the float64 ``reference``: the NaN
enters the row's sum, which divides every value (a max may skip it -- ``v > m`` is false for NaN -- the sum does
not). The other rows are unaffected. ``online`` and ``split_row`` keep it so by rebasing an empty part's sum as
``s * 0``, not ``0``: a part that saw only a NaN has m = -inf and s = NaN (tests/test_cli_safety.py checks every
version).

What you will learn
-------------------
Each step changes one thing, and its file's docstring says what and why (``k03_online.py`` holds ``online``):

1. ``naive``       one thread per row, three serial passes over it (max, sum, write): 3 loads and 1 store per
                   element, 16 bytes; the 32 lanes of a warp read 32 different rows (uncoalesced), and only M
                   threads exist.
2. ``block_row``   a block of 512 threads per row: a warp's load reads 32 consecutive floats (coalesced), and the
                   threads' max and sum are combined by **warp shuffles** (``warp_max``/``warp_sum``: a butterfly of
                   5 ``shfl_xor_sync`` steps) and one exchange through shared memory (``block_reduce``).
3. ``online``      max and sum in one read: a running max, and the running sum rescaled by exp(m_old - m_new) when
                   the max grows. 2 loads and 1 store: 12 bytes per element.
4. ``registers``   the row kept on chip between the passes -- about 16 values per thread in registers, past 8192
                   values the overflow in shared memory: 1 load and 1 store, 8 bytes per element, the minimum. Rows
                   up to ``MAX_CACHED`` = 32768 values; longer ones take ``online``.
5. ``warp_rows``   rows of up to 512 values share a warp (L = n / 8 lanes each, a power of two): log2(L) shuffles per
                   reduction, no barrier, and a block holds several rows.
6. ``vector_rows`` 16-byte loads and stores for rows of up to 128 values (at 16 values a row is 64 bytes: 4-byte
                   loads would read 8 bytes of each of 16 rows per instruction).
7. ``split_row``   several blocks per row, for few long rows (1 x 2^20: a block per row would use one SM of 132):
                   each block reduces its piece to a (max, sum) pair, a second kernel combines a row's pairs and
                   normalises its piece.
8. ``optimized``   the dispatcher: ``optimized.choose(M, N)`` picks the step and its configuration from the shape,
                   and says why.

Count the work first: ~5 FLOPs but 8 bytes per element -- softmax is bound by memory bandwidth. At 4096 x 4096
the floor on an H200 (~4.2 TB/s measured copy) is 134 MB / 4.2 TB/s = 32 us. Steps 2-4 cut the bytes per element
(16 -> 12 -> 8) and make every byte coalesced; steps 5-7 keep the GPU busy at shapes where a block per row cannot.

Regimes: why one kernel is not enough
-------------------------------------
``SHAPES["suite"]`` groups real workloads by what limits them (``gpukernels bench --suite`` measures them all):

* **Few long rows** (1 x 2^20, 8 x 131072): a block per row fills 1 to 8 SMs of 132; only cutting rows into
  pieces (step 7) uses the GPU, at the price of a second, L2-resident read.
* **Vocabulary-sized rows** (64 x 32000, 1024 x 32768): a row is 128 KB, more than registers hold at two blocks
  per SM; shared memory takes the overflow (step 4). 64 rows leave half the SMs idle, and still a block per row
  beats cutting the rows (measured): splitting pays for rows past MAX_CACHED, or on fewer than a quarter of the SMs.
* **Squares** (4096 x 4096, 3000 x 3000): thousands of rows of a few thousand values -- a block per row with the
  row in registers streams at copy bandwidth (step 4).
* **Many short rows** (65536 x 128, 2^20 x 16): a block per row is mostly idle threads and barriers; rows share a
  warp (step 5), and the shortest need 16-byte accesses to read whole sectors (step 6).

The traffic of each step, per element: naive 3 loads + 1 store (uncoalesced); block_row the same, coalesced (the
second and third reads often from L2); online 2 + 1; registers, warp_rows, vector_rows 1 + 1; split_row 2 + 1, the
second read from L2 when x fits there. ``gpukernels trace softmax --version NAME`` counts them.
"""

from __future__ import annotations

import numpy as np

from ._common import FULL_MASK, WARP, Config, _check, _pow2  # noqa: F401

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def reference(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float64, returned as float32."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def input_shapes(shape):
    """The (shape, dtype) of each array `make_inputs` returns: what a launch plan needs, without the values."""
    m, n = shape
    return [((m, n), np.float32)]


def make_inputs(shape, seed=None):
    """Fresh random x of ``shape = (M, N)``: values of a few units, plus outliers up to +-1e4 and some -inf
    (masked attention), which a softmax without the max subtraction cannot survive."""
    m, n = shape
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, n)) * 3.0).astype(np.float32)
    if x.size:
        k = max(1, x.size // 50)
        x.flat[rng.integers(0, x.size, size=k)] = rng.choice([-1e4, 1e4], size=k).astype(np.float32)
        if n > 1:  # -inf somewhere, never a whole row of it (that row's softmax is NaN, undefined)
            rows = rng.integers(0, m, size=max(1, m // 4))
            x[rows, rng.integers(0, n, size=rows.size)] = -np.inf
    return (x,)


def flops(shape) -> int:
    m, n = shape
    return 5 * m * n  # max, subtract, exp, add, scale (exp counted as one)


def min_bytes(shape) -> int:
    m, n = shape
    return 8 * m * n  # read x once, write y once


#: Shapes (M, N) for the tests, the demo, the tracer and the benchmark.
SHAPES = {
    "test": [(1, 1), (3, 1), (5, 31), (4, 33), (7, 100), (2, 1025), (1, 4100)],
    "test_gpu": [(1, 1), (1823, 781), (3, 65536), (2, 65537), (1000, 32768), (65536, 128)],
    "trace": (8, 256),
    "demo_sim": (16, 512),
    "demo_gpu": (4096, 4096),
    "bench": [(4096, 4096), (16384, 1024), (1024, 32768), (65536, 128)],
    # The public suite, by regime: `gpukernels bench --suite` measures every one of them.
    "suite": {
        "few_long_rows": [(1, 262144), (1, 2**20), (8, 131072)],
        "vocabulary": [(64, 32000), (1024, 32768)],
        "square": [(4096, 4096), (3000, 3000)],
        "many_short_rows": [(16384, 1024), (65536, 128), (2**20, 16)],
    },
}


# ----------------------------------------------------------------------------------------------------------
# The steps, one file each (kernel beside its launch plan)
# ----------------------------------------------------------------------------------------------------------
from .k01_naive import NAIVE_THREADS, naive, naive_kernel  # noqa: E402,F401
from .k02_block_row import BLOCK_THREADS, block_reduce, block_row, block_row_kernel, reductions, warp_max, warp_sum  # noqa: E402,F401,E501
from .k03_online import (ONLINE_THREADS, make_online_kernel, online, online_kernel, online_launches,  # noqa: E402,F401
                         online_update, rebase)
from .k04_registers import (ELEMS, HYBRID_ELEMS, LONG_THREADS, MAX_CACHED, SHARED_CACHE, SHARED_MAX,  # noqa: E402,F401
                            cached_kernel_for, registers, registers_config)
from .k05_warp_rows import (SUBWARP_ELEMS, WARP_ROWS_MAX_N, WARPS_PER_BLOCK, warp_kernel_for,  # noqa: E402,F401
                            warp_rows, warp_rows_config)
from .k06_vector_rows import VEC_MAX_N, vector_rows, warp_vec_kernel_for, with_vector_access  # noqa: E402,F401
from .k07_split_row import (SPLIT_BLOCKS_PER_SM, SPLIT_MIN_CHUNK, SPLIT_MIN_ROW, SPLIT_ROWS_SMS,  # noqa: E402,F401
                            SPLIT_THREADS, SPLIT_WARPS,
                            split_normalize_kernel, split_partial_kernel, split_pieces, split_row, split_row_launches,
                            use_split_row)
from .k08_optimized import (Choice, choose, config_launches, describe, optimized, optimized_config,  # noqa: E402,F401
                            optimized_kernel)

#: Every version, naive first and the dispatcher last.
VERSIONS = {v.name: v for v in (naive, block_row, online, registers, warp_rows, vector_rows, split_row, optimized)}
