"""Test settings shared by the whole suite: IR verification on, fixed seeds, GPU skips."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("EMBER_VERIFY_IR", "1")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        from ember.codegen_cuda.device import device_available

        have_gpu = device_available()
    except Exception:
        have_gpu = False
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(skip)
