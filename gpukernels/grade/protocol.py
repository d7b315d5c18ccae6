"""What the grader and its child processes say to each other: the job (grader -> child) and the report
(child -> grader), as dataclasses with one JSON form each.

The job travels over the child's stdin, read only after the admitted submission has been imported (so nothing
of the submission could have seen it); input arrays are ``.npz`` files in a folder that is not the child's
working directory, written by the grader after admission. The report is one JSON file that only the child's
harness writes, rewritten after every step so that a crash half-way leaves a record of how far it got; output
arrays come back as ``.npy`` files whose paths the grader rebuilds itself. The grader believes the output arrays
and the observations the harness made, nothing else (a submission cannot run code at import, see
``admission``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields


@dataclass
class CaseJob:
    """One launch: arrays from ``npz``, ``args`` as [name, "array" | "scalar", value] in the kernel's order."""

    npz: str
    args: list
    grid: list
    block: list
    shape: list
    shuffle: bool = True  # run once more in a shuffled thread order (races); not the shapes past the ranges


@dataclass
class SpeedJob(CaseJob):
    baseline: list = field(default_factory=list)  # [lesson, version]
    repeats: int = 20
    out: str = ""
    inputs: list = field(default_factory=list)
    params: dict = field(default_factory=dict)


@dataclass
class Job:
    mode: str  # "compile" | "sim" | "speed"
    exercise: str
    kernel: str
    filename: str  # the submission's path (for messages and line numbers)
    source: str  # the submission's text, as admitted (the child admits it again and runs the admitted tree)
    out_dir: str  # where the child writes .npy outputs and the report
    cases: list = field(default_factory=list)  # [CaseJob]
    trace: CaseJob | None = None
    speed: SpeedJob | None = None
    shuffle_seed: int | None = None
    launch_timeout: float = 30.0
    cc: list = field(default_factory=lambda: [9, 0])
    arg_types: list = field(default_factory=list)  # [[name, dtype, ndim] | [name, "scalar", python type]]
    out: str = ""  # the output array's name (sim: the traced case's output is saved for the data-flow checks)
    # sim: instructions ("mma_f16", "shfl", ...) whose results the child perturbs in a run of the traced case of its
    # own, each run's output saved: what the data-flow checks compare (spec.DataFlow)
    perturb: list = field(default_factory=list)

    @property
    def report(self) -> str:
        return os.path.join(self.out_dir, "report.json")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Job":
        raw = json.loads(text)
        raw["cases"] = [CaseJob(**c) for c in raw.get("cases", [])]
        raw["trace"] = CaseJob(**raw["trace"]) if raw.get("trace") else None
        raw["speed"] = SpeedJob(**raw["speed"]) if raw.get("speed") else None
        return cls(**raw)


@dataclass
class CaseReport:
    status: str = "running"  # running | ok | error
    run: str = ""  # the run that failed: "out" (thread order) or "shuffled"
    error: str = ""
    error_type: str = ""
    seeds: dict = field(default_factory=dict)  # run -> shuffle seed (None: thread order)
    outputs: list = field(default_factory=list)  # runs whose arrays were saved
    seconds: dict = field(default_factory=dict)


@dataclass
class Report:
    stage: str = "start"  # start | admission | import | lookup | run | done
    error: str = ""
    error_type: str = ""
    simulator: str = ""
    cases: list = field(default_factory=list)  # [CaseReport]
    trace: dict | None = None  # {"status": ..., "observations": {...}} or {"status": "error", "error": ...}
    compile: dict | None = None  # {"ok": bool, "error": str, "signature": str, "seconds": float}
    speed: dict | None = None

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(self), f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "Report | None":
        """The child's report, or None when there is none or it is not one (a crash before the first save)."""
        try:
            with open(path) as f:
                raw = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(raw, dict):
            return None
        known = {f.name for f in fields(cls)}
        raw = {k: v for k, v in raw.items() if k in known}
        try:
            cases = [CaseReport(**{k: v for k, v in c.items() if k in {f.name for f in fields(CaseReport)}})
                     for c in raw.pop("cases", []) if isinstance(c, dict)]
            return cls(cases=cases, **raw)
        except TypeError:
            return None


def output_path(out_dir: str, case: int | str, run: str, name: str) -> str:
    """Where the child saves array ``name`` of ``case`` after ``run``; the grader rebuilds the same path."""
    return os.path.join(out_dir, f"case{case}_{run}_{name}.npy")


__all__ = ["Job", "CaseJob", "SpeedJob", "Report", "CaseReport", "output_path"]
