"""Step 3 of the CBR lesson, ``implicit_gemm``: the convolution as matmul's vectorized kernel, its B operand gathered
from x on the fly (no im2col buffer), bias and ReLU in the epilogue. ``igemm_launches`` is also what split_c and the
dispatcher launch (with slices of the channels and other tiles)."""

from __future__ import annotations

from numba import cuda, float32, types

from .._launch import Launch, LaunchError, ceil_div, version
from ._common import _check, _empty
from .k01_naive import NAIVE_THREADS, bias_fill_kernel, relu_kernel

# The GEMM view: y^T[k, p] = sum_q W[k, q] * X[q, p] with
#   p = (n, i, j) an output pixel, P = N*Ho*Wo of them (the GEMM's columns),
#   q = (c, r, s) a filter tap,    Q = C*R*S of them (the reduction),
#   W[k, q] = w.reshape(K, Q)      row-major and contiguous in q, exactly like matmul's A,
#   X[q, p] = x[n, c, i + r - p, j + s - p], 0 outside the image: matmul's B, gathered on the fly (no im2col).
# Pixels are the columns so that the 32 lanes of a warp gather 32 consecutive pixels (consecutive addresses of x,
# except where a row of the image ends), and its 4 stores of one channel cover 128 consecutive pixels of y.
# The kernel is matmul.vectorized_kernel with three changes: the B tile is gathered instead of copied, a k tile is
# a whole number of filter taps, and the epilogue adds the bias, applies ReLU and stores y once.
IG_BM = 64  # output channels per block (K = 64 in both benchmarks); with 8 x 8 per thread, BN threads per block
IG_BN = 256  # output pixels per block = threads per block; each thread gathers the column of one pixel
IG_SMEM = 48 * 1024  # static shared memory per block: 2 * BK * (BM + 4 + BN) floats must fit
IG_ROW = IG_BM + 4  # a_tile row (matmul's V_ROW): 272 bytes keeps rows 16-byte aligned and spreads the stores
# Launch bounds: at least 2 blocks of 256 threads per SM (16 warps), i.e. <= 128 registers per thread; ptxas
# fits that without spilling (sm_90). Unbounded it takes 160 registers and 1 block. With BN = 128 the same
# kernel needs 168 registers (3 blocks of 4 warps) and spills 56 bytes at 128: benchmarks/cbr_variants.py
# times these alternatives.
IG_MIN_BLOCKS = 2
IG_BNS = (64, 128, 256)  # pixels per block the kernel is built for (threads = BN, one pixel's gather each)
# Output channels per block: 64 (8 x 8 outputs per thread, matmul's step 8) or 128 (16 x 8 per thread, matmul's
# step 15: 128 FMAs per 6 shared loads instead of 64 per 4). Either way a block has 8 rows of threads along the
# channels, so its threads are still BN, one per pixel of the gather.
IG_BMS = (64, 128)


def igemm_bk_max(bn: int = IG_BN, bm: int = IG_BM) -> int:
    """The deepest k tile whose two W^T and two X buffers fit in static shared memory: 18 for BN = 256."""
    return IG_SMEM // (2 * 4 * (bm + 4 + bn))


