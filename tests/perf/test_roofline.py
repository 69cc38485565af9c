"""``benchmarks/roofline.py``: the multiply-adds it counts per op, and its two machine
kernels compute what they claim (so the peak and bandwidth it prints time real work)."""

from __future__ import annotations

import ctypes
import runpy
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "roofline.py"
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


@pytest.fixture(scope="module")
def script() -> dict:
    return runpy.run_path(str(SCRIPT), run_name="roofline")


def _model(rng: np.random.Generator) -> tuple[object, dict]:
    """A grouped conv (odd sizes, padded, strided), a batched MatMul, a transposed-A Gemm
    and an LSTM, each on the previous one's output where shapes allow."""
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)  # 4 input channels, 2 groups
    m = rng.standard_normal((7, 5)).astype(np.float32)
    g = rng.standard_normal((11, 3)).astype(np.float32)  # Gemm A: [K=11, M=3] with transA
    gb = rng.standard_normal((11, 4)).astype(np.float32)
    lw = rng.standard_normal((1, 4 * 8, 5)).astype(np.float32)  # hidden 8, input 5
    lr = rng.standard_normal((1, 4 * 8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], group=2, pads=[1, 1, 1, 1], strides=[2, 1]),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "m"], ["mm"]),  # [6, 9, 7] @ [7, 5]
        helper.make_node("Gemm", ["g", "gb"], ["gm"], transA=1),  # [3, 11]ᵀ... -> [3, 4]
        helper.make_node("LSTM", ["mm", "lw", "lr"], ["ly"], hidden_size=8),  # seq 6, batch 9
    ]
    inits = [
        numpy_helper.from_array(a, n)
        for a, n in [(w, "w"), (m, "m"), (g, "g"), (gb, "gb"), (lw, "lw"), (lr, "lr")]
    ]
    inits.append(numpy_helper.from_array(np.array([6, 9, 7], np.int64), "shape"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "h", 7])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("mm", "gm", "ly")],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, 4, 17, 7)).astype(np.float32)}


def test_multiply_adds_per_op_at_the_feeds_sizes(script: dict) -> None:
    model, feeds = _model(np.random.default_rng(0))
    conv = 6 * 9 * 7 * (2 * 3 * 3)  # out [1, 6, 9, 7] (H 17 -> 9 at stride 2), 18 MACs each
    matmul = 6 * 9 * 5 * 7
    gemm = 3 * 4 * 11
    lstm = 6 * 9 * 4 * 8 * (5 + 8)  # seq, batch, gates * hidden, input + recurrent
    flops, unknown = script["model_flops"](model, feeds)
    assert unknown == 0
    assert flops == 2 * (conv + matmul + gemm + lstm)
    weights = 4 * (6 * 2 * 3 * 3 + 7 * 5 + 11 * 3 + 11 * 4 + 32 * 5 + 32 * 8)
    assert script["weight_bytes"](model) == weights  # the Reshape's shape is not a weight


def test_peak_kernel_does_every_fma(script: dict) -> None:
    lanes, chains = script["LANES"], script["CHAINS"]
    fn, _engine = script["_jit"](script["_peak_ir"](), "fma_peak", ctypes.c_int64, ctypes.c_void_p)
    io = np.linspace(-0.9, 0.9, lanes).astype(np.float32)
    a = io.copy()
    c = a.copy()
    for _ in range(3):
        c = (c * a + a).astype(np.float32)  # fma(c, a, a), the same in every chain
    fn(3, io.ctypes.data)
    np.testing.assert_allclose(io, 2 * c + (chains - 1) * c, rtol=1e-5)  # %d0 + %d0 + ...


def test_stream_kernel_sums_the_whole_buffer(script: dict) -> None:
    lanes = script["LANES"]
    fn, _engine = script["_jit"](
        script["_STREAM_IR"], "stream", ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p
    )
    buf = np.random.default_rng(1).standard_normal(12 * lanes).astype(np.float32)
    out = np.zeros(lanes, np.float32)
    fn(buf.ctypes.data, buf.size, out.ctypes.data)
    np.testing.assert_allclose(out, buf.reshape(-1, lanes).sum(axis=0), rtol=1e-5)


def test_rates_are_measured(script: dict) -> None:
    assert script["fma_peak"](1, seconds=0.02, repeat=2) > 1e9  # any AVX-512 core does more
    assert script["read_bandwidth"](1, mib=4, repeat=2) > 1e8


def test_peak_chains_fit_the_hosts_vector_registers(script: dict) -> None:
    """Vectors wider than the CPU's are split: 12 chains of 512-bit ones took 24 of
    AVX2's 16 registers, and the spills halved the peak it printed."""
    import llvmlite.binding as llvm

    avx512 = bool(llvm.get_host_cpu_features().get("avx512f"))
    registers = 32 if avx512 else 16
    assert script["LANES"] == (16 if avx512 else 8)
    assert script["CHAINS"] + 1 <= registers  # the chains and their shared operand
