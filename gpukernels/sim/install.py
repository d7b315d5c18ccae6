"""Route every ``@cuda.jit`` launch of the active Numba CUDA simulator through gpukernels' scheduler.

Whichever simulator ``numba.cuda`` resolves to -- numba-cuda's, or the copy built into Numba (macOS, where
numba-cuda cannot be installed) -- kernels are instances of its ``FakeCUDAKernel``. Replacing that class's
``__call__`` reaches every kernel, including those decorated before :func:`install` ran.
"""

from __future__ import annotations

import functools
import inspect
import sys

from . import _ctx, ufuncs
from ._stock import stock_kernel as _stock_kernel
from ._launch import Launch

FakeCUDAKernel = _stock_kernel.FakeCUDAKernel
_normalize = _stock_kernel.normalize_kernel_dimensions
stock_call = FakeCUDAKernel.__call__


def _sim_call(self, *args):
    launch = _ctx.LAUNCH
    if self._device or launch is not None:
        if launch is None:  # a device function called from host code
            return self.fn(*args)
        launch.swap_in(self.fn)
        return self.fn(*args)
    from . import _state

    grid_dim, block_dim = _normalize(self.grid_dim, self.block_dim)
    check_launch_limits(getattr(self.fn, "__name__", "kernel"), tuple(grid_dim), tuple(block_dim))
    launch = Launch(self, _state.CONFIG, grid_dim, block_dim, self.dynshared_size, tracer=_state.TRACER)
    try:
        launch.run(args)
    finally:
        _state.record(launch)


_sim_call.__gpukernels_sim__ = True

# What every GPU Numba targets (compute capability 3.0 and later) accepts; beyond it the driver refuses the
# launch (CUDA_ERROR_INVALID_VALUE), so a launch the simulator ran would fail on the GPU.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024


def check_launch_limits(name: str, grid: tuple, block: tuple) -> None:
    from .errors import LaunchConfigError

    for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
        if g > limit:
            raise LaunchConfigError(f"kernel {name!r}: grid {grid} has {g} blocks along {'xyz'[axis]}, more than the "
                                    f"{limit} a GPU allows there -- the launch would fail on a GPU "
                                    "(CUDA_ERROR_INVALID_VALUE); put the large dimension on x")
    for axis, (b, limit) in enumerate(zip(block, MAX_BLOCK)):
        if b > limit:
            raise LaunchConfigError(f"kernel {name!r}: block {block} has {b} threads along {'xyz'[axis]}, more than "
                                    f"the {limit} a GPU allows -- the launch would fail on a GPU")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise LaunchConfigError(f"kernel {name!r}: block {block} is {threads} threads, more than the "
                                f"{MAX_THREADS_PER_BLOCK} a GPU allows per block -- the launch would fail on a GPU")


def _tolerant_jit(stock_jit):
    """Numba's built-in simulator predates options of numba-cuda's ``cuda.jit`` (``launch_bounds``,
    ``lineinfo``, ...). They only tune code generation for a GPU, so on the simulator they are dropped instead
    of failing the import of every module that uses them."""
    params = inspect.signature(stock_jit).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return stock_jit

    @functools.wraps(stock_jit)
    def jit(*args, **kwargs):
        return stock_jit(*args, **{k: v for k, v in kwargs.items() if k in params})

    jit.__gpukernels_sim__ = True
    return jit


def install() -> None:
    """Make the gpukernels scheduler run every simulated kernel launch from now on (idempotent)."""
    if not getattr(FakeCUDAKernel.__call__, "__gpukernels_sim__", False):
        FakeCUDAKernel.__call__ = _sim_call
    ufuncs.install()
    cuda = sys.modules.get("numba.cuda")
    if cuda is not None and not getattr(cuda.jit, "__gpukernels_sim__", False):
        cuda.jit = _tolerant_jit(cuda.jit)
    if cuda is not None:
        for name, decorator in ufuncs.decorators().items():
            if not hasattr(cuda, name):
                setattr(cuda, name, decorator)


def uninstall() -> None:
    """Back to Numba's stock simulator (for comparisons and benchmarks)."""
    FakeCUDAKernel.__call__ = stock_call
    ufuncs.uninstall()


def is_installed() -> bool:
    return getattr(FakeCUDAKernel.__call__, "__gpukernels_sim__", False)
