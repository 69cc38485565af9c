"""Ember's tuner: schedule templates, their config spaces, and tuning tasks.

A template (``@template("dense.llvm")``) builds a schedule from the knobs it defines
on ``get_config()``; ``create_task`` collects those knobs into a :class:`ConfigSpace`
and ``Task.instantiate(config)`` builds the schedule for one config, or for the
fallback defaults. This package sits above ``ember.tir`` and the code generators.
"""

from ember.tuner.entity import AnnotateEntity, OtherOptionEntity, ReorderEntity, SplitEntity
from ember.tuner.knob import AnnotateKnob, Knob, OtherKnob, ReorderKnob, SplitKnob
from ember.tuner.space import Config, ConfigEntity, ConfigSpace, FallbackConfig
from ember.tuner.task import Task, create_task, workload_key
from ember.tuner.template import (
    TemplateInfo,
    get_config,
    lookup_template,
    registered_templates,
    template,
    using_config,
)

__all__ = [
    "AnnotateEntity",
    "AnnotateKnob",
    "Config",
    "ConfigEntity",
    "ConfigSpace",
    "FallbackConfig",
    "Knob",
    "OtherKnob",
    "OtherOptionEntity",
    "ReorderEntity",
    "ReorderKnob",
    "SplitEntity",
    "SplitKnob",
    "Task",
    "TemplateInfo",
    "create_task",
    "get_config",
    "lookup_template",
    "registered_templates",
    "template",
    "using_config",
    "workload_key",
]
