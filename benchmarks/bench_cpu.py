"""CPU benchmarks: Ember's default templates beside numpy (OpenBLAS) and onnxruntime.

Run: ``python benchmarks/bench_cpu.py`` (``--quick`` for a subset). Every kernel's
result is checked against numpy before it is timed. numpy is timed twice in
child processes: once with OpenBLAS held to its AVX2 kernel (``OPENBLAS_CORETYPE=Haswell``,
as some environments set) and once with its best kernel for this CPU (both
variables unset). Ratios are peer time / Ember time, so > 1 means Ember is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

GEMMS = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (128, 3072, 768), (1, 4096, 4096)]
CONVS = [  # ResNet-18 3x3 layers: (C, H, W, O, stride)
    (64, 56, 56, 64, 1),
    (128, 28, 28, 128, 1),
    (256, 14, 14, 256, 1),
    (512, 7, 7, 512, 1),
    (64, 56, 56, 128, 2),
]
ROWS = [(4096, 1024), (1024, 4096)]


def warm_up(fn: Callable[[], object], seconds: float = 0.5) -> None:
    """Run ``fn`` for a while first: this machine's clocks and thread pools take a
    moment to reach speed, and a cold first repeat would understate whoever goes first."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()


def best_time(fn: Callable[[], object], number: int = 3, repeat: int = 7) -> float:
    """Median seconds per call over ``repeat`` batches of ``number`` calls, after a warm-up."""
    warm_up(fn)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return float(np.median(times))


def time_module(mod, *args) -> float:  # noqa: ANN001
    """Median seconds of an Ember module through its own ``time_evaluator``, after a warm-up."""
    warm_up(lambda: mod(*args))
    return mod.time_evaluator(number=3, repeat=7)(*args).median


