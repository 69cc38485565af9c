"""Operator strategies (``tuner/strategy.py``): implementations by priority, the first whose
compute applies wins, its task names the tuning task; a template registered from one
module reaches ``ember.compile`` and its schedule runs on the group."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.strategy import CPU_STRATEGY, implementations, task_for
from ember.tir import topi
from ember.tir.te import operation as te
from ember.tuner.strategy import Implementation, StrategyTable


def _never(inputs, attrs):
    return None


def _double(inputs, attrs):
    return [te.compute(inputs[0].shape, lambda *i: inputs[0][i] * 2, name="double")]


def test_first_applicable_implementation_by_priority_wins():
    table = StrategyTable("toy")
    table.add("op", Implementation("low", _double, priority=1))
    table.add("op", Implementation("never", _never, priority=9))
    table.add("op", Implementation("off", _double, priority=5, supports=lambda t: t == "big"))
    assert [i.name for i in table.implementations("op")] == ["never", "low"]
    assert [i.name for i in table.implementations("op", "big")] == ["never", "off", "low"]
    x = te.placeholder((3,), name="x")
    outs, impl = table.compute("op", [x], {}, None)
    assert impl.name == "low" and outs[0].op.name == "double"
    assert table.compute("other", [x], {}) is None


def test_task_is_the_first_named_one_in_priority_order():
    table = StrategyTable("toy")
    table.add("op", Implementation("a", _never, task=lambda t, a: None, priority=3))
    table.add("op", Implementation("b", _never, task=lambda t, a: ("b.toy", (1,)), priority=2))
    table.add("op", Implementation("c", _never, task=lambda t, a: ("c.toy", (2,)), priority=1))
    assert table.task("op", [], {}) == ("b.toy", (1,))


def test_cpu_conv_implementations_in_order_and_tasks():
    assert [i.name for i in implementations("conv")] == [
        "conv2d_winograd.llvm",
        "conv2d_nchw.llvm",
        "depthwise_conv2d_nchw.llvm",
        "conv2d_grouped_pointwise",
    ]

    class T:
        def __init__(self, shape):
            self.shape, self.dtype = shape, "float32"

    attrs = {"group": 1, "strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
    big = task_for("conv", [T((1, 64, 56, 56)), T((64, 64, 3, 3))], attrs)
    small = task_for("conv", [T((1, 8, 8, 8)), T((8, 8, 3, 3))], attrs)
    assert big[0] == "conv2d_winograd.llvm" and small[0] == "conv2d_nchw.llvm"


def test_template_registered_from_one_module_reaches_compile(monkeypatch):
    """A toy Relu template (topi's compute, its own schedule) registered for one block:
    ember.compile takes it, runs its schedule on the kernel, and matches numpy."""
    from onnx import helper

    from ember.frontend.testing.models import build_model
    from ember.graph.kernels import clear_cache

    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    ran = []

    def compute(inputs, attrs):
        return [topi.relu(inputs[0])]

    def schedule(s, outputs):
        (out,) = outputs
        ran.append(out.op.name)
        s[out].parallel(s[out].op.axis[0])
        return {id(out.op)}

    x = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")
    model = build_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"], {})
    impl = Implementation("toy_relu.llvm", compute, schedule, priority=100)
    clear_cache()
    try:
        with CPU_STRATEGY.registered("relu", impl):
            lib = ember.compile(model, target="llvm")
    finally:
        clear_cache()
    assert ran, "the registered template's schedule did not run"
    (y,) = lib.run({"x": x})
    np.testing.assert_array_equal(np.asarray(y), np.maximum(x, 0))
    assert "toy_relu.llvm" not in [i.name for i in implementations("relu")]


@pytest.mark.parametrize("arch", ["sm_75", "sm_80"])
def test_cuda_tensorcore_needs_sm80(arch):
    from ember.codegen_cuda.strategy import implementations as cuda_impls

    names = [i.name for i in cuda_impls("matmul", f"cuda -arch={arch}")]
    assert names == (["matmul_tensorcore.cuda"] if arch == "sm_80" else [])


def test_conv_workload_is_the_template_arguments():
    """A graph conv's workload gives the same task arguments as a direct template call
    (records key on them), and the arguments give the workload back."""
    from ember.codegen_llvm.strategy import conv_task_args, depthwise_task_args
    from ember.tir.topi.workload import Conv2DWorkload, DepthwiseConv2DWorkload

    attrs = {"group": 1, "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1]}
    args = conv_task_args((1, 8, 9, 9), "float32", (16, 8, 3, 3), "float32", attrs)
    assert args == (1, 8, 9, 9, 16, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), "float32")
    assert Conv2DWorkload.from_args(args).args == args
    assert Conv2DWorkload.from_args(args).O == 16
    dw = depthwise_task_args(
        (1, 4, 9, 9), "float32", (8, 1, 3, 3), "float32", {**attrs, "group": 4}
    )
    assert dw == (1, 4, 9, 9, 2, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), "float32")
    assert DepthwiseConv2DWorkload.from_args(dw).multiplier == 2
