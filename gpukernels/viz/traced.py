"""One simulated run of a version under ``gpukernels.trace``, every access with its block and thread, read
through the tracer's public API (``Trace.accesses()``, ``arrays()``, ``lines()``, ``launches``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import resources as _res
from ..check import version_inputs
from ._common import _lessons, _trace_module

# ----------------------------------------------------------------------------------------------------------
# Traces: one simulated run of a version under gpukernels.trace, every access with its block and thread
# ----------------------------------------------------------------------------------------------------------

#: The shapes the tracer-fed figures use: small enough to simulate in seconds, large enough for several blocks
#: (and, for the reuse maps, for the reuse factor N / TILE to show). Editorial choices, one place.
FIGURE_SHAPES = {"matmul": (64, 64, 64), "softmax": (32, 256), "cbr": (1, 4, 16, 16, 8, 3, 3)}

_READ, _WRITE, _ATOMIC = 0, 1, 2
_GLOBAL, _SHARED = 0, 1


@dataclass
class Traced:
    """The accesses of one version's launches, as NumPy columns (one row per element access).

    ``ev`` columns: launch, block (linear), bx, by, bz, tid, aid (array id), elem (flat element index), kind
    (0 read, 1 write, 2 atomic), interval (barriers passed), pc (source line id), occ (n-th execution of that
    line by that thread), order (n-th access of the thread). ``arrays[aid]``: name, space (0 global, 1 shared,
    2 local), shape, launch. ``params[launch]``: the kernel's parameter names in order.
    """

    lesson: str
    version: str
    shape: tuple
    launches: list  # (kernel name, grid, block)
    arrays: list
    ev: dict
    lines: list  # pc -> (filename, lineno)
    out_name: str
    input_names: list
    trace: Any = None

    def block_dims(self, launch: int) -> tuple:
        return tuple(self.launches[launch][2])

    def grid_dims(self, launch: int) -> tuple:
        return tuple(self.launches[launch][1])

    def select(self, **conds) -> np.ndarray:
        """Boolean mask of rows where every column equals the given value (``array=`` takes a name)."""
        ev = self.ev
        mask = np.ones(len(ev["tid"]), bool)
        for key, val in conds.items():
            if key == "array":
                aids = [i for i, a in enumerate(self.arrays) if a["name"] == val]
                mask &= np.isin(ev["aid"], aids)
            elif key == "space":
                aids = [i for i, a in enumerate(self.arrays) if a["space"] == val]
                mask &= np.isin(ev["aid"], aids)
            else:
                mask &= ev[key] == val
        return mask

    def array_shape(self, name: str) -> tuple:
        return next(tuple(a["shape"]) for a in self.arrays if a["name"] == name)

    def counts(self, name: str, mask: np.ndarray | None = None, kind: int = _READ) -> np.ndarray:
        """Accesses of ``kind`` per element of global array ``name`` (where ``mask``), shaped like the array."""
        sel = self.select(array=name, kind=kind, space=_GLOBAL)
        if mask is not None:
            sel &= mask
        shape = self.array_shape(name)
        return np.bincount(self.ev["elem"][sel], minlength=math.prod(shape)).reshape(shape)

    def loads(self, name: str) -> np.ndarray:
        """Loads per element of global array ``name`` as the tracer counts them: reads and atomics (an atomic
        reads its element too), so that their sum is ``Trace.traffic()``'s ``loads``."""
        return self.counts(name, kind=_READ) + self.counts(name, kind=_ATOMIC)


def _param_names(kernel) -> list[str]:
    import inspect

    return list(inspect.signature(getattr(kernel, "py_func", kernel)).parameters)


_SPACE_CODES = {"global": _GLOBAL, "shared": _SHARED, "local": 2}


def _raw_events(t) -> tuple[list, list, dict, list]:
    """(launches, arrays, columns, lines) from a Trace made with ``events=True``, through its public API:
    ``Trace.accesses()`` (numbers only: ~50 bytes an access, where ``events()`` spells out strings -- too much
    for the 500 000 accesses of a 64^3 matmul), ``arrays()``, ``lines()`` and ``launches``."""
    launches = [(l.kernel, tuple(l.grid), tuple(l.block)) for l in t.launches]
    arrays = [{"name": a.name, "space": _SPACE_CODES[a.space], "shape": tuple(a.shape), "launch": a.launch,
               "itemsize": a.itemsize} for a in t.arrays()]
    acc = t.accesses()
    cols = {"launch": acc["launch"], "bx": acc["block"][:, 0], "by": acc["block"][:, 1], "bz": acc["block"][:, 2],
            "tid": acc["thread"], "aid": acc["array"], "elem": acc["element"], "kind": acc["kind"],
            "interval": acc["interval"], "pc": acc["line"], "occ": acc["occurrence"], "order": acc["order"]}
    # int64 columns, as the figures' index arithmetic (block * grid + ...) expects
    cols = {k: np.ascontiguousarray(v, np.int64) for k, v in cols.items()}
    return launches, arrays, cols, t.lines()


