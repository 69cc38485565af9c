"""Test settings shared by the whole suite: IR verification on, fixed seeds, GPU skips, and a
private kernel cache folder per test process (``EMBER_CACHE_DIR``), so runs and parallel
workers never read each other's (or the user's) cached kernels.

The disk kernel cache is off unless a test turns it on (``EMBER_DISK_CACHE=1``, as the
cache's own tests do): a test process compiles each kernel once and keeps it in memory, so
writing every kernel's library to disk cost the suite about a fifth of its compile time and
was never read back."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import settings

from tests.nightly import NIGHTLY, NIGHTLY_ONLY, half_in_ci, half_reason

# Property tests draw the same examples on every run: a failure is reproducible, and CI is
# never red by chance (an LLVM assertion one rfactor schedule meets is an example:
# tests/codegen_llvm/test_known_llvm_assertion.py). To explore new examples, load
# Hypothesis's "default" profile here for a local run.
settings.register_profile("ember", derandomize=True)
settings.load_profile("ember")

os.environ.setdefault("EMBER_VERIFY_IR", "1")
_CACHE_DIR = tempfile.mkdtemp(prefix="ember-test-cache-")
os.environ["EMBER_CACHE_DIR"] = _CACHE_DIR
os.environ.setdefault("EMBER_DISK_CACHE", "0")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture
def avx512_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register tiles, channel blocks and weight panels sized for AVX-512's registers
    whatever this CPU is; the code is still built for this CPU and runs here (LLVM splits
    the wider vectors). For tests that pin the structure those rules give on an AVX-512
    host, where they were written and measured; ``tests/codegen_llvm/test_vector_unit.py``
    checks the sizing per CPU, and every numeric test runs on this CPU's own."""
    from ember.codegen_llvm import cpu_features

    monkeypatch.setattr(cpu_features, "_vector_unit", lambda target: cpu_features.AVX512)


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
    seen: set[str] = set()
    for item in items:
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(skip)
        covered = None if NIGHTLY else NIGHTLY_ONLY.get(item.nodeid)
        if covered:
            item.add_marker(pytest.mark.skip(reason=f"nightly (CI runs {covered})"))
        base = item.nodeid.split("[")[0]
        if half_in_ci(item.nodeid, first=base not in seen):
            item.add_marker(pytest.mark.skip(reason=f"nightly (CI runs half: {half_reason(base)})"))
        seen.add(base)
