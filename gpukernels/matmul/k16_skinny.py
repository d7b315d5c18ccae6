"""Step 16 of the matmul ladder, ``skinny``: a matrix-vector kernel for C with few rows (M <= 16), or few columns
(N <= 4: the vector on the right, below).

At M = 1 (a matrix-vector product, the decoding step of a language model) C = a @ B does 2 FLOPs per element of B
and reads every element of B once: 2*K*N FLOPs against 4*K*N bytes, 0.5 FLOP/byte, far below the H200's ridge of
~12. No tile size fixes that -- a 64 x 64 tile would compute 63 rows of zeros -- so the yardstick is the copy
bandwidth: the kernel is as fast as it streams B. ``thread_16x8`` at M = 1 runs 64 blocks of 256 x 128 for 132 SMs,
each streaming its B panel through shared memory: 0.03x cuBLAS.

The kernel: each thread owns 4 consecutive columns of C (one 16-byte load of a row of B per k) and up to ``rows``
rows, the 8 warps of a block take every 8th k of the block's slice of K, and blocks along the grid's y split K so
that the grid fills the GPU (``SKINNY_BLOCKS_PER_SM`` blocks per SM). A lane's A values are the same for the whole
warp (one broadcast load). At the end the 8 warps' partial sums meet in shared memory, and a block adds its slice's
sum into C with atomics when K is split (C zeroed first). Each thread issues its loads two rows of B at a time, so
that two 16-byte loads are in flight per thread.
"""

from __future__ import annotations

import functools

from numba import cuda, float32

from .._intrinsics import address, aligned16, load4
from .._launch import Launch, ceil_div, version
from ..softmax import warp_sum
from . import _common
from ._common import check, zero_launches

SKINNY_MAX_M = 16  # rows of C one block keeps in registers (4 columns each); more rows re-read B per 16
SKINNY_COLS = 4  # consecutive columns per thread: one 16-byte load of B
SKINNY_WARPS = 8  # warps per block, interleaved along K
SKINNY_TILE_N = 32 * SKINNY_COLS  # 128 columns of C per block
SKINNY_BLOCKS_PER_SM = 8  # blocks per SM the K split aims at: enough loads in flight to stream B
# With A in shared memory (4 rows or more) a block keeps its loads of B in flight on its own; 4 blocks per SM ran
# M = 16, N = K = 8192 in 0.129 ms (1.12x cuBLAS), 8 in 0.155 (H200, benchmarks/NOTES.md).
SKINNY_SHARED_BLOCKS_PER_SM = 4
SKINNY_MIN_K = 2 * SKINNY_WARPS * 16  # a slice of K gives every warp at least 16 rows of B (32 loads in flight)


@functools.cache
def make_load_b(vec: bool):
    """4 consecutive elements of row k of B from column col, 0 past the edges (one 16-byte load when ``vec``)."""

    @cuda.jit(device=True, forceinline=True)
    def load_b(b, k, col, ok):
        n = b.shape[1]
        if vec and ok and col + SKINNY_COLS <= n:
            return load4(b, k, col)
        z = float32(0.0)
        if not ok:
            return z, z, z, z
        return (b[k, col] if col < n else z, b[k, col + 1] if col + 1 < n else z,
                b[k, col + 2] if col + 2 < n else z, b[k, col + 3] if col + 3 < n else z)

    return load_b


