"""Cases run only by the nightly run (``EMBER_NIGHTLY=1``): end-to-end checks too slow for
CI's 15 minutes whose block kinds CI covers elsewhere."""

from __future__ import annotations

import os
import zlib
from typing import Any

import pytest

NIGHTLY = bool(os.environ.get("EMBER_NIGHTLY"))
skip_unless_nightly = pytest.mark.skipif(not NIGHTLY, reason="nightly: set EMBER_NIGHTLY=1")


def nightly_param(*values: Any) -> Any:
    """A ``parametrize`` case marked ``slow`` that runs only in the nightly run."""
    return pytest.param(*values, marks=[pytest.mark.slow, skip_unless_nightly])


def examples(n: int) -> int:
    """A property test's ``max_examples``: ``n`` in the nightly run, half of it (at least 3)
    in CI, whose 15 minutes the slowest property tests (builds of random configs) fill."""
    return n if NIGHTLY else max(3, n // 2)


def configs(n: int) -> int:
    """How many sampled configs a template test builds: ``n`` nightly, half (at least 2) in
    CI (each is a full LLVM build of a template kernel, 1-3 s)."""
    return n if NIGHTLY else max(2, n // 2)


def sample_in_ci(*params: Any, every: int = 2) -> None:
    """Skip this case of a large sweep in CI unless it falls in CI's 1-in-``every``
    sample (chosen by a stable hash of ``params``, so the same cases run each time and
    each parameter's values still appear); nightly runs every case. For stacked
    ``parametrize`` sweeps, where marking single cases nightly would mean writing out the
    product."""
    if NIGHTLY:
        return
    if zlib.crc32(repr(params).encode()) % every:
        pytest.skip(f"nightly: EMBER_NIGHTLY=1 (CI runs 1 in {every} of this sweep)")
