"""Template-free tuning: sketches generated from a compute DAG, and a learned cost model.

``create_auto_task(workload, args, "llvm")`` tunes any TE workload registered with
``@register_workload`` through the ordinary tuner (``ember.tuner.tune``): the DAG is
analysed (:mod:`.dag`), the rules (:mod:`.rules`, :mod:`.rules_cuda`) write sketches,
step lists with symbolic tile sizes and annotations (:mod:`.sketch`), whose symbols
become knobs (:mod:`.space`); a config's concrete steps (:mod:`.steps`) build its
schedule and are stored in its record, and :func:`apply_steps` replays them.
:mod:`.features` and :mod:`.cost_model` rank candidates before any is measured
(:mod:`.guided`).

The names below load on first use: ``ember.tuner.tune`` imports the cost model, and the
schedule machinery the sketches need should not load with it (``ember --help``).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "STEPS_VERSION": "steps",
    "Step": "steps",
    "apply_steps": "steps",
    "format_steps": "steps",
    "steps_from_json": "steps",
    "steps_to_json": "steps",
    "Sketch": "sketch",
    "generate_sketches": "sketch",
    "create_auto_task": "task",
    "record_steps": "task",
    "register_workload": "task",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ember.tuner.auto' has no attribute {name!r}")
    # start-up cost: the sketch and schedule modules load on first use (see the docstring)
    return getattr(importlib.import_module(f"ember.tuner.auto.{home}"), name)
