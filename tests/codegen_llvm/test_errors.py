"""Every error the LLVM backend raises: its type, its key phrases, and what it carries."""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_llvm import jit
from ember.codegen_llvm.build import build_llvm
from ember.errors import ArgumentError, CompileError, DeviceError, InternalError, LoweringError
from ember.target import Target
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import decl_buffer
from tests.codegen_llvm.llvm_helpers import (
    build,
    load,
    loop,
    map_func,
    param,
    rand,
    sentinel,
    store,
)


def _no_internal_paths(err: Exception) -> None:
    assert ".py" not in str(err)


def test_unflattened_access_names_the_pass():
    A, out = param("A", (4, 4)), param("out", (4, 4))
    body = loop(4, lambda i: S.BufferStore(out, A[i, i], (i, i)))
    with pytest.raises(InternalError, match=r"'out' in 'f' has 2 indices.*flatten_buffers") as info:
        build(S.PrimFunc("f", (A, out), body))
    _no_internal_paths(info.value)


def test_invalid_ir_carries_ll_source():
    spec = jit.MachineSpec.from_target(Target.parse("llvm"))
    bad = "define i32 @f() {\n  ret i64 0\n}\n"
    with pytest.raises(jit.IRVerifyError, match="generated LLVM IR is invalid") as info:
        jit.parse_and_verify(bad, spec)
    assert isinstance(info.value, InternalError)
    assert info.value.source == bad


def test_symbolic_parameter_shape_that_cannot_be_checked():
    """A parameter extent the runtime cannot recompute from the sizes is refused at build."""
    n = E.Var("n")
    A = decl_buffer((n,), "float32", "A")
    B = decl_buffer((E.call(E.Intrinsic.ABS, n),), "float32", "B")
    body = loop(n, lambda i: store(A, i, E.const(1.0, "float32")))
    with pytest.raises(LoweringError, match=r"cannot be checked at call time"):
        build(S.PrimFunc("sym", (A, B), body))


def test_gpu_thread_binding_on_cpu():
    A = param("A", (32,))
    tx = E.Var("tx")
    body = S.For(
        tx,
        E.const(0),
        E.const(32),
        S.ForKind.THREAD_BINDING,
        store(A, tx, E.const(0.0, "float32")),
        thread_tag="threadIdx.x",
    )
    with pytest.raises(
        LoweringError, match=r"bound to GPU thread axis 'threadIdx.x'.*build for 'cuda'"
    ):
        build(S.PrimFunc("bound", (A,), body))


def test_unbound_variable():
    A = param("A", (4,))
    ghost = E.Var("ghost")
    with pytest.raises(InternalError, match=r"variable 'ghost' is used in 'f' but not bound"):
        build(
            S.PrimFunc("f", (A,), loop(4, lambda i: store(A, i + ghost, E.const(0.0, "float32"))))
        )


def test_unlowered_nodes():
    A = param("A", (4,))
    pl = E.ProducerLoad("float32", object(), (E.const(0),))
    with pytest.raises(InternalError, match="tensor-expression read survived lowering"):
        build(S.PrimFunc("f", (A,), store(A, E.const(0), pl)))


def test_unknown_buffer():
    A, B = param("A", (4,)), param("B", (4,))
    with pytest.raises(
        InternalError, match=r"buffer 'B' is accessed in 'f' but is neither a parameter"
    ):
        build(S.PrimFunc("f", (A,), store(A, E.const(0), load(B, E.const(0)))))


@pytest.mark.parametrize(
    "funcs, phrase",
    [
        ([], "needs at least one PrimFunc"),
        (
            [
                map_func("dup", ["float32"], "float32", lambda a: a, 4),
                map_func("dup", ["float32"], "float32", lambda a: a, 4),
            ],
            "names in one module must differ",
        ),
        ([map_func("not-an-id", ["float32"], "float32", lambda a: a, 4)], "must be a C identifier"),
    ],
)
def test_bad_function_sets(funcs, phrase):
    with pytest.raises(ArgumentError, match=phrase):
        build_llvm(funcs, "llvm")


@pytest.mark.parametrize(
    "target, error, phrase",
    [
        ("cuda", ArgumentError, "compiles for target 'llvm'"),
        ("llvm -opt-level=7", CompileError, "-opt-level must be 0..3"),
        ("llvm -num-threads=0", ArgumentError, "-num-threads must be a positive integer"),
        ("llvm -mtriple=nonsense-foo-bar", CompileError, "cannot target"),
    ],
)
def test_bad_targets(target, error, phrase):
    with pytest.raises(error, match=phrase):
        build_llvm([map_func("f", ["float32"], "float32", lambda a: a, 4)], target)


@pytest.mark.parametrize("target", ["llvm -opt-level=0", "llvm -mcpu=x86-64", "llvm -mattr=+avx2"])
def test_other_targets_still_correct(target, rng):
    mod = build(
        map_func("f", ["float32"] * 2, "float32", lambda a, b: a * b, 37, lanes=8), target=target
    )
    a, b = rand(37, "float32", rng), rand(37, "float32", rng)
    o = sentinel(37, "float32")
    mod(a, b, o)
    np.testing.assert_array_equal(o, a * b)


def test_failed_heap_allocation_raises_device_error(rng):
    sizes, out = param("sizes", (1,), "int64"), param("out", (1,))
    m = E.Var("m", "int64")
    tmp = decl_buffer((m,), "float32", "tmp")
    body = S.LetStmt(
        m,
        load(sizes, E.const(0)),
        S.Allocate(
            tmp,
            S.seq(
                store(tmp, E.const(0, "int64"), E.const(1.0, "float32")),
                store(out, E.const(0), load(tmp, E.const(0, "int64"))),
            ),
        ),
    )
    mod = build(S.PrimFunc("huge", (sizes, out), body))
    o = sentinel(1, "float32")
    mod(np.array([1000], np.int64), o)
    assert o[0] == 1.0
    with pytest.raises(DeviceError, match="huge: could not allocate a temporary buffer"):
        mod(np.array([1 << 60], np.int64), o)
