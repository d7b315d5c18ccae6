"""Lesson -- matrix multiplication on tensor cores, C = A @ B: A (M, K) and B (K, N) float16, C (M, N) float32.

What you will learn
-------------------
A tensor core multiplies small matrices in one instruction: ``mma.sync.m16n8k16`` takes a 16 x 16 tile of A and a
16 x 8 tile of B in float16 and adds their product into a 16 x 8 float32 tile of C -- 4096 FLOPs, issued by one warp,
where an FMA does 2. The tiles are held by the warp's 32 lanes *together*, each lane a fixed set of elements (its
*fragment*: `gpukernels._mma.a_frag_coords` and its neighbours, the PTX ISA's tables), and Numba has no API for any
of it: the instructions are inline PTX in `gpukernels._mma`, and in the simulator warp-collective functions that
check every lane takes part. The ladder, one idea per step:

1. ``mma_global``  one warp per 16 x 8 tile of C, one mma per 16 of K; each lane loads its fragment from global
                   memory, two halves per 32-bit register. The index arithmetic of the fragments is the lesson.
2. ``ldmatrix``    64 x 64 block tiles staged in shared memory (A and B read once per block, not per warp), 32 x 32
                   per warp (8 mmas per 16 of K), and fragments read by ``ldmatrix``: one instruction gives each lane
                   its 4 words of A (``.x4``), or its words of B for two mmas (``.x4.trans``: B is stored k-major).
3. ``swizzled``    the shared tiles XOR-swizzled in 16-byte chunks (chunk c of row r at c ^ f(r)), so that the 8 rows
                   of each ldmatrix phase fall in 8 different bank groups: no bank conflicts (step 2's B tile: 8-way).
4. ``pipelined``   tiles copied global -> shared by ``cp.async`` through a ring of 3 buffers: two k tiles in flight
                   while one is multiplied, one barrier per tile, 16 bytes per copy (rows 16-byte aligned; other
                   shapes fill the ring by loads and stores).
5. ``block_tiles`` 128 x 128 block tiles, 64 x 64 per warp: 32 mmas per 8 ldmatrix per 16 of K (step 4: 8 per 4),
                   sized to what an SM holds (2 blocks of ~240 registers per thread; a 2-stage ring of 32 KB).
6. ``wgmma``       Hopper's warpgroup MMA: two warpgroups of 4 warps, a 128 x 256 tile of C; each ``wgmma.mma_async``
                   multiplies 64 x 16 of A by 16 x 256 of B read by the tensor cores straight from shared memory
                   (through descriptors of 128-byte-swizzled tiles), asynchronously, while the threads issue the next
                   ``cp.async`` copies into a 4-stage ring (196 KB of dynamic shared memory). sm_90 only.
7. ``tma``         step 6 fed by Hopper's Tensor Memory Accelerator: one thread asks the copy engine for a stage's
                   tiles (``cp.async.bulk.tensor``, boxes of A and B described by tensor maps made on the host),
                   which land already 128-byte swizzled; an ``mbarrier`` per stage counts their bytes, and every
                   thread waits for its phase (the phase bit flips each time round the ring). On an H100: 1.27x
                   step 6 at 4096^3, 1.33x at 8192^3.
8. ``warp_specialized``  step 7 with roles: a producer warpgroup whose one thread only issues the TMA copies, two
                   consumer warpgroups that only issue wgmma; per stage a *full* mbarrier (the tiles landed) and an
                   *empty* one (the consumers are done with it), each waited on with its phase bit, and no barrier
                   of the whole block in the main loop; ``setmaxnreg`` gives the producer 40 registers per thread
                   and the consumers 232. On an H100: about step 7's time (one tile per block leaves the roles
                   little to overlap).
9. ``persistent``  step 8 launched once per SM: each block walks tiles of C (in step 6's grouped order), the ring's
                   position and phase bits carried from one tile to the next, so that the producer copies the next
                   tile's k tiles while the consumers store the last one (the epilogue overlapped). On an H100:
                   1.01x cuBLAS FP16 at 4096^3, 0.97x at 8192^3.
10. ``fp8``        FP8 e4m3 inputs at twice FP16's tensor-core rate: per-tensor scales (amax / 448), A and B
                   quantized by the step's own kernels (B transposed: FP8 wgmma reads both operands K-major), step
                   8's warp-specialized kernel on 128 x 128 tiles with k tiles of 128 bytes, each k tile summed from
                   zero by the tensor cores (whose FP8 adder keeps fewer bits) and promoted to float32 registers,
                   the scales applied in the epilogue. Checked against float64 of the inputs rounded to FP8;
                   against the float16 inputs its error is e4m3's, ~4%. Correct on an H100; not yet timed.
11. ``tf32x3``     float32 inputs at float32 accuracy: each input split once into two TF32 parts (big = tf32(x),
                   small = tf32(x - big)), then step 6's wgmma on TF32 tiles, three products per k step, summed
                   from zero per k tile and added to the running sum by float32 adds (3xTF32). Before Hopper: the
                   same with mma.sync.
12. ``optimized``  the dispatcher: ``optimized.choose(M, N, K)`` picks step 9 on Hopper when its 128 x 256 tiles
                   fill half the GPU, wgmma with split-K or one-warpgroup blocks below that, else 128 x 128 tiles,
                   64 x 64 when those would leave SMs idle, or tf32x3 for float32 inputs, and says why.

Each step lives in its own file, numbered as here (``k03_swizzled.py`` holds the swizzle and ``swizzled``); steps 2-3
share a kernel factory that takes the tile layout, steps 4-5 one that takes the tile sizes. ``VERSIONS`` lists them
in order; ``optimized`` is the last. Every kernel handles any M, N, K: loads past the edges read zeros (a zero adds
nothing to a product), stores past them are skipped.

On an H200 at 4096^3 (2026-12-04, ``gpukernels bench tensor_core``: CUDA-graph replay, inputs past L2) the ladder
goes 11.5 -> 8.3 -> 7.8 -> 0.66 -> 0.49 -> 0.29 ms (wgmma: 474 TFLOP/s), against cuBLAS's 0.216 ms (FP16 in, FP32
C: 0.74x; at 8192^3 0.72x). On an H100 (2026-12-07, the same harness) the Hopper steps continue it: wgmma 0.297 ->
tma 0.233 -> warp_specialized 0.226 -> persistent 0.218 ms against cuBLAS's 0.219 (631 TFLOP/s, 1.01x; at 8192^3
0.97x). Steps 2 and 3 are bound by their two-byte global loads, which hides what the swizzle saves until step 4 makes the copies
cheap: step 4's ring on step 2's row-major tiles takes 2.0 ms instead of 0.81, step 5's 1.1 instead of 0.56
(benchmarks/tensor_core_variants.py). tf32x3 on float32: 1.83 ms at relative error 2.4e-7, 1.51x cuBLAS SGEMM (2.7 ms
at 1.1e-6); at 8192^3 1.84x (benchmarks/NOTES.md, "3xTF32 on wgmma").

Count the work: 2*M*N*K FLOPs and at least 2*(M*K + K*N) + 4*M*N bytes -- at 4096^3, 137 GFLOP against 134 MB, ~1000
FLOP/byte, far above what an H200 needs to be compute-bound on its FP16 tensor cores (~990 TFLOP/s dense with wgmma,
less with mma.sync). What limits the tiled steps is nearer: the L2 -> SM traffic of their tiles (step 6 reads 48 KB
of A and B per 4.2 MFLOP, ~5 TB/s at 470 TFLOP/s; benchmarks/NOTES.md). Accuracy: float16 inputs are exact in the
products, which are summed in float32, so the result is checked against float64 of the *float16* inputs.
"""

