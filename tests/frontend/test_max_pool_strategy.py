"""Graph max pooling on the ``pool2d.llvm`` template's compute and schedule, vs onnxruntime.

Odd shapes, strides 1 to 3, asymmetric padding, rows longer than one lane loop
(the schedule's row-long lanes stop at 64 columns), and a pool followed by a fused
elementwise tail (then the generic schedule takes the template's compute).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.schedules.pool2d import GRAPH_MAX_TAG
from ember.codegen_llvm.strategy import compute_for
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
