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

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from numba import cuda

__all__ = ["Launch", "Version", "check_array", "ceil_div", "is_device_array", "LaunchError", "sm_count", "version"]


class LaunchError(ValueError):
    """Bad arguments to a lesson launcher."""


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
    if isinstance(arr, np.ndarray):
        return np.ascontiguousarray(arr)
    if not arr.is_c_contiguous():
        raise LaunchError(
            f"{name} is a non-contiguous device array (strides {arr.strides}); pass a contiguous copy "
            "(e.g. cupy.ascontiguousarray or tensor.contiguous())"
        )
    return arr


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

    @property
    def idea(self) -> str:
        """First line of the docstring: the one idea this version adds."""
        return self.doc.strip().splitlines()[0] if self.doc.strip() else self.name

    def launches(self, *args, out=None, **params) -> list[Launch]:
        """The launches this version would make for these inputs, without running them."""
        inputs, params, out_shape = self.check(*args, **params)
        if out is None:
            out = np.empty(out_shape, dtype=np.float32)
        return self.plan(*inputs, out, **params)

    def __call__(self, *args, out=None, **params):
        inputs, params, out_shape = self.check(*args, **params)
        on_device = any(is_device_array(a) for a in inputs)
        if out is not None:
            out = _check_out(out, out_shape)
        out_on_device = out is not None and is_device_array(out)

        if math.prod(out_shape) == 0 or any(math.prod(a.shape) == 0 for a in inputs):
            # A zero-size dimension: nothing to launch. An empty sum (K = 0, C = 0) still has a value.
            host_inputs = [a.copy_to_host() if is_device_array(a) else a for a in inputs]
            result = (self.empty(*host_inputs, out_shape, **params) if self.empty
                      else np.zeros(out_shape, dtype=np.float32))
            if out is None:
                return cuda.to_device(result) if on_device else result
            if out_on_device:
                out.copy_to_device(result)
            else:
                out[...] = result
            return out

        # Host inputs go to the device once (in simulator mode this is a cheap wrapper).
        d_inputs = [a if is_device_array(a) else cuda.to_device(a) for a in inputs]
        d_out = out if out_on_device else cuda.device_array(out_shape, dtype=np.float32)
        for launch in self.plan(*d_inputs, d_out, **params):
            launch()
        if out_on_device:
            return out
        if out is not None:
            d_out.copy_to_host(out)
            return out
        return d_out if on_device else d_out.copy_to_host()

    def __repr__(self) -> str:
        return f"<{self.lesson}.{self.name}: {self.idea}>"


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
        return arr
    if not arr.is_c_contiguous():
        raise LaunchError("out must be a C-contiguous device array")
    return arr


def version(lesson: str, check: Callable, kernels: Sequence[Any] = (), empty: Callable | None = None
            ) -> Callable[[Callable], Version]:
    """Decorator turning a plan function into a `Version`; the plan's docstring documents the version."""

    def wrap(plan: Callable) -> Version:
        return Version(name=plan.__name__, lesson=lesson, plan=plan, check=check, doc=plan.__doc__ or "",
                       kernels=tuple(kernels), empty=empty)

    return wrap