from __future__ import annotations

import numpy as np

from .. import matmul
from ._common import check, check_fp32  # noqa: F401

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A @ B of the inputs as given (float16 or float32), accumulated in float64, returned as float32."""
    return matmul.reference(a, b)


#: Versions checked against a reference of their own (`version_reference`, `version_tolerance`)
OWN_CHECK = ("fp8",)


def version_reference(name: str, inputs, **params):
    """What `gpukernels.check.reference` checks ``name`` against, where it is not `reference`: fp8 computes the
    product of its inputs rounded to e4m3 with per-tensor scales, so it is checked against float64 of those."""
    if name == "fp8":
        from .k10_fp8 import reference as fp8_reference

        return fp8_reference(*inputs)
    return None


def version_tolerance(name: str):
    """fp8's tolerance against `version_reference` (k10_fp8 says why); None: the lesson's."""
    if name == "fp8":
        from .k10_fp8 import TOLERANCE

        return TOLERANCE
    return None


def input_shapes(shape):
    """The (shape, dtype) of each array `make_inputs` returns: what a launch plan needs, without the values."""
    m, n, k = shape
    return [((m, k), np.float16), ((k, n), np.float16)]


def make_inputs(shape, seed=None, dtype=np.float16):
    """Fresh random (A, B) for ``shape = (M, N, K)``: the matmul lesson's inputs (normal values plus ~1% outliers
    of 100x, so that a wrong index cannot hide among similar values), as float16 (``dtype``: float32 for tf32x3's
    accuracy)."""
    a, b = matmul.make_inputs(shape, seed)
    return a.astype(dtype), b.astype(dtype)


def flops(shape) -> int:
    m, n, k = shape
    return 2 * m * n * k


def min_bytes(shape) -> int:
    """Fewest DRAM bytes: read A and B (float16) once, write C (float32) once."""
    m, n, k = shape
    return 2 * (m * k + k * n) + 4 * m * n


#: Shapes (M, N, K) for the tests, the demo, the tracer and the benchmark.
SHAPES = {
    # ragged ones (every edge path), and aligned ones (K, N multiples of 8: the cp.async path) with ragged M and tiles
    "test": [(1, 1, 1), (17, 9, 31), (33, 40, 20), (16, 8, 16), (64, 64, 64), (33, 40, 24), (72, 136, 40)],
    "test_gpu": [(1, 1, 1), (33, 17, 31), (1823, 781, 129), (1024, 1024, 1024), (2052, 2056, 264),
                 (4096, 4096, 4096)],
    "trace": (64, 64, 64),
    "demo_sim": (64, 64, 64),
    "demo_gpu": (4096, 4096, 4096),
    "bench": [(4096, 4096, 4096), (8192, 8192, 8192), (1024, 1024, 1024), (1823, 781, 129)],
    # The public suite, by regime: `gpukernels bench --suite tensor_core` times optimized and cuBLAS FP16 on each
    "suite": {
        "squares": [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)],
        "ragged": [(1000, 1000, 1000), (3000, 3001, 2999), (4095, 4097, 4093), (3000, 1500, 700)],
        "small": [(33, 17, 31), (256, 256, 256), (512, 512, 512)],
        # an LLM's MLP on a batch of M tokens: up projection 4096 -> 14336, and down again
        "decoding": [(1, 14336, 4096), (16, 14336, 4096), (64, 14336, 4096), (128, 14336, 4096),
                     (128, 4096, 14336)],
        "skinny": [(16, 8192, 8192), (8192, 64, 4096)],
        "transformer": [(4096, 11008, 4096), (4096, 4096, 14336), (16384, 4096, 1024), (2048, 12288, 4096)],
        "small_k": [(8192, 8192, 128)],
    },
}

# ----------------------------------------------------------------------------------------------------------
# The steps, one file each (kernel beside its launch plan)
# ----------------------------------------------------------------------------------------------------------
from .k01_mma_global import mma_global, mma_global_kernel  # noqa: E402,F401
from .k02_ldmatrix import ldmatrix, ldmatrix_kernel  # noqa: E402,F401
from .k03_swizzled import swizzled, swizzled_kernel  # noqa: E402,F401
from .k04_pipelined import pipelined, pipelined_kernel, pipelined_sync_kernel  # noqa: E402,F401
from .k05_block_tiles import block_tiles, block_tiles_kernel, block_tiles_sync_kernel  # noqa: E402,F401
from .k06_wgmma import wgmma, wgmma_kernel, wgmma_sync_kernel  # noqa: E402,F401
from .k07_tma import tma, tma_kernel  # noqa: E402,F401
from .k08_warp_specialized import warp_specialized, warp_specialized_kernel  # noqa: E402,F401
from .k09_persistent import persistent, persistent_kernel  # noqa: E402,F401
from .k10_fp8 import amax_kernel, fp8, fp8_gemm, fp8_kernel, quantize, quantize_cols_kernel  # noqa: E402,F401
from .k10_fp8 import quantize_rows_kernel, scales_kernel  # noqa: E402,F401
from ._tf32x3_mma import tf32x3_mma_kernel  # noqa: E402,F401
from .k11_tf32x3 import split_cols_kernel, split_rows_kernel, tf32x3, tf32x3_kernel  # noqa: E402,F401
from .k12_optimized import choose, optimized  # noqa: E402,F401

#: Every version, mma_global first and the dispatcher last. Tests, benchmarks, plots and docs iterate over this.
VERSIONS = {v.name: v for v in (mma_global, ldmatrix, swizzled, pipelined, block_tiles, wgmma, tma, warp_specialized,
                                      persistent, fp8, tf32x3, optimized)}
