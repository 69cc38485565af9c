"""``benchmarks/model_variants.py`` builds each variant's own kernels: a second build of one
model in a process reused the first's from the in-process cache whatever a patch said."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "model_variants.py"


@pytest.fixture(scope="module")
def script() -> dict:
    return runpy.run_path(str(SCRIPT), run_name="model_variants")


def test_variants_get_kernels_of_their_own(script: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.frontend.testing.catalog import CATALOG

    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    model, inputs = CATALOG["cnn"](np.random.default_rng(0), False)
    patch = (
        "import ember.codegen_llvm.parallel_work as w; old = w.MIN_PARALLEL_WORK;"
        " w.MIN_PARALLEL_WORK = 1 << 40; undo = lambda: setattr(w, 'MIN_PARALLEL_WORK', old)"
    )
    import ember.codegen_llvm.parallel_work as work

    before = work.MIN_PARALLEL_WORK
    same, again, serial = script["build_variants"](model, ["", "", patch])
    assert work.MIN_PARALLEL_WORK == before  # the patch's undo ran
    assert all(a.kernel is not b.kernel for a, b in zip(same.steps, again.steps))
    codes = [script["step_code"](lib) for lib in (same, again, serial)]
    assert codes[0] == codes[1]  # the same code, built twice
    assert codes[2] != codes[0]  # no parallel loops in the serial build
    for x, y in zip(same.run(inputs), serial.run(inputs)):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)
