"""The attention lesson (gpukernels.attention), before it joins ``gpukernels.LESSONS``:

* every version against a float64 reference at small odd shapes -- Sq != Sk both ways, D = 1 and 128, one key --
  causal and not, outputs poisoned with NaN, inputs checked unmodified;
* scores more than 80 apart (the online softmax's running max), the top-left causal mask, device arrays, empty inputs;
* the tiled step under the tracer: no races and no uninitialised shared reads over several K/V tiles, and the tiles
  the causal mask hides are never loaded;
* every bad argument is a one-line LaunchError naming it; the dispatcher follows its thresholds;
* on the compiler (no GPU): every kernel compiles for sm_90 without local memory;
* the float16 tensor-core step ``mma`` (its own tests, at the end: it takes float16 inputs): against float64 of its
  float16 inputs at odd shapes, its bad D and dtype, the C-to-A fragment re-layout it relies on, its compile;
* float16 decoding, ``split_keys_f16``: its slices' partial states against their definition (empty slices included),
  the merged output, its plan and the dispatcher's rule, races, its compile.
"""

import json

import numpy as np
import pytest
from numba import cuda

import gpukernels
from gpukernels import attention as at
from gpukernels._launch import LaunchError, is_device_array
from gpukernels.check import compare

from ._tiers import long_tier_after

SIM = gpukernels.MODE == "sim"

# float32 scores against float64: a score's absolute rounding error becomes the same *relative* error of its weight
# exp(s - m), so scores of tens to hundreds (make_inputs' outliers) carry ~1e-5 into the output at worst, and the
# kernels land near 1e-6 (they add in other orders than the reference). An indexing bug, a lost rescale or a mask off
# by one lands at 1e-2 or more.
TOLERANCE = 1e-4

#: The float32 versions: every test written for float32 inputs iterates these (``mma`` takes float16, tested below).
F32_VERSIONS = [name for name in at.VERSIONS if name not in at.FLOAT16_VERSIONS]


def run_checked(name, shape, seed, causal=False, scale=None, inputs=None):
    q, k, v = inputs if inputs is not None else at.make_inputs(shape, seed)
    before = q.copy(), k.copy(), v.copy()
    ref = at.reference(q, k, v, causal=causal, scale=scale)
    out = np.full(ref.shape, np.nan, np.float32)  # poison: an element never written fails
    result = at.VERSIONS[name](q, k, v, causal=causal, scale=scale, out=out)
    assert result is out
    check = compare(out, ref, TOLERANCE)
    assert check.ok, f"attention.{name} shape={q.shape[:3] + k.shape[2:]} causal={causal} seed={seed}: {check}"
    for x, x0 in zip((q, k, v), before):
        assert np.array_equal(x, x0), f"attention.{name} modified its input"
    return out


# ----------------------------------------------------------------------------------------------------------
# Every version against float64
# ----------------------------------------------------------------------------------------------------------


# Without the mask tests/test_lessons.py runs every version at these shapes (and the GPU's); here the causal mask --
# but at (1, 2, 33, 20, 64), where test_lessons.py::test_attention_causal runs every version with it in the default
# tier, the same check (~4 CPU-s of the long tier's).
@pytest.mark.parametrize("shape", long_tier_after((4,), [s for s in at.SHAPES["test"] if s != (1, 2, 33, 20, 64)]),
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", F32_VERSIONS)
def test_matches_reference_causal(name, shape, seed):
    run_checked(name, shape, seed, causal=True)


# fused_rows only at the thousand keys (its loop, one key at a time): it has no loop over queries -- a warp per query
# row, 4 a block -- so a thousand queries are 250 blocks of the code test_lessons.py runs at every test shape (17 s
# of CI's CPU); naive (its scores' softmax plan over rows of 1000) and tiled (63 query tiles) stay at both
@pytest.mark.slow
@pytest.mark.parametrize("name,shape", [(name, shape) for shape in [(1, 1, 1000, 17, 16), (1, 1, 17, 1000, 64)]
                                        for name in ["naive", "fused_rows", "tiled"]
                                        if (name, shape[2]) != ("fused_rows", 1000)],
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else x)
def test_a_thousand_queries_or_keys(name, shape, seed):
    # ~10 s for fused_rows on the simulator (a warp per row, one key at a time)
    for causal in (False, True):
        run_checked(name, shape, seed, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", at.SHAPES["test_gpu"], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", F32_VERSIONS)
def test_matches_reference_gpu_sizes_causal(name, shape, seed):
    run_checked(name, shape, seed, causal=True)


def test_test_shapes_reach_every_edge():
    shapes = at.SHAPES["test"]
    assert any(sq < sk for _, _, sq, sk, _ in shapes) and any(sq > sk for _, _, sq, sk, _ in shapes)
    assert {1, 128} <= {d for *_, d in shapes} and any(d % 16 for *_, d in shapes)
    assert any(sk > 2 * at.tile_keys(at.padded_dims(d)) for *_, sk, d in shapes)  # 3 or more K/V tiles
    assert any(sq > at.TILE_ROWS for _, _, sq, _, _ in shapes)  # two query tiles
    assert (1, 1, 1, 1, 16) in shapes


@pytest.mark.parametrize("name", F32_VERSIONS)
def test_explicit_scale(name, seed):
    run_checked(name, (1, 2, 7, 9, 24), seed, scale=0.05)
    run_checked(name, (1, 2, 7, 9, 24), seed, causal=True, scale=3)


@pytest.mark.parametrize("name", F32_VERSIONS)
def test_scores_more_than_80_apart(name, seed):
    # Every other query row gets a large first dimension: its scores are 25 * k[j, 0] (scale 1/4), which across 40
    # keys span ~100 -- exp() of an unshifted score would overflow past 88.7, and a running max that is not
    # rescaled into the sums would be far off.
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s, dtype=np.float32) for s in ((1, 2, 9, 16), (1, 2, 40, 16), (1, 2, 40, 16)))
    q[:, :, ::2, 0] = 100.0
    k[:, :, 0, 0] = -4.0  # key 0 low: under the causal mask the first rows' max grows (rescaling) as keys come in
    k[:, :, 3, 0] = 4.0
    s = np.matmul(q.astype(np.float64), np.swapaxes(k, -1, -2).astype(np.float64)) / 4
    assert (s.max(-1) - s.min(-1)).max() > 80  # the case is what it says
    for causal in (False, True):
        out = run_checked(name, None, seed, causal=causal, inputs=(q, k, v))
        assert np.isfinite(out).all()


