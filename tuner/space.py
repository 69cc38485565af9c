"""Config spaces: the knobs a template defines, and the configs that pick one candidate each.

A schedule template asks ``get_config()`` for its config and calls ``cfg.define_split``,
``define_knob``, ``define_reorder`` and ``define_annotate`` (knobs from
:mod:`ember.tuner.knob`), then reads ``cfg[name]`` to build its schedule. The same
template body meets three kinds of config:

- :class:`ConfigSpace` while a task is created: defines record the knobs, ``cfg[name]``
  gives each knob's default so the body runs through; afterwards the space is frozen.
  ``len(space)`` is the product of the knob sizes; ``space.get(index)`` decodes a
  mixed-radix index (the first knob varies fastest) into a :class:`ConfigEntity`.
- :class:`ConfigEntity` when a chosen config is instantiated: one choice index per
  knob, JSON round-trip for records, ``is_valid()`` against the template's constraints.
- :class:`FallbackConfig` when no config was chosen: every knob at its default, which
  the template may override (``if cfg.is_fallback: cfg["tile"] = [-1, 4]``).

A space may hold some knobs fixed (:meth:`ConfigSpace.with_fixed`): a graph's blocked
convolution can run only the channel blocks its neighbours give it, so its task searches
the other knobs alone. Its configs keep every knob and their index in the whole space, so
a record of a fixed task is a full config that a task without the restriction reads.

Defaults: the ``default=`` of a define; otherwise the first candidate, except for a
split, which defaults to its most balanced candidate (smallest largest factor, ties to
the larger outer factor), a tiling that is moderate on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ember.errors import ConfigError
from ember.tuner.entity import Entity
from ember.tuner.knob import (
    AnnotateKnob,
    Knob,
    OtherKnob,
    ReorderKnob,
    SplitKnob,
    is_int,
)

Constraint = Callable[["ConfigEntity"], bool]


def _unknown(name: str, known: Iterable[str]) -> ConfigError:
    names = ", ".join(f"'{k}'" for k in known) or "none"
    return ConfigError(f"unknown knob '{name}'; the template defines: {names}")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a knob name must be a non-empty string, got {name!r}")
    return name


class Config:
    """What a template's ``get_config()`` returns: the ``define_*`` API shared by all configs."""

    is_fallback: bool = False

    def define_split(
        self,
        name: str,
        extent: Any,
        num_outputs: int = 2,
        policy: str = "factors",
        max_factor: int | None = None,
        default: Sequence[int] | None = None,
    ) -> Knob:
        """Split an axis of ``extent`` (int or axis) into ``num_outputs`` factors, outer first.

        ``policy``: "factors" (exact factorizations), "power2" (powers of two inside, the
        outer factor rounds up) or "verbose" (both); ``max_factor`` bounds inner factors.
        """
        return self._define(
            name,
            lambda: SplitKnob.create(name, extent, num_outputs, policy, max_factor, default),
        )

    def define_knob(self, name: str, candidates: Sequence[Any], default: Any = None) -> Knob:
        """A plain list of values; ``cfg[name].val`` is the chosen one."""
        return self._define(name, lambda: OtherKnob.create(name, candidates, default))

    def define_reorder(
        self,
        name: str,
        axes: Sequence[Any],
        policy: str = "all",
        candidate: Sequence[Sequence[Any]] | None = None,
        default: Sequence[Any] | None = None,
    ) -> Knob:
        """Orders of ``axes``: every permutation ("all") or the ``candidate`` orders."""
        return self._define(
            name, lambda: ReorderKnob.create(name, axes, policy, candidate, default)
        )

    def define_annotate(
        self,
        name: str,
        axes: Sequence[Any],
        policy: str = "try_unroll_vec",
        default: Sequence[str] | None = None,
    ) -> Knob:
        """Unroll each axis or not; with "try_unroll_vec" the last axis may be vectorized."""
        return self._define(name, lambda: AnnotateKnob.create(name, axes, policy, default))

    def add_constraint(self, fn: Constraint, description: str = "") -> None:
        """Reject configs for which ``fn(cfg)`` is false (recorded by the space only)."""

    def set_record_extra(self, fn: Callable[[ConfigEntity], dict[str, Any]]) -> None:
        """Write ``fn(config)``'s keys into each config's record (recorded by the space
        only). An auto-scheduled task stores its schedule steps this way; a record whose
        keys differ from what ``fn`` gives for its choices does not match the space."""

    def _define(self, name: str, build: Callable[[], Knob]) -> Knob:
        raise NotImplementedError

    def _start_run(self) -> None:
        """Called when a template run begins with this config."""

    def __getitem__(self, name: str) -> Any:
        raise NotImplementedError


