"""Bad input gets a clear error naming the argument, what was expected and what was given."""

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


def test_launch_error_is_a_value_error():
    assert issubclass(LaunchError, ValueError)


def test_inputs_not_modified_on_error():
    a = A.astype(np.float64)
    before = a.copy()
    with pytest.raises(LaunchError):
        matmul.naive(a, B)
    assert np.array_equal(a, before)
