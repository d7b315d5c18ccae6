"""The copy into padded rows that the matmul and tensor-core dispatchers make of matrices whose rows are not
16-byte aligned (`gpukernels._pad`): only what needs it is copied, the padding is zero, the values and the dtype
are kept, the input is not touched."""

import numpy as np
import pytest

from gpukernels._intrinsics import address
from gpukernels._pad import pad_kernel, pad_operands, round_up


def _run(launches):
    for launch in launches:
        launch()


@pytest.mark.parametrize("dtype,multiple", [(np.float32, 4), (np.float16, 8)])
@pytest.mark.parametrize("m,k,n", [(5, 7, 9), (3, 8, 10), (4, 12, 8), (1, 1, 1), (33, 17, 31)])
def test_pad_operands(dtype, multiple, m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    a0, b0 = a.copy(), b.copy()
    c = np.empty((m, n), np.float32)
    ap, bp, launches = pad_operands(a, b, c, multiple)
    kp, np_ = round_up(k, multiple), round_up(n, multiple)
    assert all(x.kernel is pad_kernel for x in launches)
    # copied exactly when a row is not a whole number of 16-byte pieces (data from numpy is aligned here)
    assert (ap is a) == (k == kp) and (bp is b) == (k == kp and n == np_)
    assert len(launches) == (ap is not a) + (bp is not b)
    _run(launches)
    assert ap.shape == (m, kp) and bp.shape == (kp, np_) and ap.dtype == bp.dtype == dtype
    assert np.array_equal(ap[:, :k], a) and np.array_equal(bp[:k, :n], b)
    assert not ap[:, k:].any() and not bp[k:, :].any() and not bp[:, n:].any()  # zeros: they add nothing
    assert all(address(x) % 16 == 0 for x in (ap, bp))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose((ap.astype(np.float64) @ bp.astype(np.float64))[:, :n], exact, rtol=1e-12, atol=1e-12)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_pad_overwrites_what_the_buffer_held():
    # the padding is written, not assumed: a NaN left in a recycled buffer would poison the product (0 * NaN)
    a = np.ones((3, 5), np.float32)
    ap, _, launches = pad_operands(a, np.ones((5, 4), np.float32), np.empty((3, 4), np.float32), 4)
    ap[...] = np.nan
    _run(launches)
    assert np.array_equal(ap, np.concatenate([np.ones((3, 5)), np.zeros((3, 3))], axis=1).astype(np.float32))
