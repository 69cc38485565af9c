"""Auto-scheduled tasks: any registered workload function, tuned without a template.

``create_auto_task(matmul_relu, (64, 64, 64), "llvm")`` makes an ordinary
:class:`~ember.tuner.task.Task` of the generic template ``"auto.llvm"``, whose
arguments are the workload function's module and name followed by its own
arguments. The measuring worker rebuilds the task from ``task_spec`` (module, name,
args, target) as it does any template's: importing this module registers the
template, which imports the workload function by module and name, calls it for the
DAG's tensors (inputs, then outputs), generates the sketches (:mod:`.rules`), defines
their knobs (:mod:`.space`) and, for a chosen config, replays its steps
(:mod:`.steps`). A candidate whose steps do not fit the schedule, or whose lowered
TIR fails verification, raises ``ConfigError`` while it is instantiated: the tuner
records it as ``invalid_config`` and never measures it. Records store each config's
steps (``config["steps"]``), which ``apply_history_best`` checks against the steps it
rebuilds. Without a config (the fallback) the DAG keeps TE's default schedule, the
reference the measurer checks candidates against.

A workload function is any module-level function returning the tensors; a fused
group of a model can be tuned the same way once a function rebuilds its compute from
hashable arguments.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from ember.errors import ArgumentError, ConfigError, EmberError
from ember.target import Target
from ember.tir.schedule.lower import schedule_to_primfunc
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te.tensor import Tensor
from ember.tir.verify import verify_well_formed
from ember.tuner.auto.rules import CPU_RULES
from ember.tuner.auto.sketch import Sketch, generate_sketches
from ember.tuner.auto.space import define_sketch_space, steps_for
from ember.tuner.auto.steps import apply_steps, dag_outputs, steps_to_json
from ember.tuner.space import ConfigEntity, ConfigSpace
from ember.tuner.task import Task, create_task
from ember.tuner.template import get_config, template

AUTO_VERSION = 1  # bump when the rules change the sketches (old records stop applying)
RULES = {"llvm": CPU_RULES}


def load_workload(module: str, name: str) -> Callable[..., Any]:
    """The workload function ``name`` of ``module`` (imported if needed)."""
    try:
        func = importlib.import_module(module)
        for part in name.split("."):
            func = getattr(func, part)
    except (ImportError, AttributeError) as e:
        raise ArgumentError(f"cannot import the workload function '{module}.{name}': {e}") from e
    if not callable(func):
        raise ArgumentError(f"workload '{module}.{name}' is not a function")
    return func  # type: ignore[return-value]


def workload_tensors(module: str, name: str, args: tuple[Any, ...]) -> list[Tensor]:
    """The DAG's tensors (inputs, then outputs) that the workload function returns."""
    got = load_workload(module, name)(*args)
    tensors = list(got) if isinstance(got, (list, tuple)) else [got]
    if not all(isinstance(t, Tensor) for t in tensors):
        raise ArgumentError(
            f"workload '{module}.{name}' must return a list of te tensors, got {got!r}"
        )
    dag_outputs(tensors)  # refuses a list without a computed tensor
    return tensors


@functools.lru_cache(maxsize=64)
def sketches_of(module: str, name: str, args: tuple[Any, ...], kind: str) -> tuple[Sketch, ...]:
    """The sketches of a workload for a target kind (cached: the template runs once per
    config, and the sketches hold only names and symbols, no IR objects)."""
    tensors = workload_tensors(module, name, args)
    return tuple(generate_sketches(tensors, RULES[kind]))


def auto_schedule(kind: str, module: str, name: str, args: tuple[Any, ...]) -> Any:
    """The body of the ``auto.<kind>`` templates (see the module docstring)."""
    cfg = get_config()
    tensors = workload_tensors(module, name, args)
    if cfg.is_fallback:
        return create_schedule([t.op for t in dag_outputs(tensors)]), tensors
    sketches = sketches_of(module, name, args, kind)
    define_sketch_space(cfg, sketches)
    if isinstance(cfg, ConfigSpace):
        cfg.set_record_extra(lambda e: {"steps": steps_to_json(steps_for(e, sketches))})
        return create_schedule([t.op for t in dag_outputs(tensors)]), tensors
    s, tensors = apply_steps(tensors, steps_for(cfg, sketches))
    verify_schedule(s, tensors)
    return s, tensors


def verify_schedule(s: Schedule, tensors: list[Tensor]) -> None:
    """Lower ``s`` and check the TIR is well formed; ``ConfigError`` if either fails, so
    the candidate is turned down before any build or measurement."""
    try:
        verify_well_formed(schedule_to_primfunc(s, tensors, "main"), after="auto-schedule")
    except EmberError as e:
        raise ConfigError(f"the candidate's schedule fails verification: {e}") from e


@template("auto.llvm", version=AUTO_VERSION)
def auto_llvm(module: str, name: str, *args: Any) -> Any:
    """Auto-scheduled CPU kernels of the workload ``module.name(*args)``."""
    return auto_schedule("llvm", module, name, tuple(args))


def create_auto_task(
    workload: Callable[..., Any] | str, args: tuple[Any, ...] = (), target: str | Target = "llvm"
) -> Task:
    """The task that tunes ``workload(*args)`` with generated sketches on ``target``.

    ``workload``: a module-level function (or ``"module:name"``) returning the DAG's
    tensors, inputs first; the measuring worker imports it by module and name, so it
    cannot be a lambda, a nested function or one defined in ``__main__``.
    """
    if isinstance(workload, str):
        module, _, name = workload.partition(":")
    else:
        module = getattr(workload, "__module__", "") or ""
        name = getattr(workload, "__qualname__", "") or ""
    if not module or not name or "<" in name or module in ("__main__", "__mp_main__"):
        raise ArgumentError(
            f"workload {workload!r} must be a module-level function of an importable module "
            "(the measuring worker imports it by module and name)"
        )
    if not isinstance(workload, str) and load_workload(module, name) is not workload:
        raise ArgumentError(f"workload '{module}.{name}' is not the function passed")
    kind = Target.parse(target).kind
    if kind not in RULES:
        raise ConfigError(
            f"auto-scheduling has sketch rules for {sorted(RULES)}, not for target '{target}'"
        )
    return create_task(f"auto.{kind}", (module, name, *args), target)


def record_steps(config: dict[str, Any]) -> list[Any] | None:
    """The steps stored in a record's config, or None for a template's record."""
    steps = config.get("steps") if isinstance(config, dict) else None
    return steps if isinstance(steps, dict) else None


__all__ = ["ConfigEntity", "auto_llvm", "create_auto_task", "load_workload", "record_steps"]
