"""Re-timing a search's pick against its baseline, by turns, after the search.

A search keeps the fastest of hundreds of noisy measurements, so the winner's time is
biased low (the winner's curse): on a two-core guest whose kernel times wander by 20-40%
from one run to the next, a pick no faster than the fallback can show 1.3x. The
summary of ``ember tune MODEL`` then promised four times the change the model showed
(ResNet-18: -19% predicted, -4.3% measured). So the pick and the fallback are measured
again, alternately, over a few rounds in the same runner, and the summary's speedup and
the model's predicted change use those times. Neither Ansor nor MetaSchedule does this:
they report the search's own best.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ember.tuner.result import MeasureResult
from ember.tuner.space import ConfigEntity


@dataclass(frozen=True)
class Retimed:
    """Median seconds of the fallback and of the pick over the rounds, each round timing
    both (by turns)."""

    fallback_s: float
    best_s: float
    rounds: int

    @property
    def speedup(self) -> float:
        return self.fallback_s / self.best_s

    @property
    def saved(self) -> float:
        """The fraction of the fallback's time the pick saves (negative: it is slower)."""
        return 1.0 - self.best_s / self.fallback_s


def by_turns(
    measurer: Any, task: Any, configs: list[ConfigEntity], rounds: int
) -> list[list[MeasureResult]]:
    """Each round's results for ``configs``, timed by turns: one result per config."""
    turns = getattr(measurer, "measure_by_turns", None)
    if turns is not None:
        return turns(task, configs, rounds)  # type: ignore[no-any-return]
    # a measurer that rebuilds each config: one measure call per round
    return [measurer.measure(task, configs) for _ in range(rounds)]


def retime(
    measurer: Any, task: Any, fallback: ConfigEntity, best: ConfigEntity, rounds: int = 3
) -> Retimed | None:
    """``best`` against ``fallback`` by turns over ``rounds`` rounds, or None where either
    failed in any round (the search's figures then stand alone)."""
    per_round = by_turns(measurer, task, [fallback, best], rounds)
    if any(not r.ok for results in per_round for r in results):
        return None
    first = statistics.median(results[0].cost for results in per_round)
    pick = statistics.median(results[1].cost for results in per_round)
    return Retimed(first, pick, rounds)


__all__ = ["Retimed", "by_turns", "retime"]