class ConfigSpace(Config):
    """The knobs of one task, in definition order, and the template's constraints."""

    def __init__(self) -> None:
        self._knobs: dict[str, Knob] = {}
        self._constraints: list[tuple[Constraint, str]] = []
        self._record_extra: Callable[[ConfigEntity], dict[str, Any]] | None = None
        self._fixed: dict[str, int] = {}  # knob -> the one choice this space allows
        self._frozen = False

    # -- collection (the template runs once against the space)

    def _define(self, name: str, build: Callable[[], Knob]) -> Knob:
        _check_name(name)
        if self._frozen:
            raise ConfigError(f"knob '{name}' defined after the config space was completed")
        if name in self._knobs:
            raise ConfigError(
                f"knob '{name}' is defined twice in one template; knob names must be unique"
            )
        knob = build()
        self._knobs[name] = knob
        return knob

    def add_constraint(self, fn: Constraint, description: str = "") -> None:
        if self._frozen:
            raise ConfigError("constraint added after the config space was completed")
        if not callable(fn):
            raise ConfigError(f"a constraint must be callable, got {fn!r}")
        label = description or getattr(fn, "__name__", "") or repr(fn)
        self._constraints.append((fn, label))

    def set_record_extra(self, fn: Callable[[ConfigEntity], dict[str, Any]]) -> None:
        if self._frozen:
            raise ConfigError("set_record_extra after the config space was completed")
        self._record_extra = fn

    def record_extra(self, entity: ConfigEntity) -> dict[str, Any]:
        """What :meth:`set_record_extra`'s function adds to ``entity``'s record ({} if none)."""
        return {} if self._record_extra is None else self._record_extra(entity)

    def __getitem__(self, name: str) -> Any:
        if name not in self._knobs:
            raise _unknown(name, self._knobs)
        return self._knobs[name].default

    def freeze(self) -> ConfigSpace:
        """Close the space: no more knobs or constraints. Returns ``self``."""
        self._frozen = True
        return self

    def with_fixed(self, values: Mapping[str, Any]) -> ConfigSpace:
        """A copy of this complete space in which knob ``name`` takes only the candidate
        ``values[name]`` (its value as records write it: ``{"ic_bn": 16}``). The copy's
        configs still choose every knob, indexed in the whole space; its size, sampling,
        encoding for a search and validity count only the configs with those values."""
        if not self._frozen:
            raise ConfigError("with_fixed needs a completed config space")
        fixed = dict(self._fixed)
        for name, value in values.items():
            if name not in self._knobs:
                raise _unknown(name, self._knobs)
            knob = self._knobs[name]
            choice = next((i for i in range(len(knob)) if knob.value_json(i) == value), None)
            if choice is None:
                shown = [knob.value_json(i) for i in range(len(knob))]
                raise ConfigError(
                    f"knob '{name}' cannot be fixed to {value!r}: its candidates are {shown}"
                )
            fixed[name] = choice
        out = ConfigSpace()
        out._knobs = self._knobs
        out._constraints = self._constraints
        out._record_extra = self._record_extra
        out._fixed = fixed
        return out.freeze()

    # -- the space as a finite set of configs

    @property
    def knobs(self) -> Mapping[str, Knob]:
        return MappingProxyType(self._knobs)

    @property
    def fixed(self) -> Mapping[str, int]:
        """The knobs this space holds fixed, each with its one allowed choice index."""
        return MappingProxyType(self._fixed)

    @property
    def fixed_values(self) -> dict[str, Any]:
        """The fixed knobs with their values as records write them (``{"ic_bn": 16}``)."""
        return {n: self._knobs[n].value_json(i) for n, i in self._fixed.items()}

    @property
    def size(self) -> int:
        """The number of configs: the product of the sizes of the knobs not fixed. A Python
        int of any size (an auto-scheduled task's union of sketch knobs exceeds
        ``sys.maxsize``, which ``len()`` cannot return)."""
        size = 1
        for name, knob in self._knobs.items():
            size *= 1 if name in self._fixed else len(knob)
        return size

    def __len__(self) -> int:
        return self.size

    def default_entity(self) -> ConfigEntity | None:
        """Every knob at its default (a fixed one at its fixed value): what the template's
        fallback runs, as a config of this space. None where a default lies outside its
        knob's candidates, or the config breaks a constraint."""
        if any(k.default_index is None for n, k in self._knobs.items() if n not in self._fixed):
            return None
        choices = {n: self._fixed.get(n, k.default_index) for n, k in self._knobs.items()}
        cfg = self.from_choices(choices)  # type: ignore[arg-type]
        return cfg if cfg.is_valid() else None

    def get(self, index: int) -> ConfigEntity:
        """Config ``index`` of the whole space (mixed radix, the first-defined knob varies
        fastest; fixed knobs count with all their candidates)."""
        whole = 1
        for knob in self._knobs.values():
            whole *= len(knob)
        if not is_int(index) or not 0 <= index < whole:
            raise ConfigError(f"config index {index!r} is outside [0, {whole})")
        index = int(index)
        choices = {}
        for name, knob in self._knobs.items():
            index, choices[name] = divmod(index, len(knob))
        return ConfigEntity(self, choices)

    def from_choices(self, choices: Mapping[str, int]) -> ConfigEntity:
        """The config picking candidate ``choices[name]`` of every knob."""
        return ConfigEntity(self, choices)

    def violations(self, entity: ConfigEntity) -> list[str]:
        """Descriptions of the constraints ``entity`` breaks, a fixed knob's value first."""
        off = [
            f"knob '{n}' is fixed to {self._knobs[n].value_json(i)!r}"
            for n, i in self._fixed.items()
            if entity.choices[n] != i
        ]
        return off + [label for fn, label in self._constraints if not fn(entity)]

    def is_valid(self, entity: ConfigEntity) -> bool:
        return not self.violations(entity)

    def sample(self, rng: Any = None, max_tries: int = 1000) -> ConfigEntity:
        """A random valid config, drawn knob by knob; deterministic for a seeded ``rng``.

        ``rng``: a ``random.Random``, a numpy ``Generator``, an int seed, or None (fresh).
        Raises ``ConfigError`` when ``max_tries`` draws found no valid config.
        """
        draw = _drawer(rng)
        for _ in range(max_tries):
            choices = {n: self._fixed.get(n) for n in self._knobs}
            for n, k in self._knobs.items():
                choices[n] = draw(len(k)) if choices[n] is None else choices[n]
            entity = ConfigEntity(self, choices)  # type: ignore[arg-type]
            if self.is_valid(entity):
                return entity
        labels = ", ".join(label for _, label in self._constraints)
        raise ConfigError(
            f"no valid config in {max_tries} random draws from a space of {self.size} "
            f"(constraints: {labels})"
        )

    def __repr__(self) -> str:
        knobs = "; ".join(k.describe() for k in self._knobs.values())
        fixed = f", fixed={self.fixed_values}" if self._fixed else ""
        return f"ConfigSpace(len={self.size}, knobs=[{knobs}]{fixed})"


