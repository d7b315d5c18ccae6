"""What every lesson's launchers share: argument checks, host/device handling, and the `Version` registry entry.

A *version* of a lesson is one idea (naive, tiled, ...). It is written as two parts, as in SGEMM_CUDA's runner:

* the kernel(s): ``@cuda.jit`` functions that guard their own bounds;
* a *plan*: a function that, given the checked arguments, returns the launches to make -- which kernel, with
  which grid, block and arguments. The plan is the single place where the launch configuration is derived from
  the shapes, so the launcher, the resource/occupancy report, the grid-map plots and the tracer all see the
  configuration that really runs.

``Version.__call__`` does the rest for every lesson alike: check and convert the inputs, allocate ``out``, run
the plan's launches in order, and hand the result back in the same kind of array that came in.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from numba import cuda

from . import _fastlaunch, _kcache
from ._errors import LaunchError

__all__ = ["Launch", "Version", "check_array", "ceil_div", "is_device_array", "LaunchError", "sm_count", "version"]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@functools.cache
def sm_count() -> int:
    """The SMs a launcher plans for: the GPU's, or in the simulator (which has none) an H200's 132, so that it runs
    the configuration the GPU would."""
    from ._device import MODE

    if MODE == "gpu":
        return cuda.get_current_device().MULTIPROCESSOR_COUNT
    return 132


@functools.lru_cache(maxsize=None)
def shared_per_block() -> int:
    """The most shared memory one block may have, opting in past 48 KB: the GPU's (227 KB on Hopper, 163 KB on an
    A100, 99 KB on most others), or in the simulator an H200's."""
    from ._device import MODE

    if MODE == "gpu":
        try:
            return int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        except (AttributeError, KeyError):  # a driver binding without the attribute: what every GPU allows
            return STATIC_SHARED_LIMIT
    return 227 * 1024


@functools.lru_cache(maxsize=None)
def compute_capability() -> tuple[int, int]:
    """The GPU's compute capability, or in the simulator an H200's (9, 0): the instructions a launcher may use."""
    from ._device import MODE

    if MODE == "gpu":
        return tuple(cuda.get_current_device().compute_capability)
    return (9, 0)


def is_device_array(x: Any) -> bool:
    """A GPU array: a Numba device array (the simulator's FakeCUDAArray in simulator mode), CuPy, a PyTorch
    CUDA tensor, or anything else with ``__cuda_array_interface__``."""
    if type(x).__name__ == "FakeCUDAArray":
        return True
    return hasattr(x, "__cuda_array_interface__")


def _as_device_array(x: Any) -> Any:
    """A Numba view of a device array from any library (no copy)."""
    if type(x).__name__ in ("FakeCUDAArray", "DeviceNDArray", "MappedNDArray", "ManagedNDArray"):
        return x
    return cuda.as_cuda_array(x)


def _describe(x: Any) -> str:
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None:
        return f"{type(x).__name__} of shape {tuple(shape)} and dtype {dtype}"
    return f"{type(x).__name__}"


def check_array(name: str, x: Any, ndim: int, axes: str) -> Any:
    """Check that ``x`` is a float32 array with ``ndim`` dimensions; return a C-contiguous host array (a copy
    only when needed -- the caller's array is never modified) or a device array.

    ``axes`` names the dimensions for messages, e.g. ``"(M, K)"``.
    """
    if is_device_array(x):
        arr = _as_device_array(x)
        dtype = np.dtype(arr.dtype)
    else:
        if not isinstance(x, np.ndarray):
            if isinstance(x, (list, tuple)) or np.isscalar(x):
                raise LaunchError(
                    f"{name} must be a float32 array {axes}; got {type(x).__name__}. "
                    f"Convert it with np.asarray({name}, dtype=np.float32)."
                )
            raise LaunchError(f"{name} must be a NumPy or CUDA float32 array {axes}; got {_describe(x)}")
        arr = x
        dtype = x.dtype
    if dtype != np.float32:
        raise LaunchError(
            f"{name} must have dtype float32; got {dtype}. Convert it with {name}.astype(np.float32)"
            + (" (or torch's .float())" if "torch" in type(x).__module__ else "")
        )
    if arr.ndim != ndim:
        raise LaunchError(f"{name} must be {ndim}-D {axes}; got {arr.ndim}-D with shape {tuple(arr.shape)}")
    return contiguous(name, arr)


