"""What one measurement of one config gives: its costs or the kind of error it met.

Shared by the measurers (:mod:`ember.tuner.measure`), the search loop
(:mod:`ember.tuner.search`) and the records (:mod:`ember.tuner.records`); this module
holds only plain values, no processes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from ember.tuner.space import ConfigEntity


class ErrorKind(str, Enum):
    """Why a candidate has no cost. ``INVALID_CONFIG`` is turned down before any build
    (the space's constraints, the template, or ``verify_gpu``) and is not a measured trial."""

    OK = "ok"
    INVALID_CONFIG = "invalid_config"
    COMPILE = "compile"
    RUNTIME = "runtime"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    CRASH = "crash"


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per run, one entry per repeat (empty on error), and what went wrong."""

    costs: tuple[float, ...] = ()
    error: ErrorKind = ErrorKind.OK
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.OK and bool(self.costs)

    @property
    def cost(self) -> float:
        """The median of the repeats; ``inf`` for a failed candidate."""
        return statistics.median(self.costs) if self.ok else math.inf

    @property
    def busy(self) -> bool:
        """Whether the repeats disagree so much that the machine was busy (see :func:`busy`)."""
        return busy(self.costs)

    @staticmethod
    def failed(
        error: ErrorKind, message: str, build_s: float = 0.0, run_s: float = 0.0
    ) -> MeasureResult:
        return MeasureResult((), error, message[-2000:], build_s, run_s)


# The slowest repeat over the fastest beyond which a measurement is not trusted: repeats of
# one compiled kernel on an idle machine stay within a few percent of each other (after the
# warm-up run), so a spread this wide means something else took the cores meanwhile.
BUSY_SPREAD = 1.5


def busy(costs: tuple[float, ...] | list[float]) -> bool:
    """Whether ``costs`` (one per repeat) spread wider than :data:`BUSY_SPREAD`: the
    median of such a measurement says more about the machine's load than the kernel."""
    good = [c for c in costs if c > 0]
    return len(good) >= 2 and max(good) > BUSY_SPREAD * min(good)


def spread_text(costs: tuple[float, ...] | list[float]) -> str:
    """``"x2.31 spread"``: the slowest repeat over the fastest, for a flag in a table."""
    good = [c for c in costs if c > 0]
    return f"x{max(good) / min(good):.2f} spread" if len(good) >= 2 else ""


class Measurer(Protocol):
    """Measures a batch of configs of one task (in parallel where it can)."""

    @property
    def device_name(self) -> str: ...  # read-only: a property or a plain attribute

    def measure(self, task: object, configs: list[ConfigEntity]) -> list[MeasureResult]: ...

    def close(self) -> None: ...
