"""Templates and tasks: registration, space collection, instantiation, errors with context."""

from __future__ import annotations

import importlib
import random

import pytest

from ember.errors import ConfigError, ScheduleError
from ember.target import Target
from ember.tir.expr import const
from ember.tuner import (
    FallbackConfig,
    create_task,
    get_config,
    lookup_template,
    registered_templates,
    template,
    workload_key,
)

# ``ember.tuner.template`` is the decorator; the module is reached by its full name.
template_module = importlib.import_module("ember.tuner.template")


class FakeStage:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple] = []

    def split(self, axis, factor):
        self.calls.append(("split", axis, factor))
        return f"{axis}.o", f"{axis}.i"

    def reorder(self, *axes):
        self.calls.append(("reorder", *axes))

    def unroll(self, axis):
        self.calls.append(("unroll", axis))

    def vectorize(self, axis):
        self.calls.append(("vectorize", axis))


class FakeSchedule(dict):
    """``s[tensor]`` gives one recording stage per tensor name."""

    def __missing__(self, key):
        self[key] = FakeStage(key)
        return self[key]


@pytest.fixture(autouse=True)
def clean_registry():
    # the built-in templates are loaded first: a module imported during a test registers
    # them only once, so dropping them afterwards would lose them for later tests
    registered_templates()
    saved = dict(template_module._REGISTRY)
    yield
    template_module._REGISTRY.clear()
    template_module._REGISTRY.update(saved)


SEEN: list = []


def _register_dense():
    @template("fake_dense.llvm")
    def fake_dense(M, N, K, dtype):
        cfg = get_config()
        SEEN.append(cfg)
        cfg.define_split("tile_i", M, num_outputs=3, default=[-1, 2, 2])
        cfg.define_split("tile_j", N, num_outputs=2, policy="power2")
        cfg.define_knob("unroll", [0, 4, 16], default=16)
        cfg.define_annotate("ann", ["ii", "ji"], policy="try_unroll_vec")
        cfg.add_constraint(lambda c: c["tile_i"].size[-1] * c["tile_j"].size[-1] <= 16, "tile<=16")
        if cfg.is_fallback:
            cfg["tile_j"] = [-1, 4]
        s = FakeSchedule()
        i_axes = cfg["tile_i"].apply(s, "C", "i")
        j_axes = cfg["tile_j"].apply(s, "C", "j")
        cfg.define_reorder("order", [i_axes[0], j_axes[0], i_axes[1]])
        cfg["order"].apply(s, "C", [i_axes[0], j_axes[0], i_axes[1]])
        cfg["ann"].apply(s, "C", [i_axes[-1], j_axes[-1]])
        return s, ["A", "B", "C"]

    return fake_dense


def _splits(s):
    return [c[1:] for c in s["C"].calls if c[0] == "split"]


def test_create_task_collects_the_space():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"), target="llvm")
    assert task.name == "fake_dense.llvm" and task.args == (12, 20, 8, "float32")
    assert isinstance(task.target, Target) and task.target.kind == "llvm"
    assert list(task.config_space.knobs) == ["tile_i", "tile_j", "unroll", "ann", "order"]
    assert len(task.config_space) == 18 * 5 * 3 * 6 * 6
    assert not SEEN[-1].is_fallback and SEEN[-1] is task.config_space
    assert "fake_dense.llvm" in repr(task)


def test_instantiate_without_config_uses_the_fallback():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    s, args = task.instantiate()
    assert args == ["A", "B", "C"]
    assert isinstance(SEEN[-1], FallbackConfig) and SEEN[-1].is_fallback
    # tile_i default [-1, 2, 2]; tile_j overridden by the template to [-1, 4]
    assert _splits(s) == [("i", 2), ("i.o", 2), ("j", 4)]
    assert s["C"].calls[-1] == ("reorder", "i.o.o", "j.o", "i.o.i")


