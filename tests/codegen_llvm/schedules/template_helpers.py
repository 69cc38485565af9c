"""Helpers shared by the CPU template tests: build a template's task and sample its configs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.tuner import ConfigEntity, Task, create_task


def task_of(name: str, *args: Any) -> Task:
    return create_task(name, args=args, target="llvm")


def config_with(task: Task, **values: Any) -> ConfigEntity:
    """The config of ``task`` whose knobs take ``values`` and their defaults elsewhere."""
    space = task.config_space
    choices = {n: k.default_index for n, k in space.knobs.items()}
    for name, value in values.items():
        choices[name] = list(space.knobs[name].candidates).index(value)
    return space.from_choices(choices)


def sampled_configs(task: Task, count: int, seed: int) -> list[ConfigEntity]:
    """``count`` distinct valid configs of ``task`` (fewer when the space is smaller)."""
    rng = np.random.default_rng(seed)
    found: dict[int, ConfigEntity] = {}
    for _ in range(20 * count):
        cfg = task.config_space.sample(rng)
        found.setdefault(cfg.index, cfg)
        if len(found) == count:
            break
    return list(found.values())
