"""The learned cost model: TIR features on small known loop nests, the pairwise metric, a
model trained on real matmul.llvm timings ranking held-out configs (and failing with
shuffled labels), model files, the guided proposal and ``tune(cost_model=...)``.

The timings are a fixture of real measurements, made once by
``benchmarks/bench_costmodel.py --fixture tests/tuner/data/costmodel_matmul.jsonl``:
nothing here is timed."""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest

import ember
import ember.cli.tune as cli_tune
from ember.cli import main
from ember.errors import ArgumentError
from ember.tir.schedule.lower import schedule_to_primfunc
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tuner import create_task, read_records, tune
from ember.tuner.auto import cost_model as cm
from ember.tuner.auto.cost_model import (
    CostModel,
    CostModelError,
    MissingLightGBMError,
    Sample,
    pairwise_accuracy,
    relative_throughput,
    samples_from_records,
    warm_start,
)
from ember.tuner.auto.features import (
    FEATURE_NAMES,
    N_FEATURES,
    extract_features,
    features_of_config,
)
from ember.tuner.auto.guided import propose
from ember.tuner.tune import fallback_entity
from tests.nightly import nightly_param
from tests.tuner.test_search import FakeMeasurer, cost_of

FIXTURE = Path(__file__).parent / "data" / "costmodel_matmul.jsonl"


def _feature(vec: np.ndarray, name: str) -> float:
    return float(vec[FEATURE_NAMES.index(name)])


def _log(x: float) -> float:
    return float(np.log2(1 + x))


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    return samples_from_records(read_records(FIXTURE))


@pytest.fixture(scope="module")
def fixture_task():
    rec = read_records(FIXTURE)[0]
    return create_task(rec.template, cm.workload_args(rec.workload_key), rec.target)


# -- features ------------------------------------------------------------------------------


def _matmul_nest(M: int, N: int, K: int):
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return create_schedule(C.op), [A, B, C]


def test_features_of_a_plain_matmul_nest():
    """for i in 6: for j in 12: C[i,j] = 0; for k in 10: C[i,j] += A[i,k] * B[k,j]."""
    s, args = _matmul_nest(6, 12, 10)
    v = extract_features(schedule_to_primfunc(s, args, "main"))
    assert v.shape == (N_FEATURES,) == (len(FEATURE_NAMES),)
    assert _feature(v, "g.flops") == pytest.approx(_log(2 * 6 * 12 * 10))  # mul + add
    assert _feature(v, "g.stores") == pytest.approx(_log(2))  # the init and the update
    assert _feature(v, "g.parallel_flop_share") == 0.0
    # the update's accesses, largest first: C read-write (288 B), B (480 B), A (240 B)
    by_bytes = {round(_feature(v, f"acc{i}.bytes"), 6): i for i in range(4)}
    a, b = by_bytes[round(_log(6 * 10 * 4), 6)], by_bytes[round(_log(10 * 12 * 4), 6)]
    # A[i, k]: unit stride along k, reused by every j (12), the reuse loop's body is k's 10
    assert _feature(v, f"acc{a}.stride_inner") == pytest.approx(_log(1))
    assert _feature(v, f"acc{a}.reuse") == pytest.approx(_log(12))
    assert _feature(v, f"acc{a}.reuse_iter") == pytest.approx(_log(10))
    # B[k, j]: a row (12 elements) per step of k, reused by every i (6) at distance j * k
    assert _feature(v, f"acc{b}.stride_inner") == pytest.approx(_log(12))
    assert _feature(v, f"acc{b}.reuse") == pytest.approx(_log(6))
    assert _feature(v, f"acc{b}.reuse_iter") == pytest.approx(_log(12 * 10))
    assert _feature(v, f"acc{b}.serial") == pytest.approx(_log(6 * 12 * 10))
    assert _feature(v, f"acc{b}.is_read") == 1.0 and _feature(v, f"acc{b}.is_write") == 0.0


