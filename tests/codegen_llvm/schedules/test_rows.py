"""The graph's softmax, log-softmax and layer/RMS norm over the last axis, scheduled row by
row (``codegen_llvm/schedules/rows.py``), against numpy on odd N-D shapes, through the
CPU strategy exactly as a compiled model takes them."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen_llvm.schedules.generic import schedule_group
from ember.codegen_llvm.schedules.rows import schedule_rows
from ember.codegen_llvm.strategy import CPU_STRATEGY
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.row_ops import ROWS_TAG

SHAPES = [(5, 37), (3, 4, 19), (2, 3, 2, 130), (1, 1), (7, 1)]


def _run(op: str, attrs: dict, arrays: list[np.ndarray]) -> np.ndarray:
    """Compile ``op`` as the graph's kernel would be (strategy compute + group schedule)."""
    ins = [te.placeholder(a.shape, "float32", name=f"in{k}") for k, a in enumerate(arrays)]
    outs, impl = CPU_STRATEGY.compute(op, ins, attrs, None)
    assert outs[0].op.tag == ROWS_TAG  # the row compute, not the op's generic one
    assert schedule_rows(create_schedule([outs[0].op]), outs)  # and its row schedule
    s = schedule_group(outs, [impl])
    y = np.full(arrays[0].shape, np.nan, "float32")
    ember.build(s, [*ins, outs[0]], target="llvm")(*arrays, y)
    return y


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_rows_match_numpy(shape, log, rng):  # noqa: ANN001
    x = (rng.standard_normal(shape) * 4).astype("float32")
    op = "log_softmax" if log else "softmax"
    y = _run(op, {"axis": len(shape) - 1}, [x])
    x64 = x.astype(np.float64)
    ref = np.log(_softmax(x64)) if log else _softmax(x64)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6)


def test_softmax_rows_keep_nan_and_inf_rows(rng):  # noqa: ANN001
    """A row holding NaN gives NaN, a row of -inf gives NaN (0 / 0), +inf gives NaN like numpy;
    the other rows are untouched."""
    x = rng.standard_normal((4, 21)).astype("float32")
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    y = _run("softmax", {"axis": 1}, [x])
    with np.errstate(invalid="ignore"):
        ref = _softmax(x.astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6, equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_normalize_rows_match_numpy(shape, center, rng):  # noqa: ANN001
    x = (rng.standard_normal(shape) * 3 + 5).astype("float32")  # a large mean
    g = rng.standard_normal(shape[-1:]).astype("float32")
    b = rng.standard_normal((1, shape[-1])).astype("float32")
    attrs = {"axes": (len(shape) - 1,), "eps": 1e-5, "center": center, "acc": "float32"}
    y = _run("normalize", attrs, [x, g, b])
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(axis=-1, keepdims=True) if center else x64
    ref = d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_other_axes_and_broadcasts_keep_the_ops_compute():
    x = te.placeholder((4, 6, 5), "float32", name="x")
    per_row = te.placeholder((4, 6, 1), "float32", name="g")
    assert CPU_STRATEGY.compute("softmax", [x], {"axis": 1}, None) is None
    attrs = {"axes": (2,), "eps": 1e-5, "center": True, "acc": "float32"}
    assert CPU_STRATEGY.compute("normalize", [x, per_row], attrs, None) is None
    attrs = {"axes": (1, 2), "eps": 1e-5, "center": True, "acc": "float32"}
    assert CPU_STRATEGY.compute("normalize", [x], attrs, None) is None
