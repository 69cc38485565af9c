"""The gate's rule on fixed numbers: a ratio may fall below the baseline's by the larger
of either run's half-range and the floor (a fraction of the baseline ratio), no more."""

from __future__ import annotations

import json

import pytest

from ember.perf.gate import BaselineError, allowance, compare, load_baseline


def _entry(ratio: float, lo: float | None = None, hi: float | None = None) -> dict:
    return {"ratio": ratio, "ratio_min": ratio if lo is None else lo,
            "ratio_max": ratio if hi is None else hi}  # fmt: skip


def _report(threads: int = 2, quick: bool = False, **models: dict) -> dict:
    return {"threads": threads, "quick": quick, "models": models}


def test_the_allowance_is_the_widest_of_both_half_ranges_and_the_floor():
    assert allowance(_entry(1.0), _entry(1.2), 0.03) == pytest.approx(0.036)  # floor
    assert allowance(_entry(1.0, 0.9, 1.1), _entry(1.2), 0.03) == pytest.approx(0.1)  # current
    assert allowance(_entry(1.0), _entry(1.2, 1.0, 1.6), 0.03) == pytest.approx(0.3)  # baseline


@pytest.mark.parametrize(
    "current, passed",
    [
        (_entry(1.165), True),  # 1.2 - 0.035: within the 3% floor (0.036)
        (_entry(1.163), False),  # 1.2 - 0.037: beyond it
        (_entry(1.11, 1.01, 1.21), True),  # beyond the floor, within its own noise (0.10)
        (_entry(1.09, 1.08, 1.10), False),  # a tight range does not excuse a 0.11 drop
        (_entry(1.5), True),  # faster always passes
    ],
)
def test_a_drop_beyond_the_allowance_fails(current, passed):
    (verdict,) = compare(_report(mlp=current), _report(mlp=_entry(1.2)), 0.03)
    assert verdict.passed is passed and verdict.baseline == 1.2
    assert ("REGRESSION" in verdict.text()) is not passed and "mlp" in verdict.text()


def test_a_model_the_baseline_lacks_is_reported_not_failed():
    (verdict,) = compare(_report(cnn=_entry(0.1)), _report(mlp=_entry(1.2)))
    assert verdict.passed and "not in the baseline" in verdict.text()


@pytest.mark.parametrize("key, value", [("threads", 1), ("quick", True)])
def test_a_baseline_taken_under_other_settings_is_refused(key, value):
    other = {**_report(mlp=_entry(1.0)), key: value}
    with pytest.raises(BaselineError, match=f"baseline was taken with {key}="):
        compare(_report(mlp=_entry(1.0)), other)


def test_load_baseline_checks_the_entries(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_report(mlp=_entry(1.0, 1.1, 1.2))))
    with pytest.raises(BaselineError, match="ratio outside"):
        load_baseline(path)
    path.write_text(json.dumps(_report(mlp=_entry(1.0, 0.9, 1.2))))
    assert load_baseline(path)["models"]["mlp"]["ratio"] == 1.0
    with pytest.raises(BaselineError, match="does not exist"):
        load_baseline(tmp_path / "none.json")
