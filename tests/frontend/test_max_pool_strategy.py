"""Graph max and average pooling on the ``pool2d.llvm`` template's compute and schedule, vs
onnxruntime.

Odd shapes, strides 1 to 3, asymmetric padding, rows longer than one lane loop
(the schedule's row-long lanes stop at 64 columns), and a pool followed by a fused
elementwise tail (then the generic schedule takes the template's compute).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.schedules.anchors import avg_pool
from ember.codegen_llvm.schedules.pool2d import GRAPH_AVG_TAG, GRAPH_MAX_TAG
from ember.codegen_llvm.strategy import compute_for
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from tests.frontend.onnx_models import check_against_ort, helper, make_model

CASES = [
    ((1, 3, 17, 19), [3, 3], [2, 2], [1, 1, 1, 1]),
    ((2, 5, 9, 11), [2, 3], [1, 1], [0, 1, 1, 0]),
    ((1, 2, 13, 150), [3, 3], [3, 2], [1, 0, 0, 1]),  # 75 output columns: tiles of 32
    ((1, 4, 8, 8), [2, 2], [2, 2], [0, 0, 0, 0]),  # no padding: reads X directly
]


@pytest.mark.parametrize("shape,kernel,strides,pads", CASES)
@pytest.mark.parametrize("tail", [False, True])
def test_max_pool_on_template_matches_onnxruntime(shape, kernel, strides, pads, tail) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype("float32") - 0.5  # some windows all negative
    nodes = [
        helper.make_node(
            "MaxPool", ["x"], ["p"], name="pool", kernel_shape=kernel, strides=strides, pads=pads
        )
    ]
    if tail:
        nodes.append(helper.make_node("Relu", ["p"], ["y"], name="relu"))
    model = make_model(nodes, {"x": x}, ["y" if tail else "p"])
    lib = ember.compile(model)
    assert len(lib.steps) == 1
    check_against_ort(model, {"x": x}, rtol=0, atol=0)


def test_strategy_takes_plain_2d_max_pools_only() -> None:
    x = te.placeholder((1, 2, 9, 9), "float32", name="x")
    base = {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
    (out,) = compute_for("max_pool", [x], {**base, "ceil_mode": False})
    assert out.op.tag == GRAPH_MAX_TAG and tuple(int(d.value) for d in out.shape) == (1, 2, 5, 5)
    assert compute_for("max_pool", [x], {**base, "ceil_mode": True}) is None
    assert compute_for("max_pool", [x], {**base, "ceil_mode": False, "dilations": (2, 1)}) is None
    xi = te.placeholder((1, 2, 9, 9), "int32", name="xi")
    assert compute_for("max_pool", [xi], {**base, "ceil_mode": False}) is None


@pytest.mark.parametrize("shape,kernel,strides,pads", CASES)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_avg_pool_on_template_matches_onnxruntime(shape, kernel, strides, pads, count_pad) -> None:
    """Average pooling: the whole window or only its taps inside the input as divisor."""
    rng = np.random.default_rng(sum(shape) + count_pad)
    x = rng.standard_normal(shape).astype("float32")
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    pool = helper.make_node("AveragePool", ["x"], ["p"], count_include_pad=count_pad, **attrs)
    model = make_model([pool], {"x": x}, ["p"])
    (step,) = ember.compile(model).steps
    check_against_ort(model, {"x": x}, rtol=1e-5, atol=1e-6)
    xt = te.placeholder(shape, "float32", name="x")
    a = {"kernel": tuple(kernel), "strides": tuple(strides), "pads": tuple(pads)}
    a.update(dilations=(1, 1), ceil_mode=False, count_include_pad=count_pad)
    (out,) = compute_for("avg_pool", [xt], a)
    assert out.op.input_tensors[0].op.tag == GRAPH_AVG_TAG  # the template's compute
    s = create_schedule([out.op])
    assert avg_pool(s, [out])  # and its schedule


def test_a_global_average_pool_keeps_the_generic_schedule() -> None:
    """The template unrolls its window: a global pool's would be thousands of taps."""
    x = te.placeholder((1, 2, 9, 9), "float32", name="x")
    a = {"kernel": (9, 9), "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}
    assert compute_for("avg_pool", [x], {**a, "ceil_mode": False, "count_include_pad": 0}) is None
