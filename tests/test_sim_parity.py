"""What a kernel may do on a GPU works the same on gpukernels' simulator: negative indices as Numba
compiles them, ``math``, user exceptions, ``print``, ``@vectorize`` / ``@guvectorize``, alignment, views."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import gpukernels

pytestmark = pytest.mark.skipif(gpukernels.MODE != "sim", reason="simulator only")

from numba import cuda, float32, vectorize  # noqa: E402

from gpukernels.sim import OutOfBoundsError, configure  # noqa: E402
from ._tags import line_finder  # noqa: E402

line_of = line_finder(__file__)


# -- negative indices -----------------------------------------------------------------------------------------


@cuda.jit
def literal_negatives(a, out):
    i = cuda.grid(1)
    if i < out.shape[-1]:
        out[i] = a[-1, i] + a[0, -2] * 100 + a.shape[-2] * 1000


def test_literal_negative_indices_and_shape_indices_count_from_the_end():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros(4, np.float32)
    literal_negatives[1, 4](a, out)
    assert out.tolist() == [8 + 200 + 3000, 9 + 200 + 3000, 10 + 200 + 3000, 11 + 200 + 3000]


@cuda.jit
def backwards_odd(out):
    dyn = cuda.shared.array(0, float32)
    i = cuda.threadIdx.x
    dyn[i] = i
    cuda.syncthreads()
    rev = dyn[-1::-2]  # the odd elements, backwards
    if i < rev.size:
        out[i] = rev[i]


def test_slices_with_negative_bounds_and_steps_work_as_in_numba():
    out = np.full(8, -1, np.float32)
    backwards_odd[1, 8, 0, 8 * 4](out)
    assert out.tolist() == [7, 5, 3, 1, -1, -1, -1, -1]


@cuda.jit
def previous(a, out):
    i = cuda.grid(1)
    out[i] = a[i - 1]  # PREVIOUS


def test_a_computed_negative_index_is_an_error_that_says_what_the_gpu_does():
    a = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        previous[1, 8](a, out)
    msg = str(info.value)
    assert "index -1 on axis 0 is negative, computed at run time" in msg
    assert "almost always a bug" in msg and "silently read a[7], the other end of the array" in msg
    assert "thread (0, 0, 0) of block (0, 0, 0)" in msg and line_of("PREVIOUS") in msg
    assert "configure(negative_index='wrap')" in msg
    assert out.tolist() == [0] * 8  # thread 0 failed first: nothing was written


def test_wrap_mode_reads_the_other_end_as_the_gpu_does():
    a = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with configure(negative_index="wrap"):
        previous[1, 8](a, out)
    assert out.tolist() == [7, 0, 1, 2, 3, 4, 5, 6]
    with pytest.raises(OutOfBoundsError):  # back to the default
        previous[1, 8](a, out)
    with pytest.raises(ValueError, match="negative_index must be one of 'error', 'wrap'"):
        configure(negative_index="clamp")


@cuda.jit
def count_previous(h):
    i = cuda.grid(1)
    cuda.atomic.add(h, i - 1, 1)  # ATOMIC-PREVIOUS
    cuda.atomic.add(h, -1, 10)


@cuda.jit
def literal_atomics(h):
    cuda.atomic.max(h, (0, -2), 3)
    h[-1, -1] += 1


def test_atomics_follow_the_same_negative_index_rule():
    g = np.zeros((2, 3), np.int64)
    literal_atomics[1, 1](g)
    assert g.tolist() == [[0, 3, 0], [0, 0, 1]]
    h = np.zeros(4, np.int64)
    with pytest.raises(OutOfBoundsError) as info:
        count_previous[1, 4](h)
    assert "atomic of global array 'h' at index -1" in str(info.value)
    assert "silently update h[3]" in str(info.value) and line_of("ATOMIC-PREVIOUS") in str(info.value)
    h[:] = 0
    with configure(negative_index="wrap"):
        count_previous[1, 4](h)
    assert h.tolist() == [1, 1, 1, 1 + 4 * 10]  # the literal -1 always counts from the end


@cuda.jit
def far_below(a, out):
    i = cuda.grid(1)
    out[i] = a[i - 9]  # FAR-BELOW


def test_an_index_below_minus_the_length_is_out_of_bounds_even_when_wrapping():
    a = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with configure(negative_index="wrap"), pytest.raises(OutOfBoundsError) as info:
        far_below[1, 8](a, out)
    assert "below minus its length 8" in str(info.value) and line_of("FAR-BELOW") in str(info.value)


# -- views --------------------------------------------------------------------------------------------------------


@cuda.jit
def through_views(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a.T[i, 0] + a[:, 1][i] * 10 + a.ravel()[i + 4] * 100 + a.reshape(4, 2)[i, 1] * 1000


def test_views_read_the_elements_they_view():
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros(2, np.float32)
    through_views[1, 2](a, out)
    expected = [a.T[i, 0] + a[:, 1][i] * 10 + a.ravel()[i + 4] * 100 + a.reshape(4, 2)[i, 1] * 1000 for i in range(2)]
    assert out.tolist() == expected


@cuda.jit
def reshape_a_transpose(a, out):
    out[0] = a.T.reshape(8)[0]  # RESHAPE-COPY


def test_a_reshape_that_needs_a_copy_is_refused_as_numba_refuses_it():
    with pytest.raises(NotImplementedError, match="cannot do: reshape and ravel need a contiguous array") as info:
        reshape_a_transpose[1, 1](np.zeros((2, 4), np.float32), np.zeros(1, np.float32))
    assert line_of("RESHAPE-COPY") in str(info.value)


@cuda.jit
def transposed_last_row(a, out):
    i = cuda.grid(1)
    out[i] = a.T[-1, i]


@cuda.jit
def transposed_computed(a, out):
    i = cuda.grid(1)
    out[i] = a.T[i - 1, 0]  # TRANSPOSED


def test_a_view_follows_the_negative_index_rule_of_its_array():
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros(2, np.float32)
    transposed_last_row[1, 2](a, out)
    assert out.tolist() == [3, 7]
    with pytest.raises(OutOfBoundsError) as info:
        transposed_computed[1, 2](a, out)
    assert "global array 'a' at index (-1, 0) (shape (4, 2), a view of an array of shape (2, 4))" in str(info.value)
    assert line_of("TRANSPOSED") in str(info.value)


@cuda.jit
def view_past_the_end(a, out):
    i = cuda.grid(1)
    out[i] = a[1:][i]  # VIEW-PAST-END


def test_a_view_is_bounds_checked_against_its_own_shape():
    a = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        view_past_the_end[1, 4](a, out)
    assert "index 3 on axis 0 is >= its length 3" in str(info.value) and line_of("VIEW-PAST-END") in str(info.value)


# -- math, exceptions, debug, print -------------------------------------------------------------------------------

# Every function of ``math`` that numba-cuda's CUDA target compiles (numba/cuda/mathimpl.py); each must give a
# number (NaN or infinity where CUDA does) for any float, never a Python exception.
CUDA_MATH = ("acos acosh asin asinh atan atan2 atanh ceil copysign cos cosh degrees erf erfc exp exp2 expm1 fabs "
             "floor fmod frexp gamma hypot isfinite isinf isnan ldexp lgamma log log10 log1p log2 modf nextafter "
             "pow radians remainder sin sinh sqrt tan tanh trunc").split()
EDGES = (0.0, -0.0, -1.0, 1.0, -2.5, 3.0, 1e308, -1e308, math.inf, -math.inf, math.nan)


@cuda.jit
def gamma_kernel(x, out):
    i = cuda.grid(1)
    out[i] = math.gamma(x[i]) + math.lgamma(x[i])


def test_math_gamma_and_lgamma_give_the_cuda_results():
    x = np.array([3.0, 0.5, 0.0, -1.0, 200.0])
    out = np.zeros(5)
    gamma_kernel[1, 5](x, out)
    assert out[0] == pytest.approx(2 + math.log(2)) and out[1] == pytest.approx(math.sqrt(math.pi) + math.lgamma(0.5))
    assert out[2] == math.inf and math.isnan(out[3]) and out[4] == math.inf


@pytest.mark.parametrize("name", CUDA_MATH)
def test_every_cuda_math_function_answers_every_float(name):
    from gpukernels.sim.api import sim_math

    f = getattr(sim_math, name)
    arity = 2 if name in ("atan2", "copysign", "fmod", "hypot", "ldexp", "nextafter", "pow", "remainder") else 1
    for x in EDGES:
        args = (x, 3) if name == "ldexp" else (x,) * arity
        if name == "ldexp" and not math.isfinite(x):
            continue  # ldexp takes an int exponent; the mantissa edge cases are below
        f(*args)
        if arity == 2:
            f(*((x, 0.0) if name != "ldexp" else (x, 2000)))


class ParityError(Exception):
    pass


@cuda.jit
def raises_user_exception(x):
    if x == 1:
        raise ParityError
    if x == 2:
        raise ParityError("foo")


def test_user_exceptions_carry_the_gpu_message_with_thread_and_block():
    with pytest.raises(ParityError) as info:
        raises_user_exception[1, 1](1)
    assert str(info.value).endswith("tid=[0, 0, 0] ctaid=[0, 0, 0]")
    with pytest.raises(ParityError) as info:
        raises_user_exception[1, 1](2)
    assert str(info.value).endswith("tid=[0, 0, 0] ctaid=[0, 0, 0]: foo")


def test_debug_mode_stops_at_a_float_division_by_zero():
    @cuda.jit(debug=True, opt=False)
    def divide(r, x, y):
        r[0] = y[0] / x[0]
        r[1] = y[0]

    r = np.zeros(2)
    with pytest.raises(FloatingPointError):
        divide[1, 1](r, np.zeros(1), np.ones(1))
    assert r.tolist() == [0, 0]


PRINTS = """
import gpukernels
from numba import cuda

