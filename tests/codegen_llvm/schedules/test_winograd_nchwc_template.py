"""``conv2d_winograd_NCHWc.llvm``: the graph's blocked Winograd kernel as a tuning task.

Its numpy reference is checked against a direct float64 convolution (an independent
loop) through weights transformed by ``winograd_weights_numpy``; the template's kernels,
over configs of both tile sizes and every panel width, against that reference on random
transformed weights; the measurer's check on configs whose ``U`` differ in shape; and
the graph: a model's blocked Winograd conv is extracted as this task, and a record of it
(not of the NCHW template, which times another kernel) sets the node's knobs.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.schedules.winograd_nchwc import TEMPLATE, winograd_nchwc_reference
from ember.frontend.passes.conv_blocks import channel_block
from ember.tir.topi.conv_nchwc import pack_nchwc_weights
from ember.tir.topi.winograd import winograd_weights_numpy
from ember.tuner import LocalMeasurer, MeasureOption, create_task
from ember.tuner.records import Record, RecordWriter, host_device_name
from ember.tuner.tune import fallback_entity
from ember.version import __version__
from tests.codegen_llvm.schedules.test_conv2d import conv_ref
from tests.codegen_llvm.schedules.test_winograd_nchwc import _blocked, _model, _tol, _unblocked
from tests.frontend.onnx_models import run_ort
from tests.nightly import skip_unless_nightly

# 20 channels in blocks of 8 (padded lanes), 40 out in blocks of 16, odd sizes, uneven pads
ARGS = (1, 20, 9, 11, 40, (1, 0, 2, 1), "float32", 8, 16)


@pytest.mark.parametrize("m, nr", [(2, 16), (4, 16), (4, 48)])
def test_the_reference_is_the_convolution(rng, m, nr):  # noqa: ANN001
    """Through real transformed weights, the numpy Winograd reference is the direct
    convolution; lanes past the 40 real outputs stay zero."""
    N, C, H, W, O, pads, _, cb, ob = ARGS
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, 3, 3)).astype("float32")
    U = winograd_weights_numpy(pack_nchwc_weights(w, cb, ob), m, nr)
    got = _unblocked(winograd_nchwc_reference(_blocked(x, cb), U, workload=ARGS))
    np.testing.assert_allclose(got[:, :O], conv_ref(x, w, 1, pads, 1), rtol=1e-4, atol=1e-4)
    assert not got[:, O:].any()


def _distinct_configs(task):  # noqa: ANN001, ANN202
    """One valid config per (m, nr, mr), the fallback first."""
    seen, out = set(), [fallback_entity(task)]
    for i in range(len(task.config_space)):
        cfg = task.config_space.get(i)
        key = (cfg["m"].val, cfg["nr"].val, cfg["mr"].val)
        if cfg.is_valid() and key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def _covering(configs):  # noqa: ANN001, ANN202
    """One config per (tile size, panel width) pair, their row counts ``mr`` taken in turn so
    that every ``mr`` appears too: each build takes seconds, and the knobs' values, not
    their product, are what the kernel's code paths follow."""
    pairs = sorted({(c["m"].val, c["nr"].val) for c in configs})
    rows = sorted({c["mr"].val for c in configs})
    out = []
    for i, (m, nr) in enumerate(pairs):
        fits = [c for c in configs if (c["m"].val, c["nr"].val) == (m, nr)]
        wanted = [c for c in fits if c["mr"].val == rows[i % len(rows)]]
        out.append((wanted or fits)[0])
    out += [c for c in configs if c["mr"].val not in {o["mr"].val for o in out}][:1]
    return out


@skip_unless_nightly  # CI: the measurer test below checks three of these configs
def test_every_tile_size_and_panel_width_matches_the_reference(rng):  # noqa: ANN001
    task = create_task(TEMPLATE, ARGS, "llvm")
    configs = _covering(_distinct_configs(task))
    assert {c["m"].val for c in configs} == {2, 4} and len({c["nr"].val for c in configs}) >= 3
    assert {c["mr"].val for c in configs} == {c["mr"].val for c in _distinct_configs(task)}
    for cfg in configs:
        s, tensors = task.instantiate(cfg)
        shapes = [tuple(int(d.value) for d in t.shape) for t in tensors]
        X, U = (rng.uniform(-1, 1, sh).astype("float32") for sh in shapes[:2])
        out = np.full(shapes[2], np.nan, "float32")
        ember.build(s, tensors, target="llvm")(X, U, out)
        ref = winograd_nchwc_reference(X, U, workload=ARGS)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-3, err_msg=str(cfg))


def test_the_measurer_checks_configs_whose_weights_differ_in_shape():
    """Each config's ``U`` has its own shape (tile size, panel width): each is measured on
    inputs of its own and passes the reference check."""
    task = create_task(TEMPLATE, ARGS, "llvm")
    configs = _distinct_configs(task)
    picked = [configs[0]] + [c for c in configs[1:] if c["m"].val != configs[0]["m"].val][:1]
    picked += [c for c in configs[1:] if c["nr"].val != configs[0]["nr"].val][:1]
    with LocalMeasurer(MeasureOption(number=2, repeat=2)) as measurer:
        results = measurer.measure(task, picked)
    assert all(r.ok for r in results), [r.message for r in results]


def test_a_model_is_tuned_and_compiled_with_the_blocked_template(rng, tmp_path):  # noqa: ANN001
    """The blocked Winograd node's task is this template with the graph's blocks; a record
    of it (m=2, not the fallback's 4) sets the node's knobs, and the model still matches
    onnxruntime. A record of the NCHW template for the same conv changes nothing."""
    model, feeds = _model(rng, 32, 32, 16, 16)
    (task,) = [t.task for t in ember.extract_tasks(model, "llvm", search="templates")]
    assert task.name == TEMPLATE
    block = channel_block(32)  # the graph's: 32 with AVX-512, 16 with AVX2
    assert task.args == (1, 32, 16, 16, 32, (1, 1, 1, 1), "float32", block, block)
    cfg = next(c for c in _distinct_configs(task) if c["m"].val == 2)
    nchw = create_task("conv2d_winograd.llvm", task.args[:7], "llvm")
    nchw_cfg = next(c for c in _distinct_configs(nchw) if c["m"].val == 2)

    def record(t, c, path):  # noqa: ANN001, ANN202
        line = Record(t.key, t.name, t.workload_key, t.template.version, str(t.target),
                      c.to_json(), (1e-4,), "ok", host_device_name(), __version__)  # fmt: skip
        writer = RecordWriter(path)
        writer.write(line)
        writer.close()
        return path

    def knobs(records):  # noqa: ANN001, ANN202
        lib = ember.compile(model, target="llvm", records=records)
        (node,) = [n for n in lib.graph.nodes if n.op == "conv_winograd_nchwc"]
        np.testing.assert_allclose(lib.run(feeds)[0], run_ort(model, feeds)[0], **_tol(32))
        return node.attrs["m"]

    assert knobs(record(nchw, nchw_cfg, tmp_path / "nchw.jsonl")) == 4
    assert knobs(record(task, cfg, tmp_path / "blocked.jsonl")) == 2
