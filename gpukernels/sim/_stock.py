"""The stock Numba CUDA simulator's pieces that gpukernels' simulator builds on, from whichever simulator
``numba.cuda`` resolves to: numba-cuda's, or the copy built into Numba (macOS, where numba-cuda cannot be installed).
`gpukernels.sim.install` replaces its kernels' launch; `gpukernels.sim._launch` unwraps its array arguments."""

from __future__ import annotations

from numba.cuda.simulator import kernel as stock_kernel  # noqa: F401
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray  # noqa: F401

try:  # numba-cuda
    from numba.cuda.simulator.args import ArgHint  # noqa: F401
except ImportError:  # Numba's built-in simulator
    from numba.cuda.args import ArgHint  # noqa: F401
