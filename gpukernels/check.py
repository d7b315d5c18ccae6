"""Checking a result against a float64 reference -- shared by the tests, the demo, the benchmark and the grader.

The measure is the relative error ||out - ref|| / ||ref|| over the finite reference values -- or, given ``scale``,
||out - ref|| / ||scale||: a sum's float32 rounding error is proportional to the sum of the magnitudes it adds up,
not to the sum itself, so a block sum whose terms cancel (a result of 1.28 from terms of +-100) is measured against
sum(|x|), and a correct kernel is not failed by cancellation its arithmetic cannot avoid. Non-finite reference
values (a softmax row of -inf, say) must be matched exactly, and a NaN or inf in ``out`` where the reference is
finite fails outright: an element the kernel never wrote (the output is poisoned with NaN before each run) can
not hide behind a small average error. A failing check lists the worst elements with their indices, expected
and actual values, so that the message points at the bug (an off-by-one row, a missing tile, ...).

Which inputs and which tolerance: a lesson's versions need not all take the same inputs (attention's tensor-core
steps take float16 q, k, v, its other steps float32). Code that runs every version of every lesson -- the tests, the
demo, the tracer, the benchmark -- asks `version_inputs` for the inputs each version takes (made from the lesson's
``make_inputs``), `supports` whether the version runs at a shape at all, and `tolerance` for the error allowed; the
reference is always computed from the inputs the version was given (`case` does all three).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# float32 arithmetic with float64 references lands far below these; an indexing bug lands far above.
# tensor_core's float16 inputs: the reference is float64 *of the float16 values*, their products are exact in float32
# and summed in float32, so a correct kernel lands near float32's rounding (~1e-7 up to K = 4096); 1e-3 is about two
# float16 ulps (2^-11 = 4.9e-4 each): an accumulator or output rounded to float16 on the way fails it.
# attention's float32 steps: a score's absolute rounding error becomes the same *relative* error of its weight
# exp(s - m), so make_inputs' outlier scores of tens to hundreds carry ~1e-5 into the output at worst, and the kernels
# land near 1e-6 (they add in other orders than the reference); an indexing bug, a lost rescale or a causal mask off
# by one lands at 1e-2 or more.
TOLERANCE = {"matmul": 1e-5, "softmax": 1e-6, "cbr": 1e-5, "tensor_core": 1e-3, "attention": 1e-4}

#: The tolerance of a lesson's runs on float16 inputs, where its TOLERANCE is float32's: the versions it names in
#: ``FLOAT16_VERSIONS``, and a version that takes either precision (attention.optimized) when given float16.
#: attention's tensor-core steps multiply the float16 q and k exactly and accumulate in float32, but round each
#: weight P = exp(s - m) to float16 (11 bits) for the P V product: a relative error of up to 2^-11 = 4.9e-4 per
#: weight, which averages down in the output (~1e-4 seen at the test shapes). The reference is float64 *of the
#: float16 values*, so the inputs' own rounding is not counted. 1e-2 is twenty such roundings: room for a row whose
#: weighted sum of values cancels, while a wrong fragment, a lost rescale or a mask off by one lands far above it.
FLOAT16_TOLERANCE = {"attention": 1e-2}


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


# ----------------------------------------------------------------------------------------------------------
# Which inputs each version takes, and the tolerance of its run
# ----------------------------------------------------------------------------------------------------------


def _lesson(lesson: str):
    import gpukernels

    return gpukernels.LESSONS[lesson]


def version_inputs(lesson: str, name: str, inputs) -> tuple:
    """The inputs ``LESSONS[lesson].VERSIONS[name]`` takes, made from what the lesson's ``make_inputs`` returned: the
    lesson's own ``version_inputs(name, inputs)`` where it has one (attention's tensor-core steps take float16 copies
    of q, k and v), else ``inputs`` as they are. The arrays given are never modified."""
    hook = getattr(_lesson(lesson), "version_inputs", None)
    return tuple(inputs) if hook is None else tuple(hook(name, tuple(inputs)))


def supports(lesson: str, name: str, shape) -> bool:
    """Whether ``LESSONS[lesson].VERSIONS[name]`` runs at ``shape`` at all: the lesson's ``supports(name, shape)``
    where it has one (attention's tensor-core steps need D a multiple of 16), else True. Code that iterates over
    every version at a list of shapes skips the shapes a version does not take; called on one anyway, the version
    raises a LaunchError that says why."""
    hook = getattr(_lesson(lesson), "supports", None)
    return True if hook is None else bool(hook(name, tuple(shape)))


def _is_float16(x) -> bool:
    # NumPy's and CuPy's dtypes print as float16, torch's as torch.float16
    return str(getattr(x, "dtype", "")).rsplit(".", 1)[-1] == "float16"


def reference(lesson: str, name: str, inputs, **params) -> np.ndarray:
    """The float64 result ``LESSONS[lesson].VERSIONS[name]`` is checked against, for ``inputs`` as the version takes
    them: the lesson's ``version_reference(name, inputs, **params)`` where it has one and it answers (tensor_core's
    fp8 step: the product of its inputs rounded to FP8, which is what it computes), else the lesson's ``reference``."""
    mod = _lesson(lesson)
    hook = getattr(mod, "version_reference", None)
    ref = None if hook is None else hook(name, tuple(inputs), **params)
    return mod.reference(*inputs, **params) if ref is None else ref


def tolerance(lesson: str, name: str | None = None, inputs=None) -> float:
    """The relative error a correct run of ``LESSONS[lesson].VERSIONS[name]`` stays within: the lesson's
    ``version_tolerance(name)`` where it answers (against `reference`'s result), else ``TOLERANCE[lesson]``, or
    ``FLOAT16_TOLERANCE[lesson]`` for a run on float16 inputs. ``inputs`` (what the version was given) decides when
    given -- a version that takes either precision is checked by what it got --, else the version's name (the
    lesson's ``FLOAT16_VERSIONS``)."""
    hook = getattr(_lesson(lesson), "version_tolerance", None)
    own = None if hook is None or name is None else hook(name)
    if own is not None:
        return own
    if lesson in FLOAT16_TOLERANCE:
        if inputs is not None:
            half = any(_is_float16(x) for x in inputs)
        else:
            half = name in getattr(_lesson(lesson), "FLOAT16_VERSIONS", ())
        if half:
            return FLOAT16_TOLERANCE[lesson]
    return TOLERANCE[lesson]


def case(lesson: str, name: str, shape, seed=None, **params) -> tuple[tuple, np.ndarray, float]:
    """(inputs, reference, tolerance) for one run of ``LESSONS[lesson].VERSIONS[name]`` at ``shape``: the lesson's
    ``make_inputs(shape, seed)`` as the version takes them (`version_inputs`), the float64 reference of *those*
    inputs (``params`` as the launcher's: attention's ``causal``, cbr's ``padding``), and `tolerance`."""
    mod = _lesson(lesson)
    inputs = version_inputs(lesson, name, mod.make_inputs(tuple(shape), seed))
    return inputs, reference(lesson, name, inputs, **params), tolerance(lesson, name, inputs)
