"""The launchers' fast path on a GPU: a call that repeats a configuration already seen goes below Numba's dispatcher.

Why it exists (docs/overhead.md has the lesson, measured): a launcher call spends its host time in stages --
argument checks, array conversion (``cuda.as_cuda_array`` on a torch tensor costs ~150 us on the H200 machine),
the plan, Numba's type dispatch of every argument (~30 us a launch) -- while a small kernel runs for a few
microseconds. The checks are what make a result trustworthy; the rest is the same work redone on every call.

So `Version.__call__` on a GPU comes here. A call is described by a *key*: the device context; for each argument
its type, shape, dtype (typestr), strides and the alignment of its data (``ptr % 16``: a plan may choose 16-byte
loads); the same for ``out``; and the parameters. Everything a lesson's check and plan look at is in the key, so

* a **miss** runs the full checked path (`Version._call`: the same checks, the same errors, Numba's own launch)
  and records what it launched, if it can (`record`);
* a **hit** has passed those checks already, for arguments exactly like these. It reads each argument's
  ``__cuda_array_interface__`` (or the same fields straight from a Numba array or a torch tensor, which is
  cheaper), checks that ``out`` does not overlap an input (pointers change from call to call), orders the launch
  after the streams the arrays name, writes the new data pointers into the kernels' parameter blocks and calls
  ``cuLaunchKernel`` once per launch of the plan.

What an entry holds, per launch of the plan: the ``CUfunction`` of the `_Kernel` Numba compiled for these argument
types, grid, block and dynamic shared memory, and the kernel's parameters laid out as Numba lays them out
(`numba_template`: an array is meminfo, parent, nitems, itemsize, data, shape..., strides...), built once. Only the
data pointers change: each one points into an argument at a fixed byte offset (a plan may pass a view such as
``x.reshape(x.size)``), or at a workspace the plan allocated, which the entry keeps (so an entry with a workspace
is also keyed by its stream: two streams never share one). An entry keeps no reference to the caller's arrays.

A plan's work must therefore all be in its launches: a later call with the same key replays the launches without
calling the plan again. (A workspace must be written by the plan's kernels before they read it -- softmax's
``split_row`` writes its (max, sum) pairs before its second kernel reads them.)

Plans of several kernels (split-K's zero pass, softmax's two passes over a workspace, CBR's bias / sliced
convolution / ReLU) pay the driver's launch once per kernel: on the H200 machine about 6 us each, so three
launches cost more than the project's whole budget. An entry of several launches therefore replays them as one CUDA
graph (`GraphCache`): the second time a call brings the same data pointers, the launches are captured once into
a graph on a private stream and instantiated; from then on a call with those pointers is one ``cuGraphLaunch``
on the call's stream. A graph holds the parameters it was captured with, so it is keyed by the pointers
(everything else is fixed by the entry's key); new pointers launch kernel by kernel, as before. A call whose
stream is being captured (torch's CUDA graphs) launches kernel by kernel too: its launches become nodes of the
caller's graph.

Streams. Every array names the stream its pending work is on: ``__cuda_array_interface__["stream"]`` (CuPy's
current stream, a Numba array's bound stream), a torch tensor torch's current stream. A launcher launches on
``stream=`` when given, else on the first array's stream, else on the legacy default stream; when an array's
stream differs from the launch stream, the launch stream waits for it with an event (asynchronous: no host
synchronisation, and capturable in a CUDA graph).

Nothing here runs in the simulator (``ENABLED`` is False there): `Version._call` is the simulator's path, as before.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
from typing import Any

#: Every `gpukernels._launch.Version` made (each adds itself): `clear` reaches all their recorded entries.
VERSIONS: list = []

__all__ = ["ENABLED", "STATS", "call", "stream_handle", "resolve_stream", "numba_stream", "read_array", "clear"]

#: On a GPU, unless GPUKERNELS_FAST_LAUNCH=0 (then every call takes the checked path: the "before" of the lesson).
ENABLED = False
#: Counts of what calls did: "hit", "miss" (recorded), "uncached" (checked path, nothing recorded), and why not.
STATS: dict[str, int] = {}
MAX_ENTRIES = 256  # per version: the oldest entry goes when a version has seen this many configurations
#: Replay plans of several kernels as one CUDA graph (GPUKERNELS_FAST_GRAPHS=0: kernel by kernel, the "before").
GRAPHS = os.environ.get("GPUKERNELS_FAST_GRAPHS", "1").strip().lower() not in ("0", "off", "no", "false")
MAX_GRAPHS = 4  # per entry: graphs for this many sets of pointers (the oldest is destroyed for a fifth)

_SCALARS = (int, float, bool, str, type(None))


def _count(what: str) -> None:
    STATS[what] = STATS.get(what, 0) + 1


# ----------------------------------------------------------------------------------------------------------
# Reading an array: (ptr, shape, typestr, strides, stream)
#   strides: as the interface gives them (None: C-contiguous); stream: the stream its pending work is on, or None.
#   `read_array` adds [lo, hi), the bytes it spans; a hit does not compute that: the key fixes shape and strides,
#   so the entry keeps each array's span as offsets from its pointer.
# ----------------------------------------------------------------------------------------------------------


def span(ptr: int, shape: tuple, strides: tuple | None, itemsize: int) -> tuple[int, int]:
    """The bytes [lo, hi) an array covers (empty for a zero-size array)."""
    if strides is None:
        return ptr, ptr + math.prod(shape) * itemsize
    lo = hi = ptr
    for n, st in zip(shape, strides):
        if n == 0:
            return ptr, ptr
        if st > 0:
            hi += (n - 1) * st
        else:
            lo += (n - 1) * st
    return lo, hi + itemsize


def read_cai(x: Any) -> tuple | None:
    """Any object with ``__cuda_array_interface__`` (CuPy, ...): the interface's own fields, read once."""
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:  # e.g. a torch subclass on the CPU: not a device array after all
        return None
    if cai.get("mask") is not None:
        return None
    shape, typestr, strides = tuple(cai["shape"]), cai["typestr"], cai.get("strides")
    ptr = cai["data"][0]
    stream = cai.get("stream")
    if stream == 0:  # the interface forbids 0 (ambiguous); the checked path says so in Numba's words
        return None
    if strides is not None:
        strides = tuple(strides)
    return ptr, shape, typestr, strides, stream


