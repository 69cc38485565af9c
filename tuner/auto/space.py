"""A sketch's symbols as tuner knobs, so the template machinery tunes sketches unchanged.

One config space holds every sketch of a workload: a ``sketch`` knob picks one, and
each sketch's symbols are knobs of their own (prefixed ``s<k>.``): ``define_split``
for tile sizes (exact factorizations, inner factors bounded), ``define_knob`` for
annotations and unroll depths. Optuna (:mod:`ember.tuner.search`) samples them knob by
knob like any template's; the knobs of the sketches a config does not pick are
ignored. :func:`steps_for` turns a config into the plain steps that build its schedule
and that its record stores.

The ``sketch`` knob has one more choice, :data:`FALLBACK`, its default: the schedule the
workload runs untuned (a fused group's anchor schedule, which no sketch rebuilds). The
space's default config is therefore the untuned kernel, so the search measures it first,
as its baseline and seed, and a record can say that nothing beat it. It is valid only
with every other knob at its default, so that it is one config, not one per value of
knobs it ignores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.tuner.auto.sketch import Prod, Sketch, Sym, concretize
from ember.tuner.auto.steps import Step
from ember.tuner.space import Config

FALLBACK = "fallback"  # the ``sketch`` choice that builds the workload's untuned schedule


def define_sketch_space(cfg: Config, sketches: Sequence[Sketch]) -> None:
    """Define the ``sketch`` knob (every sketch, then :data:`FALLBACK`, the default) and
    every sketch's knobs on ``cfg``."""
    cfg.define_knob("sketch", [*(sk.name for sk in sketches), FALLBACK], default=FALLBACK)
    for sk in sketches:
        for decl in sk.knobs.values():
            if decl.kind == "split":
                cfg.define_split(
                    decl.name, decl.extent, num_outputs=decl.parts, max_factor=decl.max_factor
                )
            else:
                cfg.define_knob(decl.name, list(decl.candidates))
        for what, symbol, most in sk.limits:
            cfg.add_constraint(_within(sk, symbol, most), f"{sk.name}: {what} <= {most}")
    cfg.add_constraint(_fallback_once, f"{FALLBACK}: every other knob at its default")


def is_fallback_choice(cfg: Config) -> bool:
    """Whether ``cfg`` (a config of a sketch space) picks the untuned schedule."""
    return bool(cfg["sketch"].val == FALLBACK)


def _fallback_once(cfg: Any) -> bool:
    if not is_fallback_choice(cfg):
        return True
    knobs = cfg.space.knobs
    return all(i == knobs[n].default_index for n, i in cfg.choices.items() if n != "sketch")


def _within(sketch: Sketch, symbol: Sym | Prod, most: int) -> Callable[[Any], bool]:
    def check(cfg: Any) -> bool:
        if cfg["sketch"].val != sketch.name:
            return True
        return bool(symbol.resolve(lambda name: _value(cfg, name)) <= most)

    return check


def chosen_sketch(cfg: Config, sketches: Sequence[Sketch]) -> Sketch:
    """The sketch ``cfg``'s ``sketch`` knob names."""
    name = cfg["sketch"].val
    return next(sk for sk in sketches if sk.name == name)


def _value(cfg: Config, name: str) -> Any:
    entity = cfg[name]
    return entity.size if hasattr(entity, "size") else entity.val


def steps_for(cfg: Config, sketches: Sequence[Sketch]) -> list[Step]:
    """The concrete steps of the sketch ``cfg`` picks, with ``cfg``'s knob values (none
    for :data:`FALLBACK`, whose schedule no steps build)."""
    if is_fallback_choice(cfg):
        return []
    return concretize(chosen_sketch(cfg, sketches), lambda name: _value(cfg, name))
