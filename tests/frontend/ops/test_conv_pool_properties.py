"""Property tests: random Conv and pooling attribute combinations against onnxruntime."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.frontend.onnx_models import check_against_ort, single_node
from tests.nightly import examples

SETTINGS = settings(
    max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    span = [(k[i] - 1) * d[i] + 1 for i in range(2)]
    hw = [draw(st.integers(span[i], span[i] + 6)) for i in range(2)]
    return dict(
        groups=groups,
        cin=cin,
        cout=cout,
        k=k,
        d=d,
        s=s,
        pads=pads,
        hw=hw,
        seed=draw(st.integers(0, 99)),
    )


@SETTINGS
@given(conv_case(), st.booleans())
def test_conv_attribute_space(case, bias):
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((2, case["cin"], *case["hw"])).astype("float32")
    consts = {
        "w": rng.standard_normal((case["cout"], case["cin"] // case["groups"], *case["k"])).astype(
            "float32"
        )
    }
    if bias:
        consts["b"] = rng.standard_normal(case["cout"]).astype("float32")
    model = single_node(
        "Conv",
        {"x": x},
        consts,
        group=case["groups"],
        dilations=case["d"],
        strides=case["s"],
        pads=case["pads"],
    )
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


@st.composite
def pool_case(draw):
    k = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    hw = [draw(st.integers(k[i], k[i] + 7)) for i in range(2)]
    return dict(
        k=k,
        s=s,
        pads=pads,
        hw=hw,
        ceil=draw(st.integers(0, 1)),
        inc=draw(st.integers(0, 1)),
        seed=draw(st.integers(0, 99)),
    )


@SETTINGS
@given(pool_case(), st.sampled_from(["MaxPool", "AveragePool"]))
def test_pool_attribute_space(case, op):
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((1, 3, *case["hw"])).astype("float32")
    attrs = dict(
        kernel_shape=case["k"], strides=case["s"], pads=case["pads"], ceil_mode=case["ceil"]
    )
    if op == "AveragePool":
        attrs["count_include_pad"] = case["inc"]
    check_against_ort(single_node(op, {"x": x}, **attrs), {"x": x}, rtol=1e-5, atol=1e-6)