@functools.cache
def get_skinny_kernel(rows: int, vec: bool):
    """The kernel for ``rows`` rows of C per block (a power of two <= 16), with 16-byte loads of B when ``vec``
    (the launcher checked that B's rows are 16-byte aligned). Both size registers or pick code: compile-time."""

    load_b = make_load_b(vec)

    @cuda.jit(device=True, forceinline=True)
    def fma_rows(a, acc, row0, k, b0, b1, b2, b3):
        m = a.shape[0]
        for i in range(rows):
            av = a[row0 + i, k] if row0 + i < m else float32(0.0)  # the same address for the whole warp
            acc[i, 0] += av * b0
            acc[i, 1] += av * b1
            acc[i, 2] += av * b2
            acc[i, 3] += av * b3

    def skinny_kernel(a, b, c):
        # grid (ceil(N / 128), splits of K, ceil(M / rows)), 256 threads
        red = cuda.shared.array((SKINNY_WARPS, SKINNY_TILE_N), float32)
        acc = cuda.local.array((rows, SKINNY_COLS), float32)
        t = cuda.threadIdx.x
        lane, w = t & 31, t >> 5
        m, kdim = a.shape
        n = b.shape[1]
        col = cuda.blockIdx.x * SKINNY_TILE_N + lane * SKINNY_COLS
        row0 = cuda.blockIdx.z * rows
        k_chunk = (kdim + cuda.gridDim.y - 1) // cuda.gridDim.y
        k_begin = cuda.blockIdx.y * k_chunk
        k_end = min(k_begin + k_chunk, kdim)
        for i in range(rows):
            for q in range(SKINNY_COLS):
                acc[i, q] = 0.0
        for k in range(k_begin + w, k_end, 2 * SKINNY_WARPS):
            k2 = k + SKINNY_WARPS
            # both loads first, then the FMAs: two 16-byte loads in flight per thread
            b0, b1, b2, b3 = load_b(b, k, col, True)
            d0, d1, d2, d3 = load_b(b, k2, col, k2 < k_end)
            fma_rows(a, acc, row0, k, b0, b1, b2, b3)
            if k2 < k_end:
                fma_rows(a, acc, row0, k2, d0, d1, d2, d3)
        # The 8 warps' sums of each row meet in shared memory (column lane*4 + q stored at q*32 + lane: no bank
        # conflicts), and the first 128 threads add them up and write (or, when K is split, add) the result.
        for i in range(rows):
            for q in range(SKINNY_COLS):
                red[w, q * 32 + lane] = acc[i, q]
            cuda.syncthreads()
            if t < SKINNY_TILE_N:
                s = float32(0.0)
                for v in range(SKINNY_WARPS):
                    s += red[v, t]
                r, cc = row0 + i, cuda.blockIdx.x * SKINNY_TILE_N + (t & 31) * SKINNY_COLS + (t >> 5)
                if r < m and cc < n:
                    if cuda.gridDim.y > 1:
                        cuda.atomic.add(c, (r, cc), s)
                    else:
                        c[r, cc] = s
            cuda.syncthreads()  # before the next row overwrites `red`

    skinny_kernel.__name__ = skinny_kernel.__qualname__ = f"skinny_rows{rows}" + ("_vec" if vec else "") + "_kernel"
    return cuda.jit(skinny_kernel)


SKINNY_CHUNK = 256  # k values of A's rows staged in shared memory per pass (16 rows: 16 KB)


