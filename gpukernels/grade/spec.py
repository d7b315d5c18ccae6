"""The task contract of a graded exercise: what ``exercises/NN_name/spec.py`` declares.

An exercise's spec is a small, declarative Python file (gpu-mode's ``task.yml`` + ``reference.py`` in one):

* ``kernel``, ``args``, ``out``: the name of the student's ``@cuda.jit`` function and its parameters in order
  (inputs, the output, scalars); ``out`` names the one output array;
* ``make_inputs(shape, seed)`` and ``reference(**inputs, **params)``: fresh inputs and the expected output --
  a lesson's own ``make_inputs`` / ``reference`` wherever the exercise has a lesson, never a second copy;
* ``launch(shape) -> (grid, block)``: the launch contract. The grader launches ``kernel[grid, block](*args)``
  itself; the README states the same configuration in words;
* ``shapes``: problem sizes always graded for correctness (odd ones included); besides them, ``extra_shapes``
  shapes are drawn fresh every run from ``ranges`` (a (low, high) pair per dimension, up to about twice the
  largest listed size, sizes that are multiples of 8 moved off by one), so a kernel written for the listed
  shapes only does not pass; and ``beyond`` shapes past the ranges (``beyond_ranges``), so that one written for
  the published range only does not either;
* ``technique``: checks on what the tracer observed (``gpukernels.trace``) at a shape drawn fresh from
  ``trace_ranges``; ``speed``: the GPU-only gate;
* ``points`` per gate and ``hints`` per gate, in increasing order of help.

The grader imports a spec only in its own process, from its own copy of ``exercises/`` -- never the
student's copy -- so a submission cannot change its points, its shapes or its reference.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

# The order of the points: a gate's points count only when the ones before it passed. (The compiles gate runs
# first -- only what compiles is run -- but its points count only with a correct result, so an empty stub that
# compiles scores 0.)
GATES = ("correctness", "compiles", "technique", "speed")
DEFAULT_POINTS = {"correctness": 5, "compiles": 2, "technique": 3, "speed": 2}


# ----------------------------------------------------------------------------------------------------------
# Technique checks: each reads the observations the child process made with the tracer (plain numbers,
# keyed by the spec's argument names) and says whether the kernel used the technique the exercise teaches.
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """Base class: ``evaluate(obs, shape) -> (ok, message)``; ``describe()`` is shown to students."""

    def evaluate(self, obs: dict, shape: tuple) -> tuple[bool, str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


def _array(obs: dict, name: str) -> dict:
    return obs.get("arrays", {}).get(name, {})


@dataclass(frozen=True)
class MaxLoadsPerElement(Check):
    """Each element of global array ``array`` is loaded at most ``limit(shape)`` times in total.

    Tiled matmul: every element of A is loaded ceil(N / TILE) times (once per block column of C), against N
    times in the naive kernel."""

    array: str
    limit: Callable[[tuple], float]
    why: str = ""

    def evaluate(self, obs, shape):
        info = _array(obs, self.array)
        loads, size = info.get("loads"), info.get("size")
        if loads is None or not size:
            return False, f"the tracer saw no loads of {self.array!r}"
        per = loads / size
        limit = self.limit(shape)
        covered = info.get("elements_loaded")
        if covered is not None and covered < size:
            # "at most L loads" is no credit for loading nothing: every element feeds the result
            return False, (f"{self.array}: only {covered} of its {size} elements were loaded -- the result depends "
                           f"on every one (reading an input in another way, such as an atomic, counts as a load)")
        if per <= limit + 1e-9:
            return True, f"{self.array}: {per:.3g} global loads per element (limit {limit:g})"
        return False, (f"{self.array}: {per:.3g} global loads per element, more than {limit:g}"
                       + (f" -- {self.why}" if self.why else ""))

    def describe(self):
        return f"global loads per element of {self.array} within the limit"


@dataclass(frozen=True)
class MaxStoresPerElement(Check):
    """Each element of ``array`` is stored at most ``limit`` times (a fused kernel writes its output once)."""

    array: str
    limit: float = 1.0
    max_loads: float | None = None  # loads of the same array per element (0: never read back)
    why: str = ""

    def evaluate(self, obs, shape):
        info = _array(obs, self.array)
        stores, loads, size = info.get("stores"), info.get("loads", 0), info.get("size")
        if stores is None or not size:
            return False, f"the tracer saw no stores to {self.array!r}"
        per_store, per_load = stores / size, loads / size
        bad = per_store > self.limit + 1e-9 or (self.max_loads is not None and per_load > self.max_loads + 1e-9)
        text = f"{self.array}: stored {per_store:.3g} times and loaded {per_load:.3g} times per element"
        if info.get("atomics"):
            text += f" ({info['atomics']} atomics among them, each a load and a store)"
        if bad:
            allowed = f"stored at most {self.limit:g} time(s)" + (
                "" if self.max_loads is None else ", never loaded" if self.max_loads == 0
                else f", loaded at most {self.max_loads:g} time(s)")
            return False, f"{text} (allowed: {allowed})" + (f" -- {self.why}" if self.why else "")
        return True, text

    def describe(self):
        return f"{self.array} written once per element"


@dataclass(frozen=True)
class Coalesced(Check):
    """The global accesses to ``arrays`` are coalesced, idle lanes counted as waste: the efficiency is
    ``gpukernels.trace.coalescing_efficiency`` (sectors the bytes used need / 32-byte sectors moved, summed over the
    array's warp accesses) times ``gpukernels.trace.lane_utilisation`` (the share of the warp's 32 lanes in each
    request), at least ``min_efficiency``. One lane walking a row alone moves no wasted sector, but issues 32 times
    the requests: 1/32 of the lanes, 3%, as Nsight Compute's sectors per request shows it."""

    arrays: tuple
    min_efficiency: float = 0.75
    kinds: tuple = ("load", "store")

    def evaluate(self, obs, shape):
        parts, ok, idle = [], True, []
        for name in self.arrays:
            info = _array(obs, name)
            for kind in self.kinds:
                eff = info.get(f"{kind}_efficiency")
                if eff is None:
                    continue
                lanes = info.get(f"{kind}_lanes", 1.0)
                total = eff * lanes
                parts.append(f"{name} {kind}s {total:.0%}" + (f" ({eff:.0%} of sectors used x {lanes:.0%} of "
                                                              "lanes active)" if lanes < 1 else ""))
                ok &= total >= self.min_efficiency
                if lanes < self.min_efficiency:
                    idle.append(name)
        unseen = [name for name in self.arrays
                  if not any(f"{kind}_efficiency" in _array(obs, name) for kind in self.kinds)]
        if unseen:
            # an array the kernel must read or write, with no traced access: read some other way (a view the
            # tracer does not follow, an atomic) -- never "coalesced" by default
            return False, (f"coalescing: the tracer saw no {'/'.join(self.kinds)} of {', '.join(unseen)} -- "
                           "read and write the arrays themselves, element by element")
        text = "coalescing efficiency: " + ", ".join(parts)
        if ok:
            return True, text
        if idle:
            return False, (f"{text} (need {self.min_efficiency:.0%}): most lanes of the warp sit idle while few "
                           f"walk {', '.join(idle)} -- every lane should take its share, lane x the elements x, "
                           "x + 32, ...")
        return False, (f"{text} (need {self.min_efficiency:.0%}): consecutive threadIdx.x should touch "
                       "consecutive addresses")

    def describe(self):
        return f"coalesced accesses to {', '.join(self.arrays)}"