def numpy_child(kind: str, shapes: list, env_mode: str) -> list[float]:
    """Time numpy GEMMs in a child process with the OpenBLAS kernel chosen by ``env_mode``."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if env_mode == "avx2":
        env["OPENBLAS_CORETYPE"] = "Haswell"
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        "import json,sys,time,numpy as np\n"
        f"sys.path.insert(0, {here!r})\n"
        "from bench_cpu import best_time\n"
        "out=[]\n"
        "for M,N,K in json.loads(sys.argv[1]):\n"
        "    a=np.random.rand(M,K).astype('float32'); b=np.random.rand(K,N).astype('float32')\n"
        "    out.append(best_time(lambda: a@b))\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, json.dumps(shapes)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def ort_session(model):  # noqa: ANN001, ANN201
    import onnxruntime as ort

    model.ir_version = 8  # the newest IR version every onnxruntime release reads

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def onnx_matmul(M: int, N: int, K: int):  # noqa: ANN201
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])],
        "mm",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, [M, K]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [K, N]),
        ],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [M, N])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def onnx_conv(C: int, H: int, W: int, O: int, stride: int, w: np.ndarray):  # noqa: ANN201
    """A one-node Conv with the weights as an initializer, so onnxruntime can pre-pack them."""
    from onnx import TensorProto, helper, numpy_helper

    OH, OW = (H + 2 - 3) // stride + 1, (W + 2 - 3) // stride + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["X", "W"], ["Y"], pads=[1, 1, 1, 1], strides=[stride, stride])],
        "conv",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, O, OH, OW])],
        initializer=[numpy_helper.from_array(w, "W")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def onnx_rows(op: str, R: int, C: int):  # noqa: ANN201
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [R, C])]
    if op == "Softmax":
        node = helper.make_node("Softmax", ["X"], ["Y"], axis=-1)
    else:
        inputs += [
            helper.make_tensor_value_info("G", TensorProto.FLOAT, [C]),
            helper.make_tensor_value_info("Bb", TensorProto.FLOAT, [C]),
        ]
        node = helper.make_node(
            "LayerNormalization", ["X", "G", "Bb"], ["Y"], axis=-1, epsilon=1e-5
        )
    g = helper.make_graph(
        [node], op, inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [R, C])]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def build(template: str, args: tuple):  # noqa: ANN201
    import ember
    from ember.tuner import create_task

    task = create_task(template, args=args, target="llvm")
    sch, tensors = task.instantiate()
    return ember.build(sch, tensors, target="llvm", name=template.split(".")[0])


def row(name: str, flops: float, t_ember: float, peers: dict[str, float]) -> None:
    cells = [f"{name:<28}", f"{flops / t_ember / 1e9:8.1f}"]
    for _, t in peers.items():
        cells.append(f"{flops / t / 1e9:8.1f}  {t / t_ember:5.2f}x")
    print(" | ".join(cells), flush=True)


def bench_gemm(quick: bool) -> None:
    shapes = GEMMS[:2] + GEMMS[3:] if quick else GEMMS
    avx2 = numpy_child("gemm", shapes, "avx2")
    best = numpy_child("gemm", shapes, "best")
    print("\nGEMM fp32 (GFLOP/s; ratio = peer time / ember time)")
    print(
        "shape (MxNxK)                |   ember | numpy AVX2       | numpy best       | onnxruntime"
    )
    rng = np.random.default_rng(0)
    for (M, N, K), t_avx2, t_best in zip(shapes, avx2, best):
        mod = build("matmul.llvm", (M, N, K, "float32"))
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        c = np.empty((M, N), np.float32)
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=2e-3, atol=2e-3)
        t = time_module(mod, a, b, c)
        sess = ort_session(onnx_matmul(M, N, K))
        t_ort = best_time(lambda s=sess, a=a, b=b: s.run(None, {"A": a, "B": b}))
        row(f"{M}x{N}x{K}", 2.0 * M * N * K, t, {"avx2": t_avx2, "best": t_best, "ort": t_ort})


def bench_conv(quick: bool) -> None:
    print("\nconv2d NCHW fp32, 3x3 pad 1 (GFLOP/s; ratio = peer time / ember time)")
    print("layer (C,HxW->O,stride)      |   ember | onnxruntime")
    rng = np.random.default_rng(0)
    for C, H, W, O, stride in CONVS[:2] if quick else CONVS:
        OH, OW = (H - 1) // stride + 1, (W - 1) // stride + 1
        x = rng.standard_normal((1, C, H, W), dtype=np.float32)
        w = rng.standard_normal((O, C, 3, 3), dtype=np.float32)
        sess = ort_session(onnx_conv(C, H, W, O, stride, w))
        want = sess.run(None, {"X": x})[0]
        try:
            mod = build("conv2d_nchw.llvm", (1, C, H, W, O, 3, 3, stride, 1, 1, "float32"))
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{C},{H}x{W}->{O},s{stride}: not built ({type(e).__name__}: {e})")
            continue
        y = np.empty((1, O, OH, OW), np.float32)
        mod(x, w, y)
        np.testing.assert_allclose(y, want, rtol=2e-3, atol=2e-3)
        t = time_module(mod, x, w, y)
        t_ort = best_time(lambda s=sess, x=x: s.run(None, {"X": x}))
        row(f"{C},{H}x{W}->{O},s{stride}", 2.0 * O * OH * OW * C * 9, t, {"ort": t_ort})


def bench_rows(quick: bool) -> None:
    print("\nrow kernels fp32 (GB/s of input read; ratio = peer time / ember time)")
    print("kernel                       |   ember | onnxruntime")
    rng = np.random.default_rng(0)
    for R, C in ROWS[:1] if quick else ROWS:
        x = rng.standard_normal((R, C), dtype=np.float32)
        g = rng.standard_normal((C,), dtype=np.float32)
        bb = rng.standard_normal((C,), dtype=np.float32)
        for op, template, args, feeds in (
            ("Softmax", "softmax.llvm", (R, C, "float32"), {"X": x}),
            (
                "LayerNormalization",
                "layer_norm.llvm",
                (R, C, 1e-5, "float32"),
                {"X": x, "G": g, "Bb": bb},
            ),
        ):
            sess = ort_session(onnx_rows(op, R, C))
            want = sess.run(None, feeds)[0]
            try:
                mod = build(template, args)
            except Exception as e:  # noqa: BLE001
                print(f"{op} {R}x{C}: not built ({type(e).__name__}: {e})")
                continue
            y = np.empty((R, C), np.float32)
            ins = [x] if op == "Softmax" else [x, g, bb]
            mod(*ins, y)
            np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-4)
            t = time_module(mod, *ins, y)
            t_ort = best_time(lambda s=sess, f=feeds: s.run(None, f))
            row(f"{op} {R}x{C}", float(x.nbytes), t, {"ort": t_ort})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["gemm", "conv", "rows"], default=None)
    ns = parser.parse_args()
    import llvmlite.binding as llvm

    print(
        f"host: {llvm.get_host_cpu_name()}, {os.cpu_count()} threads; "
        f"OPENBLAS_CORETYPE in this process: {os.environ.get('OPENBLAS_CORETYPE', 'unset')}"
    )
    if ns.only in (None, "gemm"):
        bench_gemm(ns.quick)
    if ns.only in (None, "conv"):
        bench_conv(ns.quick)
    if ns.only in (None, "rows"):
        bench_rows(ns.quick)


if __name__ == "__main__":
    main()
