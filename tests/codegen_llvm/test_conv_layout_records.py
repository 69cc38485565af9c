"""Tuned ``conv2d_NCHWc.llvm`` records in a graph run the config that was measured.

A conv whose input arrives blocked keeps that block, so of its task's records only
those measured with that ``ic_bn`` apply (``codegen_llvm/conv_layout.py``); and a record
whose ``oc_bn`` would split the chain at a residual add gives way to one that keeps it
unless it measured much slower. Records are written by hand as ``tune`` writes them,
with best configs that disagree on blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import ember
from ember.codegen_llvm.strategy import compute_for
from ember.frontend.testing import models
from ember.tir.te import operation as te
from ember.tuner import Record, RecordWriter, apply_history_best, create_task
from ember.tuner.records import host_device_name

ort = pytest.importorskip("onnxruntime")

H, W = 5, 7  # shapes of this file only: no kernel of another test is cached for them
CONV1 = (1, 16, H, W, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32")
CONV2 = (1, 32, H, W, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32")
CONV3 = (1, 32, H, W, 24, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), "float32")
# (ic_bn, oc_bn, cost in ms) per task; the first of each is its best record
RECORDS = {
    CONV1: [(16, 16, 1.0), (16, 32, 1.5)],
    # best (32, 32) does not fit conv1's block 16; of those that do, (16, 16) is 5%
    # slower than (16, 8) and keeps the chain in block 16 for the residual add
    CONV2: [(32, 32, 1.0), (8, 8, 1.1), (16, 8, 2.0), (16, 16, 2.1)],
    # of ic_bn 16, (16, 16) is 1.5x slower than (16, 8): the output block changes
    CONV3: [(8, 8, 1.0), (16, 8, 2.0), (16, 16, 3.0)],
}
# what each conv of the graph must run, in graph order
EXPECTED = [(CONV1, 16, 16), (CONV2, 16, 16), (CONV3, 16, 8)]


def residual_model(rng):  # noqa: ANN001, ANN201
    """conv1-relu-conv2-add(conv2, relu1)-relu-conv3(1x1): two chained convs, a residual
    add and a conv after it."""
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype("float32")  # noqa: E731
    weights = {"W1": r(32, 16, 3, 3), "B1": r(32), "W2": r(32, 32, 3, 3), "W3": r(24, 32, 1, 1)}
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        n("Add", ["c2", "r1"], ["s"], name="add"),
        n("Relu", ["s"], ["r2"], name="relu2"),
        n("Conv", ["r2", "W3"], ["y"], name="conv3"),
    ]
    x = rng.standard_normal((1, 16, H, W)).astype("float32")
    return models.build_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def _config(task, ic: int, oc: int, k: int):  # noqa: ANN001, ANN202
    """A valid config of ``task`` with blocks ``(ic, oc)`` whose other knobs differ from
    the fallback's and from record to record (``k``-th valid register tile)."""
    space = task.config_space
    knobs = space.knobs
    choices = {name: knob.default_index for name, knob in knobs.items()}
    choices["ic_bn"] = [
        e.val for e in map(knobs["ic_bn"].entity, range(len(knobs["ic_bn"])))
    ].index(ic)
    choices["oc_bn"] = [
        e.val for e in map(knobs["oc_bn"].entity, range(len(knobs["oc_bn"])))
    ].index(oc)
    choices["unroll_kernel"] = 1 - choices["unroll_kernel"]
    valid = []
    for i in range(len(knobs["ow_bn"])):
        cfg = space.from_choices({**choices, "ow_bn": i})
        if cfg.is_valid() and i != knobs["ow_bn"].default_index:
            valid.append(cfg)
    return valid[k % len(valid)]


def write_records(path, records=RECORDS):  # noqa: ANN001, ANN201
    """``records`` (as RECORDS) as ``tune`` writes them; the configs by (args, ic, oc)."""
    configs = {}
    with RecordWriter(path) as out:
        for args, recs in records.items():
            task = create_task("conv2d_NCHWc.llvm", args, "llvm")
            for k, (ic, oc, ms) in enumerate(recs):
                cfg = configs[args, ic, oc] = _config(task, ic, oc, k)
                out.write(
                    Record(task.key, task.name, task.workload_key, task.template.version,
                           "llvm", cfg.to_json(), (ms * 1e-3,) * 3, "ok", host_device_name(),
                           "0")
                )  # fmt: skip
    return configs


def _ort(model, feeds):  # noqa: ANN001, ANN202
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _knobs_built(graph, node):  # noqa: ANN001, ANN202
    """The blocks of a ``conv_nchwc`` node of a compiled graph and the knobs the kernel
    strategy gives it under the records in force (what its kernel was built with)."""
    shapes = [graph.values[i].type.shape for i in node.inputs]
    tensors = [te.placeholder(s, "float32", name=f"t{k}") for k, s in enumerate(shapes)]
    out = compute_for("conv_nchwc", tensors, dict(node.attrs))[0]
    while out.op.tag != "conv2d_nchwc":  # the knobs are the reduction's attrs, below a bias
        out = out.op.input_tensors[0]
    return shapes[0][4], shapes[1][5], dict(out.op.attrs)