def _drawer(rng: Any) -> Callable[[int], int]:
    if rng is None or (isinstance(rng, int) and not isinstance(rng, bool)):
        rng = random.Random(rng)
    if isinstance(rng, random.Random):
        return rng.randrange
    if hasattr(rng, "integers"):  # numpy.random.Generator
        return lambda n: int(rng.integers(n))
    raise ConfigError(
        f"sample() needs a random.Random, a numpy Generator or an int seed, got {rng!r}"
    )


class ConfigEntity(Config):
    """One point of a space: a candidate index for every knob."""

    def __init__(self, space: ConfigSpace, choices: Mapping[str, int]) -> None:
        if not isinstance(choices, Mapping):
            raise ConfigError(f"choices must map knob names to indices, got {choices!r}")
        missing = [n for n in space.knobs if n not in choices]
        extra = [n for n in choices if n not in space.knobs]
        if missing or extra:
            raise ConfigError(
                f"choices {dict(choices)} do not match the space's knobs {list(space.knobs)}"
                f" (missing: {missing}, unknown: {extra})"
            )
        self.space = space
        self._choices: dict[str, int] = {}
        index, stride = 0, 1
        for name, knob in space.knobs.items():
            choice = choices[name]
            if not is_int(choice):
                raise ConfigError(f"choice for knob '{name}' must be an int, got {choice!r}")
            choice = int(choice)
            if not 0 <= choice < len(knob):
                raise ConfigError(f"choice {choice} for knob '{name}' is outside [0, {len(knob)})")
            self._choices[name] = choice
            index += choice * stride
            stride *= len(knob)
        self.index = index

    @property
    def choices(self) -> dict[str, int]:
        return dict(self._choices)

    def _define(self, name: str, build: Callable[[], Knob]) -> Knob:
        if name not in self.space.knobs:
            raise ConfigError(
                f"knob '{name}' was not defined when the config space was collected; "
                "a template must define the same knobs for every config"
            )
        return self.space.knobs[name]

    def __getitem__(self, name: str) -> Entity:
        if name not in self._choices:
            raise _unknown(name, self._choices)
        return self.space.knobs[name].entity(self._choices[name])

    def is_valid(self) -> bool:
        return self.space.is_valid(self)

    def to_json(self) -> dict[str, Any]:
        """``{"index", "choices": {knob: i}, "values": {knob: value}}``; values aid reading
        and let :meth:`from_json` notice a record written for a different space."""
        knobs = self.space.knobs
        return {
            "index": self.index,
            "choices": dict(self._choices),
            "values": {n: knobs[n].value_json(i) for n, i in self._choices.items()},
            **self.space.record_extra(self),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any], space: ConfigSpace) -> ConfigEntity:
        if not isinstance(data, Mapping) or not isinstance(data.get("choices"), Mapping):
            raise ConfigError(f"a config record needs a 'choices' mapping, got {data!r}")
        entity = ConfigEntity(space, data["choices"])
        if "index" in data and data["index"] != entity.index:
            raise ConfigError(
                f"config record index {data['index']!r} does not match its choices "
                f"(index {entity.index} in this space)"
            )
        for name, value in dict(data.get("values", {})).items():
            mine = None
            if name in space.knobs:
                mine = space.knobs[name].value_json(entity.choices[name])
            if mine != value:
                raise ConfigError(
                    f"config record does not match this space: knob '{name}' is {value!r} "
                    f"in the record but {mine!r} here; was the template changed?"
                )
        for key, mine in space.record_extra(entity).items():
            if key in data and data[key] != mine:
                raise ConfigError(
                    f"config record does not match this space: its '{key}' differ from what "
                    "this space builds for the same choices; was the template changed?"
                )
        return entity

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ConfigEntity)
            and other.space is self.space
            and other.index == self.index
        )

    def __hash__(self) -> int:
        return hash((id(self.space), self.index))

    def __str__(self) -> str:
        body = ", ".join(f"{n}={self[n]}" for n in self._choices)
        return f"#{self.index} {{{body}}}"

    __repr__ = __str__


