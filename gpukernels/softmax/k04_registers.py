"""Step 4 of the softmax lesson, ``registers``: the row kept on chip between the passes, so it is read once.

``online`` still reads every element twice, because nothing holds the row between the pass that finds max and sum
and the pass that writes. Here a thread *keeps* its values: ``cuda.local.array(elems, float32)`` with a
compile-time size and constant indices becomes registers. The row is loaded once, max and sum are computed from the
registers, and the output is written from them: 1 load and 1 store per element, 8 bytes -- the minimum.

A block per row, about ELEMS = 16 values per thread (enough loads in flight per thread without wasting registers,
measured), so a row of n values gets n / 16 threads (32 to 512, a power of two). Past 8192 values 16 per thread
would need more than 512 threads; 32 values each take 95 registers per thread (one block per SM), so under
launch_bounds(512, 2) a thread keeps HYBRID_ELEMS = 41 values (63 registers) and the rest of the row, up to 46 KB,
goes to *shared memory*: two blocks per SM. That holds rows up to MAX_CACHED = 32768; longer ones take ``online``.
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32, uintp

from .._launch import Launch, version
from ._common import WARP, Config, _check, _pow2
from .k02_block_row import reductions
from .k03_online import online_launches

ELEMS = 16  # values per thread the row length aims for (benchmarks/NOTES.md: enough loads in flight per thread)
# Long rows get a block of 512 threads. Caching 32 values each in registers alone takes 95 registers per thread
# (ptxas, sm_90): one block (16 warps) per SM. Capped at 64 registers by launch_bounds(512, 2), so that two
# blocks share an SM's 65536, a thread keeps HYBRID_ELEMS = 41 values (63 registers, no spills); the rest of the
# row goes to shared memory, up to a block's static 48 KB less the reduction scratch.
LONG_THREADS = 512
HYBRID_ELEMS = 41
SHARED_MAX = 48 * 1024 // 4 - 2 * WARP  # 12224 floats
SHARED_CACHE = SHARED_MAX // LONG_THREADS * LONG_THREADS  # 11776 floats (46 KB): 23 values per thread
MAX_CACHED = LONG_THREADS * HYBRID_ELEMS + SHARED_CACHE  # 32768: the longest row read from global memory once


@functools.cache
def cached_kernel_for(cfg: Config):
    """The block-per-row kernel that keeps ``cfg.elems`` values per thread in registers (and ``cfg.shared`` of the
    row in shared memory): built once per configuration, every field a compile-time constant.

    Cached values are indexed as ``x[i, uintp(j)]``: an unsigned index tells Numba that it is not negative, so it
    drops Python's wraparound (``j + n if j < 0``, a select per load) and every load becomes one base address plus a
    constant offset. Bounds are tested as ``e * threads < rest`` -- a constant against one register -- instead of
    keeping every 64-bit j alive until the store: 512 threads x 64 values went from 116 to 96 registers per thread
    (ptxas for sm_90)."""
    threads, elems = cfg.threads, cfg.elems
    in_shared = cfg.shared // threads  # values per thread cached in shared memory
    assert threads % WARP == 0 and cfg.shared % threads == 0 and cfg.shared <= SHARED_MAX
    shared_size = max(cfg.shared, 1)  # a plain int: a Numba constant
    _, block_reduce = reductions(threads)
    jit = cuda.jit(launch_bounds=(threads, cfg.min_blocks)) if cfg.min_blocks else cuda.jit

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

    return cached_kernel


def registers_config(n: int) -> Config | None:
    """A block per row of n values: about ELEMS values per thread in registers (32 to LONG_THREADS threads), or
    LONG_THREADS x HYBRID_ELEMS in registers plus the rest in shared memory; None past MAX_CACHED."""
    if n > MAX_CACHED:
        return None
    if n <= LONG_THREADS * ELEMS:
        threads = min(LONG_THREADS, max(WARP, _pow2(-(-n // ELEMS))))
        return Config(threads, _pow2(-(-n // threads)), True)
    shared = -(-max(0, n - LONG_THREADS * HYBRID_ELEMS) // LONG_THREADS) * LONG_THREADS
    return Config(LONG_THREADS, HYBRID_ELEMS, True, shared=shared, min_blocks=2)


def cached_launches(cfg: Config, x, y) -> list[Launch]:
    return [Launch(cached_kernel_for(cfg), (x.shape[0],), (cfg.threads,), (x, y))]


@version("softmax", _check)
def registers(x, y):
    """A block per row keeps its row in registers (and shared memory past 8192 values): one read, one write."""
    cfg = registers_config(x.shape[1])
    return online_launches(x, y) if cfg is None else cached_launches(cfg, x, y)
