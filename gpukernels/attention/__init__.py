"""Lesson -- scaled dot-product attention, the core of every transformer layer: float32 on the CUDA cores, then float16
on the tensor cores.

    q: (B, H, Sq, D)   k: (B, H, Sk, D)   v: (B, H, Sk, D)   out: (B, H, Sq, D)
    out[b, h] = softmax(q[b, h] @ k[b, h]^T * scale  [+ causal mask]) @ v[b, h]      (softmax over the keys)

``attention.<version>(q, k, v, causal=False, scale=None, out=None)``: batch B, heads H, Sq queries and Sk keys per
head (Sq and Sk may differ), head dimension D from 1 to 128; ``scale`` defaults to 1/sqrt(D).

The causal mask is aligned **top-left**, as torch's ``scaled_dot_product_attention(..., is_causal=True)``: query i
sees keys 0..i, key j is masked for j > i, whatever Sq and Sk are. Every query sees key 0, so no row is ever wholly
masked and no softmax divides by an empty sum. (With Sq > Sk the last queries see every key; with Sq < Sk the keys
after Sq - 1 are seen by none. Decoding with a cache of past keys wants the other alignment, bottom-right, where the
last query sees the last key; it is not this lesson's.)

What you will learn
-------------------
Each step changes one thing, and its file's docstring says what and why (``k03_tiled.py`` holds ``tiled``):

1. ``naive``       three passes through global memory: the scores S = Q K^T * scale written out, B*H*Sq*Sk floats
                   (8.6 GB at 8 x 16 x 4096^2); the softmax lesson's kernel over each row of S; then P V. Storing S
                   is the lesson: 16 bytes of traffic per score, where q, k, v and out come to half a byte per
                   score at that shape.
2. ``fused_rows``  one kernel, a warp per query row, and the **online softmax**: a running max m, a running sum l
                   and the output row acc, all rescaled by exp(m_old - m_new) when the max grows, so no score is ever
                   stored. K and V are streamed from global memory once per query row.
3. ``tiled``       FlashAttention's tiling: a block of 32 query rows stages a tile of keys and values in shared
                   memory and all 32 rows use it -- K and V read 32 times less; the online softmax a tile at a time;
                   under the causal mask, tiles that no row of the block can see are skipped.
4. ``mma``         FlashAttention-2 on tensor cores (``k04_mma.py``), float16 inputs, float32 output, D a
                   multiple of 16: a warp per 16 query rows, S = Q K^T and O += P V as mma.sync instructions with
                   their B fragments read from the K and V tiles by ldmatrix (.trans for V), the online softmax on
                   the mma's output registers, and P turned into the second mma's A fragment without leaving them
                   (the C layout of two 8-key tiles is the A layout of a 16-key slice). P is rounded to float16.
5. ``pipelined``   step 4 fed as the tensor cores need (``k05_pipelined.py``): K and V tiles copied 16 bytes at a
                   time by cp.async while the mmas run (V during Q K^T, the next K during the softmax and P V), the
                   query tiles of a few heads in consecutive blocks, longest first, so that K and V are read from
                   L2, one exp2 per score, the mask only where a tile has one, and two m16 tiles of queries per
                   warp (each K or V fragment read from shared memory feeds four mmas). On an H200 step 4 runs
                   at 20 TFLOP/s; this one, on the large shapes, at 208-280 (0.75-0.81x FlashAttention-2,
                   0.64-0.73x causal; benchmarks/NOTES.md).
6. ``tf32x3``      float32 on the tensor cores (``k06_tf32x3.py``), any D: k and v split once into two TF32
                   parts each, x = big + small (Q's tile as its block reads it), and step 5's tile loop with
                   every product as three TF32 mma.sync (3xTF32, the tensor-core lesson's step 7), each k step's
                   three summed from zero and added by float32 adds; V stored transposed with its keys reordered
                   so that S's C fragment is P's A fragment as it is. torch's float32 attention works this way.
7. ``split_keys``  decoding (``k07_split_keys.py``): with one query per head a warp per row leaves most of the GPU
                   idle, so each row's keys are split into runs, a warp per (row, run) walks its run as fused_rows
                   does and writes its partial softmax state (m, l, acc), and a second kernel merges each row's
                   states by the online softmax's rescale (FlashAttention's flash-decoding).
8. ``split_keys_f16`` float16 decoding (``k08_split_keys_f16.py``): step 7's split and merge with step 5's tensor-core
                   loop -- each head's keys cut into slices of whole K/V tiles, a one-warp block per (query tile,
                   head, slice) walking its slice as pipelined does and writing its partial state (m, l, acc), then
                   step 7's merge kernel.
9. ``wgmma``       FlashAttention-3's first idea (``k09_wgmma.py``), Hopper only: a block of two warpgroups, 64 query
                   rows each, and both products as warpgroup MMAs -- S = Q K^T with Q and K read from shared memory
                   (128-byte swizzled tiles, K as it comes: K-major), O += P V with P from registers (the wgmma's
                   accumulator layout is mma.sync's C layout per warp, so step 5's softmax and step 4's re-layout of
                   P run unchanged) and V from shared memory (MN-major). Checked in the simulator and compiled for
                   sm_90a; not yet timed on a GPU.
10. ``warp_specialized`` step 9 fed by a producer (``k10_warp_specialized.py``): a third warpgroup whose one thread
                   copies Q once and K and V tile by tile with TMA (tensor maps of q, k, v as (B*H*S, D), 128-byte
                   swizzled boxes) into a ring of stages each, a full and an empty mbarrier per stage; the two
                   consumer warpgroups only wait, compute and release -- no block-wide barrier in the loop -- and
                   setmaxnreg moves registers from the producer to them. Checked in the simulator and compiled for
                   sm_90a; not yet timed on a GPU.
11. ``ping_pong``  FlashAttention-3's schedule (``k11_ping_pong.py``): the two consumer warpgroups take turns at the
                   tensor cores, handed over by two named barriers (bar.sync / bar.arrive), so one's softmax runs
                   under the other's products; each turn issues S of a tile with P V of the tile before, and the
                   softmax of the tile runs while that P V is still on the tensor cores. Checked in the simulator and
                   compiled for sm_90a; not yet timed on a GPU.
12. ``optimized``  the dispatcher: ``optimized.choose(B, H, Sq, Sk, D, causal, half)`` sends float16 to the tensor
                   cores (pipelined; for few queries whose blocks would not fill the GPU, split_keys_f16; not yet
                   the Hopper steps 9-11, until a GPU run times them); float32 with few queries to a warp per row,
                   its keys split (split_keys) where the rows alone would not fill the GPU, else to tf32x3 -- or, on a
                   GPU without tensor cores, to tiled or (too few tiles to fill the GPU) fused_rows; and says why.

Count the work first: 4*B*H*Sq*Sk*D FLOPs (2 for Q K^T, 2 for P V; the exponentials not counted) over at least
4*B*H*(2*Sq + 2*Sk)*D bytes (read q, k, v, write out). At 8 x 16 x 4096^2 x 128 that is 1.1 TFLOP over 1.1 GB,
~1000 FLOP/byte: arithmetic-bound, as long as S is never stored -- ``naive`` moves 34 GB for S alone. In float32 on
CUDA cores (an H200 peaks near 67 TFLOP/s of FP32 FMA) that is ~16 ms at the very best; float16 on tensor cores
(``mma``; near 990 TFLOP/s dense) lowers that bound some fifteen times. Under the causal mask ``flops`` counts only
the (query, key) pairs that are not masked -- about half at Sq = Sk -- the work a kernel that skips masked keys has
to do (FlashAttention's benchmarks halve the count likewise).

Numerics: the softmax subtracts the running max, so scores far apart are safe -- exp(s - m) <= 1 always, and a score
far below the max (past ~100) underflows to weight 0, which is its weight to float32's precision. ``make_inputs``
puts outliers in q so that some rows' scores span more than 80, where exp() of an unshifted score would overflow.
Tests compare against a float64 ``reference`` with relative error <= 1e-4 (tests/test_attention.py says why);
``mma`` against the reference of its float16 inputs with <= 1e-2, as it rounds P to float16.

Non-finite inputs are not the lesson's: like torch's kernels, these make no promise beyond "NaN or inf in, NaN or
inf out" -- an infinite score gives NaN (exp(inf - inf)), and ``tf32x3`` turns any infinite input into NaN (its
split x = big + small computes inf - inf). Under the causal mask a NaN in a row of v that a query cannot see may
still reach that query when the key shares a tile with keys it can see: its probability is 0, and 0 * NaN is NaN.
Rows of a cache past its valid keys should be finite (zeros) -- as they must be for torch's flash kernels too.

Regimes (``SHAPES["suite"]``): **training** (thousands of queries and keys, many heads: many tiles);
**long context** (8k-16k tokens, few sequences: the tiles still fill the GPU, each block walks many K/V tiles);
**cross attention** (many queries against few keys: 77 text tokens; short K/V walks); **decode** (1 to 4 queries
per head against a long cache: no tile of queries to share, a warp per row; where those warps are too few to fill the
GPU, each row's keys split across warps -- in float16, across blocks of one warp, a slice of K/V tiles each);
**few heads** (a small batch of short sequences:
too few tiles for the SMs -- for float32 on a GPU without tensor cores, a warp per row).
"""