def test_each_conv_runs_a_measured_config_and_no_transform_is_added(tmp_path):
    model, feeds = residual_model(np.random.default_rng(7))
    log = tmp_path / "tune.jsonl"
    configs = write_records(log)
    want = _ort(model, feeds)
    plain = ember.compile(model, target="llvm")
    tuned = ember.compile(model, target="llvm", records=log)
    for lib in (plain, tuned):
        np.testing.assert_allclose(lib.run(feeds)[0], want, rtol=1e-4, atol=1e-4)

    convs = [nd for nd in tuned.graph.nodes if nd.op == "conv_nchwc"]
    assert len(convs) == 3
    with apply_history_best(log, target="llvm"):
        built = [_knobs_built(tuned.graph, nd) for nd in convs]
    for (args, ic, oc), (got_ic, got_oc, got) in zip(EXPECTED, built):
        cfg = configs[args, ic, oc]
        assert (got_ic, got_oc) == (ic, oc)
        assert got == {k: cfg[k].val for k in got}, args

    def count(lib, op):  # noqa: ANN001, ANN202
        return sum(nd.op == op for nd in lib.graph.nodes)

    assert count(tuned, "layout_transform") <= count(plain, "layout_transform") == 2
    add = next(nd for nd in tuned.graph.nodes if nd.op == "add")
    assert all(len(tuned.graph.values[i].type.shape) == 5 for i in add.inputs)  # blocked


def test_a_block_without_records_runs_the_fallback(tmp_path):
    """conv2's records without one of ic_bn 16: it runs the untuned graph's kernel
    (fallback knobs, the default output block), not the best record's knobs."""
    model, feeds = residual_model(np.random.default_rng(8))
    log = tmp_path / "tune.jsonl"
    write_records(log, {**RECORDS, CONV2: [(32, 32, 1.0), (8, 8, 1.1)]})
    plain = ember.compile(model, target="llvm")
    tuned = ember.compile(model, target="llvm", records=log)
    np.testing.assert_allclose(tuned.run(feeds)[0], _ort(model, feeds), rtol=1e-4, atol=1e-4)
    conv2 = [nd for nd in tuned.graph.nodes if nd.op == "conv_nchwc"][1]
    untuned = [nd for nd in plain.graph.nodes if nd.op == "conv_nchwc"][1]
    with apply_history_best(log, target="llvm"):
        got = _knobs_built(tuned.graph, conv2)
    fallback = _knobs_built(plain.graph, untuned)
    assert got[:2] == (16, 32) and got[2] == fallback[2]
    # conv2's block 32 meets the shortcut's 16 at the add: one re-block, the add blocked
    reblock = {"src": 16, "dst": 32, "channels": 32}
    assert [nd.attrs for nd in tuned.graph.nodes if nd.op == "layout_transform"][1] == reblock


def test_tuned_blocks_rule(tmp_path):
    """The chooser: an NCHW input takes the best record's blocks; a blocked input of
    block b the best record of ic_bn b, with oc_bn b when within KEEP_BLOCK_SLOWDOWN;
    no record of ic_bn b: the measured rule; only a ``conv2d_nchw.llvm`` record: NCHW."""
    from ember.codegen_llvm.conv_layout import KEEP_BLOCK_SLOWDOWN, tuned_blocks
    from ember.frontend.passes.conv_blocks import ConvWorkload

    w = ConvWorkload(1, 16, 9, 11, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1))
    nchw = create_task("conv2d_nchw.llvm", w.args, "llvm")

    def blocks_with(path, rows, nchw_record=False):  # noqa: ANN001, ANN202
        write_records(path, {w.args: rows})
        if nchw_record:
            with RecordWriter(path) as out:
                out.write(
                    Record(nchw.key, nchw.name, nchw.workload_key, nchw.template.version,
                           "llvm", nchw.config_space.get(0).to_json(), (1e-3,), "ok",
                           host_device_name(), "0")
                )  # fmt: skip
        with apply_history_best(path, target="llvm"):
            # NCHW input; input block 16 (wanted out too); 16 wanting 32 for a shortcut; 4
            return [tuned_blocks(w, *bw) for bw in ((None, None), (16, 16), (16, 32), (4, 4))]

    none = blocks_with(tmp_path / "none.jsonl", [])
    assert none == [(16, 32), (16, 32), (16, 32), (4, 32)]
    assert blocks_with(tmp_path / "nchw.jsonl", [], nchw_record=True) == [None] * 4
    slow = 2.0 * KEEP_BLOCK_SLOWDOWN
    rows = [(8, 16, 1.0), (16, 32, 2.0), (16, 16, 0.99 * slow)]
    got = blocks_with(tmp_path / "keep.jsonl", rows, nchw_record=True)
    # the stem wants the default block 32: (16, 32) is 2x slower; NCHWc was tuned, so
    # ic_bn 4 (no record) falls back to the blocked default
    assert got == [(8, 16), (16, 16), (16, 32), (4, 32)]
    rows = [(8, 16, 1.0), (16, 32, 2.0), (16, 16, 1.01 * slow), (4, 16, 1.0)]
    got = blocks_with(tmp_path / "split.jsonl", rows)
    assert got == [(8, 16), (16, 32), (16, 32), (4, 16)]
    rows = [(8, 16, 1.0), (16, 32, 1.05)]  # the stem keeps the default block 32 within 10%
    assert blocks_with(tmp_path / "stem.jsonl", rows)[0] == (16, 32)


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
