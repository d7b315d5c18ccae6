"""Winograd's F(2x2, 3x3) convolution (gpukernels/cbr/k05_winograd.py), the CBR lesson's fifth step: each transform
against its definition, the 16 products against NumPy, and the whole against the float64 reference on odd sizes,
padding 0 to 2, outputs poisoned with NaN."""

from __future__ import annotations

import numpy as np
import pytest

from gpukernels import cbr
from gpukernels._launch import LaunchError
from gpukernels.cbr import k05_winograd as wg
from gpukernels.check import TOLERANCE, compare

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def run(launches):
    for la in launches:
        la.kernel[la.grid, la.block](*la.args)


def test_the_matrices_make_a_3x3_correlation_of_a_4x4_patch():
    # the oracle's own check: BT, G and AT above (which the transform assertions below use as the definitions) make
    # A^T [(G g G^T) * (B^T d B)] A the 2 x 2 "valid" correlation of d with g -- the identity the kernels rest on
    rng = np.random.default_rng(0)
    d, g = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
    direct = np.array([[(d[i:i + 3, j:j + 3] * g).sum() for j in range(2)] for i in range(2)])
    assert np.allclose(AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T, direct)


@pytest.mark.parametrize("shape,padding", [((1, 3, 5, 7, 2, 3, 3), 1), ((2, 5, 9, 8, 6, 3, 3), 0),
                                           ((1, 2, 4, 3, 3, 3, 3), 2), ((1, 1, 1, 1, 1, 3, 3), 1),
                                           ((2, 9, 11, 10, 70, 3, 3), 1)],
                         ids=["odd-wide", "pad0-even", "pad2", "one-pixel", "two-block-rows"])
def test_matches_the_float64_reference(shape, padding, seed):
    x, w, b = cbr.make_inputs(shape, seed)
    before = x.copy(), w.copy(), b.copy()
    ref = cbr.reference(x, w, b, padding)
    y = np.full(ref.shape, np.nan, np.float32)  # poison: an output never stored fails
    launches = wg.winograd_launches(x, w, b, y, padding)
    u, v, m = launches[0].args[1], launches[1].args[1], launches[2].args[2]
    for t in (u, v, m):
        t.fill(np.nan)  # every element of the intermediates must be written too
    run(launches)
    check = compare(y, ref, TOLERANCE["cbr"])
    assert check.ok, f"winograd {shape} padding={padding} seed={seed}: {check}"
    for a, a0 in zip((x, w, b), before):
        assert np.array_equal(a, a0), "the convolution modified its input"
    # the transforms against their definitions, in float64
    n, c, h, wd, k, _, _ = shape
    th, tw = wg.tiles(*ref.shape[2:])
    ug = np.einsum("ar,kcrs,bs->abkc", G, w.astype(np.float64), G).reshape(16, k, c)
    assert np.allclose(u, ug, rtol=1e-6, atol=1e-7)
    xp = np.zeros((n, c, 2 * th + 2, 2 * tw + 2))
    hh, ww = min(h, 2 * th + 2 - padding), min(wd, 2 * tw + 2 - padding)
    xp[:, :, padding:padding + hh, padding:padding + ww] = x[:, :, :hh, :ww]
    patches = np.stack([np.stack([xp[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4] for j in range(tw)], 2)
                        for i in range(th)], 2)  # (N, C, th, tw, 4, 4)
    vg = np.einsum("ar,nctsrq,bq->abcnts", BT, patches, BT).reshape(16, c, n * th * tw)
    assert np.allclose(v, vg, rtol=1e-6, atol=1e-5)
    assert np.allclose(m, np.einsum("zkc,zcp->zkp", ug, vg), rtol=1e-4, atol=1e-4)


_USED, _OTHER = (wg.TILE_SMALL, wg.TILE_LARGE), ((64, 64), (128, 64))


@pytest.mark.parametrize("k,c,p,tile", [(1, 1, 1, t) for t in _USED + _OTHER] + [(65, 9, 70, t) for t in _USED + _OTHER]
                         + [(3, 17, 130, t) for t in _USED]
                         # two rows of blocks on either tile: slow in the simulator (~20 s each); the default tier's
                         # race check runs the large tile on 130 output channels
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


def test_flops_done_is_the_direct_count_over_2_25_on_even_outputs():
    shape = (32, 256, 14, 14, 256, 3, 3)
    assert cbr.flops(shape) / wg.flops_done(shape) == 2.25


_CHILD = r"""
import json, re
from numba import cuda, types
from gpukernels.cbr import k05_winograd as wg
from gpukernels.resources import _assemble
f1, f3, f4, i8 = (types.Array(types.float32, 1, "C"), types.Array(types.float32, 3, "C"),
                  types.Array(types.float32, 4, "C"), types.int64)
sigs = {"filter": (wg.filter_transform_kernel, (f4, f3)), "input": (wg.input_transform_kernel, (f4, f3, i8, i8, i8)),
        "products": (wg.products_kernel, (f3, f3, f3)), "products_large": (wg.products_kernel_large, (f3, f3, f3)),
        "output": (wg.output_transform_kernel, (f3, f1, f4, i8, i8))}
out = {}
for name, (k, sig) in sigs.items():
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    res = re.search(r"used (\d+) registers.*?(\d+) bytes lmem", _assemble(ptx, "sm_90"), re.S)
    out[name] = {"registers": int(res[1]), "lmem": int(res[2]), "fma": ptx.count("fma.rn.f32")}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
def test_compiles_for_sm90_without_local_memory():
    import json

    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_CHILD))
    for name, r in out.items():
        assert r["lmem"] == 0, f"{name} spills: {r}"
    # the products' 8 x 8 outputs per thread: 64 FMAs per channel, all in registers, and at most 128 of them so that
    # 16 warps fit an SM (4 blocks of 64 x 128, 2 of 128 x 128)
    for name in ("products", "products_large"):
        assert out[name]["fma"] >= 64 and out[name]["registers"] <= 128, out
