"""Every version of every lesson against its float64 reference, on odd shapes, with poisoned outputs.

Each version gets the inputs it takes (`gpukernels.check.version_inputs`: attention's tensor-core steps float16
copies of q, k, v), at the shapes it runs (`supports`), and is held to the tolerance of its run (`tolerance`) against
the reference of those very inputs."""

import numpy as np
import pytest
from numba import cuda

from gpukernels import LESSONS
from gpukernels._launch import is_device_array
from gpukernels.check import TOLERANCE, compare, reference, supports, tolerance, version_inputs

from ._tiers import long_tier_after
from .conftest import GPU


def cases(kind):
    # xdist_group: with `pytest -n N --dist loadgroup` every shape of one version runs in the same worker, so on a
    # GPU each worker compiles only its versions' kernels (the largest take ~20 s each) instead of all of them.
    # At the simulator's "test" shapes the default tier runs each version at one (`default_tier_shapes`), the long
    # tier at all.
    for lesson, mod in LESSONS.items():
        for i, name in enumerate(mod.VERSIONS):
            mine = shapes(lesson, name, kind)
            quick = default_tier_shapes(mine, i, lesson) if kind == "test" else mine
            for shape in mine:
                marks = [pytest.mark.xdist_group(f"{lesson}.{name}")] + ([] if shape in quick else [pytest.mark.slow])
                yield pytest.param(lesson, name, shape, id=f"{lesson}-{name}-{'x'.join(map(str, shape))}",
                                   marks=marks)


#: The test shape the default tier runs every version of a lesson at: odd in every side and more than one tile or warp
#: where it costs little in the simulator (the lessons' largest test shapes cost 3-15 CPU-s a lesson: long tier).
DEFAULT_TIER_SHAPE = {"matmul": (17, 130, 9),  # 130 columns: two tiles of 64 and a ragged third; K = 9
                      "softmax": (1, 4100),  # a row longer than one block's pass: several per thread, ragged
                      "cbr": (2, 2, 9, 17, 3, 3, 3),  # two images, 9 x 17 pixels: ragged tiles of the output
                      "tensor_core": (33, 40, 20),  # partial m16/n8 tiles, K not a multiple of 16, unaligned rows
                      "attention": (1, 1, 5, 40, 80)}  # D = 80, 40 keys: a partial K/V tile


def default_tier_shapes(shapes_, index: int, lesson: str | None = None) -> list:
    """The test shapes the default tier runs a version at: its lesson's `DEFAULT_TIER_SHAPE` where the version takes
    it, else its last (most ragged) one; the smallest odd shapes (sizes of 1, a partial warp) run there too, through
    test_returns_new_host_array_without_out and test_device_arrays_in_device_array_out. The long tier runs every
    version at every shape."""
    if len(shapes_) <= 1:
        return list(shapes_)
    chosen = DEFAULT_TIER_SHAPE.get(lesson)
    return [chosen] if chosen in shapes_ else [shapes_[-1]]


def shapes(lesson, name, kind="test"):
    """The lesson's ``SHAPES[kind]`` that ``name`` runs at (attention's tensor-core steps: D a multiple of 16)."""
    return [tuple(s) for s in LESSONS[lesson].SHAPES[kind] if supports(lesson, name, s)]


def inputs_for(lesson, name, shape, seed):
    """The lesson's inputs at ``shape`` as ``name`` takes them."""
    return version_inputs(lesson, name, LESSONS[lesson].make_inputs(shape, seed))


def versions(lessons=None):
    """Every (lesson, version), in the version's xdist group (``cases``): on a GPU the worker that compiled its
    kernels for the shapes above runs these too, instead of one worker compiling every version of a lesson."""
    for lesson, mod in LESSONS.items():
        if lessons is None or lesson in lessons:
            for name in mod.VERSIONS:
                yield pytest.param(lesson, name, id=f"{lesson}-{name}",
                                   marks=pytest.mark.xdist_group(f"{lesson}.{name}"))


def run_checked(lesson, name, shape, seed, **params):
    mod = LESSONS[lesson]
    inputs = inputs_for(lesson, name, shape, seed)
    before = [x.copy() for x in inputs]
    ref = reference(lesson, name, inputs, **params)  # float64 of the inputs the version gets (float16 for float16 steps)
    out = np.full(ref.shape, np.nan, dtype=np.float32)  # poison: an unwritten element fails
    result = mod.VERSIONS[name](*inputs, out=out, **params)
    assert result is out
    scale = getattr(mod, "error_scale", None)  # what rounding errors are proportional to, where not ref itself
    check = compare(out, ref, tolerance(lesson, name, inputs), scale=scale and scale(*inputs, **params))
    assert check.ok, f"{lesson}.{name} shape={shape} {params} seed={seed}: {check}"
    for x, x0 in zip(inputs, before):
        assert np.array_equal(x, x0, equal_nan=True), f"{lesson}.{name} modified its input"
    return out


