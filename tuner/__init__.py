"""Ember's tuner: schedule templates, their config spaces, and tuning tasks.

A template (``@template("dense.llvm")``) builds a schedule from the knobs it defines
on ``get_config()``; ``create_task`` collects those knobs into a :class:`ConfigSpace`
and ``Task.instantiate(config)`` builds the schedule for one config, or for the
fallback defaults. ``tune(task, ...)`` searches the space with Optuna, measuring
candidates in isolated worker processes (:mod:`ember.tuner.measure`) and appending
records (:mod:`ember.tuner.records`); ``tune_tasks`` splits one budget between the
tasks of a model (``ember.extract_tasks``, which lives above the graph compiler);
``apply_history_best(records)`` makes tasks and
direct template calls use the best recorded configs. This package sits above
``ember.tir`` and reaches code generators only through registries.
"""

from ember.tuner.dispatch import apply_history_best
from ember.tuner.entity import AnnotateEntity, OtherOptionEntity, ReorderEntity, SplitEntity
from ember.tuner.knob import AnnotateKnob, Knob, OtherKnob, ReorderKnob, SplitKnob
from ember.tuner.measure import LocalMeasurer, MeasureOption
from ember.tuner.records import Record, RecordWriter, best_records, read_records
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.space import Config, ConfigEntity, ConfigSpace, FallbackConfig
from ember.tuner.task import Task, create_task, task_key, workload_key
from ember.tuner.template import (
    TemplateInfo,
    get_config,
    lookup_template,
    registered_templates,
    template,
    using_config,
)
from ember.tuner.tune import TuneResult, tune
from ember.tuner.tune_tasks import split_trials, tune_tasks

__all__ = [
    "ErrorKind",
    "LocalMeasurer",
    "MeasureOption",
    "MeasureResult",
    "Record",
    "RecordWriter",
    "TuneResult",
    "apply_history_best",
    "best_records",
    "read_records",
    "task_key",
    "tune",
    "tune_tasks",
    "split_trials",
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
