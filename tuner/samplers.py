"""The Optuna samplers a search can use, by name, seeded.

:func:`ember.tuner.tune` checks a sampler name against :data:`SAMPLERS` and makes the
sampler here from the space's encoding (:mod:`ember.tuner.encode`); the search loop
(:mod:`ember.tuner.search`) then asks it for configs. Optuna is an optional dependency,
imported only when a sampler is made.
"""

from __future__ import annotations

import warnings
from typing import Any

from ember.errors import ConfigError
from ember.tuner.encode import SpaceEncoding

SAMPLERS = ("tpe", "random", "cmaes", "grid")


def make_sampler(name: str, seed: int | None, encoding: SpaceEncoding) -> Any:
    """The Optuna sampler ``name``, seeded."""
    # optional dependency: optuna
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            # constant_liar: trials asked together (a batch of parallel builds) spread out.
            # n_ei_candidates=64 (Optuna's default is 24): with few draws from the
            # good-trial density a seed can settle below the best, probably because the
            # GEMM spaces' best region is narrow in their joint knobs. Against the sweeps of
            # benchmarks/bench_tuner.py (1024^3, 2048^3, 64x1536x384; 10 seeds each) 24 left
            # 3 of 30 seeds short of 95% of the true best after 200 trials, 64 none.
            return optuna.samplers.TPESampler(
                seed=seed,
                multivariate=True,
                n_startup_trials=10,
                n_ei_candidates=64,
                constant_liar=True,
            )
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(
                seed=seed, warn_independent_sampling=False, n_startup_trials=5
            )
        if name == "grid":
            return _GridSampler(encoding.grid(), seed=seed)
    raise ConfigError(f"unknown sampler {name!r}; expected one of {SAMPLERS}")


def _grid_class() -> type:
    # optional dependency: optuna
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        """Optuna's grid sampler, minus its ``study.stop()`` (which only works inside
        ``study.optimize``); the loop asks ``is_exhausted`` instead."""

        def after_trial(self, *args: Any, **kwargs: Any) -> None:
            return None

    return GridSampler


def _GridSampler(grid: dict[str, list[int]], seed: int | None) -> Any:  # noqa: N802
    return _grid_class()(grid, seed=seed)
