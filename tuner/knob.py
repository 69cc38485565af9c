"""Knobs: the tunable choices of a schedule template, each a finite, ordered list of candidates.

A template declares knobs through its config (``cfg.define_split`` and friends in
:mod:`ember.tuner.space`); each knob here enumerates its candidates once, in a fixed
order, so a config is just one choice index per knob and a search (Optuna) can sample
knob by knob. ``knob.entity(i)`` wraps candidate ``i`` as the entity the template
reads (:mod:`ember.tuner.entity`). Split candidates are exact factorizations
("factors") or power-of-two inner tiles with a rounded-up outer loop ("power2",
"verbose"), since Ember's schedules guard non-divisible splits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any, ClassVar

from ember.errors import ConfigError
from ember.tuner.entity import (
    AnnotateEntity,
    Entity,
    OtherOptionEntity,
    ReorderEntity,
    SplitEntity,
)

SPLIT_POLICIES = ("factors", "power2", "verbose")
REORDER_POLICIES = ("all", "candidate")
ANNOTATE_POLICIES = ("try_unroll", "try_unroll_vec")
ANNOTATIONS = ("none", "unroll", "vec")
MAX_REORDER_AXES = 8  # 8! = 40320 permutations; more calls for policy="candidate"


def is_int(value: Any) -> bool:
    """An integer that is not a bool (numpy integers count)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def to_jsonable(value: Any) -> Any:
    """A JSON-ready copy of a candidate value (tuples become lists; unknown objects, repr)."""
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if is_int(value):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return to_jsonable(value.item())
    return repr(value)


@dataclass(frozen=True, eq=False)
class Knob:
    """A named, ordered list of candidates and a default.

    ``candidates`` holds the raw values (factor tuples, option values, permutations,
    annotation tuples); ``entity(i)`` wraps candidate ``i`` for the template. The
    default may lie outside the candidates (a hand-written fallback tile such as
    ``[-1, 8, 4]``); then ``default_index`` is None.
    """

    kind: ClassVar[str] = "knob"

    name: str
    candidates: tuple[Any, ...]
    default_value: Any
    default_index: int | None

    def __len__(self) -> int:
        return len(self.candidates)

    def entity(self, index: int) -> Entity:
        return self._wrap(self.candidates[index])

    @property
    def default(self) -> Entity:
        return self._wrap(self.default_value)

    def value_json(self, index: int) -> Any:
        """Candidate ``index`` as JSON, written next to the choice index in records."""
        return to_jsonable(self.candidates[index])

    def coerce(self, value: Any) -> Entity:
        """An entity from ``value`` (an entity of this kind, or its raw form)."""
        raise NotImplementedError

    def _wrap(self, value: Any) -> Entity:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name}: {self.kind} x{len(self)}"


def _find(candidates: Sequence[Any], value: Any) -> int | None:
    """Index of ``value`` in ``candidates``, matching types too (so ``True`` is not ``1``)."""
    for i, cand in enumerate(candidates):
        if type(cand) is type(value) and cand == value:
            return i
    return None


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _powers_of_two(n: int) -> list[int]:
    return [1 << k for k in range(n.bit_length()) if (1 << k) <= n]


