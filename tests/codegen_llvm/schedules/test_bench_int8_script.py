"""``benchmarks/bench_int8.py`` checks its kernels and prints the three ratios."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

from ember.codegen_llvm.tensor_intrinsics import has_vnni

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_int8.py"


@pytest.mark.skipif(not has_vnni(), reason="host CPU has no AVX-512 VNNI")
def test_bench_int8_prints_ratios(monkeypatch, capsys) -> None:  # noqa: ANN001
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(sys, "argv", ["bench_int8.py", "--shapes", "33x40x21"])
    runpy.run_path(str(BENCH), run_name="__main__")
    out = capsys.readouterr().out
    assert re.search(r"33x40x21 \| int8 vnni .* \| fp32 ember .*x\) \| ort MatMulInteger", out)
