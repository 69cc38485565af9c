"""The conv2d_winograd.llvm template against a float64 numpy convolution.

Tolerance: Winograd in float32 rounds differently from a direct sum; the transforms
scale values by up to 8 (F(4x4)'s A^T) and 1/24 (its G), so the error grows with the
number of channels summed. With inputs and weights uniform in [-1, 1] the outputs are
of size ~sqrt(9 C); we allow ``atol = 4e-6 * 9 * C`` (2.3e-3 at C = 64, where the
observed error is 2.5e-4 for F(4x4) and 2e-5 for F(2x2)) and ``rtol = 1e-4``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.winograd import (
    schedule_winograd_output,
    winograd_conv,
)
from ember.errors import ArgumentError, ConfigError
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.winograd import MATRICES, WinogradShape, winograd_weights
from ember.tuner.template import using_config
from tests.codegen_llvm.schedules.template_helpers import task_of
from tests.codegen_llvm.schedules.test_conv2d import conv_ref
from tests.nightly import examples, nightly_param


def _tol(C: int) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 4e-6 * 9 * C}


def _run(s, tensors, arrays):  # noqa: ANN001, ANN202
    mod = ember.build(s, tensors, target="llvm")
    out = np.zeros([int(d.value) for d in tensors[-1].shape], tensors[-1].dtype)
    mod(*arrays, out)
    return out


def _config(task, **values):  # noqa: ANN001, ANN003, ANN202
    """The first valid config of ``task`` with these knob values."""
    space = task.config_space
    for i in range(len(space)):
        cfg = space.get(i)
        if cfg.is_valid() and all(cfg[k].val == v for k, v in values.items()):
            return cfg
    raise AssertionError(f"no valid config with {values}")


def _check_task(task, cfg, rng) -> None:  # noqa: ANN001
    N, C, H, W, O, pad, _ = task.args
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, 3, 3)).astype("float32")
    s, tensors = task.instantiate(cfg)
    got = _run(s, tensors, [x, w])
    np.testing.assert_allclose(got, conv_ref(x, w, 1, pad, 1), **_tol(C))


def test_matrices_are_winograd():
    """A^T [(G g G^T) * (B^T d B)] A is the valid 3-tap correlation, for each tile size."""
    rng = np.random.default_rng(0)
    for m, (BT, G, AT) in MATRICES.items():
        BT, G, AT = (np.array(x, dtype=np.float64) for x in (BT, G, AT))
        d, g = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
        want = np.array([[np.sum(d[y : y + 3, x : x + 3] * g) for x in range(m)] for y in range(m)])
        got = AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


ODD = [(1, 3, 7, 7, 13, 1), (1, 13, 13, 7, 3, 0), (2, 3, 13, 13, 64, 1), (1, 64, 7, 13, 13, 0)]


# each shape with one tile size in CI (the two alternate), both nightly
@pytest.mark.parametrize(
    "case,m",
    [
        (c, m) if (k + m // 2) % 2 else nightly_param(c, m)
        for k, c in enumerate(ODD)
        for m in (2, 4)
    ],
    ids=str,
)
def test_odd_shapes(case, m, rng):  # noqa: ANN001
    task = task_of("conv2d_winograd.llvm", *case, "float32")
    _check_task(task, _config(task, m=m, mr=4, ku=4), rng)


def test_resnet_layer_at_56(rng):  # noqa: ANN001
    """ResNet-18's 64->64 layer at 56x56 with the fallback config."""
    _check_task(task_of("conv2d_winograd.llvm", 1, 64, 56, 56, 64, 1, "float32"), None, rng)


@pytest.mark.parametrize("m", [2, 4])
def test_bias_and_residual_relu_epilogue(m, rng):  # noqa: ANN001
    """relu(conv + bias + residual) with the epilogue inlined into the NCHW stage."""
    N, C, H, W, O = 1, 13, 13, 7, 13
    X = te.placeholder((N, C, H, W), "float32", name="X")
    Wt = te.placeholder((O, C, 3, 3), "float32", name="W")
    B = te.placeholder((O,), "float32", name="B")
    R = te.placeholder((N, O, H, W), "float32", name="R")
    task = task_of("conv2d_winograd.llvm", N, C, H, W, O, 1, "float32")
    with using_config(_config(task, m=m)):
        from ember.codegen_llvm.schedules.winograd import define_winograd_knobs

        _, tiles = define_winograd_knobs(N, C, H, W, O)
    g = WinogradShape(N, C, H, W, O, 1, m)
    conv = winograd_conv(X, winograd_weights(Wt, m, tiles.nr), B, g, tiles)
    added = te.compute(conv.shape, lambda *i: conv[i] + R[i], name="add")
    out = te.compute(conv.shape, lambda *i: ember.tir.expr.max_(added[i], 0.0), name="relu")
    s = create_schedule(out.op)
    schedule_winograd_output(s, out)
    arrays = [rng.uniform(-1, 1, [int(d.value) for d in t.shape]).astype("float32")
              for t in (X, Wt, B, R)]  # fmt: skip
    got = _run(s, [X, Wt, B, R, out], arrays)
    x, w, b, r = arrays
    want = np.maximum(conv_ref(x, w, 1, 1, 1) + b[None, :, None, None] + r, 0)
    np.testing.assert_allclose(got, want, **_tol(C))