@pytest.mark.parametrize("lesson,name,shape", list(cases("test")))
def test_matches_reference(lesson, name, shape, seed):
    run_checked(lesson, name, shape, seed)


@pytest.mark.gpu
@pytest.mark.parametrize("lesson,name,shape", list(cases("test_gpu")))
def test_matches_reference_gpu_sizes(lesson, name, shape, seed):
    run_checked(lesson, name, shape, seed)


@pytest.mark.parametrize("name", list(LESSONS["cbr"].VERSIONS))
@pytest.mark.parametrize("padding", long_tier_after((1,), [0, 2]))
def test_cbr_padding(name, padding, seed):
    run_checked("cbr", name, (2, 3, 6, 9, 4, 3, 3), seed, padding=padding)


# Sq > Sk (the last queries see every key) and Sq < Sk over several K/V tiles (tiled's 32 keys at D = 16, the
# tensor-core steps' 64: the tiles no query of a block sees are skipped); D a multiple of 16, so every step runs
@pytest.mark.parametrize("name", list(LESSONS["attention"].VERSIONS))
@pytest.mark.parametrize("shape", long_tier_after(1, [(1, 2, 33, 20, 64), (2, 1, 17, 70, 16)]),
                         ids=lambda s: "x".join(map(str, s)))
def test_attention_causal(name, shape, seed):
    run_checked("attention", name, shape, seed, causal=True)


@pytest.mark.parametrize("lesson,name", list(versions()))
def test_returns_new_host_array_without_out(lesson, name, seed):
    mod = LESSONS[lesson]
    inputs = inputs_for(lesson, name, shapes(lesson, name)[1], seed)  # what is returned; odd shapes: above
    result = mod.VERSIONS[name](*inputs)
    assert isinstance(result, np.ndarray) and result.dtype == np.float32
    check = compare(result, reference(lesson, name, inputs), tolerance(lesson, name, inputs))
    assert check.ok, f"{lesson}.{name} seed={seed}: {check}"


@pytest.mark.parametrize("lesson,name", list(versions()))
def test_device_arrays_in_device_array_out(lesson, name, seed):
    mod = LESSONS[lesson]
    version = mod.VERSIONS[name]
    # on a GPU a shape of several blocks; the simulator's device arrays are host arrays in a wrapper, so there the
    # smaller odd shape says as much (the values at every shape are test_matches_reference's)
    inputs = inputs_for(lesson, name, shapes(lesson, name)[3 if GPU else 1], seed)
    ref = reference(lesson, name, inputs)
    tol = tolerance(lesson, name, inputs)
    d_inputs = [cuda.to_device(x) for x in inputs]
    small = list(inputs_for(lesson, name, shapes(lesson, name)[1 if GPU else 0], seed))
    small_ref = reference(lesson, name, small)
    d_small = [cuda.to_device(x) for x in small]
    d_out = cuda.to_device(np.full(ref.shape, np.nan, dtype=np.float32))
    assert version(*d_inputs, out=d_out) is d_out
    check = compare(d_out.copy_to_host(), ref, tol)
    assert check.ok, f"{lesson}.{name} seed={seed}: {check}"
    # without out=: a new device array, checked at the smallest odd shape (the launch above checked the values)
    fresh = version(*d_small)
    assert is_device_array(fresh), f"{lesson}.{name} returned {type(fresh)} for device inputs"
    assert compare(fresh.copy_to_host(), small_ref, tol).ok
    for d, x in zip(d_inputs + d_small, list(inputs) + small):
        assert np.array_equal(d.copy_to_host(), x, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("lesson,name", list(versions()))
def test_torch_and_cupy_arrays(lesson, name, seed):
    mod = LESSONS[lesson]
    inputs = inputs_for(lesson, name, shapes(lesson, name)[3], seed)
    ref = reference(lesson, name, inputs)
    tried = 0
    for lib in ("torch", "cupy"):
        try:
            m = __import__(lib)
        except ImportError:
            continue
        tried += 1
        to = (lambda x: m.from_numpy(x).cuda()) if lib == "torch" else m.asarray
        out = mod.VERSIONS[name](*[to(x) for x in inputs])
        assert compare(out.copy_to_host(), ref, tolerance(lesson, name, inputs)).ok, f"{lib} {lesson}.{name}"
    if not tried:
        pytest.skip("neither torch nor cupy is installed")


@pytest.mark.parametrize("lesson,name", list(versions(["matmul"])))
def test_non_contiguous_host_input_is_made_contiguous(lesson, name, seed):
    from gpukernels import matmul

    a, b = matmul.make_inputs((20, 12, 9), seed)
    at = np.asfortranarray(a)  # same values, column-major
    bt = b.T.copy().T  # a transposed view of a copy: not C-contiguous
    assert not at.flags.c_contiguous and not bt.flags.c_contiguous
    assert compare(matmul.VERSIONS[name](at, bt), matmul.reference(a, b), TOLERANCE["matmul"]).ok, name


def test_softmax_extremes():
    """Entries of +-1e4 overflow exp() without the max subtraction; -inf entries must give exact zeros."""
    from gpukernels import softmax

    x = np.array(
        [[1e4, -1e4, 0.0, 1e4], [-np.inf, 1.0, 2.0, -np.inf], [-1e4, -1e4, -1e4, -1e4], [88.0, 89.0, 90.0, -3.0]],
        dtype=np.float32,
    )
    ref = softmax.reference(x)
    assert np.isfinite(ref).all()
    for name, version in softmax.VERSIONS.items():
        out = version(x)
        check = compare(out, ref, TOLERANCE["softmax"])
        assert check.ok, f"softmax.{name}: {check}"
        assert out[1, 0] == 0.0 and out[1, 3] == 0.0
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("n", long_tier_after((1, 5), [1, 31, 33, 257, 1023, 4097]))
def test_softmax_row_lengths(n, seed):
    for name in LESSONS["softmax"].VERSIONS:
        run_checked("softmax", name, (2, n), seed)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [32767, 32768, 32769, 65536, 100_003])