from __future__ import annotations

import numpy as np

from .._errors import LaunchError
from ._common import MAX_D, check, check_shapes, heads, resolve_scale  # noqa: F401

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def causal_mask(sq: int, sk: int) -> np.ndarray:
    """(Sq, Sk) booleans, True where key j is hidden from query i: j > i (top-left aligned, as torch's is_causal)."""
    return np.arange(sk)[None, :] > np.arange(sq)[:, None]


def reference(q, k, v, causal=False, scale=None) -> np.ndarray:
    """softmax(q k^T * scale [masked]) v of the float32 inputs, computed in float64, returned as float32."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise LaunchError(f"reference: {name} must be 4-D (B, H, S, D); got {name}.shape = {x.shape}")
    params, _ = check_shapes(q, k, v, causal, scale)  # the launchers' checks: shapes, D, Sk >= 1, causal, scale
    scale = params["scale"]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale  # (B, H, Sq, Sk)
    if causal:
        s = np.where(causal_mask(s.shape[-2], s.shape[-1]), -np.inf, s)
    if s.size == 0:
        return np.zeros(q.shape[:-1] + (v.shape[-1],), np.float32)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.matmul(p, v).astype(np.float32)


def input_shapes(shape):
    """The (shape, dtype) of each array `make_inputs` returns: what a launch plan needs, without the values."""
    b, h, sq, sk, d = shape
    return [((b, h, sq, d), np.float32), ((b, h, sk, d), np.float32), ((b, h, sk, d), np.float32)]


def make_inputs(shape, seed=None):
    """Fresh random (q, k, v) for ``shape = (B, H, Sq, Sk, D)``: standard normal values, and ~1% of q's elements
    replaced by outliers of +-40*sqrt(D). A query row holding one at dimension d has scores 40 * k[j, d] apart
    (scale = 1/sqrt(D)): across a few dozen keys they span more than 80, so a softmax that did not subtract the
    row's max would overflow (exp(88.7) is float32's largest), and one that rescaled wrongly would be far off."""
    b, h, sq, sk, d = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, h, sq, d), dtype=np.float32)
    k = rng.standard_normal((b, h, sk, d), dtype=np.float32)
    v = rng.standard_normal((b, h, sk, d), dtype=np.float32)
    if q.size:
        n = max(1, q.size // 100)
        q.flat[rng.integers(0, q.size, size=n)] = (rng.choice([-1.0, 1.0], size=n) * 40 * np.sqrt(d)).astype(np.float32)
    return q, k, v


def visible_pairs(sq: int, sk: int, causal: bool = False) -> int:
    """(query, key) pairs that are not masked: Sq * Sk, or under the causal mask sum_i min(i + 1, Sk)."""
    if not causal:
        return sq * sk
    full = max(0, sq - sk)  # queries i >= Sk see all Sk keys
    seen = min(sq, sk)  # queries 0 .. seen - 1 see i + 1 keys
    return seen * (seen + 1) // 2 + full * sk


def flops(shape, causal: bool = False) -> int:
    """4 * D per visible (query, key) pair: 2 for the score, 2 for adding its value into the output. Under the
    causal mask only the pairs a query can see count: Sq (Sq + 1) / 2 at Sq = Sk, where FlashAttention's benchmarks
    take half of Sq^2. The exponentials are not counted."""
    b, h, sq, sk, d = shape
    return 4 * b * h * d * visible_pairs(sq, sk, causal)


def min_bytes(shape, causal: bool = False) -> int:
    """Fewest DRAM bytes: read q, k and v once, write out once (float32)."""
    b, h, sq, sk, d = shape
    return 4 * b * h * d * (2 * sq + 2 * sk)


#: Shapes (B, H, Sq, Sk, D) for the tests, the demo, the tracer and the benchmark.
SHAPES = {
    # odd shapes for the simulator: a single key, D = 1 and 128, Sq != Sk both ways, D = 80 (tiles 128 wide),
    # several K/V tiles (Sk = 40: 3 tiles of 16 at D = 80)
    "test": [(1, 1, 1, 1, 16), (1, 1, 3, 5, 1), (2, 3, 17, 17, 16), (1, 2, 33, 20, 64), (1, 1, 5, 40, 80),
             (1, 1, 3, 33, 128)],
    "test_gpu": [(1, 1, 1, 1, 1), (2, 3, 1000, 1000, 64), (1, 2, 17, 1000, 128), (1, 4, 1000, 33, 80),
                 (2, 2, 333, 777, 16), (4, 8, 1024, 1024, 128)],
    "trace": (1, 1, 40, 70, 16),
    "demo_sim": (1, 2, 40, 40, 32),
    "demo_gpu": (8, 16, 4096, 4096, 128),
    "bench": [(8, 16, 4096, 4096, 128), (4, 32, 8192, 8192, 64), (32, 16, 1024, 1024, 64)],
    # the benchmark's causal case, run with causal=True (the same shape as bench's first)
    "bench_causal": [(8, 16, 4096, 4096, 128)],
    # The public suite, by regime (see the docstring). Decoding's one query per head and cross attention's few keys
    # sit on the other side of optimized's rules from training's tiles; decoding with 32 heads (one sequence, 1 or 4
    # queries) is where float16 splits its keys (split_keys_f16), with 2048 heads where it does not.
    "suite": {
        "training": [(8, 16, 4096, 4096, 128), (32, 16, 1024, 1024, 64), (16, 12, 512, 512, 64)],
        "long_context": [(4, 32, 8192, 8192, 64), (1, 32, 16384, 16384, 128)],
        "cross_attention": [(16, 8, 1024, 77, 64), (8, 16, 4096, 256, 80)],
        "decode": [(64, 32, 1, 4096, 128), (8, 32, 1, 32768, 128), (1, 32, 1, 8192, 128), (1, 32, 4, 8192, 128)],
        "few_heads": [(1, 4, 512, 512, 64)],
    },
}


# ----------------------------------------------------------------------------------------------------------
# What each step takes: the hooks through which code that runs every version of every lesson (the tests, the demo,
# the tracer, the benchmark) gives each step its inputs (gpukernels.check.version_inputs, supports, tolerance)
# ----------------------------------------------------------------------------------------------------------


def version_inputs(name: str, inputs) -> tuple:
    """The (q, k, v) that ``VERSIONS[name]`` takes, made from ``make_inputs``' float32 ones: float16 copies for the
    tensor-core steps (``FLOAT16_VERSIONS``); the arrays themselves for the float32 steps and for ``optimized``, which
    then runs its float32 steps. A run's reference is ``reference`` of what this returns -- for a float16 step, float64
    of the float16 values, so that the inputs' own rounding is not counted against the kernel."""
    if name in FLOAT16_VERSIONS:
        return tuple(np.asarray(x).astype(np.float16) for x in inputs)
    return tuple(inputs)


