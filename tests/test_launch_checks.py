"""The launchers' argument checks (gpukernels._launch.check_array and the out= check), message by message:
what a student sees for each wrong argument, and what passes through unchanged."""

import numpy as np
import pytest
from numba import cuda

from gpukernels import softmax
from gpukernels._launch import LaunchError, _check_out, check_array


def test_check_array_messages():
    with pytest.raises(LaunchError) as e:
        check_array("a", [[1.0]], 2, "(M, K)")
    assert str(e.value) == ("a must be a float32 array (M, K); got list. Convert it with np.asarray(a, "
                            "dtype=np.float32).")
    with pytest.raises(LaunchError, match=r"got float\. Convert"):
        check_array("a", 3.0, 2, "(M, K)")
    with pytest.raises(LaunchError) as e:
        check_array("a", {"x": 1}, 2, "(M, K)")
    assert str(e.value) == "a must be a NumPy or CUDA float32 array (M, K); got dict"
    with pytest.raises(LaunchError) as e:
        check_array("x", np.zeros((2, 2)), 2, "(M, N)")
    assert str(e.value) == "x must have dtype float32; got float64. Convert it with x.astype(np.float32)"
    with pytest.raises(LaunchError) as e:
        check_array("x", np.zeros(3, np.float32), 2, "(M, N)")
    assert str(e.value) == "x must be 2-D (M, N); got 1-D with shape (3,)"
    d = cuda.to_device(np.zeros((2, 3)))
    with pytest.raises(LaunchError, match=r"^x must have dtype float32; got float64\. Convert it with "
                                          r"x\.astype\(np\.float32\)$"):
        check_array("x", d, 2, "(M, N)")


def test_check_array_passes_arrays_through():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert check_array("x", x, 2, "(M, N)") is x  # already C-contiguous: no copy
    f = np.asfortranarray(x)
    got = check_array("x", f, 2, "(M, N)")
    assert got.flags.c_contiguous and np.array_equal(got, x) and not f.flags.c_contiguous
    d = cuda.to_device(x)
    assert check_array("x", d, 2, "(M, N)") is d


def test_out_checks():
    shape = (2, 3)
    good = np.zeros(shape, np.float32)
    assert _check_out(good, shape) is good
    d = cuda.to_device(good)
    assert _check_out(d, shape) is d
    with pytest.raises(LaunchError) as e:
        _check_out([0.0], shape)
    assert str(e.value) == "out must be a float32 array of shape (2, 3); got list"
    with pytest.raises(LaunchError) as e:
        _check_out(np.zeros(shape), shape)
    assert str(e.value) == "out must have dtype float32; got float64"
    with pytest.raises(LaunchError) as e:
        _check_out(np.zeros((3, 2), np.float32), shape)
    assert str(e.value) == "out must have shape (2, 3); got (3, 2)"
    for bad in (np.zeros((3, 2), np.float32).T, np.zeros(shape, np.float32)):
        if bad.flags.c_contiguous:
            bad.flags.writeable = False
        with pytest.raises(LaunchError) as e:
            _check_out(bad, shape)
        assert str(e.value) == "out must be a writeable C-contiguous array"
    with pytest.raises(LaunchError, match="out must have shape"):
        _check_out(cuda.to_device(np.zeros((3, 2), np.float32)), shape)


def test_a_launcher_reports_the_first_bad_argument():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(LaunchError, match="out must have shape"):
        softmax.optimized(x, out=np.zeros((3, 3), np.float32))


def test_length_one_axes_get_c_strides_without_a_copy():
    """A contiguous array whose axes of length 1 carry other strides (``x[None]``, a one-row slice) comes back as a
    read-only view of the same bytes with C strides; a non-contiguous one is copied; ``out`` is written in place."""
    from gpukernels._launch import _c_strides, contiguous

    assert _c_strides((2, 1, 3), 4) == (12, 12, 4) and _c_strides((0, 5), 2) == (10, 2) and _c_strides((), 4) == ()
    base = np.arange(6, dtype=np.float32)
    odd = np.lib.stride_tricks.as_strided(base, (1, 2, 1, 3), (0, 12, 999, 4))  # writeable: the view must not be
    assert odd.flags.c_contiguous  # NumPy ignores the strides of length-1 axes
    got = check_array("x", odd, 4, "(A, B, C, D)")
    assert got.strides == (24, 12, 12, 4) and np.shares_memory(got, base) and np.array_equal(got, odd)
    assert not got.flags.writeable
    assert contiguous("x", base) is base
    f = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    c = contiguous("x", f)
    assert c.strides == (12, 4) and not np.shares_memory(c, f) and np.array_equal(c, f)
    out = np.lib.stride_tricks.as_strided(np.full(3, np.nan, np.float32), (1, 3), (64, 4))
    checked = _check_out(out, (1, 3))
    assert checked.strides == (12, 4) and np.shares_memory(checked, out) and checked.flags.writeable
    d = cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert contiguous("x", d) is d  # already C strides: the same device array
    with pytest.raises(LaunchError) as e:
        _check_out(d[:, ::2], (2, 2))
    assert str(e.value) == "out must be a C-contiguous device array"
    with pytest.raises(LaunchError, match=r"^b is a non-contiguous device array \(strides \(12, 8\)\); pass"):
        check_array("b", d[:, ::2], 2, "(K, N)")
    with pytest.raises(LaunchError) as e:
        contiguous("x", d[:, ::2])
    assert str(e.value) == ("x is a non-contiguous device array (strides (12, 8)); pass a contiguous copy (e.g. "
                            "cupy.ascontiguousarray or tensor.contiguous())")


def test_a_numba_device_array_with_odd_strides_is_viewed_with_c_strides():
    """Numba's device arrays (a GPU only; here a stand-in with their constructor) are rebuilt over the same memory
    and stream with C strides -- the view `reshape` then accepts (tests/test_lessons.py runs the real ones)."""
    from gpukernels._launch import contiguous

    class Device:  # DeviceNDArray's constructor and the attributes contiguous() reads
        def __init__(self, shape, strides, dtype, stream=0, gpu_data=None):
            self.shape, self.strides, self.dtype, self.stream, self.gpu_data = shape, strides, dtype, stream, gpu_data

    memory, stream = object(), object()
    odd = Device((1, 2, 1, 3), (0, 12, 999, 4), np.dtype(np.float32), stream=stream, gpu_data=memory)
    got = contiguous("q", odd)
    assert type(got) is Device and got is not odd
    assert (got.shape, got.strides, got.dtype) == ((1, 2, 1, 3), (24, 12, 12, 4), np.float32)
    assert got.gpu_data is memory and got.stream is stream
    same = Device((2, 3), (12, 4), np.dtype(np.float32), gpu_data=memory)
    assert contiguous("q", same) is same
    with pytest.raises(LaunchError, match=r"^q is a non-contiguous device array \(strides \(4, 8\)\)"):
        contiguous("q", Device((2, 3), (4, 8), np.dtype(np.float32), gpu_data=memory))