def read_numba(a: Any) -> tuple:
    """A Numba device array: the fields its ``__cuda_array_interface__`` would give, without building the dict
    (its dtype stands for the typestr: the key includes the array's type, so the two never meet)."""
    try:
        ptr = int(a.gpu_data.device_pointer)
    except AttributeError:  # no memory (a zero-size array)
        ptr = a.device_ctypes_pointer.value or 0
    st = a.stream
    return ptr, a.shape, a.dtype, a.strides, (int(st) or None) if st else None


_TORCH_TYPESTR: dict = {}


def read_torch(t: Any) -> tuple | None:
    """A torch CUDA tensor: what torch's ``__cuda_array_interface__`` gives (strides None when contiguous), and
    torch's current stream on its device (torch's interface names no stream; torch queues a tensor's work there)."""
    if not t.is_cuda or t.requires_grad:
        return None  # the checked path gives torch's own error
    if not _TORCH_TYPESTR:
        torch = sys.modules["torch"]
        _TORCH_TYPESTR.update({torch.float32: "<f4", torch.float64: "<f8", torch.float16: "<f2",
                               torch.int64: "<i8", torch.int32: "<i4", torch.int16: "<i2", torch.int8: "|i1",
                               torch.uint8: "|u1", torch.bool: "|b1"})
    typestr = _TORCH_TYPESTR.get(t.dtype)
    if typestr is None:
        return None
    strides = None
    if not t.is_contiguous():
        itemsize = t.element_size()
        strides = tuple(s * itemsize for s in t.stride())
    return t.data_ptr(), tuple(t.shape), typestr, strides, torch_stream(t.get_device())