def supports(name: str, shape) -> bool:
    """Whether ``VERSIONS[name]`` runs at ``shape = (B, H, Sq, Sk, D)``: every step needs D from 1 to MAX_D and at
    least one key; the tensor-core steps also need D a multiple of 16 (the mma takes a row 16 dimensions at a time).
    Called where a step does not run, the step raises a LaunchError that says why."""
    sk, d = shape[3], shape[4]
    return 1 <= d <= MAX_D and sk >= 1 and (name not in FLOAT16_VERSIONS or d % 16 == 0)


# ----------------------------------------------------------------------------------------------------------
# The steps, one file each (kernel beside its launch plan)
# ----------------------------------------------------------------------------------------------------------
from .k01_naive import NAIVE_THREADS, naive, naive_launches, pv_kernel, scores_kernel  # noqa: E402,F401
from .k02_fused_rows import (FUSED_ROWS_KERNELS, FUSED_WARPS, dims_per_lane, fused_rows,  # noqa: E402,F401
                             fused_rows_kernel_for, fused_rows_launches, key_walk)
from .k03_tiled import (ROW_THREADS, TILE_ROWS, TILED_KERNELS, TILED_THREADS, padded_dims, tile_keys,  # noqa: E402,F401
                        tiled, tiled_kernel_for, tiled_launches)
