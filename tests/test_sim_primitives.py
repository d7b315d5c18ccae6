"""Warp-level and block-level primitives of gpukernels.sim against results computed by hand.

Every kernel writes one value per thread; the expected arrays are spelled out (not recomputed with the same
formula the simulator uses) so that a wrong lane mapping cannot pass.
"""

import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="simulator only")

from numba import cuda, float32, int32  # noqa: E402

FULL = 0xFFFFFFFF


def lanes(n=32, dtype=np.int64):
    return np.arange(n, dtype=dtype)


@cuda.jit
def shfl_idx_kernel(v, out, src, width):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_sync(FULL, v[i], src, width)


@cuda.jit
def shfl_up_kernel(v, out, delta, width):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_up_sync(FULL, v[i], delta, width)


@cuda.jit
def shfl_down_kernel(v, out, delta, width):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_down_sync(FULL, v[i], delta, width)


@cuda.jit
def shfl_xor_kernel(v, out, mask, width):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_xor_sync(FULL, v[i], mask, width)


@cuda.jit
def shfl_default_width_kernel(v, out):
    # numba's own signatures, no width: what a kernel that must also compile for a GPU writes
    i = cuda.threadIdx.x
    out[0, i] = cuda.shfl_sync(FULL, v[i], 5)
    out[1, i] = cuda.shfl_up_sync(FULL, v[i], 30)
    out[2, i] = cuda.shfl_down_sync(FULL, v[i], 30)
    out[3, i] = cuda.shfl_xor_sync(FULL, v[i], 31)


def run(kernel, n, *extra, values=None):
    v = (100 + lanes(n)) if values is None else values
    out = np.full(n, -1, dtype=v.dtype)
    kernel[1, n](v, out, *extra)
    return out


def test_shfl_sync_broadcasts_within_each_segment():
    # width 8, source lane 3: every lane reads lane 3 of its own group of 8
    assert run(shfl_idx_kernel, 32, 3, 8).tolist() == [103] * 8 + [111] * 8 + [119] * 8 + [127] * 8
    # the source lane is taken modulo the width: 11 -> 3
    assert run(shfl_idx_kernel, 32, 11, 8).tolist() == [103] * 8 + [111] * 8 + [119] * 8 + [127] * 8
    assert run(shfl_idx_kernel, 32, 31, 32).tolist() == [131] * 32


def test_shfl_up_returns_own_value_below_segment_start():
    got = run(shfl_up_kernel, 32, 2, 8)
    expected = []
    for seg in range(4):
        base = 100 + 8 * seg
        expected += [base, base + 1, base, base + 1, base + 2, base + 3, base + 4, base + 5]
    assert got.tolist() == expected


def test_shfl_down_returns_own_value_past_segment_end():
    got = run(shfl_down_kernel, 32, 3, 16)
    first = [103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 113, 114, 115]
    second = [x + 16 for x in first]
    assert got.tolist() == first + second


def test_shfl_xor_may_read_earlier_segments_not_later_ones():
    assert run(shfl_xor_kernel, 32, 1, 32).tolist() == [101, 100, 103, 102, 105, 104, 107, 106] + [
        109, 108, 111, 110, 113, 112, 115, 114, 117, 116, 119, 118, 121, 120, 123, 122, 125, 124, 127, 126,
        129, 128, 131, 130,
    ]  # fmt: skip
    # width 16, lane mask 16: lanes 0-15 would read the later segment -> own value; lanes 16-31 read 0-15
    got = run(shfl_xor_kernel, 32, 16, 16)
    assert got.tolist() == list(range(100, 116)) + list(range(100, 116))


def test_default_width_is_the_whole_warp():
    v = 100 + lanes(32)
    out = np.full((4, 32), -1, dtype=np.int64)
    shfl_default_width_kernel[1, 32](v, out)
    assert out[0].tolist() == [105] * 32
    assert out[1].tolist() == list(range(100, 130)) + [100, 101]
    assert out[2].tolist() == [130, 131] + list(range(102, 132))
    assert out[3].tolist() == list(range(131, 99, -1))


def test_shuffles_keep_float32_values():
    v = np.linspace(0.5, 16.0, 32).astype(np.float32)
    got = run(shfl_xor_kernel, 32, 2, 32, values=v)
    assert got.dtype == np.float32
    assert got[0] == v[2] and got[2] == v[0] and got[5] == v[7]


@cuda.jit
def warp_sum_kernel(x, out):
    # butterfly over the lanes that exist in a warp of `width` lanes
    i = cuda.threadIdx.x
    v = x[i]
    offset = 4
    while offset > 0:
        v += cuda.shfl_xor_sync(FULL, v, offset, 8)
        offset //= 2
    out[i] = v


