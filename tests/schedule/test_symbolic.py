"""Symbolic shapes (``te.var`` / ``te.size_var``) end to end, against numpy on random data.

Each symbolic program is built once and called with several concrete sizes
(odd, non-divisible, size 1), on ``llvm`` and through the CUDA emulator; size
arguments are given explicitly (``[A, B, n]``) or bound from the arrays
(``[A, B]``), as TVM binds them from buffers. Disagreeing sizes are
``ArgumentError``s naming both arguments and the dimension.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ArgumentError, LoweringError
from ember.tir import interp
from tests.nightly import examples
from tests.numerics import assert_close, random_array

CUDA = "cuda -arch=sm_80"


def _scale(vectorize: bool = True):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=8)
    if vectorize:
        s[B].vectorize(xi)  # a constant split of a symbolic extent: vector body + tail
    return n, A, B, s


@pytest.mark.parametrize("explicit", [True, False])
def test_elementwise_llvm_several_sizes(rng, explicit):
    n, A, B, s = _scale()
    args = [A, B, n] if explicit else [A, B]
    mod = ember.build(s, args)
    for size in (1, 3, 8, 17, 100):
        a = random_array((size,), "float32", rng)
        b = np.full(size, np.nan, dtype="float32")
        mod(a, b, size) if explicit else mod(a, b)
        assert_close(b, a * 2 + 1, "float32", f"n={size}")


def test_elementwise_matches_interpreter_with_scalar_argument(rng):
    n, A, B, s = _scale(vectorize=False)
    func = ember.lower(s, [A, B, n])
    assert "n: int32" in repr(func)
    a = random_array((13,), "float32", rng)
    b = np.zeros(13, dtype="float32")
    interp.run(func, a, b, 13)
    assert_close(b, a * 2 + 1, "float32")


def _row_sum(factor=None):
    n = te.size_var("n")
    m = te.size_var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].split(k, factor=4)
    if factor is not None:
        s[B].split(B.op.axis[0], factor=factor)
    return n, m, A, B, s


def test_symbolic_reduction_with_symbolic_split_factor(rng):
    f = te.var("f")
    n, m, A, B, s = _row_sum(factor=f)
    mod = ember.build(s, [A, B, f])
    for rows, cols, factor in [(1, 1, 1), (7, 5, 3), (16, 9, 16), (5, 13, 8), (9, 4, 20)]:
        a = random_array((rows, cols), "float32", rng)
        b = np.full(rows, np.nan, dtype="float32")
        mod(a, b, factor)
        assert_close(b, (a * a).sum(axis=1), "float32", f"{rows}x{cols}/{factor}")
    with pytest.raises(ArgumentError, match=r"argument 'f' must be at least 1"):
        mod(a, b, 0)


def test_size_mismatch_names_both_arguments_and_dimension(rng):
    n, A, B, s = _scale()
    mod = ember.build(s, [A, B])
    a = random_array((5,), "float32", rng)
    with pytest.raises(
        ArgumentError,
        match=r"argument .B. has 6 elements in dimension 0.*of argument .A. gives n = 5",
    ):
        mod(a, np.zeros(6, dtype="float32"))
    mod_n = ember.build(s, [A, B, n])
    with pytest.raises(ArgumentError, match=r"argument 'A' has 5 .*argument 'n' gives n = 4"):
        mod_n(a, np.zeros(5, dtype="float32"), 4)
    with pytest.raises(ArgumentError, match=r"argument 'n' is a int32 scalar"):
        mod_n(a, np.zeros(5, dtype="float32"), 5.0)


def test_shape_expression_is_checked(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n - 2,), lambda i: A[i] + A[i + 1] + A[i + 2], name="B")
    mod = ember.build(te.create_schedule(B.op), [A, B])
    for size in (3, 4, 11):
        a = random_array((size,), "float32", rng)
        b = np.zeros(size - 2, dtype="float32")
        mod(a, b)
        assert_close(b, a[:-2] + a[1:-1] + a[2:], "float32")
    with pytest.raises(ArgumentError, match=r"shape asks for n - 2 = 9"):
        mod(random_array((11,), "float32", rng), np.zeros(8, dtype="float32"))


def test_missing_split_factor_argument_is_a_lowering_error():
    f = te.var("f")
    _, _, A, B, s = _row_sum(factor=f)
    with pytest.raises(LoweringError, match=r"'f'.*no argument defines"):
        ember.lower(s, [A, B])


def test_symbolic_intermediate_is_allocated_at_run_time(rng):
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.compute((n, 3), lambda i, j: A[i, j] * 3.0, name="B")
    C = te.compute((n,), lambda i: B[i, 0] + B[i, 1] - B[i, 2], name="C")
    mod = ember.build(te.create_schedule(C.op), [A, C])
    for rows in (1, 6, 31):
        a = random_array((rows, 3), "float32", rng)
        c = np.zeros(rows, dtype="float32")
        mod(a, c)
        assert_close(c, 3 * (a[:, 0] + a[:, 1] - a[:, 2]), "float32")


def test_export_and_load_keep_symbolic_shapes(tmp_path, rng):
    n, A, B, s = _scale()
    path = tmp_path / "scale.so"
    ember.build(s, [A, B]).export_library(path)
    script = textwrap.dedent(f"""
        import numpy as np
        import ember.runtime as rt
        from ember.errors import ArgumentError
        mod = rt.load_module({str(path)!r})
        for size in (1, 9, 33):
            a = np.random.default_rng(size).uniform(-1, 1, size).astype(np.float32)
            b = np.zeros(size, np.float32)
            mod(a, b)
            assert np.allclose(b, a * 2 + 1), size
        try:
            mod(np.zeros(3, np.float32), np.zeros(4, np.float32))
        except ArgumentError as e:
            assert "dimension 0" in str(e), e
        else:
            raise SystemExit("no error")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_size_var_is_known_non_negative():
    from ember.tir.arith import Analyzer

    n, v = te.size_var("n"), te.var("v")
    ana = Analyzer()
    assert ana.const_int_bound(n)[0] == 0
    assert ana.can_prove(n + 1 > 0)
    assert not ana.can_prove(v + 1 > 0)