def test_features_see_parallel_vectorized_and_unrolled_loops():
    s, args = _matmul_nest(8, 32, 12)
    C = args[2]
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, jo, k, ji)
    s[C].parallel(i)
    s[C].vectorize(ji)
    ko, ki = s[C].split(k, factor=4)
    s[C].unroll(ki)
    v = extract_features(schedule_to_primfunc(s, args, "main"))
    assert _feature(v, "g.parallel_max") == pytest.approx(_log(8))
    assert _feature(v, "g.vec_width_max") == pytest.approx(_log(8))
    assert _feature(v, "g.unrolled_max") == pytest.approx(_log(4))
    assert _feature(v, "g.parallel_flop_share") == 1.0
    assert _feature(v, "st0.flops") == pytest.approx(_log(2 * 8 * 32 * 12))
    # fully lowered TIR (k unrolled into copies, j into Ramp vectors) reads the same
    lowered = extract_features(ember.lower(s, args))
    for name in ("g.flops", "g.parallel_max", "g.vec_width_max", "g.parallel_flop_share"):
        assert _feature(lowered, name) == pytest.approx(_feature(v, name)), name


def test_features_are_deterministic_and_tell_configs_apart(fixture_task):
    space = fixture_task.config_space
    rng = random.Random(1)
    a, b = space.sample(rng), space.sample(rng)
    fa = features_of_config(fixture_task, a)
    assert np.array_equal(fa, features_of_config(fixture_task, a)) and np.isfinite(fa).all()
    assert not np.array_equal(fa, features_of_config(fixture_task, b))
    s, args = fixture_task.instantiate(a)
    func = schedule_to_primfunc(s, args, "main")
    start = time.perf_counter()
    for _ in range(5):
        extract_features(func)
    assert (time.perf_counter() - start) / 5 < 0.05  # ~1 ms unloaded: a loose bound


# -- the metric ----------------------------------------------------------------------------


def test_pairwise_accuracy():
    t = [1.0, 2.0, 3.0, 4.0]
    assert pairwise_accuracy(t, [10, 20, 30, 40]) == 1.0
    assert pairwise_accuracy(t, [4, 3, 2, 1]) == 0.0
    assert pairwise_accuracy(t, [0, 0, 0, 0]) == 0.5
    assert pairwise_accuracy(t, [1, 2, 4, 3]) == pytest.approx(5 / 6)
    # across groups nothing is compared: only (0,1) and (2,3), one right, one wrong
    assert pairwise_accuracy(t, [1, 2, 9, 0], groups=["a", "a", "b", "b"]) == 0.5
    assert np.isnan(pairwise_accuracy([1.0, 1.0], [1.0, 2.0]))
    with pytest.raises(CostModelError, match="shapes"):
        pairwise_accuracy([1.0, 2.0], [1.0])


def test_targets_are_normalised_per_task():
    f = np.zeros(N_FEATURES)
    rows = [Sample("a", f, 2.0), Sample("a", f, 1.0), Sample("b", f, 10.0), Sample("b", f, np.inf)]
    assert relative_throughput(rows).tolist() == [0.5, 1.0, 1.0, 0.0]


# -- the model on real timings -------------------------------------------------------------


def _cross_validated(samples: list[Sample], shuffle: bool, folds: int = 4) -> float:
    idx = list(range(len(samples)))
    random.Random(0).shuffle(idx)
    accs = []
    for f in range(folds):
        test = [samples[i] for i in idx[f::folds]]
        train = [samples[i] for j, i in enumerate(idx) if j % folds != f]
        if shuffle:
            costs = [s.cost for s in train]
            random.Random(f).shuffle(costs)
            train = [Sample(s.group, s.features, c) for s, c in zip(train, costs)]
        model = CostModel(seed=0).fit(train)
        pred = model.predict([s.features for s in test])
        accs.append(pairwise_accuracy(relative_throughput(test), pred))
    return float(np.mean(accs))


def test_model_ranks_held_out_measured_configs(samples):
    assert len(samples) >= 50
    assert _cross_validated(samples, shuffle=False) >= 0.75
    # the same training with the costs shuffled among the configs is chance
    assert 0.3 <= _cross_validated(samples, shuffle=True) <= 0.65


