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

On the H200 the ladder goes 274 ms -> 100 -> 17.5 -> 17.9 -> 19.7 -> 17.6 -> 8.4 -> 5.0 -> 4.9 -> 4.1 -> 3.64
-> 3.69 -> 3.69 -> 3.30 -> 3.21 ms at 4096^3 (cuBLAS: 2.69 ms, so the last step is at 84%); wave_fit changes
nothing there but takes 1024^3 from 0.12 to 0.095 ms. benchmarks/NOTES.md says why each step moved as much (or
as little) as it did, and what the profiler showed.

``VERSIONS`` lists them in that order (naive first, fastest last); ``optimized`` is the last one. Run
``gpukernels bench matmul`` on a GPU for times, ``gpukernels trace matmul --version tiled`` anywhere for the
memory traffic each version really generates.

Count the work first: 2*M*N*K FLOPs, and at least 4*(M*K + K*N + M*N) bytes of DRAM traffic. At 4096^3 that is
137 GFLOP against 201 MB, an arithmetic intensity of ~680 FLOP/byte -- far above the H200's ~14 FLOP/byte
ridge point, so matmul is bound by arithmetic when the data is reused well, and by memory when it is not
(the naive kernel re-reads A and B from global memory N and M times).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, uint64

from ._intrinsics import aligned16, load4
from ._launch import Launch, LaunchError, ceil_div, check_array, version

