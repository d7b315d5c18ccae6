"""Bad input gets a clear error naming the argument, what was expected and what was given."""

import inspect

import numpy as np
import pytest

from gpukernels import cbr, matmul, softmax
from gpukernels._launch import LaunchError

f32 = np.float32
A = np.ones((4, 3), f32)
B = np.ones((3, 5), f32)
X = np.ones((2, 3, 6, 6), f32)
W = np.ones((4, 3, 3, 3), f32)
BIAS = np.ones(4, f32)

BAD = [
    ("matmul float64", lambda v: v(A.astype(np.float64), B), ["a", "float32", "float64", "astype"]),
    ("matmul 1-D", lambda v: v(np.ones(3, f32), B), ["a", "2-D", "1-D"]),
    ("matmul inner", lambda v: v(A, np.ones((4, 5), f32)), ["inner", "(4, 3)", "(4, 5)"]),
    ("matmul list", lambda v: v([[1.0]], B), ["a", "list", "np.asarray"]),
    ("matmul out shape", lambda v: v(A, B, out=np.empty((5, 4), f32)), ["out", "(4, 5)", "(5, 4)"]),
    ("matmul out dtype", lambda v: v(A, B, out=np.empty((4, 5), np.float64)), ["out", "float32", "float64"]),
    ("softmax int", lambda v: v(np.ones((2, 2), np.int32)), ["x", "float32", "int32"]),
    ("softmax 3-D", lambda v: v(np.ones((2, 2, 2), f32)), ["x", "2-D", "3-D"]),
    ("cbr channels", lambda v: v(X, np.ones((4, 2, 3, 3), f32), BIAS), ["channel", "C = 3", "C = 2"]),
    ("cbr bias", lambda v: v(X, W, np.ones(5, f32)), ["b", "(4,)", "(5,)"]),
    ("cbr padding", lambda v: v(X, W, BIAS, padding=-1), ["padding", ">= 0", "-1"]),
    ("cbr kernel too big", lambda v: v(np.ones((1, 3, 2, 2), f32), W, BIAS, padding=0), ["larger", "(3, 3)", "(2, 2)"]),
    ("cbr x 3-D", lambda v: v(np.ones((3, 6, 6), f32), W, BIAS), ["x", "4-D", "3-D"]),
    ("cbr w dtype", lambda v: v(X, W.astype(np.float16), BIAS), ["w", "float32", "float16"]),
    ("cbr empty filter", lambda v: v(X, np.ones((4, 3, 0, 3), f32), BIAS), ["w", "R, S >= 1", "(0, 3)"]),
    ("cbr empty filter columns", lambda v: v(X, np.ones((4, 3, 3, 0), f32), BIAS), ["w", "R, S >= 1", "(3, 0)"]),
]

LESSON_OF = {"matmul": matmul, "softmax": softmax, "cbr": cbr}


