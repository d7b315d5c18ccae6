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
2. ``optimized``  a warp per row (rows up to 512 elements, 4 warps per block; rows up to 128 elements two
                  per warp, for more loads in flight) or a block per row (longer rows). Its threads read the
                  row together in consecutive chunks (coalesced), keep the values in registers, and reduce max
                  and sum in parallel with warp shuffles (``shfl_xor_sync``: a butterfly, log2(32) = 5 steps
                  per warp) and shared memory across warps. Rows up to ``MAX_CACHED`` = 32768 elements are
                  read from global memory **once** and written once: 8 bytes per element, the minimum. Longer
                  rows don't fit in registers; they are read twice (an "online" pass computing max and sum
                  together, then a normalising pass): 12 bytes per element.

Count the work first: ~5 FLOPs but 8 bytes per element -- softmax is bound by memory bandwidth. At 4096 x 4096
the floor on an H200 (~4.2 TB/s measured copy) is 134 MB / 4.2 TB/s = 32 us.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, uintp

from ._launch import Launch, check_array, version

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
MAX_ELEMS = 64  # values per thread kept in registers (with 512 threads per block)
MAX_CACHED = (MAX_THREADS // 2) * MAX_ELEMS  # 32768: the longest row read from global memory once
WARP_ROW_MAX = 16 * WARP  # 512: rows up to this length get one warp each (up to 16 values per lane)
WARP_ROWS = 4  # warps per block in that case
# Shared memory as a second cache (Config.shared; an option that benchmarks/softmax_variants.py measures): a
# 32768-value row is 128 KB; 512 threads x 64 registers hold only 80 KB of it if two blocks are to share an
# SM's 65536 registers, but 46 KB more fit in a block's static shared memory (48 KB, less the scratch).
SHARED_MAX = 48 * 1024 // 4 - 2 * WARP  # 12224 floats


@dataclass(frozen=True)
class Config:
    """How ``optimized`` runs a row of n values. Every field is a compile-time constant of the kernel (see
    ``_make_kernels``), so the per-thread cache is an array of registers."""

    threads: int  # threads per row, a multiple of 32
    elems: int  # values per thread cached in registers
    cached: bool  # False: the row is too long for the chip; two-pass online kernel
    rows_per_warp: int = 1  # one warp per row (threads == 32): how many rows each warp owns
    warps_per_block: int = 1  # one warp per row: how many such warps share a block
    shared: int = 0  # values of the row cached in shared memory (a multiple of threads), before the registers'
    min_blocks: int = 0  # launch_bounds(block size, min_blocks): caps registers so min_blocks blocks fit per SM

    @property
    def block(self) -> tuple:
        return (WARP, self.warps_per_block) if self.threads == WARP else (self.threads,)

    @property
    def rows_per_block(self) -> int:
        return self.warps_per_block * self.rows_per_warp if self.threads == WARP else 1

    def __iter__(self):
        # Unpacks as ``threads, elems, cached = optimized_config(n)``, the three numbers that matter most.
        return iter((self.threads, self.elems, self.cached))


@cuda.jit(device=True, inline=True)
def warp_max(v):
    # Butterfly: after the 5 steps every lane holds the maximum of all 32 lanes.
    for offset in (16, 8, 4, 2, 1):
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, offset))
    return v


@cuda.jit(device=True, inline=True)
def warp_sum(v):
    for offset in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL_MASK, v, offset)
    return v


