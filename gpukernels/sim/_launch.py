"""One kernel launch on the gpukernels simulator: a greenlet per CUDA thread and a cooperative scheduler.

Blocks run one after another. Within a block the scheduler starts each thread in turn (thread-id order, or a
seeded random order in shuffle mode) and lets it run *until it has to wait*: at ``cuda.syncthreads()``, at a
warp-level primitive until the other lanes of its mask arrive, or (shuffle mode only) at a random memory
access. A thread that never waits runs start to finish with a single switch. The last thread to reach a
barrier releases it and carries on without a switch; the others resume in arrival order. Nothing depends on OS
threads or timing, so the same launch with the same inputs runs the same interleaving every time.

When nothing can run but threads are still alive, the scheduler knows exactly who waits where, which is what
the errors report: barrier divergence, warp masks that do not match, and (through a watchdog that interrupts
the launching thread) kernels that stop making progress for ``timeout_s`` seconds.
"""

from __future__ import annotations

import ctypes
import inspect
import math as _math
import os
import random
import threading
import time
from collections import deque

import numpy as np
from greenlet import getcurrent, greenlet

from . import _async, _ctx, _state, arrays
from ._source import describe, location, traceback_site, user_frame
from .api import (
    BALLOT,
    COLLECTIVES,
    MATCH_ALL,
    MATCH_ANY,
    SHFL_DOWN,
    SHFL_IDX,
    SHFL_UP,
    SHFL_XOR,
    SYNCWARP,
    VOTE_ALL,
    VOTE_ANY,
    VOTE_EQ,
    Dim3,
    SimCUDA,
    sim_math,
)
from .errors import (
    BarrierDivergenceError,
    KernelTimeoutError,
    SimulatorError,
    WarpMaskError,
    make_kernel_error,
)

READY, RUNNING, BARRIER, WARP, DONE = range(5)
_MASK64 = (1 << 64) - 1
_FINISHED = object()  # what a worker greenlet hands the scheduler when its CUDA thread returned


class _Timeout(BaseException):
    """Raised asynchronously in the launching thread by the watchdog (a BaseException so that kernel code's
    ``except Exception`` cannot swallow it)."""


class SimThread:
    __slots__ = (
        "tid", "idx", "warp", "lane", "bit", "g1", "g2", "g3", "g", "state", "site", "kind", "pred",
        "result", "barriers", "op", "value", "arg", "width", "frame", "wsyncs",
    )  # fmt: skip

    def __init__(self, tid, idx, warp, lane, g1, g2, g3):
        self.tid, self.idx, self.warp, self.lane, self.bit = tid, idx, warp, lane, 1 << lane
        self.g1, self.g2, self.g3 = g1, g2, g3
        self.g = None
        self.state = READY
        self.site = None
        self.barriers = 0  # cuda.syncthreads() passed: the barrier interval the thread is in
        self.wsyncs = 0  # cuda.syncwarp() passed
        self.result = None
        self.op = None

    def where_site(self) -> tuple:
        """(file, line) of the barrier or warp primitive this thread waits at."""
        return (self.frame.f_code.co_filename, self.frame.f_lineno)

    def where(self) -> str:
        """What this thread is doing, for error messages."""
        if self.state == DONE:
            return "exited"
        if self.state == BARRIER:
            return f"waits at cuda.{self.kind}() at {describe(self.where_site())}"
        if self.state == WARP:
            return f"waits at cuda.{self.op[0]}(mask={self.op[1]:#010x}) at {describe(self.where_site())}"
        if self.g is None:
            return "has not started"
        frame = user_frame(self.g.gr_frame) if self.g.gr_frame is not None else None
        if frame is None:
            return "is ready to run"
        return f"is ready to run, at {describe((frame.f_code.co_filename, frame.f_lineno))}"


def _xyz(d) -> tuple:
    return (d.x, d.y, d.z)


def _threads_text(threads, limit=6) -> str:
    items = [str(_xyz(t.idx)) for t in threads]
    if len(items) > limit:
        items = items[: limit - 2] + ["...", items[-1]]
    n = len(threads)
    return f"{n} thread{'s' if n != 1 else ''} " + ", ".join(items)


