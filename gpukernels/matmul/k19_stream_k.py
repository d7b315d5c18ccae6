"""Step 19 of the matmul ladder, ``stream_k``: the last waves' work shared out evenly, so no SM idles at the end.

``thread_16x8`` runs one 256 x 128 tile per block and one block per SM. At 4096^3 that is 512 tiles for 132 SMs:
3.88 waves, so the fourth wave runs on 116 SMs while 16 idle, and the product takes 4 waves' time -- 3% lost to
wave quantisation (at 6144^3, 8.73 waves: 3%; at 2048 x 4096 x 11008, 1.94 waves: 3%). Splitting every tile's K
(split-K) does not help: the same waves, only thinner. Stream-K (Osama et al., 2023) cuts the *sum of all the
work* into equal shares instead: the last P + T % P tiles (T tiles, P SMs) are P equal runs of k tiles, one per
block, so each block does between one and two tiles' work and all of them end together. A tile cut between two
blocks is summed through a workspace (`make_interior_kernel`'s ``stream_k_kernel`` says how, without a block
ever waiting for another). The one change from ``thread_16x8``: ``stream_k=True``.

The cost: 128 KB of partial sums written and read per shared tile (at most one per block), about 2 us of one
SM's bandwidth, against ~0.12 of a wave (~100 us) saved at 4096^3.
"""

from __future__ import annotations

from .._intrinsics import aligned16
from .._launch import Launch, ceil_div, version
from . import _common
from ._common import check, tiled_launch, workspace
from ._interior import make_interior_kernel
from .k15_thread_16x8 import wide_kernel

stream_k_vec_kernel = make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True, clamp=False, stream_k=True)
# Rows that are not 16-byte aligned run thread_16x8's scalar kernel: stream-K was measured only with 16-byte loads,
# and each stream-K kernel (four copies of the k loop) costs a minute of NVVM on a laptop core.


def stream_k_blocks(m: int, n: int, sms: int | None = None, per_sm: int = 1, tile: tuple = (256, 128),
                    spread: bool = False) -> tuple[int, int]:
    """(whole-tile blocks, sharing blocks) for an M x N product of ``tile``-sized tiles: all but the last one or
    two waves' tiles go one per block; the rest are shared by one block per resident slot (``sms * per_sm``), each
    getting between one and two tiles' work. One wave or less: a block per tile -- or, with ``spread`` (what
    ``optimized`` asks for when a product does not fill the SMs), the tiles' work shared by a block per slot, each
    getting less than a tile's."""
    slots = (sms or _common.sm_count()) * per_sm
    tiles = ceil_div(m, tile[0]) * ceil_div(n, tile[1])
    if tiles <= slots:
        return 0, (slots if spread else tiles)
    return (tiles // slots - 1) * slots, slots


def stream_k_launches(kernel, a, b, c, sms: int | None = None) -> list[Launch]:
    """The kernel's launch: a kernel made with ``spread=True`` (whose sum takes a tile cut between any number of
    blocks) is spread over every slot when its tiles are fewer."""
    m, n = c.shape
    dp, sk = stream_k_blocks(m, n, sms, tile=kernel.tile, spread=kernel.params["spread"])
    shared = ceil_div(m, kernel.tile[0]) * ceil_div(n, kernel.tile[1]) - dp
    sk = min(sk, shared * ceil_div(a.shape[1], kernel.bk))  # every sharing block gets at least one k tile
    # The workspace: two partial tiles per sharing block (each thread's accumulators: the tile it starts inside
    # and the one it ends inside), and one arrival count per shared tile, zero before the first launch; the
    # kernel leaves it zero. A plan made for host arrays (a process that only compiles or reports) gets host
    # arrays of the same shapes.
    ws, cnt = workspace(c, (sk, 2, kernel.rows * 8, kernel.threads), shared)
    return [Launch(kernel, (dp + sk,), (kernel.threads,), (a, b, c, ws, cnt))]


@version("matmul", check, kernels=[stream_k_vec_kernel, wide_kernel])
def stream_k(a, b, c):
    """Stream-K: the last waves' k tiles shared out evenly over the SMs, so the last wave is never part-empty."""
    if not aligned16(a, b):
        return tiled_launch(wide_kernel, c, (a, b, c))
    return stream_k_launches(stream_k_vec_kernel, a, b, c)
