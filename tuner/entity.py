"""Entities: one chosen candidate of a knob, in the form a schedule template uses.

A config (:mod:`ember.tuner.space`) hands the template, for each knob it defined, an
entity: a :class:`SplitEntity` (tile factors; ``.apply`` splits an axis), an
:class:`OtherOptionEntity` (a plain value), a :class:`ReorderEntity` or an
:class:`AnnotateEntity`. Knobs (:mod:`ember.tuner.knob`) make them. Entities call only
the duck-typed stage primitives ``split``, ``reorder``, ``unroll`` and ``vectorize``,
so this module imports nothing of the schedule layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ConfigError


def _stage(sch: Any, op: Any) -> Any:
    """``sch[op]`` for a tensor or an operation; ``op`` itself when it already is a stage."""
    if hasattr(op, "split") and hasattr(op, "reorder"):
        return op
    return sch[op]


@dataclass(frozen=True)
class SplitEntity:
    """Tile factors outer -> inner; a leading ``-1`` (defaults only) means "what remains"."""

    factors: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))

    @property
    def size(self) -> list[int]:
        return list(self.factors)

    def apply(self, sch: Any, op: Any, axis: Any) -> list[Any]:
        """Split ``axis`` of ``sch[op]`` by the inner factors, innermost first.

        Returns the ``len(size)`` axes, outer -> inner. The outermost factor is never
        passed to ``split``: it is whatever the inner factors leave.
        """
        stage = _stage(sch, op)
        inners = []
        for factor in reversed(self.factors[1:]):
            axis, inner = stage.split(axis, factor=factor)
            inners.append(inner)
        return [axis, *reversed(inners)]

    def __str__(self) -> str:
        return str(list(self.factors))


@dataclass(frozen=True)
class OtherOptionEntity:
    """A plain value chosen from a ``define_knob`` list."""

    val: Any

    def __str__(self) -> str:
        return repr(self.val)


@dataclass(frozen=True)
class ReorderEntity:
    """A permutation of axis positions: ``perm[k]`` is the axis placed k-th."""

    perm: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "perm", tuple(self.perm))

    def apply(self, sch: Any, op: Any, axes: Sequence[Any]) -> list[Any]:
        """Reorder ``axes`` of ``sch[op]`` by ``perm``; returns the axes in their new order."""
        if len(axes) != len(self.perm):
            raise ConfigError(
                f"reorder entity {list(self.perm)} needs {len(self.perm)} axes, got {len(axes)}"
            )
        ordered = [axes[i] for i in self.perm]
        _stage(sch, op).reorder(*ordered)
        return ordered

    def __str__(self) -> str:
        return str(list(self.perm))


@dataclass(frozen=True)
class AnnotateEntity:
    """One annotation per axis: ``"none"``, ``"unroll"`` or ``"vec"``."""

    anns: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "anns", tuple(self.anns))

    def apply(
        self,
        sch: Any,
        op: Any,
        axes: Sequence[Any],
        axis_lens: Sequence[int] | None = None,
        max_unroll: int | None = None,
    ) -> list[Any]:
        """Unroll / vectorize ``axes`` of ``sch[op]``; returns the axes unchanged.

        With ``axis_lens`` and ``max_unroll``, an axis longer than ``max_unroll`` is
        left rolled even where the entity says ``"unroll"`` (code size stays bounded).
        """
        if len(axes) != len(self.anns):
            raise ConfigError(
                f"annotate entity {list(self.anns)} needs {len(self.anns)} axes, got {len(axes)}"
            )
        stage = _stage(sch, op)
        for k, (axis, ann) in enumerate(zip(axes, self.anns)):
            if ann == "unroll":
                limited = axis_lens is not None and max_unroll is not None
                if not (limited and axis_lens[k] > max_unroll):  # type: ignore[index, operator]
                    stage.unroll(axis)
            elif ann == "vec":
                stage.vectorize(axis)
        return list(axes)

    def __str__(self) -> str:
        return str(list(self.anns))


Entity = SplitEntity | OtherOptionEntity | ReorderEntity | AnnotateEntity