class FallbackConfig(Config):
    """Every knob at its default, unless the template sets one (``cfg[name] = value``)."""

    is_fallback = True

    def __init__(self) -> None:
        self._knobs: dict[str, Knob] = {}
        self._run_names: set[str] = set()
        self._overrides: dict[str, Entity] = {}

    def _start_run(self) -> None:
        self._run_names = set()

    def _define(self, name: str, build: Callable[[], Knob]) -> Knob:
        _check_name(name)
        if name in self._run_names:
            raise ConfigError(
                f"knob '{name}' is defined twice in one template; knob names must be unique"
            )
        self._run_names.add(name)
        self._knobs[name] = build()
        return self._knobs[name]

    def __getitem__(self, name: str) -> Entity:
        if name not in self._knobs:
            raise _unknown(name, self._knobs)
        return self._overrides.get(name, self._knobs[name].default)

    def __setitem__(self, name: str, value: Any) -> None:
        """Override a default: an entity, or its raw form (factors, value, order, anns)."""
        if name not in self._knobs:
            raise _unknown(name, self._knobs)
        self._overrides[name] = self._knobs[name].coerce(value)

    def __str__(self) -> str:
        body = ", ".join(f"{n}={self[n]}" for n in self._knobs)
        return f"fallback {{{body}}}"

    __repr__ = __str__