def torch_stream(device: int) -> int:
    """torch's current stream on ``device``, as a handle."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without building a Stream object
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


_READERS: dict = {}


def reader_for(tp: type):
    """The reader for arrays of type ``tp``, or None when ``tp`` is not a device array type."""
    try:
        return _READERS[tp]
    except KeyError:
        pass
    reader = None
    mod = tp.__module__ or ""
    if mod.startswith("numba") and hasattr(tp, "device_ctypes_pointer") and hasattr(tp, "__cuda_array_interface__"):
        reader = read_numba
    elif mod.startswith("torch") and tp.__name__ == "Tensor":
        reader = read_torch
    elif hasattr(tp, "__cuda_array_interface__"):
        reader = read_cai
    _READERS[tp] = reader
    return reader


def itemsize_of(typestr) -> int:
    """The item size of a typestr ("<f4") or of a NumPy dtype (what `read_numba` gives in its place)."""
    return int(typestr[2:]) if isinstance(typestr, str) else typestr.itemsize


def _reader(tp: type):
    """`reader_for`, with the dict lookup a hit makes inline (most calls bring types already seen)."""
    return _READERS[tp] if tp in _READERS else reader_for(tp)


def read_array(x: Any) -> tuple | None:
    """The description of a device array with its span, (ptr, shape, typestr, strides, stream, lo, hi), or None
    (not a device array, or one the checked path must see)."""
    reader = _reader(type(x))
    d = reader(x) if reader is not None else None
    if d is None:
        return None
    return d + span(d[0], d[1], d[3], itemsize_of(d[2]))


# ----------------------------------------------------------------------------------------------------------
# Streams
# ----------------------------------------------------------------------------------------------------------


def stream_handle(stream: Any) -> int:
    """The ``CUstream`` handle of ``stream=``: an int, a Numba stream, a torch stream, a CuPy stream, or anything
    with ``__cuda_stream__``. (In the simulator its streams are accepted too, and mean nothing.)"""
    from ._errors import LaunchError  # here, not at the top: this file also loads on its own (test_launch_fast)
    if isinstance(stream, bool):
        raise LaunchError(f"stream must be a CUDA stream or an int handle; got {stream!r}")
    if isinstance(stream, int):
        if stream < 0:
            raise LaunchError(f"stream must be a CUDA stream or a non-negative int handle; got {stream}")
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if callable(proto):
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr"):  # torch, CuPy
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    mod = type(stream).__module__ or ""
    if mod.startswith("numba.cuda.simulator"):
        return 0
    if mod.startswith("numba") and hasattr(stream, "handle"):
        return int(stream.handle or 0)
    raise LaunchError(
        f"stream must be a CUDA stream (Numba, torch or CuPy) or an int handle; got {type(stream).__name__}"
    )


def _same_stream(a: int, b: int) -> bool:
    # 0 (NULL) and 1 (CU_STREAM_LEGACY) are both the legacy default stream.
    return a == b or (a in (0, 1) and b in (0, 1))


def resolve_stream(explicit: int | None, producers: list) -> tuple[int, list]:
    """(the launch stream, the streams it must wait for): ``stream=`` if given, else the first array's stream,
    else the legacy default stream (0)."""
    streams = [p for p in producers if p is not None]
    s = explicit if explicit is not None else (streams[0] if streams else 0)
    waits = []
    for p in streams:
        if not _same_stream(p, s) and p not in waits:
            waits.append(p)
    return s, waits


def call_streams(args: tuple, out: Any, stream: Any) -> tuple[int, list]:
    """`resolve_stream` for a call (used by the checked path; the fast path reads the arrays once for both)."""
    explicit = None if stream is None else stream_handle(stream)
    producers = []
    for a in args + (out,):
        d = read_array(a) if a is not None else None
        if d is not None:
            producers.append(d[4])
    return resolve_stream(explicit, producers)


_NUMBA_STREAMS: dict = {}


def numba_stream(handle: int):
    """A Numba stream for a handle, for Numba's own launch (0 stays 0: Numba's default stream)."""
    if not handle or handle == 1:
        return 0
    s = _NUMBA_STREAMS.get(handle)
    if s is None:
        from numba import cuda

        s = _NUMBA_STREAMS[handle] = cuda.external_stream(handle)
    return s


def as_numba_stream(stream: Any):
    """What `Launch.__call__` passes to Numba: a Numba stream as it is, anything else through its handle."""
    if not stream:
        return 0
    if (type(stream).__module__ or "").startswith("numba"):
        return stream
    return numba_stream(stream_handle(stream))


# ----------------------------------------------------------------------------------------------------------
# The driver: cuLaunchKernel and friends through ctypes (the cheapest call Python has into libcuda)
# ----------------------------------------------------------------------------------------------------------


class CudaBackend:
    """What the fast path needs from the GPU. Tests replace `BACKEND` with a fake that records instead."""

    def __init__(self, library: str | None = None):
        from ._device import DRIVER_LIBRARIES, load_driver

        lib = load_driver([library] if library else DRIVER_LIBRARIES)
        if lib is None:
            raise OSError("no CUDA driver library (libcuda) found")
        self._lib = lib
        # The calls a hit makes go through a PyDLL view of the same library: ctypes keeps the GIL for them instead
        # of releasing and re-taking it (a few tenths of a microsecond each). They return at once -- a launch is
        # queued, not waited for -- as torch's launches, which also keep the GIL, do. (Captures and instantiation,
        # which take long, go through the CDLL and release it.)
        fast = ctypes.PyDLL(lib._name, handle=lib._handle)
        vp, ui = ctypes.c_void_p, ctypes.c_uint
        # argtypes left unset: every argument is passed as a ctypes value built once (`prepare`), which saves
        # ctypes converting eleven Python ints on every launch.
        self._launch = fast.cuLaunchKernel
        self._launch.restype = ctypes.c_int
        self._ctx = fast.cuCtxGetCurrent  # called with a per-thread buffer's byref (`context`)
        self._ctx.restype = ctypes.c_int
        self._local = threading.local()
        self._record = fast.cuEventRecord
        self._record.argtypes = [vp, vp]
        self._wait = fast.cuStreamWaitEvent
        self._wait.argtypes = [vp, vp, ui]
        self._event_create = lib.cuEventCreate
        self._event_create.argtypes = [ctypes.POINTER(vp), ui]
        self._kernel_function = getattr(lib, "cuKernelGetFunction", None)
        if self._kernel_function is not None:
            self._kernel_function.argtypes = [ctypes.POINTER(vp), vp]
        self._error_name = lib.cuGetErrorName
        self._error_name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self._fast_lib = fast
        self._events: dict = {}
        self._order_lock = threading.Lock()
        self._graph_lock = threading.Lock()

    def _check(self, rc: int, what: str) -> None:
        if rc:
            from numba.cuda.cudadrv.driver import CudaAPIError

            name = ctypes.c_char_p()
            self._error_name(rc, ctypes.byref(name))
            raise CudaAPIError(rc, f"{what} failed: {(name.value or b'?').decode()}")

    def context(self) -> int:
        """The current context (0: none yet in this thread; the checked path will make Numba's current)."""
        try:
            buf, ref = self._local.ctx
        except AttributeError:
            buf = ctypes.c_void_p()
            ref = ctypes.byref(buf)
            self._local.ctx = buf, ref
        if self._ctx(ref):
            return 0
        return buf.value or 0

    @staticmethod
    def prepare(fixed: tuple, params: int) -> Prepared:
        """A launch's arguments to cuLaunchKernel as ctypes values, built once per stream (`Prepared`)."""
        ui = ctypes.c_uint
        return Prepared((ctypes.c_void_p(fixed[0]),) + tuple(ui(v) for v in fixed[1:]), ctypes.c_void_p(params))

    def launch(self, prepared: Prepared, stream: int) -> None:
        rc = self._launch(*prepared[stream])
        if rc:
            self._check(rc, "cuLaunchKernel")

    def wait(self, stream: int, producer: int) -> None:
        """``stream`` waits for the work queued so far on ``producer`` (an event; the host does not wait)."""
        ctx = self.context()
        with self._order_lock:
            ev = self._events.get(ctx)
            if ev is None:
                ev = ctypes.c_void_p()
                self._check(self._event_create(ctypes.byref(ev), 2), "cuEventCreate")  # CU_EVENT_DISABLE_TIMING
                ev = self._events[ctx] = ev.value
            self._check(self._record(ev, producer), "cuEventRecord")
            self._check(self._wait(stream, ev, 0), "cuStreamWaitEvent")

    # -- CUDA graphs: a plan's launches captured once, replayed with one cuGraphLaunch ------------------------

    def _graph_api(self) -> bool:
        """Bind the graph calls on first use (False: this driver lacks one; every plan launches kernel by kernel)."""
        api = getattr(self, "_graph", None)
        if api is None:
            lib = self._lib
            vp, ui, pvp = ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)
            names = {"cuStreamIsCapturing": [vp, ctypes.POINTER(ctypes.c_int)], "cuStreamCreate": [pvp, ui],
                     "cuStreamBeginCapture_v2": [vp, ctypes.c_int], "cuStreamEndCapture": [vp, pvp],
                     "cuGraphInstantiateWithFlags": [pvp, vp, ctypes.c_ulonglong], "cuGraphDestroy": [vp],
                     "cuGraphLaunch": [vp, vp], "cuGraphExecDestroy": [vp]}
            api = {}
            quick = ("cuStreamIsCapturing", "cuGraphLaunch")  # a hit's calls: through the PyDLL view
            for name, argtypes in names.items():
                fn = getattr(self._fast_lib if name in quick else lib, name, None)
                if fn is None:
                    api = False
                    break
                fn.argtypes, fn.restype = argtypes, ctypes.c_int
                api[name] = fn
            self._graph = api
            self._capture_streams: dict = {}
        return bool(api)

    def capturing(self, stream: int) -> bool:
        """Is ``stream`` being captured into a graph (or can we not tell)? Then its launches must be its own."""
        if not self._graph_api():
            return True
        try:
            buf, ref = self._local.capturing  # per thread: another thread may ask between our call and our read
        except AttributeError:
            buf = ctypes.c_int()
            ref = ctypes.byref(buf)
            self._local.capturing = buf, ref
        if self._graph["cuStreamIsCapturing"](stream or None, ref):
            return True  # e.g. the legacy stream while another stream captures in global mode: do as before
        return buf.value != 0

    def build_graph(self, launches: list) -> int | None:
        """An executable graph of ``launches`` (prepared, their parameter blocks as they are now), or None."""
        if not self._graph_api():
            return None
        with self._graph_lock:  # one capture at a time on the private stream (two threads' entries may build)
            return self._build_graph(launches)

    def _build_graph(self, launches: list) -> int | None:
        g, ctx = self._graph, self.context()
        cap = self._capture_streams.get(ctx)
        if cap is None:
            h = ctypes.c_void_p()
            if g["cuStreamCreate"](ctypes.byref(h), 1):  # CU_STREAM_NON_BLOCKING: private to the capture
                return None
            cap = self._capture_streams[ctx] = h.value
        if g["cuStreamBeginCapture_v2"](cap, 2):  # CU_STREAM_CAPTURE_MODE_RELAXED: other threads are not ours
            return None
        failed = False
        for prepared in launches:
            if self._launch(*prepared[cap]):
                failed = True
                break
        graph = ctypes.c_void_p()
        rc = g["cuStreamEndCapture"](cap, ctypes.byref(graph))  # ends the capture even after a failed launch
        if failed or rc or not graph.value:
            if graph.value:
                g["cuGraphDestroy"](graph)
            return None
        exe = ctypes.c_void_p()
        rc = g["cuGraphInstantiateWithFlags"](ctypes.byref(exe), graph, 0)
        g["cuGraphDestroy"](graph)  # the executable graph is a copy: the template is not needed
        return exe.value if rc == 0 and exe.value else None

    def graph_launch(self, exe: int, stream: int) -> None:
        rc = self._graph["cuGraphLaunch"](exe, stream or None)
        if rc:
            self._check(rc, "cuGraphLaunch")

    def destroy_graph(self, exe: int) -> None:
        """Free an executable graph (one still running is freed when it completes)."""
        self._graph["cuGraphExecDestroy"](exe)

    def function(self, kernel_handle: int) -> int:
        """The current context's CUfunction of a CUkernel (cuLaunchKernel takes either; resolving once is cheaper)."""
        if self._kernel_function is not None:
            f = ctypes.c_void_p()
            if self._kernel_function(ctypes.byref(f), kernel_handle) == 0 and f.value:
                return f.value
        return kernel_handle

    def checked_launch(self, launch, numba_stream) -> None:
        """A launch of the checked path: through Numba (which compiles and binds the kernel on first use)."""
        launch(numba_stream)

    def template(self, launch) -> LaunchTemplate | None:
        return numba_template(launch, self)

    def alloc(self, shape: tuple, dtype) -> Any:
        from numba import cuda

        return cuda.device_array(shape, dtype=dtype)


