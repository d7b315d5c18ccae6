"""What the sanitizer scripts share: arrays on the device (or host arrays in the simulator), and one checked run of
a list of launches whose output is compared with a float64 reference."""

from __future__ import annotations

import gpukernels
from gpukernels.check import compare
from numba import cuda


def on_device(*arrays):
    """The arrays as the launches take them: copied to the GPU, or as they are in the simulator."""
    return [cuda.to_device(a) for a in arrays] if gpukernels.MODE == "gpu" else list(arrays)


def run_and_compare(launches, out, ref, tolerance):
    """Run the launches in order, then compare ``out`` (on the device or not) with ``ref``."""
    for launch in launches:
        launch()
    return compare(out.copy_to_host() if gpukernels.MODE == "gpu" else out, ref, tolerance)