# -- CUDA: sizes as kernel parameters, grid from the sizes ------------------------------------
def _gpu_row_sum():
    n, m, A, B, s = _row_sum()
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for T in (B, C):
        xo, xi = s[T].split(T.op.axis[0], factor=32)
        s[T].bind(xo, te.thread_axis("blockIdx.x"))
        s[T].bind(xi, te.thread_axis("threadIdx.x"))
    return n, m, A, C, s


def test_cuda_emulator_symbolic_reduction_with_workspace(rng):
    n, m, A, C, s = _gpu_row_sum()
    mod = ember.build(s, [A, C], target=CUDA)
    for rows, cols in [(1, 1), (33, 7), (64, 3), (5, 40)]:
        a = random_array((rows, cols), "float32", rng)
        c = np.full(rows, np.nan, dtype="float32")
        mod.emulate(a, c)
        assert_close(c, (a * a).sum(axis=1) + 1, "float32", f"{rows}x{cols}")
    with pytest.raises(ArgumentError, match=r"argument 'C' has 4 elements in dimension 0"):
        mod.emulate(random_array((3, 2), "float32", rng), np.zeros(4, dtype="float32"))


def test_cuda_emulator_symbolic_split_factor_argument(rng):
    n, A, B, _ = _scale(vectorize=False)
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    mod = ember.build(s, [A, B, n], target=CUDA)
    for size in (1, 63, 65, 200):
        a = random_array((size,), "float32", rng)
        b = np.full(size, np.nan, dtype="float32")
        mod.emulate(a, b, size)
        assert_close(b, a * 2 + 1, "float32", f"n={size}")


@pytest.mark.nvrtc
def test_cuda_kernel_takes_sizes_as_parameters():
    pytest.importorskip("cuda.bindings.nvrtc")
    n, m, A, C, s = _gpu_row_sum()
    mod = ember.build(s, [A, C], target=CUDA)
    src = mod.get_source()
    assert "int n" in src and "int m" in src
    assert mod.compile().ptx


# -- a property over random sizes --------------------------------------------------------------
_PROGRAM: dict[str, object] = {}


def _property_modules():
    if not _PROGRAM:
        n = te.size_var("n")
        m = te.size_var("m")
        A = te.placeholder((n, m), name="A")
        k = te.reduce_axis((0, m), name="k")
        B = te.compute((n, m), lambda i, j: A[i, j] * 0.5 - 1.0, name="B")
        C = te.compute((n,), lambda i: te.max(B[i, k], axis=k), name="C")
        s = te.create_schedule(C.op)
        _, ki = s[C].split(k, factor=3)
        io, ii = s[C].split(C.op.axis[0], factor=4)
        s[B].compute_at(s[C], io)
        _PROGRAM["llvm"] = ember.build(s, [A, C])
    return _PROGRAM["llvm"]


@settings(max_examples=examples(25), deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_property_symbolic_elementwise_then_reduction(rows, cols, seed):
    mod = _property_modules()
    rng = np.random.default_rng(seed)
    a = random_array((rows, cols), "float32", rng)
    c = np.full(rows, np.nan, dtype="float32")
    mod(a, c)
    assert_close(c, (a * 0.5 - 1.0).max(axis=1), "float32", f"{rows}x{cols}")