def _split_candidates(
    extent: int, num_outputs: int, policy: str, max_factor: int | None
) -> list[tuple[int, ...]]:
    """Factor tuples (outer, *inner) in lexicographic order of the inner factors.

    "factors": the product of the factors is exactly ``extent``. "power2": every inner
    factor is a power of two; "verbose": a divisor or a power of two. For those two the
    inner product stays <= ``extent`` and the outer factor is the ceiling of what is
    left (the schedule guards the last, partial tile). ``max_factor`` bounds inner factors.
    """
    if policy == "factors":
        pool = _divisors(extent)
    elif policy == "power2":
        pool = _powers_of_two(extent)
    else:
        pool = sorted(set(_divisors(extent)) | set(_powers_of_two(extent)))
    if max_factor is not None:
        pool = [f for f in pool if f <= max_factor]
    result: list[tuple[int, ...]] = []

    def extend(inner: tuple[int, ...], product: int) -> None:
        if len(inner) == num_outputs - 1:
            if policy != "factors" or extent % product == 0:
                result.append((-(-extent // product), *inner))
            return
        for f in pool:
            if product * f > extent:
                break
            extend((*inner, f), product * f)

    extend((), 1)
    return result


def _balanced(candidates: Sequence[tuple[int, ...]]) -> int:
    """The candidate with the smallest largest factor; ties go to larger outer factors."""
    return min(
        range(len(candidates)),
        key=lambda i: (max(candidates[i]), [-f for f in candidates[i]]),
    )


def extent_of(name: str, extent: Any) -> int:
    """A constant positive extent from an int, an ``IntImm`` or an axis with a domain."""
    value = extent
    dom = getattr(extent, "dom", None)
    if dom is not None:
        value = getattr(dom, "extent", None)
    if not is_int(value):
        value = getattr(value, "value", value)
    if not is_int(value) or value < 1:
        raise ConfigError(
            f"split knob '{name}' needs a constant positive extent (an int, IntImm or axis "
            f"with a constant domain), got {extent!r}"
        )
    return int(value)


@dataclass(frozen=True, eq=False)
class SplitKnob(Knob):
    """Ways to split an axis of ``extent`` into ``num_outputs`` nested loops."""

    kind: ClassVar[str] = "split"

    extent: int = 1
    num_outputs: int = 2
    policy: str = "factors"
    max_factor: int | None = None

    @staticmethod
    def create(
        name: str,
        extent: Any,
        num_outputs: int = 2,
        policy: str = "factors",
        max_factor: int | None = None,
        default: Sequence[int] | None = None,
    ) -> SplitKnob:
        n = extent_of(name, extent)
        if policy not in SPLIT_POLICIES:
            raise ConfigError(
                f"split knob '{name}': unknown policy {policy!r}; expected one of {SPLIT_POLICIES}"
            )
        if not is_int(num_outputs) or num_outputs < 1:
            raise ConfigError(f"split knob '{name}': num_outputs must be >= 1, got {num_outputs!r}")
        if max_factor is not None and (not is_int(max_factor) or max_factor < 1):
            raise ConfigError(f"split knob '{name}': max_factor must be >= 1, got {max_factor!r}")
        cands = _split_candidates(n, num_outputs, policy, max_factor)
        index: int | None
        if default is None:
            index = _balanced(cands)
            value = cands[index]
        else:
            value = _split_default(name, default, num_outputs)
            resolved = (-(-n // math.prod(value[1:])), *value[1:]) if value[0] == -1 else value
            index = _find(cands, resolved)
        return SplitKnob(name, tuple(cands), value, index, n, num_outputs, policy, max_factor)

    def _wrap(self, value: Any) -> Entity:
        return SplitEntity(value)

    def coerce(self, value: Any) -> Entity:
        factors = value.factors if isinstance(value, SplitEntity) else value
        return SplitEntity(_split_default(self.name, factors, self.num_outputs))

    def describe(self) -> str:
        return (
            f"{self.name}: split({self.extent} into {self.num_outputs}, {self.policy}) x{len(self)}"
        )


def _split_default(name: str, factors: Any, num_outputs: int) -> tuple[int, ...]:
    ok = isinstance(factors, (list, tuple)) and len(factors) == num_outputs
    ok = ok and all(is_int(f) and f >= 1 for f in factors[1:])
    ok = ok and is_int(factors[0]) and (factors[0] >= 1 or factors[0] == -1)
    if not ok:
        raise ConfigError(
            f"split knob '{name}': factors {factors!r} must be {num_outputs} positive ints "
            "(the first may be -1 for 'what remains')"
        )
    return tuple(int(f) for f in factors)


@dataclass(frozen=True, eq=False)
class OtherKnob(Knob):
    """A list of arbitrary values (``define_knob``)."""

    kind: ClassVar[str] = "knob"

    @staticmethod
    def create(name: str, candidates: Sequence[Any], default: Any = None) -> OtherKnob:
        if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
            raise ConfigError(f"knob '{name}': candidates must be a list, got {candidates!r}")
        if not candidates:
            raise ConfigError(f"knob '{name}' has no candidates")
        cands = tuple(candidates)
        index = 0 if default is None else _find(cands, default)
        if index is None:
            raise ConfigError(
                f"knob '{name}': default {default!r} is not one of its candidates {list(cands)}"
            )
        return OtherKnob(name, cands, cands[index], index)

    def _wrap(self, value: Any) -> Entity:
        return OtherOptionEntity(value)

    def coerce(self, value: Any) -> Entity:
        return value if isinstance(value, OtherOptionEntity) else OtherOptionEntity(value)


def _perm_of(name: str, order: Any, axes: Sequence[Any]) -> tuple[int, ...]:
    """Axis positions of ``order`` (axes, matched by identity, or int positions)."""
    perm = []
    for item in order:
        if is_int(item):
            perm.append(int(item))
            continue
        pos = next((k for k, axis in enumerate(axes) if axis is item), None)
        if pos is None:
            raise ConfigError(f"reorder knob '{name}': {item!r} is not one of its axes")
        perm.append(pos)
    if sorted(perm) != list(range(len(axes))):
        raise ConfigError(
            f"reorder knob '{name}': order {list(order)!r} is not a permutation of its "
            f"{len(axes)} axes"
        )
    return tuple(perm)


@dataclass(frozen=True, eq=False)
class ReorderKnob(Knob):
    """Orders of a list of axes: every permutation ("all") or given ones ("candidate")."""

    kind: ClassVar[str] = "reorder"

    num_axes: int = 0
    policy: str = "all"

    @staticmethod
    def create(
        name: str,
        axes: Sequence[Any],
        policy: str = "all",
        candidate: Sequence[Sequence[Any]] | None = None,
        default: Sequence[Any] | None = None,
    ) -> ReorderKnob:
        axes = list(axes)
        if not axes:
            raise ConfigError(f"reorder knob '{name}' has no axes")
        if policy == "all":
            if len(axes) > MAX_REORDER_AXES:
                raise ConfigError(
                    f"reorder knob '{name}': {len(axes)} axes give {math.factorial(len(axes))} "
                    f"orders (at most {MAX_REORDER_AXES} axes); use policy='candidate'"
                )
            cands = list(itertools.permutations(range(len(axes))))
        elif policy == "candidate":
            if not candidate:
                raise ConfigError(f"reorder knob '{name}': policy='candidate' needs candidate=")
            cands = list(dict.fromkeys(_perm_of(name, order, axes) for order in candidate))
        else:
            raise ConfigError(
                f"reorder knob '{name}': unknown policy {policy!r}; "
                f"expected one of {REORDER_POLICIES}"
            )
        value = cands[0] if default is None else _perm_of(name, default, axes)
        return ReorderKnob(name, tuple(cands), value, _find(cands, value), len(axes), policy)

    def _wrap(self, value: Any) -> Entity:
        return ReorderEntity(value)

    def coerce(self, value: Any) -> Entity:
        perm = value.perm if isinstance(value, ReorderEntity) else value
        return ReorderEntity(_perm_of(self.name, perm, [None] * self.num_axes))


def _check_anns(name: str, anns: Any, num_axes: int) -> tuple[str, ...]:
    ok = isinstance(anns, (list, tuple)) and len(anns) == num_axes
    if not ok or any(a not in ANNOTATIONS for a in anns):
        raise ConfigError(f"annotate knob '{name}': {anns!r} must be {num_axes} of {ANNOTATIONS}")
    return tuple(anns)


@dataclass(frozen=True, eq=False)
class AnnotateKnob(Knob):
    """Per-axis annotations: unroll or not ("try_unroll"), and vectorize the last axis too
    ("try_unroll_vec"). The all-``"none"`` candidate comes first and is the default."""

    kind: ClassVar[str] = "annotate"

    num_axes: int = 0
    policy: str = "try_unroll_vec"

    @staticmethod
    def create(
        name: str,
        axes: Sequence[Any],
        policy: str = "try_unroll_vec",
        default: Sequence[str] | None = None,
    ) -> AnnotateKnob:
        n = len(axes)
        if n == 0:
            raise ConfigError(f"annotate knob '{name}' has no axes")
        if policy not in ANNOTATE_POLICIES:
            raise ConfigError(
                f"annotate knob '{name}': unknown policy {policy!r}; "
                f"expected one of {ANNOTATE_POLICIES}"
            )
        per_axis: list[tuple[str, ...]] = [("none", "unroll")] * n
        if policy == "try_unroll_vec":
            per_axis[-1] = ("none", "unroll", "vec")
        cands = list(itertools.product(*per_axis))
        value = cands[0] if default is None else _check_anns(name, default, n)
        return AnnotateKnob(name, tuple(cands), value, _find(cands, value), n, policy)

    def _wrap(self, value: Any) -> Entity:
        return AnnotateEntity(value)

    def coerce(self, value: Any) -> Entity:
        anns = value.anns if isinstance(value, AnnotateEntity) else value
        return AnnotateEntity(_check_anns(self.name, anns, self.num_axes))
