"""Model-level tuning: ``ember.extract_tasks`` lists the template tasks behind a model's
kernels, ``tune_tasks`` tunes them under one budget, and ``ember.compile(records=...)``
builds the convolutions with the recorded knobs, still matching onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.errors import ArgumentError
from ember.frontend.testing import models
from ember.tuner import MeasureResult, apply_history_best, read_records, split_trials, tune_tasks
from ember.tuner.records import RecordWarning, host_device_name
from tests.nightly import examples

ort = pytest.importorskip("onnxruntime")


class FakeMeasurer:
    """Deterministic costs: convs cheapest with small channel blocks and no kernel unroll
    (unlike the fallback); other templates by a fixed function of the config index."""

    device_name = host_device_name()  # records count for this host's apply_history_best
    jobs = 1

    def __init__(self) -> None:
        self.tasks: list[str] = []

    def measure(self, task, configs):
        self.tasks += [task.key] * len(configs)
        return [MeasureResult((self._cost(task, c),) * 3) for c in configs]

    @staticmethod
    def _cost(task, cfg) -> float:
        if task.name == "conv2d_nchw.llvm":
            c = cfg["oc_bn"].val + 10 * cfg["unroll_kernel"].val + cfg["vec"].val / 16
            return 1e-3 * (c + cfg["rows"].val / 100)
        return 1e-3 * (1 + (cfg.to_json()["index"] * 7919) % 101)

    def close(self) -> None:
        pass


def two_convs(rng, c: int = 4, h: int = 9, w: int = 7):
    """Two convolutions of the same workload (one task of weight 2), a third of another,
    and a Gemm: Conv-Relu-Conv-Add-Conv(stride 2)-Flatten-Gemm."""
    from onnx import helper

    weights = {
        "W1": rng.standard_normal((c, c, 3, 3)).astype("float32") * 0.3,
        "W2": rng.standard_normal((c, c, 3, 3)).astype("float32") * 0.3,
        "B2": rng.standard_normal(c).astype("float32"),
        "W3": rng.standard_normal((6, c, 3, 3)).astype("float32") * 0.3,
        "FC": rng.standard_normal((5, 6 * ((h + 1) // 2) * ((w + 1) // 2))).astype("float32") * 0.1,
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        n("Add", ["c2", "x"], ["s"], name="add"),
        n("Conv", ["s", "W3"], ["c3"], name="conv3", strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Flatten", ["c3"], ["f"], name="flatten"),
        n("Gemm", ["f", "FC"], ["y"], name="fc", transB=1),
    ]
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    return models.build_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_extract_tasks_counts_distinct_workloads():
    model, _ = two_convs(np.random.default_rng(0))
    tasks = ember.extract_tasks(model)
    by_name = [(t.task.name, t.weight, t.nodes) for t in tasks]
    assert by_name == [
        ("conv2d_nchw.llvm", 2, ["conv1", "conv2"]),
        ("conv2d_nchw.llvm", 1, ["conv3"]),
        ("dense_packed.llvm", 1, ["fc"]),
    ]
    assert tasks[0].task.args == (1, 4, 9, 7, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32")
    assert tasks[1].task.args == (1, 4, 9, 7, 6, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), "float32")
    assert tasks[2].task.args == (1, 5, 120, 16, (), "float32")  # rows, N, K, panel width


def test_extract_tasks_small_cnn_and_mlp_match_the_nodes():
    cnn, _ = models.small_cnn(np.random.default_rng(1), batch=2, h=13, w=11)
    got = [(t.task.name, t.task.args, t.weight) for t in ember.extract_tasks(cnn)]
    assert got == [
        ("conv2d_nchw.llvm", (2, 3, 13, 11, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32"), 1),
        ("conv2d_nchw.llvm", (2, 8, 6, 5, 12, 3, 3, (2, 2), (0, 1, 1, 0), (1, 1), "float32"), 1),
        ("dense_packed.llvm", (2, 10, 12, 16, (), "float32"), 1),
        ("softmax.llvm", (2, 10, "float32"), 1),  # its row schedule's lanes knob
    ]
    mlp, _ = models.mlp(np.random.default_rng(2), batch=5, sizes=(12, 20, 7))
    got = [(t.task.name, t.task.args, t.weight) for t in ember.extract_tasks(mlp)]
    assert got == [
        ("dense_packed.llvm", (5, 20, 12, 32, (), "float32"), 1),
        ("dense_packed.llvm", (5, 7, 20, 16, (), "float32"), 1),
    ]


def test_extract_tasks_for_cuda_lists_no_float32_convs():
    """The CUDA strategy table takes only fp16/bf16 GEMMs (tests/frontend/
    test_cuda_tensorcore_graph.py lists those): a float32 CNN has no CUDA tasks."""
    model, _ = two_convs(np.random.default_rng(0))
    assert ember.extract_tasks(model, target="cuda") == []


@pytest.mark.parametrize(
    ("weights", "n", "want"),
    [
        ([2, 1, 1], 8, [4, 2, 2]),
        ([1, 1, 1], 10, [4, 3, 3]),
        ([5, 1], 3, [2, 1]),
        ([1, 1], 1, [1, 1]),
    ],
)
def test_split_trials_is_proportional_to_weight(weights, n, want):
    assert split_trials(weights, n) == want


@given(st.lists(st.integers(1, 50), min_size=1, max_size=8), st.integers(1, 500))
@settings(max_examples=examples(200), deadline=None)
def test_split_trials_property(weights, n):
    shares = split_trials(weights, n)
    assert len(shares) == len(weights) and min(shares) >= 1
    assert sum(shares) == max(n, len(weights))
    # a heavier task never gets fewer trials than a lighter one
    for a, b in zip(weights, shares):
        for c, d in zip(weights, shares):
            if a > c:
                assert b >= d


def test_tune_tasks_rejects_bad_input():
    with pytest.raises(ArgumentError, match="n_trials"):
        tune_tasks([], n_trials=0)
    with pytest.raises(ArgumentError, match="item #0"):
        tune_tasks(["conv"], n_trials=3, measure=FakeMeasurer())


def test_tuned_records_are_used_and_results_match_onnxruntime(tmp_path):
    import ember.graph.kernels
    from ember.codegen_llvm.strategy import compute_for
    from ember.tir.te import operation as te

    model, feeds = two_convs(np.random.default_rng(3))
    tasks = ember.extract_tasks(model)
    log = tmp_path / "tune.jsonl"
    fake = FakeMeasurer()
    results = tune_tasks(
        tasks, n_trials=16, records=log, measure=fake, sampler="random", schedule="weight"
    )
    assert [r.task.key for r in results] == [t.task.key for t in tasks]
    assert [len(r.trials) for r in results] == [8, 4, 4]  # weights 2, 1, 1
    assert {r.task_key for r in read_records(log)} == {t.task.key for t in tasks}

    # the conv knobs a graph kernel takes: the record's, not the fallback's
    x = te.placeholder((1, 4, 9, 7), "float32", name="x")
    w = te.placeholder((4, 4, 3, 3), "float32", name="w")
    attrs = {"group": 1, "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1]}

    def knobs():
        conv = compute_for("conv", [x, w], attrs)[0].op.input_tensors[0]
        return {k: dict(conv.op.attrs)[k] for k in ("oc_bn", "vec", "rows", "unroll_kernel")}

    fallback = knobs()
    with apply_history_best(log, target="llvm"):
        tuned = knobs()
    best = results[0].best_config
    assert tuned == {k: best[k].val for k in tuned}
    assert tuned != fallback and tuned["unroll_kernel"] is False

    want = _ort(model, feeds)[0]
    plain = ember.compile(model)
    with_records = ember.compile(model, records=log)
    # a kernel built with records is not the cached fallback kernel of the same group
    assert plain.steps[0].kernel is not with_records.steps[0].kernel
    for compiled in (plain, with_records):
        np.testing.assert_allclose(compiled.run(feeds)[0], want, rtol=1e-4, atol=1e-4)
    with apply_history_best(log):
        again = ember.compile(model)
    assert again.steps[0].kernel is with_records.steps[0].kernel
    np.testing.assert_allclose(again.run(feeds)[0], want, rtol=1e-4, atol=1e-4)

    # records of one task left out: the kernels that did not read them are the same
    # objects, not rebuilt (the model check compiles a model once per set of records)
    recs = read_records(log)
    dropped = tasks[0].task.key
    partial = tmp_path / "partial.jsonl"
    partial.write_text(
        "".join(
            line for line, r in zip(log.read_text().splitlines(True), recs) if r.task_key != dropped
        )
    )
    kernels = {id(st.kernel) for st in with_records.steps}
    some = ember.compile(model, records=partial)
    reused = [st for st in some.steps if id(st.kernel) in kernels]
    rebuilt = [st for st in some.steps if id(st.kernel) not in kernels]
    assert reused and rebuilt  # the dropped task's kernels are rebuilt, the others kept
    assert all(tasks[0].nodes[0] not in st.where for st in reused)
    np.testing.assert_allclose(some.run(feeds)[0], want, rtol=1e-4, atol=1e-4)


def test_records_of_another_target_are_not_used(tmp_path):
    from ember.tuner import Record, RecordWriter

    model, feeds = two_convs(np.random.default_rng(4))
    task = ember.extract_tasks(model)[0].task
    cfg = task.config_space.from_choices({n: 0 for n in task.config_space.knobs})
    log = tmp_path / "other.jsonl"
    with RecordWriter(log) as wr:
        wr.write(
            Record(task.key, task.name, task.workload_key, task.template.version, "cuda",
                   cfg.to_json(), (1e-6,), "ok", host_device_name(), "0")
        )  # fmt: skip
    plain = ember.compile(model)
    with pytest.warns(RecordWarning, match="other target"):
        other = ember.compile(model, records=log)
    assert plain.steps[0].kernel is other.steps[0].kernel  # the fallback kernel, cached
    np.testing.assert_allclose(other.run(feeds)[0], _ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_cli_tunes_a_model_and_compiles_with_the_records(tmp_path, capsys):
    """Real measurement, on tiny shapes with one trial per task (the fallback configs)."""
    import onnx

    from ember.cli import main

    model, feeds = two_convs(np.random.default_rng(5), c=3, h=6, w=5)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    log = tmp_path / "rec.jsonl"
    argv = ["tune", str(path), "--trials", "3", "--log", str(log), "--number", "1", "--repeat", "1"]
    argv += ["--search", "templates"]  # the default, both, adds every fused group's auto task
    # the model check compiles the model once per set of records: tests/tuner/test_model_check
    assert main([*argv, "--no-model-check"]) == 0
    out = capsys.readouterr().out
    assert "3 task(s)" in out and "model tuning summary" in out
    assert "failed candidates: 0 of 3 measured" in out
    recs = read_records(log)
    assert {r.task_key for r in recs} == {t.task.key for t in ember.extract_tasks(model)}
    assert all(r.ok for r in recs), [r.message for r in recs if not r.ok]
    artifact = tmp_path / "m.ember"
    assert main(["compile", str(path), "--records", str(log), "-o", str(artifact)]) == 0
    got = ember.load(artifact).run(feeds)[0]
    np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_cli_model_errors_exit_1(tmp_path, capsys):
    from ember.cli import main

    assert main(["tune", str(tmp_path / "x.onnx"), "--op", "matmul"]) == 1
    assert "not both" in capsys.readouterr().err
    assert main(["tune", "--trials", "2"]) == 1
    assert "--op and one --shape" in capsys.readouterr().err


def _write_record(log, task, choices):
    from ember.tuner import Record, RecordWriter

    cfg = task.config_space.from_choices(choices)
    with RecordWriter(log) as wr:
        wr.write(
            Record(task.key, task.name, task.workload_key, task.template.version, "llvm",
                   cfg.to_json(), (1e-6,), "ok", host_device_name(), "0")
        )  # fmt: skip
    return cfg


def _choices(task, want):
    knobs = task.config_space.knobs
    choices = {n: k.default_index for n, k in knobs.items()}
    for name, value in want.items():
        values = [knobs[name].entity(i).val for i in range(len(knobs[name]))]
        choices[name] = values.index(value)
    return choices


def test_dense_packed_task_is_the_kernel_the_graph_runs():
    """The MLP's GEMMs are tasks of the graph's own kernel (weights packed at compile
    time in 32- and 16-wide panels): the fallback is the graph's default tiles, and the
    template's fallback schedule lowers to the graph kernel's product loop nest."""
    from ember.codegen_llvm.schedules.generic import dense_packed_tiles
    from ember.tuner.tune import fallback_entity

    model, _ = models.mlp(np.random.default_rng(6), batch=5, sizes=(12, 20, 7))
    task = ember.extract_tasks(model)[0].task
    assert (task.name, task.args) == ("dense_packed.llvm", (5, 20, 12, 32, (), "float32"))
    fallback = fallback_entity(task)
    got = {n: fallback[n].val for n in ("mr", "ku", "nc_panels")}
    want = dense_packed_tiles((5, 20), 32)
    assert got == {"mr": want.mr, "ku": want.ku, "nc_panels": want.nc_panels}
    assert set(task.config_space.knobs) == {"mr", "ku", "nc_panels"}  # nr is the graph's


@pytest.mark.parametrize("template", ["dense_packed.llvm", "matmul.llvm"])
def test_a_gemm_record_sets_the_graph_kernels_tiles(tmp_path, template):
    """A ``dense_packed.llvm`` record of the MLP's first GEMM gives the graph kernel its
    mr/ku/nc_panels; so does a ``matmul.llvm`` record of the same (M, N, K) packing 32-wide
    panels (how such nodes were tuned before), where one with other panels is ignored.
    Each compiled model still matches onnxruntime."""
    from ember.codegen_llvm.schedules.dense_packed import graph_tiles
    from ember.codegen_llvm.schedules.generic import dense_packed_tiles
    from ember.codegen_llvm.schedules.matmul import GemmTiles
    from ember.tuner import create_task

    model, feeds = models.mlp(np.random.default_rng(6), batch=5, sizes=(12, 20, 7))
    want = {"mr": 2, "ku": 2, "nc_panels": 4}
    default = dense_packed_tiles((5, 20), 32)
    assert default != GemmTiles(mr=2, nr=32, ku=2, nc_panels=4)
    cases = [({}, True)] if template == "dense_packed.llvm" else [({"nr": 64}, False), ({}, True)]
    for i, (extra, applies) in enumerate(cases):
        if template == "dense_packed.llvm":
            task = ember.extract_tasks(model)[0].task
        else:
            task = create_task("matmul.llvm", (5, 20, 12, "float32"), "llvm")
            extra = {"nr": 32, "pack": "ahead", **extra}
        log = tmp_path / f"{template}{i}.jsonl"
        _write_record(log, task, _choices(task, {**want, **extra}))
        with apply_history_best(log):
            got = graph_tiles((5, 12), 20, 32)
        assert got == (GemmTiles(mr=2, nr=32, ku=2, nc_panels=4) if applies else default)
        compiled = ember.compile(model, records=log)
        np.testing.assert_allclose(
            compiled.run(feeds)[0], _ort(model, feeds)[0], rtol=1e-4, atol=1e-4
        )


def test_a_blocked_depthwise_conv_is_a_task_and_takes_its_record(tmp_path):
    """In an inverted-residual block the depthwise conv runs blocked; extract_tasks lists
    it as ``depthwise_conv2d_NCHWc.llvm`` of its NCHW workload, and a record of that task
    sets the tile of the graph kernel (which still matches onnxruntime)."""
    from ember.codegen_llvm.strategy import compute_for
    from ember.tir.te import operation as te
    from tests.frontend.test_alter_conv_layout import inverted_residual

    model, feeds = inverted_residual(np.random.default_rng(4), c=16, e=32, hw=9)
    tasks = ember.extract_tasks(model)
    dw = [t for t in tasks if t.task.name == "depthwise_conv2d_NCHWc.llvm"]
    assert [(t.task.args, t.nodes) for t in dw] == [
        ((1, 32, 9, 9, 1, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32"), ["dw"])
    ]
    log = tmp_path / "tune.jsonl"
    (result,) = tune_tasks(dw, n_trials=6, records=log, measure=FakeMeasurer(), sampler="random")

    x = te.placeholder((1, 1, 9, 9, 32), "float32", name="x")
    w = te.placeholder((1, 3, 3, 32), "float32", name="w")
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "channels": 32}

    def tile():
        conv = compute_for("dwconv_nchwc", [x, w], attrs)[0]
        return dict(conv.op.attrs)

    fallback = tile()
    with apply_history_best(log, target="llvm"):
        tuned = tile()
    # the best record among those measured with the graph's block (32), none of another
    fits = [t for t in result.trials if t.result.ok and t.config["cb"].val == 32]
    assert fits  # the fallback, measured first, is of block 32
    best = min(fits, key=lambda t: t.result.cost).config
    keys = ("ow_bn", "outer", "unroll_kernel")
    assert {k: tuned[k] for k in keys} == {k: best[k].val for k in keys}
    assert {k: tuned[k] for k in keys} != {k: fallback[k] for k in keys}
    got = ember.compile(model, records=log).run(feeds)[0]
    np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
