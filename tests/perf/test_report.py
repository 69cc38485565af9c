"""A report from fixed timings: its fields, its ratios and ranges, and its markdown table
(the README's, naming the machine; one column group per report)."""

from __future__ import annotations

import pytest

from ember.perf.report import build, markdown
from ember.perf.timing import ModelTiming


def _timing(name: str, threads: int, ember: list[float], ort: list[float]) -> ModelTiming:
    return ModelTiming(name, threads, 1.5, ember, ort, (10, 20))


def test_a_report_holds_medians_ratio_range_and_the_machine():
    t = _timing("mlp", 2, [2e-3, 1e-3, 4e-3], [2e-3, 3e-3, 2e-3])  # ratios 1, 3, 0.5
    report = build([t], {"threads": 2, "quick": False, "rounds": 3, "mode": "process"})
    entry = report["models"]["mlp"]
    assert entry["ratio"] == pytest.approx(1.0) and entry["ratio_min"] == pytest.approx(0.5)
    assert entry["ratio_max"] == pytest.approx(3.0)
    assert entry["ember_ms"] == pytest.approx(2.0) and entry["ort_ms"] == pytest.approx(2.0)
    assert entry["number"] == {"ember": 10, "onnxruntime": 20} and len(entry["rounds"]) == 3
    assert report["geomean_ratio"] == pytest.approx(1.0)
    assert report["machine"]["cpu"] and report["versions"]["ember"] and report["threads"] == 2


def test_the_markdown_table_names_the_machine_and_puts_thread_counts_side_by_side():
    settings = {"quick": True, "rounds": 3, "mode": "process"}
    one = build([_timing("mlp", 1, [4e-3], [5e-3])], {**settings, "threads": 1})
    two = build(
        [_timing("mlp", 2, [2e-3], [3e-3]), _timing("cnn", 2, [1e-3], [1e-3])],
        {**settings, "threads": 2},
    )
    text = markdown(one, two)
    assert text.splitlines()[0].startswith(one["machine"]["cpu"])
    assert "1 and 2 thread(s)" in text
    assert "| mlp | 4.000 | 5.000 | 1.25× (1.25-1.25) | 2.000 | 3.000 | 1.50× (1.50-1.50) |" in text
    assert "| cnn | - | - | - | 1.000 | 1.000 | 1.00× (1.00-1.00) |" in text