from .k04_mma import MMA_KERNELS, MMA_KEYS, MMA_ROWS, MMA_THREADS, mma, mma_kernel_for, mma_launches  # noqa: E402,F401
from .k05_pipelined import (PIPELINED_KERNELS, pipelined, pipelined_kernel_for, pipelined_launches,  # noqa: E402,F401
                            warps_for)
from .k05_pipelined import plan as pipelined_plan  # noqa: E402,F401
from .k06_tf32x3 import (TF32X3_KERNELS, VALUE_ORDER, padded_width, split_rows_kernel,  # noqa: E402,F401
                         split_values_kernel, tf32x3, tf32x3_config, tf32x3_kernel_for, tf32x3_launches)
from .k07_split_keys import (MIN_CHUNK, SPLIT_KEYS_KERNELS, merge_kernel_for, split_keys,  # noqa: E402,F401
                             split_keys_kernel_for, split_keys_launches, splits_for)
from .k08_split_keys_f16 import (SPLIT_KEYS_F16_KERNELS, slices_for, split_keys_f16,  # noqa: E402,F401
                                 split_keys_f16_kernel_for, split_keys_f16_launches, split_plan)
from .k09_wgmma import WGMMA_KERNELS, wgmma, wgmma_kernel_for, wgmma_launches  # noqa: E402,F401
from .k10_warp_specialized import (WARP_SPECIALIZED_KERNELS, warp_specialized,  # noqa: E402,F401
                                   warp_specialized_kernel_for, warp_specialized_launches)
from .k11_ping_pong import PING_PONG_KERNELS, ping_pong, ping_pong_kernel_for, ping_pong_launches  # noqa: E402,F401
from .k12_optimized import (FEW_KEYS, FILL, FUSED_MAX_SQ, choose, describe, keys_walked,  # noqa: E402,F401
                            optimized)

#: Every version, naive first and the dispatcher last. Tests, benchmarks, plots and docs iterate over this. ``mma``,
#: ``pipelined``, ``split_keys_f16`` and the Hopper steps (``wgmma``, ``warp_specialized``, ``ping_pong``) take float16
#: inputs, ``optimized`` either, the others (tf32x3 too) float32: ``FLOAT16_VERSIONS`` names the float16 ones.
VERSIONS = {v.name: v for v in (naive, fused_rows, tiled, mma, pipelined, tf32x3, split_keys, split_keys_f16, wgmma,
                                warp_specialized, ping_pong, optimized)}
FLOAT16_VERSIONS = ("mma", "pipelined", "split_keys_f16", "wgmma", "warp_specialized", "ping_pong")