def _lanes_text(bits: int) -> str:
    lanes = [i for i in range(32) if bits >> i & 1]
    runs, start = [], None
    for i, lane in enumerate(lanes):
        if start is None:
            start = lane
        if i + 1 == len(lanes) or lanes[i + 1] != lane + 1:
            runs.append(str(start) if start == lane else f"{start}-{lane}")
            start = None
    return ("lane " if len(lanes) == 1 else "lanes ") + ",".join(runs)


# ---------------------------------------------------------------------------------------------------------------
# Watchdog: one daemon thread that interrupts the launching thread when a launch runs past its deadline.


class _Watchdog:
    """Fires when the armed launch makes no progress -- no switch from one CUDA thread to another -- for
    ``timeout_s`` seconds. A thread in an endless loop (or spinning on memory another thread should write)
    never switches; a long but healthy launch switches all the time, so it is never cut short."""

    def __init__(self):
        self._cv = threading.Condition()
        self._armed = None  # (token, timeout, thread ident, launch)
        self._thread = None
        self.fired = set()

    def arm(self, timeout_s: float, token, launch) -> None:
        with self._cv:
            self._armed = (token, timeout_s, threading.get_ident(), launch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpukernels-sim-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()

    def disarm(self, token) -> None:
        with self._cv:
            if self._armed is not None and self._armed[0] is token:
                self._armed = None
            if token in self.fired:  # fired, maybe not yet delivered: withdraw it
                self.fired.discard(token)
                ident = threading.get_ident()
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)

    def _run(self):
        with self._cv:
            watched, seen, since = None, -1, 0.0
            while True:
                if self._armed is None:
                    watched = None
                    self._cv.wait()
                    continue
                token, timeout, ident, launch = self._armed
                now = time.monotonic()
                if token is not watched or launch.switches != seen:
                    watched, seen, since = token, launch.switches, now
                if now - since < timeout:
                    self._cv.wait(min(timeout - (now - since), max(timeout / 4, 0.01)))
                    continue
                self._armed = None
                self.fired.add(token)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Timeout))


_watchdog = _Watchdog()

# ---------------------------------------------------------------------------------------------------------------


_param_names: dict = {}


def _names_of(fn) -> list:
    names = _param_names.get(fn)
    if names is None:
        try:
            names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            names = []
        _param_names[fn] = names
    return names



_FAST_CASTS: dict = {}


def _fast_casts() -> dict:
    """id(Numba scalar type) -> (the type, NumPy's constructor of the same name), which is what calling the type on
    a value returns (``Type.cast_python_value``)."""
    if not _FAST_CASTS:
        from numba.core import types

        for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64"):
            t = getattr(types, name)
            _FAST_CASTS[id(t)] = (t, getattr(np, name))
    return _FAST_CASTS


