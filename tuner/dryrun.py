"""``--dry-run``: build and check candidates without timing them (no device needed).

For a CUDA task on a machine without a GPU, ``ember tune --dry-run`` still shows
whether the template's configs build, compile with NVRTC and compute the right
answer on the SIMT emulator. It takes the task, a number of configs and a
:class:`~ember.tuner.measure.MeasureOption`; it gives each config's result (OK with no
costs, or the error kind). The configs are the fallback first, then distinct random
valid configs (all of them when the space is that small). No study, no records: a
dry run has no costs to search on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from ember.errors import ArgumentError
from ember.tuner.measure import LocalMeasurer, MeasureOption
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.space import ConfigEntity
from ember.tuner.tune import fallback_entity


@dataclass
class DryRunResult:
    """What a dry run measured: the configs it tried and their results, for inspection."""

    task: Any
    configs: list[ConfigEntity]
    results: list[MeasureResult]

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.error.value] = out.get(r.error.value, 0) + 1
        return out

    @property
    def failures(self) -> list[tuple[ConfigEntity, MeasureResult]]:
        """Configs that failed to build, run or check (a config the template or
        ``verify_gpu`` turns down is not a failure)."""
        good = (ErrorKind.OK, ErrorKind.INVALID_CONFIG)
        return [(c, r) for c, r in zip(self.configs, self.results) if r.error not in good]


def pick_configs(task: Any, n: int, seed: int | None = 0) -> list[ConfigEntity]:
    """The fallback, then distinct random valid configs, ``n`` in all (fewer when the
    space has fewer valid ones)."""
    space = task.config_space
    if space.size <= n:
        every = [space.get(i) for i in range(space.size)]
        valid = [c for c in every if c.is_valid()]
        first = fallback_entity(task)
        return sorted(valid, key=lambda c: c != first)
    picked: list[ConfigEntity] = [c for c in [fallback_entity(task)] if c is not None]
    rng = random.Random(seed)
    for _ in range(50 * n):
        if len(picked) >= n:
            break
        cfg = space.sample(rng)
        if cfg not in picked:
            picked.append(cfg)
    return picked


def dry_run(
    task: Any,
    n_configs: int = 20,
    option: MeasureOption | None = None,
    seed: int | None = 0,
    measure: Any = None,
) -> DryRunResult:
    """Build and check ``n_configs`` configs of ``task`` in worker processes, untimed."""
    if isinstance(n_configs, bool) or not isinstance(n_configs, int) or n_configs < 1:
        raise ArgumentError(f"dry_run: n_configs must be a positive int, got {n_configs!r}")
    option = replace(option or MeasureOption(), dry_run=True)
    measurer = measure if measure is not None else LocalMeasurer(option)
    configs = pick_configs(task, n_configs, seed)
    results: list[MeasureResult] = []
    try:
        step = max(1, int(getattr(measurer, "jobs", 1)))
        for i in range(0, len(configs), step):
            results += measurer.measure(task, configs[i : i + step])
    finally:
        if measure is None:
            measurer.close()
    return DryRunResult(task, configs, results)


__all__ = ["DryRunResult", "dry_run", "pick_configs"]
