"""Lesson 2 -- row softmax of a float32 matrix x: (M, N), over the last axis, numerically stable.

    y[i, j] = exp(x[i, j] - max_j x[i, :]) / sum_j exp(x[i, j] - max_j x[i, :])

Subtracting the row maximum changes nothing mathematically but keeps exp() finite: exp(1e4) overflows float32
(max ~3.4e38 = e^88.7), exp(1e4 - 1e4) = 1 does not.

What you will learn
-------------------
1. ``naive``      one thread per row, three serial passes over the row (max, sum, write). Every element is read
                  from global memory 3 times and written once: 16 bytes per element. Worse, the 32 lanes of a
                  warp work on 32 *different rows*, so each load touches 32 sectors N*4 bytes apart
                  (uncoalesced), and only M threads exist -- a 4096-row matrix keeps 4096 threads busy on a GPU
                  that holds 270 000.
2. ``split_row``  several blocks per row, for few long rows (1 x 2^20: one block per row would use one SM of 132).
                  Each block reduces its piece of the row to a (max, sum) pair with the warp butterflies
                  ``warp_max`` / ``warp_sum`` and a shared-memory step across warps; a second kernel combines a
                  row's pairs (sum_c s_c * exp(m_c - max_c m_c)) and normalises its piece. x is read twice, the
                  second time from L2 when it fits: a workspace of 8 bytes per piece instead of a second DRAM pass.
3. ``optimized``  the threads that share a row read it together in consecutive chunks (coalesced), keep it on chip,
                  and reduce max and sum with warp shuffles (``shfl_xor_sync``: a butterfly, log2(L) steps over L
                  lanes) and, when a block owns the row, shared memory across its warps. Rows up to 512 values get
                  L ~ n / 8 lanes of a warp (a power of two, 1 to 32): a 128-value row takes 16 lanes x 8 values,
                  a warp holds 2 rows, a reduction is 4 shuffle steps instead of 5, and a warp's 8 shuffle
                  instructions serve 2 rows (a full warp on 4 values per lane spends 10 on one); on the H200 that
                  is 1.30x torch at 65536x128 (8 lanes x 16 values: fewer shuffles but more registers, 1.26x).
                  Rows up to 8192 get a block of 64 to 512 threads, 16 values each in registers; rows up to
                  ``MAX_CACHED`` = 32768, 512 threads with 41 values each in registers and the rest of the row (up
                  to 46 KB) in shared memory, so that two blocks fit per SM. All of these read x from global
                  memory **once** and write y once: 8 bytes per element, the minimum. Longer rows are read twice
                  (an "online" pass computing max and sum together, then a normalising pass): 12 bytes per element.
                  Fewer rows than SMs with at least 2 * SPLIT_MIN_CHUNK values each go to ``split_row`` instead
                  (``use_split_row``: a threshold on the dimensions, not a list of shapes).

Count the work first: ~5 FLOPs but 8 bytes per element -- softmax is bound by memory bandwidth. At 4096 x 4096
the floor on an H200 (~4.2 TB/s measured copy) is 134 MB / 4.2 TB/s = 32 us.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, uintp

from ._intrinsics import aligned16, load4, store4
from ._launch import Launch, ceil_div, check_array, is_device_array, sm_count, version

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def reference(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float64, returned as float32."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


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
    # The public suite (issue 16), by regime: `gpukernels bench --suite` measures every one of them.
    "suite": {
        "few_long_rows": [(1, 262144), (1, 2**20), (8, 131072)],
        "vocabulary": [(64, 32000), (1024, 32768)],
        "square": [(4096, 4096), (3000, 3000)],
        "many_short_rows": [(16384, 1024), (65536, 128), (2**20, 16)],
    },
}


def _check(x):
    x = check_array("x", x, 2, "(M, N)")
    return (x,), {}, tuple(x.shape)


# ----------------------------------------------------------------------------------------------------------
# 1. naive: one thread per row
# ----------------------------------------------------------------------------------------------------------
NAIVE_THREADS = 128


@cuda.jit
def naive_kernel(x, y):
    # Thread i owns row i and makes three passes over it. Traffic per element: 3 loads + 1 store.
    i = cuda.grid(1)
    m, n = x.shape
    if i < m:
        row_max = float32(-math.inf)
        for j in range(n):  # pass 1: max (reads the row)
            row_max = max(row_max, x[i, j])
        total = float32(0.0)
        for j in range(n):  # pass 2: sum of exponentials (reads the row again)
            total += math.exp(x[i, j] - row_max)
        for j in range(n):  # pass 3: normalise (reads it a third time, writes the output)
            y[i, j] = math.exp(x[i, j] - row_max) / total


# ----------------------------------------------------------------------------------------------------------
# 2. optimized: a block (or warp) per row, values kept in registers, shuffle reductions
# ----------------------------------------------------------------------------------------------------------
WARP = 32
FULL_MASK = 0xFFFFFFFF
MAX_THREADS = 1024
SUBWARP_ELEMS = 8  # values per lane for rows of <= 512 (fewer registers, more resident warps: measured)
ELEMS = 16  # values per thread the row length aims for (benchmarks/NOTES.md: enough loads in flight per thread)
WARPS_PER_BLOCK = 4  # short rows: warps per block
VEC_MAX_N = 128  # rows up to this long use 16-byte loads and stores when aligned (warp_vec_kernel)
# Long rows get a block of 512 threads. Caching 32 values each in registers alone takes 95 registers per thread
# (ptxas, sm_90): one block (16 warps) per SM. Capped at 64 registers by launch_bounds(512, 2), so that two
# blocks share an SM's 65536, a thread keeps HYBRID_ELEMS = 41 values (63 registers, no spills); the rest of the
# row goes to shared memory, up to a block's static 48 KB less the reduction scratch.
LONG_THREADS = 512
HYBRID_ELEMS = 41
SHARED_MAX = 48 * 1024 // 4 - 2 * WARP  # 12224 floats
SHARED_CACHE = SHARED_MAX // LONG_THREADS * LONG_THREADS  # 11776 floats (46 KB): 23 values per thread
MAX_CACHED = LONG_THREADS * HYBRID_ELEMS + SHARED_CACHE  # 32768: the longest row read from global memory once


@cuda.jit(device=True, inline=True)
def warp_max(v):
    # Butterfly: after the 5 steps (xor with 16, 8, 4, 2, 1) every lane holds the maximum of all 32 lanes.
    # A range, not a tuple of offsets: Numba indexes a tuple through a branch tree, and that loop stays rolled.
    for k in range(5):
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 16 >> k))
    return v


@cuda.jit(device=True, inline=True)
def warp_sum(v):
    for k in range(5):
        v += cuda.shfl_xor_sync(FULL_MASK, v, 16 >> k)
    return v


@cuda.jit(device=True, inline=True)
def online_update(m, s, v):
    # One value into a running max m and a running sum s of exp(x - m): when the max grows, the sum so far is
    # rescaled by exp(m_old - m_new) ("online softmax": max and sum in one read).
    if v > m:
        s = s * math.exp(m - v) + float32(1.0)
        m = v
    elif v != -math.inf:
        s += math.exp(v - m)
    return m, s


@cuda.jit(device=True, inline=True)
def rebase(m, s, new_max):
    # A sum s of exp(x - m) re-expressed as a sum of exp(x - new_max); an empty part (m = -inf) adds nothing.
    return s * math.exp(m - new_max) if m != -math.inf else float32(0.0)


@dataclass(frozen=True)
class Config:
    """How ``optimized`` runs a row of n values. Every field is a compile-time constant of the kernel (see
    ``_make_kernels``), so the per-thread cache is an array of registers."""

    threads: int  # threads per row: a power of two up to 32 (a warp holds 32 // threads rows), or a multiple of 32
    elems: int  # values per thread cached in registers
    cached: bool  # False: the row is too long for the chip; two-pass online kernel
    warps_per_block: int = 1  # rows of at most a warp: how many warps share a block
    shared: int = 0  # values of the row cached in shared memory (a multiple of threads), before the registers'
    min_blocks: int = 0  # launch_bounds(block size, min_blocks): caps registers so min_blocks blocks fit per SM
    vec: bool = False  # rows of a warp or less: 16-byte loads and stores (rows 16-byte aligned: the launcher checks)

    @property
    def block(self) -> tuple:
        return (WARP, self.warps_per_block) if self.threads <= WARP else (self.threads,)

    @property
    def rows_per_block(self) -> int:
        return self.warps_per_block * (WARP // self.threads) if self.threads <= WARP else 1

    def __iter__(self):
        # Unpacks as ``threads, elems, cached = optimized_config(n)``, the three numbers that matter most.
        return iter((self.threads, self.elems, self.cached))


def _make_kernels(cfg: Config):
    """The kernel that runs ``cfg``: ``warp_kernel`` (a warp or part of one per row), ``cached_kernel`` (a
    block per row) or ``online_kernel`` (rows too long to cache).

    Cached values are indexed as ``x[uintp(i), uintp(j)]``: an unsigned index tells Numba that it is not
    negative, so it drops Python's wraparound (``j + n if j < 0``, a select per load) and every load becomes one
    base address plus a constant offset. Bounds are tested as ``e * threads < rest`` -- a constant against one
    register -- instead of keeping every 64-bit j alive until the store: 512 threads x 64 values went from 116
    to 96 registers per thread (ptxas for sm_90).
    """
    threads, elems = cfg.threads, cfg.elems
    lanes = min(threads, WARP)  # lanes that share a row within a warp
    steps = lanes.bit_length() - 1  # log2(lanes): shuffle steps of one reduction
    warps = -(-threads // WARP)  # warps that share a row
    rows_per_warp = WARP // lanes
    in_shared = cfg.shared // threads  # values per thread cached in shared memory
    assert threads & (threads - 1) == 0 if threads <= WARP else threads % WARP == 0
    assert cfg.shared % threads == 0 and cfg.shared <= SHARED_MAX
    warps_per_block, shared_size = cfg.warps_per_block, max(cfg.shared, 1)  # plain ints: Numba constants
    jit = cuda.jit(launch_bounds=(math.prod(cfg.block), cfg.min_blocks)) if cfg.min_blocks else cuda.jit

    @cuda.jit(device=True, inline=True)
    def lanes_reduce(v, is_max):
        # Butterfly over the `lanes` lanes of a row: xor with lanes/2, ..., 2, 1 never leaves the row's aligned
        # segment of the warp, and after log2(lanes) steps every lane of it holds the result. A range (not a
        # tuple of offsets, which Numba indexes through a branch tree) so that the loop unrolls to constants.
        for k in range(steps):
            other = cuda.shfl_xor_sync(FULL_MASK, v, (lanes >> 1) >> k)
            v = max(v, other) if is_max else v + other
        return v

    @cuda.jit(device=True, inline=True)
    def block_reduce(v, scratch, is_max):
        # Reduce within each warp with shuffles, then across warps through shared memory.
        v = lanes_reduce(v, is_max)
        if warps > 1:
            lane = cuda.threadIdx.x % WARP
            warp = cuda.threadIdx.x // WARP
            if lane == 0:
                scratch[warp] = v
            cuda.syncthreads()
            v = scratch[lane] if lane < warps else (float32(-math.inf) if is_max else float32(0.0))
            v = lanes_reduce(v, is_max)
            cuda.syncthreads()  # scratch is reused by the next reduction
        return v

    @jit
    def warp_kernel(x, y):
        # Lanes 0..L-1 of a warp own one row, lanes L..2L-1 the next, ... (L = lanes, 32 // L rows per warp); lane
        # p of a row caches its values p, p + L, p + 2L, ... A load instruction of the warp reads L consecutive
        # floats of each of its rows (whole 32-byte sectors from L = 8 on), and each reduction is log2(L)
        # shuffles -- 4 for a 128-value row on 16 lanes instead of 5 on a full warp. No barrier anywhere.
        vals = cuda.local.array(elems, float32)
        t = cuda.threadIdx.x
        i = (cuda.blockIdx.x * warps_per_block + cuda.threadIdx.y) * rows_per_warp + (t >> steps)
        p = t & (lanes - 1)
        m, n = x.shape
        # Lanes of a row past the end of x (M not a multiple of the block's rows) see an empty row: they load
        # and store nothing but still shuffle, as shfl_xor_sync(FULL_MASK) needs all 32 lanes.
        rest = n - p if i < m else 0  # value e of this lane is x[i, p + e * L]; it exists if e * L < rest
        row_max = float32(-math.inf)
        for e in range(elems):  # all loads are issued before the first shuffle
            vals[e] = x[uintp(i), uintp(p + e * lanes)] if e * lanes < rest else float32(-math.inf)
            row_max = max(row_max, vals[e])
        row_max = lanes_reduce(row_max, True)
        row_sum = float32(0.0)
        for e in range(elems):
            vals[e] = math.exp(vals[e] - row_max) if e * lanes < rest else float32(0.0)
            row_sum += vals[e]
        row_sum = lanes_reduce(row_sum, False)
        inv = float32(1.0) / row_sum if i < m else float32(0.0)  # an empty row's sum is 0
        for e in range(elems):
            if e * lanes < rest:
                y[uintp(i), uintp(p + e * lanes)] = vals[e] * inv

    @jit
    def warp_vec_kernel(x, y):
        # warp_kernel with 16-byte accesses: lane p of a row owns the runs of 4 values at 4 * (p + g * L), so a
        # warp's load g reads 4 * L consecutive floats of each of its rows -- whole 32-byte sectors even for rows
        # of 16 (L = 2: 16 rows x 32 bytes), where warp_kernel's 4-byte loads read 8 bytes of a row each. A
        # quarter of the load and store instructions, for the rows where they are most of the work.
        vals = cuda.local.array(elems, float32)
        t = cuda.threadIdx.x
        i = (cuda.blockIdx.x * warps_per_block + cuda.threadIdx.y) * rows_per_warp + (t >> steps)
        p = t & (lanes - 1)
        m, n = x.shape
        rest = n - 4 * p if i < m else 0  # run g of this lane is x[i, 4 * (p + g * L) ...]; it exists if 4*g*L < rest
        row_max = float32(-math.inf)
        for g in range(elems // 4):
            if 4 * g * lanes < rest:
                vals[4 * g], vals[4 * g + 1], vals[4 * g + 2], vals[4 * g + 3] = load4(
                    x, uintp(i), uintp(4 * (p + g * lanes)))
            else:
                for q in range(4):
                    vals[4 * g + q] = float32(-math.inf)
            for q in range(4):
                row_max = max(row_max, vals[4 * g + q])
        row_max = lanes_reduce(row_max, True)
        row_sum = float32(0.0)
        for g in range(elems // 4):
            for q in range(4):
                vals[4 * g + q] = math.exp(vals[4 * g + q] - row_max) if 4 * g * lanes < rest else float32(0.0)
                row_sum += vals[4 * g + q]
        row_sum = lanes_reduce(row_sum, False)
        inv = float32(1.0) / row_sum if i < m else float32(0.0)
        for g in range(elems // 4):
            if 4 * g * lanes < rest:
                store4(y, uintp(i), uintp(4 * (p + g * lanes)), vals[4 * g] * inv, vals[4 * g + 1] * inv,
                       vals[4 * g + 2] * inv, vals[4 * g + 3] * inv)

    @jit
    def cached_kernel(x, y):
        # Block b owns row b. Each thread loads `elems` values, strided by the block size, so that each load
        # instruction of a warp reads 32 consecutive floats (one 128-byte line). Reads 1x, writes 1x.
        # With cfg.shared > 0, the first `shared` values of the row are cached in shared memory instead:
        # thread t keeps values k * threads + t in slot k * threads + t, its own (no barrier needed; a warp
        # touches 32 consecutive words, no bank conflict). They are loaded first: each passes through a
        # register only until it is stored, so the registers' peak is the `elems` values that follow.
        scratch = cuda.shared.array(WARP, float32)
        part = cuda.shared.array(shared_size, float32)
        vals = cuda.local.array(elems, float32)
        i = cuda.blockIdx.x
        t = cuda.threadIdx.x
        rest = x.shape[1] - t  # this thread's value number e is x[i, t + e * threads]; it exists if e * threads < rest
        m = float32(-math.inf)
        for k in range(in_shared):
            j = t + k * threads
            v = x[i, uintp(j)] if k * threads < rest else float32(-math.inf)
            part[k * threads + t] = v
            m = max(m, v)
        for e in range(elems):
            j = t + (in_shared + e) * threads
            vals[e] = x[i, uintp(j)] if (in_shared + e) * threads < rest else float32(-math.inf)
            m = max(m, vals[e])
        m = block_reduce(m, scratch, True)
        s = float32(0.0)
        for k in range(in_shared):
            v = math.exp(part[k * threads + t] - m) if k * threads < rest else float32(0.0)
            part[k * threads + t] = v
            s += v
        for e in range(elems):
            vals[e] = math.exp(vals[e] - m) if (in_shared + e) * threads < rest else float32(0.0)
            s += vals[e]
        s = block_reduce(s, scratch, False)
        inv = float32(1.0) / s
        for k in range(in_shared):
            j = t + k * threads
            if k * threads < rest:
                y[i, uintp(j)] = part[k * threads + t] * inv
        for e in range(elems):
            j = t + (in_shared + e) * threads
            if (in_shared + e) * threads < rest:
                y[i, uintp(j)] = vals[e] * inv

    @jit
    def online_kernel(x, y):
        # Rows too long for registers. Pass 1 keeps a running max m and a running sum s of exp(x - m),
        # rescaling s by exp(m_old - m_new) when the max grows ("online softmax"): max and sum in one read.
        # Pass 2 reads the row again and writes it. Traffic per element: 2 loads + 1 store.
        scratch = cuda.shared.array(WARP, float32)
        i = cuda.blockIdx.x
        t = cuda.threadIdx.x
        n = x.shape[1]
        m = float32(-math.inf)
        s = float32(0.0)
        for j in range(t, n, threads):
            m, s = online_update(m, s, x[i, j])
        row_max = block_reduce(m, scratch, True)
        # Each thread's sum was relative to its own max; bring it to the row's max before adding.
        s = rebase(m, s, row_max)
        s = block_reduce(s, scratch, False)
        inv = float32(1.0) / s
        for j in range(t, n, threads):
            y[i, j] = math.exp(x[i, j] - row_max) * inv

    if not cfg.cached:
        return online_kernel
    if threads <= WARP:
        return warp_vec_kernel if cfg.vec else warp_kernel
    return cached_kernel


_KERNELS: dict[Config, object] = {}


def _pow2(v: int) -> int:
    return 1 << (max(1, v) - 1).bit_length()  # the power of two >= v: few distinct compiled kernels


def optimized_config(n: int) -> Config:
    """How ``optimized`` runs rows of length n: threads per row, cached values per thread, cached or not, and
    the rest of `Config`. The one place where the configuration is chosen.

    Measured on the H200 (benchmarks/NOTES.md): ELEMS = 16 values per thread is the sweet spot -- enough
    independent loads in flight per thread without wasting registers -- so a row gets about n / 16 threads:

    * n <= 512: a power of two L from 1 to 32 lanes of a warp with about SUBWARP_ELEMS = 8 values each (16 for
      n = 128: a warp holds 2 rows), WARPS_PER_BLOCK warps per block, no barrier. Measured at 65536x128: 16 or 32
      lanes 0.0189 ms (1.30x torch), 8 lanes x 16 values 0.0195 (53 registers), 4 lanes x 32 0.0353 (95);
      short rows gain from more warps per SM more than from more loads per lane;
    * n <= 8192: a block of 64 to 512 threads with 16 values each in registers;
    * n <= MAX_CACHED = 32768: 512 threads under launch_bounds(512, 2), HYBRID_ELEMS = 41 values each in
      registers and the rest of the row (up to 46 KB) in shared memory -- two blocks per SM instead of the one
      that 32 or 64 values per thread in registers allow (1024x32768: 0.0793 ms instead of 0.1001);
    * longer rows: the two-pass online kernel, 1024 threads.
    """
    if n > MAX_CACHED:
        return Config(MAX_THREADS, 1, False)
    if n <= WARP * ELEMS:  # one warp or part of one per row
        lanes = min(WARP, _pow2(-(-n // SUBWARP_ELEMS)))
        return Config(lanes, _pow2(-(-n // lanes)), True, warps_per_block=WARPS_PER_BLOCK)
    threads = _pow2(-(-n // ELEMS))
    if n <= LONG_THREADS * ELEMS:
        threads = min(threads, LONG_THREADS)
        return Config(threads, _pow2(-(-n // threads)), True)
    shared = -(-max(0, n - LONG_THREADS * HYBRID_ELEMS) // LONG_THREADS) * LONG_THREADS
    return Config(LONG_THREADS, HYBRID_ELEMS, True, shared=shared, min_blocks=2)


def with_vector_access(cfg: Config, n: int, aligned: bool) -> Config:
    """``cfg`` with 16-byte loads and stores (`warp_vec_kernel`) where they pay and are safe: rows of a warp or
    less, at most VEC_MAX_N long (beyond, a warp's 4-byte loads already read whole sectors), 16-byte aligned
    (``aligned``: the launcher checked x and y), and values per lane in whole runs of 4."""
    if aligned and n % 4 == 0 and cfg.cached and cfg.threads <= WARP and n <= VEC_MAX_N and cfg.elems % 4 == 0:
        return dataclasses.replace(cfg, vec=True)
    return cfg


def optimized_kernel(cfg: Config):
    """The compiled kernel for ``cfg`` (built once per configuration)."""
    if cfg not in _KERNELS:
        _KERNELS[cfg] = _make_kernels(cfg)
    return _KERNELS[cfg]


# ----------------------------------------------------------------------------------------------------------
# 3. split_row: several blocks per row, for few long rows
# ----------------------------------------------------------------------------------------------------------
SPLIT_THREADS = 512  # threads per block
SPLIT_WARPS = SPLIT_THREADS // WARP
SPLIT_MIN_CHUNK = SPLIT_THREADS * 8  # a block's piece of a row: at least 8 values per thread
SPLIT_BLOCKS_PER_SM = 4  # the pieces per row aim at this many blocks per SM in all


@cuda.jit(device=True, inline=True)
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
    # a running sum s of exp(x - m) per thread (online, as in `optimized`'s long rows); the block's (max, sum)
    # goes to part[i, c]. Traffic: one load per element, 8 bytes per piece stored.
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


def use_split_row(m: int, n: int, sms: int | None = None) -> bool:
    """``optimized``'s rule: split rows when a block per row leaves SMs idle (fewer rows than SMs) and a row is long
    enough for at least two pieces."""
    return m < (sms or sm_count()) and n >= 2 * SPLIT_MIN_CHUNK


# ----------------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------------


@version("softmax", _check, kernels=[naive_kernel])
def naive(x, y):
    """One thread per row, three serial passes: reads each element 3 times, lanes of a warp on different rows."""
    m = x.shape[0]
    return [Launch(naive_kernel, (-(-m // NAIVE_THREADS),), (NAIVE_THREADS,), (x, y))]


@version("softmax", _check, kernels=[split_partial_kernel, split_normalize_kernel])
def split_row(x, y):
    """Several blocks per row: each reduces its piece to (max, sum), then each normalises its piece with all of them."""
    return split_row_launches(x, y)


@version("softmax", _check)
def optimized(x, y):
    """A warp or block per row (loads kept in registers, shuffle reductions), or split_row for few long rows."""
    m, n = x.shape
    if use_split_row(m, n):
        return split_row_launches(x, y)
    cfg = with_vector_access(optimized_config(n), n, aligned16(x, y))
    grid = -(-m // cfg.rows_per_block)  # a block per row, or 32 // threads rows for each of its warps
    return [Launch(optimized_kernel(cfg), (grid,), cfg.block, (x, y))]


def describe(x) -> str:
    """What ``optimized`` runs for x, in words (the suite's JSON records it)."""
    m, n = x.shape
    if use_split_row(m, n):
        return f"split_row {{'pieces': {split_pieces(m, n)}}}: {m} row(s) for {sm_count()} SMs, rows of {n} values"
    cfg = with_vector_access(optimized_config(n), n, aligned16(x))
    kind = ("warp_vec" if cfg.vec else "warp") if cfg.threads <= WARP else ("cached" if cfg.cached else "online")
    return (f"{kind} {{'threads': {cfg.threads}, 'elems': {cfg.elems}}}: "
            f"{cfg.threads} thread(s) per row of {n}, {cfg.elems} values each")


optimized.describe = describe

#: Every version, naive first and the per-shape choice last.
VERSIONS = {v.name: v for v in (naive, split_row, optimized)}
