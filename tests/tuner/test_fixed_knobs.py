"""Tasks with fixed knobs: ``create_task(..., fixed={knob: value})`` searches only the
configs with those values (size, sampling, the Optuna encoding, repair, validity), while
its configs stay full configs of the whole space, so its records read back anywhere."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.errors import ConfigError
from ember.tuner import ConfigEntity, MeasureResult, create_task, read_records, tune
from ember.tuner.encode import SpaceEncoding
from ember.tuner.records import host_device_name
from ember.tuner.repair import nearest_valid
from ember.tuner.tune import fallback_entity
from tests.nightly import examples
from tests.tuner import templates  # noqa: F401 - registers narrow.llvm and tiny_add.llvm

FIXED = {"b": 4, "mode": "wide"}


def _whole(space) -> int:  # noqa: ANN001
    return math.prod(len(k) for k in space.knobs.values())


def test_fixed_space_counts_only_the_configs_with_the_values():
    full = create_task("narrow.llvm", (40,))
    task = create_task("narrow.llvm", (40,), fixed=FIXED)
    space = task.config_space
    assert task.fixed == FIXED and space.fixed_values == FIXED
    assert space.size == full.config_space.size // (4 * 2)  # b has 4 candidates, mode 2
    every = [space.get(i) for i in range(_whole(space))]  # indices of the whole space
    with_values = [c for c in every if all(c[k].val == v for k, v in FIXED.items())]
    assert len(with_values) == space.size
    assert [c.index for c in every if c.is_valid()] == [
        c.index for c in with_values if full.config_space.get(c.index).is_valid()
    ]
    off = space.from_choices({**with_values[0].choices, "b": 0})
    assert "knob 'b' is fixed to 4" in space.violations(off)
    # its own key (two places of one workload with other values are two tasks), the same
    # workload key (where questions find its records)
    assert task.key != full.key and task.workload_key == full.workload_key
    assert task.key != create_task("narrow.llvm", (40,), fixed={"b": 2, "mode": "wide"}).key
    assert create_task("narrow.llvm", (40,), fixed={}).key == full.key


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 10_000), params=st.data())
def test_sampling_encoding_and_repair_keep_the_fixed_values(seed, params):
    space = create_task("narrow.llvm", (40,), fixed=FIXED).config_space
    drawn = space.sample(seed)
    assert drawn.is_valid() and drawn["b"].val == 4 and drawn["mode"].val == "wide"
    enc = SpaceEncoding(space)
    assert not {p.name for p in enc.params} & set(FIXED)  # no trial parameter for them
    vector = {p.name: params.draw(st.integers(0, p.size - 1)) for p in enc.params}
    cfg = enc.decode(vector)
    assert cfg["b"].val == 4 and cfg["mode"].val == "wide"
    assert enc.decode(enc.encode(cfg)) == cfg
    fixed = nearest_valid(cfg)
    assert fixed is not None and fixed["b"].val == 4 and fixed.is_valid()


def test_fixed_values_must_be_candidates():
    with pytest.raises(ConfigError, match="cannot be fixed to 3"):
        create_task("narrow.llvm", (40,), fixed={"b": 3})
    with pytest.raises(ConfigError, match="unknown knob 'nope'"):
        create_task("narrow.llvm", (40,), fixed={"nope": 1})


class _Fake:
    device_name = host_device_name()
    jobs = 1

    def __init__(self) -> None:
        self.seen: list = []

    def measure(self, task, configs):  # noqa: ANN001, ANN201
        self.seen += configs
        return [MeasureResult((1e-3 * (1 + (c.index * 7919) % 101),) * 3) for c in configs]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("sampler", ["random", "grid", "cmaes"])
def test_every_sampler_measures_only_fixed_configs(sampler):
    task = create_task("narrow.llvm", (40,), fixed=FIXED)
    fake = _Fake()
    res = tune(task, n_trials=8, measure=fake, sampler=sampler, seed=1)
    assert len(res.trials) == 8
    assert all(c["b"].val == 4 and c["mode"].val == "wide" for c in fake.seen)


def test_tpe_measures_fixed_configs_resumes_and_records_full_ones(tmp_path):
    task = create_task("narrow.llvm", (40,), fixed=FIXED)
    fake = _Fake()
    log = tmp_path / "t.jsonl"
    res = tune(task, n_trials=12, records=log, measure=fake, seed=1)
    assert len(res.trials) == 12
    assert all(c["b"].val == 4 and c["mode"].val == "wide" for c in fake.seen)
    # the fallback (defaults, fixed knobs at their values) is measured first
    assert fake.seen[0] == fallback_entity(task) and fake.seen[0]["a"].val == 4
    # resumed: its study (its own key) continues, nothing measured twice
    more = tune(task, n_trials=16, records=log, measure=fake, seed=1, resume=True)
    assert len(more.trials) == 16 and len(fake.seen) == 16
    assert len({c.index for c in fake.seen}) == 16
    full = create_task("narrow.llvm", (40,)).config_space
    for rec in read_records(log):
        assert rec.task_key == task.key and rec.workload_key == task.workload_key
        assert ConfigEntity.from_json(rec.config, full)["b"].val == 4  # a full config