def test_model_file_is_reproducible_from_the_records(tmp_path, samples):
    records = tmp_path / "matmul.jsonl"
    lines = FIXTURE.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:24]))  # a part: rebuilding each record's TIR takes time
    model = warm_start(records)
    saved = records.with_name("matmul.jsonl.model")
    assert saved.exists() and model.trained
    assert model.to_text() == CostModel(seed=0).fit(samples[:24]).to_text().replace(
        '"records_sha256": ""', f'"records_sha256": "{model.records_sha}"'
    )
    again = warm_start(records)  # loaded: same text, same predictions
    rows = [s.features for s in samples[24:]]
    assert np.array_equal(again.predict(rows), model.predict(rows))
    assert again.to_text() == model.to_text()
    with open(records, "a") as f:  # new records: the saved model is stale and retrained
        f.write(lines[30])
    fresh = warm_start(records)
    assert fresh.records_sha != model.records_sha and len(fresh.samples) == 25
    other = tmp_path / "other.jsonl"  # records of other tasks and shapes join the training
    other.write_text("".join(lines[40:50]))
    both = warm_start(records, others=[other], save=False)
    assert both.records_sha != fresh.records_sha and len(both.samples) == 35


def test_bad_model_files_and_missing_lightgbm(tmp_path, monkeypatch):
    bad = tmp_path / "x.model"
    bad.write_text("not a model\n")
    with pytest.raises(CostModelError, match="not an Ember cost model"):
        CostModel.load(bad)
    bad.write_text('ember-costmodel {"format": 99, "features": "x"}\n')
    with pytest.raises(CostModelError, match="another version"):
        CostModel.load(bad)
    with pytest.raises(CostModelError, match="cannot read records file"):
        warm_start(tmp_path / "missing.jsonl")
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    f = np.zeros(N_FEATURES)
    rows = [Sample("a", f + i, 1.0 + i) for i in range(5)]
    with pytest.raises(MissingLightGBMError, match="pip install"):
        CostModel().fit(rows)


# -- model-guided search -------------------------------------------------------------------


def test_propose_takes_the_top_predicted_and_explorers(samples, fixture_task):
    model = CostModel(seed=0).fit(samples)
    measured = [fixture_task.config_space.sample(random.Random(0))]
    picked = propose(fixture_task, model, k=3, explore=2, pool=12, seed=5, exclude=measured)
    assert len(picked) == len(set(picked)) == 5 and measured[0] not in picked
    # the first three beat every other config of the same pool (drawn again with the seed)
    pool = propose(fixture_task, model, k=12, explore=0, pool=12, seed=5, exclude=measured)
    scores = model.predict([features_of_config(fixture_task, c) for c in pool])
    assert set(picked[:3]) == {pool[i] for i in np.argsort(-scores, kind="stable")[:3]}


def test_tune_with_a_cost_model_measures_only_n_trials(tmp_path):
    task = create_task("tiny_add.llvm", args=(48,))  # a cheap nest: many proposals
    rng = random.Random(0)
    first = {task.config_space.sample(rng) for _ in range(12)}
    model = CostModel(seed=0).fit(
        Sample(task.key, features_of_config(task, c), cost_of(c)) for c in sorted(first, key=str)
    )
    fake = FakeMeasurer()
    log = tmp_path / "r.jsonl"
    memory = optuna.storages.InMemoryStorage()  # a journal file's locked writes are slow
    result = tune(task, 6, log, storage=memory, measure=fake, cost_model=model, seed=0,
                  retime_rounds=0)  # fmt: skip
    assert len(result.trials) == len(fake.calls) == 6
    assert len(read_records(log)) == 6
    skipped = [t for t in result.study.trials if t.user_attrs.get("error") == "model_skipped"]
    assert len(skipped) >= 6 * 7 // 2  # most of the 8 proposals per trial were ranked out
    assert fake.calls[0] == fallback_entity(task)  # the queued fallback came first
    assert len(model.samples) == len(first) + 6  # every measurement updated the model
    # half of each guided pool is drawn uniformly from the space, ranked with TPE's
    drawn = [t for t in result.study.trials if t.user_attrs.get("proposal") == "random"]
    guided = [t for t in result.study.trials if t.user_attrs.get("error") != "invalid_config"]
    assert abs(len(drawn) - (len(guided) - 1) / 2) <= len(guided) / 4  # (the fallback: 1)
    # cost_model=True warm-starts from the records tuned into and the transfer records; the
    # model is kept beside the former
    other = tmp_path / "matmul.jsonl"
    other.write_text("".join(FIXTURE.read_text().splitlines(keepends=True)[:8]))
    log2 = tmp_path / "r2.jsonl"
    again = tune(task, 2, log2, storage=memory, measure=fake, cost_model=True, transfer=[other],
                 retime_rounds=0)  # fmt: skip
    assert len(again.trials) == 2 and [p.name for p in tmp_path.glob("*.model")] == [
        "r2.jsonl.model"
    ]
    with pytest.raises(ArgumentError, match="grid"):
        tune(task, 3, measure=fake, sampler="grid", cost_model=model)
    with pytest.raises(ArgumentError, match="cost_model must be"):
        tune(task, 3, measure=fake, cost_model=3)


