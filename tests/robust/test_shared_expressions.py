"""Expressions that read a value twice compile in time proportional to their distinct nodes.

A fused chain of elementwise ops that each read their input twice (``x * sigmoid(x)``,
GELU, ``max(x, -x)``) is, once inlined, an expression DAG whose tree doubles with every
op. A random six-op ONNX graph (two GELUs, ``Max(x, Neg(x))``, Softmax) took minutes to
compile: inlining copied each read's producer apart (``tir/schedule/graph.py`` now
interns them), and ``vectorize_loops``, the loop hints, the kernel signature, the parallel
work estimate and the CUDA passes walked the DAG as a tree; the CUDA printer printed it as
one (it now names each shared subexpression once above so large a statement). Each build
runs in a child process under a deadline, so a walk that regresses fails here instead of
hanging the suite: 40 doublings are 2**40 tree nodes, which no tree walk ends.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 240  # seconds: a build of these takes about one


def _run(script: str) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the build did not finish in {DEADLINE} s: a pass walks a DAG as a tree")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_te_expression_read_twice_forty_times_builds_for_llvm() -> None:
    _run("""
        import numpy as np, ember
        from ember import te
        A = te.placeholder((37,), name="A")

        def body(i):
            e = A[i]
            for _ in range(40):
                e = te.max(e, -e) * 0.5 + e * 0.25  # reads e twice
            return e

        B = te.compute((37,), body, name="B")
        s = te.create_schedule(B.op)
        xo, xi = s[B].split(B.op.axis[0], factor=16)
        s[B].vectorize(xi)
        s[B].parallel(xo)
        f = ember.build(s, [A, B], target="llvm")
        a = np.random.default_rng(0).standard_normal(37).astype("float32")
        b = np.empty_like(a)
        f(a, b)
        want = a.astype("float64")
        for _ in range(40):
            want = np.abs(want) * 0.5 + want * 0.25
        np.testing.assert_allclose(b, want, rtol=1e-4)
    """)


def test_onnx_chain_of_ops_reading_twice_compiles() -> None:
    onnx = pytest.importorskip("onnx")
    del onnx
    _run("""
        import numpy as np, ember
        from onnx import TensorProto, helper

        nodes, t = [], "x"
        for k in range(24):  # SiLU and |x| by turns: each reads its input twice
            if k % 2 == 0:
                nodes.append(helper.make_node("Sigmoid", [t], [f"s{k}"]))
                nodes.append(helper.make_node("Mul", [t, f"s{k}"], [f"y{k}"]))
            else:
                nodes.append(helper.make_node("Neg", [t], [f"n{k}"]))
                nodes.append(helper.make_node("Max", [t, f"n{k}"], [f"y{k}"]))
            t = f"y{k}"
        nodes.append(helper.make_node("Softmax", [t], ["out"], axis=-1))
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7])
        y = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 5, 7])
        model = helper.make_model(
            helper.make_graph(nodes, "chain", [x], [y]),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        a = np.random.default_rng(1).standard_normal((1, 3, 5, 7)).astype("float32")
        got = ember.compile(model).run({"x": a})[0]
        want = a.astype("float64")
        for k in range(24):
            want = want / (1 + np.exp(-want)) if k % 2 == 0 else np.abs(want)
        want = np.exp(want - want.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    """)


def test_te_expression_read_twice_builds_for_cuda() -> None:
    """NVRTC compiles the 40-deep kernel (the printer names each shared subexpression
    once instead of printing 3**40 copies), and the emulator runs it against numpy (it
    evaluates each shared subexpression once per evaluation of the store, not 3**40
    times a lane)."""
    pytest.importorskip("cuda.bindings.nvrtc")
    _run("""
        import numpy as np, ember
        from ember import te

        def kernel(depth):
            A = te.placeholder((37,), name="A")

            def body(i):
                e = A[i]
                for _ in range(depth):
                    e = te.max(e, -e) * 0.5 + e * 0.25  # reads e three times
                return e

            B = te.compute((37,), body, name="B")
            s = te.create_schedule(B.op)
            bx, tx = s[B].split(B.op.axis[0], factor=32)
            s[B].bind(bx, te.thread_axis("blockIdx.x"))
            s[B].bind(tx, te.thread_axis("threadIdx.x"))
            return ember.build(s, [A, B], target="cuda")

        mod = kernel(40)
        assert "shared" in mod.get_source("cuda") and mod.get_source("ptx")
        a = np.random.default_rng(0).standard_normal(37).astype("float32") * 1e5
        b = np.zeros_like(a)
        mod.emulate(a, b)
        want = a.astype("float64")
        for _ in range(40):
            want = np.abs(want) * 0.5 + want * 0.25
        np.testing.assert_allclose(b, want, rtol=1e-5)
    """)
