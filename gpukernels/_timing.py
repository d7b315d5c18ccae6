"""Timing GPU work honestly, and saying where it ran: what `gpukernels.bench` (the standard benchmark) and
`gpukernels.overhead` (host time per launcher call) share.

``Timer`` times a function that enqueues GPU work: a CUDA graph of many launches replayed between torch events when
PyTorch is there (the kernels' own time, the host's launch work hidden), Numba events around back-to-back launches
otherwise; the input sets are taken in turn so that each is evicted from L2 before its next use. ``environment()`` is
the device, driver, library versions and date a result is stamped with; ``_configure_torch`` turns TF32 off so that
the float32 peers are float32.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform

import gpukernels

#: A launch of at least this many milliseconds is timed on its own (`Timer.time`): its own traffic dwarfs L2 and the
#: graph launch's few microseconds, and timing `sets` of them per region made slow baselines cost minutes.
SLOW_MS = 2.0
#: A launch this long is timed at least LONG_MIN_RUNS times instead of ``min_runs`` (25): its run-to-run spread is
#: a fraction of a percent (attention's float32 steps on an H200, 25 runs each: naive 1546.3-1546.6 ms, fused_rows
#: 544.9-546.0, tiled 226.4-226.6), and 25 runs of the attention lesson's float32 steps at its bench shapes took
#: longer than a benchmark run may.
LONG_MS, LONG_MIN_RUNS = 100.0, 5


class Timer:
    """Times a function that enqueues GPU work on the current stream: CUDA graph + events when PyTorch is
    there, Numba events otherwise.

    ``min_runs`` and ``budget_ms``, when given, cap what every ``time()`` call asks for: a quick run (the
    notebooks' performance tables: >= 5 runs, ~0.3 s a version); ``gpukernels bench`` keeps the full budget."""

    timing = True  # False in `gpukernels.bench.CompileOnly`, which runs each version once and times nothing

    def __init__(self, torch_mod=None, min_runs: int | None = None, budget_ms: float | None = None):
        self.torch = torch_mod
        self.method = "cuda-graph replay, torch events" if torch_mod else "numba events, back-to-back launches"
        self.max_min_runs, self.max_budget_ms = min_runs, budget_ms

    def stream(self):
        from numba import cuda

        if self.torch is not None:
            return cuda.external_stream(self.torch.cuda.current_stream().cuda_stream)
        return cuda.default_stream()

    def estimate_ms(self, enqueue, sets: int) -> float:
        """One rough timing (after warm-up) to choose how many launches to put into a graph. A launch of SLOW_MS or
        more is not repeated over every input set first: one warm-up and one timed launch say enough."""
        from numba import cuda

        enqueue(0)
        cuda.synchronize()
        start, end = cuda.event(), cuda.event()
        s = self.stream()
        start.record(s)
        enqueue(min(1, sets - 1))
        end.record(s)
        end.synchronize()
        one = cuda.event_elapsed_time(start, end)
        if one >= SLOW_MS:
            return one
        for i in range(sets):
            enqueue(i)
        cuda.synchronize()
        if self.torch is not None:
            self.torch.cuda.synchronize()
        start, end = cuda.event(), cuda.event()
        s = self.stream()
        start.record(s)
        for i in range(sets):
            enqueue(i)
        end.record(s)
        end.synchronize()
        return cuda.event_elapsed_time(start, end) / sets

    def time(self, enqueue, sets: int, min_runs: int = 25, budget_ms: float = 1500.0) -> list[float]:
        if self.max_min_runs is not None:
            min_runs = min(min_runs, self.max_min_runs)
        if self.max_budget_ms is not None:
            budget_ms = min(budget_ms, self.max_budget_ms)
        est = max(self.estimate_ms(enqueue, sets), 1e-3)
        if est >= SLOW_MS:
            # A launch this long: one per timed region, the input sets taken in turn across the runs (each set is
            # evicted from L2 by the others before its next turn), events around it (graph replay would save < 1%).
            # Put `sets` launches in each region instead and naive softmax at 1 x 2^20 (338 ms) took 211 s.
            floor = min(min_runs, LONG_MIN_RUNS) if est >= LONG_MS else min_runs
            return self._time_events(enqueue, sets, 1, int(min(200, max(floor, budget_ms / est))))
        # Enough launches per timed region to dwarf the event resolution (~0.5 us) and replay overhead.
        inner = int(min(200, max(1, math.ceil(2.0 / est))))
        inner = max(sets, inner - inner % sets if inner >= sets else sets)
        runs = int(min(200, max(min_runs, budget_ms / max(est * inner, 1e-3))))
        if self.torch is not None:
            try:
                return self._time_graph(enqueue, sets, inner, runs)
            except Exception as err:  # capture unsupported for this work: fall back, and say so
                self.method = f"numba events (graph capture failed: {type(err).__name__})"
        return self._time_events(enqueue, sets, inner, runs)

    def _time_graph(self, enqueue, sets, inner, runs):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(sets):
                enqueue(i)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for j in range(inner):
                enqueue(j % sets)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / inner)
        del graph
        return times

    def _time_events(self, enqueue, sets, inner, runs):
        from numba import cuda

        s = self.stream()
        times = []
        k = 0  # the input sets in turn, across the runs as well (one launch per run: a different set each run)
        for _ in range(runs):
            start, end = cuda.event(), cuda.event()
            start.record(s)
            for _ in range(inner):
                enqueue(k % sets)
                k += 1
            end.record(s)
            end.synchronize()
            times.append(cuda.event_elapsed_time(start, end) / inner)
        return times


def _mm_f32_out(torch, a, b):
    try:
        return torch.mm(a, b, out_dtype=torch.float32)
    except TypeError:  # torch before out_dtype: cuBLAS writes float16
        return torch.mm(a, b)


def _configure_torch(torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:
        pass


def environment() -> dict:
    info = gpukernels.device_info()
    env = {k: info.get(k) for k in ("device", "compute_capability", "sm_count", "driver_version", "mode")}
    env["versions"] = info["versions"]
    env["python"] = platform.python_version()
    try:
        import torch

        env["versions"]["torch"] = torch.__version__
        env["cudnn"] = torch.backends.cudnn.version()
    except ImportError:
        pass
    env["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return env
