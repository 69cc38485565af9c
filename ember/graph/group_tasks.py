"""A model's fused groups as auto-scheduling tasks, and their records applied when compiling.

Every fused group of a model (a conv with its epilogue, a softmax with its scale and mask,
a layer norm, a chain of elementwise ops) can be tuned without a template: the group is
described as canonical JSON (:func:`ember.graph.groups.group_spec`), and
:func:`fused_group`, a registered auto-scheduling workload
(:func:`ember.tuner.auto.register_workload`), rebuilds its tensor expressions from that
text in any process, the tuner's measuring worker included. Its fallback schedule is the
one the untuned model runs (the backend's group schedule), so a task's baseline is the
kernel a tuned one would replace, and a record whose best config is the fallback changes
nothing.

When a model is compiled inside ``apply_history_best`` (``ember.compile(records=...)``),
:func:`tuned_group` looks each group's task up in the open record blocks, by key and
without building the task unless a record is there, and hands the kernel builder the
schedule its best record's steps rebuild.
"""

from __future__ import annotations

from ember.backend import Backend, get_backend
from ember.graph.groups import GroupIO, group_from_spec, group_spec, group_to_te
from ember.target import Target
from ember.tir.schedule.schedule import Schedule
from ember.tir.te.tensor import Tensor
from ember.tuner.active_records import best_config_for, note_task_question, open_blocks
from ember.tuner.auto import create_auto_task, register_workload
from ember.tuner.auto.space import is_fallback_choice
from ember.tuner.auto.task import AUTO_VERSION, RULES, workload_key
from ember.tuner.strategy import Implementation
from ember.tuner.task import Task, task_key


def _tensors(spec: str, target: str, anchors: list[Implementation] | None) -> list[Tensor]:
    io = group_from_spec(spec)
    placeholders, outs = group_to_te(io.nodes, io.inputs, io.outputs, io.types, target, anchors)
    return [*placeholders, *outs]


def _fallback(spec: str, target: str) -> tuple[Schedule, list[Tensor]]:
    """The untuned model's schedule of the group: the backend's, over its strategy anchors."""
    anchors: list[Implementation] = []
    tensors = _tensors(spec, target, anchors)
    n_in = len(group_from_spec(spec).inputs)
    return get_backend(target).schedule(tensors[n_in:], anchors), tensors


@register_workload(fallback=_fallback)
def fused_group(spec: str, target: str) -> list[Tensor]:
    """The tensors (inputs, then outputs) of the fused group ``spec`` describes, each node
    taking the compute ``target``'s strategy gives it, as when the model is compiled."""
    return _tensors(spec, target, None)


def auto_schedulable(io: GroupIO, backend: Backend) -> bool:
    """Whether the group can be an auto task: static, non-empty shapes on a target kind
    with sketch rules, and outputs with an axis (a 0-d output needs the backend's
    vector form)."""
    if backend.target.kind not in RULES:
        return False
    types = list(io.types.values())
    if any(not t.is_static for t in types):
        return False
    outs = [io.types[o] for o in io.outputs]
    return all(t.size > 0 and t.ndim > 0 for t in outs)


def _args(io: GroupIO, backend: Backend) -> tuple[str, str]:
    return group_spec(io), str(backend.target)


def _name(backend: Backend) -> str:
    return f"auto/{workload_key(fused_group)}.{backend.target.kind}"


def group_task(io: GroupIO, target: str | Target | Backend = "llvm") -> Task:
    """The auto-scheduling task of a fused group for ``target``."""
    backend = get_backend(target)
    return create_auto_task(fused_group, _args(io, backend), backend.target)


def tuned_group(io: GroupIO, backend: Backend) -> tuple[Schedule, list[Tensor]] | None:
    """``(schedule, tensors)`` rebuilt from the best record of the group's task in the open
    ``apply_history_best`` blocks, or None where none has one (the common case: checked
    by the task's key, without generating sketches)."""
    if not any(b.best for b in open_blocks()) or not auto_schedulable(io, backend):
        return None
    args = _args(io, backend)
    key = task_key(_name(backend), args, backend.target, AUTO_VERSION)
    if note_task_question(key) is None:
        return None
    task = create_auto_task(fused_group, args, backend.target)
    cfg = best_config_for(task)
    if cfg is None or is_fallback_choice(cfg):  # nothing measured beat the untuned kernel
        return None
    schedule, tensors = task.instantiate(cfg)
    return schedule, list(tensors)


__all__ = ["auto_schedulable", "fused_group", "group_task", "tuned_group"]
