"""Lesson 1 -- matrix multiplication, C = A @ B in float32, A: (M, K), B: (K, N), C: (M, N).

What you will learn
-------------------
Each version below changes exactly one thing, and its docstring says what and why:

1. ``naive``       one thread per output element, straight from global memory. Consecutive threads of a warp
                   walk down a *column* of C, so their loads of A and stores of C are 4*K bytes apart: every
                   lane touches its own 32-byte sector (uncoalesced).
2. ``coalesced``   the same arithmetic with threadIdx.x mapped to the *column*: a warp now reads 32 consecutive
                   floats of B (one 128-byte line) and all lanes read the same A element (a broadcast).
3. ``tiled``       square TILE x TILE tiles of A and B are staged in shared memory; every element loaded from
                   global memory is reused TILE times from shared memory, so global loads drop by TILE.
4. ``regblock_1d`` each thread computes TM outputs of one column; a value read from shared memory is reused TM
                   times from a register, so shared-memory traffic per FMA drops by ~TM.
5. ``regblock_2d`` each thread computes a TM x TN block; per k step it reads TM + TN values from shared memory
                   for TM * TN FMAs (outer product in registers).
6. ``conflict_free`` the same blocking with each thread owning strided rows and columns, and a padded A tile:
                   no shared-memory bank conflicts (regblock_2d's B reads were 4-way conflicts).
7. ``double_buffered`` two copies of each tile: the next tiles' global loads are in flight while the current
                   ones are multiplied, and one barrier per tile suffices.
8. ``vectorized``  16-byte aligned tiles and 4 consecutive values per thread, so NVVM emits 128-bit shared
                   loads: 4 load instructions per 64 FMAs instead of 16.
9. ``unrolled``    the 8 steps of the k loop written out (Numba has no unroll pragma and the compilers leave a
                   body this large rolled): shared addresses become constant offsets, the loop counter goes.
10. ``interior``   blocks whose tiles lie wholly inside the matrices take a copy of the loop without bounds
                   checks; only edge blocks pay for them.
11. ``deep_k``     16-deep k tiles instead of 8: twice the FMAs between barriers, and each tile's global loads
                   have twice as long to arrive.
12. ``swizzled``   blocks are numbered down groups of 8 tile rows, so the blocks running at the same time share
                   their A and B tiles in L2.
13. ``wave_fit``   64 x 64 tiles when 128 x 128 ones would make fewer blocks than the GPU has SMs (1024^2).
14. ``vector_loads`` 16-byte global loads: Numba cannot prove an array row is 16-byte aligned, so it never emits
                   them; a 20-line intrinsic (``gpukernels._intrinsics.load4``) does, when the launcher has checked
                   the alignment. A quarter of the load instructions and of the trips through the L1 pipeline.
15. ``thread_16x8`` 16 x 8 outputs per thread in 256 x 128 tiles (the tile cuBLAS's own FP32 kernel uses):
                   128 FMAs per 6 shared loads instead of 64 per 4.
16. ``skinny``     a matrix-vector kernel for C with few rows (M <= 16): 4 columns per thread, K split over the
                   grid so that enough loads are in flight, B streamed once. Judged against the copy bandwidth.
17. ``split_k``    slices of K over the grid's z, summed into C by atomics, when C has too few tiles to fill 132 SMs
                   (M = N = 256, K = 65536: 16 tiles of 64 x 64).
18. ``narrow``     tiles shaped like C when it has few rows or columns (64 x 256, 256 x 32, 128 x 32), with
                   slices of K: a square tile at M = 64 or N = 32 computes half its FMAs on rows that do not exist.
19. ``stream_k``   the last waves' k tiles shared out evenly over the SMs (stream-K): 512 tiles of 256 x 128 are
                   3.88 waves of 132 SMs, so the fourth would run on 116 SMs; shared, every SM ends together.
20. ``async_copy`` stream_k with each tile copied global -> shared by ``cp.async`` (sm_80+) through a ring of 3
                   shared buffers: two tiles in flight and no prefetch registers; 1-3% on the large squares.
21. ``optimized``  the dispatcher: ``optimized.choose(M, N, K)`` picks the step, tile and number of K slices from
                   the shape by a rule a student can read, and says why.

Steps 1-15 make one shape fast: 4096^3. On the H200 the ladder goes 274 ms -> 100 -> 17.5 -> 17.9 -> 19.7 -> 17.6 -> 8.4 -> 5.0 -> 4.9 -> 4.1 -> 3.64
-> 3.69 -> 3.69 -> 3.30 -> 3.21 ms at 4096^3 (cuBLAS: 2.69 ms, so the last step is at 84%); wave_fit changes
nothing there but takes 1024^3 from 0.12 to 0.095 ms. Step 19, stream_k, and step 20, async_copy, take it to 84-86% of
cuBLAS (README's suite table has the current run). benchmarks/NOTES.md says why each step moved as much (or as little)
as it did, and what the profiler showed.

Each step lives in its own file, numbered as here (``k03_tiled.py`` holds ``tiled_kernel`` and the ``tiled`` launch
plan); steps 10 on are calls of one kernel factory (``_interior.py``), each file stating the one argument it changes.
``VERSIONS`` lists them in that order (naive first); ``optimized`` is the last one. Run
``gpukernels bench matmul`` on a GPU for times, ``gpukernels trace matmul --version tiled`` anywhere for the
memory traffic each version really generates.

Count the work first: 2*M*N*K FLOPs, and at least 4*(M*K + K*N + M*N) bytes of DRAM traffic. At 4096^3 that is
137 GFLOP against 201 MB, an arithmetic intensity of ~680 FLOP/byte -- far above the H200's ~14 FLOP/byte
ridge point, so matmul is bound by arithmetic when the data is reused well, and by memory when it is not
(the naive kernel re-reads A and B from global memory N and M times).

Regimes: why one kernel is not enough
-------------------------------------
``SHAPES["suite"]`` groups real workloads by what limits them (``gpukernels bench --suite`` measures them all):

* **Compute-bound squares** (4096^3, 6144^3, transformer layers): thousands of tiles, so the largest tile and the
  most FMAs per shared load win -- steps 1-15.
* **Wave quantisation** (768^3, 1536^3): a tile count just above a multiple of 132 SMs leaves most of the last wave
  idle (144 tiles = 1.09 waves: the second wave is 9% full); a smaller tile, or slices of K, balance the waves. With
  many waves (4096^3: 3.88) the loss is the last wave's empty part, and stream-K (step 19) shares the last
  tiles' k tiles out evenly instead.
* **Too few tiles** (large K: 256 x 256 x 65536, 128 x 128 x 32768): C alone gives a handful of blocks however
  small the tile; slicing K (split-K, step 17) is the only way to use the SMs.
* **Bandwidth-bound matrix-vector products** (M = 1 or 16, N = K = 8192): 2 FLOPs per 4-byte element of B, so the
  floor is reading B at copy bandwidth, not the FMA rate (step 16).
* **Small K** (8192 x 8192 x 128): writing C costs as much as the product; the tiled kernels' prologue and
  epilogue are no longer hidden.
* **Small products** (512^3, 700 x 900 x 500): 64 tiles of 64 x 64 are half a block per SM, and a 64-thread block
  gives only two of an SM's four schedulers a warp; ``optimized`` runs the same tile with 128 threads (4 x 8
  outputs each), in a few slices of K.

`optimized` chooses among steps 13-20 by these rules; benchmarks/NOTES.md has each prediction beside its
measurement.
"""

