"""gpukernels: a Numba CUDA teaching toolkit.

``import gpukernels`` first decides where kernels run (see ``gpukernels._device``): a real GPU when one is
usable, otherwise Numba's CUDA simulator, extended by ``gpukernels.sim`` (warp primitives, a fast
deterministic scheduler, errors that name the bug).
"""

from ._device import MODE, DeviceError, device_info, is_simulator  # noqa: F401  (must run first)

if MODE == "sim":
    from . import sim as _sim

    _sim.install()  # every @cuda.jit launch from now on runs on gpukernels' simulator

from . import attention, cbr, matmul, softmax, tensor_core  # noqa: E402,F401
from .trace import trace  # noqa: E402,F401  (the module stays importable as gpukernels.trace via sys.modules)

LESSONS = {"matmul": matmul, "softmax": softmax, "cbr": cbr, "tensor_core": tensor_core, "attention": attention}

__all__ = ["matmul", "softmax", "cbr", "tensor_core", "attention", "LESSONS", "trace", "device_info", "is_simulator", "MODE", "DeviceError"]
__version__ = "0.1.0"
