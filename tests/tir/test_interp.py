"""The reference interpreter against numpy: loops, memory, vectors, errors, speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ember.errors import ArgumentError, InternalError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer, decl_buffer
from ember.tir.interp import compile_func, run
from ember.tir.ir_builder import IRBuilder


def _matmul(m: int, n: int, k: int, flat: bool) -> S.PrimFunc:
    ib = IRBuilder()
    A = ib.param((m, k), "float32", name="A")
    B = ib.param((k, n), "float32", name="B")
    C = ib.param((m, n), "float32", name="C")
    if flat:  # the form flatten_buffers produces: 1-D views sharing the parameters' data
        A, B, C = (
            Buffer(b.name, b.dtype, (E.const(b.shape[0].value * b.shape[1].value),), b.data)
            for b in (A, B, C)
        )
    with ib.for_range(0, m, name="i") as i:
        with ib.for_range(0, n, name="j") as j:
            c_idx = (i * n + j,) if flat else (i, j)
            ib.store(C, c_idx, 0.0)
            with ib.for_range(0, k, name="k") as r:
                a = A[i * k + r] if flat else A[i, r]
                b = B[r * n + j] if flat else B[r, j]
                ib.store(C, c_idx, C[c_idx] + a * b)
    return ib.get_func("matmul")


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("shape", [(13, 7, 11), (1, 5, 3), (16, 16, 16)])
def test_matmul_matches_numpy(rng, flat, shape):
    m, n, k = shape
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.full((m, n), np.nan, dtype="float32")
    run(_matmul(m, n, k, flat), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flat", [False, True])
def test_matmul_64_runs_in_about_a_second(rng, flat):
    func = _matmul(64, 64, 64, flat)
    a, b = (rng.standard_normal((64, 64)).astype("float32") for _ in range(2))
    c = np.empty((64, 64), dtype="float32")
    start = time.perf_counter()
    run(func, a, b, c)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert elapsed < 6.0, f"64^3 matmul took {elapsed:.2f}s in the interpreter"


def test_compiled_closures_are_cached_per_function():
    func = _matmul(2, 2, 2, False)
    assert compile_func(func) is compile_func(func)
    assert compile_func(_matmul(2, 2, 2, False)) is not compile_func(func)


def test_symbolic_shapes_bind_from_arguments(rng):
    n = E.Var("n")
    ib = IRBuilder()
    A = ib.param((n, 3), "float32", name="A")
    B = ib.param((n, 3), "float32", name="B")
    with ib.for_range(0, n, name="i") as i:
        with ib.for_range(0, 3, name="j") as j:
            ib.store(B, (i, j), A[i, j] + E.cast("float32", i))
    func = ib.get_func("add_row")
    for rows in (1, 7):
        a = rng.standard_normal((rows, 3)).astype("float32")
        b = np.empty_like(a)
        run(func, a, b)
        np.testing.assert_allclose(b, a + np.arange(rows, dtype="float32")[:, None])
    with pytest.raises(ArgumentError, match="'B'.*dimension 0"):
        run(func, np.ones((4, 3), "float32"), np.ones((5, 3), "float32"))


def test_non_contiguous_output_is_written_back(rng):
    ib = IRBuilder()
    A = ib.param((4, 3), "float32", name="A")
    B = ib.param((4, 3), "float32", name="B")
    with ib.for_range(0, 4, name="i") as i:
        with ib.for_range(0, 3, name="j") as j:
            ib.store(B, (i, j), A[i, j] * 2.0)
    a = rng.standard_normal((4, 3)).astype("float32")
    big = np.zeros((3, 4), dtype="float32")
    out = big.T[:, :3][:4]  # a transposed, non-contiguous view
    assert not out.flags.c_contiguous
    run(ib.get_func("double"), a, out)
    np.testing.assert_array_equal(big.T[:4, :3], a * 2)


# -- statements --------------------------------------------------------------------------


def test_allocate_scratch_and_unwritten_reads(rng):
    ib = IRBuilder()
    A = ib.param((8,), "float32", name="A")
    B = ib.param((8,), "float32", name="B")
    tmp = ib.allocate((8,), "float32", name="tmp")
    with ib.for_range(0, 8, name="i") as i:
        ib.store(tmp, i, A[i] * A[i])
    with ib.for_range(0, 8, name="i") as i:
        ib.store(B, i, tmp[7 - i] + 1.0)
    a = rng.standard_normal(8).astype("float32")
    b = np.empty(8, dtype="float32")
    run(ib.get_func("scratch"), a, b)
    np.testing.assert_allclose(b, (a * a)[::-1] + 1, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8", "bool"])
def test_allocated_memory_is_poisoned(dtype):
    ib = IRBuilder()
    out = ib.param((4,), dtype, name="out")
    tmp = ib.allocate((4,), dtype, name="tmp")
    with ib.for_range(0, 4, name="i") as i:
        ib.store(out, i, tmp[i])
    o = np.zeros(4, dtype=dtype)
    run(ib.get_func("poison"), o)
    if dtype.startswith("float"):
        assert np.isnan(o).all()
    else:
        assert (o != 0).all()


def test_let_if_else_select_and_assert(rng):
    ib = IRBuilder()
    A = ib.param((10,), "int32", name="A")
    B = ib.param((10,), "int32", name="B")
    with ib.for_range(0, 10, name="i") as i:
        x = ib.let("x", A[i] * 3)
        y = E.Var("y")
        with ib.if_then_else(x > 0):
            ib.store(B, i, E.Let("int32", y, x + 1, y * y))
        with ib.else_():
            ib.store(B, i, E.select(i < 5, x, -x))
    ib.assert_(E.const(True), "never fails")
    a = rng.integers(-20, 20, size=10).astype("int32")
    b = np.empty_like(a)
    run(ib.get_func("branches"), a, b)
    x = a * 3
    want = np.where(x > 0, (x + 1) ** 2, np.where(np.arange(10) < 5, x, -x))
    np.testing.assert_array_equal(b, want)


def test_assert_raises_argument_error():
    ib = IRBuilder()
    A = ib.param((4,), "int32", name="A")
    ib.assert_(A[0] > 0, "A[0] must be positive")
    ib.store(A, 1, 5)
    func = ib.get_func("guarded")
    a = np.array([1, 0, 0, 0], dtype="int32")
    run(func, a)
    assert a[1] == 5
    with pytest.raises(ArgumentError, match="A\\[0\\] must be positive"):
        run(func, np.zeros(4, dtype="int32"))


def test_every_loop_kind_attr_barrier_and_evaluate_run_serially():
    ib = IRBuilder()
    A = ib.param((2, 3, 4, 5), "int32", name="A")
    tx = E.Var("tx")
    with ib.for_range(0, 2, name="b", kind="thread_binding", thread_tag="blockIdx.x") as b:
        with ib.attr(tx, "thread_extent", 3):
            with ib.for_range(0, 4, name="u", kind="unroll") as u:
                with ib.for_range(0, 5, name="v", kind="parallel") as v:
                    ib.store(A, (b, tx, u, v), ((b * 3 + tx) * 4 + u) * 5 + v)
            ib.barrier()
            ib.evaluate(E.call(E.Intrinsic.LIKELY, tx < 3))
    a = np.zeros((2, 3, 4, 5), dtype="int32")
    run(ib.get_func("kinds"), a)
    np.testing.assert_array_equal(a.reshape(-1), np.arange(120))


def test_and_short_circuits_but_select_evaluates_both_branches():
    ib = IRBuilder()
    A = ib.param((4,), "float32", name="A")
    B = ib.param((5,), "float32", name="B")
    with ib.for_range(0, 5, name="i") as i:
        ib.store(B, i, E.select((i < 4) & (A[E.min_(i, 3)] > 0.0), 1.0, 0.0))
    with ib.for_range(0, 5, name="i") as i:
        with ib.if_then_else((i < 4) & (A[i] > 0.0)):
            ib.store(B, i, 2.0)
    a = np.array([1, -1, 1, -1], dtype="float32")
    b = np.zeros(5, dtype="float32")
    run(ib.get_func("guards"), a, b)
    np.testing.assert_array_equal(b, [2, 0, 2, 0, 0])

    ib = IRBuilder()
    A = ib.param((4,), "float32", name="A")
    B = ib.param((5,), "float32", name="B")
    with ib.for_range(0, 5, name="i") as i:
        ib.store(B, i, E.select(i < 4, A[i], 0.0))
    with pytest.raises(InternalError, match="out-of-bounds load of buffer 'A'.*\\[4\\]"):
        run(ib.get_func("speculative"), a, b)


# -- errors --------------------------------------------------------------------------------


def _copy_func(shape: tuple[int, ...], dtype: str = "float32") -> S.PrimFunc:
    ib = IRBuilder()
    A = ib.param(shape, dtype, name="A")
    B = ib.param(shape, dtype, name="B")
    with ib.for_range(0, shape[0], name="i") as i:
        ib.store(B, i, A[i])
    return ib.get_func("copy")


def test_argument_count_type_dtype_and_shape_are_checked():
    func = _copy_func((4,))
    a = np.ones(4, dtype="float32")
    with pytest.raises(ArgumentError, match="'copy' takes 2 arguments \\(A, B\\), got 1"):
        run(func, a)
    with pytest.raises(ArgumentError, match="'B' of 'copy' must be a numpy array, got list"):
        run(func, a, [0.0] * 4)
    with pytest.raises(ArgumentError, match="'B' of 'copy' must have dtype float32, got float64"):
        run(func, a, np.ones(4))
    with pytest.raises(ArgumentError, match="'A' of 'copy' must have shape \\(4\\), got \\(5,\\)"):
        run(func, np.ones(5, dtype="float32"), a)
    with pytest.raises(ArgumentError, match="shape"):
        run(func, np.ones((4, 1), dtype="float32"), a)
    with pytest.raises(ArgumentError, match="uint16 bits"):
        run(_copy_func((4,), "bfloat16"), np.ones(4, dtype="float32"), a)
    with pytest.raises(ArgumentError, match="expected a PrimFunc"):
        run(func.body, a, a)


def _oob_func(load: E.PrimExpr | None, shape: tuple[int, ...], index: tuple) -> S.PrimFunc:
    ib = IRBuilder()
    A = ib.param(shape, "float32", name="A")
    B = ib.param((1,), "float32", name="B")
    if load is None:
        ib.store(A, index, 1.0)
    else:
        ib.store(B, 0, A[index])
    return ib.get_func("oob")


@pytest.mark.parametrize(
    "shape,index,what",
    [
        ((4,), (-1,), "load"),
        ((4,), (4,), "store"),
        ((4, 4), (1, 4), "load"),  # flat offset 8 is in range: still an error
        ((4, 4), (-1, 2), "store"),
        ((4, 4), (16,), "load"),  # one flat index into a 2-D buffer
        ((2, 3, 4), (0, 3, 0), "load"),
    ],
)
def test_out_of_bounds_access_raises_naming_buffer_and_index(shape, index, what):
    func = _oob_func(None if what == "store" else E.const(0), shape, index)
    a = np.ones(shape, dtype="float32")
    shown = ", ".join(str(i) for i in index)
    with pytest.raises(InternalError, match=f"out-of-bounds {what} of buffer 'A'.*\\[{shown}\\]"):
        run(func, a, np.ones(1, dtype="float32"))


def test_out_of_bounds_vector_access_raises():
    ib = IRBuilder()
    A = ib.param((8,), "float32", name="A")
    ib.store(
        A, E.Ramp("int32x4", E.const(6), E.const(1), 4), E.Broadcast("float32x4", E.const(1.0), 4)
    )
    with pytest.raises(
        InternalError, match="out-of-bounds store of buffer 'A'.*\\[\\[6, 7, 8, 9\\]\\]"
    ):
        run(ib.get_func("vec_oob"), np.zeros(8, dtype="float32"))


def test_nodes_that_must_not_reach_the_interpreter():
    ib = IRBuilder()
    A = ib.param((4,), "float32", name="A")
    ib.store(A, 0, E.ProducerLoad("float32", object(), (E.const(0),)))
    with pytest.raises(InternalError, match="ProducerLoad reached the reference interpreter"):
        run(ib.get_func("te_leftover"), np.zeros(4, dtype="float32"))
    x, y = E.Var("x", "float32"), E.Var("y", "float32")
    red = E.Reduce("float32", E.CommReducer("sum", x, y, x + y, E.const(0.0)), A[0], ())
    ib = IRBuilder()
    A = ib.param((4,), "float32", name="A")
    ib.store(A, 0, red)
    with pytest.raises(InternalError, match="Reduce reached"):
        run(ib.get_func("te_reduce"), np.zeros(4, dtype="float32"))


def test_unbound_variable_and_unknown_buffer_are_internal_errors():
    ib = IRBuilder()
    A = ib.param((4,), "int32", name="A")
    ib.store(A, 0, E.Var("ghost"))
    with pytest.raises(InternalError, match="variable 'ghost' is used outside"):
        run(ib.get_func("ghost"), np.zeros(4, dtype="int32"))
    stray = decl_buffer((4,), "int32", name="stray")
    ib = IRBuilder()
    A = ib.param((4,), "int32", name="A")
    ib.store(A, 0, stray[0])
    with pytest.raises(InternalError, match="buffer 'stray' is neither a parameter nor allocated"):
        run(ib.get_func("stray"), np.zeros(4, dtype="int32"))


def test_integer_division_by_zero_is_an_internal_error():
    ib = IRBuilder()
    A = ib.param((2,), "int32", name="A")
    ib.store(A, 0, A[0] // A[1])
    with pytest.raises(InternalError, match="integer division by zero in A\\[0\\] // A\\[1\\]"):
        run(ib.get_func("div0"), np.array([3, 0], dtype="int32"))


def test_vector_access_needs_matching_lanes():
    ib = IRBuilder()
    A = ib.param((8,), "float32", name="A")
    ib.store(A, E.Ramp("int32x4", E.const(0), E.const(1), 4), E.const(1.0))
    with pytest.raises(InternalError, match="store of float32 in buffer 'A' with an index of 4"):
        run(ib.get_func("lanes"), np.zeros(8, dtype="float32"))


def test_strided_scratch_buffer(rng):
    """A padded tile (what storage_align makes): rows 5 elements apart, 4 used."""
    ib = IRBuilder()
    A = ib.param((3, 4), "float32", name="A")
    B = ib.param((3, 4), "float32", name="B")
    tile = decl_buffer((3, 4), "float32", name="tile", scope="local", strides=(5, 1))
    body = IRBuilder()
    with body.for_range(0, 3, name="i") as i:
        with body.for_range(0, 4, name="j") as j:
            body.store(tile, (i, j), A[i, j] + 1.0)
        with body.for_range(0, 4, name="j") as j:
            body.store(B, (i, j), tile[i, 3 - j])
    ib.emit(S.Allocate(tile, body.get()))
    a = rng.standard_normal((3, 4)).astype("float32")
    b = np.empty_like(a)
    run(ib.get_func("padded"), a, b)
    np.testing.assert_allclose(b, (a + 1)[:, ::-1])


def test_read_only_inputs_are_accepted(rng):
    func = _copy_func((4,))
    a = rng.standard_normal(4).astype("float32")
    a.flags.writeable = False
    b = np.empty(4, dtype="float32")
    run(func, a, b)
    np.testing.assert_array_equal(a, b)


def test_storage_smaller_than_its_buffer_is_an_internal_error():
    ib = IRBuilder()
    A = ib.param((2, 4), "float32", name="A")
    alias = Buffer("A_alias", "float32", (E.const(100),), A.data)  # claims more than A has
    ib.store(alias, 50, 1.0)
    with pytest.raises(InternalError, match="interpreting 'alias' failed: IndexError"):
        run(ib.get_func("alias"), np.zeros((2, 4), dtype="float32"))
