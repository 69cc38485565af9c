"""The runtime is the bottom layer: loading it (and ``import ember``) loads no IR or backend."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "statement",
    ["import ember", "import ember.runtime, ember.runtime.nd, ember.runtime.registry"],
)
def test_the_runtime_loads_without_the_ir_or_a_backend(statement):
    upper = ("ember.tir", "ember.codegen_llvm", "ember.codegen_cuda", "ember.graph")
    code = (
        f"{statement}; import sys; print(' '.join(m for m in sys.modules if m.startswith({upper})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
