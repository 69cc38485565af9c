"""Vectorizing a very long loop: chunks of at most MAX_LANES lanes plus a tail, same numbers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.transform.vectorize_loops import MAX_LANES


def _scaled(shape: tuple[int, ...]):
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    return s, A, B


def test_prime_extent_on_llvm_in_a_subprocess() -> None:
    """A 100003-lane vector aborted the process inside LLVM; run it where that cannot kill
    the suite."""
    script = textwrap.dedent("""
        import numpy as np, ember
        from tests.robust.test_wide_vectorize import _scaled
        s, A, B = _scaled((100003,))
        s[B].vectorize(s[B].op.axis[0])
        mod = ember.build(s, [A, B], target="llvm")
        a = np.random.default_rng(5).uniform(-1, 1, 100003).astype(np.float32)
        out = np.full(100003, np.nan, np.float32)
        mod(a, out)
        np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)
        print("OK")
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def _vector_lanes(func: S.PrimFunc) -> list[int]:
    lanes: list[int] = []

    def visit(node: object) -> None:
        if isinstance(node, S.BufferStore) and isinstance(node.indices[0], E.Ramp):
            lanes.append(node.indices[0].lanes)

    post_order_visit(func.body, visit)
    return lanes


@pytest.mark.parametrize(
    ("extent", "lanes"),
    [
        (MAX_LANES, [MAX_LANES]),
        (MAX_LANES * 3 + 5, [MAX_LANES, 5]),
        (MAX_LANES * 2 + 1, [MAX_LANES]),
    ],
)
def test_lowered_chunks_and_tail(extent: int, lanes: list[int]) -> None:
    s, A, B = _scaled((extent,))
    s[B].vectorize(s[B].op.axis[0])
    func = ember.lower(s, [A, B])
    assert _vector_lanes(func) == lanes
    assert max(_vector_lanes(func)) <= MAX_LANES


@pytest.mark.parametrize("shape", [(3, 131), (2, 64), (5, 65), (1, 1000)])
def test_llvm_matches_numpy(shape: tuple[int, int], rng: np.random.Generator) -> None:
    s, A, B = _scaled(shape)
    s[B].vectorize(s[B].op.axis[1])
    mod = ember.build(s, [A, B], target="llvm")
    a = rng.uniform(-1, 1, shape).astype("float32")
    out = np.full(shape, np.nan, "float32")
    mod(a, out)
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)


def _cuda(shape: tuple[int, int]):
    s, A, B = _scaled(shape)
    s[B].bind(s[B].op.axis[0], "blockIdx.x")
    s[B].vectorize(s[B].op.axis[1])
    return ember.build(s, [A, B], target="cuda -arch=sm_80")


@pytest.mark.parametrize("shape", [(3, 131), (2, 200)])
def test_cuda_emulator_matches_numpy(shape: tuple[int, int], rng: np.random.Generator) -> None:
    mod = _cuda(shape)
    a = rng.uniform(-1, 1, shape).astype("float32")
    out = np.full(shape, np.nan, "float32")
    mod.emulate(a, out)
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)


@pytest.mark.nvrtc
def test_cuda_compiles_with_nvrtc() -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember.codegen_cuda.nvrtc import compile_cuda

    compiled = compile_cuda(_cuda((3, 131)).get_source("cuda"), "sm_80")
    assert ".entry" in compiled.ptx