def test_softmax_long_rows_gpu(n, seed):
    for name in LESSONS["softmax"].VERSIONS:
        run_checked("softmax", name, (3, n), seed)


@pytest.mark.parametrize(
    "lesson,shape,expected",
    [
        ("matmul", (0, 4, 3), (0, 4)),
        ("matmul", (3, 0, 2), (3, 0)),
        ("softmax", (0, 5), (0, 5)),
        ("softmax", (4, 0), (4, 0)),
        ("cbr", (0, 2, 5, 5, 3, 3, 3), (0, 3, 5, 5)),
        ("cbr", (1, 2, 5, 5, 0, 3, 3), (1, 0, 5, 5)),
        ("attention", (0, 2, 3, 4, 16), (0, 2, 3, 16)),
        ("attention", (1, 2, 0, 4, 16), (1, 2, 0, 16)),
    ],
)
def test_zero_size_returns_empty_without_launch(lesson, shape, expected):
    mod = LESSONS[lesson]
    for name, version in mod.VERSIONS.items():
        out = version(*inputs_for(lesson, name, shape, 0))
        assert out.shape == expected and out.dtype == np.float32, name


def test_empty_sums_have_their_value():
    """K = 0: C = A @ B is all zeros. C = 0 input channels: y = relu(b)."""
    from gpukernels import cbr, matmul

    a, b = np.ones((3, 0), np.float32), np.ones((0, 2), np.float32)
    for version in matmul.VERSIONS.values():
        assert np.array_equal(version(a, b), np.zeros((3, 2), np.float32))
    x, w = np.ones((1, 0, 4, 4), np.float32), np.ones((2, 0, 3, 3), np.float32)
    bias = np.array([-1.0, 2.0], np.float32)
    for version in cbr.VERSIONS.values():
        y = version(x, w, bias)
        assert y.shape == (1, 2, 4, 4) and (y[0, 0] == 0).all() and (y[0, 1] == 2).all()


def test_registry_order_and_aliases():
    from gpukernels import attention, cbr, matmul, softmax

    for mod in (matmul, softmax, cbr, attention):
        names = list(mod.VERSIONS)
        assert names[0] == "naive"
        assert mod.optimized is list(mod.VERSIONS.values())[-1]
        for version in mod.VERSIONS.values():
            assert version.doc.strip(), f"{version} has no docstring"
    assert matmul.tiled is matmul.VERSIONS["tiled"]


