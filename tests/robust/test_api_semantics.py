"""TVM-compatible corners of the public API: the error base class, rank-0 arrays, thread axes."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te


def test_ember_error_is_runtime_error() -> None:
    assert issubclass(ember.EmberError, RuntimeError)
    # a call with a wrong shape is caught by code written for TVM's TVMError
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    mod = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    with pytest.raises(RuntimeError, match="shape"):
        mod(np.ones(5, "float32"), np.ones(4, "float32"))


def test_argument_error_stays_a_value_error() -> None:
    assert issubclass(ember.ArgumentError, ValueError)
    assert issubclass(ember.ArgumentError, RuntimeError)


def test_nd_array_rank0_keeps_shape(rng: np.random.Generator) -> None:
    x = np.float32(rng.uniform(1, 2))
    arr = ember.nd.array(x)
    assert arr.shape == ()
    assert arr.numpy().shape == ()
    assert arr.numpy() == x
    assert ember.nd.array(np.array(7, "int32")).shape == ()


@pytest.mark.parametrize("range_first", [False, True])
def test_thread_axis_both_argument_orders(range_first: bool) -> None:
    tx = (
        te.thread_axis((0, 32), "threadIdx.x")
        if range_first
        else te.thread_axis("threadIdx.x", (0, 32))
    )
    assert tx.thread_tag == "threadIdx.x"
    assert tx.dom is not None and tx.dom.extent.value == 32


@pytest.mark.parametrize("range_first", [False, True])
def test_ranged_thread_axis_on_reduction_stage(range_first: bool, rng: np.random.Generator) -> None:
    """A ranged thread axis bound to a data axis of a stage that reduces (emulated vs numpy)."""
    n, m = 45, 37
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    tx = (
        te.thread_axis((0, 32), "threadIdx.x")
        if range_first
        else te.thread_axis("threadIdx.x", (0, 32))
    )
    s[B].bind(bi, tx)
    mod = ember.build(s, [A, B], target="cuda -arch=sm_80")
    a = rng.uniform(-1, 1, (n, m)).astype("float32")
    b = rng.uniform(-1, 1, n).astype("float32")
    mod.emulate(a, b)
    np.testing.assert_allclose(b, (a * a).sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dom", [None, (0, 32)])
def test_reduction_bound_to_thread_is_a_cross_thread_reduction(
    rng: np.random.Generator, dom: tuple[int, int] | None
) -> None:
    """A reduction axis bound to threads is TVM's cross-thread allreduce (it once stored
    each thread's partial sum, a wrong answer): every row sums all 64 terms."""
    A = te.placeholder((64, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=32)
    s[B].bind(ki, te.thread_axis("threadIdx.x", dom))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    mod = ember.build(s, [A, B], target="cuda -arch=sm_80")
    a = rng.uniform(-1, 1, (64, 64)).astype("float32")
    b = np.full(64, np.nan, "float32")
    mod.emulate(a, b)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)


def test_unknown_thread_tag_is_a_schedule_error() -> None:
    with pytest.raises(ember.ScheduleError, match="unknown thread tag 'threadIdx.w'"):
        te.thread_axis("threadIdx.w")
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ember.ScheduleError, match="'B': bind: unknown thread tag 'blockidx.x'"):
        s[B].bind(s[B].op.axis[0], "blockidx.x")


def test_tvm_node_constructors_and_index_division() -> None:
    """``tvm.tir.IntImm(dtype, value)`` and friends, and ``indexdiv``/``indexmod`` (floor
    division and modulo of indices), spelled as TVM scripts spell them."""
    from ember import tir
    from ember.tir import expr as E

    five = tir.IntImm("int64", 5)
    assert isinstance(five, E.IntImm) and five.dtype == "int64" and int(five) == 5
    half = tir.FloatImm("float32", 0.5)
    assert isinstance(half, E.FloatImm) and float(half) == 0.5
    x = tir.Var("x", "int32")
    assert isinstance(tir.Cast("float32", x), E.Cast) and tir.Cast("float32", x).dtype == "float32"
    assert isinstance(tir.SizeVar("n", "int32"), E.SizeVar)
    assert tir.StringImm("hi").value == "hi"
    # TVM's index division rounds down: on negative values that differs from C's
    rng = np.random.default_rng(8)
    a = rng.integers(-50, 50, 37).astype("int32")
    b = rng.choice([-7, -3, 2, 5], 37).astype("int32")
    A = te.placeholder((37,), name="A", dtype="int32")
    B = te.placeholder((37,), name="B", dtype="int32")
    C = te.compute(
        (37,), lambda i: tir.indexdiv(A[i], B[i]) * 1000 + te.indexmod(A[i], B[i]), name="C"
    )
    out = np.zeros(37, "int32")
    ember.build(te.create_schedule(C.op), [A, B, C], target="llvm")(a, b, out)
    np.testing.assert_array_equal(out, np.floor_divide(a, b) * 1000 + np.mod(a, b))


def test_tvm_device_helpers_and_target_host(rng: np.random.Generator) -> None:
    """The TVM vector-add tutorial's spellings: ``tvm.device(tgt.kind.name, 0)``,
    ``tvm.cpu(0)``, ``build(..., target_host="llvm")``, ``time_evaluator(name, dev)``."""
    assert ember.cpu(0) == ember.cpu() == ember.device("llvm", 0) == "cpu"
    assert ember.device("llvm -mcpu=x86-64") == "cpu"
    assert ember.cuda(0) == ember.device("cuda") == "cuda"
    with pytest.raises(ember.ArgumentError, match="device 0 of each kind"):
        ember.cuda(1)
    with pytest.raises(ember.ArgumentError, match="unknown device 'tpu'"):
        ember.device("tpu")

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    fadd = ember.build(s, [A, B, C], target="llvm", target_host="llvm", name="myadd")
    dev = ember.device("llvm", 0)
    a = ember.nd.array(rng.uniform(size=1025).astype(A.dtype), dev)
    b = ember.nd.array(rng.uniform(size=1025).astype(B.dtype), dev)
    c = ember.nd.array(np.zeros(1025, dtype=C.dtype), dev)
    fadd(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    assert fadd.time_evaluator(fadd.entry_name, dev, number=2)(a, b, c).mean > 0
    with pytest.raises(ember.ArgumentError, match="target_host must be an llvm target"):
        ember.build(s, [A, B, C], target="llvm", target_host="cuda")
