"""The six fused groups of issue 24's "reach" check that have only a generic schedule.

Each is a one- or few-node ONNX model (what onnxruntime times for the same op) whose fused
group, taken with ``ember.extract_tasks(model, "llvm", search="auto")``, is the auto task:
its compute is exactly what the compiled model runs (the frontend ops' own computes).
The shape keywords (defaults: the benchmark's shapes) give small variants for tests and
the CUDA emulator (``bench_autosched_cuda.py --tiny``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember import te
from ember.frontend.testing.models import build_model
from ember.tuner.auto import create_auto_task, register_workload


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


def softmax(
    rng: np.random.Generator, rows: int = 4096, cols: int = 1024
) -> tuple[Any, dict[str, np.ndarray]]:
    """Softmax over the last axis of 4096 x 1024."""
    # optional dependency: onnx
    from onnx import helper

    x = _f32(rng, rows, cols)
    node = helper.make_node("Softmax", ["X"], ["Y"], axis=-1)
    return build_model([node], {"X": x}, ["Y"], {}), {"X": x}


def layer_norm(
    rng: np.random.Generator, rows: int = 512, cols: int = 768
) -> tuple[Any, dict[str, np.ndarray]]:
    """LayerNormalization over the last axis of 512 x 768, with scale and bias."""
    # optional dependency: onnx
    from onnx import helper

    x = _f32(rng, rows, cols)
    init = {"G": _f32(rng, cols), "B": _f32(rng, cols)}
    node = helper.make_node("LayerNormalization", ["X", "G", "B"], ["Y"], axis=-1, epsilon=1e-5)
    return build_model([node], {"X": x}, ["Y"], init), {"X": x}


def scale_mask_softmax(
    rng: np.random.Generator, heads: int = 12, seq: int = 128
) -> tuple[Any, dict[str, np.ndarray]]:
    """BERT's attention scores: ``softmax(S / sqrt(64) + mask)`` over 12 x 128 x 128, the
    additive mask broadcast over heads and query rows."""
    # optional dependency: onnx
    from onnx import helper

    s = _f32(rng, 1, heads, seq, seq)
    mask = np.where(rng.random((1, 1, 1, seq)) < 0.1, -10000.0, 0.0).astype("float32")
    init = {"scale": np.array(1 / math.sqrt(64), "float32")}
    nodes = [
        helper.make_node("Mul", ["S", "scale"], ["T"]),
        helper.make_node("Add", ["T", "M"], ["U"]),
        helper.make_node("Softmax", ["U"], ["Y"], axis=-1),
    ]
    feed = {"S": s, "M": mask}
    return build_model(nodes, feed, ["Y"], init), feed


def depthwise_relu6(
    rng: np.random.Generator, channels: int = 144, size: int = 56
) -> tuple[Any, dict[str, np.ndarray]]:
    """MobileNetV2's depthwise 3x3 conv (144 channels at 56 x 56, pad 1) with its ReLU6."""
    # optional dependency: onnx
    from onnx import helper

    c = channels
    x = _f32(rng, 1, c, size, size)
    init = {"W": _f32(rng, c, 1, 3, 3), "b": _f32(rng, c)}
    init["lo"], init["hi"] = np.array(0.0, "float32"), np.array(6.0, "float32")
    nodes = [
        helper.make_node("Conv", ["X", "W", "b"], ["C"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["C", "lo", "hi"], ["Y"]),
    ]
    return build_model(nodes, {"X": x}, ["Y"], init), {"X": x}


def global_avg_pool(
    rng: np.random.Generator, channels: int = 1280, size: int = 7
) -> tuple[Any, dict[str, np.ndarray]]:
    """GlobalAveragePool over 1280 channels of 7 x 7 (MobileNetV2's head)."""
    # optional dependency: onnx
    from onnx import helper

    x = _f32(rng, 1, channels, size, size)
    node = helper.make_node("GlobalAveragePool", ["X"], ["Y"])
    return build_model([node], {"X": x}, ["Y"], {}), {"X": x}


def gelu_residual(
    rng: np.random.Generator, rows: int = 128, cols: int = 3072
) -> tuple[Any, dict[str, np.ndarray]]:
    """BERT's exact GELU (``0.5 x (1 + erf(x / sqrt 2))``) plus a residual, 128 x 3072."""
    # optional dependency: onnx
    from onnx import helper

    x = _f32(rng, rows, cols)
    r = _f32(rng, rows, cols)
    init = {
        "sqrt2": np.array(math.sqrt(2), "float32"),
        "one": np.array(1.0, "float32"),
        "half": np.array(0.5, "float32"),
    }
    nodes = [
        helper.make_node("Div", ["X", "sqrt2"], ["a"]),
        helper.make_node("Erf", ["a"], ["b"]),
        helper.make_node("Add", ["b", "one"], ["c"]),
        helper.make_node("Mul", ["X", "c"], ["d"]),
        helper.make_node("Mul", ["d", "half"], ["e"]),
        helper.make_node("Add", ["e", "R"], ["Y"]),
    ]
    feed = {"X": x, "R": r}
    return build_model(nodes, feed, ["Y"], init), feed


WORKLOADS: dict[str, Callable[[np.random.Generator], tuple[Any, dict[str, np.ndarray]]]] = {
    "softmax 4096x1024": softmax,
    "layer_norm 512x768": layer_norm,
    "scale+mask+softmax 12x128x128": scale_mask_softmax,
    "depthwise3x3+relu6 144x56x56": depthwise_relu6,
    "global_avg_pool 1280x7x7": global_avg_pool,
    "gelu+residual 128x3072": gelu_residual,
}


@register_workload
def softmax_exp_stage(m: int, n: int) -> list:
    """Softmax over rows as ``softmax_axis`` computes it, but with the exponentials a
    stage of their own (read by the sum and the division): what the op's compute would
    give if it did not evaluate ``exp`` twice per element."""
    x = te.placeholder((m, n), name="X")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(x[i, k1], axis=k1), name="softmax_max")
    ex = te.compute((m, n), lambda i, j: te.exp(x[i, j] - mx[i]), name="softmax_exp")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="softmax_sum")
    return [x, te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="softmax")]


# what-if rows: the same onnx model for onnxruntime, another compute for Ember
EXTRA: dict[str, tuple[Callable[[np.random.Generator], tuple[Any, dict]], Callable[[], Any]]] = {
    "softmax 4096x1024, exp a stage": (
        softmax,
        lambda: create_auto_task(softmax_exp_stage, (4096, 1024), "llvm"),
    ),
}


def group_task(model: Any) -> Any:
    """The auto task of the model's one fused group (the largest, if there are several)."""
    # the compiler's model tuning loads the whole compiler: startup cost
    import ember

    tasks = ember.extract_tasks(model, "llvm", search="auto")
    if not tasks:
        raise RuntimeError("the model has no auto-schedulable fused group")
    return max(tasks, key=lambda t: len(t.nodes)).task
