"""``te.extern`` with bodies built from ``call_packed`` (registered Python functions) and
``call_extern`` (C functions), the global function registry, and their errors; every
result against numpy on random data, on the reference interpreter and LLVM."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te, tir
from ember.errors import ArgumentError, LoweringError, PackedFuncError
from ember.tir.interp import run
from tests.numerics import assert_close


def _nan(shape, dtype="float32"):
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 77, dtype)


def _both(s, args, inputs, want, scalars=()):
    """Run on the interpreter and LLVM; outputs start as NaN."""
    for ex in ("interp", "llvm"):
        out = _nan(want.shape, want.dtype)
        if ex == "interp":
            run(ember.lower(s, args), *inputs, out, *scalars)
        else:
            ember.build(s, args, target="llvm")(*inputs, out, *scalars)
        assert_close(out, want, str(want.dtype), what=ex)


@pytest.fixture
def registered():
    """Register functions for one test and remove them afterwards."""
    names = []

    def reg(name, fn):
        ember.register_func(name, fn, override=True)
        names.append(name)
        return fn

    yield reg
    for n in set(names):
        ember.remove_global_func(n)


def test_registry_forms_and_errors(registered):
    @ember.register_func("test.reg.deco")
    def f(x):
        return x

    assert ember.get_global_func("test.reg.deco") is f
    with pytest.raises(ArgumentError, match="already registered"):
        ember.register_func("test.reg.deco", lambda x: x)
    ember.register_func("test.reg.deco", len, override=True)
    assert ember.get_global_func("test.reg.deco") is len
    ember.remove_global_func("test.reg.deco")

    @ember.register_func
    def test_reg_plain(x):
        return x

    assert "test_reg_plain" in ember.list_global_func_names()
    ember.remove_global_func("test_reg_plain")
    assert ember.get_global_func("test.reg.none", allow_missing=True) is None
    with pytest.raises(ArgumentError, match="test.reg.none"):
        ember.get_global_func("test.reg.none")


@pytest.mark.parametrize("n", [1, 7, 130])
def test_packed_call_writes_in_place_and_a_compute_reads_it(rng, registered, n):
    seen = []

    def double(x, y):
        seen.append(type(y))
        y[:] = np.asarray(x) * 2  # in place, numpy-style

    registered("test.double", double)
    A = te.placeholder((n,), name="A")
    B = te.extern((n,), [A], lambda ins, outs: tir.call_packed("test.double", ins[0], outs[0]))
    C = te.compute((n,), lambda i: B[i] + 1, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    a = rng.uniform(-1, 1, n).astype("float32")
    _both(s, [A, C], [a], a * 2 + 1)
    assert seen and all(t is ember.nd.CPUArray for t in seen)


def test_packed_call_scalars_two_inputs_2d_symbolic(rng, registered):
    def axpby(x, y, out, alpha, k):
        assert isinstance(float(alpha), float) and int(k) == 3
        out.copyfrom(alpha * x.numpy() + k * np.asarray(y))

    registered("test.axpby", axpby)
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    Y = te.placeholder((m, n), name="Y")
    Z = te.extern(
        (m, n),
        [X, Y],
        lambda ins, outs: tir.call_packed("test.axpby", ins[0], ins[1], outs[0], 0.5, 3),
        name="Z",
    )
    s = te.create_schedule(Z.op)
    f = ember.build(s, [X, Y, Z], target="llvm")
    func = ember.lower(s, [X, Y, Z])
    for shape in [(1, 1), (3, 17), (31, 5)]:
        x = rng.uniform(-1, 1, shape).astype("float32")
        y = rng.uniform(-1, 1, shape).astype("float32")
        for call in (f, lambda *a: run(func, *a)):
            z = _nan(shape)
            call(x, y, z)
            assert_close(z, 0.5 * x + 3 * y, "float32")


def test_extern_reads_an_intermediate_computed_whole(rng, registered):
    """The extern's input is a compute: it is computed over its whole shape first."""
    registered("test.rowsum", lambda x, y: np.sum(np.asarray(x), axis=1, out=np.asarray(y)))
    m, n = 9, 13
    A = te.placeholder((m, n), "float64", name="A")
    sq = te.compute((m, n), lambda i, j: A[i, j] * A[i, j], name="sq")
    R = te.extern((m,), [sq], lambda ins, outs: tir.call_packed("test.rowsum", ins[0], outs[0]))
    out = te.compute((m,), lambda i: R[i] - 1, name="out")
    s = te.create_schedule(out.op)
    a = rng.uniform(-1, 1, (m, n))
    _both(s, [A, out], [a], (a * a).sum(axis=1) - 1)


def test_int_extern_with_explicit_buffers_and_dtype(rng, registered):
    registered("test.cumsum", lambda x, y: np.cumsum(np.asarray(x), out=np.asarray(y)))
    n = 23
    A = te.placeholder((n,), "int32", name="A")
    A64 = te.compute((n,), lambda i: A[i].astype("int64"), name="A64")
    ib = tir.decl_buffer((n,), "int64", name="in_buf")
    ob = tir.decl_buffer((n,), "int64", name="out_buf")
    B = te.extern(
        (n,),
        [A64],
        lambda ins, outs: tir.call_packed("test.cumsum", ins[0], outs[0]),
        dtype="int64",
        in_buffers=[ib],
        out_buffers=[ob],
        name="B",
    )
    s = te.create_schedule(B.op)
    a = rng.integers(-1000, 1000, n).astype("int32")
    _both(s, [A, B], [a], np.cumsum(a.astype(np.int64)))


