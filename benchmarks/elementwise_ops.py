"""Single elementwise ONNX nodes on a (256, 4096) float32 tensor: Ember (llvm) vs onnxruntime.

EMBER_NUM_THREADS=1 python benchmarks/elementwise_ops.py   # both on one thread

Prints the median time per run of each node for Ember and for onnxruntime's CPU
provider (one intra-op thread). The ops are those whose float32 compute Ember
writes itself rather than calling libm (Erf, Gelu, Softplus) next to plain ones.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def _model(op: str, feeds: dict[str, np.ndarray], opset: int, attrs: dict[str, Any]) -> Any:
    from onnx import TensorProto, helper

    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    info = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    out_type = TensorProto.BOOL if op == "Greater" else TensorProto.FLOAT
    out = helper.make_tensor_value_info("y", out_type, feeds["x"].shape)
    graph = helper.make_graph([node], op, info, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


def _ort_median(model: Any, feeds: dict[str, np.ndarray], number: int = 20) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    sess.run(None, feeds)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(number):
            sess.run(None, feeds)
        times.append((time.perf_counter() - start) / number)
    return float(np.median(times))


def main() -> None:
    import ember

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 4096)).astype("float32")
    b = rng.standard_normal((4096,)).astype("float32")
    cases = [
        ("Erf", {"x": x}, 17, {}),
        ("Gelu", {"x": x}, 20, {}),
        ("Gelu", {"x": x}, 20, {"approximate": "tanh"}),
        ("Softplus", {"x": x}, 17, {}),
        ("Mish", {"x": x}, 18, {}),
        ("HardSwish", {"x": x}, 17, {}),
        ("Clip", {"x": x}, 6, {"min": -1.0, "max": 1.0}),
        ("Max", {"x": x, "b": b}, 17, {}),
        ("Greater", {"x": x, "b": b}, 17, {}),
    ]
    for op, feeds, opset, attrs in cases:
        model = _model(op, feeds, opset, attrs)
        ember_s = ember.compile(model, target="llvm").benchmark(feeds, number=20)["median"]
        ort_s = _ort_median(model, feeds)
        label = f"{op} {attrs}" if attrs else op
        print(f"{label:36s} ember {ember_s * 1e3:7.2f} ms   onnxruntime {ort_s * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
