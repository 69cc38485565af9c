"""The performance gate: does a benchmark report keep each model's speed ratio against
onnxruntime where the baseline put it?

The rule, per model the baseline has (a model it lacks is reported, never failed):

    fail when  current ratio < baseline ratio - allowance
    allowance = max(current half-range, baseline half-range, floor * baseline ratio)

A ratio is the median over rounds of onnxruntime's time over Ember's, and its half-range
is half the spread of the rounds' ratios (:mod:`ember.perf.timing`): the noise either
run saw. The floor (3% by default, ``--noise-floor``) covers a run of one round, whose
range is zero, and what rounds cannot show (a machine busier on one day than another).
So a drop the measurements themselves cannot tell from noise passes, and a larger one
fails naming the model, the drop and the allowance.

A baseline is a report written by ``ember bench --update-baseline`` (the same JSON as
``--report``); it must have been taken at the same thread count and input size
(``--quick`` or not), else the comparison is refused with a :class:`BaselineError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.errors import UserError

FLOOR = 0.03


class BaselineError(UserError):
    """A baseline file that is missing, malformed, or taken under other settings."""


@dataclass(frozen=True)
class Verdict:
    """One model's comparison: its ratio now, the baseline's, the allowed drop."""

    model: str
    current: float
    baseline: float | None
    allowance: float
    passed: bool

    def text(self) -> str:
        """One line for the console."""
        if self.baseline is None:
            return f"{self.model}: ratio {self.current:.2f}, not in the baseline (not checked)"
        change = self.current - self.baseline
        verdict = "ok" if self.passed else "REGRESSION"
        return (
            f"{self.model}: ratio {self.current:.2f} vs baseline {self.baseline:.2f} "
            f"({change:+.2f}, {change / self.baseline:+.1%}; noise allowance "
            f"{self.allowance:.2f}) {verdict}"
        )


def half_range(entry: dict[str, Any]) -> float:
    """Half the spread of a report entry's per-round ratios."""
    return (float(entry["ratio_max"]) - float(entry["ratio_min"])) / 2


def allowance(current: dict[str, Any], baseline: dict[str, Any], floor: float = FLOOR) -> float:
    """How far below the baseline's ratio the current one may fall (the module's rule)."""
    return max(half_range(current), half_range(baseline), floor * float(baseline["ratio"]))


def check_settings(baseline: dict[str, Any], threads: int, quick: bool) -> None:
    """Refuse a baseline taken at another thread count or input size: its ratios are not
    comparable (checked before a run, so no time is spent on a run it cannot judge)."""
    for key, value in (("threads", threads), ("quick", quick)):
        if baseline.get(key) != value:
            raise BaselineError(
                f"the baseline was taken with {key}={baseline.get(key)!r} and this run "
                f"with {key}={value!r}; rerun with the baseline's settings or rewrite it "
                "with --update-baseline"
            )


def compare(report: dict[str, Any], baseline: dict[str, Any], floor: float = FLOOR) -> list:
    """One :class:`Verdict` per model of ``report`` (both in the report format)."""
    check_settings(baseline, report["threads"], report["quick"])
    out = []
    for name, entry in report["models"].items():
        base = baseline["models"].get(name)
        current = float(entry["ratio"])
        if base is None:
            out.append(Verdict(name, current, None, 0.0, True))
            continue
        allowed = allowance(entry, base, floor)
        ok = current >= float(base["ratio"]) - allowed
        out.append(Verdict(name, current, float(base["ratio"]), allowed, ok))
    return out


def load_baseline(path: str | Path) -> dict[str, Any]:
    """A baseline file, checked to hold what :func:`compare` reads."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError as e:
        raise BaselineError(
            f"baseline {path} does not exist (write one with --update-baseline)"
        ) from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BaselineError(f"baseline {path} is not a readable JSON file: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise BaselineError(f"baseline {path}: expected an object with a 'models' object")
    if not isinstance(data.get("threads"), int) or not isinstance(data.get("quick"), bool):
        raise BaselineError(f"baseline {path}: expected 'threads' (integer) and 'quick' (bool)")
    for name, entry in data["models"].items():
        fields = ("ratio", "ratio_min", "ratio_max")
        values = [entry.get(f) if isinstance(entry, dict) else None for f in fields]
        if not all(_positive(v) for v in values):
            raise BaselineError(
                f"baseline {path}: model {name!r} needs positive numbers for "
                f"{', '.join(fields)}, got {entry!r}"
            )
        if not values[1] <= values[0] <= values[2]:  # type: ignore[operator]
            raise BaselineError(
                f"baseline {path}: model {name!r} has ratio outside [ratio_min, ratio_max]"
            )
    return data


def _positive(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
