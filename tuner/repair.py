"""Repairing a config the template's constraints turn down into the nearest valid one.

A sampler proposes points of the product space; where constraints carve out a narrow
valid region (the streaming GEMV of ``matmul.llvm`` takes only ``mr=1``,
``nc_panels=1`` and unpacked B), most of its proposals there are invalid, and a model
that learns from rejections alone learns that the region is bad. The search instead
measures the valid config that changes the fewest knobs of the proposal (the nearest
in candidate order among those), so the sampler learns what that region is worth.
"""

from __future__ import annotations

import itertools

from ember.tuner.space import ConfigEntity

MAX_CHANGES = 3  # knobs a repair may change
BUDGET = 5_000  # candidate configs a repair may check (about 0.1 s)


def nearest_valid(
    entity: ConfigEntity, max_changes: int = MAX_CHANGES, budget: int = BUDGET
) -> ConfigEntity | None:
    """The valid config closest to ``entity``: fewest knobs changed, then the smallest
    total move in candidate index, then the lowest config index. ``None`` when no config
    within ``max_changes`` knobs is valid, or ``budget`` checks did not find one."""
    space = entity.space
    base = {**entity.choices, **space.fixed}  # a fixed knob only ever takes its value
    names = [n for n, k in space.knobs.items() if len(k) > 1 and n not in space.fixed]
    checked = 0
    for k in range(1, max_changes + 1):
        best: tuple[tuple[int, int], ConfigEntity] | None = None
        for combo in itertools.combinations(names, k):
            others = [[c for c in range(len(space.knobs[n])) if c != base[n]] for n in combo]
            for values in itertools.product(*others):
                checked += 1
                if checked > budget:
                    return best[1] if best else None
                cand = space.from_choices({**base, **dict(zip(combo, values))})
                if not cand.is_valid():
                    continue
                key = (sum(abs(v - base[n]) for n, v in zip(combo, values)), cand.index)
                if best is None or key < best[0]:
                    best = (key, cand)
        if best is not None:
            return best[1]
    return None
