"""The VNNI int8 GEMM beside Ember's fp32 GEMM and onnxruntime's ``MatMulInteger``.

Run: ``python benchmarks/bench_int8.py`` (``--shapes 1024x1024x1024,...``). For each
shape it builds ``matmul_int8.llvm`` (u8 x s8 -> s32, AVX-512 VNNI) and
``matmul.llvm`` (fp32) at their default configs, checks the int8 result equals
numpy's int32 product exactly and the fp32 one within tolerance, then times both
and a one-node ONNX ``MatMulInteger`` model (B as an initializer, so onnxruntime
may pre-pack it) in this process. Throughput is in G multiply-adds x 2 per second
(GOP/s); ratios are other time / int8 time, so > 1 means the int8 GEMM is faster.
The int8 kernel takes B packed once beforehand (a model's constant weights are
packed when it is compiled; onnxruntime pre-packs its initializer likewise); Ember's
fp32 GEMM packs B inside every call, as ``matmul.llvm`` does.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_cpu import best_time, build, ort_session, time_module  # noqa: E402


def onnx_matmul_integer(M: int, N: int, K: int, b: np.ndarray):  # noqa: ANN201
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["C"])],
        "mmi",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [M, K])],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [M, N])],
        initializer=[numpy_helper.from_array(b, "B")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def bench(M: int, N: int, K: int) -> None:
    rng = np.random.default_rng(0)
    a8 = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b8 = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c32 = np.empty((M, N), np.int32)
    from ember.codegen_llvm.schedules.matmul_int8 import pack_b

    int8 = build("matmul_int8.llvm", (M, N, K))
    bp = pack_b(b8)  # once, as a compiled model packs its constant weights
    int8(a8, bp, c32)
    np.testing.assert_array_equal(c32, a8.astype(np.int32) @ b8.astype(np.int32))
    t_int8 = time_module(int8, a8, bp, c32)

    af = rng.standard_normal((M, K), dtype=np.float32)
    bf = rng.standard_normal((K, N), dtype=np.float32)
    cf = np.empty((M, N), np.float32)
    fp32 = build("matmul.llvm", (M, N, K, "float32"))
    fp32(af, bf, cf)
    np.testing.assert_allclose(cf, af @ bf, rtol=2e-3, atol=2e-3)
    t_fp32 = time_module(fp32, af, bf, cf)

    sess = ort_session(onnx_matmul_integer(M, N, K, b8))
    out = sess.run(None, {"A": a8})[0]
    np.testing.assert_array_equal(out, c32)
    t_ort = best_time(lambda: sess.run(None, {"A": a8}))
    ops = 2.0 * M * N * K
    cells = [f"{M}x{N}x{K}"]
    for name, t in (("int8 vnni", t_int8), ("fp32 ember", t_fp32), ("ort MatMulInteger", t_ort)):
        cells.append(f"{name} {ops / t / 1e9:7.1f} GOP/s ({t / t_int8:4.2f}x)")
    print(" | ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default="1024x1024x1024,512x768x768,129x1000x515")
    ns = parser.parse_args()
    import llvmlite.binding as llvm

    from ember.codegen_llvm.tensor_intrinsics import has_vnni

    print(f"host: {llvm.get_host_cpu_name()}, {os.cpu_count()} threads, VNNI: {has_vnni()}")
    print("ratio = that kernel's time / the int8 VNNI kernel's time (> 1: int8 is faster)")
    for shape in ns.shapes.split(","):
        M, N, K = (int(x) for x in shape.split("x"))
        bench(M, N, K)


if __name__ == "__main__":
    main()
