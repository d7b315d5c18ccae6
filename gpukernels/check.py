"""Checking a result against a float64 reference -- shared by the tests, the demo, the benchmark and the grader.

The measure is the relative error ||out - ref|| / ||ref|| over the finite reference values -- or, given ``scale``,
||out - ref|| / ||scale||: a sum's float32 rounding error is proportional to the sum of the magnitudes it adds up,
not to the sum itself, so a block sum whose terms cancel (a result of 1.28 from terms of +-100) is measured against
sum(|x|), and a correct kernel is not failed by cancellation its arithmetic cannot avoid. Non-finite reference
values (a softmax row of -inf, say) must be matched exactly, and a NaN or inf in ``out`` where the reference is
finite fails outright: an element the kernel never wrote (the output is poisoned with NaN before each run) can
not hide behind a small average error. A failing check lists the worst elements with their indices, expected
and actual values, so that the message points at the bug (an off-by-one row, a missing tile, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# float32 arithmetic with float64 references lands far below these; an indexing bug lands far above.
# tensor_core's float16 inputs: the reference is float64 *of the float16 values*, their products are exact in float32
# and summed in float32, so a correct kernel lands near float32's rounding (~1e-7 up to K = 4096); 1e-3 is about two
# float16 ulps (2^-11 = 4.9e-4 each): an accumulator or output rounded to float16 on the way fails it.
TOLERANCE = {"matmul": 1e-5, "softmax": 1e-6, "cbr": 1e-5, "tensor_core": 1e-3}


@dataclass
class CheckResult:
    ok: bool
    rel_error: float
    tolerance: float
    mismatches: int  # elements whose own error is far off (or non-finite where the reference is finite)
    size: int
    first: list = field(default_factory=list)  # [(index, expected, actual), ...] worst first

    def __str__(self) -> str:
        head = (f"relative error {self.rel_error:.3g} (tolerance {self.tolerance:g}); "
                f"{self.mismatches} of {self.size} elements wrong")
        if not self.first:
            return head
        rows = "; ".join(f"at {idx}: expected {exp:.6g}, got {act:.6g}" for idx, exp, act in self.first)
        return f"{head}: {rows}"


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 over finite reference values; inf if the non-finite ones differ."""
    return compare(out, ref, math.inf).rel_error


def compare(out, ref, tolerance: float, show: int = 5, scale=None) -> CheckResult:
    """Check ``out`` against ``ref``; ``scale`` (ref's shape, optional): the magnitude each element's rounding
    error is proportional to (default: ``ref`` itself)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"result has shape {out.shape}, expected {ref.shape}")
    mag = ref if scale is None else np.abs(np.asarray(scale, dtype=np.float64))
    if mag.shape != ref.shape:
        raise ValueError(f"scale has shape {mag.shape}, expected {ref.shape}")
    fin = np.isfinite(ref)
    # Element-wise: wrong if non-finite values differ, or if |out - ref| is large against the typical magnitude.
    with np.errstate(invalid="ignore"):
        scale = float(np.sqrt(np.mean(mag[fin] ** 2))) if fin.any() else 1.0
        scale = scale or 1.0
        elem_err = np.where(fin, np.abs(out - ref) / scale, 0.0)
        elem_err = np.where(np.isnan(elem_err), np.inf, elem_err)
        nonfinite_bad = ~fin & ~((out == ref) | (np.isnan(out) & np.isnan(ref)))
    elem_bad = nonfinite_bad | (elem_err > max(tolerance, 1e-7) * 100) | (fin & ~np.isfinite(out))
    norm_ref = float(np.linalg.norm(mag[fin])) if fin.any() else 0.0
    if (fin & ~np.isfinite(out)).any() or nonfinite_bad.any():
        rel = math.inf
    else:
        diff = float(np.linalg.norm(out[fin] - ref[fin]))  # only finite entries: inf - inf would warn
        rel = diff / norm_ref if norm_ref > 0 else diff
    ok = rel <= tolerance and not elem_bad.any()
    first = []
    if not ok and out.size:
        badness = np.where(nonfinite_bad, np.inf, elem_err).ravel()
        order = np.argsort(-badness, kind="stable")[:show]
        for flat in order:
            idx = tuple(int(i) for i in np.unravel_index(int(flat), out.shape))
            first.append((idx, float(ref[idx]), float(out[idx])))
    return CheckResult(ok, rel, tolerance, int(elem_bad.sum()), int(out.size), first)