@pytest.mark.parametrize("label,call,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_input_message(label, call, fragments):
    mod = LESSON_OF[label.split()[0]]
    for name, version in mod.VERSIONS.items():
        with pytest.raises(LaunchError) as err:
            call(version)
        message = str(err.value)
        for fragment in fragments:
            assert fragment in message, f"{mod.__name__}.{name}: {fragment!r} not in {message!r}"


@pytest.mark.parametrize("lesson", ["matmul", "softmax"])
def test_a_masked_array_is_refused_not_read_through_its_mask(lesson):
    """numpy.ma arrays are host arrays only (a device copy has no mask), so this is not one of BAD, whose cases
    tests/test_launch_fast.py also replays with device arrays."""
    masked = np.ma.masked_array(A, mask=A > 2)
    for name, version in LESSON_OF[lesson].VERSIONS.items():
        with pytest.raises(LaunchError, match="^a is a masked array.*a.filled" if lesson == "matmul" else
                           "^x is a masked array.*x.filled"):
            version(masked, B) if lesson == "matmul" else version(masked)


def test_launch_error_is_a_value_error():
    assert issubclass(LaunchError, ValueError)


def test_inputs_not_modified_on_error():
    a = A.astype(np.float64)
    before = a.copy()
    with pytest.raises(LaunchError):
        matmul.naive(a, B)
    assert np.array_equal(a, before)


def _choosers():
    from gpukernels import attention, tensor_core
    return {"matmul": (matmul.choose, (64, 64, 64)), "softmax": (softmax.choose, (64, 64)),
            "cbr": (cbr.choose, (1, 3, 6, 6, 4)), "tensor_core": (tensor_core.choose, (64, 64, 64)),
            "attention": (attention.choose, (1, 2, 5, 7, 16))}


@pytest.mark.parametrize("lesson", ["matmul", "softmax", "cbr", "tensor_core", "attention"])
def test_choose_refuses_sizes_a_launcher_refuses(lesson):
    """Each dispatcher's choose() answers for real shapes only: a size below 1, a float or a bool, an SM count of 0,
    a flag that is not a bool -- a LaunchError naming the argument, never a ZeroDivisionError or a plan for -2
    blocks."""
    choose, good = _choosers()[lesson]
    names = list(inspect.signature(choose).parameters)
    assert choose(*good).step  # the good shape is answered
    for i in range(len(good)):
        for bad in (0, -1, 2.5, True):
            args = list(good)
            args[i] = bad
            with pytest.raises(LaunchError, match=f"^{names[i]} must be an int >= 1; got {bad!r}$"):
                choose(*args)
    with pytest.raises(LaunchError, match="^sms must be None or an int >= 1"):
        choose(*good, sms=0)
    flag = {"matmul": "aligned", "softmax": "aligned", "tensor_core": "fp32", "attention": "causal"}.get(lesson)
    if flag:
        with pytest.raises(LaunchError, match=f"^{flag} must be True or False; got 'yes'"):
            choose(*good, **{flag: "yes"})


def test_choose_refuses_what_the_launchers_refuse():
    from gpukernels import attention
    with pytest.raises(LaunchError, match="^d must be from 1 to 128 .* got 200$"):
        attention.choose(1, 2, 5, 7, 200)
    with pytest.raises(LaunchError, match="^d must be a multiple of 16 .* got 24$"):
        attention.choose(1, 2, 5, 7, 24, half=True)
    with pytest.raises(LaunchError, match=r"^the filter \(r, s\) = \(5, 5\) must fit"):
        cbr.choose(1, 3, 1, 1, 4, 5, 5)
    # padding other than 1 is mapped to the size that gives the same output with padding 1, at least 1
    assert cbr.optimized.describe(np.ones((1, 1, 1, 1), f32), np.ones((1, 1, 1, 1), f32), BIAS[:1], padding=0)


def test_references_check_shapes_as_the_launchers_do():
    from gpukernels import attention, tensor_core
    q = np.ones((1, 1, 2, 4), f32)
    with pytest.raises(LaunchError, match="k must have q's head dimension D = 4"):
        attention.reference(q, np.ones((1, 1, 3, 5), f32), np.ones((1, 1, 3, 5), f32))
    with pytest.raises(LaunchError, match="at least one key"):
        attention.reference(q, np.ones((1, 1, 0, 4), f32), np.ones((1, 1, 0, 4), f32))
    with pytest.raises(LaunchError, match="q must be 4-D"):
        attention.reference(q[0], q, q)
    with pytest.raises(LaunchError, match=r"needs a \(M, K\) and b \(K, N\)"):
        tensor_core.reference(np.ones(4, np.float16), np.ones(4, np.float16))
    with pytest.raises(LaunchError, match=r"needs a \(M, K\)"):
        matmul.reference(A, A)
    assert attention.reference(q[:, :, :0], q, q).shape == (1, 1, 0, 4)  # no queries: an empty result


@pytest.mark.parametrize("name,count", [("a_frag_coords", 8), ("b_frag_coords", 4), ("c_frag_coords", 4),
                                        ("a_tf32_coords", 4), ("b_tf32_coords", 2), ("ldmatrix_coords", 2)])
def test_fragment_tables_refuse_lanes_and_elements_outside_the_warp(name, count):
    from gpukernels import _mma
    coords = getattr(_mma, name)
    assert coords(31, count - 1)  # the last lane's last element is in the table
    for lane, i, what in ((32, 0, "lane"), (-1, 0, "lane"), (0, count, "i"), (0, -1, "i"), (1.0, 0, "lane")):
        with pytest.raises(ValueError, match=f"^{name}: {what} must be an int from 0 to"):
            coords(lane, i)
