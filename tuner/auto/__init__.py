"""Template-free schedules: sketches generated from a compute DAG by Ansor-style rules.

``create_auto_task(workload, args, "llvm")`` tunes any TE workload registered with
``@register_workload`` through the ordinary tuner (``ember.tuner.tune``): the DAG is
analysed (:mod:`.dag`), the rules
(:mod:`.rules`) write sketches, step lists with symbolic tile sizes and annotations
(:mod:`.sketch`), whose symbols become knobs (:mod:`.space`); a config's concrete steps
(:mod:`.steps`) build its schedule and are stored in its record, and
:func:`apply_steps` replays them.
"""

from ember.tuner.auto.sketch import Sketch, generate_sketches
from ember.tuner.auto.steps import (
    STEPS_VERSION,
    Step,
    apply_steps,
    format_steps,
    steps_from_json,
    steps_to_json,
)
from ember.tuner.auto.task import create_auto_task, record_steps, register_workload

__all__ = [
    "STEPS_VERSION",
    "Sketch",
    "Step",
    "apply_steps",
    "create_auto_task",
    "format_steps",
    "generate_sketches",
    "record_steps",
    "register_workload",
    "steps_from_json",
    "steps_to_json",
]
