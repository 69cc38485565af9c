"""One-node quantized ONNX models of any dtype, and exact comparison with onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from ember.frontend.testing.models import build_model  # noqa: E402
from tests.frontend.onnx_models import run_ort  # noqa: E402


def node_model(
    op_type: str,
    inputs: dict[str, np.ndarray],
    consts: dict[str, np.ndarray] | None = None,
    order: Sequence[str] | None = None,
    n_outputs: int = 1,
    opset: int = 21,
    **attrs: Any,
) -> Any:
    """``op_type`` over graph inputs and initializers, taken in ``order`` ("" for a hole)."""
    consts = consts or {}
    names = list(order) if order is not None else [*inputs, *consts]
    outs = [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, name=f"{op_type.lower()}_node", **attrs)
    return build_model([node], inputs, outs, consts, opset)


def check_exact(model: Any, inputs: dict[str, np.ndarray], target: str = "llvm") -> list[Any]:
    """Ember's outputs equal onnxruntime's bit for bit (floats too)."""
    import ember

    want = run_ort(model, inputs)
    got = ember.compile(model, target=target).run(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)
    return got


QTYPES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
}


def random_q(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    lo, hi = QTYPES.get(dtype, (-(2**31), 2**31 - 1))  # int32: float conversion rounds
    return rng.integers(lo, hi, size=tuple(shape), endpoint=True).astype(dtype)


def random_zp(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    """Zero points away from the ends of the range, so saturation shows on both sides."""
    lo, hi = QTYPES[dtype]
    span = hi - lo
    return rng.integers(lo + span // 4, hi - span // 4, size=tuple(shape)).astype(dtype)