@pytest.mark.parametrize("name", F32_VERSIONS)
def test_causal_mask_is_top_left(name, seed):
    # torch's is_causal: query i sees keys 0..i. Query 0 sees key 0 alone (its output is v[0]); with Sq > Sk the
    # queries from Sk - 1 on see every key, as without the mask.
    q, k, v = at.make_inputs((1, 2, 7, 4, 8), seed)
    out = at.VERSIONS[name](q, k, v, causal=True)
    full = at.VERSIONS[name](q, k, v)
    np.testing.assert_allclose(out[:, :, 0], v[:, :, 0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[:, :, 3:], full[:, :, 3:], rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[:, :, 1:3], full[:, :, 1:3])


def test_reference_semantics():
    q, k, v = at.make_inputs((1, 1, 3, 5, 4), 0)
    assert np.array_equal(at.reference(q, k, v), at.reference(q, k, v, scale=0.5))  # 1/sqrt(4)
    mask = at.causal_mask(3, 5)
    assert mask.tolist() == [[False, True, True, True, True], [False, False, True, True, True],
                             [False, False, False, True, True]]
    assert np.allclose(at.reference(q, k, v, causal=True)[0, 0, 0], v[0, 0, 0])


def test_make_inputs_has_rows_with_scores_more_than_80_apart(seed):
    q, k, v = at.make_inputs((1, 2, 33, 40, 64), seed)
    s = np.matmul(q.astype(np.float64), np.swapaxes(k, -1, -2).astype(np.float64)) / 8
    assert (s.max(-1) - s.min(-1)).max() > 80
    assert q.dtype == k.dtype == v.dtype == np.float32 and v.shape == (1, 2, 40, 64)


def test_flops_and_bytes():
    assert at.flops((2, 3, 5, 7, 16)) == 4 * 2 * 3 * 5 * 7 * 16
    for sq, sk in ((5, 7), (7, 5), (6, 6), (1, 9), (9, 1)):
        visible = int((~at.causal_mask(sq, sk)).sum())
        assert at.visible_pairs(sq, sk, causal=True) == visible
        assert at.flops((2, 3, sq, sk, 16), causal=True) == 4 * 2 * 3 * 16 * visible
    assert at.flops((1, 1, 4096, 4096, 128), causal=True) == 4 * 128 * 4096 * 4097 // 2
    assert at.min_bytes((2, 3, 5, 7, 16)) == 4 * 2 * 3 * 16 * (2 * 5 + 2 * 7)


@pytest.mark.parametrize("name", F32_VERSIONS)
def test_device_arrays_in_device_array_out(name, seed):
    q, k, v = at.make_inputs((1, 2, 5, 6, 8), seed)
    ref = at.reference(q, k, v, causal=True)
    d = [cuda.to_device(x) for x in (q, k, v)]
    out = at.VERSIONS[name](*d, causal=True)
    assert is_device_array(out)
    assert compare(out.copy_to_host(), ref, TOLERANCE).ok
    for dx, x in zip(d, (q, k, v)):
        assert np.array_equal(dx.copy_to_host(), x)


@pytest.mark.parametrize("shape", [(0, 2, 3, 4, 8), (1, 0, 3, 4, 8), (1, 2, 0, 4, 8)], ids=str)
def test_empty_batch_heads_or_queries(shape):
    for name in F32_VERSIONS:
        out = at.VERSIONS[name](*at.make_inputs(shape, 0))
        assert out.shape == shape[:3] + shape[4:] and out.dtype == np.float32, name


# ----------------------------------------------------------------------------------------------------------
# Launch plans, the tracer
# ----------------------------------------------------------------------------------------------------------


def test_launch_plans():
    q, k, v = at.make_inputs((2, 3, 40, 70, 80), 0)
    first, *softmax_launches, last = at.naive.launches(q, k, v)
    s = first.args[2]  # the scratch S: a row of Sk scores per query of every head
    assert first.kernel is at.scores_kernel and s.shape == (2 * 3 * 40, 70) and first.grid == (-(-s.size // 256),)
    assert last.kernel is at.pv_kernel and last.args[0] is s  # P V reads the softmax's output: S, overwritten by P
    assert softmax_launches and all(la.args[0] is s and la.args[-1] is s for la in softmax_launches)
    [la] = at.fused_rows.launches(q, k, v)
    assert la.kernel is at.fused_rows_kernel_for(3) and la.block == (32, 4) and la.grid == (60,)  # 240 rows / 4
    [la] = at.tiled.launches(q, k, v)
    assert la.kernel is at.tiled_kernel_for(128) and la.kernel.tile == (32, 16, 128)  # D = 80: 128 wide, 16 keys
    assert la.block == (128,) and la.grid == (6 * 2,)  # 6 heads x 2 query tiles
    assert at.tiled_kernel_for(64).tile == (32, 32, 64) and at.tiled_kernel_for(16).tile == (32, 32, 16)
    assert [at.padded_dims(d) for d in (1, 16, 17, 33, 64, 65, 80, 128)] == [16, 16, 32, 64, 64, 128, 128, 128]


def _traced(version, inputs, causal, tolerance):
    """Run ``version`` under the tracer into a NaN-poisoned output, check it against float64, return the trace (a
    barrier divergence or a warp-mask error fails the test)."""
    from gpukernels.sim import BarrierDivergenceError, WarpMaskError

    q, k, v = inputs
    out = np.full(q.shape[:3] + v.shape[3:], np.nan, np.float32)
    try:
        with gpukernels.trace(count_local=False) as t:  # races: global and shared memory
            version(q, k, v, causal=causal, out=out)
    except (BarrierDivergenceError, WarpMaskError) as err:
        pytest.fail(f"{type(err).__name__}: {err}")
    assert compare(out, at.reference(q, k, v, causal=causal), tolerance).ok
    return t


def _assert_no_hazards(t):
    h = t.hazards()
    assert not h.races, "\n".join(f"{r.hazard} on {r.array} between {r.first_location} and {r.second_location}"
                                  for r in h.races)
    assert not h.uninitialized, "\n".join(f"{u.array} read at {u.location} before it was written"
                                          for u in h.uninitialized)


def _traced_tiled(causal, seed):
    # (1, 1, 40, 70, 16): 2 query tiles, 3 K/V tiles of 32 (the last ragged)
    return _traced(at.tiled, at.make_inputs(at.SHAPES["trace"], seed), causal, TOLERANCE)


@pytest.mark.skipif(not SIM, reason="the tracer runs on the simulator")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tiled_has_no_races(causal, seed):
    t = _traced_tiled(causal, seed)
    _assert_no_hazards(t)
    [b] = t.barriers()
    # 2 barriers per K/V tile: without the mask both blocks walk 3 tiles; with it the first block (queries 0-31)
    # walks 1 and the second (32-39) 2
    assert b.syncthreads == (2 * (3 + 3) if not causal else 2 * (1 + 2))
    assert b.syncwarp == b.syncthreads // 2 * 4  # one per tile, in each of the 4 warps
    loads = {x.array: x.loads for x in t.traffic()}
    # the keys a block loads: whole tiles, cut at Sk = 70; under the mask the block of queries 0-31 loads keys 0-31,
    # the block of 32-39 keys 0-63 -- the third tile, masked for both, is never read
    keys = 70 + 70 if not causal else 32 + 64
    assert loads["k"] == loads["v"] == keys * 16 and loads["q"] == 40 * 16


# ----------------------------------------------------------------------------------------------------------
# Bad arguments
# ----------------------------------------------------------------------------------------------------------


def _qkv(b=1, h=2, sq=3, sk=4, d=8):
    return (np.zeros((b, h, sq, d), np.float32), np.zeros((b, h, sk, d), np.float32),
            np.zeros((b, h, sk, d), np.float32))


BAD = [
    ("rank", lambda: ((np.zeros((2, 3, 8), np.float32),) + _qkv()[1:], {}), r"q must be 4-D \(B, H, Sq, D\); got 3-D"),
    ("dtype", lambda: ((_qkv()[0], _qkv()[1].astype(np.float64), _qkv()[2]), {}),
     r"k must have dtype float32; got float64"),
    ("list", lambda: (([[[[1.0]]]],) + _qkv()[1:], {}), r"q must be a float32 array \(B, H, Sq, D\); got list"),
    ("batch", lambda: ((_qkv()[0],) + _qkv(b=2)[1:], {}),
     r"k must have q's batch and heads \(B, H\) = \(1, 2\); got k.shape = \(B, H, Sk, D\) = \(2, 2, 4, 8\)"),
    ("heads", lambda: ((_qkv()[0],) + _qkv(h=3)[1:], {}),
     r"q's batch and heads \(B, H\) = \(1, 2\); got .*\(1, 3, 4, 8\)"),
    ("head_dim", lambda: ((_qkv()[0],) + _qkv(d=16)[1:], {}),
     r"k must have q's head dimension D = 8 \(q.shape = \(1, 2, 3, 8\)\); got k.shape = .*\(1, 2, 4, 16\)"),
    ("v_shape", lambda: (_qkv()[:2] + (_qkv(sk=5)[2],), {}),
     r"v must have k's shape \(B, H, Sk, D\) = \(1, 2, 4, 8\).*got v.shape = \(1, 2, 5, 8\)"),
    ("D_large", lambda: (_qkv(d=129), {}), r"D .* must be between 1 and 128; got D = 129"),
    ("D_zero", lambda: (_qkv(d=0), {}), r"must be between 1 and 128; got D = 0"),
    ("no_keys", lambda: (_qkv(sk=0), {}), r"at least one key \(Sk >= 1\).*got k.shape = \(1, 2, 0, 8\)"),
    ("scale_nan", lambda: (_qkv(), {"scale": float("nan")}), r"scale must be a finite number > 0.*got nan"),
    ("scale_inf", lambda: (_qkv(), {"scale": np.inf}), r"scale must be a finite number > 0.*got inf"),
    ("scale_zero", lambda: (_qkv(), {"scale": 0.0}), r"scale must be a finite number > 0, or None for 1/sqrt\(D\) = "
                                                      r"0.353553; got 0.0"),
    ("scale_negative", lambda: (_qkv(), {"scale": -1}), r"scale must be .* > 0.*got -1.0"),
    ("scale_str", lambda: (_qkv(), {"scale": "0.1"}), r"scale must be a finite number.*got '0.1' \(str\)"),
    ("scale_bool", lambda: (_qkv(), {"scale": True}), r"scale must be a finite number.*got True \(bool\)"),
    ("causal_int", lambda: (_qkv(), {"causal": 1}), r"causal must be True or False; got 1 \(int\)"),
    ("causal_none", lambda: (_qkv(), {"causal": None}), r"causal must be True or False; got None \(NoneType\)"),
    ("out_shape", lambda: (_qkv(), {"out": np.zeros((1, 2, 3, 4), np.float32)}),
     r"out must have shape \(1, 2, 3, 8\); got \(1, 2, 3, 4\)"),
]


@pytest.mark.parametrize("case,make,message", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_say_what_is_wrong(case, make, message):
    args, kwargs = make()
    for name in F32_VERSIONS:
        with pytest.raises(LaunchError, match=message) as err:
            at.VERSIONS[name](*args, **kwargs)
        assert "\n" not in str(err.value), f"{name}: {err.value}"


def test_numpy_bool_and_scalars_are_accepted():
    q, k, v = at.make_inputs((1, 1, 2, 3, 4), 0)
    out = at.fused_rows(q, k, v, causal=np.bool_(True), scale=np.float32(0.5))
    assert compare(out, at.reference(q, k, v, causal=True, scale=0.5), TOLERANCE).ok
    with pytest.raises(TypeError, match=r"attention.tiled\(\) got an unexpected keyword argument 'mask'"):
        at.tiled(q, k, v, mask=True)


# ----------------------------------------------------------------------------------------------------------
# The dispatcher
# ----------------------------------------------------------------------------------------------------------


def test_dispatcher_follows_readable_thresholds():
    choose = at.optimized.choose
    # on a GPU without tensor cores: the CUDA-core steps
    assert choose(8, 16, 4096, 4096, 128, sms=132, tensor_cores=False).step == "tiled"  # 16384 tiles
    assert choose(32, 16, 1024, 1024, 64, sms=132, tensor_cores=False).config == {"rows": 32, "keys": 32, "width": 64}
    assert choose(8, 16, 4096, 4096, 128, sms=132, tensor_cores=False).config == {"rows": 32, "keys": 16,
                                                                                   "width": 128}
    # few queries: decoding, with tensor cores or without -- a warp per row where the rows fill the GPU (132 SMs x 24
    # warps = 3168), their keys in runs of >= 256 across warps where they do not
    for tc in (False, True):
        assert choose(64, 64, 1, 4096, 128, sms=132, tensor_cores=tc).step == "fused_rows"  # 4096 rows
        assert choose(64, 32, at.FUSED_MAX_SQ, 4096, 128, sms=132, tensor_cores=tc).step == "fused_rows"
        decode = choose(8, 32, 1, 32768, 128, sms=132, tensor_cores=tc)  # 256 rows: 13 runs each
        assert decode.step == "split_keys" and decode.config == {"splits": 13, "chunk": 2521, "dims_per_lane": 4}
        assert "13 runs of 2521" in decode.why and "3328 warps" in decode.why
    assert choose(64, 32, 1, 4096, 128, sms=132).config["splits"] == 2  # 2048 rows
    assert choose(8, 32, 1, 511, 128, sms=132).step == "fused_rows"  # runs would be shorter than 256 keys
    assert choose(8, 32, 1, 512, 128, sms=132).config["splits"] == 2
    assert choose(8, 32, 1, 32768, 128, causal=True, sms=132).step == "fused_rows"  # query 0 sees key 0 alone
    assert choose(64, 32, at.FUSED_MAX_SQ + 1, 4096, 128, sms=132, tensor_cores=False).step == "tiled"
    # too few tiles for the SMs: 4 heads x 16 tiles = 64
    few = choose(1, 4, 512, 512, 64, sms=132, tensor_cores=False)
    assert few.step == "fused_rows" and "64 tiles" in few.why and "68 of 132 SMs idle" in few.why
    assert few.config == {"rows_per_block": 4, "dims_per_lane": 2}
    assert choose(1, 4, 512, 512, 64, sms=64, tensor_cores=False).step == "tiled"  # exactly one per SM
    assert choose(1, 4, 512, 512, 64, sms=65, tensor_cores=False).step == "fused_rows"
    # with tensor cores: 3xTF32 past the few-queries rule, whatever the tiles
    for shape in [(8, 16, 4096, 4096, 128), (1, 4, 512, 512, 64), (64, 32, at.FUSED_MAX_SQ + 1, 4096, 80)]:
        choice = choose(*shape, sms=132, tensor_cores=True)
        assert choice.step == "tf32x3" and "3xTF32" in choice.why, choice
    assert choose(8, 16, 4096, 4096, 128, sms=132, tensor_cores=True).config == {"rows": 128, "keys": 32,
                                                                                  "width": 128}
    assert choose(2, 2, 100, 100, 72, sms=132, tensor_cores=True).config == {"rows": 64, "keys": 32, "width": 80}
    assert "8 blocks of 64 queries" in choose(2, 2, 100, 100, 72, sms=132, tensor_cores=True).why
    # past D = 96 (blocks of 8 warps), blocks that walk few keys: blocks of 4 warps with Q split as read, two per SM
    few = choose(8, 16, 4096, at.FEW_KEYS, 128, sms=132, tensor_cores=True)
    assert few.step == "tf32x3" and few.config == {"rows": 64, "keys": 32, "width": 128, "on_read": "q"}
    assert f"few keys ({at.FEW_KEYS} a block on average" in few.why and "8192 blocks of 64" in few.why
    assert choose(8, 16, 4096, 1, 112, sms=132, tensor_cores=True).config["on_read"] == "q"
    assert choose(8, 16, 4096, at.FEW_KEYS + 1, 128, sms=132, tensor_cores=True).config == {"rows": 128, "keys": 32,
                                                                                              "width": 128}
    assert choose(8, 16, 4096, 64, 96, sms=132, tensor_cores=True).config == {"rows": 64, "keys": 32, "width": 96}
    # causal: the keys walked up to each block's last query (128 rows), on average: 192 of 256, 320 of 512
    assert at.keys_walked(256, 256, 128, True) == 192 and at.keys_walked(512, 512, 128, True) == 320
    assert at.keys_walked(100, 1000, 128, True) == 100 and at.keys_walked(300, 200, 128, True) == 528 / 3
    assert at.keys_walked(300, 200, 128, False) == 200
    assert choose(8, 16, 256, 256, 128, causal=True, sms=132, tensor_cores=True).config.get("on_read") == "q"
    assert "on_read" not in choose(8, 16, 512, 512, 128, causal=True, sms=132, tensor_cores=True).config
    # the mask changes no choice, only the reason
    for tc in (False, True):
        masked = choose(8, 16, 4096, 4096, 128, causal=True, sms=132, tensor_cores=tc)
        assert "skipped" in masked.why and masked.step == ("tf32x3" if tc else "tiled")
    assert "stops at its query" in choose(1, 1, 1, 4096, 128, causal=True, sms=132).why
    assert at.optimized.steps == ("fused_rows", "tiled", "pipelined", "tf32x3", "split_keys", "split_keys_f16")
    assert list(at.VERSIONS)[-1] == "optimized"
    # float16: the tensor cores at every shape -- decoding with many heads included; with few, split_keys_f16
    for shape in [(8, 16, 4096, 4096, 128), (64, 32, 1, 4096, 128), (1, 4, 512, 512, 64)]:
        assert choose(*shape, half=True, sms=132).step == "pipelined"
    assert "float16" in choose(1, 1, 1, 1, 16, half=True, sms=132).why
    assert list(at.VERSIONS)[0] == "naive"


@pytest.mark.parametrize("d, causal", long_tier_after(0, [pytest.param(100, True, id="D=100-causal"),
                                                         pytest.param(128, False, id="D=128")]))
def test_optimized_few_keys_past_d96_runs_blocks_of_4_warps(d, causal, seed):
    # 70 queries against 40 keys past D = 96: few keys, so blocks of 4 warps (2 of 64 rows) with Q split as read,
    # checked against float64 with a NaN-poisoned output
    q, k, v = at.make_inputs((1, 1, 70, 40, d), seed)
    launches = at.optimized.launches(q, k, v, causal=causal)
    assert launches[-1].kernel is at.tf32x3_kernel_for(d, 4, 32, "q") and launches[-1].grid == (2,)
    assert 2 * (launches[-1].shared_bytes + 1024) <= 228 * 1024  # two blocks on an SM of Hopper's 228 KB
    run_checked("optimized", None, seed, causal=causal, inputs=(q, k, v))


def test_optimized_runs_what_it_chose(monkeypatch, seed):
    from gpukernels.attention import k12_optimized

    q, k, v = at.make_inputs((1, 2, 33, 20, 64), seed)
    assert at.optimized.launches(q, k, v)[-1].kernel is at.tf32x3_kernel_for(64)  # the simulator is an H200
    assert at.optimized.describe(q, k, v).startswith("tf32x3")
    for causal in (False, True):
        run_checked("optimized", None, seed, causal=causal, inputs=(q, k, v))
    monkeypatch.setattr(k12_optimized, "compute_capability", lambda: (7, 5))  # no TF32 tensor cores
    assert at.optimized.launches(q, k, v)[0].kernel is at.fused_rows_kernel_for(2)  # 6 tiles for 132 SMs
    assert "fused_rows" in at.optimized.describe(q, k, v)
    monkeypatch.setattr(k12_optimized, "sm_count", lambda: 2)  # a 2-SM GPU: 4 tiles fill it
    assert at.optimized.launches(q, k, v)[0].kernel is at.tiled_kernel_for(64)
    assert at.optimized.describe(q, k, v, causal=True).startswith("tiled")
    for causal in (False, True):
        run_checked("optimized", None, seed, causal=causal, inputs=(q, k, v))


# ----------------------------------------------------------------------------------------------------------
# Every kernel on the compiler
# ----------------------------------------------------------------------------------------------------------

_KERNELS_CHILD = r"""
import re
from numba import cuda, types
from gpukernels import attention as at
from gpukernels.resources import _assemble
f2, f3 = types.Array(types.float32, 2, "C"), types.Array(types.float32, 3, "C")
rows = (f3, f3, f3, f3, types.float32, types.boolean)
kernels = {"scores": (at.scores_kernel, (f3, f3, f2, types.float32, types.boolean)), "pv": (at.pv_kernel, (f2, f3, f3))}
kernels.update({f"fused_rows_d{32 * n}": (at.fused_rows_kernel_for(n), rows) for n in range(1, 5)})
kernels.update({f"tiled_w{k.tile[2]}": (k, rows) for k in at.TILED_KERNELS})
out = {}
for name, (k, sig) in kernels.items():
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    log = _assemble(ptx, "sm_90")
    res = re.search(r"used (\d+) registers.*?(\d+) bytes smem.*?(\d+) bytes lmem", log, re.S)
    out[name] = {"registers": int(res[1]), "smem": int(res[2]), "lmem": int(res[3]),
                 "local": ptx.count("ld.local") + ptx.count("st.local"), "shfl": ptx.count("shfl.sync"),
                 "bar": ptx.count("bar.sync") + ptx.count("barrier.sync")}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
@pytest.mark.slow  # a compile of its own; the default tier compiles the tensor-core steps' kernels
def test_kernels_compile_without_local_memory():
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_KERNELS_CHILD))
    assert len(out) == 2 + len(at.FUSED_ROWS_KERNELS) + len(at.TILED_KERNELS)
    for name, r in out.items():
        # q's and acc's registers (fused_rows), the scores and accumulators (tiled) are indexed by constants
        assert r["lmem"] == 0 and r["local"] == 0, f"{name} uses local memory: {r}"
        assert r["smem"] <= 48 * 1024 + 1024, f"{name}: more than the static 48 KB (+ the 1 KB ptxas counts): {r}"
        assert (r["smem"] > 0) == name.startswith("tiled") and (r["bar"] > 0) == name.startswith("tiled"), r
        assert (r["shfl"] > 0) == (not name.startswith(("scores", "pv"))), r


# ----------------------------------------------------------------------------------------------------------
# The tensor-core step: float16 q, k, v
# ----------------------------------------------------------------------------------------------------------

# mma multiplies float16 inputs exactly and accumulates in float32, but rounds P to float16 (11 bits) for the P V
# product: each weight carries a relative error up to 2^-11 ~ 5e-4, which averages down in the output (~1e-4 seen).
# The reference is float64 of the same float16 inputs, so the inputs' own rounding is not counted. A wrong fragment,
# a lost rescale or a mask off by one lands far above 1e-2.
TOLERANCE_F16 = 1e-2

# Sq and Sk from {1, 17, 64, 100} (one row, a ragged warp, one full block or K/V tile, two ragged ones), D from
# {16, 64, 128}: each value of each appears, Sq < Sk and Sq > Sk both, and several heads.
MMA_SHAPES = [(1, 1, 1, 1, 16), (1, 2, 17, 100, 64), (1, 1, 100, 17, 128), (2, 1, 64, 64, 16), (1, 1, 100, 64, 64),
              (1, 1, 1, 100, 128), (1, 1, 64, 1, 16), (1, 1, 17, 17, 128)]


def half_inputs(shape, seed):
    return tuple(x.astype(np.float16) for x in at.make_inputs(shape, seed))


def run_mma(shape, seed, causal=False, scale=None, inputs=None, name="mma"):
    q, k, v = inputs if inputs is not None else half_inputs(shape, seed)
    before = q.copy(), k.copy(), v.copy()
    ref = at.reference(q, k, v, causal=causal, scale=scale)  # float64 of the float16 values
    out = np.full(ref.shape, np.nan, np.float32)  # poison: an element never written fails
    assert at.VERSIONS[name](q, k, v, causal=causal, scale=scale, out=out) is out
    check = compare(out, ref, TOLERANCE_F16)
    assert check.ok, f"attention.{name} shape={q.shape[:3] + k.shape[2:]} causal={causal} seed={seed}: {check}"
    for x, x0 in zip((q, k, v), before):
        assert np.array_equal(x, x0), f"attention.{name} modified its input"
    return out


HALF = pytest.mark.parametrize("name", at.FLOAT16_VERSIONS)
#: ... for the costlier checks: the Hopper steps after wgmma (warp_specialized, ping_pong), which
#: tests/test_attention_hopper.py checks in the default tier, run these in the long tier
HALF_NUMERICS = pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                                 if n in ("warp_specialized", "ping_pong") else n
                                                 for n in at.FLOAT16_VERSIONS])


@HALF_NUMERICS
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", long_tier_after((1, 7), MMA_SHAPES), ids=lambda s: "x".join(map(str, s)))
def test_mma_matches_reference(shape, causal, name, seed):
    run_mma(shape, seed, causal=causal, name=name)


@pytest.mark.gpu
@HALF
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [s for s in at.SHAPES["test_gpu"] if s[4] % 16 == 0],
                         ids=lambda s: "x".join(map(str, s)))
def test_mma_matches_reference_gpu_sizes(shape, causal, name, seed):
    run_mma(shape, seed, causal=causal, name=name)


@HALF_NUMERICS
def test_mma_scores_more_than_80_apart(name, seed):
    # as test_scores_more_than_80_apart, in float16 (100 and 4 are exact): scores 25 * k[j, 0] span ~100
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((1, 2, 9, 16), (1, 2, 70, 16), (1, 2, 70, 16)))
    q[:, :, ::2, 0] = 100.0
    k[:, :, 0, 0] = -4.0  # key 0 low: under the causal mask the first rows' max grows (rescaling) as keys come in
    k[:, :, 3, 0] = 4.0
    k[:, :, 66, 0] = 4.5  # the second K/V tile raises the max again: the rescale between tiles
    s = np.matmul(q.astype(np.float64), np.swapaxes(k, -1, -2).astype(np.float64)) / 4
    assert (s.max(-1) - s.min(-1)).max() > 80
    for causal in (False, True):
        out = run_mma(None, seed, causal=causal, inputs=(q, k, v), name=name)
        assert np.isfinite(out).all()


@HALF_NUMERICS
def test_mma_explicit_scale_and_top_left_mask(name, seed):
    run_mma((1, 2, 7, 9, 32), seed, scale=0.05, name=name)
    q, k, v = half_inputs((1, 2, 7, 4, 16), seed)
    out = run_mma(None, seed, causal=True, scale=3, inputs=(q, k, v), name=name)
    # Query 0 sees key 0 alone: its weight is exp2(s c - m) = 1 up to the rounding of the score s c (in the thousands
    # at scale 3 with the inputs' outliers: ~1e-4 in the exponent). The P V product takes P rounded to float16, in
    # which that is exactly 1, and the row sum l adds it in float32: out = v / p, p within 2^-11 of 1 (seen on the
    # H200: 4.4e-6). Any other key's weight in the row would be a mix of v's rows far past that.
    np.testing.assert_allclose(out[:, :, 0], v[:, :, 0], rtol=2.0**-11, atol=1e-6)
    with pytest.raises(LaunchError, match=r"scale must be a finite number > 0.*got -1.0"):
        at.VERSIONS[name](q, k, v, scale=-1.0)


@HALF
def test_mma_device_arrays_and_empty_inputs(name, seed):
    q, k, v = half_inputs((1, 2, 5, 6, 16), seed)
    d = [cuda.to_device(x) for x in (q, k, v)]
    out = at.VERSIONS[name](*d, causal=True)
    assert is_device_array(out)
    assert compare(out.copy_to_host(), at.reference(q, k, v, causal=True), TOLERANCE_F16).ok
    for shape in [(0, 2, 3, 4, 16), (1, 2, 0, 4, 16)]:
        out = at.VERSIONS[name](*half_inputs(shape, 0))
        assert out.shape == shape[:3] + shape[4:] and out.dtype == np.float32


MMA_BAD = [
    ("float32", lambda: _qkv(d=16), r"q must have dtype float16 for attention.mma .*got float32. Convert it with "
                                    r"q.astype\(np.float16\), or use the float32 steps"),
    ("float32_v", lambda: tuple(x.astype(np.float16) for x in _qkv(d=16)[:2]) + (_qkv(d=16)[2],),
     r"v must have dtype float16 .*got float32.*v.astype\(np.float16\)"),
    ("D_8", lambda: tuple(x.astype(np.float16) for x in _qkv(d=8)),
     r"D .* multiple of 16 from 16 to 128; got D = 8"),
    ("D_24", lambda: tuple(x.astype(np.float16) for x in _qkv(d=24)), r"multiple of 16 .*got D = 24"),
    ("D_144", lambda: tuple(x.astype(np.float16) for x in _qkv(d=144)), r"multiple of 16 .*got D = 144"),
    ("k_D", lambda: (_qkv(d=16)[0].astype(np.float16),) + tuple(x.astype(np.float16) for x in _qkv(d=32)[1:]),
     r"k must have q's head dimension D = 16"),
    ("no_keys", lambda: tuple(x.astype(np.float16) for x in _qkv(sk=0, d=16)), r"at least one key"),
    ("rank", lambda: (np.zeros((2, 3, 16), np.float16),) + tuple(x.astype(np.float16) for x in _qkv(d=16)[1:]),
     r"q must be 4-D \(B, H, Sq, D\); got 3-D"),
]


@HALF
@pytest.mark.parametrize("case,make,message", MMA_BAD, ids=[c[0] for c in MMA_BAD])
def test_mma_bad_inputs_say_what_is_wrong(case, make, message, name):
    message = message.replace("attention.mma", f"attention.{name}")  # the step called is the step named
    with pytest.raises(LaunchError, match=message) as err:
        at.VERSIONS[name](*make())
    assert "\n" not in str(err.value)


def test_mma_p_fragments_are_a_fragments():
    # The re-layout the kernel relies on: element e of the C fragments of n-tiles 2j and 2j + 1 (8 keys each) sits,
    # in the same lane, where the A fragment of the 16-key slice wants it -- A word w holds a_{2w}, a_{2w+1}, packed
    # from (c0, c1) or (c2, c3) of n-tile 2j (words 0, 1) or 2j + 1 (words 2, 3).
    from gpukernels._mma import a_frag_coords, c_frag_coords

    for lane in range(32):
        for w in range(4):
            tile, half = w >> 1, w & 1  # n-tile 2j + tile, elements c_{2 half}, c_{2 half + 1}
            for lo in range(2):
                r, c = c_frag_coords(lane, 2 * half + lo)
                assert a_frag_coords(lane, 2 * w + lo) == (r, 8 * tile + c), (lane, w, lo)


def test_mma_launch_plan():
    q, k, v = half_inputs((2, 3, 100, 70, 80), 0)
    [la] = at.mma.launches(q, k, v)
    assert la.kernel is at.mma_kernel_for(80) and la.kernel.tile == (64, 64, 80)
    assert la.block == (128,) and la.grid == (6 * 2,)  # 6 heads x 2 query tiles of 64
    assert list(at.VERSIONS).index("mma") == list(at.VERSIONS).index("pipelined") - 1


def test_pipelined_launch_plan_and_order():
    # few blocks (6 heads x 1 tile of 128 rows, for 132 SMs): 16 rows per warp, blocks of 64 rows
    q, k, v = half_inputs((2, 3, 100, 70, 80), 0)
    [la] = at.pipelined.launches(q, k, v)
    assert la.kernel is at.pipelined_kernel_for(80, rows_per_warp=16) and la.kernel.tile == (64, 64, 80)
    assert la.block == (128,) and la.grid == (6 * 2,)
    [wide] = at.pipelined.launches(*half_inputs((2, 3, 129, 70, 128), 0))  # past D = 96: blocks of 128 rows
    assert wide.kernel is at.pipelined_kernel_for(128, 8, 16) and wide.block == (256,) and wide.grid == (6 * 2,)
    # enough blocks of 128 rows to fill the SMs: 32 rows per warp, Q in shared memory past D = 64
    [pair] = at.pipelined.launches(*half_inputs((1, 132, 17, 3, 80), 0))
    assert pair.kernel is at.pipelined_kernel_for(80, 4, 32, 64, True) and pair.kernel.tile == (128, 64, 80)
    assert pair.block == (128,) and pair.grid == (132,) and pair.shared_bytes == (128 + 2 * 64) * 88 * 2
    assert list(at.VERSIONS).index("pipelined") == list(at.VERSIONS).index("tf32x3") - 1
    # a view that does not start on 16 bytes cannot be copied by cp.async: step 4's kernel runs it, correctly
    q, k, v = half_inputs((1, 1, 20, 70, 16), 0)
    buf = np.zeros(k.size + 1, np.float16)
    k1 = buf[1:].reshape(k.shape)
    k1[...] = k
    [lb] = at.pipelined.launches(q, k1, v)
    assert lb.kernel is at.mma_kernel_for(16)
    run_mma(None, 0, inputs=(q, k1, v), name="pipelined")


@pytest.mark.parametrize("shape", long_tier_after(1, [pytest.param((2, 1, 17, 130, 16), id="ragged-warp"),
                                                     pytest.param((1, 2, 100, 70, 64), id="two-blocks"),
                                                     pytest.param((1, 1, 65, 64, 80), id="d80"),
                                                     pytest.param((1, 1, 1, 33, 128), id="one-row")]))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_pipelined_with_32_rows_per_warp(shape, causal, seed):
    # The variant with two m16 tiles per warp (benchmarks/attention_peer.py's pipelined@W,32): rows of both tiles
    # past Sq, causal and not, D from 16 to 128 (with 64-key tiles a warp's two tiles are live together; 16-key
    # tiles, below, have one where only the second is)
    import math

    from gpukernels.attention.k05_pipelined import pipelined_launches

    q, k, v = half_inputs(shape, seed)
    ref = at.reference(q, k, v, causal=causal)
    out = np.full(ref.shape, np.nan, np.float32)
    [launch] = pipelined_launches(q, k, v, out, causal, 1 / math.sqrt(shape[-1]), warps=2, rows_per_warp=32)
    assert launch.kernel.tile[0] == 64 and launch.block == (64,)
    launch()
    check = compare(out, ref, TOLERANCE_F16)
    assert check.ok, f"{shape} causal={causal} seed={seed}: {check}"
    with pytest.raises(ValueError, match="rows_per_warp must be 16 or 32.*got 8"):
        at.pipelined_kernel_for(64, 4, rows_per_warp=8)
    with pytest.raises(ValueError, match="tiles of 64 keys with Q in registers; got keys=32, q_shared=None"):
        at.pipelined_kernel_for(64, 4, 16, keys=32)
    with pytest.raises(ValueError, match="tiles of 64 keys with Q in registers; got keys=64, q_shared=True"):
        at.pipelined_kernel_for(64, 4, 16, q_shared=True)


@pytest.mark.parametrize("d,pair", [(64, False), (80, True), (128, True)])
def test_pipelined_plan(d, pair):
    # 32 rows per warp where the blocks of 128 rows fill the SMs, Q in shared memory past D = 64; 16 rows otherwise
    plan = at.pipelined_plan
    assert plan(132, 128, d, sms=132) == {"rows_per_warp": 32, "warps": 4, "q_shared": pair}
    assert plan(1, 128 * 132 - 127, d, sms=132)["rows_per_warp"] == 32  # 132 tiles, the last of one row
    assert plan(1, 128 * 131, d, sms=132) == {"rows_per_warp": 16, "warps": at.warps_for(d)}
    assert plan(131, 17, d, sms=132)["rows_per_warp"] == 16 and plan(66, 129, d, sms=132)["rows_per_warp"] == 32
    assert plan(132, 17, d, sms=132)["rows_per_warp"] == 32  # a warp's second tile has a query
    assert plan(4096, 16, d, sms=132)["rows_per_warp"] == 16  # decoding: one m16 tile holds every query
    choice = at.choose(4, 33, 1000, 1000, d, half=True, sms=132)  # 132 heads x 8 tiles
    assert choice.config["rows"] == 128 and choice.config["rows_per_warp"] == 32
    assert ("Q in shared memory" in choice.why) == pair
    assert at.choose(1, 4, 512, 512, d, half=True, sms=132).config["rows_per_warp"] == 16


@pytest.mark.parametrize("keys,q_shared", [(16, False), (32, False), (32, True), (64, True)])
def test_pipelined_with_32_rows_per_warp_and_other_tiles(keys, q_shared, seed):
    # 16- or 32-key tiles and Q's tile in (dynamic) shared memory -- what keeps D = 128 within 255 registers: 5, 3 or
    # 2 K/V tiles, the last ragged; 3 query tiles of 64, the last with 22 rows past Sq; causal
    import math

    from gpukernels.attention.k05_pipelined import pipelined_launches

    q, k, v = half_inputs((1, 1, 150, 75, 128), seed)
    ref = at.reference(q, k, v, causal=True)
    out = np.full(ref.shape, np.nan, np.float32)
    [launch] = pipelined_launches(q, k, v, out, True, 1 / math.sqrt(128), warps=2, rows_per_warp=32, keys=keys,
                                  q_shared=q_shared)
    assert launch.kernel.tile == (64, keys, 128)
    assert launch.shared_bytes == ((64 + 2 * keys) * 136 * 2 if q_shared else 0)
    launch()
    check = compare(out, ref, TOLERANCE_F16)
    assert check.ok, f"keys={keys} q_shared={q_shared} seed={seed}: {check}"

def _traced_mma(causal, seed, name="mma"):
    # 2 query tiles (the second with 2 warps past Sq), 3 K/V tiles (the last ragged)
    return _traced(at.VERSIONS[name], half_inputs((1, 1, 70, 130, 16), seed), causal, TOLERANCE_F16)


@pytest.mark.skipif(not SIM, reason="the tracer runs on the simulator")
@pytest.mark.parametrize("name", ["mma", "pipelined"])  # split_keys_f16's blocks of 16 rows: its own test, below
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_mma_has_no_races(causal, name, seed):
    t = _traced_mma(causal, seed, name)
    _assert_no_hazards(t)
    loads = {x.array: x.loads for x in t.traffic()}
    # without the mask both blocks load all 130 keys; with it the block of queries 0-63 loads keys 0-63 (one tile),
    # the block of 64-69 keys 0-127 (two) -- the third tile is masked for both and never read
    keys = 130 + 130 if not causal else 64 + 128
    assert loads["k"] == loads["v"] == keys * 16


_MMA_KERNELS_CHILD = r"""
import json, re
from numba import cuda, types
from gpukernels import attention as at
from gpukernels.resources import _assemble, _jit_options
h3, f3 = types.Array(types.float16, 3, "C"), types.Array(types.float32, 3, "C")
import sys
out = {}
for k in at.MMA_KERNELS + at.PIPELINED_KERNELS:
    if k.tile[2] not in map(int, sys.argv[1:]):
        continue
    ptx, _ = cuda.compile_ptx(k.py_func, (h3, h3, h3, f3, types.float32, types.boolean), cc=(9, 0),
                              **_jit_options(k))  # fastmath, as the kernel runs
    log = _assemble(ptx, "sm_90")
    res = re.search(r"used (\d+) registers.*?(\d+) bytes smem.*?(\d+) bytes lmem", log, re.S)
    spill = re.search(r"(\d+) bytes spill stores", log)
    name = f"{k.py_func.__name__}_{k.tile[0]}_d{k.tile[2]}"
    out[name] = {"registers": int(res[1]), "smem": int(res[2]), "lmem": int(res[3]),
                 "spill": int(spill[1]) if spill else 0,
                 "local": ptx.count("ld.local") + ptx.count("st.local"),
                 "mma": ptx.count("mma.sync.aligned.m16n8k16"), "ldmatrix": ptx.count("ldmatrix.sync"),
                 "shfl": ptx.count("shfl.sync"), "d": k.tile[2],
                 "cp_async": ptx.count("cp.async.cg.shared.global"),
                 "threads": getattr(k, "threads", 128), "rows": k.tile[0],
                 "q_shared": bool(getattr(k, "shared_bytes", 0))}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
# the long tier, ~4 CPU-s per D (three kernels each), at the D where an assertion below changes or is tightest: 16
# (the smallest), 64 (the pair's last Q in registers), 80 (its first Q in shared memory), 96 (the pair's tightest
# spill-free fit, 254 registers: benchmarks/NOTES.md), 112 (4 warps -> 8 of the 16-row kernel; the pair's spill
# allowance) and 128 (the most registers). D = 32 and 48 are D = 16's code with more fragments and registers to
# spare (the formulas below are the same in D / 16); a separate "some" case (16, 80, 128) was a subset of these.
@pytest.mark.parametrize("dims", [pytest.param((16, 64, 80, 96, 112, 128), id="all", marks=pytest.mark.slow)])
def test_mma_kernels_compile_to_tensor_core_instructions(dims):
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_MMA_KERNELS_CHILD, *map(str, dims)))
    assert len(at.MMA_KERNELS) == 8 and len(at.PIPELINED_KERNELS) == 16  # D = 16, 32, ..., 128 (pipelined: 2 layouts)
    assert len(out) == 3 * len(dims)
    for name, r in out.items():
        d, nd = r["d"], r["d"] // 16
        pair = name.startswith("pipelined_pair")
        # the fragments (Q's, the scores', the accumulators') are indexed by constants: registers, not local memory;
        # ptxas spills only the two tiles per warp at D = 112 and 128 (~150 bytes, with Q in shared memory)
        assert r["local"] == 0, f"{name} indexes local memory: {r}"
        assert r["lmem"] == 0 and r["spill"] <= (160 if pair and d > 96 else 0), f"{name} spills: {r}"
        assert r["smem"] <= 48 * 1024, f"{name}: more than the static 48 KB: {r}"
        assert r["q_shared"] == (pair and d > 64), r
        # per K/V tile: (64 / 8) * (D / 16) mmas for Q K^T and (64 / 16) * (D / 8) for P V, unrolled; twice that for
        # two tiles of rows, whose K and V fragments are read once for both (Q's too, from shared memory)
        assert r["mma"] == (2 if pair else 1) * (8 * nd + 4 * (d // 8)), r
        assert r["ldmatrix"] == 4 * nd + 4 * nd + (2 * nd if r["q_shared"] else 0), r
        if name.startswith("pipelined"):
            # K and V copied 16 bytes at a time: D / 8 pieces per key row, so a pass of the block's threads copies
            # threads // (D / 8) rows of 64; the passes are unrolled (three copy loops: V, and K twice -- the first
            # tile and the next; and Q's 128 rows once, where they go to shared memory)
            per_pass = r["threads"] // (d // 8)
            assert r["threads"] == (128 if pair else 32 * at.warps_for(d)), r
            assert r["cp_async"] == 3 * -(-64 // per_pass) + (-(-r["rows"] // per_pass) if r["q_shared"] else 0), r
        else:
            assert r["cp_async"] == 0, r


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_optimized_takes_float16_to_the_tensor_cores(causal, seed):
    q, k, v = half_inputs((1, 2, 70, 33, 64), seed)
    assert at.optimized.launches(q, k, v)[0].kernel is at.pipelined_kernel_for(64, rows_per_warp=16)  # 2 blocks
    assert at.optimized.describe(q, k, v).startswith("pipelined") and "float16" in at.optimized.describe(q, k, v)
    out = np.full((1, 2, 70, 64), np.nan, np.float32)
    at.optimized(q, k, v, causal=causal, out=out)
    assert compare(out, at.reference(q, k, v, causal=causal), TOLERANCE_F16).ok
    # float16 with a head dimension the tensor cores cannot take: their message, naming the float32 steps
    with pytest.raises(LaunchError, match=r"multiple of 16 .*got D = 24.*float32 steps"):
        at.optimized(*half_inputs((1, 1, 3, 3, 24), seed))
    with pytest.raises(LaunchError, match=r"q must have dtype float32"):
        at.optimized(q.astype(np.float64), k, v)


# ----------------------------------------------------------------------------------------------------------
# The float32 tensor-core step: tf32x3
# ----------------------------------------------------------------------------------------------------------


def test_tf32x3_value_order_makes_c_fragments_a_fragments():
    # m16n8k8 on TF32: S's C fragment gives lane 4g + t keys 2t, 2t + 1 of rows g, g + 8 (c0..c3); P's A fragment
    # wants positions t, t + 4 (a0..a3 = (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)). V^T's positions hold keys in
    # VALUE_ORDER, so that a_i is c_(0, 2, 1, 3)[i] of the same lane, with no shuffle.
    from gpukernels._mma import a_tf32_coords, c_frag_coords

    assert sorted(at.VALUE_ORDER) == list(range(8))
    for lane in range(32):
        for i, c in enumerate((0, 2, 1, 3)):
            row, pos = a_tf32_coords(lane, i)
            assert c_frag_coords(lane, c) == (row, at.VALUE_ORDER[pos]), (lane, i)


@pytest.mark.parametrize("d, shift", [(24, 0), (22, 0), (24, 1)], ids=["16-byte rows", "D=22", "unaligned"])
def test_tf32x3_split_pass(d, shift, seed):
    # k's rows as whole 16-byte pieces (one 16-byte load per thread), or not: D = 22, or k starting 4 bytes past a
    # 16-byte boundary (four 4-byte loads)
    from gpukernels._intrinsics import aligned16
    from gpukernels._mma import TF32_MAX

    q, k, v = at.make_inputs((2, 3, 17, 41, d), seed)  # D = 22, 24 -> 32 wide; Sk = 41 -> 48 positions
    if shift:
        k = np.frombuffer(np.empty(k.size + shift, np.float32).data, np.float32)[shift:].reshape(k.shape)
        k[...] = at.make_inputs((2, 3, 17, 41, d), seed + 1)[1]
    k_in = k.copy()
    v.flat[5] = np.finfo(np.float32).max  # rounds to inf as TF32: split as the largest TF32 value and the rest
    launches = at.tf32x3.launches(q, k, v)
    assert [la.kernel for la in launches[:2]] == [at.split_rows_kernel, at.split_values_kernel]
    assert launches[0].args[2] == (d % 4 == 0 and not shift) == aligned16(launches[0].args[0])
    assert launches[2].args[0].shape == q.reshape(6, 17, d).shape  # Q is split by the tile loop, not by a pass
    k2, vt = launches[0].args[1], launches[1].args[1]
    assert k2.shape == (2, 6 * 41, 32) and vt.shape == (2, 6, 32, 48)
    for x2 in (k2, vt):
        x2.fill(np.nan)  # poison: every element, padding included, must be written
    for la in launches[:2]:
        la.kernel[la.grid, la.block](*la.args)
    for x2 in (k2, vt):
        assert np.isfinite(x2).all() and not (x2.view(np.uint32) & 0x1FFF).any()  # every part a TF32 value
    assert np.array_equal(k, k_in)  # the input is not modified
    rows = k.reshape(-1, d).astype(np.float64)
    assert np.all(np.abs(k2[0, :, :d].astype(np.float64) + k2[1, :, :d] - rows) <= 2.0**-21 * np.abs(rows))
    assert (k2[0, :, :d] != 0).mean() > 0.99 and not k2[:, :, d:].any()
    # vt[part, bh, d, 8 g + p] holds key 8 g + VALUE_ORDER[p] of head bh, dimension d; zeros past D and Sk
    heads_v = v.reshape(6, 41, d).astype(np.float64)
    keys = np.array([8 * (p // 8) + at.VALUE_ORDER[p % 8] for p in range(48)])
    inside = keys < 41
    expect = np.zeros((6, 32, 48))
    expect[:, :d, inside] = heads_v[:, keys[inside], :].transpose(0, 2, 1)
    got = vt[0].astype(np.float64) + vt[1]
    assert np.all(np.abs(got - expect) <= 2.0**-21 * np.abs(expect)) and not got[:, d:].any()
    assert np.abs(vt[0]).max() == TF32_MAX


@pytest.mark.parametrize("q_tiles", [1, 3, 32])
@pytest.mark.parametrize("heads", [1, 3, 4, 5, 9, 128])
def test_block_order_covers_every_tile_once_longest_first(q_tiles, heads):
    # pipelined's and tf32x3's blocks: heads in groups of HEAD_GROUP, a group's last query tiles first
    from gpukernels.attention.k05_pipelined import HEAD_GROUP, block_tile

    tile = getattr(block_tile, "py_func", block_tile)
    order = [tile(x, q_tiles, heads) for x in range(q_tiles * heads)]
    assert sorted(order) == [(h, t) for h in range(heads) for t in range(q_tiles)]
    per = HEAD_GROUP * q_tiles
    for g in range(0, len(order), per):
        group = order[g:g + per]
        assert {h for h, _ in group} == set(range(g // q_tiles, min(heads, g // q_tiles + HEAD_GROUP)))
        assert [t for _, t in group] == sorted((t for _, t in group), reverse=True)  # the longest walks first


@pytest.mark.parametrize("causal", long_tier_after(1, [True, False]), ids=["causal", "full"])
@pytest.mark.slow  # 5 CPU-s per case in the simulator
def test_several_query_tiles_of_a_partial_head_group(causal, seed):
    # 5 heads: a group of 4 and one of 1; 130 queries: 3 tiles of 64 rows (tf32x3) or 2 of 128 / 5 of 32 (pipelined)
    shape = (1, 5, 130, 20, 16)
    run_checked("tf32x3", shape, seed, causal=causal)
    run_mma(shape, seed, causal=causal, name="pipelined")


def test_tf32x3_launch_plan():
    q, k, v = at.make_inputs((2, 3, 100, 70, 80), 0)
    *splits, la = at.tf32x3.launches(q, k, v)
    assert la.kernel is at.tf32x3_kernel_for(80) and la.kernel.tile == (64, 32, 80)
    assert la.block == (128,) and la.grid == (6 * 2,)  # 6 heads x 2 query tiles of 64
    # K: 6 heads x 70 keys, 80 wide: 20 threads of 4 floats per row, 12 rows per block
    assert len(splits) == 2 and splits[0].grid == (-(-420 // 12),) and splits[0].block == (20, 12)
    assert splits[1].grid == (6 * 3, 2)  # V: 72 positions, 3 tiles of 32 keys; 80 wide, 2 of 64 dimensions
    [wide] = at.tf32x3.launches(*at.make_inputs((2, 3, 129, 70, 128), 0))[-1:]  # past D = 96: blocks of 128 rows
    assert wide.kernel is at.tf32x3_kernel_for(128, 8) and wide.block == (256,) and wide.grid == (6 * 2,)
    assert at.tf32x3_kernel_for(1) is at.tf32x3_kernel_for(16) and at.tf32x3_kernel_for(17).tile[2] == 32
    assert [at.padded_width(d) for d in (1, 16, 17, 72, 80, 128)] == [16, 16, 32, 80, 80, 128]
    for d in range(1, at.MAX_D + 1):  # the Q, K and V^T tiles, big and small, fit an H200's 227 KB per block
        assert at.tf32x3_kernel_for(d).shared_bytes <= 227 * 1024, d
    assert at.tf32x3_kernel_for(128).shared_bytes == 4 * 2 * (128 * 132 + 32 * 132 + 128 * 36)
    assert list(at.VERSIONS).index("tf32x3") == list(at.VERSIONS).index("split_keys") - 1


@pytest.mark.parametrize("shape", long_tier_after(1, [(1, 2, 40, 70, 16), (1, 1, 33, 47, 80), (1, 1, 17, 40, 128)]),
                         ids=lambda s: "x".join(map(str, s)))
def test_tf32x3_interleaved_chains_give_the_same_bits(shape, seed):
    # 4 n-tiles' 3-mma chains issued in turn (the default) or one after another: the same operations on the same
    # values in each chain, so the same bits; at D = 16 O has one pair of n-tiles, and P V's chains run two at a time
    from gpukernels.attention import k06_tf32x3

    q, k, v = at.make_inputs(shape, seed)
    base = at.tf32x3(q, k, v, causal=True)
    out = np.full(q.shape, np.nan, np.float32)
    for la in k06_tf32x3.tf32x3_launches(q, k, v, out, True, 1 / np.sqrt(shape[-1]), chains=1):
        la()
    assert np.array_equal(out, base)


@pytest.mark.parametrize("on_read", ["q", "kv", "qkv"])
@pytest.mark.parametrize("shape", long_tier_after(1, [(2, 1, 20, 33, 13), (1, 2, 40, 70, 16), (1, 1, 33, 47, 80)]),
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else s)
def test_tf32x3_split_on_read_gives_the_same_bits(on_read, shape, seed):
    # Q, K or V stored as they are and split as each fragment is read (`split_tf32_clamped`): the same products
    # of the same parts as the split pass's, so the same bits; K, in rows of a multiple of 16 floats, is read where
    # it is (no pass)
    from gpukernels.attention import k06_tf32x3

    q, k, v = at.make_inputs(shape, seed)
    v[0, 0, 3] *= np.float32(1e30)  # a row of V 1e30 times the rest: its small parts far below the others' big ones
    base = at.tf32x3(q, k, v, causal=True)
    out = np.full(q.shape, np.nan, np.float32)
    launches = k06_tf32x3.tf32x3_launches(q, k, v, out, True, 1 / np.sqrt(shape[-1]), on_read=on_read)
    assert len(launches) == (2 if "k" in on_read and shape[-1] % 16 == 0 else 3)
    for la in launches:
        la()
    assert np.array_equal(out, base)
    assert launches[-1].shared_bytes == k06_tf32x3.shared_bytes(shape[-1], launches[-1].kernel.threads // 32,
                                                                32, on_read)


@pytest.mark.slow  # 5 CPU-s
def test_tf32x3_fits_the_gpus_shared_memory(monkeypatch, seed):
    # Hopper's 227 KB per block holds 8 warps' Q tile at D = 128; an A100's 163 KB holds 4, a GPU with 99 KB 2 warps
    # with tiles of 16 keys -- the plan, the dispatcher's reason and the result follow
    from gpukernels.attention import k06_tf32x3, k12_optimized

    assert at.tf32x3_config(128) == (8, 32) and at.tf32x3_config(64) == (4, 32)
    assert k12_optimized.choose(1, 1, 40, 50, 128, tensor_cores=True).config["on_read"] == "q"  # few keys
    for limit, config in ((163 * 1024, (4, 32)), (99 * 1024, (2, 16))):
        monkeypatch.setattr(k06_tf32x3, "shared_per_block", lambda limit=limit: limit)
        assert at.tf32x3_config(128) == config and k06_tf32x3.shared_bytes(128, *config) <= limit
        q, k, v = at.make_inputs((1, 1, 40, 50, 128), seed)
        la = at.tf32x3.launches(q, k, v)[-1]
        assert la.kernel.tile == (16 * config[0], config[1], 128) and la.shared_bytes <= limit
        choice = k12_optimized.choose(1, 1, 40, 50, 128, tensor_cores=True)
        assert choice.config["rows"] == 16 * config[0] and f"tiles of {config[1]} keys" in choice.why
        assert "on_read" not in choice.config and "few keys" not in choice.why  # blocks already of <= 4 warps
        run_checked("tf32x3", None, seed, causal=True, inputs=(q, k, v))
    with pytest.raises(ValueError, match="needs 272384 bytes of shared memory; a block may have 232448"):
        at.tf32x3_kernel_for(128, 8, 64)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", long_tier_after(1, [(1, 1, 70, 45, 24), (1, 2, 33, 20, 64), (2, 1, 17, 100, 80)]),
                         ids=lambda s: "x".join(map(str, s)))
def test_tf32x3_is_as_accurate_as_float32(shape, causal, seed):
    # 3xTF32 keeps 22 of float32's 24 bits per factor: within a small factor of the CUDA-core steps' error (~1e-6
    # here), where one TF32 product per score would be off by ~1e-3 (10 bits: a score of 80 off by ~0.04)
    q, k, v = at.make_inputs(shape, seed)
    ref = at.reference(q, k, v, causal=causal).astype(np.float64)
    out = run_checked("tf32x3", None, seed, causal=causal, inputs=(q, k, v))
    tiled = at.tiled(q, k, v, causal=causal)
    err, err_tiled = (np.linalg.norm(x - ref) / np.linalg.norm(ref) for x in (out, tiled))
    assert err <= 4 * err_tiled + 2e-6, (err, err_tiled)


@pytest.mark.skipif(not SIM, reason="the tracer runs on the simulator")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [16, 18], ids=["q-by-cp.async", "q-by-loads"])
def test_tf32x3_has_no_races_and_skips_masked_tiles(causal, d, seed):
    b_, h, sq, sk, _ = at.SHAPES["trace"]
    t = _traced(at.tf32x3, at.make_inputs((b_, h, sq, sk, d), seed), causal, TOLERANCE)
    _assert_no_hazards(t)
    *_, b = t.barriers()
    # one block of 64 rows (Sq = 40): 3 K/V tiles of 32 without the mask, and with it the keys up to query 39 (0-39,
    # 2 tiles); 2 barriers per tile, and one after Q's tile is copied as it is (rows of whole 16-byte pieces) before
    # it is split in shared memory
    assert b.syncthreads == 2 * (3 if not causal else 2) + (d % 4 == 0)


def test_tf32x3_copies_q_as_it_is_only_when_its_rows_are_16_byte_pieces(seed):
    # cp.async needs 16-byte aligned sources: D a multiple of 4 and q's data on a 16-byte boundary; otherwise the
    # tile loop loads and splits q's floats one by one -- the same result
    q, k, v = at.make_inputs((1, 2, 33, 20, 24), seed)
    assert at.tf32x3.launches(q, k, v)[-1].args[-1] is True
    from gpukernels._intrinsics import address

    buf = np.empty(q.size + 4, np.float32)
    i = next(i for i in range(4) if address(buf[i:]) % 16 == 4)  # 4 bytes past a 16-byte boundary, wherever buf is
    shifted = buf[i:i + q.size].reshape(q.shape)
    shifted[...] = q
    assert at.tf32x3.launches(shifted, k, v)[-1].args[-1] is False
    out = run_checked("tf32x3", None, seed, causal=True, inputs=(shifted, k, v))
    assert np.array_equal(out, at.tf32x3(q, k, v, causal=True))
    q, k, v = at.make_inputs((1, 2, 33, 20, 30), seed)
    assert at.tf32x3.launches(q, k, v)[-1].args[-1] is False


_TF32X3_CHILD = r"""
import json, re
from numba import cuda, types
from gpukernels import attention as at
from gpukernels.resources import _assemble
f3, f4 = types.Array(types.float32, 3, "C"), types.Array(types.float32, 4, "C")
out = {}
for d in (16, 80, 128):
    k = at.tf32x3_kernel_for(d)
    ptx, _ = cuda.compile_ptx(k.py_func, (f3, f3, f4, f3, types.float32, types.boolean, types.boolean), cc=(9, 0), fastmath=True)
    log = _assemble(ptx, "sm_90")
    res = re.search(r"used (\d+) registers.*?(\d+) bytes lmem", log, re.S)
    out[d] = {"registers": int(res[1]), "lmem": int(res[2]), "local": ptx.count("ld.local") + ptx.count("st.local"),
              "mma": ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
              "ldmatrix": ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
              "cp_async": ptx.count("cp.async.cg.shared.global"), "cvt": ptx.count("cvt.rna.tf32.f32"),
              "ex2": ptx.count("ex2.approx"), "threads": k.threads}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
@pytest.mark.slow  # a compile of its own; the default tier compiles the tensor-core steps' kernels
def test_tf32x3_compiles_to_tf32_mma_without_local_memory():
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_TF32X3_CHILD))
    for d, r in out.items():
        assert r["lmem"] == 0 and r["local"] == 0, f"D = {d} uses local memory: {r}"
        assert r["registers"] * r["threads"] <= 65536, r  # a block fits an SM's registers
        # at least one unrolled k step of each product (3 mmas, 4 ldmatrix), the copies by cp.async, P split in
        # registers (2 cvt per element: 8 per k step of P V) and one ex2 per score
        assert r["mma"] >= 6 and r["mma"] % 3 == 0 and r["ldmatrix"] >= 8 and r["cp_async"] > 0, r
        assert r["cvt"] >= 8 and r["ex2"] >= 16, r


# ----------------------------------------------------------------------------------------------------------
# Decoding: split_keys
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape,splits", [((1, 2, 1, 530, 16), 3), ((2, 1, 3, 300, 40), 5), ((1, 1, 8, 9, 128), 4)],
                         ids=["3-runs", "5-runs-ragged", "runs-of-3-keys"])
def test_split_keys_merges_its_runs(shape, splits, causal, seed):
    # runs of 177, 60 and 3 keys, the last one short (and under the mask, runs a query does not reach: m = -inf);
    # outputs poisoned, the partial states checked against their definition
    q, k, v = at.make_inputs(shape, seed)
    before = q.copy(), k.copy(), v.copy()
    ref = at.reference(q, k, v, causal=causal)
    out = np.full(ref.shape, np.nan, np.float32)
    part, merge = at.split_keys_launches(q, k, v, out, causal, 1 / np.sqrt(shape[-1]), splits)
    pm, pl, pacc = part.args[3:6]
    for x in (pm, pl, pacc):
        x.fill(np.nan)
    for la in (part, merge):
        la.kernel[la.grid, la.block](*la.args)
    assert compare(out, ref, TOLERANCE).ok
    b, h, sq, sk, d = shape
    keys = min(sk, sq) if causal else sk
    chunk = -(-keys // splits)
    assert pm.shape == pl.shape == (b * h * sq, splits) and pacc.shape == (b * h * sq, splits, d)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)).reshape(-1, sk) / np.sqrt(d)
    # the size of each float32 score's rounding: its terms' magnitudes, not its value (which may cancel to ~0)
    s_abs = np.einsum("bhid,bhjd->bhij", np.abs(q.astype(np.float64)), np.abs(k.astype(np.float64)))
    s_abs = s_abs.reshape(-1, sk) / np.sqrt(d)
    vr = np.repeat(v.reshape(b * h, sk, d).astype(np.float64), sq, axis=0)
    for r in range(b * h * sq):
        i = r % sq
        seen = min(sk, i + 1) if causal else sk
        for run in range(splits):
            j0, j1 = run * chunk, min(seen, (run + 1) * chunk)
            if j1 <= j0:  # a run without keys: the state that the merge drops
                assert pm[r, run] == -np.inf and pl[r, run] == 0 and not pacc[r, run].any()
                continue
            m = s[r, j0:j1].max()
            w = np.exp(s[r, j0:j1] - m)
            err_s = 2e-6 * s_abs[r, j0:j1].max() + 1e-7  # a score's error: d float32 products and sums, and a bit
            # m is a score; l and each acc element are sums of w_j (x v_j) whose w_j carry the errors of score j
            # and of m (exp turns an absolute error of the exponent into a relative one) and of exp itself
            assert abs(pm[r, run] - m) <= err_s, (r, run, pm[r, run], m)
            assert abs(pl[r, run] - w.sum()) <= (2 * err_s + 1e-6) * w.sum(), (r, run, pl[r, run], w.sum())
            bound = (2 * err_s + 1e-6) * (w @ np.abs(vr[r, j0:j1])) + 1e-30
            assert np.all(np.abs(pacc[r, run] - w @ vr[r, j0:j1]) <= bound), (r, run)
    for x, x0 in zip((q, k, v), before):
        assert np.array_equal(x, x0)


def test_split_keys_plan_and_dispatch(seed):
    q, k, v = at.make_inputs((1, 2, 1, 600, 80), seed)
    part, merge = at.split_keys.launches(q, k, v)  # 2 rows: 2 runs of 300 (600 // 256)
    assert part.kernel is at.split_keys_kernel_for(3) and merge.kernel is at.merge_kernel_for(3)
    assert part.args[3].shape == (2, 2) and part.grid == (1,) and part.block == (32, 4)
    assert merge.grid == (1,) and part.args[-1] == 300
    assert [la.kernel for la in at.optimized.launches(q, k, v)] == [part.kernel, merge.kernel]
    assert at.optimized.describe(q, k, v).startswith("split_keys")
    run_checked("optimized", None, seed, inputs=(q, k, v))
    assert at.splits_for(6, 1000, sms=132) == 3 and at.splits_for(6, 100, sms=132) == 1
    assert at.splits_for(132 * 24, 10**6, sms=132) == 1 and at.splits_for(132 * 12, 10**6, sms=132) == 2


# ----------------------------------------------------------------------------------------------------------
# Decoding in float16: split_keys_f16
# ----------------------------------------------------------------------------------------------------------

# (shape, splits asked for): Sq of 1, 2, 3, 5 (one query tile of 16) and 70 (5, the early ones seeing few keys under
# the mask), Sk of 1, 33, 530, 1000 and 130 (partial last tiles), D of 16 to 128; None: split_plan's own
SPLIT_F16_CASES = [((1, 2, 3, 530, 16), 3), ((1, 1, 70, 130, 16), 3), ((2, 1, 5, 1000, 64), None),
                   ((1, 1, 1, 33, 128), None), ((2, 3, 2, 1000, 128), 5), ((1, 2, 1, 1, 16), 4),
                   ((1, 1, 3, 1000, 80), 7), ((2, 2, 5, 530, 48), None)]


def _f16_states(q, k, v, causal, chunk, splits):
    """Each row's partial state by its definition, in float64: (m, l, acc) of its visible keys in each slice (m, l
    None for a slice without one), and the terms' sizes for the bounds."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    q64, k64, v64 = (x.astype(np.float64).reshape(b * h, -1, d) for x in (q, k, v))
    s = np.einsum("rid,rjd->rij", q64, k64) / np.sqrt(d)
    s_abs = np.einsum("rid,rjd->rij", np.abs(q64), np.abs(k64)) / np.sqrt(d)
    for r in range(b * h * sq):
        bh, i = divmod(r, sq)
        seen = min(sk, i + 1) if causal else sk
        for run in range(splits):
            j0, j1 = run * chunk, min(seen, (run + 1) * chunk)
            if j1 <= j0:
                yield r, run, None
                continue
            m = s[bh, i, j0:j1].max()
            w = np.exp(s[bh, i, j0:j1] - m)
            yield r, run, (m, w.sum(), w @ v64[bh, j0:j1], w @ np.abs(v64[bh, j0:j1]), s_abs[bh, i, j0:j1].max())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape,splits", long_tier_after((0, 1), SPLIT_F16_CASES, multi=True),
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_split_keys_f16_merges_its_slices(shape, splits, causal, seed):
    # Slices of whole K/V tiles, the last partial; under the mask, blocks of early queries whose slices lie past
    # their last key (the empty state: the merge must weigh it 0). Output, m, l and acc poisoned with NaN; the states
    # checked against their definition, the output against float64 of the float16 inputs.
    q, k, v = half_inputs(shape, seed)
    before = q.copy(), k.copy(), v.copy()
    ref = at.reference(q, k, v, causal=causal)
    out = np.full(ref.shape, np.nan, np.float32)
    part, merge = at.split_keys_f16_launches(q, k, v, out, causal, 1 / np.sqrt(shape[-1]), splits)
    b, h, sq, sk, d = shape
    chunk, n = int(part.args[-1]), part.grid[1]
    keys = min(sk, sq) if causal else sk
    assert chunk % 64 == 0 and (n - 1) * chunk < keys <= n * chunk  # whole tiles, no slice past the keys
    assert part.grid == (b * h * -(-sq // 16), n) and part.block == (32,) and merge.kernel is at.merge_kernel_for(
        -(-d // 32))
    pm, pl, pacc = part.args[3:6]
    assert pm.shape == pl.shape == (b * h * sq, n) and pacc.shape == (b * h * sq, n, d)
    for x in (pm, pl, pacc):
        x.fill(np.nan)
    part()
    merge()
    check = compare(out, ref, TOLERANCE_F16)
    assert check.ok, f"split_keys_f16 {shape} splits={n} causal={causal} seed={seed}: {check}"
    empty = 0
    for r, run, state in _f16_states(q, k, v, causal, chunk, n):
        if state is None:  # a slice without a key the row sees: the state the merge drops
            assert pm[r, run] == -np.inf and pl[r, run] == 0 and not pacc[r, run].any(), (r, run)
            empty += 1
            continue
        m, l_, acc, acc_abs, s_abs = state
        err_s = 4e-6 * s_abs + 1e-6  # a float32 score of float16 products: its terms' size, not its value
        assert abs(pm[r, run] - m) <= err_s, (r, run, pm[r, run], m)
        assert abs(pl[r, run] - l_) <= (2 * err_s + 1e-5) * l_, (r, run, pl[r, run], l_)
        # P V takes the weights rounded to float16: 2^-11 of each, relative
        assert np.all(np.abs(pacc[r, run] - acc) <= (2 * err_s + 2.0**-10) * acc_abs + 1e-30), (r, run)
    assert empty == (sum(max(0, n - -(-min(sk, i + 1) // chunk)) for i in range(sq)) * b * h if causal else 0)
    for x, x0 in zip((q, k, v), before):
        assert np.array_equal(x, x0)


def test_split_keys_f16_plan_and_dispatch(seed):
    # slices: enough one-warp blocks for SLICE_BLOCKS per SM, none shorter than MIN_TILES tiles of 64 keys
    assert at.slices_for(32, 128, sms=132) == 17 and at.slices_for(32, 7, sms=132) == 1
    assert at.slices_for(4 * 132, 10**4, sms=132) == 1 and at.slices_for(2 * 132, 10**4, sms=132) == 2
    assert at.split_plan(32, 1, 8192, False, sms=132) == {"splits": 16, "chunk": 512}  # 17 asked: 8 tiles each
    assert at.split_plan(32, 1, 8192, True, sms=132) == {"splits": 1, "chunk": 64}  # query 0 sees key 0 alone
    assert at.split_plan(1, 70, 130, True, sms=132, splits=3) == {"splits": 2, "chunk": 64}  # 2 tiles: 2 slices
    choose = at.optimized.choose
    for sq in (1, 4):
        decode = choose(1, 32, sq, 8192, 128, half=True, sms=132)
        assert decode.step == "split_keys_f16" and decode.config == {"splits": 16, "chunk": 512}, decode
        assert "32 blocks would give the 132 SMs fewer than 4 each" in decode.why and "512 blocks" in decode.why
        assert "predicted" in decode.why
    assert choose(1, 32, 16, 8192, 64, half=True, sms=132).step == "split_keys_f16"  # one m16 tile of queries
    assert choose(1, 32, 17, 8192, 64, half=True, sms=132).step == "pipelined"
    assert choose(64, 32, 1, 4096, 128, half=True, sms=132).step == "pipelined"  # 2048 blocks fill the SMs
    assert choose(1, 32, 1, 8192, 128, causal=True, half=True, sms=132).step == "pipelined"
    assert choose(1, 32, 1, 448, 128, half=True, sms=132).step == "pipelined"  # 7 tiles: slices of fewer than 4
    assert choose(1, 32, 1, 449, 128, half=True, sms=132).config == {"splits": 2, "chunk": 256}
    assert choose(1, 32, 1, 8192, 128, sms=132).step == "split_keys"  # float32: its own
    q, k, v = half_inputs((1, 2, 1, 600, 64), seed)  # 10 tiles, 2 heads: 2 slices of 5 tiles
    part, merge = at.optimized.launches(q, k, v)
    assert part.kernel is at.split_keys_f16_kernel_for(64) and merge.kernel is at.merge_kernel_for(2)
    assert part.grid == (2, 2) and part.args[-1] == 320
    assert at.optimized.describe(q, k, v).startswith("split_keys_f16")
    run_mma(None, seed, inputs=(q, k, v), name="optimized")
    # K or V off a 16-byte boundary cannot be copied by cp.async: pipelined's launch (step 4's kernel) instead
    q, k, v = half_inputs((1, 1, 2, 70, 16), seed)
    buf = np.zeros(k.size + 1, np.float16)
    k1 = buf[1:].reshape(k.shape)
    k1[...] = k
    assert [la.kernel for la in at.split_keys_f16.launches(q, k1, v)] == [at.mma_kernel_for(16)]
    run_mma(None, seed, inputs=(q, k1, v), name="split_keys_f16")
    assert list(at.VERSIONS).index("split_keys_f16") == list(at.VERSIONS).index("split_keys") + 1


@pytest.mark.skipif(not SIM, reason="the tracer runs on the simulator")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_split_keys_f16_has_no_races_and_skips_empty_slices(causal, seed):
    # 70 queries (5 blocks of 16) against 130 keys in slices of one tile: without the mask every block loads all
    # 130 keys (3 slices); with it the keys up to query 69 make 2 slices, the blocks of queries 0-63 load the first
    # tile and walk nothing of the second (empty for them), the block of 64-69 loads both -- the third tile, masked
    # for every query, is never read
    from gpukernels.sim import BarrierDivergenceError, WarpMaskError

    q, k, v = half_inputs((1, 1, 70, 130, 16), seed)
    out = np.full((1, 1, 70, 16), np.nan, np.float32)
    try:
        with gpukernels.trace(count_local=False) as t:
            for la in at.split_keys_f16_launches(q, k, v, out, causal, 0.25, 3):
                la()
    except (BarrierDivergenceError, WarpMaskError) as err:
        pytest.fail(f"{type(err).__name__}: {err}")
    assert compare(out, at.reference(q, k, v, causal=causal), TOLERANCE_F16).ok
    _assert_no_hazards(t)
    loads = {x.array: x.loads for x in t.traffic()}
    keys = 5 * 130 if not causal else 4 * 64 + 128
    assert loads["k"] == loads["v"] == keys * 16


_SPLIT_F16_CHILD = r"""
import json, re, sys
from numba import cuda, types
from gpukernels import attention as at
from gpukernels.resources import _assemble, _jit_options
h3, f2, f3 = (types.Array(types.float16, 3, "C"), types.Array(types.float32, 2, "C"),
              types.Array(types.float32, 3, "C"))
out = {}
for d in map(int, sys.argv[1:]):
    k = at.split_keys_f16_kernel_for(d)
    ptx, _ = cuda.compile_ptx(k.py_func, (h3, h3, h3, f2, f2, f3, types.float32, types.boolean, types.int64),
                              cc=(9, 0), **_jit_options(k))
    log = _assemble(ptx, "sm_90")
    res = re.search(r"used (\d+) registers.*?(\d+) bytes smem.*?(\d+) bytes lmem", log, re.S)
    spill = re.search(r"(\d+) bytes spill stores", log)
    out[d] = {"registers": int(res[1]), "smem": int(res[2]), "lmem": int(res[3]),
              "spill": int(spill[1]) if spill else 0,
              "local": ptx.count("ld.local") + ptx.count("st.local"), "mma": ptx.count("mma.sync.aligned.m16n8k16"),
              "ldmatrix": ptx.count("ldmatrix.sync"), "cp_async": ptx.count("cp.async.cg.shared.global"),
              "ex2": ptx.count("ex2.approx")}
print(json.dumps(out))
"""


@pytest.mark.needs_cuda_toolchain
# the long tier, ~2 CPU-s per D: the smallest, 48 (a ragged copy pass: 32 // 6 rows), 112 (ragged again) and 128
# (the most registers; pipelined's 16-row loop, which this kernel runs, is far from the 255 cap at 216 registers,
# benchmarks/NOTES.md, so the first D to spill would be the largest). The other D are the same code with fewer
# fragments (the formulas below are the same in D / 16); the separate "d128" case was a subset of this one
@pytest.mark.parametrize("dims", [pytest.param((16, 48, 112, 128), id="all", marks=pytest.mark.slow)])
def test_split_keys_f16_compiles_without_local_memory(dims):
    from gpukernels.resources import run_with_real_cuda

    out = json.loads(run_with_real_cuda(_SPLIT_F16_CHILD, *map(str, dims)))
    assert len(out) == len(dims)
    for d, r in out.items():
        d, nd = int(d), int(d) // 16
        # pipelined's tile loop, unrolled: its mmas, ldmatrix reads and exp2 per score; the three copy loops (V, the
        # first K, the next K) of 64 rows by one warp, 32 // (D / 8) rows a pass; registers only
        assert r["lmem"] == 0 and r["local"] == 0 and r["spill"] == 0, f"D = {d}: {r}"
        assert r["mma"] == 8 * nd + 4 * (d // 8) and r["ldmatrix"] == 8 * nd, r
        assert r["cp_async"] == 3 * -(-64 // (32 // (d // 8))) and r["ex2"] >= 32, r
        assert r["smem"] - 2 * 64 * (d + 8) * 2 in (0, 1024) and r["registers"] <= 255, r  # (+ ptxas' 1 KB)

