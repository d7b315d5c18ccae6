"""Winograd's F(2x2, 3x3) and F(4x4, 3x3) convolutions (gpukernels/cbr/k05_winograd.py), the CBR lesson's fifth
step: each transform against its definition, the products against NumPy, and the whole against the float64 reference
on odd sizes, padding 0 to 2, outputs poisoned with NaN."""

from __future__ import annotations

import numpy as np
import pytest

from gpukernels import cbr
from gpukernels._launch import LaunchError
from gpukernels.cbr import k05_winograd as wg
from gpukernels.check import TOLERANCE, compare

from ._tiers import long_tier_after

# (B^T, G, A^T) of F(m x m, 3 x 3), by m: the definitions the transforms are checked against
MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}


def run(launches):
    for la in launches:
        la.kernel[la.grid, la.block](*la.args)


@pytest.mark.parametrize("m", [2, 4])
def test_the_matrices_make_a_3x3_correlation_of_a_patch(m):
    # the oracle's own check: the matrices above (which the transform assertions below use as the definitions) make
    # A^T [(G g G^T) * (B^T d B)] A the m x m "valid" correlation of the (m + 2) x (m + 2) patch d with g -- the
    # identity the kernels rest on
    bt, g_, at = MATRICES[m]
    rng = np.random.default_rng(0)
    d, g = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    direct = np.array([[(d[i:i + 3, j:j + 3] * g).sum() for j in range(m)] for i in range(m)])
    assert np.allclose(at @ ((g_ @ g @ g_.T) * (bt @ d @ bt.T)) @ at.T, direct)


def _cases():
    cases = long_tier_after((0, 2), [
        pytest.param((1, 3, 5, 7, 2, 3, 3), 1, id="odd-wide"), pytest.param((2, 5, 9, 8, 6, 3, 3), 0, id="pad0-even"),
        pytest.param((1, 2, 4, 3, 3, 3, 3), 2, id="pad2"), pytest.param((1, 1, 1, 1, 1, 3, 3), 1, id="one-pixel"),
        pytest.param((2, 9, 11, 10, 70, 3, 3), 1, id="two-block-rows"),
        pytest.param((2, 4, 6, 8, 5, 3, 3), 1, id="rows-of-16-bytes")])
    for m in (2, 4):
        for case in cases:
            # two rows of the products' blocks (70 output channels) at F(2x2) only: F(4x4) runs the same products
            # kernel, its grid 36 positions deep instead of 16 (two rows of its blocks: test_the_16_products), and its
            # transforms at every other shape here (8 CPU-s of CI's)
            if m == 4 and case.id == "two-block-rows":
                continue
            yield pytest.param(*case.values, m, marks=case.marks, id=f"{case.id}-{m}")


@pytest.mark.parametrize("shape,padding,m", list(_cases()))
def test_matches_the_float64_reference(shape, padding, m, seed):
    x, w, b = cbr.make_inputs(shape, seed)
    before = x.copy(), w.copy(), b.copy()
    ref = cbr.reference(x, w, b, padding)
    y = np.full(ref.shape, np.nan, np.float32)  # poison: an output never stored fails
    launches = wg.winograd_launches(x, w, b, y, padding, m=m)
    # F(4x4) stores a row of a tile's outputs as one 16-byte store where the output's rows allow it (Wo % 4 == 0)
    rows = m == 4 and ref.shape[3] % 4 == 0
    assert (launches[3].kernel is wg.output_transform_4x4_rows_kernel) == rows
    u, v, mm = launches[0].args[1], launches[1].args[1], launches[2].args[2]
    a = m + 2
    assert u.shape[0] == v.shape[0] == mm.shape[0] == a * a and launches[2].grid[2] == a * a
    for t in (u, v, mm):
        t.fill(np.nan)  # every element of the intermediates must be written too
    run(launches)
    check = compare(y, ref, TOLERANCE["cbr"])
    assert check.ok, f"winograd F({m}x{m}) {shape} padding={padding} seed={seed}: {check}"
    for arr, arr0 in zip((x, w, b), before):
        assert np.array_equal(arr, arr0), "the convolution modified its input"
    # the transforms against their definitions, in float64
    bt, g_, _ = MATRICES[m]
    n, c, h, wd, k, _, _ = shape
    th, tw = wg.tiles(*ref.shape[2:], m)
    # each within float32's rounding of the sum of its terms' magnitudes -- not of the result, which cancellation
    # (F(4x4)'s 4 and 5 against an outlier input) can make far smaller than the terms
    ug = np.einsum("ar,kcrs,bs->abkc", g_, w.astype(np.float64), g_).reshape(a * a, k, c)
    terms = np.einsum("ar,kcrs,bs->abkc", abs(g_), abs(w.astype(np.float64)), abs(g_)).reshape(a * a, k, c)
    assert np.all(abs(u - ug) <= 1e-6 * terms), np.max(abs(u - ug) / (terms + 1e-300))
    xp = np.zeros((n, c, m * th + 2, m * tw + 2))
    hh, ww = min(h, m * th + 2 - padding), min(wd, m * tw + 2 - padding)
    xp[:, :, padding:padding + hh, padding:padding + ww] = x[:, :, :hh, :ww]
    patches = np.stack([np.stack([xp[:, :, m * i:m * i + a, m * j:m * j + a] for j in range(tw)], 2)
                        for i in range(th)], 2)  # (N, C, th, tw, a, a)
    vg = np.einsum("ar,nctsrq,bq->abcnts", bt, patches, bt).reshape(a * a, c, n * th * tw)
    v_terms = np.einsum("ar,nctsrq,bq->abcnts", abs(bt), abs(patches), abs(bt)).reshape(a * a, c, n * th * tw)
    assert np.all(abs(v - vg) <= 1e-6 * v_terms), np.max(abs(v - vg) / (v_terms + 1e-300))
    mg = np.einsum("zkc,zcp->zkp", ug, vg)
    m_terms = np.einsum("zkc,zcp->zkp", terms, v_terms)  # the products' terms, each a product of transformed ones
    assert np.all(abs(mm - mg) <= 1e-5 * m_terms), np.max(abs(mm - mg) / (m_terms + 1e-300))