# ----------------------------------------------------------------------------------------------------------
# Reference and inputs
# ----------------------------------------------------------------------------------------------------------


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A @ B accumulated in float64, returned as float32."""
    return (np.asarray(a, np.float64) @ np.asarray(b, np.float64)).astype(np.float32)


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
    "test_gpu": [(1, 1, 1), (1823, 781, 129), (4095, 257, 33), (513, 1025, 1000), (2052, 2056, 260)],
    "trace": (64, 64, 64),
    "demo_sim": (64, 64, 64),
    "demo_gpu": (4096, 4096, 4096),
    "bench": [(4096, 4096, 4096), (1024, 1024, 1024), (4095, 4097, 4093)],
}


def _check(a, b):
    a = check_array("a", a, 2, "(M, K)")
    b = check_array("b", b, 2, "(K, N)")
    if a.shape[1] != b.shape[0]:
        raise LaunchError(
            f"inner dimensions must match: a is (M, K) = {tuple(a.shape)} and b is (K, N) = {tuple(b.shape)}, "
            f"so K is {a.shape[1]} for a but {b.shape[0]} for b"
        )
    return (a, b), {}, (a.shape[0], b.shape[1])


# ----------------------------------------------------------------------------------------------------------
# 1. naive: one thread per C element, threadIdx.x -> row (uncoalesced)
# ----------------------------------------------------------------------------------------------------------
NAIVE_BLOCK = (32, 8)  # 32 lanes along x = one warp per row of the block


@cuda.jit
def naive_kernel(a, b, c):
    # Thread (x, y) of the grid computes C[x, y]. The 32 lanes of a warp have consecutive x, i.e. consecutive
    # *rows*: their reads a[i, k] are K floats apart and their writes c[i, j] N floats apart -> one 32-byte
    # sector per lane. Global traffic: every C element reads a full row of A and column of B: 2*K loads,
    # so A is read N times and B M times in total.
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


# ----------------------------------------------------------------------------------------------------------
# 2. coalesced: threadIdx.x -> column
# ----------------------------------------------------------------------------------------------------------
@cuda.jit
def coalesced_kernel(a, b, c):
    # Same loads as naive, but lanes now differ in the column j: b[k, j..j+31] is one 128-byte line,
    # a[i, k] is the same address for the whole warp (one broadcast), and the store c[i, j..j+31] is one line.
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


# ----------------------------------------------------------------------------------------------------------
# 3. tiled: shared-memory tiles of A and B
# ----------------------------------------------------------------------------------------------------------
TILE = 16


@cuda.jit
def tiled_kernel(a, b, c):
    # The block computes a TILE x TILE tile of C. For each of ceil(K / TILE) phases, its TILE*TILE threads
    # load one TILE x TILE tile of A and one of B (one element each), then every thread does TILE FMAs from
    # shared memory. Each loaded element is used by TILE threads, so A is read ceil(N / TILE) times in total
    # instead of N times (and B ceil(M / TILE) times instead of M).
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, kdim = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, kdim, TILE):  # bounded by K, not by gridDim
        # Out-of-range elements are loaded as 0 so the inner loop needs no guard (0 * x adds nothing).
        a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < kdim else float32(0.0)
        b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < kdim and col < n else float32(0.0)
        # Wait until the whole tile is loaded before anyone reads it.
        cuda.syncthreads()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        # Wait until everyone is done reading before the next phase overwrites the tile.
        cuda.syncthreads()
    if row < m and col < n:  # the guard comes after the loop: every thread must reach both barriers
        c[row, col] = acc


# ----------------------------------------------------------------------------------------------------------
# 4. regblock_1d: each thread computes TM outputs of a column
# ----------------------------------------------------------------------------------------------------------
B1_BM, B1_BN, B1_BK, B1_TM = 64, 64, 8, 8
B1_THREADS = (B1_BM // B1_TM) * B1_BN  # 512


@cuda.jit
def regblock_1d_kernel(a, b, c):
    # Block tile BM x BN of C, K advanced BK at a time. Thread t owns column t % BN and rows
    # (t // BN) * TM ... + TM - 1. Per k step it reads one B value from shared memory into a register and
    # reuses it TM times: TM FMAs per TM + 1 shared loads, against 2 loads per FMA in `tiled`.
    a_tile = cuda.shared.array((B1_BM, B1_BK), float32)
    b_tile = cuda.shared.array((B1_BK, B1_BN), float32)
    acc = cuda.local.array(B1_TM, float32)
    t = cuda.threadIdx.x
    tcol = t % B1_BN
    trow = t // B1_BN
    row0 = cuda.blockIdx.y * B1_BM
    col0 = cuda.blockIdx.x * B1_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(B1_TM):
        acc[i] = 0.0
    # Tile loads: BM * BK = BK * BN = 512 elements = one per thread; consecutive threads read consecutive
    # addresses of a row (A: 8 floats = one 32-byte sector per row; B: 64 floats = two 128-byte lines).
    ar, ak = t // B1_BK, t % B1_BK
    bk, bc = t // B1_BN, t % B1_BN
    for k0 in range(0, kdim, B1_BK):
        a_tile[ar, ak] = a[row0 + ar, k0 + ak] if row0 + ar < m and k0 + ak < kdim else float32(0.0)
        b_tile[bk, bc] = b[k0 + bk, col0 + bc] if k0 + bk < kdim and col0 + bc < n else float32(0.0)
        cuda.syncthreads()
        for kk in range(B1_BK):
            bv = b_tile[kk, tcol]
            for i in range(B1_TM):
                acc[i] += a_tile[trow * B1_TM + i, kk] * bv
        cuda.syncthreads()
    col = col0 + tcol
    for i in range(B1_TM):
        row = row0 + trow * B1_TM + i
        if row < m and col < n:
            c[row, col] = acc[i]


# ----------------------------------------------------------------------------------------------------------
# 5. regblock_2d: each thread computes a TM x TN block (outer product in registers)
# ----------------------------------------------------------------------------------------------------------
B2_BM, B2_BN, B2_BK, B2_TM, B2_TN = 128, 128, 8, 8, 8
B2_THREADS = (B2_BM // B2_TM) * (B2_BN // B2_TN)  # 256
B2_A_LOADS = B2_BM * B2_BK // B2_THREADS  # 4 loads of A per thread per k step
B2_B_LOADS = B2_BK * B2_BN // B2_THREADS  # 4 loads of B per thread per k step


@cuda.jit
def regblock_2d_kernel(a, b, c):
    # Block tile 128 x 128, 256 threads, each owning an 8 x 8 block of C. Per k step a thread loads 8 values
    # of A and 8 of B from shared memory into registers and does 64 FMAs with them: 4 FMAs per shared load.
    # A is stored transposed in shared memory (a_tile[k, m]) so that the 8 values a thread needs are
    # consecutive. Global traffic: A is read ceil(N / 128) times, B ceil(M / 128) times.
    a_tile = cuda.shared.array((B2_BK, B2_BM), float32)
    b_tile = cuda.shared.array((B2_BK, B2_BN), float32)
    acc = cuda.local.array((B2_TM, B2_TN), float32)
    a_reg = cuda.local.array(B2_TM, float32)
    b_reg = cuda.local.array(B2_TN, float32)
    t = cuda.threadIdx.x
    trow = t // (B2_BN // B2_TN)
    tcol = t % (B2_BN // B2_TN)
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(B2_TM):
        for j in range(B2_TN):
            acc[i, j] = 0.0
    for k0 in range(0, kdim, B2_BK):
        for l in range(B2_A_LOADS):
            idx = t + l * B2_THREADS
            r, kk = idx // B2_BK, idx % B2_BK
            a_tile[kk, r] = a[row0 + r, k0 + kk] if row0 + r < m and k0 + kk < kdim else float32(0.0)
        for l in range(B2_B_LOADS):
            idx = t + l * B2_THREADS
            kk, cc = idx // B2_BN, idx % B2_BN
            b_tile[kk, cc] = b[k0 + kk, col0 + cc] if k0 + kk < kdim and col0 + cc < n else float32(0.0)
        cuda.syncthreads()
        for kk in range(B2_BK):
            for i in range(B2_TM):
                a_reg[i] = a_tile[kk, trow * B2_TM + i]
            for j in range(B2_TN):
                b_reg[j] = b_tile[kk, tcol * B2_TN + j]
            for i in range(B2_TM):
                for j in range(B2_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    for i in range(B2_TM):
        row = row0 + trow * B2_TM + i
        for j in range(B2_TN):
            col = col0 + tcol * B2_TN + j
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ----------------------------------------------------------------------------------------------------------
# 6. conflict_free: the same blocking, with thread->output mapping and tile layout free of bank conflicts
# ----------------------------------------------------------------------------------------------------------
CF_PAD = 4  # a_tile row length BM + 4: the transposed stores of A land in 32 different banks
CF_ROW = B2_BM + CF_PAD


@cuda.jit
def conflict_free_kernel(a, b, c):
    # In regblock_2d thread (trow, tcol) owns columns tcol*8 .. tcol*8+7: in one load b_tile[kk, tcol*8 + j]
    # the 16 distinct tcol of a warp hit addresses 8 apart, i.e. only 4 distinct banks -> a 4-way conflict
    # (4 shared-memory wavefronts per load). Here the thread owns columns tcol + 16*j and rows trow + 16*i:
    # lanes read 16 consecutive words (conflict-free; the other half-warp reads the same words, a broadcast).
    # The transposed store a_tile[kk, r] had 8 lanes with the same r and different kk writing one bank; a row
    # length of BM + 4 spreads them over 8 banks.
    a_tile = cuda.shared.array((B2_BK, CF_ROW), float32)
    b_tile = cuda.shared.array((B2_BK, B2_BN), float32)
    acc = cuda.local.array((B2_TM, B2_TN), float32)
    a_reg = cuda.local.array(B2_TM, float32)
    b_reg = cuda.local.array(B2_TN, float32)
    t = cuda.threadIdx.x
    trow = t // (B2_BN // B2_TN)
    tcol = t % (B2_BN // B2_TN)
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(B2_TM):
        for j in range(B2_TN):
            acc[i, j] = 0.0
    for k0 in range(0, kdim, B2_BK):
        for l in range(B2_A_LOADS):
            idx = t + l * B2_THREADS
            r, kk = idx // B2_BK, idx % B2_BK
            a_tile[kk, r] = a[row0 + r, k0 + kk] if row0 + r < m and k0 + kk < kdim else float32(0.0)
        for l in range(B2_B_LOADS):
            idx = t + l * B2_THREADS
            kk, cc = idx // B2_BN, idx % B2_BN
            b_tile[kk, cc] = b[k0 + kk, col0 + cc] if k0 + kk < kdim and col0 + cc < n else float32(0.0)
        cuda.syncthreads()
        for kk in range(B2_BK):
            for i in range(B2_TM):
                a_reg[i] = a_tile[kk, trow + 16 * i]
            for j in range(B2_TN):
                b_reg[j] = b_tile[kk, tcol + 16 * j]
            for i in range(B2_TM):
                for j in range(B2_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    for i in range(B2_TM):
        row = row0 + trow + 16 * i
        for j in range(B2_TN):
            col = col0 + tcol + 16 * j
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ----------------------------------------------------------------------------------------------------------
# 7. double_buffered: the next tiles are fetched while the current ones are multiplied
# ----------------------------------------------------------------------------------------------------------
DB_BK = 16
DB_A_LOADS = B2_BM * DB_BK // B2_THREADS  # 8
DB_B_LOADS = DB_BK * B2_BN // B2_THREADS  # 8


@cuda.jit
def double_buffered_kernel(a, b, c):
    # Two copies of each shared tile. While the block multiplies tile t from one copy, each thread has already
    # issued the global loads of tile t + 1 into registers; after the FMAs it stores them into the other copy.
    # The ~600-cycle DRAM/L2 latency is hidden behind 16 * 64 FMAs per thread, and one barrier per tile
    # suffices (writers and readers of a copy are always separated by a barrier).
    a_tile = cuda.shared.array((2, DB_BK, CF_ROW), float32)
    b_tile = cuda.shared.array((2, DB_BK, B2_BN), float32)
    acc = cuda.local.array((B2_TM, B2_TN), float32)
    a_reg = cuda.local.array(B2_TM, float32)
    b_reg = cuda.local.array(B2_TN, float32)
    a_next = cuda.local.array(DB_A_LOADS, float32)
    b_next = cuda.local.array(DB_B_LOADS, float32)
    t = cuda.threadIdx.x
    trow = t // (B2_BN // B2_TN)
    tcol = t % (B2_BN // B2_TN)
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(B2_TM):
        for j in range(B2_TN):
            acc[i, j] = 0.0
    # Thread t loads A elements (r, kk) = divmod(t + l*256, 16) and B elements (kk, cc) = divmod(t + l*256, 128).
    for l in range(DB_A_LOADS):
        r, kk = (t + l * B2_THREADS) // DB_BK, (t + l * B2_THREADS) % DB_BK
        a_tile[0, kk, r] = a[row0 + r, kk] if row0 + r < m and kk < kdim else float32(0.0)
    for l in range(DB_B_LOADS):
        kk, cc = (t + l * B2_THREADS) // B2_BN, (t + l * B2_THREADS) % B2_BN
        b_tile[0, kk, cc] = b[kk, col0 + cc] if kk < kdim and col0 + cc < n else float32(0.0)
    cuda.syncthreads()
    cur = 0
    for k0 in range(0, kdim, DB_BK):
        k1 = k0 + DB_BK
        if k1 < kdim:  # same for every thread of the block: no divergence around the barrier below
            for l in range(DB_A_LOADS):
                r, kk = (t + l * B2_THREADS) // DB_BK, (t + l * B2_THREADS) % DB_BK
                a_next[l] = a[row0 + r, k1 + kk] if row0 + r < m and k1 + kk < kdim else float32(0.0)
            for l in range(DB_B_LOADS):
                kk, cc = (t + l * B2_THREADS) // B2_BN, (t + l * B2_THREADS) % B2_BN
                b_next[l] = b[k1 + kk, col0 + cc] if k1 + kk < kdim and col0 + cc < n else float32(0.0)
        for kk in range(DB_BK):
            for i in range(B2_TM):
                a_reg[i] = a_tile[cur, kk, trow + 16 * i]
            for j in range(B2_TN):
                b_reg[j] = b_tile[cur, kk, tcol + 16 * j]
            for i in range(B2_TM):
                for j in range(B2_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        if k1 < kdim:
            for l in range(DB_A_LOADS):
                r, kk = (t + l * B2_THREADS) // DB_BK, (t + l * B2_THREADS) % DB_BK
                a_tile[1 - cur, kk, r] = a_next[l]
            for l in range(DB_B_LOADS):
                kk, cc = (t + l * B2_THREADS) // B2_BN, (t + l * B2_THREADS) % B2_BN
                b_tile[1 - cur, kk, cc] = b_next[l]
        cuda.syncthreads()
        cur = 1 - cur
    for i in range(B2_TM):
        row = row0 + trow + 16 * i
        for j in range(B2_TN):
            col = col0 + tcol + 16 * j
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ----------------------------------------------------------------------------------------------------------
# 8. vectorized: 128-bit shared-memory loads
# ----------------------------------------------------------------------------------------------------------
V_BK = 8
V_ROW = B2_BM + 4  # a_tile row: 132 floats = 528 bytes, a multiple of 16 (aligned rows) that spreads the stores


@cuda.jit(device=True, inline=True)
def _v_load(a, b, a_next, b_next, k, row0, col0, ar, ak, bk, bc):
    # Thread t fetches 4 consecutive k of one row of A (one 16-byte run) and 4 consecutive columns of one row
    # of B (a warp reads 512 contiguous bytes). Out-of-range elements become 0.
    m, kdim = a.shape
    n = b.shape[1]
    gr = row0 + ar
    for q in range(4):
        a_next[q] = a[gr, k + ak + q] if gr < m and k + ak + q < kdim else float32(0.0)
    for q in range(4):
        b_next[q] = b[k + bk, col0 + bc + q] if k + bk < kdim and col0 + bc + q < n else float32(0.0)


@cuda.jit
def vectorized_kernel(a, b, c):
    # double_buffered issues 16 scalar shared loads (LDS.32) per k step for 64 FMAs. Here each thread owns
    # two 4 x 4 sub-blocks per dimension (rows ty*4 + i and 64 + ty*4 + i, columns likewise), so its 8 A and
    # 8 B values per k step are 4 runs of 4 consecutive floats. With the tiles declared 16-byte aligned
    # (alignment=16), NVVM merges each run into one 128-bit load (ld.shared.v4.f32): 4 load instructions per
    # 64 FMAs. A warp's B loads cover 256 contiguous bytes (no conflict), its A loads 2 addresses (broadcast).
    a_tile = cuda.shared.array((2, V_BK, V_ROW), float32, alignment=16)
    b_tile = cuda.shared.array((2, V_BK, B2_BN), float32, alignment=16)
    acc = cuda.local.array((8, 8), float32)
    a_frag = cuda.local.array(8, float32)
    b_frag = cuda.local.array(8, float32)
    a_next = cuda.local.array(4, float32)
    b_next = cuda.local.array(4, float32)
    # Indices are built with & and >> from threadIdx (never negative): with % and // on signed ints NVVM keeps
    # Numba's negative-index wraparound in every address, which hides the 16-byte alignment from the
    # vectorizer (measured: 1 of 16 shared loads merged instead of 16).
    t = cuda.threadIdx.x
    tx, ty = t & 15, t >> 4
    ar, ak = t >> 1, (t & 1) * 4  # this thread's A element run: row ar, k offsets ak .. ak + 3
    bk, bc = t >> 5, (t & 31) * 4  # this thread's B run: k row bk, columns bc .. bc + 3
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(8):
        for j in range(8):
            acc[i, j] = 0.0
    _v_load(a, b, a_next, b_next, 0, row0, col0, ar, ak, bk, bc)
    for q in range(4):
        a_tile[0, ak + q, ar] = a_next[q]
        b_tile[0, bk, bc + q] = b_next[q]
    cuda.syncthreads()
    step = 0
    for k0 in range(0, kdim, V_BK):
        cur = step & 1
        k1 = k0 + V_BK
        if k1 < kdim:  # block-uniform: no divergence around the barrier
            _v_load(a, b, a_next, b_next, k1, row0, col0, ar, ak, bk, bc)
        for kk in range(V_BK):
            for i in range(4):
                a_frag[i] = a_tile[cur, kk, ty * 4 + i]
                a_frag[4 + i] = a_tile[cur, kk, 64 + ty * 4 + i]
                b_frag[i] = b_tile[cur, kk, tx * 4 + i]
                b_frag[4 + i] = b_tile[cur, kk, 64 + tx * 4 + i]
            for i in range(8):
                for j in range(8):
                    acc[i, j] += a_frag[i] * b_frag[j]
        if k1 < kdim:
            for q in range(4):
                a_tile[cur ^ 1, ak + q, ar] = a_next[q]
                b_tile[cur ^ 1, bk, bc + q] = b_next[q]
        cuda.syncthreads()
        step += 1
    for i in range(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        for j in range(8):
            col = col0 + (j // 4) * 64 + tx * 4 + j % 4
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ----------------------------------------------------------------------------------------------------------
# 9. unrolled: the k loop written out, so every shared-memory address is a base plus a constant
# ----------------------------------------------------------------------------------------------------------
@cuda.jit(device=True, inline=True)
def _outer_product(a_tile, b_tile, cur, kk, ty4, tx4, acc, a_frag, b_frag):
    # One k step: 4 x ld.shared.v4 (8 values of A, 8 of B) and the 8 x 8 outer product, 64 FMAs.
    for i in range(4):
        a_frag[i] = a_tile[cur, kk, ty4 + i]
        a_frag[4 + i] = a_tile[cur, kk, 64 + ty4 + i]
        b_frag[i] = b_tile[cur, kk, tx4 + i]
        b_frag[4 + i] = b_tile[cur, kk, 64 + tx4 + i]
    for i in range(8):
        for j in range(8):
            acc[i, j] += a_frag[i] * b_frag[j]


@cuda.jit(launch_bounds=(B2_THREADS, 2))
def unrolled_kernel(a, b, c):
    # vectorized's `for kk in range(8)` stays a loop in the machine code (SASS): per k step the 64 FFMAs and
    # 4 LDS.128 come with ~30 instructions of loop counter and address arithmetic (kk * 132 * 4 ...), so only
    # ~54% of the instructions the SM issues are FMAs. Neither NVVM nor ptxas unrolls a body this large, and
    # Numba has no unroll pragma, so the 8 steps are written out: kk is a constant in each call, every
    # shared address becomes register + immediate offset, and the loop body is 512 FFMAs + 32 LDS.128 + the
    # tile loads (FFMA share of the loop ~68%, counted in the SASS). The unrolled code keeps more values live
    # (130 registers: one block per SM); launch_bounds(256, 2) asks ptxas for <= 128 so that two blocks still
    # fit, which it manages without spilling.
    a_tile = cuda.shared.array((2, V_BK, V_ROW), float32, alignment=16)
    b_tile = cuda.shared.array((2, V_BK, B2_BN), float32, alignment=16)
    acc = cuda.local.array((8, 8), float32)
    a_frag = cuda.local.array(8, float32)
    b_frag = cuda.local.array(8, float32)
    a_next = cuda.local.array(4, float32)
    b_next = cuda.local.array(4, float32)
    t = cuda.threadIdx.x
    tx4, ty4 = (t & 15) * 4, (t >> 4) * 4
    ar, ak = t >> 1, (t & 1) * 4
    bk, bc = t >> 5, (t & 31) * 4
    row0 = cuda.blockIdx.y * B2_BM
    col0 = cuda.blockIdx.x * B2_BN
    m, kdim = a.shape
    n = b.shape[1]
    for i in range(8):
        for j in range(8):
            acc[i, j] = 0.0
    _v_load(a, b, a_next, b_next, 0, row0, col0, ar, ak, bk, bc)
    for q in range(4):
        a_tile[0, ak + q, ar] = a_next[q]
        b_tile[0, bk, bc + q] = b_next[q]
    cuda.syncthreads()
    step = 0
    for k0 in range(0, kdim, V_BK):
        cur = step & 1
        k1 = k0 + V_BK
        if k1 < kdim:
            _v_load(a, b, a_next, b_next, k1, row0, col0, ar, ak, bk, bc)
        _outer_product(a_tile, b_tile, cur, 0, ty4, tx4, acc, a_frag, b_frag)  # V_BK = 8 steps
        _outer_product(a_tile, b_tile, cur, 1, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 2, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 3, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 4, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 5, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 6, ty4, tx4, acc, a_frag, b_frag)
        _outer_product(a_tile, b_tile, cur, 7, ty4, tx4, acc, a_frag, b_frag)
        if k1 < kdim:
            for q in range(4):
                a_tile[cur ^ 1, ak + q, ar] = a_next[q]
                b_tile[cur ^ 1, bk, bc + q] = b_next[q]
        cuda.syncthreads()
        step += 1
    for i in range(8):
        row = row0 + (i >> 2) * 64 + ty4 + (i & 3)
        for j in range(8):
            col = col0 + (j >> 2) * 64 + tx4 + (j & 3)
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ----------------------------------------------------------------------------------------------------------
# 10. interior:  blocks whose tiles lie wholly inside the matrices skip the bounds checks
# 11. deep_k:    16-deep k tiles instead of 8: twice the work between barriers and loads issued further ahead
# 12. swizzled:  blocks scheduled in groups of 8 tile rows, so concurrently running blocks share tiles in L2
# 13. wave_fit:  a 64 x 64 tile when 128 x 128 tiles would leave SMs idle
# 14. vector_loads: 16-byte global loads (a Numba intrinsic) when the rows are 16-byte aligned
# 15. thread_16x8: 256 x 128 tiles, 16 x 8 outputs per thread -- the shape of cuBLAS's own FP32 kernel
# One kernel factory builds all six (and the small tile): its parameters are the only differences.
# ----------------------------------------------------------------------------------------------------------
def _make_interior_kernel(bm: int, bn: int, bk: int = V_BK, group: int = 1, launch_bounds=None, rows: int = 8,
                          vec: bool = False):
    """The ``unrolled`` kernel, generalised: a bm x bn block tile (multiples of 64), ``rows`` x 8 outputs per
    thread (8 or 16 rows, as rows/4 x 2 sub-blocks of 4 x 4), bk-deep k tiles (8 or 16), an unguarded path for
    interior tiles, an optional grouped block order (``group`` tile rows per group) and optional 16-byte global
    loads on the interior path (``vec``; the launcher must have checked the alignment). All of them size shared
    tiles, register arrays or the thread layout, or pick code, so they are compile-time constants: one kernel is
    compiled per combination."""
    tn, tm = bn // 8, bm // rows  # threads along the columns and along the rows of the tile
    threads = tm * tn
    tn_shift = tn.bit_length() - 1
    subs = rows // 4  # 4 x 4 sub-blocks per thread along M, qm rows apart
    qm, hn = bm // subs, bn // 2  # the second 4 x 4 sub-block along N starts half a tile further
    k_runs = bk // 4  # 4-float runs per row of the A tile
    k_shift = k_runs.bit_length() - 1
    a_runs = bm * bk // 4 // threads  # 4-float runs of the A tile (along k) each thread loads
    b_runs = bk * bn // 4 // threads  # 4-float runs of the B tile (along n) each thread loads
    a_regs, b_regs = a_runs * 4, b_runs * 4  # prefetch registers (compile-time sizes of the local arrays)
    b_row_runs = bn // 4
    b_shift = b_row_runs.bit_length() - 1
    row_len = bm + 4  # transposed A tile row: a multiple of 4 floats (16-byte aligned), spreads the stores
    assert tm * rows == bm and tn * 8 == bn and a_runs >= 1 and b_runs >= 1 and 1 << tn_shift == tn
    assert bk in (8, 16) and rows in (8, 16)

    @cuda.jit(device=True, inline=True)
    def load_tile(a, b, a_next, b_next, k, row0, col0, t, inside):
        # Global -> registers: the A tile as runs of 4 consecutive k in a row, the B tile as runs of 4
        # consecutive columns (a warp reads contiguous bytes). `inside` (the same for the whole block) means the
        # tile lies wholly inside A and B: no comparisons, no selects -- 8 plain loads. Edge tiles load 0 for
        # elements outside (0 * x adds nothing).
        m, kdim = a.shape
        n = b.shape[1]
        if inside:
            for l in range(a_runs):
                run = t + l * threads
                gr, gk = uint64(row0 + (run >> k_shift)), uint64(k + (run & (k_runs - 1)) * 4)
                if vec:  # one 16-byte load (the launcher checked the alignment)
                    a_next[l * 4], a_next[l * 4 + 1], a_next[l * 4 + 2], a_next[l * 4 + 3] = load4(a, gr, gk)
                else:
                    for q in range(4):
                        a_next[l * 4 + q] = a[gr, gk + uint64(q)]
            for l in range(b_runs):
                run = t + l * threads
                gk, gc = uint64(k + (run >> b_shift)), uint64(col0 + (run & (b_row_runs - 1)) * 4)
                if vec:
                    b_next[l * 4], b_next[l * 4 + 1], b_next[l * 4 + 2], b_next[l * 4 + 3] = load4(b, gk, gc)
                else:
                    for q in range(4):
                        b_next[l * 4 + q] = b[gk, gc + uint64(q)]
        else:
            for l in range(a_runs):
                run = t + l * threads
                gr, gk = row0 + (run >> k_shift), k + (run & (k_runs - 1)) * 4
                for q in range(4):
                    a_next[l * 4 + q] = a[gr, gk + q] if gr < m and gk + q < kdim else float32(0.0)
            for l in range(b_runs):
                run = t + l * threads
                gk, gc = k + (run >> b_shift), col0 + (run & (b_row_runs - 1)) * 4
                for q in range(4):
                    b_next[l * 4 + q] = b[gk, gc + q] if gk < kdim and gc + q < n else float32(0.0)

    @cuda.jit(device=True, inline=True)
    def store_tile(a_tile, b_tile, a_next, b_next, buf, t):
        for l in range(a_runs):
            run = t + l * threads
            for q in range(4):
                a_tile[buf, (run & (k_runs - 1)) * 4 + q, run >> k_shift] = a_next[l * 4 + q]
        for l in range(b_runs):
            run = t + l * threads
            for q in range(4):
                b_tile[buf, run >> b_shift, (run & (b_row_runs - 1)) * 4 + q] = b_next[l * 4 + q]

    @cuda.jit(device=True, inline=True)
    def outer_product(a_tile, b_tile, cur, kk, ty4, tx4, acc, a_frag, b_frag):
        for s in range(subs):
            for i in range(4):
                a_frag[4 * s + i] = a_tile[cur, kk, s * qm + ty4 + i]
        for i in range(4):
            b_frag[i] = b_tile[cur, kk, tx4 + i]
            b_frag[4 + i] = b_tile[cur, kk, hn + tx4 + i]
        for i in range(rows):
            for j in range(8):
                acc[i, j] += a_frag[i] * b_frag[j]

    @cuda.jit(device=True, inline=True)
    def main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, inside_mn):
        # The double-buffered k loop of `unrolled`. It is inlined twice, with inside_mn the constant True
        # (interior blocks) or False (edge blocks), so each copy is compiled with only the loads it needs.
        kdim = a.shape[1]
        load_tile(a, b, a_next, b_next, 0, row0, col0, t, inside_mn and bk <= kdim)
        store_tile(a_tile, b_tile, a_next, b_next, 0, t)
        cuda.syncthreads()
        step = 0
        for k0 in range(0, kdim, bk):
            cur = step & 1
            k1 = k0 + bk
            if k1 < kdim:
                load_tile(a, b, a_next, b_next, k1, row0, col0, t, inside_mn and k1 + bk <= kdim)
            outer_product(a_tile, b_tile, cur, 0, ty4, tx4, acc, a_frag, b_frag)  # the first 8 k steps
            outer_product(a_tile, b_tile, cur, 1, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 2, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 3, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 4, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 5, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 6, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 7, ty4, tx4, acc, a_frag, b_frag)
            if bk == 16:  # a closure constant: the branch is resolved at compile time
                outer_product(a_tile, b_tile, cur, 8, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 9, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 10, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 11, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 12, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 13, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 14, ty4, tx4, acc, a_frag, b_frag)
                outer_product(a_tile, b_tile, cur, 15, ty4, tx4, acc, a_frag, b_frag)
            if k1 < kdim:
                store_tile(a_tile, b_tile, a_next, b_next, cur ^ 1, t)
            cuda.syncthreads()
            step += 1

    def interior_kernel(a, b, c):
        # `unrolled` checks every global load against the matrix edges: in the SASS each load costs a compare,
        # a select or branch and 64-bit index arithmetic, ~200 instructions per 8-deep tile against 512 FFMAs.
        # Only the blocks on the right and bottom edges (and the last k tile) need those checks: a block whose
        # whole tile is inside takes an unguarded copy of the loop (~50 instructions of loads per tile). The
        # test is the same for every thread of a block, so no warp diverges and every thread reaches every
        # barrier on either path.
        a_tile = cuda.shared.array((2, bk, row_len), float32, alignment=16)
        b_tile = cuda.shared.array((2, bk, bn), float32, alignment=16)
        acc = cuda.local.array((rows, 8), float32)
        a_frag = cuda.local.array(rows, float32)
        b_frag = cuda.local.array(8, float32)
        a_next = cuda.local.array(a_regs, float32)
        b_next = cuda.local.array(b_regs, float32)
        t = cuda.threadIdx.x
        tx4, ty4 = (t & (tn - 1)) * 4, (t >> tn_shift) * 4
        m = a.shape[0]
        n = b.shape[1]
        if group > 1:
            # Blocks start roughly in blockIdx order, row by row of the grid: the ~132 running blocks would
            # cover 4 tile rows of C but all 32 tile columns, i.e. all of B (64 MB at 4096^2, more than the
            # 50 MB L2). Numbered down columns of `group` tile rows instead, the running blocks need 8 row
            # panels of A and ~17 column panels of B, which stay in L2 while they are reused.
            gx, gy = cuda.gridDim.x, cuda.gridDim.y
            bid = cuda.blockIdx.y * gx + cuda.blockIdx.x
            first = (bid // (group * gx)) * group
            group_rows = min(gy - first, group)
            within = bid % (group * gx)
            row0 = (first + within % group_rows) * bm
            col0 = (within // group_rows) * bn
        else:
            row0 = cuda.blockIdx.y * bm
            col0 = cuda.blockIdx.x * bn
        for i in range(rows):
            for j in range(8):
                acc[i, j] = 0.0
        if row0 + bm <= m and col0 + bn <= n:
            main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, True)
            for i in range(rows):
                for j in range(8):
                    c[row0 + (i >> 2) * qm + ty4 + (i & 3), col0 + (j >> 2) * hn + tx4 + (j & 3)] = acc[i, j]
        else:
            main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, False)
            for i in range(rows):
                row = row0 + (i >> 2) * qm + ty4 + (i & 3)
                for j in range(8):
                    col = col0 + (j >> 2) * hn + tx4 + (j & 3)
                    if row < m and col < n:
                        c[row, col] = acc[i, j]

    # Named after its parameters, so that profiles and `gpukernels resources` tell the variants apart.
    name = (f"tile{bm}x{bn}x{bk}" + (f"_rows{rows}" if rows != 8 else "") + (f"_group{group}" if group > 1 else "")
            + ("_vec" if vec else ""))
    interior_kernel.__name__ = interior_kernel.__qualname__ = name + "_kernel"
    kernel = cuda.jit(**({"launch_bounds": launch_bounds} if launch_bounds else {}))(interior_kernel)
    kernel.tile = (bm, bn)
    kernel.threads = threads
    return kernel


# 10: 149 registers would leave room for one block per SM; launch_bounds(256, 2) caps them at 128 (2 blocks).
interior_kernel = _make_interior_kernel(B2_BM, B2_BN, launch_bounds=(B2_THREADS, 2))
# 11: 16 prefetch registers instead of 8 push the count to 168 (one block of 8 warps per SM); capping it at
# 128 spills and was slower (3.97 against 3.66 ms), so this one runs at one block per SM.
deep_k_kernel = _make_interior_kernel(B2_BM, B2_BN, bk=16)
swizzled_kernel = _make_interior_kernel(B2_BM, B2_BN, bk=16, group=8)  # 12
small_tile_kernel = _make_interior_kernel(64, 64)  # 13, for small products: 64 threads, 8-deep tiles
# 14: swizzled with load4. Per 16-deep tile a thread's 16 four-byte loads become 4 sixteen-byte ones, and each
# warp-wide load touches the same 16 sectors it did before: a quarter of the instructions and a quarter of the
# passes through the L1 pipeline, which the shared-memory loads of the inner product share. Nsight Compute at
# 4096^3: stalls waiting on shared-memory results ("short scoreboard") 0.65 -> 0.12 cycles per issued
# instruction, issue slots busy 65% -> 72%, 3.68 -> 3.30 ms. Only interior tiles use it (edge tiles may start
# a run mid-row), and only when the launcher found every row 16-byte aligned (K and N multiples of 4).
vec_kernel = _make_interior_kernel(B2_BM, B2_BN, bk=16, group=8, vec=True)
small_vec_kernel = _make_interior_kernel(64, 64, vec=True)
# 15: a 16 x 8 thread tile: 128 accumulators, 16 + 8 fragment values, 12 prefetch registers -- 248 registers on
# the H200 (254 from the pip nvJitLink), still one block of 8 warps per SM, no spills. Per k step a warp issues
# 6 shared loads for 128 FMAs (4 for 64 before), so the loop is ~85% FFMA. 16-deep tiles would need 50 KB of
# shared memory, past the 48 KB a static allocation may use, so the k tiles are 8 deep. Without load4 this tile
# measured the same as 128 x 128 (3.69 ms): the L1 pipeline, not the instruction count, was the limit then.
wide_kernel = _make_interior_kernel(256, B2_BN, bk=8, group=8, rows=16)
wide_vec_kernel = _make_interior_kernel(256, B2_BN, bk=8, group=8, rows=16, vec=True)


def wave_fit_kernel(m: int, n: int, sms: int | None = None, kernels=(swizzled_kernel, small_tile_kernel)):
    """The kernel for an M x N product: the first of ``kernels`` (largest tile first) whose tiles give at least
    one block per SM, else the last: ``swizzled`` (128 x 128 tiles) or the 64 x 64 tile.

    At 1024 x 1024 a 128 x 128 tile makes only 64 blocks for 132 SMs -- half the GPU idles however fast each
    block runs; 64 x 64 tiles make 256 blocks (each does a quarter of the work with 64 threads)."""
    sms = sms or _sm_count()
    for kernel in kernels[:-1]:
        if ceil_div(m, kernel.tile[0]) * ceil_div(n, kernel.tile[1]) >= sms:
            return kernel
    return kernels[-1]


@functools.cache
def _sm_count() -> int:
    from ._device import MODE

    if MODE == "gpu":
        return cuda.get_current_device().MULTIPROCESSOR_COUNT
    return 132  # the simulator has no SMs: plan as for an H200, so it runs what the GPU would


# ----------------------------------------------------------------------------------------------------------
# Launchers: derive grid and block from the shapes (the kernels guard their own bounds)
# ----------------------------------------------------------------------------------------------------------


@version("matmul", _check, kernels=[naive_kernel])
def naive(a, b, c):
    """One thread per output element, global memory only; threadIdx.x walks down a column (uncoalesced)."""
    m, n = c.shape
    grid = (ceil_div(m, NAIVE_BLOCK[0]), ceil_div(n, NAIVE_BLOCK[1]))
    return [Launch(naive_kernel, grid, NAIVE_BLOCK, (a, b, c))]


@version("matmul", _check, kernels=[coalesced_kernel])
def coalesced(a, b, c):
    """Coalescing: threadIdx.x walks along a row of C, so a warp's loads of B and stores of C are contiguous."""
    m, n = c.shape
    grid = (ceil_div(n, NAIVE_BLOCK[0]), ceil_div(m, NAIVE_BLOCK[1]))
    return [Launch(coalesced_kernel, grid, NAIVE_BLOCK, (a, b, c))]


