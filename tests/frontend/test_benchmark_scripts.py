"""The frontend's benchmark scripts run (on a small selection) and print their tables."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_node_suite_script_prints_a_per_op_table(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["onnx_node_suite.py", "--op", "Relu", "--op", "Flatten"])
    runpy.run_path(str(BENCH / "onnx_node_suite.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "Relu" in out and "Flatten" in out
    assert re.search(r"\n\d+/\d+ cases pass \(\d+\.\d%\)", out)


@pytest.mark.slow
def test_model_benchmark_script_checks_and_times(monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    argv = ["bench_models.py", "--models", "cnn,mlp", "--number", "1", "--repeat", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(BENCH / "bench_models.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "cnn" in out and "mlp" in out and "ort/ember" in out