@dataclass(frozen=True)
class NoBankConflicts(Check):
    """Shared-memory accesses of a warp hit distinct banks (or the same word: a broadcast)."""

    max_ways: float = 1.0

    def evaluate(self, obs, shape):
        shared = obs.get("shared")
        if not shared or not shared.get("accesses"):
            return False, "the tracer saw no shared-memory accesses: stage the tile in cuda.shared.array"
        ways = shared.get("max_ways", 1)
        if ways <= self.max_ways:
            return True, "shared memory: no bank conflicts"
        return False, (f"shared memory: up to {ways}-way bank conflicts ({shared.get('conflict_text', '')}); "
                       "pad the tile by one column")

    def describe(self):
        return "no shared-memory bank conflicts"


@dataclass(frozen=True)
class UsesShared(Check):
    """The kernel stages data in shared memory at all."""

    def evaluate(self, obs, shape):
        shared = obs.get("shared") or {}
        if shared.get("accesses"):
            return True, f"{shared['accesses']} shared-memory accesses"
        return False, "no shared-memory accesses: this exercise is about cuda.shared.array"

    def describe(self):
        return "uses shared memory"


@dataclass(frozen=True)
class NoSharedMemory(Check):
    """Neither shared memory nor a block barrier: what a warp-level exercise (shuffles) forbids."""

    def evaluate(self, obs, shape):
        shared = obs.get("shared") or {}
        sync = obs.get("sync")
        problems = []
        if shared.get("accesses") or shared.get("arrays"):
            problems.append(f"{shared.get('accesses', 0)} shared-memory accesses")
        if sync is None:
            return False, "the tracer did not report on barriers"
        if sync.get("syncthreads"):
            problems.append(f"cuda.syncthreads() ({sync['syncthreads']} barriers over all blocks)")
        if problems:
            return False, ("uses " + " and ".join(problems) + ": this exercise is about warp shuffles, with no "
                           "shared memory and no cuda.syncthreads()")
        return True, "no shared memory and no block barrier: the warp's registers only"

    def describe(self):
        return "no shared memory and no cuda.syncthreads()"