def test_instantiate_a_chosen_config():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    space = task.config_space
    entity = space.get(17)
    assert entity.is_valid()
    s, _ = task.instantiate(entity)
    outer, mid, inner = entity["tile_i"].size
    j_inner = entity["tile_j"].size[1]
    assert outer * mid * inner == 12
    assert _splits(s) == [("i", inner), ("i.o", mid), ("j", j_inner)]
    assert SEEN[-1] is entity
    s2, _ = task.instantiate(entity.choices)
    s3, _ = task.instantiate(17)
    assert s2["C"].calls == s3["C"].calls == s["C"].calls


def test_instantiate_twice_with_one_fallback():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    fallback = FallbackConfig()
    task.instantiate(fallback)
    task.instantiate(fallback)


def test_sampled_configs_instantiate():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    rng = random.Random(3)
    for _ in range(20):
        entity = task.config_space.sample(rng)
        assert entity["tile_i"].size[-1] * entity["tile_j"].size[-1] <= 16
        task.instantiate(entity)


def test_instantiate_an_invalid_config_is_rejected():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    bad = next(
        e for e in map(task.config_space.get, range(len(task.config_space))) if not e.is_valid()
    )
    with pytest.raises(ConfigError, match="breaks constraint\\(s\\): tile<=16"):
        task.instantiate(bad)


def test_instantiate_with_a_config_of_another_task():
    _register_dense()
    a = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    b = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    with pytest.raises(ConfigError, match="belongs to another config space"):
        a.instantiate(b.config_space.get(0))
    with pytest.raises(ConfigError, match="cannot be instantiated with 'x'"):
        a.instantiate("x")


def test_unknown_template_lists_the_ones_for_its_target():
    _register_dense()

    @template("fake_conv.cuda")
    def conv():
        return FakeSchedule(), []

    with pytest.raises(ConfigError, match="no schedule template named 'dense2.llvm'") as info:
        create_task("dense2.llvm", args=(1,))
    assert "fake_dense.llvm" in str(info.value) and "fake_conv.cuda" not in str(info.value)
    assert "fake_conv.cuda" in registered_templates("cuda")
    assert lookup_template("fake_conv.cuda").op == "fake_conv"


@pytest.mark.parametrize("name", [".llvm", "", 3])
def test_bad_template_name(name):
    with pytest.raises(ConfigError, match="must look like '<op>.<target>'"):
        template(name)


def test_registering_a_name_twice():
    _register_dense()

    def other(M, N, K, dtype):
        return FakeSchedule(), []

    with pytest.raises(ConfigError, match="already registered by .*fake_dense"):
        template("fake_dense.llvm")(other)
    _register_dense()  # the same function again (a re-import) is fine
    template("fake_dense.llvm", override=True)(other)
    assert lookup_template("fake_dense.llvm").func is other


def test_target_handling():
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    assert task.target == Target.parse("llvm")
    task = create_task("fake_dense.llvm", (12, 20, 8, "float32"), target="llvm -num-threads=2")
    assert task.target.get("num-threads") == "2"
    with pytest.raises(ConfigError, match="schedules for 'llvm' targets.*'cuda -arch=sm_90'"):
        create_task("fake_dense.llvm", (12, 20, 8, "float32"), target="cuda -arch=sm_90")


def test_template_errors_carry_context():
    calls = []

    @template("fake_fail.llvm")
    def fail(n):
        cfg = get_config()
        cfg.define_knob("k", [0, 1, 2])
        calls.append(cfg)
        if not cfg.is_fallback and cfg["k"].val == 2:
            raise ScheduleError("split of axis 'i': factor must be positive")
        return FakeSchedule(), []

    task = create_task("fake_fail.llvm", args=(4,))
    with pytest.raises(ScheduleError) as info:
        task.instantiate(task.config_space.get(2))
    text = str(info.value)
    assert "factor must be positive" in text
    assert "while instantiating template 'fake_fail.llvm' with config #2 {k=2}" in text


def test_errors_while_collecting_carry_context():
    @template("fake_dup.llvm")
    def dup():
        cfg = get_config()
        cfg.define_knob("k", [0, 1])
        cfg.define_knob("k", [0, 1])
        return FakeSchedule(), []

    with pytest.raises(ConfigError, match="knob 'k' is defined twice") as info:
        create_task("fake_dup.llvm")
    assert "while collecting the config space of template 'fake_dup.llvm'" in str(info.value)


