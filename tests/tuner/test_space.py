"""Knobs and config spaces: candidate enumeration, defaults, index decoding, JSON, sampling."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.errors import ConfigError
from ember.tuner import (
    AnnotateEntity,
    ConfigEntity,
    ConfigSpace,
    FallbackConfig,
    OtherOptionEntity,
    ReorderEntity,
    SplitEntity,
    SplitKnob,
)
from tests.nightly import examples


class FakeStage:
    """Records the primitives an entity calls; split returns named outer/inner axes."""

    def __init__(self) -> None:
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
    def __missing__(self, key):
        self[key] = FakeStage()
        return self[key]


def _space() -> ConfigSpace:
    s = ConfigSpace()
    s.define_split("tile_i", 12, num_outputs=2)
    s.define_split("tile_j", 20, num_outputs=3, policy="power2")
    s.define_knob("unroll", [0, 4, 16], default=16)
    s.define_reorder("order", ["a", "b", "c"])
    s.define_annotate("ann", ["x", "y"], policy="try_unroll_vec")
    return s.freeze()


# ---------------------------------------------------------------------------- split knobs


@pytest.mark.parametrize(
    "extent, outputs, policy, max_factor, expected",
    [
        (12, 2, "factors", None, 6),  # divisors of 12
        (12, 3, "factors", None, 18),  # ordered factorizations of 2^2 * 3 into 3
        (13, 2, "factors", None, 2),
        (1, 3, "factors", None, 1),
        (12, 1, "factors", None, 1),
        (12, 2, "factors", 4, 4),  # inner factor in {1, 2, 3, 4}
        (12, 2, "power2", None, 4),  # inner in {1, 2, 4, 8}
        (12, 2, "power2", 4, 3),
        (12, 2, "verbose", None, 7),  # {1, 2, 3, 4, 6, 12} | {8}
        (7, 3, "power2", None, 6),  # (1,1) (1,2) (1,4) (2,1) (2,2) (4,1)
    ],
)
def test_split_space_sizes(extent, outputs, policy, max_factor, expected):
    s = ConfigSpace()
    knob = s.define_split("t", extent, num_outputs=outputs, policy=policy, max_factor=max_factor)
    assert len(knob) == expected == len(s)


def test_split_candidates_of_twelve():
    knob = SplitKnob.create("t", 12, 2)
    assert knob.candidates == ((12, 1), (6, 2), (4, 3), (3, 4), (2, 6), (1, 12))


@settings(max_examples=examples(60), deadline=None)
@given(extent=st.integers(1, 64), outputs=st.integers(1, 4))
def test_factors_policy_is_every_exact_factorization(extent, outputs):
    knob = SplitKnob.create("t", extent, outputs)
    brute = {
        f for f in itertools.product(range(1, extent + 1), repeat=outputs) if math.prod(f) == extent
    }
    assert set(knob.candidates) == brute
    assert len(knob.candidates) == len(brute)


@settings(max_examples=examples(60), deadline=None)
@given(
    extent=st.integers(1, 200),
    outputs=st.integers(2, 4),
    policy=st.sampled_from(["power2", "verbose"]),
)
def test_non_divisible_policies_cover_the_extent_once(extent, outputs, policy):
    knob = SplitKnob.create("t", extent, outputs, policy=policy)
    assert len(set(knob.candidates)) == len(knob.candidates)
    for outer, *inner in knob.candidates:
        tile = math.prod(inner)
        assert tile <= extent and outer == -(-extent // tile)
        if policy == "power2":
            assert all(f & (f - 1) == 0 for f in inner)


def test_split_apply_splits_innermost_first_and_returns_outer_to_inner():
    s = FakeSchedule()
    axes = SplitEntity((-1, 8, 4)).apply(s, "C", "i")
    assert axes == ["i.o.o", "i.o.i", "i.i"]
    assert s["C"].calls == [("split", "i", 4), ("split", "i.o", 8)]


def test_split_apply_accepts_a_stage():
    stage = FakeStage()
    assert SplitEntity((3, 4)).apply(None, stage, "j") == ["j.o", "j.i"]
    assert stage.calls == [("split", "j", 4)]


def test_split_default_given_keeps_minus_one_and_finds_its_index():
    s = ConfigSpace()
    knob = s.define_split("t", 64, num_outputs=3, default=[-1, 8, 4])
    assert s["t"].size == [-1, 8, 4]
    assert knob.candidates[knob.default_index] == (2, 8, 4)
    outside = s.define_split("u", 12, num_outputs=3, default=[-1, 8, 4])
    assert outside.default_index is None and s["u"].size == [-1, 8, 4]


@settings(max_examples=examples(40), deadline=None)
@given(extent=st.integers(1, 300), outputs=st.integers(1, 3))
def test_split_default_is_the_most_balanced_candidate(extent, outputs):
    knob = SplitKnob.create("t", extent, outputs, policy="power2")
    best = max(knob.candidates[knob.default_index])
    assert all(best <= max(c) for c in knob.candidates)


def test_split_default_without_default_twelve():
    s = ConfigSpace()
    s.define_split("t", 12)
    assert s["t"].size == [4, 3]


def test_split_extent_from_an_axis_like_object():
    class Imm:
        value = 10

    class Dom:
        extent = Imm()

    class Axis:
        dom = Dom()

    assert SplitKnob.create("t", Axis()).extent == 10
    assert SplitKnob.create("t", Imm()).extent == 10


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        ({"extent": 0}, "constant positive extent"),
        ({"extent": "n"}, "constant positive extent"),
        ({"extent": 8, "policy": "fancy"}, "unknown policy 'fancy'"),
        ({"extent": 8, "num_outputs": 0}, "num_outputs must be >= 1"),
        ({"extent": 8, "max_factor": 0}, "max_factor must be >= 1"),
        ({"extent": 8, "default": [2, 2, 2]}, "must be 2 positive ints"),
        ({"extent": 8, "default": [2, -1]}, "must be 2 positive ints"),
    ],
)
def test_split_errors(kwargs, phrase):
    with pytest.raises(ConfigError, match=phrase) as info:
        ConfigSpace().define_split("tile", **kwargs)
    assert "'tile'" in str(info.value)


# ---------------------------------------------------------------------------- other knobs


def test_knob_values_and_default():
    s = ConfigSpace()
    knob = s.define_knob("unroll", [0, 4, 16], default=16)
    assert knob.candidates == (0, 4, 16) and knob.default_index == 2
    assert s["unroll"].val == 16
    s.define_knob("flag", [1, True])
    assert s["flag"].val == 1
    assert s.define_knob("exact", [1, True], default=True).default_index == 1


@pytest.mark.parametrize(
    "candidates, default, phrase",
    [
        ([0, 4], 8, "default 8 is not one of its candidates"),
        ([], None, "has no candidates"),
        ("abc", None, "candidates must be a list"),
    ],
)
def test_knob_errors(candidates, default, phrase):
    with pytest.raises(ConfigError, match=phrase):
        ConfigSpace().define_knob("k", candidates, default=default)


def test_reorder_all_and_candidate():
    s = ConfigSpace()
    a, b, c = object(), object(), object()
    assert len(s.define_reorder("all", [a, b, c])) == 6
    assert s["all"].perm == (0, 1, 2)
    knob = s.define_reorder("cand", [a, b, c], policy="candidate", candidate=[[c, a, b], [0, 2, 1]])
    assert knob.candidates == ((2, 0, 1), (0, 2, 1))
    assert s["cand"].perm == (2, 0, 1)


def test_reorder_apply():
    s = FakeSchedule()
    assert ReorderEntity((2, 0, 1)).apply(s, "C", ["x", "y", "z"]) == ["z", "x", "y"]
    assert s["C"].calls == [("reorder", "z", "x", "y")]
    with pytest.raises(ConfigError, match="needs 3 axes, got 2"):
        ReorderEntity((2, 0, 1)).apply(s, "C", ["x", "y"])


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (
            {"axes": ["a", "b"], "policy": "candidate", "candidate": [["a", "a"]]},
            "not a permutation",
        ),
        (
            {"axes": ["a", "b"], "policy": "candidate", "candidate": [["a", "q"]]},
            "not one of its axes",
        ),
        ({"axes": ["a", "b"], "policy": "candidate"}, "needs candidate="),
        ({"axes": ["a", "b"], "policy": "some"}, "unknown policy"),
        ({"axes": list("abcdefghi")}, "use policy='candidate'"),
        ({"axes": []}, "has no axes"),
    ],
)
def test_reorder_errors(kwargs, phrase):
    with pytest.raises(ConfigError, match=phrase):
        ConfigSpace().define_reorder("order", **kwargs)


def test_annotate_candidates():
    s = ConfigSpace()
    assert len(s.define_annotate("u", ["x", "y", "z"], policy="try_unroll")) == 8
    knob = s.define_annotate("uv", ["x", "y", "z"], policy="try_unroll_vec")
    assert len(knob) == 12
    assert all("vec" not in anns[:-1] for anns in knob.candidates)
    assert s["uv"].anns == ("none", "none", "none")


def test_annotate_apply_and_max_unroll():
    s = FakeSchedule()
    entity = AnnotateEntity(("unroll", "unroll", "vec"))
    entity.apply(s, "C", ["x", "y", "z"], axis_lens=[64, 4, 8], max_unroll=16)
    assert s["C"].calls == [("unroll", "y"), ("vectorize", "z")]


def test_annotate_errors():
    with pytest.raises(ConfigError, match="unknown policy"):
        ConfigSpace().define_annotate("a", ["x"], policy="try_everything")
    with pytest.raises(ConfigError, match="must be 2 of"):
        ConfigSpace().define_annotate("a", ["x", "y"], default=["none", "spin"])
    with pytest.raises(ConfigError, match="needs 2 axes"):
        AnnotateEntity(("none", "vec")).apply(FakeSchedule(), "C", ["x"])


# ---------------------------------------------------------------------------- spaces


def test_space_len_is_the_product_of_knob_sizes():
    s = _space()
    assert len(s) == 6 * len(s.knobs["tile_j"]) * 3 * 6 * 6
    assert list(s.knobs) == ["tile_i", "tile_j", "unroll", "order", "ann"]
    assert len(ConfigSpace()) == 1 and ConfigSpace().get(0).choices == {}


def test_first_knob_varies_fastest():
    s = _space()
    assert s.get(1).choices["tile_i"] == 1
    assert s.get(6).choices == {"tile_i": 0, "tile_j": 1, "unroll": 0, "order": 0, "ann": 0}


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_decode_encode_round_trip(data):
    s = _space()
    index = data.draw(st.integers(0, len(s) - 1))
    entity = s.get(index)
    assert entity.index == index
    assert s.from_choices(entity.choices).index == index
    assert s.from_choices(entity.choices) == entity


def test_entity_values():
    s = _space()
    e = s.from_choices({"tile_i": 2, "tile_j": 0, "unroll": 1, "order": 5, "ann": 5})
    assert e["tile_i"].size == [4, 3]
    assert e["unroll"] == OtherOptionEntity(4)
    assert e["order"].perm == (2, 1, 0)
    assert e["ann"].anns == ("unroll", "vec")
    assert not e.is_fallback


@pytest.mark.parametrize("index", [-1, 10**9, 1.5, True])
def test_get_out_of_range(index):
    with pytest.raises(ConfigError, match="outside"):
        _space().get(index)


@pytest.mark.parametrize(
    "choices, phrase",
    [
        ({"tile_i": 0}, "missing"),
        ({**_space().get(0).choices, "extra": 0}, "unknown: \\['extra'\\]"),
        ({**_space().get(0).choices, "unroll": 3}, "choice 3 for knob 'unroll' is outside"),
        ({**_space().get(0).choices, "unroll": "0"}, "must be an int"),
    ],
)
def test_bad_choices(choices, phrase):
    with pytest.raises(ConfigError, match=phrase):
        _space().from_choices(choices)


def test_json_round_trip():
    s = _space()
    for index in (0, 1, 777, len(s) - 1):
        entity = s.get(index)
        data = json.loads(json.dumps(entity.to_json()))
        assert data["values"]["tile_i"] == list(entity["tile_i"].size)
        assert ConfigEntity.from_json(data, s) == entity


def test_json_from_another_space_is_rejected():
    s = _space()
    data = s.get(5).to_json()
    other = ConfigSpace()
    other.define_split("tile_i", 18, num_outputs=2)
    other.define_split("tile_j", 20, num_outputs=3, policy="power2")
    other.define_knob("unroll", [0, 4, 16])
    other.define_reorder("order", ["a", "b", "c"])
    other.define_annotate("ann", ["x", "y"])
    with pytest.raises(ConfigError, match="knob 'tile_i' is .* in the record but"):
        ConfigEntity.from_json(data, other)
    with pytest.raises(ConfigError, match="does not match its choices"):
        ConfigEntity.from_json({**data, "index": 4}, s)
    with pytest.raises(ConfigError, match="needs a 'choices' mapping"):
        ConfigEntity.from_json({"index": 3}, s)


def test_defining_a_knob_twice_is_an_error():
    s = ConfigSpace()
    s.define_knob("unroll", [0, 1])
    with pytest.raises(ConfigError, match="knob 'unroll' is defined twice"):
        s.define_split("unroll", 8)
    f = FallbackConfig()
    f.define_knob("unroll", [0, 1])
    with pytest.raises(ConfigError, match="defined twice"):
        f.define_knob("unroll", [0, 1])


def test_unknown_knob_lookup_names_the_known_ones():
    s = _space()
    for cfg in (s, s.get(3)):
        with pytest.raises(ConfigError, match="unknown knob 'tile_k'.*'tile_i', 'tile_j'"):
            cfg["tile_k"]
    f = FallbackConfig()
    with pytest.raises(ConfigError, match="unknown knob 'x'; the template defines: none"):
        f["x"]


def test_frozen_space_rejects_new_knobs():
    s = _space()
    with pytest.raises(ConfigError, match="after the config space was completed"):
        s.define_knob("late", [1])
    with pytest.raises(ConfigError, match="after the config space was completed"):
        s.add_constraint(lambda cfg: True)


def test_fallback_defaults_and_overrides():
    f = FallbackConfig()
    f.define_split("tile", 64, num_outputs=3, default=[-1, 8, 4])
    f.define_split("tile2", 12)
    f.define_knob("unroll", [0, 4, 16], default=4)
    f.define_reorder("order", ["a", "b"])
    f.define_annotate("ann", ["x", "y"])
    assert f.is_fallback
    assert f["tile"].size == [-1, 8, 4] and f["tile2"].size == [4, 3]
    assert f["unroll"].val == 4 and f["order"].perm == (0, 1)
    f["tile"] = [-1, 2, 2]
    f["unroll"] = 16
    f["order"] = ReorderEntity((1, 0))
    f["ann"] = ["unroll", "vec"]
    assert f["tile"] == SplitEntity((-1, 2, 2)) and f["unroll"].val == 16
    assert f["order"].perm == (1, 0) and f["ann"].anns == ("unroll", "vec")
    assert "tile=[-1, 2, 2]" in str(f)


@pytest.mark.parametrize(
    "name, value, phrase",
    [
        ("tile", [4, 4, 4, 4], "must be 3 positive ints"),
        ("order", [0, 0], "not a permutation"),
        ("ann", ["vec"], "must be 2 of"),
        ("nope", 1, "unknown knob 'nope'"),
    ],
)
def test_fallback_bad_overrides(name, value, phrase):
    f = FallbackConfig()
    f.define_split("tile", 64, num_outputs=3)
    f.define_reorder("order", ["a", "b"])
    f.define_annotate("ann", ["x", "y"])
    with pytest.raises(ConfigError, match=phrase):
        f[name] = value


# ---------------------------------------------------------------------------- sampling


def _constrained() -> ConfigSpace:
    s = ConfigSpace()
    s.define_split("tx", 64, num_outputs=2)
    s.define_split("ty", 64, num_outputs=2)
    s.add_constraint(lambda cfg: cfg["tx"].size[1] * cfg["ty"].size[1] <= 64, "threads <= 64")
    return s.freeze()


def test_sampling_is_deterministic_for_a_seed():
    s = _space()
    a = [s.sample(random.Random(7)).index for _ in range(3)]
    r1, r2 = random.Random(11), random.Random(11)
    assert [s.sample(r1).index for _ in range(20)] == [s.sample(r2).index for _ in range(20)]
    assert len(set(a)) == 1
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert [s.sample(g1) for _ in range(10)] == [s.sample(g2) for _ in range(10)]
    assert s.sample(5) == s.sample(5)


def test_sampling_spreads_over_the_space():
    s = _space()
    rng = random.Random(0)
    assert len({s.sample(rng).index for _ in range(100)}) > 90


def test_sampling_returns_only_valid_configs():
    s = _constrained()
    rng = random.Random(1)
    for _ in range(200):
        e = s.sample(rng)
        assert e.is_valid() and e["tx"].size[1] * e["ty"].size[1] <= 64
    bad = s.from_choices({"tx": 6, "ty": 6})
    assert not bad.is_valid() and s.violations(bad) == ["threads <= 64"]


def test_sampling_an_impossible_space_raises():
    s = ConfigSpace()
    s.define_knob("k", [1, 2])
    s.add_constraint(lambda cfg: cfg["k"].val > 5, "k > 5")
    with pytest.raises(ConfigError, match="no valid config in 50 random draws.*k > 5"):
        s.freeze().sample(random.Random(0), max_tries=50)


def test_sampling_with_a_bad_rng():
    with pytest.raises(ConfigError, match="random.Random, a numpy Generator or an int seed"):
        _space().sample("seed")