class Launch:
    """State of one launch; also what ``cuda.*`` calls inside kernels talk to (through ``SimCUDA``)."""

    def __init__(self, kernel, config, grid_dim, block_dim, dynshared_size, tracer=None):
        self.kernel = kernel
        self.fn = kernel.fn
        self.name = getattr(kernel.fn, "__name__", "kernel")
        self.config = config
        self.grid = tuple(grid_dim)
        self.block = tuple(block_dim)
        bx, by, bz = self.block
        self.nthreads = bx * by * bz
        self.nblocks = self.grid[0] * self.grid[1] * self.grid[2]
        self.nwarps = (self.nthreads + 31) // 32
        self.shuffle = bool(config.shuffle)
        seed = config.seed
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self.seed = seed
        self.rng = random.Random(seed) if self.shuffle else None
        self.preempt = float(config.preempt) if self.shuffle else 0.0
        self.tracer = tracer
        self.watch = _state.WATCH  # progress and time limit of a command (or None)
        self.blocks_done = 0
        self.debug = bool(getattr(kernel, "_debug", False))
        self.mod = SimCUDA(self, grid_dim, block_dim, dynshared_size)
        self.digest = 0
        self.switches = 0
        # barriers completed / threads arriving at them; cuda.syncwarp() completed / threads calling it
        self.n_sync = self.n_sync_calls = self.n_wsync = self.n_wsync_calls = 0
        # instructions of COLLECTIVES (gpukernels._mma: mma, ldmatrix) completed, by kind: one per warp and call
        self.collectives = {}
        self.schedule = [] if config.record_schedule else None
        self.cur = None
        self.blockIdx = None
        self._swapped = {}
        self._restore = []
        self._protos = []
        for tid in range(self.nthreads):
            x, rest = tid % bx, tid // bx
            y, z = rest % by, rest // by
            self._protos.append((tid, Dim3(x, y, z), tid // 32, tid % 32, x, y, z))
        full = (1 << 32) - 1
        self._exist = [full] * self.nwarps
        if self.nthreads % 32:
            self._exist[-1] = (1 << (self.nthreads % 32)) - 1
        self.hook = None
        if tracer is not None:
            self.hook = tracer.hook_for(self)
        self.trace_hook = self.hook  # the tracer's own (the asynchronous instructions report their accesses to it)
        if self.preempt > 0:
            inner = self.hook
            if inner is None:
                self.hook = self._maybe_preempt
            else:

                def both(a, i, k, _inner=inner, _pre=self._maybe_preempt):
                    _inner(a, i, k)
                    _pre(a, i, k)

                self.hook = both
        # cp.async and wgmma: their model, and the check of every access against it, only where the kernel uses them
        self.async_model = _async.AsyncModel(self) if _async.uses_async(self.fn) else None

    def sync_counts(self) -> tuple:
        """(barriers completed, threads arriving at them, syncwarps completed, threads calling syncwarp)."""
        return (self.n_sync, self.n_sync_calls, self.n_wsync, self.n_wsync_calls)

    # -- context for errors ---------------------------------------------------------------------------------
    def who(self) -> dict:
        t, b = self.cur, self.blockIdx
        if t is None or b is None:
            return {"kernel": self.name}
        thread, block = _xyz(t.idx), _xyz(b)
        return {
            "kernel": self.name,
            "block": block,
            "thread": thread,
            "thread_text": f"thread {thread} of block {block} (warp {t.warp}, lane {t.lane}) of kernel "
            f"{self.name!r}",
        }

    def _err_kw(self, t=None, site=None) -> dict:
        t = t or self.cur
        return {
            "kernel": self.name,
            "block": _xyz(self.blockIdx) if self.blockIdx is not None else None,
            "thread": _xyz(t.idx) if t is not None else None,
            "location": location(*site) if site else None,
        }

    # -- arrays ---------------------------------------------------------------------------------------------
    def new_array(self, a, name, space, key=None):
        tracer = self.tracer
        if space is arrays.LOCAL and not self.preempt and (tracer is None or not tracer.count_local):
            # unobserved: plain and fast (a thread's local arrays are no business of the asynchronous model either)
            return arrays.array_class(a.ndim, False)(a, name, space, None, 0, -1)
        aid = tracer.register(self, a, name, space, key) if tracer is not None else -1
        return arrays.wrap(a, name, space, aid)

    def _convert_args(self, args, retr):
        from ._stock import ArgHint, FakeCUDAArray, FakeWithinKernelCUDAArray

        names = _names_of(self.fn)
        out = []
        for i, arg in enumerate(args):
            name = names[i] if i < len(names) else f"arg{i}"
            for ext in self.kernel.extensions:
                _, arg = ext.prepare_args(None, arg, stream=0, retr=retr)
            if isinstance(arg, ArgHint):
                arg = arg.to_device(retr)
            if isinstance(arg, FakeCUDAArray):
                arg = arg._ary
            if isinstance(arg, np.ndarray) and arg.ndim > 0:
                if arg.dtype.fields is not None:  # record arrays keep the stock wrapper's attribute access
                    out.append(FakeWithinKernelCUDAArray(FakeCUDAArray(arg)))
                else:
                    out.append(self.new_array(arg, name, arrays.GLOBAL, key=("arg", name)))
            elif isinstance(arg, np.void):
                out.append(FakeWithinKernelCUDAArray(FakeCUDAArray(arg)))
            else:
                out.append(arg)
        return out

    # -- swapping ``cuda`` for our module in the kernel's (and device functions') globals -----------------
    def swap_in(self, fn):
        key = id(fn)
        if key in self._swapped:
            return
        self._swapped[key] = fn
        import sys

        real = sys.modules.get("numba.cuda")
        g = fn.__globals__
        names = [k for k, v in g.items() if v is real]
        for k in names:
            g[k] = self.mod
        self._restore.append((g, names, real))
        # Numba's scalar types called as casts (``float32(x)``): NumPy's constructor, where Numba's ``Type.__call__``
        # ends after two more Python frames and an import per call (the casts in an inner loop were 4% of a run)
        casts = _fast_casts()
        names = [k for k, v in g.items() if id(v) in casts and casts[id(v)][0] is v]
        for k in names:
            g[k] = casts[id(g[k])][1]
        self._restore.append((g, names, None))
        # ``math`` with CUDA's results (exp overflow -> inf, log(0) -> -inf) instead of Python's exceptions
        names = [k for k, v in g.items() if v is _math]
        for k in names:
            g[k] = sim_math
        self._restore.append((g, names, _math))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if cell.cell_contents is real:
                    cell.cell_contents = self.mod
                    self._restore.append((cell, None, real))
                elif cell.cell_contents is _math:
                    cell.cell_contents = sim_math
                    self._restore.append((cell, None, _math))
            except ValueError:  # empty cell
                pass

    def _swap_out(self):
        casts = _fast_casts()
        for target, names, real in reversed(self._restore):
            if names is None:
                target.cell_contents = real
            elif real is None:  # the casts: each name back to its own Numba type
                by_cast = {id(fast): typ for typ, fast in casts.values()}
                for k in names:
                    typ = by_cast.get(id(target.get(k)))
                    if typ is not None:
                        target[k] = typ
            else:
                for k in names:
                    if target.get(k) is self.mod or target.get(k) is sim_math:
                        target[k] = real
        self._restore = []

    # -- running --------------------------------------------------------------------------------------------
    def run(self, args):
        if _ctx.LAUNCH is not None:
            raise SimulatorError("a kernel launch is already running on the simulator (nested launches are not "
                                 "supported)")
        retr = []
        self.started = started = time.perf_counter()
        token = object()
        timeout = self.config.timeout_s
        _ctx.LAUNCH = self
        self._set_hooks()
        self.sched = getcurrent()
        try:
            if self.tracer is not None:
                self.tracer.begin(self)
            self.kargs = kargs = self._convert_args(args, retr)
            self._free = []  # idle worker greenlets
            self.swap_in(self.fn)
            gx, gy, gz = self.grid
            blocks = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
            if self.rng is not None:
                self.rng.shuffle(blocks)
            if timeout:
                _watchdog.arm(timeout, token, self)
            try:
                for b in blocks:
                    self._run_block(b, kargs)
                    self.blocks_done += 1
                    if self.watch is not None:
                        self.watch(self)
            except _Timeout:
                raise self._timeout_error(None, None) from None
            finally:
                if timeout:
                    _watchdog.disarm(token)
            if self.tracer is not None:
                self.tracer.end(self)
        finally:
            self._swap_out()
            arrays.HOOK = arrays.CHECK = None
            arrays.hooked = False
            _ctx.LAUNCH = None
            self.seconds = time.perf_counter() - started
        for wb in retr:
            wb()

    def _set_hooks(self):
        check = self.async_model.check if self.async_model is not None else None
        arrays.HOOK = self.hook or check
        arrays.CHECK = check if self.hook is not None else None
        arrays.hooked = arrays.HOOK is not None

    def start_async(self):
        """The first asynchronous instruction of a launch the source scan did not expect one in: the model from
        now on (arrays made before are not observed)."""
        self.async_model = _async.AsyncModel(self)
        self._set_hooks()
        return self.async_model

    def _work(self):
        """Body of a worker greenlet: runs CUDA threads one after another, as the scheduler hands them over.
        Creating a greenlet costs ~15 us, a switch ~0.5 us: a kernel without barriers needs one worker."""
        fn, kargs, sched = self.fn, self.kargs, self.sched
        # A GPU's float arithmetic is IEEE's and says nothing: exp(89) is inf, inf - inf is NaN, with no warning.
        # So is the simulator's -- without this NumPy's scalars warned "overflow encountered" from every thread
        # of a kernel given inf -- except under cuda.jit(debug=True), where a float division by zero stops the
        # thread, as the Python error model that debug mode compiles with does on a GPU (NumPy's
        # FloatingPointError, like the stock simulator's). Set here, not in the launch: each greenlet has its own
        # context, where NumPy keeps this setting.
        with np.errstate(all="ignore", divide="raise" if self.debug else "ignore"):
            while True:
                fn(*kargs)
                sched.switch(_FINISHED)

    def _run_block(self, bidx, kargs):
        bx, by, bz = self.block
        x0, y0, z0 = bidx[0] * bx, bidx[1] * by, bidx[2] * bz
        self.blockIdx = b = Dim3(*bidx)
        mod = self.mod
        mod.blockIdx = b
        mod.shared.new_block()
        if self.async_model is not None:
            self.async_model.new_block()
        threads = []
        for tid, idx, warp, lane, x, y, z in self._protos:
            g1 = x0 + x
            threads.append(SimThread(tid, idx, warp, lane, g1, (g1, y0 + y), (g1, y0 + y, z0 + z)))
        self.threads = threads
        order = list(threads)
        if self.rng is not None:
            self.rng.shuffle(order)
        self.ready = ready = deque(order)
        self.waiting = []
        self.live = len(threads)
        self.warp_wait = [{} for _ in range(self.nwarps)]
        self.warp_bits = [0] * self.nwarps
        self.alive = list(self._exist)
        self.digest = (self.digest * 1000003 + hash(bidx)) & _MASK64
        schedule, free, sched = self.schedule, self._free, self.sched
        while True:
            while ready:
                t = ready.popleft()
                mod.threadIdx = t.idx
                mod.laneid = t.lane
                mod._t = t
                self.cur = t
                self.switches += 1
                if not self.switches & 15 and self.watch is not None:
                    self.watch(self)
                self.digest = (self.digest * 1000003 + t.tid + 1) & _MASK64
                if schedule is not None:
                    schedule.append((bidx, t.tid))
                t.state = RUNNING
                try:
                    if t.g is None:
                        t.g = free.pop() if free else greenlet(self._work, sched)
                        r = t.g.switch()
                    else:
                        r = t.g.switch(t.result)
                except _Timeout as e:
                    raise self._timeout_error(t, e) from None
                except SimulatorError:
                    raise
                except BaseException as e:
                    if traceback_site(e.__traceback__)[1] == 0:  # not raised by kernel code: our bug
                        raise
                    raise self._kernel_error(t, e) from e
                if r is _FINISHED:  # the thread returned; its worker is free for the next one
                    free.append(t.g)
                    if self.async_model is not None:
                        self.async_model.on_exit(t)
                    t.state = DONE
                    self.live -= 1
                    w = t.warp
                    self.alive[w] &= ~t.bit
                    if self.warp_bits[w]:
                        self._retry_warp(w)
            if self.live == 0:
                if self.async_model is not None:
                    self.async_model.end_block()
                if self.tracer is not None:
                    self.tracer.end_block(self)
                return
            raise self._stuck_error()

    # -- preemption (shuffle mode) --------------------------------------------------------------------------
    def _maybe_preempt(self, arr, idx, kind):
        rng = self.rng
        if rng.random() < self.preempt:
            t = self.cur
            t.state = READY
            self.ready.insert(rng.randint(0, len(self.ready)), t)
            self.sched.switch()

    # -- barriers -------------------------------------------------------------------------------------------
    def barrier(self, frame, kind, pred):
        t = self.cur
        t.site = (kind, frame.f_code, frame.f_lasti)
        t.frame = frame
        t.kind = kind
        t.pred = pred
        waiting = self.waiting
        waiting.append(t)
        if len(waiting) == self.nthreads:
            if self.rng is None:
                return self._release(t)
            self._release(None)
        else:
            t.state = BARRIER
        return self.sched.switch()

    def _release(self, current):
        waiting = self.waiting
        site = waiting[0].site
        for t in waiting:
            if t.site != site:
                raise self._divergence_error()
        kind = site[0]
        result = None
        if kind == "syncthreads_count":
            result = sum(t.pred for t in waiting)
        elif kind == "syncthreads_and":
            result = int(all(t.pred for t in waiting))
        elif kind == "syncthreads_or":
            result = int(any(t.pred for t in waiting))
        self.waiting = []
        self.n_sync += 1
        if self.async_model is not None:
            self.async_model.on_barrier()
        self.n_sync_calls += len(waiting)
        if self.rng is not None:
            self.rng.shuffle(waiting)
        ready = self.ready
        for t in waiting:
            t.barriers += 1
            t.result = result
            if t is not current:
                t.state = READY
                ready.append(t)
        return result

    # -- warp-level primitives ------------------------------------------------------------------------------
    def warp_op(self, frame, kind, mask, value, arg, width):
        t = self.cur
        mask = int(mask) & 0xFFFFFFFF
        if not mask >> t.lane & 1:
            site = (frame.f_code.co_filename, frame.f_lineno)
            raise WarpMaskError(
                f"cuda.{kind} called with mask {mask:#010x}, which does not include the calling lane {t.lane}: "
                f"undefined behaviour on a GPU; {self.who()['thread_text']} at {describe(site)}",
                **self._err_kw(t, site),
            )
        if width not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"cuda.{kind}: width must be a power of two from 1 to 32, got {width!r}")
        t.op = (kind, mask, frame.f_code, frame.f_lasti)
        t.frame = frame
        t.value, t.arg, t.width = value, arg, width
        w = t.warp
        self.warp_wait[w][t.lane] = t
        self.warp_bits[w] |= t.bit
        need = mask & self.alive[w]
        if self.warp_bits[w] & need == need:
            if self.rng is None:
                return self._complete(w, need, t)
            self._complete(w, need, None)
        else:
            t.state = WARP
        return self.sched.switch()

    def activemask(self):
        return self.alive[self.cur.warp]

    def _retry_warp(self, w):
        """A lane of warp ``w`` exited: groups that were waiting only for it may now complete."""
        progress = True
        while progress and self.warp_bits[w]:
            progress = False
            for t in list(self.warp_wait[w].values()):
                need = t.op[1] & self.alive[w]
                if t.lane in self.warp_wait[w] and self.warp_bits[w] & need == need:
                    self._complete(w, need, None)
                    progress = True
                    break

    def _complete(self, w, need, current):
        waiters = self.warp_wait[w]
        group = [waiters[lane] for lane in range(32) if need >> lane & 1]
        op = group[0].op
        odd = [t for t in group if t.op != op]
        if odd:
            raise self._mismatch_error(w, group[0], odd)
        kind = op[0]
        results = self._compute(kind, group, need, w)
        for t in group:
            del waiters[t.lane]
        self.warp_bits[w] &= ~need
        if self.rng is not None:
            self.rng.shuffle(group)
        ready = self.ready
        own = None
        sync = kind == SYNCWARP
        if sync:
            self.n_wsync += 1
            self.n_wsync_calls += len(group)
        for t in group:
            t.result = results[t.lane]
            if sync:
                t.wsyncs += 1
            if t is current:
                own = t.result
            else:
                t.state = READY
                ready.append(t)
        return own

    def _compute(self, kind, group, need, w):
        vals = {t.lane: t.value for t in group}
        collective = COLLECTIVES.get(kind)
        if collective is not None:
            if len(vals) != 32:
                raise self._partial_warp_error(kind, group[0], need, w)
            self.collectives[kind] = self.collectives.get(kind, 0) + 1
            return collective(vals)
        if kind == SYNCWARP:
            return dict.fromkeys(vals)
        if kind == VOTE_ALL:
            r = all(vals.values())
            return dict.fromkeys(vals, r)
        if kind == VOTE_ANY:
            r = any(vals.values())
            return dict.fromkeys(vals, r)
        if kind == VOTE_EQ:
            r = len({bool(v) for v in vals.values()}) == 1
            return dict.fromkeys(vals, r)
        if kind == BALLOT:
            r = sum(1 << lane for lane, v in vals.items() if v)
            return dict.fromkeys(vals, r)
        if kind == MATCH_ANY:
            return {lane: sum(1 << o for o, ov in vals.items() if ov == v) for lane, v in vals.items()}
        if kind == MATCH_ALL:
            same = len(set(vals.values())) == 1
            return dict.fromkeys(vals, (need if same else 0, same))
        out = {}
        for t in group:
            lane, width, arg = t.lane, t.width, int(t.arg)
            seg = lane & ~(width - 1)
            if kind == SHFL_IDX:
                src = seg + (arg & (width - 1))
            elif kind == SHFL_UP:
                src = lane - arg
                if src < seg:
                    src = lane
            elif kind == SHFL_DOWN:
                src = lane + arg
                if (lane - seg) + arg >= width:
                    src = lane
            else:  # SHFL_XOR: later segments (and lanes past the warp) are out of range
                src = lane ^ arg
                if src >= seg + width or src < 0:
                    src = lane
            if src not in vals:
                raise self._absent_lane_error(t, src, w)
            out[lane] = vals[src]
        return out

    # -- errors ---------------------------------------------------------------------------------------------
    def _absent_lane_error(self, t, src, w):
        kind, mask = t.op[:2]
        site = t.where_site()
        if not self._exist[w] >> src & 1:
            why = (
                f"does not exist: the block has {self.nthreads} threads, so warp {w} is a partial warp with "
                f"only {bin(self._exist[w]).count('1')} lanes"
            )
        elif not mask >> src & 1:
            why = f"is not in the mask {mask:#010x}"
        else:
            why = "has already exited"
        thread = _xyz(t.idx)
        return WarpMaskError(
            f"cuda.{kind}: thread {thread} of block {_xyz(self.blockIdx)} (lane {t.lane} of warp {w}) reads "
            f"lane {src}, which {why}; on a GPU the value would be undefined. At {describe(site)}",
            **self._err_kw(t, site),
        )

    def _partial_warp_error(self, kind, first, need, w):
        missing = 0xFFFFFFFF & ~need
        gone = missing & self._exist[w]
        if gone:
            why = (f"{_lanes_text(gone)} ha{'s' if bin(gone).count('1') == 1 else 've'} already exited. Every lane must "
                   "reach it: guard the loads and stores around it, not the instruction")
        else:
            why = (f"the block has {self.nthreads} threads, so warp {w} has only {bin(self._exist[w]).count('1')} "
                   "lanes: launch blocks of whole warps (a multiple of 32 threads)")
        site = first.where_site()
        return WarpMaskError(
            f"{kind} in kernel {self.name!r}, warp {w} of block {_xyz(self.blockIdx)}, at {describe(site)}: it is a "
            f"warp-collective instruction that needs all 32 lanes of the warp, but {why}",
            **self._err_kw(first, site),
        )

    def _mismatch_error(self, w, first, odd):
        kind, mask = first.op[:2]
        site = first.where_site()
        others = "; ".join(f"lane {t.lane} {t.where()}" for t in odd[:4])
        return WarpMaskError(
            f"warp {w} of block {_xyz(self.blockIdx)} in kernel {self.name!r}: lane {first.lane} waits at "
            f"cuda.{kind}(mask={mask:#010x}) at {describe(site)}, but lanes of that mask reached a different "
            f"warp operation: {others}. Every lane named in a mask must call the same primitive with the same "
            f"mask",
            **self._err_kw(first, site),
        )

    def _stuck_error(self):
        """Nothing can run, yet threads are alive: say who waits for whom."""
        stuck = self.async_model.on_stuck() if self.async_model is not None and self.async_model.on_stuck else None
        if stuck is not None:  # threads parked on an asynchronous wait (an mbarrier phase): its model says why
            return stuck
        for w in range(self.nwarps):
            if self.warp_bits[w]:
                waiters = sorted(self.warp_wait[w].values(), key=lambda t: t.lane)
                first = waiters[0]
                kind, mask = first.op[:2]
                site = first.where_site()
                need = mask & self.alive[w]
                missing = need & ~self.warp_bits[w]
                by_lane = {t.lane: t for t in self.threads if t.warp == w}
                groups: dict = {}
                for lane in range(32):
                    if missing >> lane & 1:
                        groups.setdefault(by_lane[lane].where(), []).append(lane)
                detail = "; ".join(
                    f"{_lanes_text(sum(1 << x for x in lanes))} {where}" for where, lanes in groups.items()
                )
                same = [t for t in waiters if t.op == first.op]
                return WarpMaskError(
                    f"warp {w} of block {_xyz(self.blockIdx)} in kernel {self.name!r} is stuck: "
                    f"{_lanes_text(sum(t.bit for t in same))} wait at cuda.{kind}(mask={mask:#010x}) at "
                    f"{describe(site)}, but {_lanes_text(missing)} named in the mask never get there: {detail}. "
                    f"Every lane named in the mask must call the same primitive",
                    **self._err_kw(first, site),
                )
        return self._divergence_error()

    def _divergence_error(self):
        waiting: dict = {}
        in_barrier = set(map(id, self.waiting))
        for t in self.waiting:
            waiting.setdefault((t.kind,) + t.where_site(), []).append(t)
        exited = [t for t in self.threads if t.state == DONE]
        others = [t for t in self.threads if t.state != DONE and id(t) not in in_barrier]
        parts = [
            f"{_threads_text(ts)} waited at cuda.{site[0]}() at {describe(site[1:])}" for site, ts in waiting.items()
        ]
        if exited:
            parts.append(f"{_threads_text(exited)} exited without reaching it")
        for t in others[:3]:
            parts.append(f"thread {_xyz(t.idx)} {t.where()}")
        first_site = next(iter(waiting), None)
        return BarrierDivergenceError(
            f"barrier divergence in block {_xyz(self.blockIdx)} of kernel {self.name!r}: "
            + "; ".join(parts)
            + ". Every thread of a block must reach the same cuda.syncthreads() (undefined behaviour on a GPU); "
            "move it out of the branch (or loop) that not all threads take",
            waiting={location(*s[1:]): [_xyz(t.idx) for t in ts] for s, ts in waiting.items()},
            exited=[_xyz(t.idx) for t in exited],
            kernel=self.name,
            block=_xyz(self.blockIdx),
            thread=_xyz(next(iter(waiting.values()))[0].idx) if waiting else None,
            location=location(*first_site[1:]) if first_site else None,
        )

    def _kernel_error(self, t, e):
        site = traceback_site(e.__traceback__)
        thread, block = _xyz(t.idx), _xyz(self.blockIdx)
        # ends as Numba reports an exception raised on a GPU (and its stock simulator too), so that code
        # matching "tid=[x, y, z] ctaid=[x, y, z]: message" keeps working
        gpu = f"tid={list(thread)} ctaid={list(block)}" + (f": {e}" if str(e) else "")
        return make_kernel_error(
            f"{type(e).__name__} in kernel {self.name!r}, thread {thread} of block {block} "
            f"(warp {t.warp}, lane {t.lane}), at {describe(site)}: {gpu}",
            e,
            kernel=self.name,
            block=block,
            thread=thread,
            location=location(*site),
        )

    def _timeout_error(self, t, e):
        running = {}
        lines = []
        if t is not None:
            site = traceback_site(e.__traceback__) if e is not None else ("<unknown>", 0)
            running[_xyz(t.idx)] = f"running at {location(*site)}"
            lines.append(f"thread {_xyz(t.idx)} was running at {describe(site)}")
        groups: dict = {}
        for other in getattr(self, "threads", []):
            if other is t or other.state == DONE:
                continue
            where = other.where()
            running[_xyz(other.idx)] = where
            groups.setdefault(where, []).append(other)
        for where, ts in groups.items():
            lines.append(f"{_threads_text(ts)} {where}")
        block = _xyz(self.blockIdx) if self.blockIdx is not None else None
        return KernelTimeoutError(
            f"kernel {self.name!r} did not finish within the time limit: no progress for {self.config.timeout_s} s "
            f"(block {block}): "
            + "; ".join(lines)
            + ". A loop that never ends, or one thread waiting for another to write memory (the simulator runs "
            "one thread at a time between barriers)? Raise the limit with "
            "gpukernels.sim.configure(timeout_s=...)",
            running=running,
            **self._err_kw(t, traceback_site(e.__traceback__) if e is not None else None),
        )