def test_call_extern_c_function_in_an_extern_body(rng):
    """A C library function by name on buffer pointers: memcpy, then a compute on top."""
    n = 37
    A = te.placeholder((n,), name="A")
    B = te.extern(
        (n,),
        [A],
        lambda ins, outs: tir.call_extern("handle", "memcpy", outs[0].data, ins[0].data, n * 4),
        name="B",
    )
    C = te.compute((n,), lambda i: B[i] * 3, name="C")
    s = te.create_schedule(C.op)
    a = rng.uniform(-1, 1, n).astype("float32")
    out = _nan((n,))
    ember.build(s, [A, C], target="llvm")(a, out)
    assert_close(out, a * 3, "float32")


def test_function_registered_after_build(rng):
    n = 5
    A = te.placeholder((n,), name="A")
    B = te.extern((n,), [A], lambda ins, outs: tir.call_packed("test.late", ins[0], outs[0]))
    f = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    a, b = rng.uniform(-1, 1, n).astype("float32"), _nan((n,))
    with pytest.raises(ArgumentError, match="no global function 'test.late'"):
        f(a, b)
    ember.register_func("test.late", lambda x, y: np.negative(np.asarray(x), out=np.asarray(y)))
    try:
        f(a, b)
        assert_close(b, -a, "float32")
    finally:
        ember.remove_global_func("test.late")


# -- errors ---------------------------------------------------------------------------------


def _extern_calling(name, *extra):
    A = te.placeholder((4,), name="A")
    B = te.extern((4,), [A], lambda ins, outs: tir.call_packed(name, ins[0], outs[0], *extra))
    return te.create_schedule(B.op), [A, B]


@pytest.mark.parametrize("executor", ["interp", "llvm"])
def test_error_exception_in_callback_is_chained(registered, executor):
    def boom(x, y):
        raise ValueError("bad input")

    registered("test.boom", boom)
    s, args = _extern_calling("test.boom")
    a, b = np.ones(4, "float32"), _nan((4,))
    with pytest.raises(PackedFuncError, match="'test.boom' raised ValueError: bad input") as info:
        if executor == "llvm":
            ember.build(s, args, target="llvm")(a, b)
        else:
            run(ember.lower(s, args), a, b)
    assert isinstance(info.value.__cause__, ValueError)
    # the module stays usable after a failed call
    registered("test.boom", lambda x, y: np.copyto(np.asarray(y), np.asarray(x)))
    if executor == "llvm":
        ember.build(s, args, target="llvm")(a, b)
        assert_close(b, a, "float32")


@pytest.mark.parametrize("executor", ["interp", "llvm"])
def test_error_missing_function_and_wrong_arity(registered, executor):
    a, b = np.ones(4, "float32"), _nan((4,))

    def call(s, args):
        if executor == "llvm":
            ember.build(s, args, target="llvm")(a, b)
        else:
            run(ember.lower(s, args), a, b)

    with pytest.raises(ArgumentError, match="no global function 'test.nothere'"):
        call(*_extern_calling("test.nothere"))
    registered("test.two", lambda x, y: None)
    with pytest.raises(ArgumentError, match="call_packed\\('test.two'\\) passes 3 arguments"):
        call(*_extern_calling("test.two", 7))


def test_error_extern_on_cuda_is_refused():
    s, args = _extern_calling("test.any")
    with pytest.raises(LoweringError, match="call_packed\\('test.any'\\).*host"):
        ember.build(s, args, target="cuda -arch=sm_80")


def test_error_bad_extern_arguments():
    A = te.placeholder((4,), name="A")
    with pytest.raises(ArgumentError, match="2 dtypes for 3 output shapes"):
        te.extern([(4,), (4,), (2,)], [A], lambda ins, outs: None, dtype=["int8", "int8"])
    with pytest.raises(ArgumentError, match="statement or an expression"):
        te.extern((4,), [A], lambda ins, outs: None)
    with pytest.raises(ArgumentError, match="give dtype"):
        te.extern((4,), [], lambda ins, outs: tir.call_packed("x", outs[0]))
    with pytest.raises(ArgumentError, match="in_buffer"):
        te.extern(
            (4,),
            [A],
            lambda ins, outs: tir.call_packed("x", ins[0]),
            in_buffers=[tir.decl_buffer((4,), "int32")],
        )


def test_error_extern_input_inlined():
    A = te.placeholder((4,), name="A")
    P = te.compute((4,), lambda i: A[i] + 1, name="P")
    B = te.extern((4,), [P], lambda ins, outs: tir.call_packed("x", ins[0], outs[0]))
    s = te.create_schedule(B.op)
    s[P].compute_inline()
    with pytest.raises(ember.ScheduleError, match="extern stage"):
        ember.lower(s, [A, B])


def test_error_exporting_a_module_that_calls_back(tmp_path):
    """The trampoline lives in this process's JIT: an exported library could not call it."""
    A = te.placeholder((7,), name="A")
    B = te.extern((7,), [A], lambda ins, outs: tir.call_packed("test.ext.never", ins[0], outs[0]))
    mod = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    with pytest.raises(ArgumentError, match="calls back into Python"):
        mod.export_library(tmp_path / "ext.so")
    assert not (tmp_path / "ext.so").exists()