def igemm_tiling(r_: int, s_: int, cb: int | None = None, bn: int = IG_BN, bm: int = IG_BM) -> tuple[int, int]:
    """(CB, RB): the input channels and filter rows one k tile covers; its depth is BK = CB * RB * S.

    A k tile is a whole number of filter taps, so the (channel, row, column) of each of its BK rows is a
    compile-time constant and the gather needs no division. Small filters take whole channels (by default
    enough for BK >= 8: 1x1 takes 8 channels, 2x2 two, 3x3 one); a filter with more taps than fit in shared
    memory (``igemm_bk_max``) is cut into groups of RB rows of one channel (5x5 with BN = 256: RB = 3, BK = 15;
    the last group is partly empty).
    """
    rs, bk_max = r_ * s_, igemm_bk_max(bn, bm)
    if cb is None:
        cb = max(1, 8 // rs)
    if cb * rs <= bk_max:
        return cb, r_
    return 1, min(r_, max(1, bk_max // s_))


def _unrolled(step, lo: int, hi: int):
    """A device function that calls ``step(a_tile, x_tile, cur, kk, ...)`` for kk = lo .. hi-1 in straight-line
    code. Numba has no ``#pragma unroll``, and NVVM does not unroll a k loop of 9 x 68 instructions by itself;
    as a loop it costs ~25 instructions of index arithmetic per 64 FMAs (measured in the SASS). A chain of
    inlined calls, each with its kk a compile-time constant, is the unrolled loop: every shared load becomes
    [base + constant], and ptxas can issue the loads of step kk + 1 while the FMAs of step kk run. NVVM does
    the inlining (``forceinline``): Numba's own (``inline=True``) copied the chain's IR level by level, ~8 s of
    compile for BK = 9 and ~25 s for BK = 18, for the same PTX."""
    if hi <= lo:
        @cuda.jit(device=True, forceinline=True)
        def nothing(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty):
            pass

        return nothing
    first = _unrolled(step, lo, hi - 1)
    kk = hi - 1

    @cuda.jit(device=True, forceinline=True)
    def steps(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty):
        first(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty)
        step(a_tile, x_tile, cur, kk, acc, a_frag, b_frag, tx, ty)

    return steps


def _make_igemm_kernel(r_: int, s_: int, cb: int, rb: int, bn: int, min_blocks: int | None, sliced: bool = False,
                       bm: int = IG_BM):
    """The implicit-GEMM kernel for an R x S filter, CB channels and RB filter rows per k tile, BN pixels and BM
    output channels per block; ``min_blocks`` adds launch bounds (BN threads, at least that many blocks per SM);
    ``sliced``: block z sums one slice of the channels and adds it into y with atomics (split_c). A compile-time
    choice: with both epilogues in one kernel, the unsplit one ran 1.7x slower at N32 C64 56^2 (H200,
    benchmarks/NOTES.md)."""
    rows = bm // 8  # output channels per thread: 8 (BM = 64) or 16 (BM = 128), as rows / 4 runs of 4, 32 apart
    subs = rows // 4
    row_len = bm + 4  # a_tile row (matmul's V_ROW): 16-byte aligned rows that spread the stores
    bk = cb * rb * s_  # k-tile depth
    taps = rb * s_  # filter taps of one channel in a tile: bits of the tap mask
    groups = -(-r_ // rb)  # filter-row groups per channel (1 unless the filter is cut)
    threads = bn  # 8 x (BN / 8) threads of rows x 8 outputs
    tcols = bn // 8  # threads along the pixels (16 or 32)
    tshift = tcols.bit_length() - 1
    half = bn // 2
    # W loads: a row of the tile is read by `wlanes` consecutive lanes (BK rounded up to a power of two; the
    # lanes past BK idle), so a warp reads 32 / wlanes whole rows -- a few 32-byte sectors per request -- and
    # the row and tap of a lane are t >> wshift and t & (wlanes - 1), the same for every tile. (Numbering the
    # BM*BK elements e = t + BN*l instead needs 5 loads instead of 8 for 3x3, but its e // BK and e % BK
    # per load cost 30 registers more: 201 instead of 170.)
    wlanes = max(1 << (bk - 1).bit_length(), threads // bm)
    wshift = wlanes.bit_length() - 1
    wrows = threads // wlanes  # W rows per pass
    wpasses = bm // wrows  # W loads per thread per tile
    opts = {"launch_bounds": (threads, min_blocks)} if min_blocks else {}

    @cuda.jit(device=True, forceinline=True)
    def tap_mask(colmask, i, r0, padding, h):
        # Bit rr * S + s: tap (r0 + rr, s) of this thread's pixel lands inside the image (rows past R: 0).
        m = 0
        for rr in range(rb):
            if r0 + rr < r_ and 0 <= i + r0 + rr - padding < h:
                m |= colmask << (rr * s_)
        return m

    @cuda.jit(device=True, forceinline=True)
    def gather(x, x_next, xptr, tmask, chans, hw, wd):
        # Row kq of the tile is tap (cc, rr, s) -- constants once the loop is unrolled -- so the address of
        # x[n, c0 + cc, i + r0 + rr - p, j + s - p] is xptr + cc*H*W + rr*W + s: one add per element. Outside the
        # image (a 0 bit in the mask) or past the last channel it is 0, and nothing is loaded. The offset is
        # >= 0 whenever it is loaded; as an unsigned index Numba drops its negative-index wraparound, and the
        # guarded load becomes one predicated instruction instead of a branch.
        for kq in range(bk):
            cc, rr, s = kq // taps, (kq % taps) // s_, kq % s_
            ok = (tmask >> (rr * s_ + s)) & 1 != 0 and cc < chans
            x_next[kq] = x[types.uint64(xptr + cc * hw + rr * wd + s)] if ok else float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def load_w(w, w_next, wptr, q_, valid, krem, wm, wq):
        # W[k0 + wm + wrows*l, qbase + wq]: rows Q floats apart, one tap per lane. `valid` taps of the tile exist
        # (fewer in the last channel chunk or row group); rows past K are never stored, but must not be read.
        for l in range(wpasses):
            ok = wq < valid and wm + wrows * l < krem
            w_next[l] = w[types.uint64(wptr + l * wrows * q_)] if ok else float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def store_x(x_tile, x_next, buf, t):
        # Lane t writes column t of each row: consecutive words, conflict-free.
        for kq in range(bk):
            x_tile[buf, kq, t] = x_next[kq]

    @cuda.jit(device=True, forceinline=True)
    def store_w(a_tile, w_next, buf, wm, wq):
        # W is stored transposed (a_tile[kq, m]) so that 4 consecutive channels of one tap are one 16-byte load
        # in the FMA loop; lanes past BK hold nothing.
        if wq < bk:
            for l in range(wpasses):
                a_tile[buf, wq, wm + wrows * l] = w_next[l]

    @cuda.jit(device=True, forceinline=True)
    def mma_step(a_tile, x_tile, cur, kk, acc, a_frag, b_frag, tx, ty):
        # One k step of the tile: 4 x 16-byte shared loads feed 64 FMAs (matmul.vectorized's inner loop), or with
        # 16 rows 6 feed 128 (matmul.thread_16x8's).
        for q in range(4):
            for sub in range(subs):
                a_frag[4 * sub + q] = a_tile[cur, kk, 32 * sub + ty * 4 + q]
            b_frag[q] = x_tile[cur, kk, tx * 4 + q]
            b_frag[4 + q] = x_tile[cur, kk, half + tx * 4 + q]
        for ii in range(rows):
            for jj in range(8):
                acc[ii, jj] += a_frag[ii] * b_frag[jj]

    # The FMA steps of a tile, in two halves: the X tile gathered before the first half is stored to shared
    # memory after it, and the W loads are issued there, so the two prefetches need not hold registers during
    # the same FMAs (ptxas decides in the end; for BN = 256 it fits 128 registers without spills).
    split = (bk + 1) // 2
    mma_first, mma_second = _unrolled(mma_step, 0, split), _unrolled(mma_step, split, bk)

    @cuda.jit(**opts)
    def igemm_kernel(x, w, b, y, n_, c_, h, wd, k_, ho, wo, padding):
        # x: (N*C*H*W,), w: (K*C*R*S,), y: (N*K*Ho*Wo,) -- flat views of the 4-D arrays, so an element's address
        # is an offset this kernel keeps up to date with one add, not four index products.
        a_tile = cuda.shared.array((2, bk, row_len), float32, alignment=16)  # W^T tiles: a_tile[buf, kq, m]
        x_tile = cuda.shared.array((2, bk, bn), float32, alignment=16)  # gathered X tiles: x_tile[buf, kq, p]
        acc = cuda.local.array((rows, 8), float32)
        a_frag = cuda.local.array(rows, float32)
        b_frag = cuda.local.array(8, float32)
        x_next = cuda.local.array(bk, float32)
        w_next = cuda.local.array(wpasses, float32)
        ybase = cuda.local.array(8, types.int64)
        # As in matmul.vectorized_kernel, indices come from threadIdx through & and >> (never negative), so
        # NVVM sees the 16-byte alignment of the fragment loads below.
        t = cuda.threadIdx.x
        tx, ty = t & (tcols - 1), t >> tshift  # outputs: pixels tx*4 + {0..3} (+ BN/2), channels ty*4 + {0..3} (+ 32 k)
        p0 = cuda.blockIdx.x * bn
        k0 = cuda.blockIdx.y * bm
        hw, howo, q_ = h * wd, ho * wo, c_ * (r_ * s_)
        npix = n_ * howo
        krem = k_ - k0
        # The pixel this thread gathers: column t of the tile, decomposed once for the whole kernel.
        p = p0 + t
        pn = p // howo
        i = (p - pn * howo) // wo
        j = p - pn * howo - i * wo
        xbase = pn * c_ * hw + (i - padding) * wd + (j - padding)  # offset of tap (c, r, s) = (0, 0, 0): may be < 0
        colmask = 0  # bit s: column j + s - padding is inside the image (none for pixels past the end)
        if p < npix:
            for s in range(s_):
                if 0 <= j + s - padding < wd:
                    colmask |= 1 << s
        tmask = tap_mask(colmask, i, 0, padding, h)
        wm, wq = t >> wshift, t & (wlanes - 1)  # W loads: rows wm + wrows*l of the tile, tap wq
        wptr = (k0 + wm) * q_ + wq  # this thread's first W element, tap 0 of the filter
        for ii in range(rows):
            for jj in range(8):
                acc[ii, jj] = 0.0

        # Slices of the reduction (split_c): block z sums channels [c_lo, c_hi), a whole number of k tiles; with
        # one slice (gridDim.z = 1) that is every channel. From here on channels count from c_lo.
        c_n = c_
        if sliced:
            nsplit = cuda.gridDim.z
            c_chunk = ((c_ + cb - 1) // cb + nsplit - 1) // nsplit * cb
            c_lo = cuda.blockIdx.z * c_chunk
            c_n = max(0, min(c_chunk, c_ - c_lo))  # this slice's channels (0: an empty slice adds zeros)
            xbase += c_lo * hw
            wptr += c_lo * (r_ * s_)
        ntiles = ((c_n + cb - 1) // cb) * groups  # k tiles: (channel chunk, row group), channel-major like q
        gather(x, x_next, xbase, tmask, c_n, hw, wd)
        store_x(x_tile, x_next, 0, t)
        load_w(w, w_next, wptr, q_, min(cb, c_n) * min(rb, r_) * s_, krem, wm, wq)
        store_w(a_tile, w_next, 0, wm, wq)
        cuda.syncthreads()
        for step in range(ntiles):
            cur = step & 1
            # Tile step + 1: channels c1 .., filter rows r1 ... After the last tile it is past the last channel:
            # the gather and the W loads then load nothing (chans and valid <= 0) and fill the idle buffer with
            # zeros. Unconditional on purpose: behind an `if`, NVVM sinks the loads down to their shared stores,
            # after the FMAs, and the full global latency is exposed once per tile (seen in the SASS).
            c1 = ((step + 1) // groups) * cb
            r1 = ((step + 1) % groups) * rb
            if groups > 1:
                tmask = tap_mask(colmask, i, r1, padding, h)
            # Issue the gather of the next X tile; it lands in registers while the first FMAs run. Buffer cur ^ 1
            # was last read before the previous barrier, so it can be refilled mid-tile.
            gather(x, x_next, xbase + c1 * hw + r1 * wd, tmask, c_n - c1, hw, wd)
            # A warp barrier (free: the warp is converged) pins the loads here; without it ptxas sank them to their
            # shared stores, after the FMAs, to save registers (seen in the SASS).
            cuda.syncwarp()
            mma_first(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty)
            store_x(x_tile, x_next, cur ^ 1, t)
            load_w(w, w_next, wptr + c1 * (r_ * s_) + r1 * s_, q_, max(0, min(cb, c_n - c1)) * min(rb, r_ - r1) * s_,
                   krem, wm, wq)
            cuda.syncwarp()
            mma_second(a_tile, x_tile, cur, acc, a_frag, b_frag, tx, ty)
            store_w(a_tile, w_next, cur ^ 1, wm, wq)
            cuda.syncthreads()  # one barrier per tile: the other buffers are full, and everyone is done with these

        # Epilogue: y[n, k, i, j] is at (n*K + k)*Ho*Wo + (i*Wo + j). This thread's 8 pixels are two runs of 4;
        # decompose the first of each run, then step (a run may cross into the next image).
        for jh in range(2):
            pj = p0 + jh * half + tx * 4
            yn = pj // howo
            yij = pj - yn * howo
            for jq in range(4):
                ybase[jh * 4 + jq] = yn * k_ * howo + yij if pj + jq < npix else -1
                yij += 1
                if yij == howo:
                    yij = 0
                    yn += 1
        for ii in range(rows):
            ch = k0 + (ii >> 2) * 32 + ty * 4 + (ii & 3)
            if ch < k_:
                if sliced:
                    # A slice holds part of the sum: add it to y (which starts at the bias); the ReLU comes after
                    # the last slice, in its own pass (split_c).
                    for jj in range(8):
                        if ybase[jj] >= 0:
                            cuda.atomic.add(y, types.uint64(ybase[jj] + ch * howo), acc[ii, jj])
                else:
                    bias = b[ch]  # one bias load per channel this thread owns, reused for its 8 pixels
                    for jj in range(8):
                        if ybase[jj] >= 0:  # bias + ReLU in registers, then the only store of y
                            y[types.uint64(ybase[jj] + ch * howo)] = max(acc[ii, jj] + bias, float32(0.0))

    return igemm_kernel


_IGEMM: dict[tuple, object] = {}


def igemm_kernel(r: int, s: int, cb: int | None = None, bn: int = IG_BN, min_blocks: int | None = IG_MIN_BLOCKS,
                 sliced: bool = False, bm: int = IG_BM):
    """The compiled-once implicit-GEMM kernel for an R x S filter (and a tiling; the defaults are `implicit_gemm`'s)."""
    cb, rb = igemm_tiling(r, s, cb, bn, bm)
    key = (r, s, cb, rb, bn, min_blocks, sliced, bm)
    if key not in _IGEMM:
        _IGEMM[key] = _make_igemm_kernel(r, s, cb, rb, bn, min_blocks, sliced, bm)
    return _IGEMM[key]


def igemm_launches(x, w, b, y, padding=1, cb=None, bn=IG_BN, min_blocks=IG_MIN_BLOCKS, splits=1,
                   bm=IG_BM) -> list[Launch]:
    """The launches of the implicit-GEMM kernel (``implicit_gemm`` uses the defaults; benchmarks/cbr_variants.py
    sweeps the rest): a grid of P / BN pixel blocks by K / BM channel blocks (by ``splits`` slices of the
    channels), BN threads each. With slices, y starts at the bias, each slice adds its part of the sum, and a
    last pass applies the ReLU."""
    if bn not in IG_BNS:
        raise LaunchError(f"bn must be one of {IG_BNS} (one thread per pixel of a channel tile); got {bn}")
    if bm not in IG_BMS:
        raise LaunchError(f"bm must be one of {IG_BMS} (8 or 16 output channels per thread); got {bm}")
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    _, _, ho, wo = y.shape
    if s > igemm_bk_max(bn, bm):
        raise LaunchError(f"the implicit GEMM with {bm} x {bn} tiles handles filters up to {igemm_bk_max(bn, bm)} "
                          f"columns wide (one filter row must fit in a k tile); got S = {s}")
    splits = max(1, min(splits, ceil_div(c, igemm_tiling(r, s, cb, bn, bm)[0])))  # no more slices than chunks
    kernel = igemm_kernel(r, s, cb, bn, min_blocks, splits > 1, bm)
    grid = (ceil_div(n * ho * wo, bn), ceil_div(k, bm), splits)  # pixels on x: gridDim.y stops at 65535
    flat = (x.reshape(x.size), w.reshape(w.size), b, y.reshape(y.size))
    conv = Launch(kernel, grid, (bn,), flat + (n, c, h, wd, k, ho, wo, padding))
    if splits == 1:
        return [conv]
    ew = (ceil_div(y.size, NAIVE_THREADS),)
    return [Launch(bias_fill_kernel, ew, (NAIVE_THREADS,), (y, b)), conv,
            Launch(relu_kernel, ew, (NAIVE_THREADS,), (y,))]


@version("cbr", _check, empty=_empty)
def implicit_gemm(x, w, b, y, padding=1):
    """Implicit GEMM: matmul's vectorized kernel, its B operand gathered from x; a 64 x 256 tile per block."""
    return igemm_launches(x, w, b, y, padding)
