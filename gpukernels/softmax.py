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
2. ``optimized``  a warp per row (rows up to 512 elements, 4 rows per block) or a block per row (longer
                  rows). Its threads read the row together in consecutive chunks
                  (coalesced), keep the values in registers, and reduce max and sum in parallel with warp
                  shuffles (``shfl_xor_sync``: a butterfly, log2(32) = 5 steps per warp) and shared memory
                  across warps. Rows up to ``MAX_CACHED`` = 32768 elements are read from global memory **once**
                  and written once: 8 bytes per element, the minimum. Longer rows don't fit in registers; they
                  are read twice (an "online" pass computing max and sum together, then a normalising pass):
                  12 bytes per element.

Count the work first: ~5 FLOPs but 8 bytes per element -- softmax is bound by memory bandwidth. At 4096 x 4096
the floor on an H200 (~4.2 TB/s measured copy) is 134 MB / 4.2 TB/s = 32 us.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

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
WARP_ROWS = 4  # rows (warps) per block in that case


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


def _make_kernels(threads: int, elems: int, rows: int = 1):
    """The optimized kernels for ``threads`` threads per row (a multiple of 32), ``elems`` cached values per
    thread and ``rows`` rows per block (more than one only when a single warp owns a row). All three are
    compile-time constants, so the per-thread cache is an array of registers."""
    warps = threads // WARP
    assert rows == 1 or warps == 1

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

    @cuda.jit
    def cached_kernel(x, y):
        # Block b owns row b. Each thread loads `elems` values, strided by the block size, so that each load
        # instruction of a warp reads 32 consecutive floats (one 128-byte line). Reads 1x, writes 1x.
        scratch = cuda.shared.array(WARP, float32)
        vals = cuda.local.array(elems, float32)
        i = cuda.blockIdx.x * rows + cuda.threadIdx.y
        t = cuda.threadIdx.x
        n = x.shape[1]
        if rows > 1 and i >= x.shape[0]:
            return  # a whole warp leaves together; with one warp per row there is no block barrier to miss
        m = float32(-math.inf)
        for e in range(elems):
            j = t + e * threads
            vals[e] = x[i, j] if j < n else float32(-math.inf)
            m = max(m, vals[e])
        m = block_reduce(m, scratch, True)
        s = float32(0.0)
        for e in range(elems):
            j = t + e * threads
            vals[e] = math.exp(vals[e] - m) if j < n else float32(0.0)
            s += vals[e]
        s = block_reduce(s, scratch, False)
        inv = float32(1.0) / s
        for e in range(elems):
            j = t + e * threads
            if j < n:
                y[i, j] = vals[e] * inv

    @cuda.jit
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

    return cached_kernel, online_kernel


_KERNELS: dict[tuple[int, int], tuple] = {}


def optimized_config(n: int) -> tuple[int, int, bool]:
    """(threads per row, cached values per thread, cached?) for rows of length n.

    Measured on the H200 (benchmarks/NOTES.md): 16 values per thread is the sweet spot -- enough independent
    loads in flight per thread without wasting registers -- so a row gets about n / 16 threads, at least one
    warp and at most 512: a block of 1024 threads may use only 64 registers per thread (65536 per SM), too
    few for the cache. Long rows therefore keep up to 64 values per thread; beyond MAX_CACHED they use the
    two-pass online kernel. Rows up to WARP_ROW_MAX get one warp each (no barrier at all).
    """
    if n > MAX_CACHED:
        return MAX_THREADS, 1, False
    threads = WARP
    while threads < MAX_THREADS // 2 and threads * 16 < n:
        threads *= 2
    elems = max(1, -(-n // threads))
    elems = 1 << (elems - 1).bit_length()  # round up to a power of two: few distinct compiled kernels
    return threads, elems, True


def optimized_kernels(threads: int, elems: int, rows: int = 1):
    key = (threads, elems, rows)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernels(threads, elems, rows)
    return _KERNELS[key]


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
    threads, elems, cached = optimized_config(n)
    if threads == WARP:  # several rows per block, one warp each
        cached_kernel, _ = optimized_kernels(threads, elems, WARP_ROWS)
        return [Launch(cached_kernel, (-(-m // WARP_ROWS),), (WARP, WARP_ROWS), (x, y))]
    cached_kernel, online_kernel = optimized_kernels(threads, elems)
    return [Launch(cached_kernel if cached else online_kernel, (m,), (threads,), (x, y))]


#: Every version, naive first and fastest last.
VERSIONS = {v.name: v for v in (naive, optimized)}
