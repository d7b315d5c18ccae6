"""Step 2 of the CBR lesson, ``fused_direct``: one fused kernel; the input tile with its halo and the weights staged
in shared memory; bias and ReLU applied in registers before the single store of y."""

from __future__ import annotations

from numba import cuda, float32

from .._launch import Launch, ceil_div, version
from ._common import _check, _empty

TX, TY = 16, 16  # threads per block
PX = 4  # output pixels per thread, along a row, 16 columns apart (so a warp's shared reads are consecutive)
TH, TW = TY, TX * PX  # output tile per block: 16 x 64
KB = 16  # output channels per block (each thread keeps PX * KB = 64 accumulators in registers)
CB = 4  # input channels staged per phase


def _make_fused_kernel(r_: int, s_: int):
    """The fused kernel for an R x S filter: R and S size the shared tiles, so they are compile-time
    constants; one kernel is compiled per filter size."""
    hh, hw = TH + r_ - 1, TW + s_ - 1  # input tile with halo
    tile_elems = CB * hh * hw
    w_elems = KB * CB * r_ * s_
    threads = TX * TY

    @cuda.jit
    def fused_kernel(x, w, b, y, padding):
        x_tile = cuda.shared.array((CB, hh, hw), float32)
        w_tile = cuda.shared.array((KB, CB, r_, s_), float32)
        acc = cuda.local.array((PX, KB), float32)
        wv = cuda.local.array(KB, float32)
        n_, c_, h, wd = x.shape
        k_, ho, wo = y.shape[1], y.shape[2], y.shape[3]
        tiles_w = (wo + TW - 1) // TW
        i0 = (cuda.blockIdx.x // tiles_w) * TH
        j0 = (cuda.blockIdx.x % tiles_w) * TW
        k0 = cuda.blockIdx.y * KB
        nn = cuda.blockIdx.z
        ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
        t = ty * TX + tx
        for p in range(PX):
            for kk in range(KB):
                acc[p, kk] = 0.0
        for c0 in range(0, c_, CB):
            # Stage CB channels of the input tile with its halo; zero padding and out-of-range channels are
            # written as 0, so the compute loop below needs no bounds checks. Consecutive t -> consecutive
            # columns of x: coalesced (rows of hw floats).
            for e in range(t, tile_elems, threads):
                c = e // (hh * hw)
                hi = i0 + (e // hw) % hh - padding
                wi = j0 + e % hw - padding
                inside = c0 + c < c_ and 0 <= hi < h and 0 <= wi < wd
                x_tile[c, (e // hw) % hh, e % hw] = x[nn, c0 + c, hi, wi] if inside else float32(0.0)
            for e in range(t, w_elems, threads):
                kk = e // (CB * r_ * s_)
                c = (e // (r_ * s_)) % CB
                r = (e // s_) % r_
                s = e % s_
                ok = k0 + kk < k_ and c0 + c < c_
                w_tile[kk, c, r, s] = w[k0 + kk, c0 + c, r, s] if ok else float32(0.0)
            cuda.syncthreads()  # tiles complete before anyone reads them
            for c in range(CB):
                for r in range(r_):
                    for s in range(s_):
                        # KB weights into registers (the same address for all threads: a broadcast), each
                        # reused for PX pixels; each input value reused for KB channels: PX*KB FMAs for
                        # KB + PX shared loads.
                        for kk in range(KB):
                            wv[kk] = w_tile[kk, c, r, s]
                        for p in range(PX):
                            xv = x_tile[c, ty + r, tx + TX * p + s]
                            for kk in range(KB):
                                acc[p, kk] += xv * wv[kk]
            cuda.syncthreads()  # everyone done reading before the next chunk overwrites the tiles
        i = i0 + ty
        for p in range(PX):
            j = j0 + tx + TX * p
            if i < ho and j < wo:
                for kk in range(KB):
                    if k0 + kk < k_:
                        # bias + ReLU in registers, then the only store of y
                        y[nn, k0 + kk, i, j] = max(acc[p, kk] + b[k0 + kk], float32(0.0))

    return fused_kernel


_FUSED: dict[tuple[int, int], object] = {}


def fused_kernel(r: int, s: int):
    if (r, s) not in _FUSED:
        _FUSED[(r, s)] = _make_fused_kernel(r, s)
    return _FUSED[(r, s)]


@version("cbr", _check, empty=_empty)
def fused_direct(x, w, b, y, padding=1):
    """Fused: input tile + halo and weights staged in shared memory; bias and ReLU before the single store."""
    n, k, ho, wo = y.shape
    r, s = w.shape[2], w.shape[3]
    grid = (ceil_div(ho, TH) * ceil_div(wo, TW), ceil_div(k, KB), n)
    return [Launch(fused_kernel(r, s), grid, (TX, TY), (x, w, b, y, padding))]