def test_partial_warp_reduction_within_existing_lanes():
    # 40 threads: warp 0 is full, warp 1 has 8 lanes (32..39); groups of 8 reduce independently
    x = np.arange(40, dtype=np.int64)
    out = np.zeros(40, dtype=np.int64)
    warp_sum_kernel[1, 40](x, out)
    assert out.tolist() == [28] * 8 + [92] * 8 + [156] * 8 + [220] * 8 + [284] * 8


@cuda.jit
def partial_shfl_down_kernel(x, out):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_down_sync(FULL, x[i], 2)


def test_partial_warp_reading_a_missing_lane_is_an_error():
    x = np.arange(36, dtype=np.int64)
    out = np.zeros(36, dtype=np.int64)
    with pytest.raises(gpukernels.sim.WarpMaskError) as info:
        partial_shfl_down_kernel[1, 36](x, out)
    msg = str(info.value)
    assert "lane 2 of warp 1" in msg and "reads lane 4" in msg and "partial warp with only 4 lanes" in msg


@cuda.jit
def votes_kernel(out):
    i = cuda.threadIdx.x
    p = i % 3 == 0
    out[0, i] = cuda.ballot_sync(FULL, p)
    out[1, i] = cuda.all_sync(FULL, i < 100)
    out[2, i] = cuda.all_sync(FULL, p)
    out[3, i] = cuda.any_sync(FULL, p)
    out[4, i] = cuda.any_sync(FULL, i > 100)
    out[5, i] = cuda.eq_sync(FULL, p)
    out[6, i] = cuda.eq_sync(FULL, i >= 0)
    out[7, i] = cuda.activemask()
    out[8, i] = cuda.lanemask_lt()
    out[9, i] = cuda.laneid
    out[10, i] = cuda.warpsize
    out[11, i] = cuda.match_any_sync(FULL, i // 4)


def test_votes_ballot_masks_and_lane_ids_full_warp():
    out = np.zeros((12, 32), dtype=np.int64)
    votes_kernel[1, 32](out)
    assert out[0].tolist() == [0x49249249] * 32
    assert out[1].tolist() == [1] * 32 and out[2].tolist() == [0] * 32
    assert out[3].tolist() == [1] * 32 and out[4].tolist() == [0] * 32
    assert out[5].tolist() == [0] * 32 and out[6].tolist() == [1] * 32
    assert out[7].tolist() == [0xFFFFFFFF] * 32
    assert out[8, :6].tolist() == [0, 1, 3, 7, 15, 31] and out[8, 31] == 0x7FFFFFFF
    assert out[9].tolist() == list(range(32)) and out[10].tolist() == [32] * 32
    assert out[11, :8].tolist() == [0xF] * 4 + [0xF0] * 4 and out[11, 31] == 0xF0000000


def test_votes_in_a_partial_warp_count_only_existing_lanes():
    out = np.zeros((12, 40), dtype=np.int64)
    votes_kernel[1, 40](out)
    # warp 1 = threads 32..39; i % 3 == 0 for 33, 36, 39 -> lanes 1, 4, 7
    assert out[0, 32:].tolist() == [0b10010010] * 8
    assert out[7, 32:].tolist() == [0xFF] * 8
    assert out[9, 32:].tolist() == list(range(8))


@cuda.jit
def laneid_2d_kernel(out):
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    out[y, x] = cuda.laneid


def test_laneid_follows_linear_thread_id_in_2d_blocks():
    out = np.zeros((8, 8), dtype=np.int64)
    laneid_2d_kernel[1, (8, 8)](out)
    # thread (x, y) has linear id x + 8 y; lanes restart every 32 threads = every 4 rows
    assert out[0].tolist() == list(range(8)) and out[3].tolist() == list(range(24, 32))
    assert out[4].tolist() == list(range(8)) and out[7, 7] == 31


@cuda.jit
def syncwarp_exchange_kernel(out):
    s = cuda.shared.array(32, int32)
    i = cuda.threadIdx.x
    s[i] = i * 10
    cuda.syncwarp()
    out[i] = s[(i + 1) % 32]


def test_syncwarp_orders_shared_memory_within_a_warp():
    out = np.zeros(32, dtype=np.int64)
    syncwarp_exchange_kernel[1, 32](out)
    assert out.tolist() == [10 * ((i + 1) % 32) for i in range(32)]
    assert out[31] == 0 and out[0] == 10


@cuda.jit
def syncthreads_votes_kernel(out):
    i = cuda.threadIdx.x
    out[0, i] = cuda.syncthreads_count(i % 4 == 0)
    out[1, i] = cuda.syncthreads_and(i < 64)
    out[2, i] = cuda.syncthreads_and(i < 63)
    out[3, i] = cuda.syncthreads_or(i == 63)
    out[4, i] = cuda.syncthreads_or(i > 63)


def test_syncthreads_count_and_or():
    out = np.zeros((5, 64), dtype=np.int64)
    syncthreads_votes_kernel[1, 64](out)
    assert out[:, 0].tolist() == [16, 1, 0, 1, 0]
    assert (out == out[:, :1]).all()


@cuda.jit
def atomics_kernel(counter, hist, mx, x):
    i = cuda.grid(1)
    cuda.atomic.add(counter, 0, 1)
    cuda.atomic.add(hist, x[i] % 4, 1)
    cuda.atomic.max(mx, 0, x[i])
    cuda.atomic.min(mx, 1, x[i])


def test_atomics_count_every_thread():
    x = (np.arange(96) * 7 % 50).astype(np.int64)
    counter = np.zeros(1, np.int64)
    hist = np.zeros(4, np.int64)
    mx = np.array([-1, 1000], np.int64)
    atomics_kernel[3, 32](counter, hist, mx, x)
    assert counter[0] == 96
    assert hist.tolist() == [int((x % 4 == k).sum()) for k in range(4)] and hist.sum() == 96
    assert mx.tolist() == [49, 0]


@cuda.jit
def dynamic_shared_kernel(out):
    buf = cuda.shared.array(0, float32)
    i = cuda.threadIdx.x
    buf[i] = i * 0.5
    cuda.syncthreads()
    out[i] = buf[31 - i]


def test_dynamic_shared_memory_and_four_part_launch_configuration():
    out = np.zeros(32, np.float32)
    dynamic_shared_kernel[1, 32, 0, 32 * 4](out)
    assert out.tolist() == [(31 - i) * 0.5 for i in range(32)]


@cuda.jit
def grid_kernel(out):
    x, y = cuda.grid(2)
    if x < out.shape[1] and y < out.shape[0]:
        out[y, x] = 1000 * cuda.blockIdx.y + 100 * cuda.blockIdx.x + 10 * cuda.threadIdx.y + cuda.threadIdx.x


def test_grid_indices_in_2d():
    out = np.zeros((6, 5), np.int64)
    grid_kernel[(2, 2), (3, 3)](out)
    assert out[0].tolist() == [0, 1, 2, 100, 101]
    assert out[4].tolist() == [1010, 1011, 1012, 1110, 1111]
    assert out[5, 4] == 1121


def test_uninitialised_shared_and_local_memory_is_poisoned_deterministically():
    @cuda.jit
    def read_uninit(out):
        s = cuda.shared.array(4, float32)
        loc = cuda.local.array(2, float32)
        out[0] = s[1]
        out[1] = loc[0]

    out = np.zeros(2, np.float32)
    read_uninit[1, 1](out)
    assert np.isnan(out).all()


def test_math_overflow_gives_inf_and_nan_as_on_a_gpu():
    import math

    @cuda.jit
    def overflow(x, out):
        out[0] = math.exp(x[0])  # Python raises OverflowError; CUDA gives inf
        out[1] = math.log(x[1])  # log(0) = -inf
        out[2] = math.sqrt(x[2])  # sqrt(-1) = nan
        out[3] = math.exp(x[3])

    out = np.zeros(4, np.float32)
    overflow[1, 1](np.array([1e4, 0.0, -1.0, 1.0], np.float32), out)
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]) and out[3] == np.float32(math.e)
    assert math.exp is not None and type(math).__name__ == "module"  # put back after the launch


def test_match_all_returns_the_mask_and_a_flag():
    """match_all_sync(mask, v): (mask, True) when every lane of the mask has the same v, else (0, False)."""
    from numba import cuda as cu

    @cu.jit
    def k(vals, out_mask, out_flag):
        i = cu.threadIdx.x
        m, flag = cu.match_all_sync(0xFFFF, vals[i]) if i < 16 else cu.match_all_sync(0xFFFF0000, vals[i])
        out_mask[i] = m
        out_flag[i] = flag

    vals = np.zeros(32, np.int64)
    vals[16:] = np.arange(16)  # the upper half differs
    m, f = np.zeros(32, np.int64), np.zeros(32, np.int64)
    k[1, 32](vals, m, f)
    assert (m[:16] == 0xFFFF).all() and (f[:16] == 1).all()
    assert (m[16:] == 0).all() and (f[16:] == 0).all()
