"""Transfer: configs tuned for one shape seed the search of the same template at another.

Read by ``tune(..., transfer=paths)`` (:mod:`ember.tuner.tune`). A record's config
names each knob's chosen *value* (``"values"`` in :meth:`ConfigEntity.to_json`), so a
config maps into another task's space knob by knob where the same value is a
candidate there (a 64-wide tile exists for N=1024 and N=2048 alike; a split matches
by its inner factors). Configs that do
not map, or that break the new space's constraints, are dropped; the rest are
enqueued best first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ember.tuner.knob import Knob, SplitKnob
from ember.tuner.records import Record, config_records, read_records
from ember.tuner.space import ConfigEntity, ConfigSpace


def map_config(values: Mapping[str, Any], space: ConfigSpace) -> ConfigEntity | None:
    """The config of ``space`` choosing ``values[knob]`` for every knob, if there is one."""
    choices = {}
    for name, knob in space.knobs.items():
        if name not in values:
            return None
        index = next((i for i in range(len(knob)) if _same(knob, i, values[name])), None)
        if index is None:
            return None
        choices[name] = index
    entity = space.from_choices(choices)
    return entity if entity.is_valid() else None


def _same(knob: Knob, index: int, value: Any) -> bool:
    """Whether candidate ``index`` is ``value``; a split compares its inner factors only,
    the outer loop being whatever the shape leaves."""
    mine = knob.value_json(index)
    if isinstance(knob, SplitKnob):
        return isinstance(value, list) and mine[1:] == value[1:]
    return bool(mine == value)


def transfer_configs(
    task: Any, records: Iterable[Record] | str | Path | Iterable[str | Path], limit: int = 10
) -> list[ConfigEntity]:
    """Up to ``limit`` configs of ``task``'s space from the best valid records of the same
    template and target kind (any shape), fastest first, without duplicates."""
    items: list[Any] = [records] if isinstance(records, (str, Path)) else list(records)
    recs: list[Record] = items if all(isinstance(r, Record) for r in items) else read_records(items)
    kind = task.target.kind
    same = [
        r
        for r in config_records(recs)  # a config timed again counts at its middle timing
        if r.template == task.name
        and r.target.split()[0] == kind
        and r.template_version == task.template.version
    ]
    out: list[ConfigEntity] = []
    for rec in sorted(same, key=lambda r: r.cost):
        cfg = map_config(rec.config.get("values", {}), task.config_space)
        if cfg is not None and cfg not in out:
            out.append(cfg)
        if len(out) >= limit:
            break
    return out