@settings(max_examples=examples(4), deadline=None)
@given(index=st.integers(0, 10**6))
def test_random_legal_configs(index):  # noqa: ANN001
    args = (1, 5, 9, 11, 7, 1, "float32")
    task = task_of("conv2d_winograd.llvm", *args)
    cfg = task.config_space.get(index % len(task.config_space))
    assume(cfg.is_valid())
    _check_task(task, cfg, np.random.default_rng(index))


def test_invalid_configs_rejected():
    task = task_of("conv2d_winograd.llvm", 1, 8, 9, 9, 13, 1, "float32")
    space = task.config_space
    wide = next(space.get(i) for i in range(len(space)) if space.get(i)["nr"].val == 256)
    assert not wide.is_valid()
    with pytest.raises(ConfigError, match="no wider than the output channels"):
        task.instantiate(wide)
    big = next(
        space.get(i)
        for i in range(len(space))
        if space.get(i)["mr"].val == 12 and space.get(i)["nr"].val == 48
    )
    with pytest.raises(ConfigError, match="fits the vector registers"):
        task.instantiate(big)


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="output would be"):
        WinogradShape(1, 2, 1, 1, 3, 0, 2)
    with pytest.raises(ArgumentError, match="padding must be"):
        WinogradShape(1, 2, 8, 8, 3, (1, 2, 3), 2)
    with pytest.raises(ArgumentError, match="tile size must be 2 or 4"):
        WinogradShape(1, 2, 8, 8, 3, 1, 3)


def _conv_model(C: int, O: int, H: int, rng):  # noqa: ANN001, ANN202
    """relu(conv3x3(x) + bias + r): a residual block's tail, as ONNX."""
    from onnx import TensorProto, helper, numpy_helper

    w = rng.uniform(-1, 1, (O, C, 3, 3)).astype("float32")
    b = rng.uniform(-1, 1, (O,)).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Add", ["c", "r"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "block",
        [info("x", TensorProto.FLOAT, (1, C, H, H)), info("r", TensorProto.FLOAT, (1, O, H, H))],
        [info("y", TensorProto.FLOAT, (1, O, H, H))],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_graph_takes_winograd_with_fused_epilogue(rng):  # noqa: ANN001
    """A 32->32 layer at 16x16 meets the strategy's rule: compiled through the graph path
    (bias, residual add and ReLU fused), it matches onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from ember.codegen_llvm.strategy import WINOGRAD_TEMPLATE, choose_conv_task

    assert (
        choose_conv_task((1, 32, 16, 16, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "float32"))[0]
        == WINOGRAD_TEMPLATE
    )
    model = _conv_model(32, 32, 16, rng)
    feeds = {n: rng.uniform(-1, 1, (1, 32, 16, 16)).astype("float32") for n in ("x", "r")}
    lib = ember.compile(model, target="llvm")
    (got,) = lib.run(feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], **_tol(32))


def test_strategy_rule_and_records(tmp_path):  # noqa: ANN001
    """Direct for small images, 1x1 kernels and strides; a direct record overrides the
    rule for a layer the rule gives to Winograd."""
    from ember.codegen_llvm.strategy import CONV_TEMPLATE, choose_conv_task
    from ember.tuner import apply_history_best, create_task, tune

    def args(C, H, k=3, s=1):  # noqa: ANN001, ANN202
        return (1, C, H, H, C, k, k, (s, s), (1, 1, 1, 1), (1, 1), "float32")

    assert choose_conv_task(args(64, 7))[0] == CONV_TEMPLATE
    assert choose_conv_task(args(8, 56))[0] == CONV_TEMPLATE
    assert choose_conv_task(args(64, 56, s=2))[0] == CONV_TEMPLATE
    assert choose_conv_task(args(64, 56, k=1))[0] == CONV_TEMPLATE
    assert choose_conv_task(args(64, 56))[0] == "conv2d_winograd.llvm"
    task = create_task(CONV_TEMPLATE, args=args(32, 16))
    log = tmp_path / "direct.jsonl"
    from tests.tuner.test_model_tuning import FakeMeasurer

    tune(task, n_trials=1, records=str(log), measure=FakeMeasurer())
    with apply_history_best(str(log)):
        assert choose_conv_task(args(32, 16)) == (CONV_TEMPLATE, args(32, 16))


@pytest.mark.parametrize("m", [2, 4])
def test_transforms_are_vectorized_without_gathers(m):
    """The input transform reads a tap of a row of tiles as one load with a stride of
    m and writes V a row of tiles at a time; the output transform stores channel
    vectors (a plane apart) and reads M's channels contiguously."""
    task = task_of("conv2d_winograd.llvm", 1, 16, 16, 16, 32, 1, "float32")
    s, args = task.instantiate(_config(task, m=m))
    lines = [line.strip() for line in str(ember.lower(s, args)).splitlines()]
    lanes = 16 // m  # tiles in a row
    v_stores = [line for line in lines if line.startswith("V[")]
    assert v_stores and all(line.startswith("V[ramp(") for line in v_stores)
    assert all(f", 1, {lanes})]" in line.split("=")[0] for line in v_stores)
    assert all("X_pad[ramp(" in line and f", {m}, {lanes})]" in line for line in v_stores)
    out_stores = [line for line in lines if line.startswith("conv[")]
    assert out_stores and all(", 256, 16)]" in line.split("=")[0] for line in out_stores)
    assert all("M[ramp(" in line and ", 1, 16)]" in line.split("=")[1] for line in out_stores)
