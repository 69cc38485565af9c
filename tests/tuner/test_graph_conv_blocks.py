"""A model's blocked convolutions are tuned in the layouts the graph runs them in.

Each ``conv_nchwc`` node's input block is its producer's and its output block the one
``alter_conv_layout`` chose, and its kernel runs only records measured with both
(``codegen_llvm/conv_strategies.py``). So ``extract_tasks`` gives its task those blocks as fixed
knobs, the tuner measures only configs with them, and every conv of the model compiled
with the records runs a measured config. The model here has one workload at two places
with other input blocks (after a channel concat of two 16-channel blocks, and after a
32-channel conv), which must be two tasks.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import ember
import ember.codegen_llvm.conv_strategies as cpu_strategy
from ember.backend import get_backend
from ember.cli.tune_model import task_label
from ember.codegen_llvm.strategy import NCHWC_TEMPLATE
from ember.frontend.testing import models
from ember.graph.compile import import_model, optimize
from ember.tuner import ConfigEntity, MeasureResult, create_task, read_records, tune_tasks
from ember.tuner.records import host_device_name

ort = pytest.importorskip("onnxruntime")

H, W = 6, 5  # shapes of this file only: its kernels are built here, not taken from a cache


def concat_model(rng):  # noqa: ANN001, ANN201
    """Two stem convs (3->16) concatenated (32 channels in blocks of 16), conv C (32->32),
    conv D (32->32, the same workload, on C's 32-blocked output), a 1x1 conv E."""
    r = lambda *s: (rng.standard_normal(s) * 0.3).astype("float32")  # noqa: E731
    weights = {"WA": r(16, 3, 3, 3), "WB": r(16, 3, 3, 3), "WC": r(32, 32, 3, 3),
               "BC": r(32), "WD": r(32, 32, 3, 3), "WE": r(16, 32, 1, 1)}  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "WA"], ["a"], name="convA", pads=[1, 1, 1, 1]),
        n("Relu", ["a"], ["ra"], name="reluA"),
        n("Conv", ["x", "WB"], ["b"], name="convB", pads=[1, 1, 1, 1]),
        n("Relu", ["b"], ["rb"], name="reluB"),
        n("Concat", ["ra", "rb"], ["cat"], name="cat", axis=1),
        n("Conv", ["cat", "WC", "BC"], ["c"], name="convC", pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["rc"], name="reluC"),
        n("Conv", ["rc", "WD"], ["d"], name="convD", pads=[1, 1, 1, 1]),
        n("Relu", ["d"], ["rd"], name="reluD"),
        n("Conv", ["rd", "WE"], ["y"], name="convE"),
    ]
    x = rng.standard_normal((1, 3, H, W)).astype("float32")
    return models.build_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def graph_blocks(model) -> dict[str, tuple[int, int]]:  # noqa: ANN001
    """``(input block, output block)`` of each ``conv_nchwc`` node of the untuned graph,
    read from its input's and weights' shapes."""
    backend = get_backend("llvm")
    graph = optimize(import_model(model, None), backend, None)
    out = {}
    for node in graph.nodes:
        if node.op == "conv_nchwc":
            x, w = (graph.values[v].type.shape for v in node.inputs[:2])
            out[node.name] = (int(x[4]), int(w[5]))
    return out


class FakeMeasurer:
    """Deterministic costs by config index; remembers what it measured, per task."""

    device_name = host_device_name()
    jobs = 1

    def __init__(self) -> None:
        self.seen: dict[str, list[ConfigEntity]] = {}

    def measure(self, task, configs):  # noqa: ANN001, ANN201
        self.seen.setdefault(task.key, []).extend(configs)
        return [MeasureResult((1e-3 * (1 + (c.index * 7919) % 101),) * 3) for c in configs]

    def close(self) -> None:
        pass


def _blocks(cfg) -> tuple[int, int]:  # noqa: ANN001
    return cfg["ic_bn"].val, cfg["oc_bn"].val


def test_conv_tasks_fix_the_graphs_blocks_and_tuning_measures_only_those(tmp_path, monkeypatch):
    model, feeds = concat_model(np.random.default_rng(0))
    blocks = graph_blocks(model)
    assert blocks["convC"] == (16, 32) and blocks["convD"] == (32, 32)  # one workload, two
    tasks = [t for t in ember.extract_tasks(model) if t.task.name == NCHWC_TEMPLATE]
    assert sorted(n for t in tasks for n in t.nodes) == sorted(blocks)
    place = {}  # the blocks of each task's nodes in the graph: one pair per task
    for mt in tasks:
        pairs = {blocks[n] for n in mt.nodes}
        assert len(pairs) == 1, f"one task for {mt.nodes}, which run the blocks {pairs}"
        place[mt.task.key] = pairs.pop()

    log = tmp_path / "tune.jsonl"
    fake = FakeMeasurer()
    results = tune_tasks(tasks, n_trials=30, records=log, measure=fake, seed=0)
    for mt, res in zip(tasks, results):
        # no trial on blocks the graph cannot run there (before: most of them)
        assert res.trials and {_blocks(t.config) for t in res.trials} == {place[mt.task.key]}
        assert {_blocks(cfg) for cfg in fake.seen[mt.task.key]} == {place[mt.task.key]}
        assert (mt.task.fixed["ic_bn"], mt.task.fixed["oc_bn"]) == place[mt.task.key]
    c, d = (next(t.task for t in tasks if n in t.nodes) for n in ("convC", "convD"))
    assert c.workload_key == d.workload_key and c.key != d.key
    labels = {task_label(mt) for mt in tasks}  # the summary tells the two apart
    assert {f"{NCHWC_TEMPLATE}{c.args} ic_bn={i},oc_bn=32" for i in (16, 32)} <= labels
    # a user's task of the same workload keeps the whole space
    user = create_task(NCHWC_TEMPLATE, c.args)
    assert not user.fixed and user.config_space.size > 4 * c.config_space.size
    recs = [r for r in read_records(log) if r.template == NCHWC_TEMPLATE]
    assert {r.task_key for r in recs} == {t.task.key for t in tasks}

    # compiled with the records: every blocked conv's kernel takes its task's best record,
    # found by the graph's own question (the workload and the blocks), never the fallback
    asked: list[tuple[tuple, object]] = []
    direct = cpu_strategy.config_for_direct_call

    def counting(name, args, where=()):  # noqa: ANN001, ANN202
        cfg = direct(name, args, where)
        if name == NCHWC_TEMPLATE:
            asked.append((tuple(v for _, v in where), cfg))
        return cfg

    monkeypatch.setattr(cpu_strategy, "config_for_direct_call", counting)
    compiled = ember.compile(model, records=log)
    best = {place[t.task.key]: r for t, r in zip(tasks, results)}
    assert {w for w, _ in asked} == set(best)  # each place's blocks asked for
    for where, cfg in asked:
        assert isinstance(cfg, ConfigEntity), f"the conv of blocks {where} ran the fallback"
        assert cfg.to_json()["values"] == best[where].best_config.to_json()["values"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]
    np.testing.assert_allclose(compiled.run(feeds)[0], want, rtol=1e-4, atol=1e-4)


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