_TRACES: dict = {}


def _same_array(arg: np.ndarray, x) -> bool:
    """``arg`` is the input ``x`` or a view of all of it (attention's launchers pass q as (B*H, S, D))."""
    if arg is x:
        return True
    return (isinstance(x, np.ndarray) and arg.nbytes == x.nbytes
            and arg.__array_interface__["data"][0] == x.__array_interface__["data"][0])


def traced(lesson: str, version: str, shape=None, seed: int = 0) -> Traced:
    """Run ``lesson.VERSIONS[version]`` on inputs of ``shape`` under the tracer (cached per process)."""
    import gpukernels

    _trace_module()  # ImportError here: no tracer
    mod = _lessons()[lesson]
    shape = tuple(shape or FIGURE_SHAPES.get(lesson) or mod.SHAPES["trace"])
    key = (lesson, version, shape, seed)
    if key in _TRACES:
        return _TRACES[key]
    inputs = version_inputs(lesson, version, mod.make_inputs(shape, seed))  # float16 for attention's mma steps
    ver = mod.VERSIONS[version]
    # Parameter names of the output and the inputs, from the launch plan (the tracer names arrays by them).
    out = np.empty(0, np.float32)
    plan = ver.launches(*inputs)
    probe_out = plan[0].args[[i for i, a in enumerate(plan[0].args) if isinstance(a, np.ndarray)][-1]]
    out_name, input_names = None, []
    for launch in plan:
        names = _param_names(launch.kernel)
        for i, arg in enumerate(launch.args):
            if not isinstance(arg, np.ndarray) or i >= len(names):
                continue
            if arg is probe_out and out_name is None:
                out_name = names[i]
            elif any(_same_array(arg, x) for x in inputs) and names[i] not in input_names:
                input_names.append(names[i])
    del out
    # Local arrays unobserved: every figure shows global or shared memory, and a register-blocked kernel's
    # accumulators were most of its accesses (cbr.fused_direct at the figure shape: 2.1 M of them, 6 s -> 1 s).
    with gpukernels.trace(events=True, count_local=False) as t:
        ver(*inputs)
    return _keep(key, t, out_name, input_names)


def _keep(key: tuple, t, out_name, input_names) -> Traced:
    lesson, version, shape, _ = key
    launches, arrays, cols, lines = _raw_events(t)
    result = Traced(lesson, version, shape, launches, arrays, cols, lines, out_name or "out", input_names, t)
    if len(_TRACES) >= 12:
        _TRACES.pop(next(iter(_TRACES)))
    _TRACES[key] = result
    return result


def remember(lesson: str, version: str, shape, seed: int, t, plan: list, inputs: list) -> None:
    """Keep a trace (with events) that someone else ran -- the plan ``plan`` of ``version`` on ``inputs`` (host
    or device arrays), its output the last array argument of its first launch, as in `traced` -- so that a later
    `traced` call for the same version, shape and seed needs no second simulation (a notebook that checks each
    version under the tracer and then draws figures of two of them)."""
    def is_array(a):
        return isinstance(a, np.ndarray) or hasattr(a, "copy_to_host")

    probe_out = plan[0].args[[i for i, a in enumerate(plan[0].args) if is_array(a)][-1]]
    out_name, input_names = None, []
    for launch in plan:
        names = _param_names(launch.kernel)
        for i, arg in enumerate(launch.args):
            if not is_array(arg) or i >= len(names):
                continue
            if arg is probe_out and out_name is None:
                out_name = names[i]
            elif any(_same_array(arg, x) for x in inputs) and names[i] not in input_names:
                input_names.append(names[i])
    _keep((lesson, version, tuple(shape), seed), t, out_name, input_names)


def traffic(lesson: str, version: str, shape=None) -> dict:
    """Global loads and stores (elements) of one version at ``shape`` (default: ``SHAPES['trace']``), counted by
    the tracer; cached on disk next to the compile cache, keyed by the lesson's source."""
    import hashlib

    import gpukernels

    mod = _lessons()[lesson]
    shape = tuple(shape or mod.SHAPES["trace"])
    # A lesson that is a package (matmul) is keyed by all of its files, so that editing a step's file counts.
    src = "".join(f.read_text() for f in sorted(Path(mod.__file__).parent.glob("*.py"))) if hasattr(mod, "__path__") \
        else Path(mod.__file__).read_text()
    key = hashlib.sha256(f"{lesson}|{version}|{shape}|{src}|traffic-v1".encode()).hexdigest()[:24]
    path = _res.cache_dir().parent / "traffic" / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    with gpukernels.trace(count_local=False) as t:  # global traffic only
        mod.VERSIONS[version](*version_inputs(lesson, version, mod.make_inputs(shape, 0)))
    rows = t.traffic()
    out = {"loads": sum(r.loads for r in rows), "stores": sum(r.stores for r in rows),
           "bytes": t.global_bytes(), "shape": list(shape)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out))
    except OSError:
        pass
    return out
