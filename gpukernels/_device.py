"""Choose where kernels run -- a real CUDA GPU or Numba's CUDA simulator -- *before* numba.cuda is imported.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when ``numba.cuda`` is first imported, so the choice has to be made
here, at ``import gpukernels``:

* ``GPUKERNELS_DEVICE=sim``  -> the simulator, always (CI, laptops, debugging).
* ``GPUKERNELS_DEVICE=gpu``  -> a real GPU; a clear error if none can be used.
* unset or ``auto``          -> a GPU when the CUDA driver reports one, otherwise the simulator.

The GPU probe asks the driver directly through ctypes (``cuInit`` + ``cuDeviceGetCount``) so that no CUDA
library is imported just to find out that there is no GPU.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings

ENV_VAR = "GPUKERNELS_DEVICE"
MODES = ("auto", "gpu", "sim")


class DeviceError(RuntimeError):
    """The requested device cannot be used."""


def _driver_gpu_count() -> tuple[int, str]:
    """Number of CUDA devices the driver sees, and why it is 0 when it is."""
    names = ["libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"]
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return 0, "no CUDA driver library (libcuda) found"
    rc = lib.cuInit(0)
    if rc != 0:
        return 0, f"cuInit failed with CUDA error {rc}"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return 0, f"cuDeviceGetCount failed with CUDA error {rc}"
    if count.value == 0:
        return 0, "the CUDA driver reports no device"
    return count.value, ""


def _numba_cuda_imported() -> bool:
    return "numba.cuda" in sys.modules


def select_mode() -> tuple[str, str]:
    """Decide the mode and set NUMBA_ENABLE_CUDASIM accordingly. Returns (mode, reason)."""
    requested = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if requested not in MODES:
        raise DeviceError(
            f"{ENV_VAR} must be one of {', '.join(MODES)}; got {os.environ.get(ENV_VAR)!r}"
        )
    already_sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

    if requested == "sim":
        mode, reason = "sim", f"{ENV_VAR}=sim"
    elif requested == "gpu":
        if already_sim and _numba_cuda_imported():
            raise DeviceError(
                f"{ENV_VAR}=gpu, but numba.cuda was already imported in simulator mode "
                "(NUMBA_ENABLE_CUDASIM=1); start a fresh Python process without NUMBA_ENABLE_CUDASIM"
            )
        count, why = _driver_gpu_count()
        if count == 0:
            raise DeviceError(
                f"{ENV_VAR}=gpu, but no usable CUDA GPU was found ({why}). "
                f"Unset {ENV_VAR} (or set it to 'sim') to run on Numba's CUDA simulator."
            )
        mode, reason = "gpu", f"{ENV_VAR}=gpu"
    else:
        if already_sim:
            mode, reason = "sim", "NUMBA_ENABLE_CUDASIM=1 was set"
        else:
            count, why = _driver_gpu_count()
            mode, reason = ("gpu", f"{count} CUDA device(s) found") if count else ("sim", why)

    if mode == "sim":
        if _numba_cuda_imported() and not already_sim:
            warnings.warn(
                "numba.cuda was imported before gpukernels without NUMBA_ENABLE_CUDASIM=1; gpukernels "
                "needs the simulator but cannot switch an already imported numba.cuda. Import gpukernels "
                "first, or set GPUKERNELS_DEVICE=sim / NUMBA_ENABLE_CUDASIM=1 before starting Python.",
                RuntimeWarning,
                stacklevel=3,
            )
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    return mode, reason


MODE, REASON = select_mode()


def is_simulator() -> bool:
    """True when kernels run on the CUDA simulator (no GPU)."""
    return MODE == "sim"


# numba-cuda 0.30 compiles nothing with numpy >= 2.5 ("module 'numpy' has no attribute 'row_stack'").
KNOWN_BROKEN = [
    (
        "numba-cuda",
        (0, 30),
        "numpy",
        (2, 5),
        "numba-cuda 0.30 cannot compile any kernel with numpy >= 2.5 "
        "(AttributeError: module 'numpy' has no attribute 'row_stack'); install numpy<2.5",
    ),
]


def _version_tuple(text: str | None) -> tuple[int, ...]:
    out = []
    for part in (text or "").split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in ("numba", "numba-cuda", "numpy", "llvmlite", "cuda-bindings"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def compatibility_warnings(versions: dict[str, str | None] | None = None) -> list[str]:
    """Known-broken combinations among the installed packages."""
    versions = package_versions() if versions is None else versions
    problems = []
    for pkg, pkg_min, dep, dep_min, message in KNOWN_BROKEN:
        pv, dv = versions.get(pkg), versions.get(dep)
        if pv and dv and _version_tuple(pv)[:2] == pkg_min and _version_tuple(dv)[:2] >= dep_min:
            problems.append(f"{message} (found {pkg} {pv}, {dep} {dv})")
    return problems


def device_info() -> dict:
    """Mode, device and package versions, plus warnings about known-broken combinations."""
    import platform

    from numba import cuda

    info: dict = {
        "mode": MODE,
        "reason": REASON,
        "python": platform.python_version(),
        "versions": package_versions(),
        "numba_cuda_backend": "numba-cuda" if "numba_cuda" in (cuda.__file__ or "") else "numba (built-in)",
    }
    if MODE == "gpu":
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info.update(
            device=name,
            compute_capability=".".join(map(str, dev.compute_capability)),
            sm_count=dev.MULTIPROCESSOR_COUNT,
            driver_version=".".join(map(str, cuda.cudadrv.driver.driver.get_version())),
        )
    else:
        info.update(device="Numba CUDA simulator (CPU)", compute_capability=None, sm_count=None)
    info["warnings"] = compatibility_warnings(info["versions"])
    return info
