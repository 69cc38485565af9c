"""Single ONNX operators at model-like sizes: Ember's untuned default beside onnxruntime.

Run: ``EMBER_NUM_THREADS=1 python benchmarks/bench_ops.py`` (``--threads 1`` sets both
runtimes; ``--only Resize`` picks by name). Each case is a one-node model (seeded random
inputs, never zeros) compiled by ``ember.compile`` for ``llvm`` and opened by onnxruntime's
CPU provider with all graph optimizations; outputs are checked against onnxruntime, then
each runtime's ``run`` is timed in blocks by turns (``--rounds``), best block kept.
ratio = onnxruntime time / Ember time, so below 1 Ember is slower. Both times include
what a call costs a user (inputs read, a fresh output array); Ember's kernel-only time is
shown beside it (``CompiledModel.profile``). The table is sorted worst first: it is
where the next default schedule is most needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_autosched_groups import _block_s  # noqa: E402  (one block timer for both scripts)

Case = tuple[list[Any], dict[str, np.ndarray], dict[str, np.ndarray]]  # nodes, feeds, inits


def _f(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


def _i64(*values: int) -> np.ndarray:
    return np.array(values, "int64")


def cases(rng: np.random.Generator) -> dict[str, Callable[[], Case]]:
    """Name -> a builder of (nodes, feeds, initializers); every node reads X, writes Y."""
    # optional dependency: onnx
    from onnx import helper

    def node(op: str, *inputs: str, **attrs: Any) -> Any:
        return helper.make_node(op, ["X", *inputs], ["Y"], **attrs)

    img = _f(rng, 1, 64, 56, 56)
    return {
        "ReduceMean last 1024x1024": lambda: (
            [node("ReduceMean", "A")], {"X": _f(rng, 1024, 1024)}, {"A": _i64(-1)}),
        "ReduceSum first 1024x1024": lambda: (
            [node("ReduceSum", "A", keepdims=0)], {"X": _f(rng, 1024, 1024)}, {"A": _i64(0)}),
        "ReduceMax mid 64x256x64": lambda: (
            [node("ReduceMax", "A")], {"X": _f(rng, 64, 256, 64)}, {"A": _i64(1)}),
        "ArgMax last 1024x1000": lambda: (
            [node("ArgMax", axis=-1)], {"X": _f(rng, 1024, 1000)}, {}),
        "Transpose 0213 8x128x12x64": lambda: (
            [node("Transpose", perm=[0, 2, 1, 3])], {"X": _f(rng, 8, 128, 12, 64)}, {}),
        "Transpose NCHW->NHWC 64x56x56": lambda: (
            [node("Transpose", perm=[0, 2, 3, 1])], {"X": img}, {}),
        "Concat 2x 64x56x56": lambda: (
            [helper.make_node("Concat", ["X", "Z"], ["Y"], axis=1)],
            {"X": img, "Z": _f(rng, 1, 64, 56, 56)}, {}),
        "Gather embedding 30522x256": lambda: (
            [helper.make_node("Gather", ["E", "X"], ["Y"], axis=0)],
            {"X": rng.integers(0, 30522, (1, 128)).astype("int64")}, {"E": _f(rng, 30522, 256)}),
        "MaxPool 3x3 s2 64x112x112": lambda: (
            [node("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
            {"X": _f(rng, 1, 64, 112, 112)}, {}),
        "AveragePool 3x3 s1 64x56x56": lambda: (
            [node("AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1])], {"X": img}, {}),
        "GlobalAveragePool 256x56x56": lambda: (
            [node("GlobalAveragePool")], {"X": _f(rng, 1, 256, 56, 56)}, {}),
        "Resize nearest 2x 64x56x56": lambda: (
            [node("Resize", "", "S", mode="nearest")], {"X": img},
            {"S": np.array([1, 1, 2, 2], "float32")}),
        "Resize linear 2x 64x56x56": lambda: (
            [node("Resize", "", "S", mode="linear")], {"X": img},
            {"S": np.array([1, 1, 2, 2], "float32")}),
        "Pad 1 64x56x56": lambda: (
            [node("Pad", "P")], {"X": img}, {"P": _i64(0, 0, 1, 1, 0, 0, 1, 1)}),
        "InstanceNorm 64x56x56": lambda: (
            [node("InstanceNormalization", "G", "B")], {"X": img},
            {"G": _f(rng, 64), "B": _f(rng, 64)}),
        "LRN 64x56x56": lambda: ([node("LRN", size=5)], {"X": img}, {}),
        "Softmax axis1 8x128x64": lambda: (
            [node("Softmax", axis=1)], {"X": _f(rng, 8, 128, 64)}, {}),
        "Softmax last 64x1000": lambda: ([node("Softmax", axis=-1)], {"X": _f(rng, 64, 1000)}, {}),
        "LayerNorm last 128x768": lambda: (
            [node("LayerNormalization", "G", "B", axis=-1)], {"X": _f(rng, 128, 768)},
            {"G": _f(rng, 768), "B": _f(rng, 768)}),
        "MatMul batched 12x128x64x128": lambda: (
            [helper.make_node("MatMul", ["X", "Z"], ["Y"])],
            {"X": _f(rng, 12, 128, 64), "Z": _f(rng, 12, 64, 128)}, {}),
        "Conv1d k3 64x1000": lambda: (
            [node("Conv", "W", pads=[1, 1])], {"X": _f(rng, 1, 64, 1000)},
            {"W": _f(rng, 64, 64, 3)}),
        "ConvTranspose k4 s2 64x28x28": lambda: (
            [node("ConvTranspose", "W", strides=[2, 2], pads=[1, 1, 1, 1])],
            {"X": _f(rng, 1, 64, 28, 28)}, {"W": _f(rng, 64, 32, 4, 4)}),
        "CumSum last 1024x1024": lambda: (
            [node("CumSum", "A")], {"X": _f(rng, 1024, 1024)}, {"A": np.array(1, "int64")}),
        "TopK 5 of 64x1000": lambda: (
            [helper.make_node("TopK", ["X", "K"], ["Y", "I"], axis=-1)],
            {"X": _f(rng, 64, 1000)}, {"K": _i64(5)}),
        "DepthToSpace 2 64x56x56": lambda: ([node("DepthToSpace", blocksize=2)], {"X": img}, {}),
        "Tile 2x2 64x56x56": lambda: ([node("Tile", "R")], {"X": img}, {"R": _i64(1, 1, 2, 2)}),
        "Where 1024x1024": lambda: (
            [helper.make_node("Where", ["C", "X", "Z"], ["Y"])],
            {"X": _f(rng, 1024, 1024), "Z": _f(rng, 1024, 1024)},
            {"C": rng.random((1024, 1024)) < 0.5}),
        "ReduceL2 last 1024x1024": lambda: (
            [node("ReduceL2", "A")], {"X": _f(rng, 1024, 1024)}, {"A": _i64(-1)}),
    }  # fmt: skip


def run_case(name: str, case: Case, threads: int, rounds: int) -> dict[str, Any]:
    """Compile, check against onnxruntime, time both by turns."""
    # optional dependency: onnxruntime
    import onnxruntime as ort

    import ember
    from ember.frontend.testing.models import build_model
    from ember.runtime import set_num_threads

    nodes, feeds, inits = case
    outs = [o for n in nodes for o in n.output]
    model = build_model(nodes, feeds, outs, inits, opset=18)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    set_num_threads(threads)
    lib = ember.compile(model, target="llvm")
    want, got = sess.run(None, feeds), lib.run(feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)
    ember_s, ort_s = [], []
    for _ in range(rounds):
        ember_s.append(_block_s(lambda: lib.run(feeds), 0.15))
        time.sleep(0.05)
        ort_s.append(_block_s(lambda: sess.run(None, feeds), 0.15))
        time.sleep(0.05)
    kernels = sum(s.seconds for s in lib.profile(feeds, number=5).steps)
    e, o = min(ember_s), min(ort_s)
    return {"name": name, "ember_us": e * 1e6, "kernels_us": kernels * 1e6, "ort_us": o * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="", help="the cases whose name contains this")
    args = ap.parse_args()
    rows = []
    for name, build in cases(np.random.default_rng(0)).items():
        if args.only in name:
            rows.append(run_case(name, build(), args.threads, args.rounds))
            print(f"  {name}: done", file=sys.stderr, flush=True)
    print(f"{'op':34s}{'ember us':>10s}{'kernels':>10s}{'ort us':>10s}{'ort/ember':>10s}")
    for r in sorted(rows, key=lambda r: r["ort_us"] / r["ember_us"]):
        ratio = r["ort_us"] / r["ember_us"]
        print(
            f"{r['name']:34s}{r['ember_us']:10.1f}{r['kernels_us']:10.1f}{r['ort_us']:10.1f}{ratio:10.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