@cuda.jit
def hello():
    i = cuda.grid(1)
    print(i, "hop!", cuda.threadIdx)

hello[2, 3]()
"""


def test_print_from_kernels_comes_in_thread_order_every_time():
    env = dict(os.environ, GPUKERNELS_DEVICE="sim")
    runs = [subprocess.run([sys.executable, "-c", PRINTS], capture_output=True, text=True, env=env, check=True).stdout
            for _ in range(2)]
    expected = [f"{b * 3 + t} hop! ({t}, 0, 0)" for b in range(2) for t in range(3)]
    assert runs[0].splitlines() == expected and runs[1] == runs[0]


# -- vectorize, guvectorize ---------------------------------------------------------------------------------------


@vectorize(["float32(float32, float32)", "float64(float64, float64)"], target="cuda")
def axpy_ufunc(x, y):
    return 2 * x + math.sin(y)


@cuda.vectorize(["int64(int64)"])
def square(x):
    return x * x


@cuda.guvectorize(["void(float32[:], float32[:], float32[:])"], "(n),(n)->()")
def dot(a, b, out):
    acc = 0.0
    for k in range(a.shape[0]):
        acc += a[k] * b[k]
    out[0] = acc


def test_vectorize_on_the_cuda_target_broadcasts_and_picks_the_signature():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = axpy_ufunc(x, np.float32(0.5))
    assert r.dtype == np.float32 and r.shape == (2, 3)
    np.testing.assert_allclose(r, 2 * x + np.sin(np.float32(0.5)), rtol=1e-6)
    assert axpy_ufunc(np.ones(2), np.zeros(2)).dtype == np.float64
    out = np.zeros(4, np.int64)
    square(np.arange(4), out=out)
    assert out.tolist() == [0, 1, 4, 9]
    d = square(cuda.to_device(np.arange(3)))
    assert d.copy_to_host().tolist() == [0, 1, 4]
    with pytest.raises(TypeError, match="no signature takes inputs of types"):
        square(np.arange(3, dtype=np.complex128))


def test_guvectorize_loops_over_the_core_dimensions():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones(4, np.float32)
    np.testing.assert_allclose(dot(a, b), a.sum(axis=1))
    out = np.zeros(3, np.float32)
    dot(a, a, out)
    np.testing.assert_allclose(out, (a * a).sum(axis=1))


@cuda.jit
def whole_array_ufunc(x, out):
    np.sin(x, out)


def test_numpy_ufuncs_on_whole_arrays_in_a_kernel():
    x = np.linspace(0, 1, 5)
    out = np.zeros(5)
    whole_array_ufunc[1, 1](x, out)
    np.testing.assert_allclose(out, np.sin(x))
    with gpukernels.trace() as t:
        whole_array_ufunc[1, 1](x, out)
    traffic = {a.array: a for a in t.traffic()}
    assert (traffic["x"].loads, traffic["out"].stores) == (5, 5)


# -- alignment ----------------------------------------------------------------------------------------------------


@cuda.jit
def aligned(out):
    s = cuda.shared.array(3, np.uint8, alignment=64)
    loc = cuda.local.array(5, np.uint8, alignment=32)
    s[0] = 1
    loc[0] = 2
    out[0] = s.__array_interface__["data"][0] % 64
    out[1] = loc.__array_interface__["data"][0] % 32


def test_alignment_is_honoured_and_validated_as_numba_does():
    out = np.full(2, -1, np.int64)
    aligned[1, 1](out)
    assert out.tolist() == [0, 0]

    @cuda.jit
    def misaligned():
        cuda.local.array(1, np.uint8, alignment=12)

    with pytest.raises(ValueError, match="alignment must be a positive power of 2"):
        misaligned[1, 1]()