def test_the_step_takes_4x4_tiles_where_they_are_many():
    # planned, not run: 256 tiles of 4 x 4 (F4_MIN_TILES) or more take F(4x4); fewer, a side of 2, a tie take F(2x2)
    for shape, m in (((1, 2, 64, 63, 3, 3, 3), 4), ((4, 2, 30, 30, 3, 3, 3), 4), ((1, 2, 60, 64, 3, 3, 3), 2),
                     ((1, 2, 9, 7, 3, 3, 3), 2), ((300, 2, 2, 9, 3, 3, 3), 2), ((300, 2, 6, 5, 3, 3, 3), 2)):
        x, w, b = cbr.make_inputs(shape, 0)
        launches = cbr.winograd.launches(x, w, b)
        assert launches[2].grid[2] == (m + 2) ** 2, (shape, m)
        assert launches[1].kernel is wg.TRANSFORMS[m][1]


def test_16_byte_stores_only_where_the_rows_allow_them():
    x, w, b = cbr.make_inputs((1, 2, 8, 8, 3, 3, 3), 0)
    rows = wg.output_transform_4x4_rows_kernel
    y = np.full((1, 3, 8, 8), np.nan, np.float32)
    assert wg.winograd_launches(x, w, b, y, 1, m=4)[3].kernel is rows
    assert wg.winograd_launches(x, w, b, y, 1, m=2)[3].kernel is wg.output_transform_kernel
    # not C-contiguous (a view of every other channel), or rows not on 16-byte boundaries: the 4-byte stores
    wide = np.full((1, 6, 8, 8), np.nan, np.float32)
    assert wg.winograd_launches(x, w, b, wide[:, ::2], 1, m=4)[3].kernel is wg.output_transform_4x4_kernel
    raw = np.zeros(3 * 64 + 1, np.float32)[1:].reshape(1, 3, 8, 8)  # 4 bytes past an aligned start
    launch = wg.winograd_launches(x, w, b, raw, 1, m=4)[3]
    assert launch.kernel is wg.output_transform_4x4_kernel
    # the rows kernel writes y itself: its argument is a view of y's memory, not a copy
    assert np.shares_memory(wg.winograd_launches(x, w, b, y, 1, m=4)[3].args[2], y)


def test_rejects_other_output_tiles():
    x, w, b = cbr.make_inputs((1, 2, 6, 6, 3, 3, 3), 0)
    with pytest.raises(LaunchError, match=r"output tile m must be one of \[2, 4\]; got 3"):
        wg.winograd_launches(x, w, b, np.empty((1, 3, 6, 6), np.float32), 1, m=3)


_USED, _OTHER = (wg.TILE_SMALL, wg.TILE_LARGE), ((64, 64), (128, 64))


@pytest.mark.parametrize("k,c,p,tile", [(1, 1, 1, t) for t in _USED + _OTHER]
                         # the default tier: each tile at one pixel, the two tiles the step uses at 65 x 9 x 70
                         + long_tier_after(1, [(65, 9, 70, t) for t in _USED + _OTHER], multi=True)
                         # two rows and two columns of blocks on either tile: slow in the simulator (~10-16 s each);
                         # the long tier's race check traces the large tile on 128 output channels. (A case of 3 x 17 x
                         # 130 -- two columns of blocks, 3 k tiles through the two buffers -- is gone: 129 x 9 x 130
                         # has the second column, and the third k tile's reuse of the first's buffer is traced and
                         # compared with NumPy on both tiles by test_race_check.py's winograd cases, 20 channels.)
                         + [pytest.param(129, 9, 130, t, marks=pytest.mark.slow) for t in _USED])
