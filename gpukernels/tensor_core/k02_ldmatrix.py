"""Step 2 of the tensor-core ladder, ``ldmatrix``.

A block of 4 warps computes a 64 x 64 tile of C, each warp a 32 x 32 quarter of it (2 x 4 mmas per 16 of K). Per
32-deep slice of K the block stages a 64 x 32 tile of A and a 32 x 64 tile of B in shared memory (float16, 4 KB
each), and the warps take their fragments from there with ``ldmatrix``: one ``ldmatrix.x4`` gives a lane its whole A
fragment (4 words) for one mma, one ``ldmatrix.x4.trans`` its B fragments for two -- B is stored k-major (a row of
the tile is a row of B), and ``.trans`` hands out its columns, which is what B's fragment holds. Each element of the
tiles now comes from global memory once per block instead of once per warp that needs it: A is read N / 64 times
instead of N / 8, B M / 64 times instead of M / 16.

The tiles are plain row-major here. Where the lanes' row addresses fall in shared memory's 32 banks is the next
step's subject, so the layout is a function of its own (``a_at``, ``b_at``: element (row, col) of a tile -> its
offset) that step 3 replaces, and the kernel is made from them by `make_ldmatrix_kernel`.
"""

from __future__ import annotations

from numba import cuda, float32, types, uint32

from .._mma import ldmatrix_x4, ldmatrix_x4_trans, mma_f16
from .._launch import version
from ._common import add_to, check, half_at, store, tiled_launch

BM, BN, BK = 64, 64, 32  # the block's tile of C, and the depth of K staged at a time
WARPS_M, WARPS_N = 2, 2  # 4 warps, each computing a (BM / 2) x (BN / 2) = 32 x 32 tile of C
THREADS = 32 * WARPS_M * WARPS_N
A_TILE, B_TILE = BM * BK, BK * BN  # halves per tile (shared array sizes must be constants, not expressions)


@cuda.jit(device=True, forceinline=True)
def a_at(row, col):
    # A tile (BM x BK), row-major: 32 halves = 64 bytes per row
    return row * BK + col


def make_row_major_b(bn: int):
    """The B tile's layout for rows of ``bn`` halves, row-major."""

    @cuda.jit(device=True, forceinline=True)
    def b_at(row, col):
        # B tile (BK x bn), row-major: 64 halves = 128 bytes per row here
        return row * bn + col

    return b_at


b_at = make_row_major_b(BN)