class Prepared(dict):
    """cuLaunchKernel's eleven arguments as ctypes values, per stream: ``prepared[stream]`` is the whole tuple,
    built the first time a stream comes (so a hit builds no ctypes value; a few streams are kept)."""

    __slots__ = ("head", "params")

    def __init__(self, head: tuple, params):
        super().__init__()
        self.head, self.params = head, params  # (function, grid x, y, z, block x, y, z, shared bytes), the block

    def __missing__(self, stream: int) -> tuple:
        if len(self) >= 8:
            self.clear()
        args = self[stream] = self.head + (ctypes.c_void_p(stream or None), self.params, None)
        return args


class LaunchTemplate:
    """One launch, ready to go: ``fixed`` = (function, grid x, y, z, block x, y, z, dynamic shared bytes), the
    parameter block (``params``: the address of its array of pointers; ``keep``: its ctypes values), and for each
    array argument ``(slot, lo, hi, ptr, array)``: the ctypes value holding its data pointer, the bytes it spans,
    that pointer now, and the array (kept only if it turns out to be a workspace)."""

    __slots__ = ("fixed", "params", "keep", "arrays")

    def __init__(self, fixed, params, keep, arrays):
        self.fixed, self.params, self.keep, self.arrays = fixed, params, keep, arrays