@pytest.mark.parametrize("shape,padding", long_tier_after((1, 2), [
    ((1, 3, 5, 6, 70, 3, 3), 1),  # K = 70: two blocks of 64 output channels, the second ragged
    ((1, 2, 9, 9, 5, 7, 7), 3),  # 49 taps: the filter is cut into groups of filter rows, the last partly empty
    ((1, 19, 4, 5, 3, 1, 1), 0),  # 1x1: k tiles of 8 channels, the last ragged (Q = 19)
    ((2, 3, 6, 4, 2, 5, 5), 2),  # 5x5, padding 2, P = 48 pixels in two images
    ((1, 3, 5, 7, 4, 2, 3), 0),  # 2x3 with no padding
], multi=True))
def test_cbr_implicit_gemm_tilings(shape, padding, seed):
    """The implicit GEMM's k tiles are whole filter taps; these shapes make every kind of tile ragged (unsliced, and as
    the dispatcher runs them: sliced when the image is small)."""
    run_checked("cbr", "implicit_gemm", shape, seed, padding=padding)
    run_checked("cbr", "optimized", shape, seed, padding=padding)


@pytest.mark.slow  # every variant of benchmarks/cbr_variants.py in the simulator
def test_cbr_variants_script_runs_its_variants_on_the_simulator():
    """benchmarks/cbr_variants.py imports without torch, and every tiling it times is right (tiny shape)."""
    import importlib.util
    from pathlib import Path

    from gpukernels import cbr

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "cbr_variants.py"
    spec = importlib.util.spec_from_file_location("cbr_variants", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x, w, b = cbr.make_inputs((1, 3, 5, 6, 3, 3, 3), 0)
    ref = cbr.reference(x, w, b)
    for name, kw in mod.VARIANTS + mod.DEEP:
        y = cuda.to_device(np.full(ref.shape, np.nan, np.float32))
        for launch in mod.variant_launches(cuda.to_device(x), cuda.to_device(w), cuda.to_device(b), y, 1, **kw):
            launch()
        check = compare(y.copy_to_host(), ref, TOLERANCE["cbr"])
        assert check.ok, f"{name}: {check}"


def _odd_strides(x):
    """``x`` (contiguous) viewed with strides its length-1 axes never use: 0 on the first axis, a large one on others
    -- what NumPy's ``x[None]`` and torch's ``unsqueeze`` or a one-row slice give."""
    strides = [st if n != 1 else 0 if i == 0 else 4099 * x.itemsize
               for i, (n, st) in enumerate(zip(x.shape, x.strides))]
    return np.lib.stride_tricks.as_strided(x, x.shape, strides, writeable=False)


def _ends_first(params):
    """``versions()`` with every version but each lesson's first and last (optimized) in the long tier when the
    simulator runs them: what a test checks of the launcher there is the same for every version (on a GPU every
    version stays in the default tier: the device arrays are real)."""
    for p in params:
        names = list(LESSONS[p.values[0]].VERSIONS)
        middle = p.values[1] not in (names[0], names[-1])
        yield pytest.param(*p.values, id=p.id, marks=[*p.marks, *([pytest.mark.slow] if middle and not GPU else [])])


@pytest.mark.parametrize("lesson,name", list(_ends_first(versions())))
def test_length_one_axes_with_any_strides(lesson, name, seed):
    """Contiguous inputs and ``out`` whose axes of length 1 carry strides nobody reads: host arrays and device arrays
    (Numba's device arrays refused to reshape them -- attention.tiled failed on ``q[None, None, None]``)."""
    mod = LESSONS[lesson]
    with_one = [s for s in shapes(lesson, name) if 1 in s]
    shape = min(with_one, key=lambda s: (set(s) == {1}, np.prod(s)))
    inputs = [np.ascontiguousarray(x) for x in inputs_for(lesson, name, shape, seed)]
    ref = reference(lesson, name, inputs)
    tol = tolerance(lesson, name, inputs)
    odd = [_odd_strides(x) for x in inputs]
    assert any(o.strides != x.strides for o, x in zip(odd, inputs)), f"{shape}: no axis of length 1"
    host = mod.VERSIONS[name](*odd)
    assert compare(host, ref, tol).ok, f"{lesson}.{name} {shape} seed={seed}: host inputs"
    out = _odd_strides(np.full(ref.shape, np.nan, np.float32))
    out = np.lib.stride_tricks.as_strided(out.copy(), ref.shape, out.strides)  # writeable, same strides
    assert mod.VERSIONS[name](*odd, out=out) is out
    assert compare(out, ref, tol).ok, f"{lesson}.{name} {shape} seed={seed}: out with odd strides"
    d_odd = [cuda.to_device(o) for o in odd]  # Numba keeps the strides it is given
    fresh = mod.VERSIONS[name](*d_odd)
    assert compare(fresh.copy_to_host(), ref, tol).ok, f"{lesson}.{name} {shape} seed={seed}: device inputs"
