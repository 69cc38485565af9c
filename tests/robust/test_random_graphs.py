"""Random small ONNX graphs (``random_onnx_graphs.py``) compile and match onnxruntime.

Each drawn seed is one graph of convolutions, pools, normalizations, reshapes, concats
and elementwise chains of odd sizes, with intermediate values among its outputs: what
fusion, the layout passes and the memory plan each handle one at a time elsewhere, here
combined as no test wrote them. onnxruntime (one thread) is the reference; Ember runs the
graph as a user would (``ember.compile``, default passes, two threads).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from tests.robust.random_onnx_graphs import random_model  # noqa: E402


def _onnxruntime(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_random_graph_matches_onnxruntime(seed: int) -> None:
    model, feeds = random_model(seed)
    onnx.checker.check_model(model, full_check=True)  # the generator writes valid graphs
    want = _onnxruntime(model, feeds)
    got = ember.compile(model).run(feeds)
    ops = [n.op_type for n in model.graph.node]
    for name, a, b in zip((o.name for o in model.graph.output), got, want):
        assert a.shape == b.shape, f"seed {seed}, output {name}, ops {ops}"
        np.testing.assert_allclose(
            a, b, rtol=1e-3, atol=1e-3, err_msg=f"seed {seed}, output {name}, ops {ops}"
        )
