"""TVM's expression semantics: == / != nodes, int(IntImm), te.max(a, b), all/any, reducer
init= and where= (interpreter, llvm and the CUDA emulator, cross-thread included),
operator type errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError, LoweringError, ScheduleError
from ember.tir import expr as E
from ember.tir.interp import run
from ember.tir.structural import structural_equal
from tests.numerics import assert_close, check, random_array

# -- == and != ------------------------------------------------------------------------------


def test_eq_builds_a_node_whose_truth_is_identity():
    x, y = te.var("x"), te.var("y")
    node = x == 1
    assert isinstance(node, E.Compare) and node.op is E.CompareOp.EQ and node.dtype == "bool"
    assert isinstance(x != y, E.Compare) and (x != y).op is E.CompareOp.NE
    assert bool(x == x) and not bool(x == y) and not bool(x == 1)
    assert bool(x != y) and not bool(x != x)
    assert x in [y, x] and y not in [x] and [x, y].index(y) == 1
    assert {x: 1, y: 2}[y] == 2 and hash(x) == object.__hash__(x)
    items = [x, y]
    items.remove(y)
    assert items == [x]
    assert (x == None) is False and (x != "x") is True  # noqa: E711 - non-expressions
    assert structural_equal(x == 3, E.eq(x, 3))
    with pytest.raises(TypeError, match="no truth value"):
        bool(x < y)


def test_vectors_of_other_lengths_compare_unequal_instead_of_raising():
    a, b = E.Var("a", "int32x4"), E.Var("b", "int32x8")
    assert (a == b) is False and (a != b) is True


def test_iter_var_comparisons():
    k = te.reduce_axis((0, 4), name="k")
    j = te.reduce_axis((0, 4), name="j")
    assert isinstance(k == 0, E.Compare) and (k == 0).a is k.var
    assert (k == j) is False and (k == k) is True and k in [j, k] and (k != j) is True


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_select_on_equality_is_elementwise(rng, dtype):
    # the regression: `A[i] == 1` used to be a Python False, so select took one branch
    n = 53
    A = te.placeholder((n,), "int32", name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute(
        (n,),
        lambda i: te.select(A[i] == 1, B[i], te.select(A[i] != 2, B[i] * 2, B[i] * 3)),
        name="C",
    )
    a = rng.integers(0, 4, n).astype("int32")
    b = random_array((n,), dtype, rng)
    want = np.where(a == 1, b, np.where(a != 2, b * 2, b * 3)).astype(dtype)
    _run_everywhere([A, B, C], [a, b], want)


def _run_everywhere(tensors, inputs, want, vector=True):
    """Interpreter, LLVM (scalar and a vectorized split), and the CUDA emulator."""
    out = tensors[-1]
    for vectorize in (False, True) if vector else (False,):
        s = te.create_schedule(out.op)
        if vectorize:
            _, inner = s[out].split(out.op.axis[-1], factor=8)
            s[out].vectorize(inner)
        got = np.zeros(want.shape, want.dtype)
        ember.build(s, tensors, target="llvm")(*inputs, got)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"llvm vectorize={vectorize}")
    got = np.zeros(want.shape, want.dtype)
    run(ember.lower(te.create_schedule(out.op), tensors), *inputs, got)
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg="interp")
    s = te.create_schedule(out.op)
    fused = s[out].fuse(*out.op.axis) if len(out.op.axis) > 1 else out.op.axis[0]
    bx, tx = s[out].split(fused, factor=32)
    s[out].bind(bx, "blockIdx.x")
    s[out].bind(tx, "threadIdx.x")
    got = np.zeros(want.shape, want.dtype)
    ember.build(s, tensors, target="cuda -arch=sm_80").emulate(*inputs, got)
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg="emulator")


def test_int_and_float_of_constants():
    assert int(te.const(7)) == 7 and int(E.const(-3, "int64")) == -3
    assert float(te.const(2.5)) == 2.5
    assert list(range(int(te.const(3)))) == [0, 1, 2]


# -- reducers on expressions, all / any -------------------------------------------------------


def test_reducer_called_on_expressions_combines_them(rng):
    n = 41
    A, B, D = (te.placeholder((n,), "float32", name=nm) for nm in "ABD")
    C = te.compute(
        (n,), lambda i: te.max(A[i], B[i]) + te.min(A[i], B[i], D[i]) + te.sum(A[i], D[i]), name="C"
    )
    a, b, d = (random_array((n,), "float32", rng) for _ in range(3))
    want = np.maximum(a, b) + np.minimum(np.minimum(a, b), d) + (a + d)
    _run_everywhere([A, B, D, C], [a, b, d], want)


def test_max_of_int_and_python_number():
    x = te.var("x")
    assert structural_equal(te.max(x, 3), E.max_(x, 3))
    assert structural_equal(te.min(x, 0), E.min_(x, 0))


def test_all_and_any(rng):
    n = 64
    A = te.placeholder((n,), "int32", name="A")
    C = te.compute(
        (n,),
        lambda i: (
            te.select(te.all(A[i] > -3, A[i] < 4, A[i] != 1), 1, 0)
            + te.select(te.any(A[i] == -5, A[i] == 5), 10, 0)
        ),
        name="C",
    )
    a = rng.integers(-6, 7, n).astype("int32")
    want = (((a > -3) & (a < 4) & (a != 1)) * 1 + ((a == -5) | (a == 5)) * 10).astype("int32")
    _run_everywhere([A, C], [a], want)
    x = te.var("x")
    assert te.all(x > 0) is not None and structural_equal(te.any(x > 0), x > 0)
    with pytest.raises(ArgumentError, match="at least one"):
        te.all()


# -- reducer init= and where= ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 17), (3, 1), (7, 33)])
def test_sum_with_where_and_init(rng, shape):
    m, n = shape
    X = te.placeholder((m, n), "float32", name="X")
    I0 = te.placeholder((m,), "float32", name="I0")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute(
        (m,), lambda i: te.sum(X[i, k] * 2.0, axis=k, where=X[i, k] > 0.25, init=I0[i]), name="R"
    )
    s = te.create_schedule(R.op)

    def ref(x, i0):
        return i0 + np.where(x > 0.25, 2 * x, 0).sum(axis=1)

    check(s, [X, I0, R], ref, rng)


def test_max_with_constant_init_and_split_reduction(rng):
    m, n = 6, 29
    X = te.placeholder((m, n), "int32", name="X")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute((m,), lambda i: te.max(X[i, k], axis=k, init=3), name="R")
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(R.op.reduce_axis[0], factor=8)
    x = rng.integers(-9, 9, (m, n)).astype("int32")
    want = np.maximum(x.max(axis=1), 3)
    got = np.zeros(m, "int32")
    ember.build(s, [X, R], target="llvm")(x, got)
    np.testing.assert_array_equal(got, want)
    run(ember.lower(s, [X, R]), x, got := np.zeros(m, "int32"))
    np.testing.assert_array_equal(got, want)


def test_custom_reducer_with_where_through_cache_write(rng):
    m, n = 4, 21
    X = te.placeholder((m, n), "float32", name="X")
    k = te.reduce_axis((0, n), name="k")
    prod = te.comm_reducer(lambda a, b: a * b, lambda t: E.const(1, t), name="prod")
    R = te.compute((m,), lambda i: prod(X[i, k], axis=k, where=k % 3 == 0, init=2.0), name="R")
    s = te.create_schedule(R.op)
    s.cache_write(R, "local")
    check(s, [X, R], lambda x: 2 * np.prod(x[:, ::3].astype("float64"), axis=1), rng)


def test_reducer_where_must_be_a_condition():
    X = te.placeholder((4,), "float32", name="X")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ArgumentError, match="boolean condition"):
        te.sum(X[k], axis=k, where=X[k])


# -- operator types ----------------------------------------------------------------------------


def test_bit_operators_reject_floats_and_math_rejects_ints():
    f, i = te.var("f", "float32"), te.var("i")
    for build in (lambda: f << 1, lambda: f & 3, lambda: ~f, lambda: te.popcount(f)):
        with pytest.raises(ArgumentError, match="works on integers"):
            build()
    with pytest.raises(ArgumentError, match="needs floating-point"):
        te.exp(i)
    assert te.floor(i) is i and te.round(i) is i and te.abs(E.Var("u", "uint8")).dtype == "uint8"
    assert structural_equal(te.isnan(i), E.const(False)) and te.isfinite(i).value == 1


def test_bool_operators_stay_logical():
    a, b = te.var("a") > 0, te.var("b") > 0
    assert isinstance(a & b, E.BinOp) and (a & b).op is E.BinaryOp.AND
    assert isinstance(a | b, E.BinOp) and isinstance(~a, E.Not)
    assert (a ^ b).op is E.Intrinsic.BITWISE_XOR


def test_if_then_else_with_a_constant_condition_picks_a_side():
    x, y = te.var("x"), te.var("y")
    assert te.if_then_else(True, x, y) is x and te.if_then_else(E.const(False), x, y) is y
    with pytest.raises(ArgumentError, match="boolean condition"):
        te.if_then_else(x, x, y)


# -- init= and where= through the CUDA emulator ------------------------------------------------


def _rows_on_threads(R, k=None, factor=None):
    """Rows on blockIdx.x x threadIdx.y; the reduction serial, or split and its inner part
    on threadIdx.x (a cross-thread reduction)."""
    s = te.create_schedule(R.op)
    io, ii = s[R].split(R.op.axis[0], factor=2)
    s[R].bind(io, "blockIdx.x")
    s[R].bind(ii, "threadIdx.y")
    if factor is not None:
        s[R].bind(s[R].split(k, factor=factor)[1], "threadIdx.x")
    return s


@pytest.mark.parametrize(("m", "n"), [(5, 17), (7, 33)])
def test_init_and_where_in_the_emulator(rng, m, n):
    X = te.placeholder((m, n), "float32", name="X")
    I0 = te.placeholder((m,), "float32", name="I0")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute(
        (m,), lambda i: te.sum(X[i, k] * 2.0, axis=k, where=X[i, k] > 0.25, init=I0[i]), name="R"
    )
    x, i0 = random_array((m, n), "float32", rng), random_array((m,), "float32", rng)
    got = np.full(m, np.nan, "float32")
    ember.build(_rows_on_threads(R), [X, I0, R], target="cuda -arch=sm_80").emulate(x, i0, got)
    assert_close(got, i0 + np.where(x > 0.25, 2.0 * x, 0).sum(axis=1), "float32")


@pytest.mark.parametrize("factor", [8, 32, 48])
def test_where_on_a_cross_thread_reduction(rng, factor):
    m, n = 7, 45
    X = te.placeholder((m, n), "float32", name="X")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute((m,), lambda i: te.max(X[i, k], axis=k, where=k % 3 != 1), name="R")
    x = random_array((m, n), "float32", rng)
    got = np.full(m, np.nan, "float32")
    mod = ember.build(_rows_on_threads(R, k, factor), [X, R], target="cuda -arch=sm_80")
    mod.emulate(x, got)  # race checks on
    assert_close(got, x[:, np.arange(n) % 3 != 1].max(axis=1), "float32")


def test_init_on_a_cross_thread_reduction_is_a_schedule_error():
    """TVM refuses it too (``Cannot perform cross_thread_reduction for reductions with
    init``): every thread would fold the init value in."""
    X = te.placeholder((4, 40), "float32", name="X")
    k = te.reduce_axis((0, 40), name="k")
    R = te.compute((4,), lambda i: te.sum(X[i, k], axis=k, init=1.0), name="R")
    with pytest.raises(ScheduleError, match="explicit init value cannot be bound to threads"):
        ember.build(_rows_on_threads(R, k, 16), [X, R], target="cuda")


# -- mistakes a new TVM user makes -------------------------------------------------------------


def test_python_truth_of_an_expression_is_an_ember_error():
    x = te.var("x")
    with pytest.raises(ember.EmberError, match="no truth value") as info:
        if x < 3:
            pass
    assert isinstance(info.value, (ArgumentError, TypeError, ValueError))


def test_a_reducer_without_an_axis_is_an_argument_error():
    A = te.placeholder((4, 3), "float32", name="A")
    for reducer in (te.sum, te.max, te.min):
        with pytest.raises(ArgumentError, match=r"give the reduction axis"):
            reducer(A[0, 0])
    with pytest.raises(ArgumentError, match=r"sum: give the reduction axis"):
        te.compute((4,), lambda i: te.sum(A[i, 0]))


def test_a_reduce_axis_outside_a_reducer_names_the_fix():
    A = te.placeholder((4, 3), "float32", name="A")
    k = te.reduce_axis((0, 3), name="k")
    B = te.compute((4,), lambda i: A[i, k], name="B")
    with pytest.raises(LoweringError, match=r"'k'.*reduce_axis must be used inside a reducer"):
        ember.lower(te.create_schedule(B.op), [A, B])
