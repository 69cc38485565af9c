"""Encoding a config space as Optuna parameters, so a sampler can use the knobs' order.

Sits between the config spaces (:mod:`ember.tuner.space`) and the search
(:mod:`ember.tuner.search`). Each knob becomes one or more integer parameters with a
fixed range, the same in every trial (TPE's multivariate model and CMA-ES need fixed
distributions):

- a split knob into ``n`` loops becomes ``n - 1`` ordered parameters ``"<knob>.<k>"``,
  the index of inner factor ``k`` in the sorted list of factors the knob uses. The
  factors are divisors or powers of two, so the index is already on a log scale.
  Decoding picks the factors innermost-last, each clamped down to the largest listed
  factor that still fits what the earlier ones left (divides it for ``"factors"``, does
  not exceed it otherwise), so every parameter vector decodes to a valid split and
  nearby indices mean nearby tile sizes;
- a knob of numbers in increasing order (``define_knob("mr", [1, 2, 4, 8])``) becomes
  an ordered index parameter;
- any other knob (booleans, strings, reorders, annotations) an unordered categorical
  over its candidate indices;
- a knob the space holds fixed (``ConfigSpace.with_fixed``) no parameter: every
  decoded config has its fixed value, so no trial is spent on another.

``SpaceEncoding.decode(params)`` gives the :class:`ConfigEntity`; ``encode(entity)``
gives parameters that decode back to it (what ``study.enqueue_trial`` takes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

from ember.errors import ConfigError
from ember.tuner.knob import Knob, OtherKnob, SplitKnob
from ember.tuner.space import ConfigEntity, ConfigSpace

MAX_GRID = 1_000_000  # parameter vectors a grid search may enumerate


@dataclass(frozen=True)
class Param:
    """One Optuna parameter: ``size`` values ``0 .. size-1``, ordered or categorical."""

    name: str
    size: int
    ordered: bool

    def distribution(self) -> Any:
        # optional dependency: optuna
        from optuna.distributions import CategoricalDistribution, IntDistribution

        if self.ordered:
            return IntDistribution(0, self.size - 1)
        return CategoricalDistribution(list(range(self.size)))

    def suggest(self, trial: Any) -> int:
        if self.ordered:
            return int(trial.suggest_int(self.name, 0, self.size - 1))
        return int(trial.suggest_categorical(self.name, list(range(self.size))))


def _is_increasing_numbers(values: tuple[Any, ...]) -> bool:
    nums = all(isinstance(v, Real) and not isinstance(v, bool) for v in values)
    return nums and all(a < b for a, b in zip(values, values[1:]))


class _SplitCodec:
    """A split knob as one factor index per inner loop."""

    def __init__(self, knob: SplitKnob) -> None:
        self.knob = knob
        self.pool = sorted({f for cand in knob.candidates for f in cand[1:]})
        self.lookup = {cand: i for i, cand in enumerate(knob.candidates)}
        self.params = [
            Param(f"{knob.name}.{k}", len(self.pool), True)
            for k in range(1, knob.num_outputs)
            if len(knob) > 1
        ]

    def decode(self, values: list[int]) -> int:
        if not self.params:
            return 0
        extent, exact = self.knob.extent, self.knob.policy == "factors"
        inner, product = [], 1
        for v in values:
            pos = min(max(int(v), 0), len(self.pool) - 1)
            while pos > 0 and not _fits(self.pool[pos], product, extent, exact):
                pos -= 1
            inner.append(self.pool[pos])
            product *= self.pool[pos]
        cand = (-(-extent // product), *inner)
        if cand not in self.lookup:  # the knob's candidate list and the clamp disagree
            raise ConfigError(f"split knob '{self.knob.name}': factors {cand} are not a candidate")
        return self.lookup[cand]

    def encode(self, choice: int) -> list[int]:
        if not self.params:
            return []
        return [self.pool.index(f) for f in self.knob.candidates[choice][1:]]


def _fits(factor: int, product: int, extent: int, exact: bool) -> bool:
    if exact:
        return (extent // product) % factor == 0
    return product * factor <= extent


class _IndexCodec:
    """A knob as the index of its candidate (ordered when the candidates are)."""

    def __init__(self, knob: Knob) -> None:
        ordered = isinstance(knob, OtherKnob) and _is_increasing_numbers(knob.candidates)
        self.params = [Param(knob.name, len(knob), ordered)] if len(knob) > 1 else []

    def decode(self, values: list[int]) -> int:
        return int(values[0]) if self.params else 0

    def encode(self, choice: int) -> list[int]:
        return [int(choice)] if self.params else []


class SpaceEncoding:
    """The parameters of a whole space, and the maps between them and its configs."""

    def __init__(self, space: ConfigSpace) -> None:
        self.space = space
        self._codecs = {
            name: _SplitCodec(k) if isinstance(k, SplitKnob) else _IndexCodec(k)
            for name, k in space.knobs.items()
            if name not in space.fixed
        }

    @property
    def params(self) -> list[Param]:
        return [p for codec in self._codecs.values() for p in codec.params]

    def distributions(self) -> dict[str, Any]:
        return {p.name: p.distribution() for p in self.params}

    def suggest(self, trial: Any) -> ConfigEntity:
        """The config of an Optuna trial, asked for parameter by parameter (define-by-run)."""
        return self.decode({p.name: p.suggest(trial) for p in self.params})

    def decode(self, params: Mapping[str, int]) -> ConfigEntity:
        """The config that ``params`` stand for; every in-range vector decodes."""
        choices = dict(self.space.fixed)
        for name, codec in self._codecs.items():
            try:
                values = [params[p.name] for p in codec.params]
            except KeyError as e:
                raise ConfigError(f"parameter {e} of knob '{name}' is missing") from e
            choices[name] = codec.decode(values)
        return self.space.from_choices(choices)

    def encode(self, entity: ConfigEntity) -> dict[str, int]:
        """Parameters that decode to ``entity`` (for ``study.enqueue_trial``)."""
        out: dict[str, int] = {}
        for name, codec in self._codecs.items():
            values = codec.encode(entity.choices[name])
            out.update({p.name: v for p, v in zip(codec.params, values)})
        return out

    def grid(self) -> dict[str, list[int]]:
        """Every parameter's values, for Optuna's ``GridSampler``."""
        size = math.prod(p.size for p in self.params)
        if size > MAX_GRID:
            raise ConfigError(
                f"a grid search over this space would enumerate {size} parameter vectors "
                f"(at most {MAX_GRID}); use sampler='tpe', 'random' or 'cmaes'"
            )
        return {p.name: list(range(p.size)) for p in self.params}