def dims3(d) -> tuple[int, int, int]:
    d = (d,) if isinstance(d, int) else tuple(d)
    return tuple(int(v) for v in d) + (1,) * (3 - len(d))


def pack_params(items: list, pointer_positions: set) -> tuple[int, list] | None:
    """Numba's flattened kernel arguments as a parameter block: (address of the void* array, the ctypes values).
    A Python int becomes an 8-byte value (an intptr_t, as cuda.core passes it; the driver copies as many bytes as
    the kernel declares, little-endian); a ctypes value is copied. Anything else: None (not packable)."""
    keep = []
    for i, v in enumerate(items):
        if isinstance(v, int):
            keep.append(ctypes.c_uint64(v) if i in pointer_positions else ctypes.c_int64(int(v)))
        elif isinstance(v, ctypes._SimpleCData):
            keep.append(type(v)(v.value))
        else:
            return None
    ptrs = (ctypes.c_void_p * max(1, len(keep)))(*[ctypes.addressof(v) for v in keep])
    keep.append(ptrs)
    return ctypes.addressof(ptrs), keep


def numba_template(launch, backend: CudaBackend) -> LaunchTemplate | None:
    """The template of a launch of a Numba kernel that has just run (so it is compiled and bound), or None when
    it is not one the fast path can replay exactly (debug, cooperative, extensions, launch-config sensitive, or an
    argument kind other than arrays and numbers)."""
    from numba.cuda import types
    from numba.cuda.dispatcher import CUDADispatcher

    disp = launch.kernel
    if not isinstance(disp, CUDADispatcher) or disp._launch_config_sensitive:
        return None
    argtypes = tuple(disp.typeof_pyval(a) for a in launch.args)
    kernel = disp.overloads.get(argtypes)
    if kernel is None or kernel.debug or kernel.cooperative or kernel.extensions or kernel.launch_config_sensitive:
        return None
    items, retr, arrays, pointer_positions = [], [], [], set()
    for ty, value in zip(kernel.argument_types, launch.args):
        start = len(items)
        if isinstance(ty, types.Array):
            kernel._prepare_args(ty, value, 0, retr, items)
            d = read_array(value)
            if d is None or items[start + 4] != d[0]:  # Numba's layout: meminfo, parent, nitems, itemsize, data, ...
                return None
            pointer_positions.add(start + 4)
            arrays.append((start + 4, d[5], d[6], d[0], value))
        elif isinstance(ty, (types.Integer, types.Float, types.Boolean)):
            kernel._prepare_args(ty, value, 0, retr, items)
        else:
            return None
    if retr:
        return None
    packed = pack_params(items, pointer_positions)
    if packed is None:
        return None
    params, keep = packed
    handle = int(kernel._codelibrary.get_cufunc().handle)
    # Over 48 KiB of dynamic shared memory needs an attribute set on the kernel: launch that very handle then.
    func = handle if launch.shared_bytes > 48 * 1024 else backend.function(handle)
    fixed = (func,) + dims3(launch.grid) + dims3(launch.block) + (int(launch.shared_bytes),)
    return LaunchTemplate(fixed, params, keep, [(keep[i], lo, hi, ptr, arr) for i, lo, hi, ptr, arr in arrays])