def test_ember_tune_passes_cost_model(monkeypatch, capsys):
    seen = {}

    def fake_tune(*args, **kwargs):
        seen.update(kwargs)
        raise ArgumentError("stopped by the test")

    monkeypatch.setattr(cli_tune, "tune_task", fake_tune)
    argv = ["tune", "--op", "matmul", "--shape", "8,8,8", "--trials", "3"]
    assert main([*argv, "--cost-model"]) == 1 and seen["cost_model"] is True
    assert main(argv) == 1 and seen["cost_model"] is None
    assert "stopped by the test" in capsys.readouterr().err


def test_ember_tune_model_shares_one_cost_model_across_tasks(monkeypatch, tmp_path, capsys):
    import onnx

    from ember.cli import tune_model
    from ember.frontend.testing.models import small_cnn
    from ember.tuner.auto.cost_model import CostModel

    model, _ = small_cnn(np.random.default_rng(0), 1, 8, 8)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    seen = {}

    def fake_tune_tasks(tasks, **kwargs):
        seen.update(kwargs, tasks=tasks)
        raise ArgumentError("stopped by the test")

    monkeypatch.setattr(tune_model, "tune_tasks", fake_tune_tasks)
    argv = ["tune", str(path), "--trials", "3", "--search", "auto"]
    assert main([*argv, "--cost-model"]) == 1
    assert isinstance(seen["cost_model"], CostModel)
    assert all(t.task.name.startswith("auto/") for t in seen["tasks"])
    assert main(argv) == 1 and seen["cost_model"] is None
    assert "stopped by the test" in capsys.readouterr().err


def _gemm_cost(cfg) -> float:
    """A bowl over ``dense_packed.llvm``'s knobs, smallest at mr 4, ku 2, 2 panels."""
    mr, ku, nc = cfg["mr"].val, cfg["ku"].val, cfg["nc_panels"].val
    return (1.0 + abs(mr - 4) / 4 + abs(math.log2(ku) - 1) + abs(math.log2(nc) - 1)) * 1e-3


@pytest.mark.parametrize("n_trials", [40, nightly_param(200)])  # 200: the whole space
def test_a_small_space_is_ranked_whole_one_trial_per_measurement(n_trials):
    """``dense_packed.llvm``'s 96 configs are ranked whole: every measured candidate is
    new, the study holds about one trial per measurement (sampled, it held ~85), and a
    budget past the space measures each config once and stops."""
    from ember.tuner.auto.guided import ENUMERABLE, valid_configs

    task = create_task("dense_packed.llvm", (12, 20, 12, 32, (), "float32"), "llvm")
    assert task.config_space.size == len(valid_configs(task.config_space)) == 96 <= ENUMERABLE
    rng = random.Random(1)
    first = {task.config_space.sample(rng) for _ in range(8)}
    model = CostModel(seed=0).fit(
        Sample(task.key, features_of_config(task, c), _gemm_cost(c)) for c in sorted(first, key=str)
    )
    fake = FakeMeasurer(cost=_gemm_cost)
    memory = optuna.storages.InMemoryStorage()
    result = tune(task, n_trials, storage=memory, measure=fake, cost_model=model, seed=0,
                  retime_rounds=0)  # fmt: skip
    measured = [c.index for c in fake.calls]
    assert len(measured) == len(set(measured)) == min(n_trials, 96)
    assert len(result.study.trials) <= len(measured) + 12
    if n_trials == 40:  # the model found the bowl's bottom
        assert min(_gemm_cost(c) for c in fake.calls) == pytest.approx(1e-3)


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
