"""gpukernels: a Numba CUDA teaching toolkit.

``import gpukernels`` first decides where kernels run (see ``gpukernels._device``): a real GPU when one is
usable, otherwise Numba's CUDA simulator, extended by ``gpukernels.sim`` (warp primitives, a fast
deterministic scheduler, errors that name the bug).
"""

from ._device import MODE, DeviceError, device_info, is_simulator  # noqa: F401  (must run first)

if MODE == "sim":
    try:
        from . import sim as _sim
    except ImportError:  # the simulator extension is optional while it is being built
        _sim = None
    else:
        if hasattr(_sim, "install"):
            _sim.install()

from . import cbr, matmul, softmax  # noqa: E402,F401
from .trace import trace  # noqa: E402,F401  (the module stays importable as gpukernels.trace via sys.modules)

LESSONS = {"matmul": matmul, "softmax": softmax, "cbr": cbr}

__all__ = ["matmul", "softmax", "cbr", "LESSONS", "device_info", "is_simulator", "MODE", "DeviceError"]
__version__ = "0.1.0"