@dataclass(frozen=True)
class NoRaces(Check):
    """No two threads touch the same address without a barrier between them (one of them writing)."""

    def evaluate(self, obs, shape):
        races = obs.get("races")
        if races is None:
            return False, "the tracer did not report on races"
        if not races:
            return True, "no races"
        return False, "race: " + "; ".join(races[:3])

    def describe(self):
        return "no data races"


@dataclass(frozen=True)
class WarpInstructions(Check):
    """The kernel issued exactly ``count(shape)`` of the warp-collective instruction ``kind`` (`gpukernels._mma`'s
    ``mma_f16``, ``ldmatrix_x4``, ...), as the simulator counts them: one per warp and call. A tensor-core
    exercise is passed with its instruction, one per tile product -- not with FMAs, nor with extra mmas."""

    kind: str
    count: Callable[[tuple], int]
    why: str = ""

    def evaluate(self, obs, shape):
        counts = obs.get("collectives")
        if counts is None:
            return False, "the tracer did not report warp-collective instructions"
        got, want = int(counts.get(self.kind, 0)), int(self.count(shape))
        why = f", {self.why}" if self.why else ""
        if got == want:
            return True, f"{self.kind}: {got} warp instructions{why}"
        if got == 0:
            what = "the products were not computed on tensor cores" if "mma" in self.kind else "not used"
            return False, f"no {self.kind} instruction: {what} (expected {want}{why})"
        return False, f"{self.kind}: {got} warp instructions, expected {want}{why}"

    def describe(self):
        return f"{self.kind} issued once per tile product"


@dataclass(frozen=True)
class DataFlow(Check):
    """The named instruction did the work: the grader runs the traced case once more with the simulator's
    ``instruction`` returning other results (``_child._perturbation``), and the output must change as it must --
    not a count of calls, which a decoy call whose result is thrown away satisfies.

    ``instruction``: ``"mma_f16"`` (the run's mma compute D = C + 2 A B), ``"shfl"`` (every shuffle returns the
    value it read plus 1) or ``"cp.async"`` (every copy lands its elements plus 1). ``expect``: ``"doubles"`` -- the output must come out twice the unperturbed one (it is
    built from the products alone); ``"changes"`` -- every output element must move."""

    instruction: str
    expect: str = "changes"
    why: str = ""

    #: the instructions the grader's child knows how to perturb (``_child._perturbation``)
    INSTRUCTIONS = ("mma_f16", "shfl", "cp.async")

    def __post_init__(self):
        if self.instruction not in self.INSTRUCTIONS or self.expect not in ("changes", "doubles"):
            raise ValueError(f"DataFlow: instruction must be one of {', '.join(self.INSTRUCTIONS)} and expect "
                             f"'changes' or 'doubles', got {self.instruction!r} and {self.expect!r}")

    def evaluate(self, obs, shape):
        flow = (obs.get("dataflow") or {}).get(self.instruction)
        name = {"shfl": "the shuffles", "cp.async": "the cp.async copies"}.get(self.instruction, self.instruction)
        if not flow:
            return False, f"data flow of {name}: the grader's run with {name} perturbed did not report"
        if flow.get("error"):
            return False, f"data flow of {name}: with {name} returning other values, the kernel failed: {flow['error']}"
        size, moved, doubled = int(flow["size"]), int(flow["moved"]), int(flow["doubled"])
        why = f" -- {self.why}" if self.why else ""
        if self.expect == "doubles":
            if doubled == size:
                return True, f"data flow: the output is built from {name}'s results (doubling its products doubles it)"
            return False, (f"data flow: with {name}'s products doubled, only {doubled} of the {size} outputs doubled "
                           f"({size - moved} did not move at all): the result does not come from {name}{why}")
        if moved == size:
            return True, f"data flow: every output depends on the results of {name}"
        return False, (f"data flow: with {name} returning other values, {size - moved} of the {size} outputs did not "
                       f"change: those results do not come from {name}{why}")

    def describe(self):
        return f"the output computed from {self.instruction}'s results"