BACKEND: Any = None


# ----------------------------------------------------------------------------------------------------------
# Cache entries
# ----------------------------------------------------------------------------------------------------------


class Entry:
    """A recorded configuration of a version: its launches and where each data pointer comes from."""

    __slots__ = ("launches", "slots", "keep", "stream", "out_shape", "out_dtype", "lock", "graphs", "spans")

    def __init__(self, launches, slots, keep, stream, out_shape, out_dtype, spans):
        self.launches = launches  # [the backend's prepared arguments of each launch]
        self.spans = spans  # [(lo, hi) of each array argument, then of out, as offsets from its pointer]
        self.slots = slots  # [(ctypes value, base index, byte offset)]
        self.keep = keep  # what must live as long as the entry: parameter blocks, workspaces
        self.stream = stream  # the stream a workspace belongs to (None: no workspace)
        self.out_shape, self.out_dtype = out_shape, out_dtype
        self.lock = threading.Lock()  # two threads must not interleave writing pointers and launching
        self.graphs = GraphCache() if len(launches) > 1 else None

    def run(self, backend, bases: list, stream: int) -> None:
        with self.lock:
            for slot, i, offset in self.slots:
                slot.value = bases[i] + offset
            if self.graphs is not None and GRAPHS and self.graphs.replay(backend, self.launches, bases, stream):
                return
            for prepared in self.launches:
                backend.launch(prepared, stream)


    def release(self, backend) -> None:
        """Destroy the entry's graphs (it is leaving the cache)."""
        if self.graphs is not None:
            with self.lock:
                for exe in self.graphs.graphs.values():
                    backend.destroy_graph(exe)
                self.graphs.graphs.clear()


