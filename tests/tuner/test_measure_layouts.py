"""Candidates whose tensors take another layout than the fallback's (``conv2d_NCHWc.llvm``
with other channel blocks) are measured on inputs of their own layout and checked against
a numpy reference of that layout."""

from __future__ import annotations

import numpy as np

from ember.tuner import ErrorKind, LocalMeasurer, MeasureOption, create_task
from ember.tuner.tune import fallback_entity

# C = 12 and O = 20: channel blocks 4, 8, 12 in and 8, 16 out, none dividing both
ARGS = (1, 12, 7, 9, 20, 3, 3, 1, 1, 1, "float32")


def _configs(task):
    base = fallback_entity(task)
    assert base is not None
    space, knobs = task.config_space, task.config_space.knobs
    out = []
    for ic in knobs["ic_bn"].candidates:
        for oc in knobs["oc_bn"].candidates:
            choice = dict(base.choices)
            choice["ic_bn"] = knobs["ic_bn"].candidates.index(ic)
            choice["oc_bn"] = knobs["oc_bn"].candidates.index(oc)
            cfg = space.from_choices(choice)
            if cfg.is_valid():
                out.append(cfg)
    return base, out


def test_every_channel_block_is_measured_and_checked():
    """Before measuring per layout, every config whose blocks differ from the fallback's
    failed with "argument 'X' expects shape ..."; now all run, and all are checked."""
    task = create_task("conv2d_NCHWc.llvm", args=ARGS)
    base, configs = _configs(task)
    blocks = {(c["ic_bn"].val, c["oc_bn"].val) for c in configs}
    assert len(blocks) >= 5 and (base["ic_bn"].val, base["oc_bn"].val) in blocks
    with LocalMeasurer(MeasureOption(number=1, repeat=1)) as m:
        results = m.measure(task, configs)
    bad = [(c["ic_bn"].val, c["oc_bn"].val, r.message) for c, r in zip(configs, results) if not r.ok]
    assert not bad, bad
    assert all(r.error is ErrorKind.OK and r.cost > 0 for r in results)
