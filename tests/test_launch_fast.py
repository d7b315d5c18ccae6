"""The launchers' fast path (gpukernels/_fastlaunch.py).

Without a GPU (the simulator), the fast path runs on fake device memory: arrays that expose only
``__cuda_array_interface__`` (a pointer, a shape, a typestr, strides, a stream) and a backend that records the
launches it is asked for instead of calling the driver. The lessons' real checks and plans run on them. Each
replayed launch must be the launch the plan itself makes for the same arrays (`expected`): same kernel, grid,
block, shared memory, numbers, and every data pointer pointing where the plan's would -- including views at an
offset, workspaces the plan allocates, and plans of several kernels.

The GPU tests at the end run the same comparison on the device, with Numba arrays, torch tensors and CuPy arrays.
"""

from __future__ import annotations

import ctypes
import importlib.util
import itertools
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpukernels
from gpukernels import LESSONS, _fastlaunch, _launch, cbr, matmul, softmax
from gpukernels._launch import Launch, LaunchError, Version
from gpukernels._tma import TensorMap
from gpukernels.check import version_inputs
from gpukernels.matmul._common import zero_kernel

from .conftest import GPU
from .test_errors import BAD, LESSON_OF

# ----------------------------------------------------------------------------------------------------------
# Fake device memory
# ----------------------------------------------------------------------------------------------------------

_NEXT = itertools.count(1)