def test_the_16_products(k, c, p, tile, seed):
    # partial block tiles on every side, a channel count that is not a multiple of the k tile, every block tile
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal((16, k, c), dtype=np.float32), rng.standard_normal((16, c, p), dtype=np.float32)
    m = np.full((16, k, p), np.nan, np.float32)
    kernel = wg.products_kernel_for(tile)
    assert kernel.tile == tile
    kernel[(-(-p // tile[1]), -(-k // tile[0]), 16), (kernel.threads,)](u, v, m)
    ref = np.einsum("zkc,zcp->zkp", u.astype(np.float64), v.astype(np.float64))
    assert compare(m, ref.astype(np.float32), 1e-6).ok


def test_only_3x3_filters():
    x, w, b = cbr.make_inputs((1, 2, 6, 6, 3, 5, 5), 0)
    y = np.empty((1, 3, 4, 4), np.float32)
    with pytest.raises(LaunchError, match=r"needs a 3 x 3 filter \(R, S\) = \(3, 3\); got \(5, 5\)"):
        wg.winograd_launches(x, w, b, y, 1)


def test_flops_done_is_the_direct_count_over_2_25_or_4_where_the_tile_divides_the_output():
    shape = (32, 256, 12, 12, 256, 3, 3)
    assert cbr.flops(shape) / wg.flops_done(shape, m=2) == 2.25
    assert cbr.flops(shape) / wg.flops_done(shape, m=4) == 4 and wg.flops_done(shape) == wg.flops_done(shape, m=4)
    ragged = (2, 8, 14, 14, 8, 3, 3)  # 14 = 3 x 4 + 2: the last tile of 4 x 4 is half outside
    assert wg.flops_done(ragged, m=4) == 2 * 36 * 8 * 8 * 2 * 4 * 4


_CHILD = r"""
import json, re
from numba import cuda, types
from gpukernels.cbr import k05_winograd as wg
from gpukernels.resources import _assemble
f1, f2, f3, f4, i8 = (types.Array(types.float32, 1, "C"), types.Array(types.float32, 2, "C"),
                      types.Array(types.float32, 3, "C"), types.Array(types.float32, 4, "C"), types.int64)
sigs = {"filter": (wg.filter_transform_kernel, (f4, f3)), "input": (wg.input_transform_kernel, (f4, f3, i8, i8, i8)),
        "products": (wg.products_kernel, (f3, f3, f3)), "products_large": (wg.products_kernel_large, (f3, f3, f3)),
        "output": (wg.output_transform_kernel, (f3, f1, f4, i8, i8)),
        "filter4": (wg.filter_transform_4x4_kernel, (f4, f3)),
        "input4": (wg.input_transform_4x4_kernel, (f4, f3, i8, i8, i8)),
        "output4": (wg.output_transform_4x4_kernel, (f3, f1, f4, i8, i8)),
        "output4rows": (wg.output_transform_4x4_rows_kernel, (f3, f1, f2, i8, i8, i8))}
out = {}
for name, (k, sig) in sigs.items():
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    res = re.search(r"used (\d+) registers.*?(\d+) stack.*?(\d+) bytes lmem", _assemble(ptx, "sm_90"), re.S)
    out[name] = {"registers": int(res[1]), "stack": int(res[2]), "lmem": int(res[3]), "fma": ptx.count("fma.rn.f32"),
                 "stores16": ptx.count("st.global.v4.f32"), "stores4": ptx.count("st.global.f32")}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
@pytest.mark.slow  # a compile of its own; the default tier compiles the tensor-core steps
def test_compiles_for_sm90_without_local_memory():
    import json

    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_CHILD))
    for name, r in out.items():
        # no spills, and no local array left in memory (a loop not unrolled keeps its array on the stack)
        assert r["lmem"] == 0 and r["stack"] == 0, f"{name} uses local memory: {r}"
    # the products' 8 x 8 outputs per thread: 64 FMAs per channel, all in registers, and at most 128 of them so that
    # 16 warps fit an SM (4 blocks of 64 x 128, 2 of 128 x 128)
    for name in ("products", "products_large"):
        assert out[name]["fma"] >= 64 and out[name]["registers"] <= 128, out
    # F(4x4)'s output rows: four 16-byte stores per tile, no 4-byte ones (the 4-byte kernel: 16)
    assert (out["output4rows"]["stores16"], out["output4rows"]["stores4"]) == (4, 0), out["output4rows"]
    assert out["output4"]["stores16"] == 0 and out["output4"]["stores4"] == 16, out["output4"]
