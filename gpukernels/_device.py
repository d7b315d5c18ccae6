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
import functools
import os
import sys
import warnings

ENV_VAR = "GPUKERNELS_DEVICE"
MODES = ("auto", "gpu", "sim")


class DeviceError(RuntimeError):
    """The requested device cannot be used."""


DRIVER_LIBRARIES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib")


def load_driver(names=DRIVER_LIBRARIES):
    """The CUDA driver library (ctypes), the first of ``names`` that loads, or None."""
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _driver_gpu_count() -> tuple[int, str]:
    """Number of CUDA devices the driver sees, and why it is 0 when it is."""
    lib = load_driver()
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


def _started_as_command() -> bool:
    """True in the ``gpukernels`` command (its console script, ``python -m gpukernels``): there a DeviceError at
    import is a one-line message, not a traceback. A library import still raises DeviceError."""
    if os.path.basename(sys.argv[0]).split(".")[0] in ("gpukernels", "gpukernels-script"):
        return True
    argv = list(getattr(sys, "orig_argv", sys.argv))  # while -m imports the package, sys.argv[0] is "-m"
    names = ("gpukernels", "gpukernels.cli", "gpukernels.__main__")
    return any(a == "-m" and b in names for a, b in zip(argv, argv[1:])) or any(a in {"-m" + n for n in names}
                                                                                  for a in argv)


try:
    MODE, REASON = select_mode()
except DeviceError as _err:
    if _started_as_command():
        raise SystemExit(f"gpukernels: {_err}") from None
    raise


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


# ----------------------------------------------------------------------------------------------------------
# The CUDA toolchain: numba-cuda's compiler (NVVM) and linker (nvJitLink). No GPU is needed for it, but it has
# wheels only for Linux (x86_64, aarch64) and Windows (x86_64) -- none for macOS. Without it everything runs on
# Numba's simulator; what compiles for a real GPU (`gpukernels resources`, the occupancy figures, the grader's
# compile gate) says so, in one line, with TOOLCHAIN_FIX.
# ----------------------------------------------------------------------------------------------------------

TOOLCHAIN_FIX = ("to get it, install gpukernels with its cu12 or cu13 extra on Linux or Windows (no GPU needed): "
                 'pip install -e ".[cu13]"')


def numba_cuda_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba_cuda") is not None


@functools.cache
def cuda_toolchain_missing() -> str | None:
    """Why numba-cuda's CUDA compiler cannot be used on this machine (one short clause), or None when it can.

    Only numba-cuda counts: Numba's own, older ``numba.cuda`` cannot compile gpukernels' kernels (they use
    numba-cuda's intrinsics), so a system CUDA toolkit without numba-cuda is reported missing too -- the same
    answer a Mac gets. The libraries are looked up the way numba-cuda looks them up (cuda.pathfinder: the
    cu12/cu13 wheels, then CUDA_HOME and the system), without importing numba.cuda."""
    if not numba_cuda_installed():
        return "numba-cuda is not installed" + (" (it has no macOS wheels)" if sys.platform == "darwin" else "")
    try:
        from cuda import pathfinder

        for lib in ("nvvm", "nvJitLink"):
            pathfinder.load_nvidia_dynamic_lib(lib)
    except Exception as err:  # noqa: BLE001 - any failure to find the libraries means: not usable here
        first = (str(err).splitlines() or [""])[0][:160]
        return f"numba-cuda is installed without its CUDA toolchain ({type(err).__name__}: {first})"
    return None


def backend() -> str:
    """Which engine runs kernels in this process, in words."""
    from numba import cuda

    numba_cuda = "numba_cuda" in (cuda.__file__ or "")
    if MODE == "gpu":
        return "numba-cuda on a GPU" if numba_cuda else "Numba's built-in CUDA target on a GPU"
    engine = "numba-cuda's simulator" if numba_cuda else "Numba's built-in simulator (numba-cuda is not installed)"
    return f"{engine}, with gpukernels' simulator on top (CPU)"


def unavailable() -> list[str]:
    """What cannot run on this machine, one line each with what to do about it."""
    out = []
    if MODE != "gpu":
        out.append("GPU runs and timing (`gpukernels bench`, the grader's speed gate): no CUDA GPU here -- "
                   f"results are correct, speeds are not measured ({REASON})")
    missing = cuda_toolchain_missing()
    if missing:
        out.append("compiling for a GPU (`gpukernels resources`, the occupancy figures, the grader's compile gate): "
                   f"{missing}; {TOOLCHAIN_FIX}")
    return out


def device_info() -> dict:
    """Mode, backend, device and package versions, what is unavailable here, and warnings about known-broken
    combinations."""
    import platform

    from numba import cuda

    info: dict = {
        "mode": MODE,
        "reason": REASON,
        "backend": backend(),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "versions": package_versions(),
        "numba_cuda_backend": "numba-cuda" if "numba_cuda" in (cuda.__file__ or "") else "numba (built-in)",
        "cuda_toolchain": cuda_toolchain_missing() or "available (numba-cuda with NVVM and nvJitLink)",
        "unavailable": unavailable(),
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