class GraphCache:
    """An entry's executable graphs, keyed by the data pointers they were captured with (the rest of a launch is
    fixed by the entry). A set of pointers is captured the second time it comes -- one-off pointers (``out``
    allocated per call) would pay a capture (tens of microseconds) for nothing -- and at most MAX_GRAPHS are kept,
    the least recently used destroyed first."""

    __slots__ = ("graphs", "seen", "broken")

    def __init__(self):
        self.graphs: dict = {}  # pointers -> executable graph
        self.seen: dict = {}  # pointers seen once (insertion-ordered, bounded like graphs)
        self.broken = False  # the backend could not capture this plan: kernel by kernel from now on

    def replay(self, backend, launches: list, bases: list, stream: int) -> bool:
        """Launch the graph for these pointers on ``stream`` (True), or leave it to the caller (False)."""
        if self.broken:
            return False
        key = tuple(bases)
        exe = self.graphs.pop(key, None)
        if exe is None and key not in self.seen:
            self.seen[key] = True
            if len(self.seen) > MAX_GRAPHS:
                self.seen.pop(next(iter(self.seen)))
            return False
        if backend.capturing(stream):  # the caller's graph records these launches one by one
            if exe is not None:
                self.graphs[key] = exe
            return False
        if exe is None:
            exe = backend.build_graph(launches)
            if exe is None:
                self.broken = True
                return False
            self.seen.pop(key, None)
            if len(self.graphs) >= MAX_GRAPHS:
                backend.destroy_graph(self.graphs.pop(next(iter(self.graphs))))
        self.graphs[key] = exe  # most recently used last
        backend.graph_launch(exe, stream)
        _count("graph")
        return True


def build_entry(backend, templates: list, bases: list, stream: int, out_shape, out_dtype) -> Entry | None:
    """An entry from the templates of a call's launches and its bases [(lo, hi, ptr)] (the array arguments, then
    out): each array argument of a launch is matched to the base it lies in. None when two bases overlap (which
    base a view came from would be ambiguous)."""
    ordered = sorted(b[:2] for b in bases if b[1] > b[0])
    if any(ordered[i][1] > ordered[i + 1][0] for i in range(len(ordered) - 1)):
        return None
    slots, keep, workspace = [], [], False
    for t in templates:
        keep.append(t.keep)
        for slot, lo, hi, ptr, arr in t.arrays:
            for i, (blo, bhi, bptr) in enumerate(bases):
                if blo <= lo and hi <= bhi and (hi > lo or ptr == bptr):
                    slots.append((slot, i, ptr - bptr))
                    break
            else:
                keep.append(arr)  # allocated by the plan: a workspace, reused by every call of this entry
                workspace = True
    return Entry([backend.prepare(t.fixed, t.params) for t in templates], slots, keep,
                 stream if workspace else None, out_shape, out_dtype,
                 [(lo - ptr, hi - ptr) for lo, hi, ptr in bases])


class Recorder:
    """Handed to `Version._call` on a miss: it allocates ``out`` when none was given (so the entry knows its
    pointer), runs each launch through Numba, and keeps the launches to build the entry from."""

    def __init__(self, backend):
        self.backend = backend
        self.launches = None
        self.d_out = None

    def alloc(self, shape, dtype):
        self.d_out = self.backend.alloc(shape, dtype)
        return self.d_out

    def launch(self, launch, numba_stream) -> None:
        self.backend.checked_launch(launch, numba_stream)

    def done(self, launches) -> None:
        self.launches = launches


def clear() -> None:
    """Forget every recorded configuration (of every version) and the counts."""
    for v in VERSIONS:
        for entry in v._fast.values():
            entry.release(BACKEND)
        v._fast.clear()
    STATS.clear()


# ----------------------------------------------------------------------------------------------------------
# A call
# ----------------------------------------------------------------------------------------------------------


def _scalar_key(v: Any):
    tp = type(v)
    if tp in _SCALARS or tp.__module__ == "numpy" and hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0:
        return (tp, v)
    return None