def _c_strides(shape: tuple, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def contiguous(name: str, arr: Any, writeable: bool = False) -> Any:
    """``arr`` (a NumPy array or a Numba device view) C-contiguous with C strides: a host array copied only when
    needed; a device array that is not contiguous refused, naming ``name``.

    An array can be contiguous and still carry other strides on its axes of length 1 (NumPy's ``x[None]``, torch's
    ``unsqueeze``, a slice of one row): NumPy and the kernels never read those strides, but Numba's device arrays
    do -- ``reshape`` refuses them ("operation requires copying"). Such an array comes back as a view of the same
    bytes with C strides (read-only unless ``writeable``: an ``out`` the kernels write through)."""
    if isinstance(arr, np.ma.MaskedArray):  # the kernels read every element: a mask would be silently ignored
        raise LaunchError(f"{name} is a masked array (numpy.ma); the kernels read every element, masked or not: "
                          f"pass {name}.filled(value) to choose what the masked elements hold")
    shape = tuple(int(n) for n in arr.shape)
    item = np.dtype(arr.dtype).itemsize
    want = _c_strides(shape, item)
    if isinstance(arr, np.ndarray):
        arr = np.ascontiguousarray(arr)
        if arr.strides != want:  # contiguous (NumPy's flags ignore the strides of length-1 axes): a view, no copy
            arr = np.lib.stride_tricks.as_strided(arr, shape, want, writeable=writeable)
        return arr
    # Numba's own is_c_contiguous() reads the strides of length-1 axes too: contiguity as NumPy defines it
    if math.prod(shape) and any(n != 1 and st != w for n, st, w in zip(shape, arr.strides, want)):
        raise LaunchError(
            f"{name} is a non-contiguous device array (strides {arr.strides}); pass a contiguous copy "
            "(e.g. cupy.ascontiguousarray or tensor.contiguous())"
        )
    if tuple(arr.strides) != want and hasattr(arr, "gpu_data"):  # a Numba device array; the simulator's reshape
        arr = type(arr)(shape, want, arr.dtype, stream=arr.stream, gpu_data=arr.gpu_data)  # as NumPy's does
    return arr


#: Shared memory a block may use without asking: more (up to 227 KB on an H200) needs the kernel's opt-in attribute.
STATIC_SHARED_LIMIT = 48 * 1024
_OPTED_IN: dict = {}


def opt_in_shared(kernel: Any, args: tuple, nbytes: int) -> None:
    """Let ``kernel`` launch with ``nbytes`` of dynamic shared memory: past 48 KB a kernel must opt in
    (``cudaFuncAttributeMaxDynamicSharedMemorySize``), and Numba's launch does not, so this does -- for every
    compiled signature of the kernel, compiling the one for ``args`` first; again only when a signature is added."""
    done = _OPTED_IN.get(id(kernel))
    if done is not None and done == (len(kernel.overloads), nbytes):
        return
    from numba.cuda.cudadrv import driver as drv

    argtypes = tuple(kernel.typeof_pyval(x) for x in args)
    if argtypes not in kernel.overloads:
        kernel.compile(argtypes)
    attr = drv.binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    for compiled in kernel.overloads.values():
        func = compiled._codelibrary.get_cufunc()
        drv.driver.cuKernelSetAttribute(attr, nbytes, func.handle, func.device.id)
    _OPTED_IN[id(kernel)] = (len(kernel.overloads), nbytes)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``kernel[grid, block, 0, shared_bytes](*args)``."""

    kernel: Any
    grid: tuple
    block: tuple
    args: tuple
    shared_bytes: int = 0  # dynamic shared memory (static shared arrays are in the kernel)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    def __call__(self, stream=0):
        """Launch through Numba, on ``stream``: a Numba stream, or a torch/CuPy stream or int handle (converted)."""
        if MODE == "gpu":
            _kcache.attach(self.kernel)  # compiled once for every process sharing GPUKERNELS_KERNEL_CACHE, if set
        if self.shared_bytes > STATIC_SHARED_LIMIT and MODE == "gpu":
            opt_in_shared(self.kernel, self.args, self.shared_bytes)
        if stream and MODE == "gpu":
            stream = _fastlaunch.as_numba_stream(stream)
        if self.shared_bytes or stream:
            self.kernel[self.grid, self.block, stream, self.shared_bytes](*self.args)
        else:
            self.kernel[self.grid, self.block](*self.args)


@dataclass
class Version:
    """A registry entry: one version of a lesson, callable like ``matmul.tiled(a, b, out=None)``.

    ``check(*args, **params)`` validates the inputs and returns (inputs, params, out_shape);
    ``plan(*inputs, out, **params)`` returns the list of `Launch` objects.
    """

    name: str
    lesson: str
    plan: Callable[..., list[Launch]]
    check: Callable[..., tuple]
    doc: str = ""
    kernels: Sequence[Any] = field(default_factory=tuple)
    empty: Callable[..., np.ndarray] | None = None  # result when a dimension is zero (default: zeros)
    #: True when ``out`` may be the very array of an input (an elementwise kernel: each element is read, then
    #: written, by one thread). Otherwise ``out`` overlapping an input is a LaunchError.
    inplace: bool = False
    _fast: dict = field(default_factory=dict, repr=False, compare=False)  # the fast path's entries (GPU)

    def __post_init__(self):
        _fastlaunch.VERSIONS.append(self)  # every Version made, so that `_fastlaunch.clear` reaches them all
        self._document()

    # What help(), inspect and IPython read. A version is an object of this class, so without these help(matmul.tiled)
    # showed this class's docstring and inspect.signature gave __call__'s (*args, out=None, stream=None, **params).
    def _document(self) -> None:
        """Give the object the step's name, docstring and real signature: the check's parameters (the arguments the
        step takes), then ``out`` and ``stream``, keyword-only as ``__call__`` takes them; ``__wrapped__`` is the
        launcher, so that ``inspect.getsource`` (and IPython's ``??``) show the step's code."""
        self.__name__ = self.__qualname__ = self.name
        module = getattr(self.plan, "__module__", None) or __name__
        # the lesson's package (gpukernels.matmul), where students reach the step: help(matmul) lists every step
        self.__module__ = module.rpartition(".")[0] if re.search(r"\.k\d+_\w+$", module) else module
        self.__wrapped__ = self.plan
        self.__signature__ = self._signature()
        self.__doc__ = self._docstring(sys.modules.get(module))

    def _signature(self) -> inspect.Signature:
        try:
            params = [p for p in inspect.signature(self.check).parameters.values()
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        except (TypeError, ValueError):
            params = [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)]
        extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in ("out", "stream")]
        return inspect.Signature(params + extra)

    def _docstring(self, module) -> str:
        """The step's module docstring (what the step changes, and why), the launcher's (what it runs), and how to
        call it."""
        parts = []
        step = inspect.cleandoc(module.__doc__) if module is not None and module.__doc__ else ""
        own = inspect.cleandoc(self.doc) if self.doc else ""
        if step:
            parts.append(step)
        if own and own not in step:
            parts.append(own)
        takes = inspect.cleandoc(self.check.__doc__) if getattr(self.check, "__doc__", None) else ""
        call = [f"Call: {self.lesson}.{self.name}{self.__signature__}"]
        if takes:
            call.append(f"Arguments: {' '.join(takes.split())}")
        call += ["out: an array to write the result into (float32, the result's shape; default: a new one).",
                 "stream: a Numba, torch or CuPy stream or an int handle (default: the stream the arrays name, else the "
                 "default stream; the simulator ignores it).",
                 "Returns the result: a NumPy array for NumPy inputs, a device array for device inputs, out itself "
                 "when given.",
                 f"Its code: gpukernels source {self.lesson} {self.name}; the memory traffic it makes: gpukernels "
                 f"trace {self.lesson} --version {self.name}."]
        parts.append("\n".join(textwrap.fill(line, 116, subsequent_indent="    ") for line in call))
        return "\n\n".join(parts)

    def __get__(self, obj, objtype=None):
        """A step is a function to Python's tools: help() shows its signature and docstring (pydoc documents a
        callable with __get__ as a routine). Read as a class attribute it stays itself, as a staticmethod does."""
        return self

    @property
    def idea(self) -> str:
        """The docstring's first paragraph, its lines joined: the one idea this version adds. (Its first line alone
        cut a sentence wrapped onto a second line short: split_c's idea ended at "by atomics, then".)"""
        summary = self.doc.strip().split("\n\n")[0]
        return " ".join(line.strip() for line in summary.splitlines()) or self.name

    def launches(self, *args, out=None, **params) -> list[Launch]:
        """The launches this version would make for these inputs, without running them."""
        inputs, params, out_shape = self._checked(args, params)
        if out is None:
            out = np.empty(out_shape, dtype=np.float32)
        return self.plan(*inputs, out, **params)

    def __call__(self, *args, out=None, stream=None, **params):
        """Run this version: ``out`` (optional) receives the result; ``stream``: a Numba, torch or CuPy stream or
        an int handle (default: the stream the arrays name -- torch's or CuPy's current stream -- else the legacy
        default stream; the simulator accepts and ignores it). On a GPU, a call like one already seen takes the
        fast path (`gpukernels._fastlaunch`), which keeps every check that protects the result."""
        if _fastlaunch.ENABLED:
            return _fastlaunch.call(self, args, out, stream, params)
        return self._call(args, out, stream, params)

    def _call(self, args: tuple, out, stream, params: dict, record=None):
        """The checked path: check, plan, launch through Numba. ``record`` (the fast path's, on a miss) allocates
        ``out`` when none is given, runs the launches, and is handed them afterwards."""
        inputs, params, out_shape = self._checked(args, params)
        given = out  # what the caller passed as out (a torch tensor, say) is what the caller gets back
        if out is not None:
            out = _check_out(out, out_shape)
            self._check_overlap(inputs, out)
        s, waits = _fastlaunch.call_streams(args, out, stream) if MODE == "gpu" else (_sim_stream(stream), [])
        ns = _fastlaunch.numba_stream(s) if MODE == "gpu" else 0
        on_device = any(is_device_array(a) for a in inputs)
        out_on_device = out is not None and is_device_array(out)

        if math.prod(out_shape) == 0 or any(math.prod(a.shape) == 0 for a in inputs):
            # A zero-size dimension: nothing to launch. An empty sum (K = 0, C = 0) still has a value.
            host_inputs = [(a.copy_to_host(stream=ns) if ns else a.copy_to_host()) if is_device_array(a) else a
                           for a in inputs]
            if ns:
                ns.synchronize()
            result = (self.empty(*host_inputs, out_shape, **params) if self.empty
                      else np.zeros(out_shape, dtype=np.float32))
            if out is None:
                return cuda.to_device(result) if on_device else result
            if out_on_device:
                out.copy_to_device(result)
            else:
                out[...] = result
            return given

        for p in waits:  # arrays whose pending work is on another stream: the launch stream waits for it
            _fastlaunch.BACKEND.wait(s, p) if _fastlaunch.BACKEND else cuda.external_stream(p).synchronize()
        # Host inputs go to the device once (in simulator mode this is a cheap wrapper).
        to_device = (lambda a: cuda.to_device(a, stream=ns)) if ns else cuda.to_device
        d_inputs = [a if is_device_array(a) else to_device(a) for a in inputs]
        if out_on_device:
            d_out = out
        elif record is not None and out is None and on_device:
            d_out = record.alloc(out_shape, np.float32)
        else:
            d_out = cuda.device_array(out_shape, dtype=np.float32)
        launches = self.plan(*d_inputs, d_out, **params)
        for launch in launches:
            if record is not None:
                record.launch(launch, ns)
            else:
                launch(ns)
        if out_on_device:
            if record is not None:
                record.done(launches)
            return given
        if out is not None:
            if ns:
                d_out.copy_to_host(out, stream=ns)
                ns.synchronize()
            else:
                d_out.copy_to_host(out)
            return given
        if on_device:
            if record is not None:
                record.done(launches)
            return d_out
        if ns:
            result = d_out.copy_to_host(stream=ns)
            ns.synchronize()
            return result
        return d_out.copy_to_host()

    def _checked(self, args: tuple, params: dict) -> tuple:
        """``check(*args, **params)``, with arguments that do not fit its signature named as the caller wrote the
        call -- ``matmul.tiled() got an unexpected keyword argument 'foo'`` -- not after the internal check. While it
        runs, `called` names this version, so that a check shared by several steps names the one the user called."""
        token = _CALLING.set(self)
        try:
            return self.check(*args, **params)
        except TypeError:
            try:
                inspect.signature(self.check).bind(*args, **params)
            except TypeError as err:
                raise TypeError(f"{self.lesson}.{self.name}() {err}") from None
            raise
        finally:
            _CALLING.reset(token)

    def input_names(self) -> list[str]:
        """The plan's names for its inputs (``x``; ``a``, ``b``; ...), for messages."""
        try:
            names = list(inspect.signature(self.plan).parameters)
        except (TypeError, ValueError):
            return []
        return names

    def overlap_error(self, i: int) -> LaunchError:
        names = self.input_names()
        name = names[i] if i < len(names) else f"input {i}"
        return LaunchError(
            f"out shares memory with {name}: {self.lesson}.{self.name} reads {name} while it writes out, and its "
            f"blocks run in no fixed order, so one could read values another has already overwritten. "
            f"Pass a separate out array."
        )

    def _check_overlap(self, inputs, out) -> None:
        """``out`` must not share memory with an input (``inplace`` versions: unless it is that very array)."""
        for i, x in enumerate(inputs):
            same = _overlap(x, out)
            if same is not None and not (self.inplace and same):
                raise self.overlap_error(i)

    def __repr__(self) -> str:
        return f"<{self.lesson}.{self.name}: {self.idea}>"


#: The version whose arguments are being checked (`Version._checked`), for `called`.
_CALLING: contextvars.ContextVar = contextvars.ContextVar("gpukernels_calling", default=None)


def called(default: str) -> str:
    """The step the user called, as ``lesson.name`` (``attention.optimized``), while its arguments are checked; else
    ``default``. A check several steps share names in its messages the step that was called, not the ones it was
    written for."""
    v = _CALLING.get()
    return f"{v.lesson}.{v.name}" if v is not None else default


def _sim_stream(stream: Any) -> int:
    """The simulator runs every launch in order on the CPU: ``stream=`` is checked (a stream or an int handle) and
    means nothing more."""
    if stream is not None:
        _fastlaunch.stream_handle(stream)
    return 0


def _overlap(x: Any, out: Any) -> bool | None:
    """None when ``x`` and ``out`` share no memory; else whether they are the very same array (same bytes)."""
    if isinstance(x, np.ndarray) or isinstance(out, np.ndarray):
        if not (isinstance(x, np.ndarray) and isinstance(out, np.ndarray)):
            return None  # one on the host, one on the device
        if not np.shares_memory(x, out):
            return None
        return x.__array_interface__["data"][0] == out.__array_interface__["data"][0] and x.shape == out.shape
    if type(x).__name__ == "FakeCUDAArray" or type(out).__name__ == "FakeCUDAArray":  # the simulator's
        ax, ao = getattr(x, "_ary", None), getattr(out, "_ary", None)
        if ax is None or ao is None or not np.shares_memory(ax, ao):
            return None
        return ax.__array_interface__["data"][0] == ao.__array_interface__["data"][0] and ax.shape == ao.shape
    dx, do = _fastlaunch.read_array(x), _fastlaunch.read_array(out)
    if dx is None or do is None or not (dx[5] < do[6] and do[5] < dx[6]):
        return None
    return dx[5] == do[5] and dx[6] == do[6]


def _check_out(out: Any, shape: tuple) -> Any:
    if is_device_array(out):
        arr = _as_device_array(out)
    elif isinstance(out, np.ndarray):
        arr = out
    else:
        raise LaunchError(f"out must be a float32 array of shape {shape}; got {_describe(out)}")
    if np.dtype(arr.dtype) != np.float32:
        raise LaunchError(f"out must have dtype float32; got {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise LaunchError(f"out must have shape {tuple(shape)}; got {tuple(arr.shape)}")
    if isinstance(arr, np.ndarray):
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise LaunchError("out must be a writeable C-contiguous array")
        return contiguous("out", arr, writeable=True)  # C-contiguous already: the same memory, C strides
    try:
        return contiguous("out", arr)
    except LaunchError:
        raise LaunchError("out must be a C-contiguous device array") from None


def count(n: int, word: str) -> str:
    """``1 tile``, ``4 tiles``: a count in a dispatcher's reasons."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def check_choose(sizes: dict, flags: dict | None = None, sms: Any = None) -> None:
    """A dispatcher's arguments, checked as its launchers check theirs: each size an int >= 1 (a zero-size problem
    launches nothing, so no dispatcher is asked about one), each flag True or False, ``sms`` None or an int >= 1."""
    for name, value in {**sizes, "sms": sms}.items():
        if value is None and name == "sms":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
            what = "None or an int >= 1 (the GPU's SM count)" if name == "sms" else "an int >= 1"
            raise LaunchError(f"{name} must be {what}; got {value!r}")
    for name, value in (flags or {}).items():
        if not isinstance(value, (bool, np.bool_)):
            raise LaunchError(f"{name} must be True or False; got {value!r} ({type(value).__name__})")


@dataclass
class Choice:
    """What a lesson's dispatcher (``optimized.choose``) picked for a shape: the step, its configuration and why, in
    words; matmul's also gives its estimate and every candidate it weighed."""

    step: str
    config: dict
    why: str
    estimate_us: float | None = None
    candidates: list = field(default_factory=list)  # matmul: (tile, slices, estimated us) for every candidate

    def __str__(self) -> str:
        return f"{self.step} {self.config}: {self.why}"


def version(lesson: str, check: Callable, kernels: Sequence[Any] = (), empty: Callable | None = None
            ) -> Callable[[Callable], Version]:
    """Decorator turning a plan function into a `Version`; the plan's docstring documents the version."""

    def wrap(plan: Callable) -> Version:
        return Version(name=plan.__name__, lesson=lesson, plan=plan, check=check, doc=plan.__doc__ or "",
                       kernels=tuple(kernels), empty=empty)

    return wrap


from ._device import MODE  # noqa: E402

_fastlaunch._enable_if_gpu()
