"""Tuning tasks: one schedule template, its workload arguments and a target.

``create_task("dense.llvm", args=(M, N, K, "float32"), target="llvm")`` looks the
template up (:mod:`ember.tuner.template`), runs it once against an empty
:class:`ConfigSpace` to collect its knobs and constraints, and gives a :class:`Task`
whose ``instantiate(config)`` builds ``(schedule, tensors)`` for one config (the
fallback when none is given). ``workload_key`` is a stable string naming the workload
(template and arguments) for tuning records. Search and measurement sit above this.

``create_task(..., fixed={"ic_bn": 16})`` holds knobs at one value: a task a model's
graph gives (its blocked convolution can run only the channel blocks its neighbours
have) searches only the rest. Such a task has its own key (two places of one workload
with other blocks are two tasks, each with its study and records) but the same
workload key, and its records are full configs: a caller that asks for the workload's
best record with those values (``apply_history_best``'s ``where``) finds them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from numbers import Real
from typing import Any

from ember.errors import ArgumentError, ConfigError, EmberError
from ember.target import Target
from ember.tuner.active_records import best_config_for
from ember.tuner.knob import is_int
from ember.tuner.space import Config, ConfigEntity, ConfigSpace, FallbackConfig
from ember.tuner.template import (
    TemplateInfo,
    check_template_args,
    lookup_template,
    split_name,
    using_config,
)


def _key_arg(value: Any, where: str) -> Any:
    """A JSON-ready form of one workload argument; tensors become (shape, dtype)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if is_int(value):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    if isinstance(value, (tuple, list)):
        return [_key_arg(v, where) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        dims = [int(d) if is_int(d) else getattr(d, "value", str(d)) for d in value.shape]
        return ["TENSOR", dims, str(value.dtype)]
    raise ConfigError(
        f"{where} of type {type(value).__name__} cannot be part of a workload key; "
        "pass ints, floats, strings, tensors, or tuples of them"
    )


def workload_key(name: str, args: tuple[Any, ...]) -> str:
    """A stable text key for template ``name`` applied to ``args``."""
    body = [_key_arg(a, f"argument #{i} of task '{name}'") for i, a in enumerate(args)]
    return json.dumps([name, body], separators=(",", ":"))


def task_key(
    name: str,
    args: tuple[Any, ...],
    target: str | Target,
    version: int = 1,
    fixed: Mapping[str, Any] | None = None,
) -> str:
    """A short stable hash naming template ``name`` (at ``version``) on ``args`` for
    ``target``, with the knob values ``fixed`` (none: the key tasks had before knobs could
    be fixed): the same in every process and on every machine, the key of records."""
    parts: list[Any] = [workload_key(name, args), str(Target.parse(target)), int(version)]
    if fixed:
        parts.append(sorted(fixed.items()))
    body = json.dumps(parts, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:20]


class Task:
    """A template applied to workload arguments for one target, with its config space."""

    def __init__(
        self,
        name: str,
        args: tuple[Any, ...],
        target: str | Target | None = None,
        fixed: Mapping[str, Any] | None = None,
    ):
        _, kind = split_name(name)
        self.template: TemplateInfo = lookup_template(name)
        self.name = name
        if not isinstance(args, (tuple, list)):
            raise ArgumentError(f"create_task('{name}'): args must be a tuple, got {args!r}")
        self.args = tuple(args)
        check_template_args(name, self.template.func, self.args)
        if not kind and target is None:
            raise ConfigError(
                f"template '{name}' does not name its target ('<op>.<target>'); pass "
                "create_task(..., target=...)"
            )
        self.target = Target.parse(kind if target is None else target)
        if kind and self.target.kind != kind:
            raise ConfigError(
                f"template '{name}' schedules for '{kind}' targets, "
                f"but the task's target is '{self.target}'"
            )
        self.workload_key = workload_key(name, self.args)
        space = self._collect_space()
        if fixed:
            try:
                space = space.with_fixed(fixed)
            except ConfigError as err:
                err.add_context(f"while fixing knobs of task '{name}'{self.args}")
                raise
        self.config_space = space
        self.fixed: dict[str, Any] = space.fixed_values
        self.key = task_key(name, self.args, self.target, self.template.version, self.fixed)

    def _collect_space(self) -> ConfigSpace:
        space = ConfigSpace()
        self._run(space, "while collecting the config space of template")
        return space.freeze()

    def instantiate(self, config: Any = None) -> tuple[Any, list[Any]]:
        """``(schedule, tensors)`` for ``config``.

        ``config``: None (the best record of an enclosing ``apply_history_best`` block,
        else the fallback, its fixed knobs at their values), a ``ConfigEntity`` of this
        task's space, a ``FallbackConfig``, a dict ``{knob: choice index}`` or a config
        index. A config that breaks one of the template's constraints raises
        ``ConfigError``.
        """
        cfg = self._resolve(config)
        if isinstance(cfg, ConfigEntity):
            broken = self.config_space.violations(cfg)
            if broken:
                raise ConfigError(
                    f"config {cfg} of task '{self.name}' breaks constraint(s): " + ", ".join(broken)
                )
        return self._run(cfg, "while instantiating template", f" with config {cfg}")

    def _resolve(self, config: Any) -> Config:
        if config is None:
            best = best_config_for(self)
            if best is None and self.fixed:
                best = self.config_space.default_entity()
            return FallbackConfig() if best is None else best
        if isinstance(config, ConfigEntity):
            if config.space is not self.config_space:
                raise ConfigError(
                    f"config {config} belongs to another config space than task "
                    f"'{self.name}'; rebuild it with ConfigEntity.from_json(d, task.config_space)"
                )
            return config
        if isinstance(config, FallbackConfig):
            return config
        if isinstance(config, Mapping):
            return self.config_space.from_choices(config)
        if is_int(config):
            return self.config_space.get(config)
        raise ConfigError(
            f"task '{self.name}' cannot be instantiated with {config!r}; pass a ConfigEntity, "
            "a FallbackConfig, a {knob: choice} dict, a config index or None"
        )

    def _run(self, cfg: Config, doing: str, suffix: str = "") -> tuple[Any, list[Any]]:
        try:
            with using_config(cfg), self.target:  # the template sizes tiles for it
                result = self.template.func(*self.args)
        except EmberError as err:
            err.add_context(f"{doing} '{self.name}'{suffix}")
            raise
        if not (
            isinstance(result, (tuple, list))
            and len(result) == 2
            and isinstance(result[1], (tuple, list))
        ):
            raise ConfigError(
                f"template '{self.name}' returned {type(result).__name__}; a template must "
                "return (schedule, [tensors])"
            )
        return result[0], list(result[1])

    def __repr__(self) -> str:
        fixed = f", fixed={self.fixed}" if self.fixed else ""
        return (
            f"Task({self.name!r}, args={self.args!r}, target='{self.target}', "
            f"space={self.config_space.size}{fixed})"
        )


def create_task(
    name: str,
    args: tuple[Any, ...] = (),
    target: str | Target | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> Task:
    """The task of template ``name`` on ``args`` for ``target`` (default: the name's
    suffix); ``fixed``: knob values the task's configs all have (see the module notes)."""
    return Task(name, args, target, fixed)
