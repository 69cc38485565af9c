"""Helpers shared by the CPU template tests: build a template's task and sample its configs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.tuner import ConfigEntity, Task, create_task


def task_of(name: str, *args: Any) -> Task:
    return create_task(name, args=args, target="llvm")


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