class FakeDev:
    """A device array as another library would hand it over: only ``__cuda_array_interface__`` and the attributes
    the lessons' checks read. ``ptr`` is a made-up address (allocations 4 KiB apart, 256-byte aligned)."""

    def __init__(self, shape, dtype=np.float32, ptr=None, strides=None, stream=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.ptr = ptr if ptr is not None else next(_NEXT) * (1 << 32)
        self._strides = strides
        self.stream = stream

    @classmethod
    def like(cls, x, **kw):
        return cls(np.shape(x), np.asarray(x).dtype, **kw)

    @property
    def strides(self):
        if self._strides is not None:
            return self._strides
        st, acc = [], self.dtype.itemsize
        for n in reversed(self.shape):
            st.append(acc)
            acc *= n
        return tuple(reversed(st))

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": self._strides, "stream": self.stream}

    def is_c_contiguous(self):
        return self._strides is None or self._strides == FakeDev(self.shape, self.dtype).strides

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return FakeDev(shape, self.dtype, self.ptr)

    def copy_to_host(self, *a, **k):
        return np.zeros(self.shape, self.dtype)


def _is_workspace(a):
    """An array a plan allocated itself (the simulator's FakeCUDAArray, or on a GPU a Numba device array)."""
    return not isinstance(a, FakeDev) and hasattr(a, "nbytes") and hasattr(a, "shape")


class FakeBackend:
    """Records instead of launching. Kernels are numbered as they are first seen; a workspace (an array the plan
    allocated) gets a made-up pointer far from every FakeDev."""

    def __init__(self):
        self.kernels: list = []
        self.blocks: dict = {}  # params address -> (ctypes values, which are pointers)
        self.launched: list = []  # (kernel, grid, block, shared, stream, [values])
        self.checked: list = []  # launches the checked path made (Launch objects)
        self.waits: list = []
        self.workspace: dict = {}  # id(workspace array) -> pointer
        self.allocs: list = []
        self.graph_list: list = []  # what each graph replays
        self.graph_launches: list = []
        self.destroyed: list = []

    def context(self):
        return 7

    def kernel_id(self, kernel):
        for i, k in enumerate(self.kernels):  # numbered from 1: a function handle is never NULL
            if k is kernel:
                return i + 1
        self.kernels.append(kernel)
        return len(self.kernels)

    def ptr_of(self, arr):
        if isinstance(arr, FakeDev):
            return arr.ptr
        return self.workspace.setdefault(id(arr), (1 << 60) + len(self.workspace) * (1 << 32))

    def template(self, launch):
        if any(isinstance(a, TensorMap) for a in launch.args):  # as numba_template: a kernel taking tensor maps
            return None  # has argument extensions (which the simulator's jit drops), and is never replayed
        items, pointers, arrays = [], set(), []
        for a in launch.args:
            if isinstance(a, FakeDev) or _is_workspace(a):
                ptr = self.ptr_of(a)
                pointers.add(len(items))
                arrays.append((len(items), ptr, ptr + a.nbytes, ptr, a))
                items.append(ptr)
            elif isinstance(a, (int, np.integer)):
                items.append(int(a))
            else:
                items.append(ctypes.c_double(a))
        params, keep = _fastlaunch.pack_params(items, pointers)
        self.blocks[params] = (keep, pointers)
        fixed = ((self.kernel_id(launch.kernel),) + _fastlaunch.dims3(launch.grid) + _fastlaunch.dims3(launch.block)
                 + (launch.shared_bytes,))
        return _fastlaunch.LaunchTemplate(fixed, params, keep, [(keep[i], lo, hi, p, a) for i, lo, hi, p, a in arrays])

    @staticmethod
    def prepare(fixed, params):
        return fixed, params

    def launch(self, prepared, stream):
        fixed, params = prepared
        keep, pointers = self.blocks[params]
        values = [self.decode(v.value, i in pointers) for i, v in enumerate(keep[:-1])]
        self.launched.append((self.kernels[fixed[0] - 1], fixed[1:4], fixed[4:7], fixed[7], stream, values))

    def decode(self, value, is_pointer):
        if is_pointer and value in self.workspace.values():
            return "workspace"
        return value

    # CUDA graphs: a graph is the decoded launches as they were when it was built; replaying it records them again
    graphs_work = True
    capture_streams: set = set()

    def capturing(self, stream):
        return stream in self.capture_streams

    def build_graph(self, launches):
        if not self.graphs_work:
            return None
        before = len(self.launched)
        for prepared in launches:
            self.launch(prepared, None)
        snapshot = self.launched[before:]
        del self.launched[before:]
        self.graph_list.append(snapshot)
        return len(self.graph_list)  # a handle: never 0

    def graph_launch(self, exe, stream):
        assert exe not in self.destroyed
        self.graph_launches.append(exe)
        self.launched.extend((k, g, b, sh, stream, vals) for k, g, b, sh, _, vals in self.graph_list[exe - 1])

    def destroy_graph(self, exe):
        self.destroyed.append(exe)

    def checked_launch(self, launch, numba_stream):
        self.checked.append(launch)

    def wait(self, stream, producer):
        self.waits.append((stream, producer))

    def alloc(self, shape, dtype):
        out = FakeDev(shape, dtype)
        self.allocs.append(out)
        return out


def expected(backend, version, args, out, params=None):
    """What the plan itself launches for these arrays, decoded like `FakeBackend.launch` decodes a replay."""
    got = []
    for launch in version.launches(*args, out=out, **(params or {})):
        values = []
        for a in launch.args:
            if isinstance(a, FakeDev):
                values.append(a.ptr)
            elif _is_workspace(a):
                values.append("workspace")
            elif isinstance(a, (int, np.integer)):
                values.append(int(a))
            else:
                values.append(float(a))
        got.append((launch.kernel, _fastlaunch.dims3(launch.grid), _fastlaunch.dims3(launch.block),
                    launch.shared_bytes, values))
    return got


@pytest.fixture
def fake(monkeypatch):
    """The fast path switched on, over fake memory and the recording backend."""
    backend = FakeBackend()
    real = _launch._as_device_array
    monkeypatch.setattr(_launch, "_as_device_array", lambda x: x if isinstance(x, FakeDev) else real(x))
    monkeypatch.setattr(_fastlaunch, "BACKEND", backend)
    monkeypatch.setattr(_fastlaunch, "ENABLED", True)
    _fastlaunch.clear()
    yield backend
    _fastlaunch.clear()


def fake_inputs(lesson, shape, seed=0, name=None):
    """Fake device arrays like the lesson's inputs at ``shape``, as version ``name`` takes them (attention's
    tensor-core steps: float16)."""
    inputs = LESSONS[lesson].make_inputs(shape, seed)
    return [FakeDev.like(x) for x in (version_inputs(lesson, name, inputs) if name else inputs)]


def out_for(lesson, args):
    if lesson in ("matmul", "tensor_core"):
        return FakeDev((args[0].shape[0], args[1].shape[1]))
    if lesson == "cbr":
        return FakeDev(cbr.out_shape(args[0].shape, args[1].shape, 1))
    if lesson == "attention":  # (B, H, Sq, D)
        return FakeDev(args[0].shape[:3] + args[2].shape[3:])
    return FakeDev(args[0].shape)


def replayed(backend, n):
    return [(k, g, b, sh, vals) for k, g, b, sh, _, vals in backend.launched[-n:]] if n else []


# ----------------------------------------------------------------------------------------------------------
# Every version of every lesson: the replay is the plan's launch
# ----------------------------------------------------------------------------------------------------------

ALL = [pytest.param(lesson, name, id=f"{lesson}-{name}", marks=pytest.mark.xdist_group(f"{lesson}.{name}"))
       for lesson, mod in LESSONS.items() for name in mod.VERSIONS]
# Small shapes, and one per lesson that makes a dispatcher choose a plan of several kernels (split-K's zero pass;
# softmax's two-pass split_row for few long rows).
SHAPES = {"matmul": [(64, 64, 64), (33, 17, 45), (256, 256, 4096)], "softmax": [(64, 1024), (7, 33), (4, 65536)],
          "cbr": [(1, 16, 16, 16, 16, 3, 3), (2, 3, 7, 9, 5, 3, 3)],
          "tensor_core": [(64, 64, 64), (33, 17, 45), (1024, 1024, 1024)],  # aligned (cp.async), not, many tiles
          # few queries (optimized: fused_rows), many tiles (optimized: tiled), D = 80 (not a power of two); naive's
          # plan of several kernels (scores, the softmax lesson's, P V) with its scratch S
          "attention": [(1, 2, 5, 40, 64), (4, 8, 256, 128, 128), (1, 3, 33, 20, 80)]}


@pytest.mark.parametrize("lesson,name", ALL)
def test_replay_matches_the_plan(fake, lesson, name):
    version = LESSONS[lesson].VERSIONS[name]
    for shape in SHAPES[lesson]:
        first = fake_inputs(lesson, shape, name=name)
        never = _fastlaunch.STATS.get("uncached: a launch the fast path cannot replay", 0)
        version(*first, out=out_for(lesson, first))  # a miss: the checked path runs and is recorded
        if _fastlaunch.STATS.get("uncached: a launch the fast path cannot replay", 0) > never:
            # a kernel taking tensor maps (which hold the arrays' addresses): every call takes the checked path
            assert any(isinstance(a, TensorMap) for la in fake.checked for a in la.args), f"{lesson}.{name} {shape}"
            continue
        assert _fastlaunch.STATS.get("miss", 0) >= 1, _fastlaunch.STATS
        for _ in range(2):  # new arrays, same configuration: hits
            args, out = fake_inputs(lesson, shape, name=name), None
            out = out_for(lesson, args)
            hits = _fastlaunch.STATS.get("hit", 0)
            assert version(*args, out=out) is out
            assert _fastlaunch.STATS["hit"] == hits + 1
            want = expected(fake, version, args, out)
            assert replayed(fake, len(want)) == want, f"{lesson}.{name} {shape}"


def test_multi_kernel_plans_are_replayed_whole(fake):
    """split-K: the zero pass, then the split kernel; softmax few long rows: two kernels sharing a workspace."""
    a, b = FakeDev((256, 4096)), FakeDev((4096, 256))
    matmul.optimized(a, b, out=FakeDev((256, 256)))
    a, b, c = FakeDev((256, 4096)), FakeDev((4096, 256)), FakeDev((256, 256))
    matmul.optimized(a, b, out=c)
    want = expected(fake, matmul.optimized, (a, b), c)
    assert len(want) == 2 and want[0][0] is zero_kernel
    assert replayed(fake, 2) == want
    x = FakeDev((4, 65536))
    softmax.optimized(x, out=FakeDev((4, 65536)))
    x, y = FakeDev((4, 65536)), FakeDev((4, 65536))
    softmax.optimized(x, out=y)
    want = expected(fake, softmax.optimized, (x,), y)
    assert len(want) == 2 and "workspace" in want[0][4] and "workspace" in want[1][4]
    assert replayed(fake, 2) == want


def test_plans_of_several_kernels_replay_as_one_graph(fake):
    """The second call with the same pointers captures the plan's launches into a graph; later calls with those
    pointers launch that graph, which replays exactly the plan's launches for them. New pointers launch kernel by
    kernel (and are captured when they come back)."""
    x, y = FakeDev((4, 65536)), FakeDev((4, 65536))
    softmax.optimized(x, out=y)  # a miss: the checked path
    want = expected(fake, softmax.optimized, (x,), y)
    assert len(want) == 2
    softmax.optimized(x, out=y)  # first hit with these pointers: kernel by kernel
    assert fake.graph_list == [] and replayed(fake, 2) == want
    for n in range(3):  # second and later: one graph, built once
        softmax.optimized(x, out=y)
        assert len(fake.graph_list) == 1 and fake.graph_launches == [1] * (n + 1)
        assert replayed(fake, 2) == want
    assert _fastlaunch.STATS["graph"] == 3
    # a plan without a workspace (split-K) is one entry for every stream: its graph goes to the call's stream
    a, b, c = FakeDev((256, 4096)), FakeDev((4096, 256)), FakeDev((256, 256))
    matmul.optimized(a, b, out=c)  # the miss
    for s in (0, 0, 5, 6):
        matmul.optimized(a, b, out=c, stream=s)
        assert replayed(fake, 2) == expected(fake, matmul.optimized, (a, b), c)
    assert fake.graph_launches[-2:] == [2, 2] and [r[4] for r in fake.launched[-2:]] == [6, 6]
    fake.graph_list.pop()
    x2, y2 = FakeDev((4, 65536)), FakeDev((4, 65536))  # other pointers: never the first graph
    for _ in range(2):
        softmax.optimized(x2, out=y2)
        assert replayed(fake, 2) == expected(fake, softmax.optimized, (x2,), y2)
    assert len(fake.graph_list) == 2
    softmax.optimized(x, out=y)
    assert fake.graph_launches[-1] == 1 and replayed(fake, 2) == want
    # single-kernel plans never make graphs
    a = FakeDev((64, 1024))
    for _ in range(3):
        softmax.naive(a, out=FakeDev((64, 1024)))
    assert len(fake.graph_list) == 2


def test_graphs_are_bounded_and_destroyed(fake, monkeypatch):
    monkeypatch.setattr(_fastlaunch, "MAX_GRAPHS", 2)
    pairs = [(FakeDev((4, 65536)), FakeDev((4, 65536))) for _ in range(3)]
    softmax.optimized(*pairs[0][:1], out=pairs[0][1])  # the miss
    for x, y in pairs:
        for _ in range(2):
            softmax.optimized(x, out=y)
            assert replayed(fake, 2) == expected(fake, softmax.optimized, (x,), y)
    assert len(fake.graph_list) == 3 and fake.destroyed == [1]  # the third graph evicted the first
    x, y = pairs[0]
    for _ in range(2):  # the first pointers again: seen once more, then captured anew
        softmax.optimized(x, out=y)
        assert replayed(fake, 2) == expected(fake, softmax.optimized, (x,), y)
    assert len(fake.graph_list) == 4 and fake.destroyed == [1, 2]
    _fastlaunch.clear()
    assert sorted(fake.destroyed) == [1, 2, 3, 4]


def test_no_graph_while_the_stream_is_captured(fake):
    """Inside the caller's stream capture (torch.cuda.graph) the launches are the caller's graph's nodes."""
    fake.capture_streams = {9}
    a, b, c = FakeDev((256, 4096)), FakeDev((4096, 256)), FakeDev((256, 256))
    matmul.optimized(a, b, out=c, stream=9)  # the miss
    for _ in range(4):
        matmul.optimized(a, b, out=c, stream=9)
        assert replayed(fake, 2) == expected(fake, matmul.optimized, (a, b), c)
    assert fake.graph_list == [] and [r[4] for r in fake.launched[-2:]] == [9, 9]
    matmul.optimized(a, b, out=c, stream=3)  # not captured: now a graph (the pointers were seen)
    assert fake.graph_launches == [1]


def test_a_plan_that_cannot_be_captured_launches_kernel_by_kernel(fake, monkeypatch):
    fake.graphs_work = False
    monkeypatch.setattr(_fastlaunch, "GRAPHS", True)
    x, y = FakeDev((4, 65536)), FakeDev((4, 65536))
    softmax.optimized(x, out=y)  # the miss
    for _ in range(4):
        softmax.optimized(x, out=y)
        assert replayed(fake, 2) == expected(fake, softmax.optimized, (x,), y)
    assert fake.graph_launches == [] and "graph" not in _fastlaunch.STATS


def test_views_at_an_offset_follow_their_array(fake):
    """cbr's plan passes x.reshape(x.size): a view of x, whose pointer must follow x's from call to call."""
    shape = (1, 16, 16, 16, 16, 3, 3)
    args = fake_inputs("cbr", shape)
    cbr.optimized(*args, out=out_for("cbr", args))
    args = fake_inputs("cbr", shape)
    out = out_for("cbr", args)
    before = len(fake.launched)
    cbr.optimized(*args, out=out)
    # batch 1 takes split_c (bias fill, the sliced convolution, the ReLU pass): the convolution reads x through
    # the view, and every pointer of every launch is one of this call's arrays
    launches = replayed(fake, len(fake.launched) - before)
    ptrs = {a.ptr for a in args} | {out.ptr}
    conv = [vals for _, _, _, _, vals in launches if args[0].ptr in vals]
    assert conv and conv[0][:4] == [args[0].ptr, args[1].ptr, args[2].ptr, out.ptr]
    assert all(v in ptrs for _, _, _, _, vals in launches for v in vals if isinstance(v, int) and v > 2**32)


def test_out_none_allocates_per_call(fake):
    x = FakeDev((64, 1024))
    first = softmax.optimized(x)
    second = softmax.optimized(FakeDev((64, 1024)))
    assert _fastlaunch.STATS == {"miss": 1, "hit": 1}
    assert first is not second and second is fake.allocs[-1]
    assert replayed(fake, 1)[0][4][-1] == second.ptr


# ----------------------------------------------------------------------------------------------------------
# The key: what makes two calls the same configuration
# ----------------------------------------------------------------------------------------------------------


def test_key_separates_what_the_checks_and_plans_read(fake):
    v = matmul.optimized
    base = lambda: (FakeDev((64, 64)), FakeDev((64, 64)))  # noqa: E731
    v(*base(), out=FakeDev((64, 64)))
    assert _fastlaunch.STATS == {"miss": 1}
    v(*base(), out=FakeDev((64, 64)))
    assert _fastlaunch.STATS == {"miss": 1, "hit": 1}
    # Each of these differs from the recorded call in one thing a check or plan reads: each is a miss.
    variants = [
        lambda: ((FakeDev((64, 32)), FakeDev((32, 64))), FakeDev((64, 64))),  # a shape
        lambda: ((FakeDev((64, 64), ptr=next(_NEXT) * (1 << 32) + 4), FakeDev((64, 64))), FakeDev((64, 64))),  # alignment
        lambda: ((FakeDev((64, 64)), FakeDev((64, 64))), None),  # out not given
        lambda: ((FakeDev((64, 64), strides=(4, 256)), FakeDev((64, 64))), FakeDev((64, 64))),  # strides
    ]
    misses = _fastlaunch.STATS["miss"]
    for make in variants:
        args, out = make()
        try:
            v(*args, out=out)
        except LaunchError:
            pass  # non-contiguous: refused by the checked path, and so never recorded
    assert _fastlaunch.STATS["miss"] == misses + 3
    assert _fastlaunch.STATS["hit"] == 1


def test_key_includes_parameters(fake):
    shape = (1, 4, 8, 8, 4, 3, 3)
    for padding in (1, 0, 1, 2, 0):
        args = fake_inputs("cbr", shape)
        out = FakeDev(cbr.out_shape(args[0].shape, args[1].shape, padding))
        hits = _fastlaunch.STATS.get("hit", 0)
        cbr.fused_direct(*args, out=out, padding=padding)
        if _fastlaunch.STATS.get("hit", 0) > hits:
            assert replayed(fake, 1) == expected(fake, cbr.fused_direct, args, out, {"padding": padding})
    assert _fastlaunch.STATS == {"miss": 3, "hit": 2}


def test_cache_is_bounded(fake, monkeypatch):
    monkeypatch.setattr(_fastlaunch, "MAX_ENTRIES", 3)
    for n in range(1, 7):
        softmax.naive(FakeDev((n, 8)), out=FakeDev((n, 8)))
    assert len(softmax.naive._fast) == 3


def test_aliased_inputs_are_not_recorded(fake):
    """matmul(a, a): two inputs on the same memory. Which one a view came from would be ambiguous, so the call
    takes the checked path and is not recorded -- and a later call with separate arrays is not misled."""
    a = FakeDev((32, 32))
    matmul.tiled(a, a, out=FakeDev((32, 32)))
    assert _fastlaunch.STATS == {"uncached: arguments share memory": 1}
    a, b, c = FakeDev((32, 32)), FakeDev((32, 32)), FakeDev((32, 32))
    matmul.tiled(a, b, out=c)
    matmul.tiled(a, b, out=c)
    assert replayed(fake, 1)[0][4] == [a.ptr, b.ptr, c.ptr]


def test_host_arrays_take_the_checked_path(fake):
    x = softmax.make_inputs((4, 8), 0)[0]
    assert np.allclose(softmax.naive(x), softmax.reference(x), atol=1e-6)  # copied over and back, as ever
    assert _fastlaunch.STATS == {"uncached: not device arrays": 1} and fake.checked == []


# ----------------------------------------------------------------------------------------------------------
# Checks on every call: errors, overlap
# ----------------------------------------------------------------------------------------------------------


GOOD = {"matmul": [(4, 3), (3, 5)], "softmax": [(2, 3)], "cbr": [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]}


def _fake_args(value):
    if isinstance(value, np.ndarray):
        return FakeDev.like(value)
    return value


@pytest.mark.parametrize("label,call,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_the_same_error_through_the_fast_path(fake, label, call, fragments):
    """Every error case of test_errors.py, with device arrays, after a good call of the same lesson was recorded:
    the same LaunchError, with the same words, as the checked path gives."""
    mod = LESSON_OF[label.split()[0]]
    good = lambda: [FakeDev(s) for s in GOOD[label.split()[0]]]  # noqa: E731

    class Device:
        """Wraps a version so that the BAD case's host arrays arrive as device arrays."""

        def __init__(self, v):
            self.v = v

        def __call__(self, *args, out=None, **params):
            return self.v(*[_fake_args(a) for a in args], out=_fake_args(out) if out is not None else None,
                          **params)

    for name, version in mod.VERSIONS.items():
        version(*good())
        with pytest.raises(LaunchError) as err:
            call(Device(version))
        for fragment in fragments:
            assert fragment in str(err.value), f"{mod.__name__}.{name}: {fragment!r} not in {err.value}"


def test_overlap_is_refused_on_a_hit_too(fake):
    x = FakeDev((64, 64))
    softmax.optimized(x, out=FakeDev((64, 64)))
    with pytest.raises(LaunchError, match="out shares memory with x"):
        softmax.optimized(x, out=x)  # the key of the recorded call: a hit, and the pointers checked
    y = FakeDev((64, 64))
    inside = FakeDev((64, 64), ptr=y.ptr + 4 * 64)  # out starts one row into y
    with pytest.raises(LaunchError, match="out shares memory with x"):
        softmax.optimized(y, out=inside)
    a, b = FakeDev((64, 64)), FakeDev((64, 64))
    matmul.tiled(a, b, out=FakeDev((64, 64)))
    with pytest.raises(LaunchError, match="out shares memory with b"):
        matmul.tiled(a, b, out=b)
    assert _fastlaunch.STATS["miss"] == 2


def test_overlap_checked_path(monkeypatch):
    """The checked path (the simulator's, and a GPU's miss) refuses it the same way, for host and device arrays."""
    x = np.ones((8, 8), np.float32)
    from numba import cuda

    d = cuda.to_device(x)
    for version in softmax.VERSIONS.values():
        with pytest.raises(LaunchError, match="out shares memory with x"):
            version(x, out=x)
        with pytest.raises(LaunchError, match="out shares memory with x"):
            version(d, out=d)
    a = np.ones((8, 8), np.float32)
    with pytest.raises(LaunchError, match="out shares memory with a"):
        matmul.naive(a, np.ones((8, 8), np.float32), out=a)
    big = np.zeros((2, 8, 8), np.float32)
    matmul.naive(big[0], np.ones((8, 8), np.float32), out=big[1])  # neighbours, not overlapping: fine


def test_inplace_version_may_write_its_input():
    """A version marked ``inplace`` (an elementwise kernel) accepts out = its input, and only that."""
    from numba import cuda

    @cuda.jit
    def double(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = 2 * x[i]

    def check(x):
        x = _launch.check_array("x", x, 1, "(N,)")
        return (x,), {}, x.shape

    def plan(x, y):
        return [Launch(double, (_launch.ceil_div(x.size, 32),), (32,), (x, y))]

    v = Version("double", "test", plan, check, inplace=True)
    x = np.arange(64, dtype=np.float32)
    assert v(x, out=x) is x and x[3] == 6
    with pytest.raises(LaunchError, match="shares memory"):
        v(x[1:], out=x[:-1])


# ----------------------------------------------------------------------------------------------------------
# Reading array interfaces
# ----------------------------------------------------------------------------------------------------------


def test_read_cai():
    x = FakeDev((3, 4), ptr=4096, stream=9)
    assert _fastlaunch.read_array(x) == (4096, (3, 4), "<f4", None, 9, 4096, 4096 + 48)
    t = FakeDev((3, 4), ptr=4096, strides=(4, 12))  # column-major: spans the same 48 bytes
    assert _fastlaunch.read_array(t)[3:] == ((4, 12), None, 4096, 4096 + 48)
    assert _fastlaunch.read_array(FakeDev((0, 4), ptr=4096))[5:] == (4096, 4096)
    assert _fastlaunch.read_array(np.ones(3)) is None  # host arrays have no reader

    class Masked(FakeDev):
        @property
        def __cuda_array_interface__(self):
            return dict(super().__cuda_array_interface__, mask=object())

    assert _fastlaunch.read_array(Masked((3,))) is None
    assert _fastlaunch.read_array(FakeDev((3,), stream=0)) is None  # stream 0 is forbidden: the checked path says so


def test_read_torch_without_torch(monkeypatch):
    """The torch reader, on a stand-in for torch: the fields of torch's interface, and torch's current stream."""
    import types

    fake_torch = types.ModuleType("torch")
    fake_torch.float32, fake_torch.float64 = "f32", "f64"
    for name in ("float16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        setattr(fake_torch, name, name)
    fake_torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0xAB00 + device)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(_fastlaunch, "_TORCH_TYPESTR", {})

    class Tensor:
        is_cuda, requires_grad, dtype = True, False, "f32"

        def __init__(self, shape, strides=None):
            self.shape, self._strides = shape, strides

        def element_size(self):
            return 4

        def is_contiguous(self):
            return self._strides is None

        def stride(self):
            return self._strides

        def data_ptr(self):
            return 8192

        def get_device(self):
            return 1

    Tensor.__module__ = "torch"
    assert _fastlaunch.read_array(Tensor((2, 3))) == (8192, (2, 3), "<f4", None, 0xAB01, 8192, 8192 + 24)
    assert _fastlaunch.read_array(Tensor((2, 3), strides=(1, 2)))[3] == (4, 8)
    t = Tensor((2, 3))
    t.requires_grad = True
    assert _fastlaunch.read_array(t) is None  # the checked path gives torch's own error


NUMBA_LAYOUT = textwrap.dedent("""
    # Real numba-cuda types and its own argument marshalling (no GPU: memory is made up, nothing is compiled).
    import ctypes, functools, importlib.util, sys, types
    import numpy as np
    from numba import cuda
    from numba.cuda.cudadrv import devicearray
    from numba.cuda.dispatcher import _Kernel

    spec = importlib.util.spec_from_file_location("fl", sys.argv[1])
    fl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fl)

    class Mem:
        def __init__(self, p):
            self.device_pointer = p
            self.device_ctypes_pointer = ctypes.c_size_t(p)

    def dev(shape, p):
        st = tuple(int(s) for s in np.empty(shape, np.float32).strides)
        return devicearray.DeviceNDArray(shape, st, np.float32, gpu_data=Mem(p))

    @cuda.jit
    def k(x, y, n, f):
        pass

    x, y = dev((4, 5), 1 << 20), dev((20,), 1 << 21)
    args = (x, y, 7, np.float32(0.5))
    argtypes = tuple(k.typeof_pyval(a) for a in args)

    class Stub:  # a _Kernel's marshalling, without compiling one
        debug = cooperative = launch_config_sensitive = False
        extensions = []
        argument_types = argtypes
        _codelibrary = type("L", (), {"get_cufunc": lambda self: type("F", (), {"handle": 99})()})()
    stub = Stub()
    stub._prepare_args = functools.partial(_Kernel._prepare_args, stub)
    k.overloads[argtypes] = stub

    class Backend:
        def function(self, h):
            return h

    launch = types.SimpleNamespace(kernel=k, args=args, grid=(3,), block=(32, 2), shared_bytes=16)
    t = fl.numba_template(launch, Backend())
    numba_items = []
    for ty, v in zip(argtypes, args):
        _Kernel._prepare_args(stub, ty, v, 0, [], numba_items)
    plain = [v.value if isinstance(v, ctypes._SimpleCData) else v for v in numba_items]
    ours = [v.value for v in t.keep[:-1]]
    assert ours == plain, (ours, plain)
    sizes = [ctypes.sizeof(v) for v in t.keep[:-1]]
    assert sizes == [8] * 9 + [8] * 7 + [8, 4], sizes  # arrays: 5 + 2 ndim intptr; n: int64; f: float32
    # the parameter block is an array of pointers to those values
    block = (ctypes.c_void_p * 18).from_address(t.params)
    assert [block[i] for i in range(18)] == [ctypes.addressof(v) for v in t.keep[:-1]]
    assert t.fixed == (99, 3, 1, 1, 32, 2, 1, 16), t.fixed
    assert [(lo, hi, p) for _, lo, hi, p, _ in t.arrays] == [(1 << 20, (1 << 20) + 80, 1 << 20), (1 << 21, (1 << 21) + 80, 1 << 21)]
    t.arrays[0][0].value = 12345  # the slot is the data pointer in the block
    assert ctypes.c_uint64.from_address(block[4]).value == 12345
    print("ok")
""")


def test_parameter_block_matches_numbas_marshalling(tmp_path):
    """`numba_template` lays a kernel's parameters out exactly as numba-cuda's own ``_Kernel._prepare_args``
    (run in a child process with the real numba-cuda, not the simulator)."""
    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed")
    script = tmp_path / "layout.py"
    script.write_text(NUMBA_LAYOUT)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    env.pop("GPUKERNELS_DEVICE", None)
    done = subprocess.run([sys.executable, str(script), _fastlaunch.__file__], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


# ----------------------------------------------------------------------------------------------------------
# On a GPU: the fast path against the checked path, with every kind of array
# ----------------------------------------------------------------------------------------------------------


def _kinds():
    from numba import cuda

    kinds = {"numba": (cuda.to_device, lambda d: d.copy_to_host())}
    try:
        import torch

        kinds["torch"] = (lambda x: torch.from_numpy(x).cuda(), lambda t: t.cpu().numpy())
    except ImportError:
        pass
    try:
        import cupy

        kinds["cupy"] = (cupy.asarray, cupy.asnumpy)
    except ImportError:
        pass
    return kinds


@pytest.mark.gpu
@pytest.mark.parametrize("lesson,name", ALL)
def test_gpu_fast_path_gives_the_checked_result(lesson, name, seed):
    """Three calls per shape and array kind (a miss, then hits on fresh arrays): each result right, and the hits
    really hits."""
    from gpukernels.check import case, compare

    from gpukernels._tma import TensorMap

    mod, version = LESSONS[lesson], LESSONS[lesson].VERSIONS[name]
    assert _fastlaunch.ENABLED, "the fast path should be on on a GPU"
    for kind, (to, back) in _kinds().items():
        for shape in SHAPES[lesson]:
            hits = _fastlaunch.STATS.get("hit", 0)
            declined = _fastlaunch.STATS.get("uncached: a launch the fast path cannot replay", 0)
            for i in range(3):
                inputs, ref, tol = case(lesson, name, shape, seed + i)
                out = to(np.full(ref.shape, np.nan, np.float32))
                assert version(*[to(x) for x in inputs], out=out) is out
                check = compare(back(out), ref, tol)
                assert check.ok, f"{kind} {lesson}.{name} {shape} call {i}: {check}"
            launches = version.launches(*inputs)
            if any(isinstance(arg, TensorMap) for la in launches for arg in la.args):
                # a tensor map holds its tensor's address, encoded by the driver at each launch: the fast path,
                # which only rewrites data pointers, declines such launches (gpukernels._tma says so), every call
                assert _fastlaunch.STATS.get("hit", 0) == hits, (kind, shape, _fastlaunch.STATS)
                assert _fastlaunch.STATS.get("uncached: a launch the fast path cannot replay", 0) == declined + 3
            else:
                assert _fastlaunch.STATS.get("hit", 0) >= hits + 2, (kind, shape, _fastlaunch.STATS)


MULTI = {"softmax split_row": ("softmax", "split_row", (4, 65536)),
         "matmul split_k": ("matmul", "optimized", (256, 256, 4096)),
         "cbr split_c": ("cbr", "optimized", (1, 16, 16, 16, 16, 3, 3))}


def _write(kind, dst, src):
    """New values into the same device memory (the pointers stay: the graph replays)."""
    if kind == "numba":
        dst.copy_to_device(src)
    elif kind == "torch":
        import torch

        dst.copy_(torch.from_numpy(src))
    else:
        dst.set(src)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(MULTI))
def test_gpu_graph_replay_of_several_kernels(case, seed):
    """The same arrays called again and again (the graph is captured on the second call, launched from the
    third), new values written into them before every call: every result right, with every kind of array; for
    torch, on a non-default stream right after a slow producer there."""
    from gpukernels.check import TOLERANCE, compare

    lesson, name, shape = MULTI[case]
    mod, version = LESSONS[lesson], LESSONS[lesson].VERSIONS[name]
    for kind, (to, back) in _kinds().items():
        host = mod.make_inputs(shape, seed)
        ref = mod.reference(*host)
        dev = [to(x) for x in host]
        out = to(np.full(ref.shape, np.nan, np.float32))
        graphs = _fastlaunch.STATS.get("graph", 0)
        side = None
        if kind == "torch":
            import torch

            side, busy = torch.cuda.Stream(), torch.randn(4096, 4096, device="cuda")
        for i in range(5):
            host = mod.make_inputs(shape, seed + 1 + i)
            ref = mod.reference(*host)
            if side is None:
                for d, x in zip(dev, host):
                    _write(kind, d, x)
                _write(kind, out, np.full(ref.shape, np.nan, np.float32))
                version(*dev, out=out)
            else:
                torch.cuda.synchronize()
                with torch.cuda.stream(side):
                    torch.mm(busy, busy)  # milliseconds of work before the inputs are written
                    for d, x in zip(dev, host):
                        _write(kind, d, x)
                    out.fill_(float("nan"))
                    version(*dev, out=out)
                    result = out.clone()  # the consumer, on the same stream
                torch.cuda.synchronize()
            got = back(out) if side is None else result.cpu().numpy()
            check = compare(got, ref, TOLERANCE[lesson])
            assert check.ok, f"{kind} {case} call {i}: {check}"
        assert _fastlaunch.STATS.get("graph", 0) >= graphs + 3, (kind, _fastlaunch.STATS)


@pytest.mark.gpu
@pytest.mark.timeout(900)  # the first case of a version compiles it (matmul's largest: ~20 s each)
@pytest.mark.parametrize("label,call,fragments,name", [
    # One case per version, in the xdist group of that version's other GPU tests (test_lessons, ALL above), so the
    # worker that compiled a version for those reuses it. One group per lesson put all 20 matmul versions' compiles
    # on one worker: the last ~7 minutes of a GPU suite run on the H200, after every other test had finished.
    pytest.param(*b, name, id=f"{b[0]}-{name}", marks=pytest.mark.xdist_group(f"{b[0].split()[0]}.{name}"))
    for b in BAD for name in LESSON_OF[b[0].split()[0]].VERSIONS])
def test_gpu_bad_input_same_error_after_a_hit(label, call, fragments, name):
    from numba import cuda

    mod = LESSON_OF[label.split()[0]]

    def dev(v):
        return cuda.to_device(v) if isinstance(v, np.ndarray) else v

    class Device:
        def __init__(self, v):
            self.v = v

        def __call__(self, *args, out=None, **params):
            return self.v(*[dev(a) for a in args], out=dev(out) if out is not None else None, **params)

    version = mod.VERSIONS[name]
    for _ in range(2):  # recorded, then replayed: the bad call comes after a hit
        version(*[cuda.to_device(np.ones(s, np.float32)) for s in GOOD[label.split()[0]]])
    with pytest.raises(LaunchError) as err:
        call(Device(version))
    for fragment in fragments:
        assert fragment in str(err.value), f"{mod.__name__}.{name}: {fragment!r} not in {err.value}"


@pytest.mark.gpu
def test_gpu_overlap_refused():
    from numba import cuda

    x = cuda.to_device(np.ones((64, 64), np.float32))
    softmax.optimized(x, out=cuda.device_array((64, 64), np.float32))
    softmax.optimized(x, out=cuda.device_array((64, 64), np.float32))  # recorded and replayed
    with pytest.raises(LaunchError, match="out shares memory with x"):
        softmax.optimized(x, out=x)


# ----------------------------------------------------------------------------------------------------------
# The ctypes calls into the driver, against a stand-in libcuda (compiled here when a C compiler is there)
# ----------------------------------------------------------------------------------------------------------

MOCK_LIBCUDA = r"""
#include <stdint.h>
#include <string.h>
static uint64_t values[64]; static int sizes[64]; static int nparams;
static void *capture; static int captured, graph_launches, destroyed; static uint64_t captured_values[64];
static unsigned dims[7]; static void *last_stream, *recorded_on, *waiting; static int launches;
void mock_sizes(int n, const int *s) { nparams = n; memcpy(sizes, s, n * sizeof(int)); }
uint64_t mock_value(int i) { return values[i]; }
unsigned mock_dim(int i) { return dims[i]; }
void *mock_stream(void) { return last_stream; }
void *mock_recorded_on(void) { return recorded_on; }
void *mock_waiting(void) { return waiting; }
int mock_launches(void) { return launches; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    if (!f || extra) return 400;  /* CUDA_ERROR_INVALID_HANDLE */
    unsigned d[7] = {gx, gy, gz, bx, by, bz, shared};
    memcpy(dims, d, sizeof d);
    last_stream = stream;
    uint64_t *into = stream && stream == capture ? captured_values : values;
    for (int i = 0; i < nparams; i++) { into[i] = 0; memcpy(&into[i], params[i], sizes[i]); }
    if (into == captured_values) { captured++; return 0; }
    launches++;
    return 0;
}
/* graphs: launches on the capturing stream are recorded, not run; a graph launch replays the last one recorded */
int mock_captured(void) { return captured; }
int mock_graph_launches(void) { return graph_launches; }
int mock_destroyed(void) { return destroyed; }
int cuStreamCreate(void **s, unsigned flags) { *s = (void *)0xC5; return flags == 1 ? 0 : 1; }
int cuStreamIsCapturing(void *s, int *status) { *status = s && s == capture; return 0; }
int cuStreamBeginCapture_v2(void *s, int mode) { if (capture || mode != 2) return 900; capture = s; return 0; }
int cuStreamEndCapture(void *s, void **graph) { if (s != capture) return 901; capture = 0; *graph = (void *)0x6A; return 0; }
int cuGraphInstantiateWithFlags(void **exe, void *graph, unsigned long long flags) { *exe = (void *)0xE8; return graph == (void *)0x6A ? 0 : 400; }
int cuGraphDestroy(void *graph) { return 0; }
int cuGraphExecDestroy(void *exe) { destroyed++; return 0; }
int cuGraphLaunch(void *exe, void *stream) {
    if (exe != (void *)0xE8) return 400;
    last_stream = stream; memcpy(values, captured_values, sizeof values); graph_launches++; return 0;
}
int cuCtxGetCurrent(void **ctx) { *ctx = (void *)0x1234; return 0; }
int cuEventCreate(void **ev, unsigned flags) { *ev = (void *)0xE0; return flags == 2 ? 0 : 1; }
int cuEventRecord(void *ev, void *s) { recorded_on = s; return ev ? 0 : 400; }
int cuStreamWaitEvent(void *s, void *ev, unsigned flags) { waiting = s; return ev ? 0 : 400; }
int cuKernelGetFunction(void **f, void *k) { *f = (void *)((uintptr_t)k + 1); return 0; }
int cuGetErrorName(int rc, const char **name) { *name = rc == 400 ? "CUDA_ERROR_INVALID_HANDLE" : "?"; return 0; }
"""


@pytest.fixture(scope="module")
def mock_libcuda(tmp_path_factory):
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    d = tmp_path_factory.mktemp("libcuda")
    (d / "mock.c").write_text(MOCK_LIBCUDA)
    lib = d / "libmockcuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(d / "mock.c")], check=True)
    return str(lib)


def test_driver_calls_through_ctypes(mock_libcuda):
    backend = _fastlaunch.CudaBackend(mock_libcuda)
    mock = ctypes.CDLL(mock_libcuda)
    mock.mock_value.restype = ctypes.c_uint64
    mock.mock_stream.restype = mock.mock_recorded_on.restype = mock.mock_waiting.restype = ctypes.c_void_p
    assert backend.context() == 0x1234
    func = backend.function(0x1000)
    assert func == 0x1001  # the CUfunction of the CUkernel
    # x: a 2-D array (meminfo, parent, nitems, itemsize, data, shape 2, strides 2), n: int64, f: float32
    items = [0, 0, 20, 4, 0xD000, 4, 5, 20, 4, ctypes.c_int64(7), ctypes.c_float(0.5)]
    params, keep = _fastlaunch.pack_params(items, {4})
    sizes = (ctypes.c_int * 11)(*([8] * 10 + [4]))
    mock.mock_sizes(11, sizes)
    backend.launch(backend.prepare((func, 3, 2, 1, 128, 1, 1, 64), params), 0x77)
    assert [mock.mock_dim(i) for i in range(7)] == [3, 2, 1, 128, 1, 1, 64]
    assert mock.mock_stream() == 0x77
    got = [mock.mock_value(i) for i in range(11)]
    assert got[:10] == [0, 0, 20, 4, 0xD000, 4, 5, 20, 4, 7]
    assert ctypes.c_float.from_buffer_copy(ctypes.c_uint32(got[10])).value == 0.5
    keep[4].value = 0xE000  # a new call's data pointer, written into the block
    backend.launch(backend.prepare((func, 1, 1, 1, 32, 1, 1, 0), params), 0)
    assert mock.mock_value(4) == 0xE000 and mock.mock_stream() is None
    backend.wait(0x55, 0x66)
    assert mock.mock_recorded_on() == 0x66 and mock.mock_waiting() == 0x55
    from numba.cuda.cudadrv.driver import CudaAPIError

    with pytest.raises(CudaAPIError, match="CUDA_ERROR_INVALID_HANDLE"):
        backend.launch(backend.prepare((0, 1, 1, 1, 1, 1, 1, 0), params), 0)
    assert mock.mock_launches() == 2


def test_graph_calls_through_ctypes(mock_libcuda):
    """Capture on a private stream, instantiate, launch on the call's stream, destroy: the driver calls as ctypes
    makes them (the stand-in records a launch on the capturing stream instead of running it)."""
    backend = _fastlaunch.CudaBackend(mock_libcuda)
    mock = ctypes.CDLL(mock_libcuda)
    mock.mock_value.restype = ctypes.c_uint64
    mock.mock_stream.restype = ctypes.c_void_p
    mock.mock_sizes(1, (ctypes.c_int * 1)(8))
    params, keep = _fastlaunch.pack_params([0xA000], {0})
    prepared = backend.prepare((0x1001, 1, 1, 1, 32, 1, 1, 0), params)
    launches = mock.mock_launches()
    exe = backend.build_graph([prepared, prepared])
    assert exe == 0xE8 and mock.mock_captured() == 2 and mock.mock_launches() == launches  # recorded, not run
    assert not backend.capturing(0xC5) and not backend.capturing(0)  # the capture has ended
    keep[0].value = 0xB000  # the graph keeps the parameters it was captured with
    backend.graph_launch(exe, 0x77)
    assert mock.mock_graph_launches() == 1 and mock.mock_stream() == 0x77 and mock.mock_value(0) == 0xA000
    backend.destroy_graph(exe)
    assert mock.mock_destroyed() == 1


def test_replay_through_the_driver_stand_in(fake, mock_libcuda, monkeypatch):
    """A whole hit through the real `CudaBackend` (on the stand-in): the fake templates, ctypes' calls."""
    backend = _fastlaunch.CudaBackend(mock_libcuda)
    monkeypatch.setattr(backend, "template", fake.template)  # (prepare and launch: the real ones)
    monkeypatch.setattr(backend, "checked_launch", fake.checked_launch)
    monkeypatch.setattr(_fastlaunch, "BACKEND", backend)
    mock = ctypes.CDLL(mock_libcuda)
    mock.mock_value.restype = ctypes.c_uint64
    mock.mock_sizes(2, (ctypes.c_int * 2)(8, 8))
    x, y = FakeDev((64, 64)), FakeDev((64, 64))
    softmax.naive(x, out=y)
    x, y = FakeDev((64, 64)), FakeDev((64, 64))
    before = mock.mock_launches()
    softmax.naive(x, out=y)
    assert mock.mock_launches() == before + 1 and _fastlaunch.STATS == {"miss": 1, "hit": 1}
    assert [mock.mock_value(0), mock.mock_value(1)] == [x.ptr, y.ptr]
