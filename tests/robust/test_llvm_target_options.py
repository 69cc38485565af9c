"""Unknown ``-mcpu`` / ``-mattr`` values: an ArgumentError with the choices, not an LLVM abort."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_llvm.cpu_choices import llvm_choices


def _build(target: str):
    A = te.placeholder((19,), name="A")
    B = te.compute((19,), lambda i: A[i] * 2.0 - 1.0, name="B")
    return ember.build(te.create_schedule(B.op), [A, B], target=target)


def test_choices_come_from_llvm() -> None:
    import llvmlite.binding as llvm

    cpus, features = llvm_choices(llvm.get_process_triple())
    assert llvm.get_host_cpu_name() in cpus
    assert {"x86-64", "skylake", "znver3"} <= cpus
    assert {"avx2", "fma", "avx512f"} <= features


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("llvm -mcpu=skylak", r"-mcpu 'skylak'.*did you mean skylake.*valid choices:.*znver"),
        ("llvm -mcpu=foo", r"unknown -mcpu 'foo' for .*valid choices: .*haswell"),
        ("llvm -mattr=+avx3", r"unknown -mattr feature 'avx3'.*valid choices:.*avx2"),
        ("llvm -mattr=avx2", r"-mattr entry 'avx2' must be a feature name with \+ or -"),
        ("llvm -mattr=+avx2,fma", r"-mattr entry 'fma' must be"),
    ],
)
def test_bad_cpu_or_feature_in_a_subprocess(target: str, message: str) -> None:
    """LLVM aborted the process on these; a regression must not take the suite down."""
    script = textwrap.dedent(f"""
        import re
        from tests.robust.test_llvm_target_options import _build
        from ember.errors import ArgumentError
        try:
            _build({target!r})
        except ArgumentError as e:
            assert re.search({message!r}, str(e), re.S), str(e)
            print("OK")
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.parametrize(
    "target", ["llvm -mcpu=x86-64", "llvm -mcpu=haswell -mattr=+avx2,-fma", "llvm -mattr=+sse4.2"]
)
def test_valid_cpu_and_features_build(target: str, rng: np.random.Generator) -> None:
    mod = _build(target)
    a = rng.uniform(-3, 3, 19).astype("float32")
    out = np.full(19, np.nan, "float32")
    mod(a, out)
    np.testing.assert_allclose(out, a * 2 - 1, rtol=1e-6)