def _make_kernels(cfg: Config):
    """The kernel that runs ``cfg``: ``warp_kernel`` (one warp per row), ``cached_kernel`` (a block per row)
    or ``online_kernel`` (rows too long to cache).

    Cached values are indexed as ``x[i, uintp(j)]``: an unsigned index tells Numba that j is not negative, so
    it drops Python's wraparound (``j + n if j < 0``, a select per load) and every load becomes one base
    address plus a constant offset. Bounds are tested as ``e * threads < rest`` -- a constant against one
    register -- instead of keeping every 64-bit j alive until the store: 512 threads x 64 values went from
    116 to 96 registers per thread (ptxas for sm_90), a warp per 128-value row from 40 to 32.
    """
    threads, elems, rows = cfg.threads, cfg.elems, cfg.rows_per_warp
    warps = threads // WARP
    in_shared = cfg.shared // threads  # values per thread cached in shared memory
    assert cfg.shared % threads == 0 and cfg.shared <= SHARED_MAX and (rows == 1 or threads == WARP)
    warps_per_block, shared_size = cfg.warps_per_block, max(cfg.shared, 1)  # plain ints: Numba constants
    jit = cuda.jit(launch_bounds=(math.prod(cfg.block), cfg.min_blocks)) if cfg.min_blocks else cuda.jit

    @cuda.jit(device=True, inline=True)
    def block_reduce(v, scratch, is_max):
        # Reduce within each warp with shuffles, then across warps through shared memory.
        v = warp_max(v) if is_max else warp_sum(v)
        if warps > 1:
            lane = cuda.threadIdx.x % WARP
            warp = cuda.threadIdx.x // WARP
            if lane == 0:
                scratch[warp] = v
            cuda.syncthreads()
            v = scratch[lane] if lane < warps else (float32(-math.inf) if is_max else float32(0.0))
            v = warp_max(v) if is_max else warp_sum(v)
            cuda.syncthreads()  # scratch is reused by the next reduction
        return v

    @jit
    def warp_kernel(x, y):
        # Warp w of the block owns `rows` consecutive rows; lane t caches their values t, t + 32, t + 64, ...
        # All rows * elems loads are issued before the first shuffle: a 128-column row is only 4 loads per
        # lane (512 bytes per warp), too few to keep DRAM busy while the warp reduces. No barrier anywhere.
        vals = cuda.local.array((rows, elems), float32)
        row_max = cuda.local.array(rows, float32)
        row_sum = cuda.local.array(rows, float32)
        first = (cuda.blockIdx.x * warps_per_block + cuda.threadIdx.y) * rows
        t = cuda.threadIdx.x
        m, n = x.shape
        rest = n - t  # this lane's value number e is x[row, t + e * 32]; it exists if e * 32 < rest
        for r in range(rows):
            row_max[r] = float32(-math.inf)
            for e in range(elems):
                j = t + e * WARP
                vals[r, e] = x[first + r, uintp(j)] if first + r < m and e * WARP < rest else float32(-math.inf)
                row_max[r] = max(row_max[r], vals[r, e])
        # The rows' butterflies interleaved: `rows` independent shuffles in flight per step.
        for offset in (16, 8, 4, 2, 1):
            for r in range(rows):
                row_max[r] = max(row_max[r], cuda.shfl_xor_sync(FULL_MASK, row_max[r], offset))
        for r in range(rows):
            row_sum[r] = float32(0.0)
            for e in range(elems):
                ok = first + r < m and e * WARP < rest
                vals[r, e] = math.exp(vals[r, e] - row_max[r]) if ok else float32(0.0)
                row_sum[r] += vals[r, e]
        for offset in (16, 8, 4, 2, 1):
            for r in range(rows):
                row_sum[r] += cuda.shfl_xor_sync(FULL_MASK, row_sum[r], offset)
        for r in range(rows):
            if first + r < m:  # rows past the end of x (M not a multiple of the block's rows) stay unwritten
                inv = float32(1.0) / row_sum[r]
                for e in range(elems):
                    j = t + e * WARP
                    if e * WARP < rest:
                        y[first + r, uintp(j)] = vals[r, e] * inv

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
            v = x[i, j]
            if v > m:
                s = s * math.exp(m - v) + float32(1.0)
                m = v
            elif v != -math.inf:
                s += math.exp(v - m)
        row_max = block_reduce(m, scratch, True)
        # Each thread's sum was relative to its own max; bring it to the row's max before adding.
        s = s * math.exp(m - row_max) if m != -math.inf else float32(0.0)
        s = block_reduce(s, scratch, False)
        inv = float32(1.0) / s
        for j in range(t, n, threads):
            y[i, j] = math.exp(x[i, j] - row_max) * inv

    if not cfg.cached:
        return online_kernel
    return warp_kernel if threads == WARP else cached_kernel


_KERNELS: dict[Config, object] = {}


def optimized_config(n: int) -> Config:
    """How ``optimized`` runs rows of length n: threads per row, cached values per thread, cached or not, and
    the rest of `Config`. The one place where the configuration is chosen.

    Measured on the H200 (benchmarks/NOTES.md): 16 values per thread is the sweet spot -- enough independent
    loads in flight per thread without wasting registers -- so a row gets about n / 16 threads, at least one
    warp and at most 512: a block of 1024 threads may use only 64 registers per thread (65536 per SM), too
    few for the cache. Long rows therefore keep up to 64 values per thread; beyond MAX_CACHED they use the
    two-pass online kernel. Rows up to WARP_ROW_MAX get one warp each (no barrier at all), WARP_ROWS warps
    per block; rows of up to 128 values give each warp two rows, so that a lane has 8 loads (1 KB per warp)
    in flight instead of 4.
    """
    if n > MAX_CACHED:
        return Config(MAX_THREADS, 1, False)
    threads = WARP
    while threads < MAX_THREADS // 2 and threads * 16 < n:
        threads *= 2
    elems = max(1, -(-n // threads))
    elems = 1 << (elems - 1).bit_length()  # round up to a power of two: few distinct compiled kernels
    if threads == WARP:
        return Config(WARP, elems, True, rows_per_warp=2 if n <= 4 * WARP else 1, warps_per_block=WARP_ROWS)
    return Config(threads, elems, True)


def optimized_kernel(cfg: Config):
    """The compiled kernel for ``cfg`` (built once per configuration)."""
    if cfg not in _KERNELS:
        _KERNELS[cfg] = _make_kernels(cfg)
    return _KERNELS[cfg]


# ----------------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------------


@version("softmax", _check, kernels=[naive_kernel])
def naive(x, y):
    """One thread per row, three serial passes: reads each element 3 times, lanes of a warp on different rows."""
    m = x.shape[0]
    return [Launch(naive_kernel, (-(-m // NAIVE_THREADS),), (NAIVE_THREADS,), (x, y))]


@version("softmax", _check)
def optimized(x, y):
    """A warp or block per row: coalesced loads kept in registers, shuffle reductions; one read for rows <= 32768."""
    m, n = x.shape
    cfg = optimized_config(n)
    grid = -(-m // cfg.rows_per_block)  # a block per row, or rows_per_warp rows for each of its warps
    return [Launch(optimized_kernel(cfg), (grid,), cfg.block, (x, y))]


#: Every version, naive first and fastest last.
VERSIONS = {v.name: v for v in (naive, optimized)}