# ----------------------------------------------------------------------------------------------------------
# The exercise
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Speed:
    """GPU-only gate: the kernel at ``shape`` must be ``min_speedup`` times faster than ``baseline`` (a lesson's
    ``VERSIONS`` entry, timed on the same inputs with CUDA events)."""

    shape: tuple
    baseline: Any
    min_speedup: float = 1.0
    repeats: int = 20


@dataclass
class Exercise:
    kernel: str
    args: tuple
    out: str
    make_inputs: Callable[[tuple, int], dict]
    out_shape: Callable[[tuple], tuple]
    reference: Callable[..., Any]
    launch: Callable[[tuple], tuple]
    shapes: Sequence[tuple]
    tolerance: float
    params: Callable[[tuple], dict] = lambda shape: {}
    technique: Sequence[Check] = ()
    ranges: Sequence[tuple] = ()  # (low, high) per dimension: fresh correctness shapes are drawn from them
    extra_shapes: int = 2
    #: Shapes drawn fresh each run *past* ``ranges`` (every dimension larger, and not a multiple of 8), from
    #: ``beyond_ranges`` -- by default (high + 1, high + high // 2 + 1) per dimension. They are never published: a
    #: kernel right only up to the sizes it was shown (a loop capped at the top of the range) fails them.
    beyond: int = 1
    beyond_ranges: Sequence[tuple] = ()
    trace_ranges: Sequence[tuple] = ()  # the technique's shape is drawn from them (default: ``ranges``)
    # per dimension, what the technique's shape is a multiple of: 8 floats (32 bytes) along a contiguous
    # dimension keeps every row on a sector boundary, so coalescing is measured without a ragged edge's loss
    trace_multiples: Sequence[int] = ()
    constrain: Callable[[tuple], tuple] = lambda shape: shape  # makes a drawn shape valid (a filter fits, ...)
    speed: Speed | None = None
    #: Called like ``reference``: the magnitude each output's float32 rounding error is proportional to (None: the
    #: reference itself). A sum's is the sum of |x| it adds up (`grouped_sum` of ``abs(x)``): terms that cancel
    #: leave a small result with the rounding error of the large terms (`gpukernels.check.compare`).
    error_scale: Callable[..., Any] | None = None
    points: dict = field(default_factory=lambda: dict(DEFAULT_POINTS))
    hints: dict = field(default_factory=dict)
    summary: str = ""
    name: str = ""  # the folder name, set by load()
    folder: Path | None = None

    def max_points(self, gate: str) -> int:
        if gate == "technique" and not self.technique:
            return 0
        if gate == "speed" and self.speed is None:
            return 0
        return int(self.points.get(gate, 0))

    def draw_shapes(self, seed: int) -> list[tuple]:
        """The correctness shapes of one run: the listed ones and ``extra_shapes`` drawn from ``ranges``."""
        rng = _rng(seed)
        drawn = []
        for i in range(self.extra_shapes if self.ranges else 0):
            # The first drawn shape is large in every dimension (the top quarter of each range), so that a
            # kernel that hard-codes a bound just above the listed sizes fails whatever the seed; the others
            # are anywhere in the ranges.
            ranges = [(max(lo, hi - (hi - lo) // 4), hi) for lo, hi in self.ranges] if i == 0 else self.ranges
            drawn.append(self._draw(rng, ranges, avoid=8))
        for _ in range(self.beyond if self.ranges else 0):
            drawn.append(self._draw(rng, self.past_ranges(), avoid=8))
        return [tuple(s) for s in self.shapes] + drawn

    def past_ranges(self) -> list:
        """Where the shapes past the published range are drawn (``beyond_ranges``, or 1 to 1.5 times past each
        dimension's high end)."""
        return [tuple(r) for r in self.beyond_ranges] or [(hi + 1, hi + hi // 2 + 1) for _, hi in self.ranges]

    def draw_trace_shape(self, seed: int) -> tuple:
        """The technique's shape of one run, drawn from ``trace_ranges`` (never published)."""
        ranges = self.trace_ranges or self.ranges
        if not ranges:
            return tuple(self.shapes[-1])
        return self._draw(_rng(seed), ranges, avoid=0, multiples=self.trace_multiples)

    def _draw(self, rng, ranges, avoid: int, multiples=()) -> tuple:
        dims = []
        for i, (lo, hi) in enumerate(ranges):
            m = multiples[i] if i < len(multiples) else 1
            d = int(rng.integers(-(-lo // m), hi // m + 1)) * m
            if avoid and d > avoid and d % avoid == 0:  # off the block's multiples: the edge tiles get tested
                d = d + 1 if d + 1 <= hi else max(lo, d - 1)
            dims.append(d)
        return tuple(int(d) for d in self.constrain(tuple(dims)))

    def hint(self, gate: str, level: int = 1) -> list[str]:
        return list(self.hints.get(gate, []))[:max(0, level)]

    def hints_for(self, gate: str, level: int, failure: str = "") -> list[tuple[int, str]]:
        """``level`` hints of ``gate`` as (number, text), in the README's order; the ones written for this ``failure``
        are chosen first: a hint whose README line ends with ``<!-- when: REGEX -->`` (searched in the failure
        message, case-insensitively) is picked before the others. An off-by-one guard's out-of-bounds error gets the hint about
        the guard, not the one about ``cuda.grid``."""
        tips = list(self.hints.get(gate, []))
        when = getattr(self.hints, "when", {}).get(gate, [])
        first = [i for i, pattern in enumerate(when) if pattern and failure and re.search(pattern, failure, re.I)]
        order = first + [i for i in range(len(tips)) if i not in first]
        # chosen for the failure, shown in their own order: hint 1 before hint 4, as the README numbers them
        return [(i + 1, tips[i]) for i in sorted(order[:max(0, level)])]


def load(folder: Path) -> Exercise:
    """Import ``folder/spec.py`` (the grader's own copy) and return its ``EXERCISE``."""
    folder = Path(folder)
    path = folder / "spec.py"
    mod_name = f"_gpukernels_exercise_{folder.name}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no spec.py in {folder}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ex = mod.EXERCISE
    ex.name = folder.name
    ex.folder = folder
    return ex


class Hints(dict):
    """gate -> its hints (a list of str, least help first), and in ``when`` gate -> per hint the failure it was
    written for (a regular expression, or None): see `Exercise.hints_for`."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.when: dict[str, list] = {}


_WHEN = re.compile(r"\s*<!--\s*when:\s*(.*?)\s*-->\s*")


def readme_hints(spec_file: str | os.PathLike) -> dict[str, list[str]]:
    """The hints of an exercise, read from its README (one source for students and grader): under
    ``## Hints``, a ``### gate`` heading per gate and a numbered list, least help first. A hint may end with
    ``<!-- when: REGEX -->`` (hidden where the README is rendered): the failure it answers (`Exercise.hints_for`)."""
    readme = Path(spec_file).with_name("README.md").read_text()
    hints: dict[str, list[str]] = Hints()
    section, gate = False, None
    for line in readme.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().lower() == "hints"
            gate = None
        elif section and line.startswith("### "):
            gate = line[4:].strip().lower()
            hints[gate] = []
        elif section and gate:
            m = re.match(r"\s*\d+\.\s+(.*)", line)
            if m:
                hints[gate].append(m.group(1).strip())
            elif line.strip() and hints[gate]:  # a wrapped line continues the hint
                hints[gate][-1] += " " + line.strip()
    for gate, tips in hints.items():  # the failure each hint answers, out of its text
        hints.when[gate] = [(_WHEN.search(tip).group(1) if _WHEN.search(tip) else None) for tip in tips]
        tips[:] = [_WHEN.sub(" ", tip).strip() for tip in tips]
    return hints


def _rng(seed: int):
    import numpy as np

    return np.random.default_rng([int(seed), 0x5EED])


def vector_with_outliers(shape, seed) -> dict:
    """{"x": float32 vector of length shape[0]}: normal values, ~2% spiked by 100 so a lost element can't hide."""
    import numpy as np

    (n,) = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.float32)
    x[rng.integers(0, n, size=max(1, n // 50))] *= 100.0
    return {"x": x}


def grouped_sum(x, group: int):
    """Sums of consecutive groups of ``group`` elements of x (the last one padded with zeros), in float64: the
    reference of every block- or warp-sum exercise (and, of ``abs(x)``, its `Exercise.error_scale`)."""
    import numpy as np

    groups = ceil_div(x.size, group)
    padded = np.zeros(groups * group)
    padded[: x.size] = x
    return padded.reshape(groups, group).sum(axis=1)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = ["Exercise", "Speed", "Check", "MaxLoadsPerElement", "MaxStoresPerElement", "Coalesced",
           "NoBankConflicts", "UsesShared", "NoSharedMemory", "NoRaces", "WarpInstructions", "DataFlow", "GATES",
           "DEFAULT_POINTS", "load", "ceil_div", "readme_hints"]