@functools.cache
def get_skinny_shared_kernel(rows: int, vec: bool):
    """``skinny`` with the block's rows of A staged in shared memory, k-major (``a_sh[k, i]``), for 4 <= rows <= 32:
    at one k the warp needs A[0..rows, k], the same for every lane, and reads it as rows / 4 sixteen-byte
    broadcasts from shared memory instead of ``rows`` separate loads through L1 -- at M = 16 those 16 loads per 64
    FMAs, not DRAM, were the limit (0.36x cuBLAS, benchmarks/NOTES.md)."""
    assert rows % 4 == 0 and 4 <= rows <= 32
    stage = rows * SKINNY_CHUNK // (32 * SKINNY_WARPS)  # A elements each thread stages per chunk
    r_shift = rows.bit_length() - 1

    load_b = make_load_b(vec)

    @cuda.jit(device=True, forceinline=True)
    def fma_rows(a_sh, acc, kk, b0, b1, b2, b3):
        for i4 in range(rows // 4):
            a0, a1, a2, a3 = load4(a_sh, kk, i4 * 4)  # one 16-byte broadcast: the whole warp reads one address
            acc[i4 * 4, 0] += a0 * b0
            acc[i4 * 4, 1] += a0 * b1
            acc[i4 * 4, 2] += a0 * b2
            acc[i4 * 4, 3] += a0 * b3
            acc[i4 * 4 + 1, 0] += a1 * b0
            acc[i4 * 4 + 1, 1] += a1 * b1
            acc[i4 * 4 + 1, 2] += a1 * b2
            acc[i4 * 4 + 1, 3] += a1 * b3
            acc[i4 * 4 + 2, 0] += a2 * b0
            acc[i4 * 4 + 2, 1] += a2 * b1
            acc[i4 * 4 + 2, 2] += a2 * b2
            acc[i4 * 4 + 2, 3] += a2 * b3
            acc[i4 * 4 + 3, 0] += a3 * b0
            acc[i4 * 4 + 3, 1] += a3 * b1
            acc[i4 * 4 + 3, 2] += a3 * b2
            acc[i4 * 4 + 3, 3] += a3 * b3

    def skinny_shared_kernel(a, b, c):
        # grid (ceil(N / 128), splits of K, ceil(M / rows)), 256 threads
        a_sh = cuda.shared.array((SKINNY_CHUNK, rows), float32, alignment=16)
        red = cuda.shared.array((SKINNY_WARPS, SKINNY_TILE_N), float32)
        acc = cuda.local.array((rows, SKINNY_COLS), float32)
        t = cuda.threadIdx.x
        lane, w = t & 31, t >> 5
        m, kdim = a.shape
        n = b.shape[1]
        col = cuda.blockIdx.x * SKINNY_TILE_N + lane * SKINNY_COLS
        row0 = cuda.blockIdx.z * rows
        k_chunk = (kdim + cuda.gridDim.y - 1) // cuda.gridDim.y
        k_begin = cuda.blockIdx.y * k_chunk
        k_end = min(k_begin + k_chunk, kdim)
        for i in range(rows):
            for q in range(SKINNY_COLS):
                acc[i, q] = 0.0
        for kc in range(k_begin, k_end, SKINNY_CHUNK):
            kn = min(SKINNY_CHUNK, k_end - kc)
            # Stage A[row0 .. row0 + rows, kc .. kc + kn): consecutive threads take consecutive rows of one k, so
            # the shared stores are conflict-free; the loads are `rows` rows apart, but A is small (it stays in L2).
            for l in range(stage):
                e = t + l * (32 * SKINNY_WARPS)
                i, kk = e & (rows - 1), e >> r_shift
                a_sh[kk, i] = a[row0 + i, kc + kk] if row0 + i < m and kk < kn else float32(0.0)
            cuda.syncthreads()
            for kk in range(w, kn, 2 * SKINNY_WARPS):
                k2 = kk + SKINNY_WARPS
                b0, b1, b2, b3 = load_b(b, kc + kk, col, True)
                d0, d1, d2, d3 = load_b(b, kc + k2, col, k2 < kn)
                fma_rows(a_sh, acc, kk, b0, b1, b2, b3)
                if k2 < kn:
                    fma_rows(a_sh, acc, k2, d0, d1, d2, d3)
            cuda.syncthreads()  # every warp done with this chunk of A before the next one overwrites it
        for i in range(rows):
            for q in range(SKINNY_COLS):
                red[w, q * 32 + lane] = acc[i, q]
            cuda.syncthreads()
            if t < SKINNY_TILE_N:
                s = float32(0.0)
                for v in range(SKINNY_WARPS):
                    s += red[v, t]
                r, cc = row0 + i, cuda.blockIdx.x * SKINNY_TILE_N + (t & 31) * SKINNY_COLS + (t >> 5)
                if r < m and cc < n:
                    if cuda.gridDim.y > 1:
                        cuda.atomic.add(c, (r, cc), s)
                    else:
                        c[r, cc] = s
            cuda.syncthreads()

    skinny_shared_kernel.__name__ = skinny_shared_kernel.__qualname__ = (
        f"skinny_shared_rows{rows}" + ("_vec" if vec else "") + "_kernel")
    return cuda.jit(skinny_shared_kernel)


# -- the other side: few columns of C (N <= SKINNY_MAX_N), the vector on the right --------------------------------
# C = A b with b of N <= 4 columns does 2 FLOPs per element of A and reads all of A once: bound by reading A. One warp
# streams COLS_ROWS rows of A, its lanes 16 bytes apart (4 consecutive k each, 128 k per pass), and keeps N partial
# sums per row; the b values of a lane's 4 k (4 * N floats, contiguous in b) serve all COLS_ROWS rows. At the end
# each sum goes round the warp by shuffles and lane 0 writes it (or adds it, when K is split).
SKINNY_MAX_N = 4  # columns of C a lane keeps per row
COLS_ROWS = 4  # rows of A per warp: each b value a lane loads serves 4 rows (b's loads a quarter of A's)
COLS_BLOCK_ROWS = COLS_ROWS * SKINNY_WARPS  # 32 rows of C per block
COLS_BLOCKS_PER_SM = 8  # blocks per SM the K split aims at: 64 warps, 4 loads of 16 bytes in flight per lane
COLS_MIN_K = 1024  # a slice of K gives every lane at least 8 passes


@functools.cache
def get_skinny_cols_kernel(cols: int, vec: bool):
    """The kernel for C with ``cols`` <= 4 columns. With ``vec`` a lane loads 4 consecutive k of a row of A in one
    16-byte load, and ``b`` is B seen as (K * N / 4, 4): the 4 * N values of those 4 k are ``cols`` rows of it
    (the launcher checked K % 4 == 0 and the alignment); otherwise lanes take consecutive k, one value at a time."""
    assert 1 <= cols <= SKINNY_MAX_N
    b_values = 4 * cols  # a lane's b values per pass (a closure constant: the local array's size)

    def skinny_cols_kernel(a, b, c):
        # grid (ceil(M / 32), splits of K), 256 threads: warp w of block x has rows x * 32 + 4w .. + 4
        acc = cuda.local.array((COLS_ROWS, cols), float32)
        av = cuda.local.array((COLS_ROWS, 4), float32)
        bv = cuda.local.array(b_values, float32)
        t = cuda.threadIdx.x
        lane, w = t & 31, t >> 5
        m, kdim = a.shape
        row0 = cuda.blockIdx.x * COLS_BLOCK_ROWS + w * COLS_ROWS
        # the slices of K are multiples of 4 deep, so that a lane's 16-byte loads stay aligned in every slice
        k_chunk = (kdim + 4 * cuda.gridDim.y - 1) // (4 * cuda.gridDim.y) * 4
        k_begin = cuda.blockIdx.y * k_chunk
        k_end = min(k_begin + k_chunk, kdim)
        for i in range(COLS_ROWS):
            for j in range(cols):
                acc[i, j] = 0.0
        if row0 < m:  # the whole warp: one row0
            if vec:
                for k in range(k_begin + 4 * lane, k_end, 128):
                    for i in range(COLS_ROWS):  # the loads first: COLS_ROWS 16-byte loads of A in flight
                        if row0 + i < m:
                            av[i, 0], av[i, 1], av[i, 2], av[i, 3] = load4(a, row0 + i, k)
                        else:
                            av[i, 0], av[i, 1], av[i, 2], av[i, 3] = 0.0, 0.0, 0.0, 0.0
                    for r in range(cols):  # b[k .. k + 4, :] is rows k * cols / 4 .. + cols of the (K * N / 4, 4) view
                        bv[4 * r], bv[4 * r + 1], bv[4 * r + 2], bv[4 * r + 3] = load4(b, (k >> 2) * cols + r, 0)
                    for i in range(COLS_ROWS):
                        for q in range(4):
                            for j in range(cols):
                                acc[i, j] += av[i, q] * bv[q * cols + j]
            else:
                for k in range(k_begin + lane, k_end, 32):
                    for j in range(cols):
                        bv[j] = b[k, j]
                    for i in range(COLS_ROWS):
                        x = a[row0 + i, k] if row0 + i < m else float32(0.0)
                        for j in range(cols):
                            acc[i, j] += x * bv[j]
        for i in range(COLS_ROWS):
            for j in range(cols):
                s = warp_sum(acc[i, j])  # the softmax lesson's butterfly of 5 shuffles
                if lane == 0 and row0 + i < m:
                    if cuda.gridDim.y > 1:
                        cuda.atomic.add(c, (row0 + i, j), s)
                    else:
                        c[row0 + i, j] = s

    skinny_cols_kernel.__name__ = skinny_cols_kernel.__qualname__ = (
        f"skinny_cols{cols}" + ("_vec" if vec else "") + "_kernel")
    return cuda.jit(skinny_cols_kernel)


def cols_splits(m: int, k: int, sms: int | None = None) -> int:
    """Slices of K for the few-columns kernel: COLS_BLOCKS_PER_SM blocks per SM and no more, each slice at least
    COLS_MIN_K deep."""
    sms = sms or _common.sm_count()
    return max(1, min(sms * COLS_BLOCKS_PER_SM // ceil_div(m, COLS_BLOCK_ROWS), k // COLS_MIN_K))


def cols_vec(a, b) -> bool:
    """Whether the few-columns kernel may load 16 bytes at a time: A's rows and B's data start on 16-byte
    boundaries and K is a multiple of 4 (then the 4 * N values of 4 consecutive k of B are 16-byte aligned too)."""
    return aligned16(a) and b.shape[0] % 4 == 0 and address(b) % 16 == 0


def skinny_cols_launches(a, b, c, splits: int | None = None) -> list[Launch]:
    """The few-columns launches: C zeroed first when K is split (default `cols_splits`), then the kernel, which gets
    B as (K * N / 4, 4) rows of 16 bytes when `cols_vec`."""
    m, n = c.shape
    k = a.shape[1]
    splits = splits or cols_splits(m, k)
    vec = cols_vec(a, b)
    kernel = get_skinny_cols_kernel(n, vec)
    view = b.reshape(k * n // 4, 4) if vec else b
    grid = (ceil_div(m, COLS_BLOCK_ROWS), splits)
    return (zero_launches(c) if splits > 1 else []) + [Launch(kernel, grid, (32 * SKINNY_WARPS,), (a, view, c))]


def skinny_rows(m: int) -> int:
    """Rows of C per block: the smallest power of two >= M, at most 16."""
    return min(SKINNY_MAX_M, 1 << max(0, m - 1).bit_length())


def skinny_splits(m: int, n: int, k: int, sms: int | None = None, rows: int | None = None) -> int:
    """How many slices of K: as many blocks as SKINNY_BLOCKS_PER_SM per SM hold (SKINNY_SHARED_BLOCKS_PER_SM with A
    in shared memory) and no more, each slice >= SKINNY_MIN_K deep."""
    sms = sms or _common.sm_count()
    rows = rows or skinny_rows(m)
    blocks = ceil_div(n, SKINNY_TILE_N) * ceil_div(m, rows)
    per_sm = SKINNY_SHARED_BLOCKS_PER_SM if rows >= 4 else SKINNY_BLOCKS_PER_SM
    # Rounded down: one block more than the SMs hold starts a second round (M = 16: 9 slices, 576 blocks, ran
    # 0.166 ms; 8 slices, 512 blocks, 0.129 ms -- H200, benchmarks/NOTES.md).
    return max(1, min(sms * per_sm // blocks, k // SKINNY_MIN_K))


def skinny_launches(a, b, c, splits: int | None = None, rows: int | None = None, shared: bool | None = None
                    ) -> list[Launch]:
    """The skinny launches: ``rows`` rows of C per block (default `skinny_rows`), A staged in shared memory when
    ``shared`` (default: when a block has 4 rows or more)."""
    m, n = c.shape
    k = a.shape[1]
    if m > SKINNY_MAX_M and n <= SKINNY_MAX_N and rows is None and shared is None:
        return skinny_cols_launches(a, b, c, splits)  # the vector on the right: stream A instead
    rows = rows or skinny_rows(m)
    shared = rows >= 4 if shared is None else shared
    splits = splits or skinny_splits(m, n, k, rows=rows)
    kernel = (get_skinny_shared_kernel if shared else get_skinny_kernel)(rows, aligned16(b))
    grid = (ceil_div(n, SKINNY_TILE_N), splits, ceil_div(m, rows))
    return (zero_launches(c) if splits > 1 else []) + [Launch(kernel, grid, (32 * SKINNY_WARPS,), (a, b, c))]


@version("matmul", check, kernels=[get_skinny_kernel(1, False), get_skinny_shared_kernel(16, True),
                                   get_skinny_cols_kernel(1, True), get_skinny_cols_kernel(3, False)])
def skinny(a, b, c):
    """Matrix-vector kernel for few rows (or few columns) of C: B (or A) streamed once at copy bandwidth, K split
    to fill the GPU."""
    return skinny_launches(a, b, c)
