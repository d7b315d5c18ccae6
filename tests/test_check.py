"""gpukernels.check.compare, directly: what it accepts, what it rejects, and what its message says.

Every other test trusts ``compare`` to tell a right answer from a wrong one; these check it against numbers made
here: a relative error just under the tolerance passes and just over it fails, one element far off fails even
when the norm hides it, and a NaN or an infinity never passes for a finite value.
"""

import math

import numpy as np
import pytest

from gpukernels.check import TOLERANCE, CheckResult, compare, relative_error


def _ref(seed, shape=(37, 29)):
    """float64 reference values of a few units, with outliers (as the lessons' inputs have)."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(shape) * 3.0
    ref.flat[rng.integers(0, ref.size, size=max(1, ref.size // 50))] *= 100.0
    return ref


def _scaled_error(ref, rel, seed):
    """ref plus a random direction scaled so that ||out - ref|| / ||ref|| is exactly ``rel`` (in float64)."""
    d = np.random.default_rng(seed + 1).standard_normal(ref.shape)
    return ref + d * (rel * np.linalg.norm(ref) / np.linalg.norm(d))


@pytest.mark.parametrize("tol", [TOLERANCE["matmul"], TOLERANCE["softmax"], 1e-3])
def test_accepts_within_tolerance_and_rejects_just_beyond(tol, seed):
    ref = _ref(seed)
    assert compare(ref, ref, tol).ok and compare(ref, ref, tol).rel_error == 0.0
    inside = compare(_scaled_error(ref, 0.9 * tol, seed), ref, tol)
    assert inside.ok, f"seed={seed}: {inside}"
    assert inside.rel_error == pytest.approx(0.9 * tol, rel=1e-9)
    assert inside.mismatches == 0 and inside.first == []
    outside = compare(_scaled_error(ref, 1.1 * tol, seed), ref, tol)
    assert not outside.ok, f"seed={seed}: {outside}"
    assert outside.rel_error == pytest.approx(1.1 * tol, rel=1e-9)
    assert outside.tolerance == tol and outside.size == ref.size


def test_one_element_far_off_fails_though_the_norm_is_small(seed):
    """A single wrong element of a large array barely moves ||out - ref|| / ||ref||, but it is wrong: more than
    100 x tolerance from its reference, measured against the root mean square of the reference."""
    ref = _ref(seed, (200, 300))
    tol = 1e-5
    rms = math.sqrt(np.mean(ref**2))
    for off, ok in ((150 * tol * rms, False), (50 * tol * rms, True)):
        out = ref.copy()
        out[123, 45] += off
        result = compare(out, ref, tol)
        assert result.rel_error < tol  # the norm alone would pass it
        assert result.ok is ok, f"seed={seed} off={off}: {result}"
        assert result.mismatches == (0 if ok else 1)
        if not ok:
            idx, expected, actual = result.first[0]
            assert idx == (123, 45) and expected == ref[123, 45] and actual == out[123, 45]


def test_tolerance_zero_still_allows_float32_rounding(seed):
    """The element-wise bound never drops below 100 x 1e-7 of the scale; the norm still needs rel <= tolerance."""
    ref = _ref(seed)
    out = ref.astype(np.float32).astype(np.float64)
    result = compare(out, ref, 0.0)
    assert result.mismatches == 0 and not result.ok and result.rel_error > 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_where_the_reference_is_finite_fails(bad, seed):
    ref = _ref(seed)
    out = ref.astype(np.float32)
    out[3, 4] = bad
    result = compare(out, ref, 1e-5)
    assert not result.ok and result.rel_error == math.inf and result.mismatches == 1
    assert result.first[0][0] == (3, 4)
    assert math.isnan(result.first[0][2]) if np.isnan(bad) else result.first[0][2] == bad


def test_non_finite_reference_values_must_match_exactly(seed):
    ref = _ref(seed)
    ref[0, 0], ref[1, 1], ref[2, 2] = -np.inf, np.inf, np.nan
    out = ref.copy()
    assert compare(out, ref, 1e-6).ok  # -inf, inf and NaN where the reference has them
    for value in (0.0, np.inf, np.nan):  # -inf replaced by anything else
        wrong = ref.copy()
        wrong[0, 0] = value
        result = compare(wrong, ref, 1e-6)
        assert not result.ok and result.rel_error == math.inf and result.mismatches == 1, value
        assert result.first[0][0] == (0, 0)
    wrong = ref.copy()
    wrong[2, 2] = 1.0  # a number where the reference is NaN
    assert not compare(wrong, ref, 1e-6).ok


def test_the_worst_elements_come_first_and_the_message_names_them(seed):
    ref = _ref(seed, (10, 10))
    out = ref.copy()
    out[2, 3] += 1e3
    out[7, 1] += 1e4
    out[5, 5] = np.nan
    result = compare(out, ref, 1e-5, show=2)
    assert [f[0] for f in result.first] == [(5, 5), (7, 1)]
    assert result.mismatches == 3 and len(result.first) == 2
    text = str(result)
    assert "3 of 100 elements wrong" in text and "at (5, 5): expected" in text and "at (7, 1)" in text
    assert "tolerance 1e-05" in text
    assert str(CheckResult(True, 0.0, 1e-5, 0, 4)) == "relative error 0 (tolerance 1e-05); 0 of 4 elements wrong"


def test_shapes_must_agree_and_empty_and_zero_references():
    with pytest.raises(ValueError, match=r"shape \(2, 3\), expected \(3, 2\)"):
        compare(np.zeros((2, 3)), np.zeros((3, 2)), 1e-5)
    empty = compare(np.zeros((0, 4)), np.zeros((0, 4)), 1e-5)
    assert empty.ok and empty.size == 0 and empty.first == []
    # an all-zero reference: the error is absolute (nothing to divide by)
    z = np.zeros(8)
    assert compare(z, z, 1e-5).ok
    small = z.copy()
    small[0] = 1e-6
    r = compare(small, z, 1e-5)
    assert r.ok and r.rel_error == pytest.approx(1e-6)
    big = z.copy()
    big[0] = 1e-3
    r = compare(big, z, 1e-5)
    assert not r.ok and r.rel_error == pytest.approx(1e-3) and r.mismatches == 0  # 1e-3 = 100 x tol: allowed
    big[0] = 1.5e-3
    assert compare(big, z, 1e-5).mismatches == 1  # measured against 1 (no RMS to scale by), past 100 x tol


def test_relative_error_is_the_norm_ratio(seed):
    ref = _ref(seed)
    out = _scaled_error(ref, 3e-4, seed)
    assert relative_error(out, ref) == pytest.approx(3e-4, rel=1e-9)
    out[0, 0] = np.nan
    assert relative_error(out, ref) == math.inf


def test_float32_outputs_are_compared_in_float64(seed):
    """A float32 output one ulp off everywhere passes; the comparison happens in float64, so the reference's
    own digits are not rounded away first."""
    ref = _ref(seed)
    out = np.nextafter(ref.astype(np.float32), np.float32(np.inf))
    result = compare(out, ref, 1e-6)
    assert result.ok, f"seed={seed}: {result}"
    assert 0 < result.rel_error < 2e-7


def test_matched_infinities_and_all_non_finite_references_raise_no_warning():
    """A reference of -inf where the output has -inf (masked attention), or one with no finite value at all, is
    compared without a RuntimeWarning: inf - inf is never computed where it would be discarded."""
    import warnings

    ref = np.array([[-np.inf, 1.0, np.inf, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare(ref.copy(), ref, 1e-6).ok
        none_finite = np.array([np.inf, -np.inf, np.nan])
        r = compare(none_finite.copy(), none_finite, 1e-6)
        assert r.ok and r.rel_error == 0.0 and r.mismatches == 0


def test_the_element_bound_is_strict_at_100_tolerances():
    """An element exactly 100 x tolerance (times the reference's RMS, here 1) from its reference is allowed, one a
    little further is not -- with the norm well inside the tolerance both times. Powers of two keep it exact."""
    tol = 2.0**-10
    ref = np.ones(2**16)
    for off, bad in ((100 * tol, 0), (100.5 * tol, 1)):
        out = ref.copy()
        out[7] += off
        r = compare(out, ref, tol)
        assert r.rel_error < tol and r.mismatches == bad and r.ok is (bad == 0), (off, r)


def test_the_norm_bound_is_inclusive():
    ref = _ref(3)
    out = _scaled_error(ref, 2e-5, 3)
    rel = compare(out, ref, math.inf).rel_error
    assert compare(out, ref, rel).ok and not compare(out, ref, rel * (1 - 1e-9)).ok


def test_small_references_are_measured_relatively(seed):
    """Softmax outputs are far below 1: the error is relative to ||ref|| however small it is (an absolute error of
    1e-7 on values of 1e-3 is 1e-4 relative, which fails a 1e-5 tolerance)."""
    ref = np.abs(_ref(seed, (4, 8))) * 1e-5  # ||ref|| well below 1
    assert np.linalg.norm(ref) < 0.1
    out = _scaled_error(ref, 3e-5, seed)
    r = compare(out, ref, 1e-5)
    assert not r.ok and r.rel_error == pytest.approx(3e-5, rel=1e-9)


def test_large_float32_values_do_not_overflow_the_check():
    """float32 inputs are compared in float64: squares of 1e25 overflow float32 but not float64, so a 10% error on
    values of 1e25 is found."""
    ref = np.full(64, 1e25, np.float32)
    out = ref.copy()
    out[5] *= np.float32(1.1)
    r = compare(out, ref, 1e-5)
    assert not r.ok and r.mismatches == 1 and r.rel_error == pytest.approx(0.1 / 8, rel=1e-3)


def test_at_most_show_entries_default_five_ties_in_index_order():
    """The message lists at most ``show`` (default 5) of the worst elements; among equally bad ones (NaN outputs)
    the lowest indices first, whatever sort the array size makes numpy choose; a non-finite reference value that
    is not matched is worse than any finite error."""
    ref = np.arange(1.0, 2001.0)
    out = ref.copy()
    nan_at = [1500, 17, 900, 3, 1999, 640, 1200]
    out[nan_at] = np.nan
    r = compare(out, ref, 1e-5)
    assert [f[0] for f in r.first] == [(i,) for i in sorted(nan_at)[:5]] and r.mismatches == 7
    assert len(compare(out, ref, 1e-5, show=2).first) == 2
    ref2 = np.array([1.0, -np.inf, 3.0])
    out2 = np.array([1.0 + 1e3, 0.0, 3.0])
    assert compare(out2, ref2, 1e-5).first[0][0] == (1,)


def test_the_message_separates_its_entries():
    r = compare(np.array([0.0, 0.0, 3.0]), np.array([1.0, 2.0, 3.0]), 1e-5)
    assert str(r).endswith("at (1,): expected 2, got 0; at (0,): expected 1, got 0; at (2,): expected 3, got 3")


def test_version_inputs_are_what_each_version_takes():
    """A lesson's own hook decides (attention's tensor-core steps take float16 copies of q, k and v; its float32 steps
    the arrays as given); a lesson without one passes the inputs through, as a tuple; nothing given is modified."""
    from gpukernels import LESSONS
    from gpukernels.check import version_inputs

    q, k, v = LESSONS["attention"].make_inputs((1, 1, 3, 5, 16), 0)
    half = version_inputs("attention", "mma", [q, k, v])
    assert isinstance(half, tuple) and [x.dtype for x in half] == [np.float16] * 3
    assert all(np.array_equal(h, x.astype(np.float16)) for h, x in zip(half, (q, k, v)))
    same = version_inputs("attention", "tiled", [q, k, v])
    assert all(a is b for a, b in zip(same, (q, k, v))) and q.dtype == np.float32
    a, b = LESSONS["matmul"].make_inputs((3, 4, 5), 0)
    assert version_inputs("matmul", "tiled", [a, b]) == (a, b)


def test_a_version_with_a_reference_of_its_own_is_checked_against_it():
    """tensor_core's fp8 computes the product of its inputs rounded to e4m3: `check.reference` gives that (not the
    float16 inputs' product, ~4% away), with its own tolerance; every other version gets the lesson's reference and
    tolerance; the parameters reach the lesson's reference (attention's causal mask)."""
    from gpukernels import LESSONS
    from gpukernels.check import case, reference, tolerance
    from gpukernels.tensor_core import k10_fp8

    tc = LESSONS["tensor_core"]
    a, b = tc.make_inputs((9, 7, 40), 1)
    own, lesson = reference("tensor_core", "fp8", (a, b)), reference("tensor_core", "wgmma", (a, b))
    assert np.array_equal(own, k10_fp8.reference(a, b)) and np.array_equal(lesson, tc.reference(a, b))
    assert relative_error(own, lesson) > 1e-3  # the two references really differ: the hook is what decides
    assert tolerance("tensor_core", "fp8") == k10_fp8.TOLERANCE == 5e-3
    assert tolerance("tensor_core", "wgmma") == tolerance("tensor_core") == TOLERANCE["tensor_core"]
    assert tolerance("tensor_core", "fp8", (a, b)) == 5e-3  # the version's own, whatever inputs it was given
    inputs, ref, tol = case("tensor_core", "fp8", (9, 7, 40), 1)
    assert np.array_equal(ref, k10_fp8.reference(*inputs)) and tol == 5e-3
    q, k, v = LESSONS["attention"].make_inputs((1, 1, 3, 5, 16), 0)
    causal = reference("attention", "tiled", (q, k, v), causal=True)
    assert np.array_equal(causal, LESSONS["attention"].reference(q, k, v, causal=True))
    assert not np.array_equal(causal, reference("attention", "tiled", (q, k, v)))
