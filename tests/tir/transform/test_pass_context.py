"""ember.transform.PassContext: each TVM-named config key changes the IR or code observably,
and the numbers stay numpy's on random data (llvm, and the CUDA emulator where it applies)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.codegen_llvm.codegen import codegen_module
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.transform import PassContext
from tests.nightly import examples
from tests.numerics import assert_close, random_array


def _nodes(func: S.PrimFunc, kind: type) -> list:
    found: list = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def _loops(func: S.PrimFunc) -> list[S.For]:
    return _nodes(func, S.For)


def _vector_add(n: int, factor: int = 8):  # type: ignore[no-untyped-def]
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
    s = te.create_schedule(C.op)
    _, xi = s[C].split(C.op.axis[0], factor=factor)
    s[C].vectorize(xi)
    return s, [A, B, C]


def _run_llvm(mod, n: int, rng):  # type: ignore[no-untyped-def]
    a, b = random_array((n,), "float32", rng), random_array((n,), "float32", rng)
    c = np.full(n, np.nan, "float32")
    mod(a, b, c)
    assert_close(c, a * 2.0 + b, "float32")


# -- tir.disable_vectorize ----------------------------------------------------------------


@pytest.mark.parametrize("n", [64, 37])
def test_disable_vectorize_leaves_no_vector_in_ir_or_llvm(rng, n):
    s, args = _vector_add(n)
    vec = ember.lower(s, args)
    assert _nodes(vec, E.Ramp), "the default vectorizes"
    with PassContext(config={"tir.disable_vectorize": True}):
        plain = ember.lower(s, args)
        mod = ember.build(s, args, target="llvm")
    assert not _nodes(plain, E.Ramp) and not _nodes(plain, E.Broadcast)
    assert all(loop.kind is not S.ForKind.VECTORIZED for loop in _loops(plain))
    # the IR Ember hands to LLVM (LLVM's own vectorizers may still vectorize, as in TVM)
    assert "<8 x float>" in str(codegen_module([vec])[0])
    assert "<8 x float>" not in str(codegen_module([plain])[0])
    _run_llvm(mod, n, rng)


def test_disable_vectorize_in_the_cuda_emulator(rng):
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, rest = s[B].split(B.op.axis[0], factor=128)
    tx, vi = s[B].split(rest, factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(vi)
    with PassContext(config={"tir.disable_vectorize": True}):
        mod = ember.build(s, [A, B], target="cuda -arch=sm_80")
    assert "float4" not in mod.get_source("cuda")
    assert "float4" in ember.build(s, [A, B], target="cuda -arch=sm_80").get_source("cuda")
    a = random_array((n,), "float32", rng)
    b = np.full(n, np.nan, "float32")
    mod.emulate(a, b)
    assert_close(b, a + 1.0, "float32")


# -- tir.UnrollLoop -------------------------------------------------------------------------


def _row_sums(rows: int, cols: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return te.create_schedule(B.op), [A, B]


def _serial_extents(func: S.PrimFunc) -> list[int]:
    return [
        loop.extent.value
        for loop in _loops(func)
        if loop.kind is S.ForKind.SERIAL and isinstance(loop.extent, E.IntImm)
    ]


@pytest.mark.parametrize("rows,cols", [(5, 3), (7, 4)])
def test_auto_max_step_unrolls_small_serial_loops(rng, rows, cols):
    s, args = _row_sums(rows, cols)
    assert cols in _serial_extents(ember.lower(s, args))
    with PassContext(config={"tir.UnrollLoop": {"auto_max_step": 16}}):
        func = ember.lower(s, args)
        mod = ember.build(s, args, target="llvm")
    assert cols not in _serial_extents(func), "the reduction loop is unrolled"
    assert rows in _serial_extents(func), "the row loop runs rows*cols > 16 steps: kept"
    a = random_array((rows, cols), "float32", rng)
    b = np.full(rows, np.nan, "float32")
    mod(a, b)
    assert_close(b, a.sum(axis=1), "float32")


def test_auto_max_extent_unrolls_by_extent_alone(rng):
    s, args = _row_sums(6, 3)
    with PassContext(config={"tir.UnrollLoop": {"auto_max_extent": 3}}):
        func = ember.lower(s, args)
    assert _serial_extents(func) == [6]


def test_auto_max_depth_counts_unrolled_loops_inside(rng):
    s, args = _row_sums(2, 3)
    with PassContext(config={"tir.UnrollLoop": {"auto_max_step": 100, "auto_max_depth": 1}}):
        assert _serial_extents(ember.lower(s, args)) == [], "one unrolled loop inside: allowed"
    with PassContext(config={"tir.UnrollLoop": {"auto_max_step": 100, "auto_max_depth": 0}}):
        assert _serial_extents(ember.lower(s, args)) == [2], "one unrolled loop inside: > 0"


def test_a_loop_that_stays_a_loop_blocks_unrolling_outside_it(rng):
    s, args = _row_sums(3, 50)
    with PassContext(config={"tir.UnrollLoop": {"auto_max_extent": 4}}):
        assert sorted(_serial_extents(ember.lower(s, args))) == [3, 50]


def test_explicit_unroll_false_leaves_unroll_hints(rng):
    n = 40
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(xi)
    copied = ember.lower(s, [A, B])
    assert all(loop.kind is not S.ForKind.UNROLLED for loop in _loops(copied))
    with PassContext(config={"tir.UnrollLoop": {"explicit_unroll": False}}):
        hinted = ember.lower(s, [A, B])
        mod = ember.build(s, [A, B], target="llvm")
    assert [loop.extent.value for loop in _loops(hinted) if loop.kind is S.ForKind.UNROLLED] == [4]
    module, _ = codegen_module([hinted])
    assert "llvm.loop.unroll.full" in str(module)
    a = random_array((n,), "float32", rng)
    b = np.full(n, np.nan, "float32")
    mod(a, b)
    assert_close(b, a * 3.0, "float32")


@pytest.mark.nvrtc
def test_explicit_unroll_false_prints_pragma_unroll_and_compiles(rng):
    pytest.importorskip("cuda.bindings.nvrtc")
    n = 300
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] - 0.5, name="B")
    s = te.create_schedule(B.op)
    bx, rest = s[B].split(B.op.axis[0], factor=64)
    tx, ui = s[B].split(rest, factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].unroll(ui)
    with PassContext(config={"tir.UnrollLoop": {"explicit_unroll": False}}):
        mod = ember.build(s, [A, B], target="cuda -arch=sm_80")
    assert "#pragma unroll" in mod.get_source("cuda")
    assert "#pragma unroll" not in ember.build(s, [A, B], target="cuda").get_source("cuda")
    a = random_array((n,), "float32", rng)
    b = np.full(n, np.nan, "float32")
    mod.emulate(a, b)
    assert_close(b, a - 0.5, "float32")


# -- tir.noalias ----------------------------------------------------------------------------


def test_noalias_false_drops_the_llvm_attribute(rng):
    s, args = _vector_add(33)
    assert "noalias" in ember.build(s, args, target="llvm").get_source("ll")
    with PassContext(config={"tir.noalias": False}):
        mod = ember.build(s, args, target="llvm")
    assert "noalias" not in mod.get_source("ll")
    _run_llvm(mod, 33, rng)


# -- configuration errors ---------------------------------------------------------------------


def test_unknown_config_key_lists_the_known_ones():
    with pytest.raises(ArgumentError, match=r"tir\.disable_vectoriz'.*known keys: tir\.disable"):
        PassContext(config={"tir.disable_vectoriz": True})
    with pytest.raises(ArgumentError, match="tir.instrument_bound_checkers"):
        PassContext(config={"relay.FuseOps": 1})


@pytest.mark.parametrize(
    "config,match",
    [
        ({"tir.noalias": "no"}, "takes a bool"),
        ({"tir.UnrollLoop": {"auto_max_stp": 3}}, "keys among auto_max_step"),
        ({"tir.UnrollLoop": {"auto_max_step": -1}}, "non-negative int"),
        ({"tir.add_lower_pass": [(-1, lambda f, m, c: f)]}, "phase is an int >= 0"),
        ({"tir.add_lower_pass": [(1, "simplify")]}, "is not a pass"),
    ],
)
def test_bad_config_values_are_argument_errors(config, match):
    with pytest.raises(ArgumentError, match=match):
        PassContext(config=config)


def test_contexts_nest_and_restore():
    outer = PassContext(opt_level=3, config={"tir.noalias": False})
    assert PassContext.current().opt_level == 2
    with outer:
        assert PassContext.current() is outer
        with PassContext(config={"tir.disable_vectorize": True}) as inner:
            assert PassContext.current() is inner
            assert inner.get("tir.noalias") is True  # contexts do not inherit config
        assert PassContext.current() is outer
    assert PassContext.current().get("tir.noalias") is True


@settings(max_examples=examples(15), deadline=None)
@given(
    n=st.integers(1, 70),
    factor=st.sampled_from([2, 4, 8]),
    disable=st.booleans(),
    step=st.integers(0, 40),
)
def test_any_config_keeps_the_numbers(n, factor, disable, step):
    rng = np.random.default_rng(n)
    s, args = _vector_add(n, factor)
    cfg = {"tir.disable_vectorize": disable, "tir.UnrollLoop": {"auto_max_step": step}}
    with PassContext(config=cfg):
        mod = ember.build(s, args, target="llvm")
    _run_llvm(mod, n, rng)


def test_the_tvm_spellings_reach_the_same_objects():
    assert ember.transform.PassContext is ember.tir.transform.PassContext is PassContext
    assert ember.transform.prim_func_pass is ember.tir.transform.prim_func_pass


def test_importing_an_ir_module_first_works_in_a_fresh_process():
    import subprocess
    import sys

    code = "from ember.tir.expr import const; import ember; print(ember.tir.transform.PassContext)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "PassContext" in out.stdout
