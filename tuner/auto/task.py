"""Auto-scheduled tasks: any registered workload function, tuned without a template.

``@register_workload`` (TVM's ``auto_scheduler.register_workload``) marks a module-level
function that returns a compute DAG's tensors (inputs, then outputs), and registers for
it one generic template per target kind, ``"auto/<module>.<name>.<kind>"``, whose body
generates the DAG's sketches (:mod:`.rules`), defines their knobs (:mod:`.space`) and,
for a chosen config, replays its steps (:mod:`.steps`).
``create_auto_task(matmul_relu, (64, 64, 64), "llvm")`` is then an ordinary
:class:`~ember.tuner.task.Task` of that template: the measuring worker rebuilds it from
``task_spec`` (the template's module, which is the workload's: importing it registers
the workload again there), and search, records and ``apply_history_best`` treat it as
any template's task. A candidate whose steps do not fit the schedule, or whose lowered
TIR fails verification, raises ``ConfigError`` while it is instantiated: the tuner
records it as ``invalid_config`` and never measures it. Records store each config's
steps (``config["steps"]``), which a reader checks against the steps it rebuilds.
Without a config (the fallback), and for the space's default config (the ``sketch``
knob's ``fallback`` choice), the DAG gets its untuned schedule: the workload's
registered fallback, else the backend's generic schedule. That is the baseline a tuned
kernel must beat, measured first by every search as its seed, and the reference the
measurer checks candidates against (built by other code than the sketches).

A fused group of a model can be tuned the same way once a registered function
rebuilds its compute from hashable arguments (a description of the group).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ember.backend import get_backend
from ember.errors import ArgumentError, ConfigError, EmberError
from ember.target import Target
from ember.tir.schedule.lower import schedule_to_primfunc
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.tensor import Tensor
from ember.tir.verify import verify_well_formed
from ember.tuner.auto.rules import CPU_RULES
from ember.tuner.auto.rules_cuda import CUDA_RULES
from ember.tuner.auto.sketch import Sketch, generate_sketches
from ember.tuner.auto.space import define_sketch_space, is_fallback_choice, steps_for
from ember.tuner.auto.steps import apply_steps, dag_outputs, steps_to_json
from ember.tuner.records import record_steps  # noqa: F401 - re-exported
from ember.tuner.space import ConfigSpace
from ember.tuner.task import Task, create_task
from ember.tuner.template import get_config, template

F = TypeVar("F", bound=Callable[..., Any])
AUTO_VERSION = 4  # bump when the rules change the sketches (old records stop applying)
RULES = {"llvm": CPU_RULES, "cuda": CUDA_RULES}


_WORKLOADS: dict[str, Callable[..., Any]] = {}
_FALLBACKS: dict[str, Callable[..., Any]] = {}


def workload_key(func: Callable[..., Any]) -> str:
    """``module.qualname``: the name a registered workload goes by."""
    return f"{func.__module__}.{func.__qualname__}"


def register_workload(func: F | None = None, *, fallback: Callable[..., Any] | None = None) -> Any:
    """Register ``func`` (module-level, returning the DAG's tensors, inputs first) as an
    auto-schedulable workload: one ``auto/<module>.<name>.<kind>`` template per target
    kind with sketch rules. Registering it again (a re-imported module) is allowed.

    ``fallback(*args) -> (schedule, tensors)``, optional, is the schedule of the fallback
    config: the kernel the measurer times first and checks candidates against, and what
    a config-less instantiation builds. Without it, TE's default schedule. A fused group of
    a model names the schedule the untuned model runs, so a tuned kernel is compared with
    the one it would replace. Use as ``@register_workload`` or
    ``@register_workload(fallback=f)``."""
    if func is None:
        return functools.partial(register_workload, fallback=fallback)
    name = getattr(func, "__qualname__", "")
    if not callable(func) or not name or "<" in name:
        raise ArgumentError(
            f"register_workload: {func!r} must be a module-level function (the measuring "
            "worker finds it by importing its module)"
        )
    key = workload_key(func)
    _WORKLOADS[key] = func
    if fallback is None:
        _FALLBACKS.pop(key, None)
    else:
        _FALLBACKS[key] = fallback
    for kind in RULES:
        body = functools.wraps(func)(functools.partial(_auto_schedule, kind, func))
        template(f"auto/{key}.{kind}", version=AUTO_VERSION, override=True)(body)
    return func


def workload_tensors(func: Callable[..., Any], args: tuple[Any, ...]) -> list[Tensor]:
    """The DAG's tensors (inputs, then outputs) that the workload function returns."""
    got = func(*args)
    tensors = list(got) if isinstance(got, (list, tuple)) else [got]
    if not all(isinstance(t, Tensor) for t in tensors):
        raise ArgumentError(
            f"workload '{workload_key(func)}' must return a list of te tensors, got {got!r}"
        )
    dag_outputs(tensors)  # refuses a list without a computed tensor
    return tensors


_SKETCHES: dict[str, tuple[Sketch, ...]] = {}


def sketches_of(key: str, args: tuple[Any, ...], kind: str) -> tuple[Sketch, ...]:
    """The sketches of a registered workload for a target kind, cached by the workload's
    name and arguments (the template runs once per config; sketches hold only names and
    symbols, no IR, and ``repr`` keys arguments that are lists as well)."""
    cache_key = repr((key, args, kind))
    if cache_key not in _SKETCHES:
        if len(_SKETCHES) >= 64:
            _SKETCHES.clear()
        tensors = workload_tensors(_WORKLOADS[key], args)
        _SKETCHES[cache_key] = tuple(generate_sketches(tensors, RULES[kind]))
    return _SKETCHES[cache_key]


def _auto_schedule(kind: str, func: Callable[..., Any], *args: Any) -> Any:
    """The body of the ``auto/...`` templates (see the module docstring)."""
    cfg = get_config()
    if cfg.is_fallback:
        return _untuned(kind, func, args)
    sketches = sketches_of(workload_key(func), tuple(args), kind)
    define_sketch_space(cfg, sketches)
    if isinstance(cfg, ConfigSpace):
        tensors = workload_tensors(func, args)
        cfg.set_record_extra(lambda e: {"steps": steps_to_json(steps_for(e, sketches))})
        return create_schedule([t.op for t in dag_outputs(tensors)]), tensors
    if is_fallback_choice(cfg):
        return _untuned(kind, func, args)
    s, tensors = apply_steps(workload_tensors(func, args), steps_for(cfg, sketches))
    verify_schedule(s, tensors)
    return s, tensors


def _untuned(kind: str, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The workload's untuned schedule: its registered fallback's, else the backend's
    generic schedule (what a fused group without anchors runs untuned)."""
    fallback = _FALLBACKS.get(workload_key(func))
    if fallback is not None:
        return fallback(*args)
    tensors = workload_tensors(func, args)
    return get_backend(kind).schedule(dag_outputs(tensors)), tensors


def verify_schedule(s: Schedule, tensors: list[Tensor]) -> None:
    """Lower ``s`` and check the TIR is well formed; ``ConfigError`` if either fails, so
    the candidate is turned down before any build or measurement."""
    try:
        verify_well_formed(schedule_to_primfunc(s, tensors, "main"), after="auto-schedule")
    except EmberError as e:
        raise ConfigError(f"the candidate's schedule fails verification: {e}") from e


def create_auto_task(
    workload: Callable[..., Any] | str, args: tuple[Any, ...] = (), target: str | Target = "llvm"
) -> Task:
    """The task that tunes the registered ``workload(*args)`` (the function or its
    ``module.name``) with generated sketches on ``target``."""
    key = workload if isinstance(workload, str) else workload_key(workload)
    if key not in _WORKLOADS or (not isinstance(workload, str) and _WORKLOADS[key] is not workload):
        raise ArgumentError(
            f"workload {key!r} is not registered; decorate the module-level function with "
            "@ember.tuner.auto.register_workload"
        )
    kind = Target.parse(target).kind
    if kind not in RULES:
        raise ConfigError(
            f"auto-scheduling has sketch rules for {sorted(RULES)}, not for target '{target}'"
        )
    return create_task(f"auto/{key}.{kind}", tuple(args), target)


__all__ = ["create_auto_task", "record_steps", "register_workload"]
