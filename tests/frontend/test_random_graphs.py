"""Property test: random DAGs of elementwise and broadcasting ops, several outputs, vs onnxruntime.

Values are read by several later nodes and some are graph outputs while still feeding
others, so the memory plan's reuse of dead buffers is exercised on many shapes of graph.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.frontend.onnx_models import check_against_ort, helper, make_model
from tests.nightly import examples

UNARY = ["Relu", "Sigmoid", "Tanh"]
BINARY = ["Add", "Sub", "Mul"]


@st.composite
def dag(draw):
    n_nodes = draw(st.integers(2, 12))
    steps = []
    for k in range(n_nodes):
        avail = 2 + k  # x, b, then one value per node
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(UNARY)), [draw(st.integers(0, avail - 1))]))
        else:
            a, b = draw(st.integers(0, avail - 1)), draw(st.integers(0, avail - 1))
            steps.append((draw(st.sampled_from(BINARY)), [a, b]))
    extra = draw(st.lists(st.integers(0, n_nodes - 2), max_size=2, unique=True))
    return steps, extra, draw(st.integers(0, 1000))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag())
def test_random_elementwise_dags(case):
    steps, extra, seed = case
    rng = np.random.default_rng(seed)
    names = ["x", "b"]
    nodes = []
    for k, (op, args) in enumerate(steps):
        out = f"v{k}"
        nodes.append(helper.make_node(op, [names[a] for a in args], [out], name=f"n{k}"))
        names.append(out)
    outputs = [names[-1], *(f"v{e}" for e in extra if f"v{e}" != names[-1])]
    x = rng.uniform(-1, 1, size=(3, 5, 7)).astype("float32")
    b = rng.uniform(-1, 1, size=(5, 1)).astype("float32")
    model = make_model(nodes, {"x": x, "b": b}, outputs)
    check_against_ort(model, {"x": x, "b": b}, rtol=1e-5, atol=1e-5)