def test_template_defining_other_knobs_for_another_config():
    @template("fake_moody.llvm")
    def moody():
        cfg = get_config()
        cfg.define_knob("k", [0, 1])
        if not cfg.is_fallback and cfg["k"].val == 1 and hasattr(cfg, "index"):
            cfg.define_knob("late", [0, 1])
        return FakeSchedule(), []

    task = create_task("fake_moody.llvm")
    with pytest.raises(ConfigError, match="knob 'late' was not defined when the config space"):
        task.instantiate(1)


def test_template_must_return_schedule_and_tensors():
    @template("fake_bad_return.llvm")
    def bad():
        get_config().define_knob("k", [0])
        return FakeSchedule()

    with pytest.raises(ConfigError, match="must return \\(schedule, \\[tensors\\]\\)"):
        create_task("fake_bad_return.llvm")


def test_get_config_outside_a_template():
    with pytest.raises(ConfigError, match="outside a schedule template"):
        get_config()


def test_direct_call_runs_with_the_fallback():
    dense = _register_dense()
    s, args = dense(12, 20, 8, "float32")
    assert isinstance(SEEN[-1], FallbackConfig)
    assert _splits(s) == [("i", 2), ("i.o", 2), ("j", 4)]
    assert dense.template_name == "fake_dense.llvm"
    with pytest.raises(ConfigError, match="outside a schedule template"):
        get_config()


def test_workload_key():
    class FakeTensor:
        shape = (4, const(8, "int32"))
        dtype = "float16"

    key = workload_key("dense.llvm", (12, 20, 8, "float32"))
    assert key == '["dense.llvm",[12,20,8,"float32"]]'
    assert workload_key("dense.llvm", (12, 20, 8, "float32")) == key
    assert workload_key("dense.llvm", (12, 20, 9, "float32")) != key
    assert workload_key("x.llvm", ((1, 2), 0.5, True, None)) == '["x.llvm",[[1,2],0.5,true,null]]'
    assert workload_key("x.llvm", (FakeTensor(),)) == '["x.llvm",[["TENSOR",[4,8],"float16"]]]'
    _register_dense()
    task = create_task("fake_dense.llvm", args=(12, 20, 8, "float32"))
    assert task.workload_key == '["fake_dense.llvm",[12,20,8,"float32"]]'


def test_workload_key_rejects_opaque_arguments():
    with pytest.raises(ConfigError, match="argument #1 of task 'x.llvm' of type object"):
        workload_key("x.llvm", (1, object()))


def test_with_the_real_schedule():
    try:
        from ember import te

        te.create_schedule  # noqa: B018
    except (ImportError, AttributeError):
        pytest.skip("ember.te schedules are not available yet")

    @template("fake_real_dense.llvm")
    def real(M, N, K):
        A = te.placeholder((M, K), name="A")
        B = te.placeholder((K, N), name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        cfg = get_config()
        i, j = s[C].op.axis
        cfg.define_split("ti", i, num_outputs=3)
        cfg.define_split("tj", N, policy="power2")
        io, im, ii = cfg["ti"].apply(s, C, i)
        jo, ji = cfg["tj"].apply(s, C, j)
        cfg.define_reorder(
            "order",
            [io, jo, im, ii, ji],
            policy="candidate",
            candidate=[[io, jo, im, ii, ji], [io, jo, im, ji, ii]],
        )
        cfg["order"].apply(s, C, [io, jo, im, ii, ji])
        return s, [A, B, C]

    task = create_task("fake_real_dense.llvm", args=(12, 20, 8))
    assert len(task.config_space) == 18 * 5 * 2
    for config in (None, task.config_space.get(len(task.config_space) - 1)):
        s, (A, B, C) = task.instantiate(config)
        names = [iv.name for iv in s[C].leaf_iter_vars]
        assert len(names) == 6 and names[-1] == "k"


def test_registered_templates_lists_the_builtin_ones_without_a_lookup_first():
    cuda = registered_templates("cuda")
    assert {"matmul.cuda", "conv2d_nchw.cuda", "softmax.cuda"} <= set(cuda)
    assert all(n.endswith(".cuda") for n in cuda)
    assert "matmul.llvm" in registered_templates()