def call(version, args: tuple, out: Any, stream: Any, params: dict):
    """`Version.__call__` on a GPU: a recorded configuration replayed, or the checked path (recorded if it can be)."""
    descs, key_parts, producers = [], [], []
    for a in args:
        tp = type(a)
        reader = _reader(tp)
        if reader is None:
            k = _scalar_key(a)
            if k is None:  # a host array, a list, ...: the checked path copies or refuses it
                return _uncached(version, "not device arrays", args, out, stream, params)
            key_parts.append(k)
            continue
        d = reader(a)
        if d is None:
            return _uncached(version, "an array the checked path must see", args, out, stream, params)
        descs.append(d)
        key_parts.append((tp, d[1], d[2], d[3], d[0] & 15))
        if d[4] is not None:
            producers.append(d[4])
    if not descs:
        return _uncached(version, "not device arrays", args, out, stream, params)
    if out is None:
        od = out_key = None
    else:
        tp = type(out)
        reader = _reader(tp)
        od = reader(out) if reader is not None else None
        if od is None:
            return _uncached(version, "out not a device array", args, out, stream, params)
        out_key = (tp, od[1], od[2], od[3], od[0] & 15)
        if od[4] is not None:
            producers.append(od[4])
    param_key = ()
    if params:
        param_key = tuple((k, _scalar_key(v)) for k, v in params.items())
        if any(k is None for _, k in param_key):
            return _uncached(version, "a parameter", args, out, stream, params)

    if stream is None and not producers:
        s, waits = 0, ()
    else:
        s, waits = resolve_stream(None if stream is None else stream_handle(stream), producers)
    backend = BACKEND
    key = (backend.context(), tuple(key_parts), out_key, param_key)
    cache = version._fast
    entry = cache.get(key)
    if entry is None:
        entry = cache.get((key, s))
        if entry is None:
            return _miss(version, backend, key, descs, od, args, out, stream, params, s)

    # A hit: this configuration passed every check. What can differ from the recorded call: the pointers.
    bases = [d[0] for d in descs]
    if od is not None:
        # out must not overlap an input (an in-place version may be given the very input): the spans, from the
        # offsets the entry keeps (the key fixes every shape and stride).
        spans = entry.spans
        optr = od[0]
        olo, ohi = optr + spans[-1][0], optr + spans[-1][1]
        for i, p in enumerate(bases):
            lo, hi = p + spans[i][0], p + spans[i][1]
            if lo < ohi and olo < hi and not (version.inplace and lo == olo and hi == ohi):
                raise version.overlap_error(i)
        result = out
        bases.append(optr)
    else:
        result = backend.alloc(entry.out_shape, entry.out_dtype)
        bases.append(read_array(result)[0])
    for p in waits:
        backend.wait(s, p)
    entry.run(backend, bases, s)
    STATS["hit"] = STATS.get("hit", 0) + 1
    return result


def _uncached(version, why, args, out, stream, params):
    _count("uncached: " + why)
    return version._call(args, out, stream, params)


def _miss(version, backend, key, descs, od, args, out, stream, params, s):
    rec = Recorder(backend)
    result = version._call(args, out, stream, params, record=rec)
    if rec.launches is None:  # nothing launched (a zero-size dimension)
        _count("uncached: nothing launched")
        return result
    templates = [backend.template(launch) for launch in rec.launches]
    if any(t is None for t in templates):
        _count("uncached: a launch the fast path cannot replay")
        return result
    out_desc = od if od is not None else read_array(rec.d_out)
    bases = [span(d[0], d[1], d[3], itemsize_of(d[2])) + (d[0],) for d in descs + [out_desc]]
    entry = build_entry(backend, templates, bases, s, out_desc[1], rec.d_out.dtype if rec.d_out is not None else None)
    if entry is None:
        _count("uncached: arguments share memory")
        return result
    ctx = backend.context()  # the checked path made Numba's context current if none was (the first call of a thread)
    if not ctx:
        _count("uncached: no current context")
        return result
    key = (ctx,) + key[1:]
    cache = version._fast
    if len(cache) >= MAX_ENTRIES:
        cache.pop(next(iter(cache))).release(backend)
    cache[key if entry.stream is None else (key, s)] = entry
    _count("miss")
    return result


def enable() -> None:
    """Turn the fast path on (at ``import gpukernels`` on a GPU, unless GPUKERNELS_FAST_LAUNCH=0)."""
    global ENABLED, BACKEND
    if BACKEND is None:
        BACKEND = CudaBackend()
    ENABLED = True


def disable() -> None:
    global ENABLED
    ENABLED = False


def _enable_if_gpu() -> None:
    """At import on a GPU: the backend (the checked path orders streams with it too) and, unless
    GPUKERNELS_FAST_LAUNCH=0, the fast path."""
    global BACKEND
    from ._device import MODE

    if MODE != "gpu":
        return
    try:
        BACKEND = CudaBackend()
    except OSError:  # no libcuda to call directly: every call takes the checked path
        return
    if os.environ.get("GPUKERNELS_FAST_LAUNCH", "1").strip().lower() not in ("0", "off", "no", "false"):
        enable()