def make_warp_product(mi: int, nj: int, a_at, b_at):
    """The product of one BK-deep pair of shared tiles into a warp's mi x nj mma tiles (16 x 8 each) of C: the
    device function every later FP16 step runs per tile. ``a_at`` / ``b_at`` are the tiles' layouts."""
    assert nj % 2 == 0  # B fragments come two n8 tiles at a time (one ldmatrix.x4.trans)

    @cuda.jit(device=True, forceinline=True)
    def warp_product(sa, sb, a_base, b_base, wr, wc, lane, acc):
        # sa, sb: the shared tiles (flat, float16); a_base, b_base: where this stage starts in them; (wr, wc): the
        # warp's tile within the block's. Lane 8 j + r gives ldmatrix the address of row r of 8 x 8 matrix j.
        af = cuda.local.array((mi, 4), uint32)  # A fragments, 4 words (8 halves) per mma row block
        bf = cuda.local.array((nj, 2), uint32)  # B fragments, 2 words (4 halves) per mma column block
        j, r = lane >> 3, lane & 7
        for kk in range(0, BK, 16):
            for i in range(mi):
                # matrices 0-3: rows +0/+8, k +0/+8 of the 16 x 16 A block -> a0a1, a2a3, a4a5, a6a7
                af[i, 0], af[i, 1], af[i, 2], af[i, 3] = ldmatrix_x4(
                    sa, a_base + a_at(wr + 16 * i + r + 8 * (j & 1), kk + 8 * (j >> 1)))
            for p in range(nj // 2):
                # matrices 0-3: k +0/+8 of columns +0, then of columns +8 -> (b0b1, b2b3) of two n8 tiles
                bf[2 * p, 0], bf[2 * p, 1], bf[2 * p + 1, 0], bf[2 * p + 1, 1] = ldmatrix_x4_trans(
                    sb, b_base + b_at(kk + r + 8 * (j & 1), wc + 16 * p + 8 * (j >> 1)))
            for i in range(mi):
                for jn in range(nj):
                    acc[i, jn, 0], acc[i, jn, 1], acc[i, jn, 2], acc[i, jn, 3] = mma_f16(
                        af[i, 0], af[i, 1], af[i, 2], af[i, 3], bf[jn, 0], bf[jn, 1],
                        acc[i, jn, 0], acc[i, jn, 1], acc[i, jn, 2], acc[i, jn, 3])

    return warp_product


def make_epilogue(mi: int, nj: int, atomic: bool = False):
    """Zeroing a warp's accumulators, and storing them into C (rows and columns past C are not written); with
    ``atomic``, adding them into C by atomics instead (split-K: several blocks add into one tile of C)."""
    put = add_to if atomic else store

    @cuda.jit(device=True, forceinline=True)
    def zero(acc):
        for i in range(mi):
            for jn in range(nj):
                for q in range(4):
                    acc[i, jn, q] = float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def store_tile(c, acc, row0, col0, lane):
        # acc[i, jn, q] is element q of the D fragment of mma tile (i, jn): row g (+8 for q >= 2), column 2t + q % 2
        g, t = lane >> 2, lane & 3
        for i in range(mi):
            for jn in range(nj):
                row, col = row0 + 16 * i + g, col0 + 8 * jn + 2 * t
                put(c, row, col, acc[i, jn, 0])
                put(c, row, col + 1, acc[i, jn, 1])
                put(c, row + 8, col, acc[i, jn, 2])
                put(c, row + 8, col + 1, acc[i, jn, 3])

    return zero, store_tile


MI, NJ = BM // WARPS_M // 16, BN // WARPS_N // 8  # mma tiles per warp: 2 x 4


def make_ldmatrix_kernel(a_at, b_at):
    """The step's kernel for given tile layouts (step 3 passes swizzled ones)."""
    warp_product = make_warp_product(MI, NJ, a_at, b_at)
    zero, store_tile = make_epilogue(MI, NJ)

    @cuda.jit
    def ldmatrix_kernel(a, b, c):
        sa = cuda.shared.array(A_TILE, types.float16, alignment=16)  # 16-byte aligned: ldmatrix reads 16-byte rows
        sb = cuda.shared.array(B_TILE, types.float16, alignment=16)
        acc = cuda.local.array((MI, NJ, 4), float32)
        tid = cuda.threadIdx.x
        warp, lane = tid >> 5, tid & 31
        wr, wc = (warp // WARPS_N) * (BM // WARPS_M), (warp % WARPS_N) * (BN // WARPS_N)
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        zero(acc)
        for k0 in range(0, a.shape[1], BK):
            # Global -> shared, one half per thread at a time, consecutive threads on consecutive columns (a warp
            # reads 64 contiguous bytes); past the edges of A and B the tile is zero.
            for q in range(BM * BK // THREADS):
                e = tid + q * THREADS
                sa[a_at(e // BK, e % BK)] = half_at(a, row0 + e // BK, k0 + e % BK)
            for q in range(BK * BN // THREADS):
                e = tid + q * THREADS
                sb[b_at(e // BN, e % BN)] = half_at(b, k0 + e // BN, col0 + e % BN)
            cuda.syncthreads()  # the tiles are complete
            warp_product(sa, sb, 0, 0, wr, wc, lane, acc)
            cuda.syncthreads()  # every warp is done with them before the next tile overwrites them
        store_tile(c, acc, row0 + wr, col0 + wc, lane)

    ldmatrix_kernel.tile = (BM, BN)
    return ldmatrix_kernel


ldmatrix_kernel = make_ldmatrix_kernel(a_at, b_at)


@version("tensor_core", check, kernels=[ldmatrix_kernel])
def ldmatrix(a, b, c):
    """64 x 64 block tiles staged in shared memory; each warp's fragments read from there with ldmatrix."""
    return tiled_launch(ldmatrix_kernel, a, b, c, THREADS)