from __future__ import annotations

import numpy as np

from .._errors import LaunchError
from ._common import sm_count  # noqa: F401

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A @ B accumulated in float64, returned as float32."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise LaunchError(f"reference(a, b) needs a (M, K) and b (K, N); got a.shape = {a.shape}, b.shape = {b.shape}")
    return (a @ b).astype(np.float32)


def input_shapes(shape):
    """The (shape, dtype) of each array `make_inputs` returns for ``shape = (M, N, K)``: what a launch plan needs,
    without the random values (tests/test_lessons.py holds the two to each other)."""
    m, n, k = shape
    return [((m, k), np.float32), ((k, n), np.float32)]


def make_inputs(shape, seed=None):
    """Fresh random (A, B) for ``shape = (M, N, K)``: normal values plus a few large outliers."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    for x in (a, b):  # spike ~1% of entries so that a wrong index cannot hide among similar values
        if x.size:
            idx = rng.integers(0, x.size, size=max(1, x.size // 100))
            x.flat[idx] *= 100.0
    return a, b


def flops(shape) -> int:
    m, n, k = shape
    return 2 * m * n * k


def min_bytes(shape) -> int:
    """Fewest DRAM bytes: read A and B once, write C once."""
    m, n, k = shape
    return 4 * (m * k + k * n + m * n)


#: Shapes (M, N, K) used by the tests, the demo, the tracer and the benchmark.
SHAPES = {
    "test": [(1, 1, 1), (1, 7, 1), (31, 33, 17), (33, 31, 40), (64, 48, 16), (17, 130, 9)],
    # (2052, 2056, 260): rows 16-byte aligned and enough 256 x 128 tiles for 132 SMs, so the 16-byte loads run
    "test_gpu": [(1, 1, 1), (1823, 781, 129), (4095, 257, 33), (513, 1025, 1000), (2052, 2056, 260),
                 # the new regimes, ragged: a matrix-vector product, 16 rows, and a large K that split_k slices
                 (1, 4097, 1023), (16, 1001, 5003), (100, 96, 40000),
                 # few columns: the vector on the right, with 16-byte loads and K in slices, then ragged and scalar
                 (2053, 1, 4096), (4099, 3, 2053)],
    "trace": (64, 64, 64),
    "demo_sim": (64, 64, 64),
    "demo_gpu": (4096, 4096, 4096),
    "bench": [(4096, 4096, 4096), (1024, 1024, 1024), (4095, 4097, 4093)],
    # The public suite, by regime: every figure of `gpukernels bench --suite` is over all of them.
    "suite": {
        "squares": [(256, 256, 256), (768, 768, 768), (1024, 1024, 1024), (1536, 1536, 1536), (4096, 4096, 4096),
                    (6144, 6144, 6144)],
        # ragged: 1237 x 1531 x 997 has no dimension a multiple of 4 (rows read 4 bytes at a time)
        "ragged": [(1000, 1000, 1000), (4095, 4097, 4093), (1237, 1531, 997)],
        # skinny: few rows, and (6144 x 2 x 6144) few columns -- the vector on the right
        "skinny": [(1, 8192, 8192), (16, 8192, 8192), (64, 8192, 8192), (8192, 32, 4096), (6144, 2, 6144)],
        # transformer: two MLP products, and a vocabulary projection (GPT-2's 50257 words: N odd, K small)
        "transformer": [(2048, 11008, 4096), (2048, 4096, 11008), (2048, 50257, 768)],
        "small_k": [(8192, 8192, 128), (4096, 4096, 64)],
        "large_k": [(128, 128, 32768), (512, 512, 16384)],
        # small products: too few 64 x 64 tiles to give each of 132 SMs' schedulers a warp
        "small": [(512, 512, 512), (700, 900, 500), (320, 1280, 640)],
    },
}



# ----------------------------------------------------------------------------------------------------------
# The steps, one file each (kernel beside its launch plan)
# ----------------------------------------------------------------------------------------------------------
from .k01_naive import NAIVE_BLOCK, naive, naive_kernel  # noqa: E402,F401
from .k02_coalesced import coalesced, coalesced_kernel  # noqa: E402,F401
from .k03_tiled import TILE, tiled, tiled_kernel  # noqa: E402,F401
from .k04_regblock_1d import regblock_1d, regblock_1d_kernel  # noqa: E402,F401
from .k05_regblock_2d import regblock_2d, regblock_2d_kernel  # noqa: E402,F401
from .k06_conflict_free import conflict_free, conflict_free_kernel  # noqa: E402,F401
from .k07_double_buffered import double_buffered, double_buffered_kernel  # noqa: E402,F401
from .k08_vectorized import vectorized, vectorized_kernel  # noqa: E402,F401
from .k09_unrolled import unrolled, unrolled_kernel  # noqa: E402,F401
from .k10_interior import interior, interior_kernel  # noqa: E402,F401
from .k11_deep_k import deep_k, deep_k_kernel  # noqa: E402,F401
from .k12_swizzled import swizzled, swizzled_kernel  # noqa: E402,F401
from .k13_wave_fit import small_tile_kernel, wave_fit, wave_fit_kernel  # noqa: E402,F401
from .k14_vector_loads import small_vec_kernel, vec_kernel, vector_loads  # noqa: E402,F401
from .k15_thread_16x8 import thread_16x8, wide_kernel, wide_vec_kernel  # noqa: E402,F401
from .k16_skinny import skinny  # noqa: E402,F401
from .k17_split_k import split_k  # noqa: E402,F401
from .k18_narrow import narrow  # noqa: E402,F401
from .k19_stream_k import stream_k  # noqa: E402,F401
from .k20_async_copy import async_copy  # noqa: E402,F401
from .k21_optimized import choose, optimized  # noqa: E402,F401

#: Every version, naive first and the dispatcher last. Tests, benchmarks, plots and docs iterate over this.
VERSIONS = {v.name: v for v in (naive, coalesced, tiled, regblock_1d, regblock_2d, conflict_free, double_buffered,
                                vectorized, unrolled, interior, deep_k, swizzled, wave_fit, vector_loads,
                                thread_16x8, skinny, split_k, narrow, stream_k, async_copy, optimized)}
