"""Step 4 of the CBR lesson, ``split_c``: slices of the input channels over the grid's z, when the image gives too
few tiles for the GPU (batch 1, deep layers)."""

from __future__ import annotations

from .._launch import ceil_div, sm_count, version
from ._common import _check, _empty
from .k03_implicit_gemm import IG_BM, igemm_launches

# At batch 1 the GEMM is short and deep: ResNet's last stage (1, 512, 7x7, 512) has P = 49 pixels, K = 512 channels
# and Q = 4608 taps -- 8 blocks of 64 x 256 for 132 SMs, each walking all 512 channels (0.26x cuDNN).
# Slicing the channels into S parts makes S times the blocks, each summing Q / S taps -- matmul's split-K. The ReLU
# cannot come before the last slice has added its part, so the fusion gives a little back: y starts at the bias
# (one pass), the slices add into it with atomics, and a last pass applies the ReLU. Those two passes cost
# 12 bytes per output -- small exactly where splitting pays, since few pixels is what makes few tiles.
SPLIT_C_MAX = 64  # at most this many partial sums per output


@version("cbr", _check, empty=_empty)
def split_c(x, w, b, y, padding=1):
    """Split-C: the channels sliced over the grid's z, summed into y (which starts at the bias) by atomics, then
    a ReLU pass -- when the image alone gives too few tiles for the SMs (batch 1, deep layers)."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    _, _, ho, wo = y.shape
    tiles = ceil_div(n * ho * wo, 128) * ceil_div(k, IG_BM)

    splits = 2
    while tiles * splits < sm_count() and splits < SPLIT_C_MAX:  # the fewest slices for a block per SM, at least 2
        splits *= 2
    return igemm_launches(x, w, b, y, padding, bn=128, min_blocks=None, splits=splits)