@version("matmul", _check, kernels=[tiled_kernel])
def tiled(a, b, c):
    """Shared-memory tiling: TILE x TILE tiles of A and B are loaded once and reused TILE times."""
    m, n = c.shape
    return [Launch(tiled_kernel, (ceil_div(n, TILE), ceil_div(m, TILE)), (TILE, TILE), (a, b, c))]


@version("matmul", _check, kernels=[regblock_1d_kernel])
def regblock_1d(a, b, c):
    """1D register blocking: each thread computes TM = 8 outputs of a column, reusing each B value 8 times."""
    m, n = c.shape
    return [Launch(regblock_1d_kernel, (ceil_div(n, B1_BN), ceil_div(m, B1_BM)), (B1_THREADS,), (a, b, c))]


@version("matmul", _check, kernels=[regblock_2d_kernel])
def regblock_2d(a, b, c):
    """2D register blocking: each thread computes an 8 x 8 block as an outer product of registers."""
    m, n = c.shape
    return [Launch(regblock_2d_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]


@version("matmul", _check, kernels=[conflict_free_kernel])
def conflict_free(a, b, c):
    """No bank conflicts: threads own strided rows/columns (tcol + 16*j) and the A tile is padded."""
    m, n = c.shape
    return [Launch(conflict_free_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]


@version("matmul", _check, kernels=[double_buffered_kernel])
def double_buffered(a, b, c):
    """Double buffering: the next tiles are loaded into registers while the current ones are multiplied."""
    m, n = c.shape
    return [Launch(double_buffered_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]


@version("matmul", _check, kernels=[vectorized_kernel])
def vectorized(a, b, c):
    """128-bit shared loads: 16-byte aligned tiles, 4 consecutive values per load (4 loads per 64 FMAs)."""
    m, n = c.shape
    return [Launch(vectorized_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]


@version("matmul", _check, kernels=[unrolled_kernel])
def unrolled(a, b, c):
    """Unrolled k loop: the 8 steps of a tile are written out, so shared addresses are constant offsets."""
    m, n = c.shape
    return [Launch(unrolled_kernel, (ceil_div(n, B2_BN), ceil_div(m, B2_BM)), (B2_THREADS,), (a, b, c))]


def _tiled_launch(kernel, c, args):
    m, n = c.shape
    bm, bn = kernel.tile
    return [Launch(kernel, (ceil_div(n, bn), ceil_div(m, bm)), (kernel.threads,), args)]


@version("matmul", _check, kernels=[interior_kernel])
def interior(a, b, c):
    """Interior fast path: blocks whose tiles lie wholly inside A, B and C load and store without bounds checks."""
    return _tiled_launch(interior_kernel, c, (a, b, c))


@version("matmul", _check, kernels=[deep_k_kernel])
def deep_k(a, b, c):
    """16-deep k tiles: 1024 FMAs per thread between barriers, global loads issued a whole tile ahead."""
    return _tiled_launch(deep_k_kernel, c, (a, b, c))


@version("matmul", _check, kernels=[swizzled_kernel])
def swizzled(a, b, c):
    """Grouped block order: blocks running together share A and B tiles in L2 (8 tile rows per group).

    Measured on the H200: DRAM reads fall by a third and the time does not (1% slower at 4096^3, 6% on the ragged
    4095 x 4097 x 4093) -- this kernel was not waiting on DRAM. A locality step pays only on a memory-bound
    kernel, and the profiler tells which (benchmarks/NOTES.md)."""
    return _tiled_launch(swizzled_kernel, c, (a, b, c))


@version("matmul", _check, kernels=[swizzled_kernel, small_tile_kernel])
def wave_fit(a, b, c):
    """Tile size fitted to the GPU: 64 x 64 tiles when 128 x 128 ones would make fewer blocks than SMs."""
    return _tiled_launch(wave_fit_kernel(*c.shape), c, (a, b, c))


@version("matmul", _check, kernels=[vec_kernel, small_vec_kernel, swizzled_kernel, small_tile_kernel])
def vector_loads(a, b, c):
    """16-byte global loads (a Numba intrinsic) where rows are 16-byte aligned: 4x fewer load instructions."""
    kernels = (vec_kernel, small_vec_kernel) if aligned16(a, b) else (swizzled_kernel, small_tile_kernel)
    return _tiled_launch(wave_fit_kernel(*c.shape, kernels=kernels), c, (a, b, c))


@version("matmul", _check, kernels=[wide_vec_kernel, vec_kernel, small_vec_kernel, wide_kernel, swizzled_kernel,
                                    small_tile_kernel])
def thread_16x8(a, b, c):
    """16 x 8 outputs per thread in 256 x 128 tiles: 128 FMAs per 6 shared loads (the tile cuBLAS uses)."""
    if aligned16(a, b):
        kernels = (wide_vec_kernel, vec_kernel, small_vec_kernel)
    else:
        kernels = (wide_kernel, swizzled_kernel, small_tile_kernel)
    return _tiled_launch(wave_fit_kernel(*c.shape, kernels=kernels), c, (a, b, c))


#: Every version, naive first and fastest last. Tests, benchmarks, plots and docs iterate over this.
VERSIONS = {v.name: v for v in (naive, coalesced, tiled, regblock_1d, regblock_2d, conflict_free, double_buffered,
                                vectorized, unrolled, interior, deep_k, swizzled, wave_fit, vector_loads,
                                thread_16x8)}
optimized = list(VERSIONS.values())[-1]
