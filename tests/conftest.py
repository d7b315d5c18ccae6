"""Shared test fixtures. ``import gpukernels`` picks the device (GPUKERNELS_DEVICE=sim|gpu|auto)."""

import numpy as np
import pytest

import gpukernels

GPU = gpukernels.MODE == "gpu"


def pytest_report_header(config):
    return f"gpukernels mode: {gpukernels.MODE} ({gpukernels._device.REASON})"


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run with GPUKERNELS_DEVICE=gpu on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def seed():
    """A fresh seed for every test (printed in failure messages so that a failure can be replayed)."""
    return int(np.random.SeedSequence().entropy % (2**32))
