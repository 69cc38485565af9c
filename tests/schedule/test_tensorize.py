"""``te.decl_tensor_intrin`` and ``s[C].tensorize``: TVM's tensorize tests, translated.

The intrinsics here are written with the IR builder (loops over the bound buffers),
so the tensorized program runs on LLVM and is compared with numpy on random data;
``call_extern`` intrinsics are checked in the lowered IR (their C functions do not
exist). Mismatches between a stage and an intrinsic are ScheduleErrors that print both.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ArgumentError, ScheduleError
from ember.tir import expr as E
from ember.tir.buffer import decl_buffer
from ember.tir.functor import post_order_visit
from ember.tir.ir_builder import IRBuilder
from ember.tir.te.tensor_intrin import decl_tensor_intrin
from tests.nightly import examples


def gemv_intrin(m: int, l: int, parts: str = "reset", strided: bool = True):  # noqa: E741
    """``c[i] = sum_k a[k] * b[i, k]``; parts: 'body' only, 'reset' (body, reset, update) or
    'noreset' (body, None, update)."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    binds = {}
    if strided:
        s1 = te.var("s1")
        binds[b] = decl_buffer(
            b.shape, "float32", name="B", strides=(s1, 1), elem_offset=te.var("o")
        )

    def fcompute(ins, outs):  # noqa: ANN001, ANN202
        aa, bb = ins
        cc = outs[0]

        def loop(accumulate: bool):  # noqa: ANN202
            ib = IRBuilder()
            with ib.for_range(0, m, name="i") as i:
                if not accumulate:
                    ib.store(cc, (i,), 0.0)
                with ib.for_range(0, l, name="j") as j:
                    ib.store(cc, (i,), cc[i] + aa[j] * bb[i, j])
            return ib.get()

        def reset():  # noqa: ANN202
            ib = IRBuilder()
            with ib.for_range(0, m, name="i") as i:
                ib.store(cc, (i,), 0.0)
            return ib.get()

        if parts == "body":
            return loop(False)
        return loop(False), reset() if parts == "reset" else None, loop(True)

    return decl_tensor_intrin(c.op, fcompute, name="gemv", binds=binds)


def dense_program(M: int, N: int, L: int):  # noqa: ANN201
    A = te.placeholder((M, L), name="A")
    B = te.placeholder((N, L), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C


def schedule_gemv(C, factor: int, kf: int, intrin):  # noqa: ANN001, ANN201
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    jo, ji = s[C].split(j, factor=factor)
    ko, ki = s[C].split(k, factor=kf)
    s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, intrin)
    return s


def run_dense(s, A, B, C, seed: int = 0) -> None:  # noqa: ANN001
    M, L = (int(d.value) for d in A.shape)
    N = int(C.shape[1].value)
    f = ember.build(s, [A, B, C], "llvm")
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, L)).astype("float32")
    b = rng.standard_normal((N, L)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("parts", ["reset", "noreset"])
@pytest.mark.parametrize("kf", [16, 64])
def test_gemv_reduce_split_outside(parts: str, kf: int) -> None:
    """kf=16: the reduce loop ko is outside the region (reset/update, or body on the first
    ko); kf=64: the whole reduction is inside (the body)."""
    A, B, C = dense_program(7, 48, 64)
    run_dense(schedule_gemv(C, 16, kf, gemv_intrin(16, kf, parts)), A, B, C)


def test_gemv_body_only_whole_reduction() -> None:
    A, B, C = dense_program(5, 32, 24)
    run_dense(schedule_gemv(C, 16, 24, gemv_intrin(16, 24, "body")), A, B, C)


def test_tensorize_at_compute_at_local_tile() -> None:
    """The tensorized stage is a local cache computed at the output's loop: buffers are
    bound to the tile (offsets relative to the region), the output copies it out."""
    A, B, C = dense_program(6, 64, 32)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=32)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    cjo, cji = s[CL].split(cj, factor=16)
    ko, ki = s[CL].split(k, factor=8)
    s[CL].reorder(ci, ko, cjo, cji, ki)
    s[CL].tensorize(cji, gemv_intrin(16, 8, "reset"))
    run_dense(s, A, B, C, seed=3)


def vadd_intrin(n: int):  # noqa: ANN201
    x = te.placeholder((n,), name="x")
    y = te.placeholder((n,), name="y")
    z = te.compute((n,), lambda i: x[i] + y[i], name="z")

    def fcompute(ins, outs):  # noqa: ANN001, ANN202
        ib = IRBuilder()
        with ib.for_range(0, n, name="i") as i:
            ib.store(outs[0], (i,), ins[0][i] + ins[1][i])
        return ib.get()

    return decl_tensor_intrin(z.op, fcompute, name="vadd")


def test_elementwise_intrinsic_on_2d() -> None:
    M, N = 5, 24
    X = te.placeholder((M, N), name="X")
    Y = te.placeholder((M, N), name="Y")
    Z = te.compute((M, N), lambda i, j: X[i, j] + Y[i, j], name="Z")
    s = te.create_schedule(Z.op)
    jo, ji = s[Z].split(Z.op.axis[1], factor=8)
    s[Z].tensorize(ji, vadd_intrin(8))
    f = ember.build(s, [X, Y, Z], "llvm")
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, M, N)).astype("float32")
    z = np.zeros((M, N), "float32")
    f(x, y, z)
    np.testing.assert_allclose(z, x + y, rtol=1e-6)


def test_call_extern_gets_pointer_and_offset() -> None:
    """TVM's gemv test with ``call_extern``: the call receives the stage's buffers'
    pointers and the offsets of the tensorized region."""
    l_, m_ = 16, 16
    a = te.placeholder((l_,), name="a")
    b = te.placeholder((m_, l_), name="b")
    k = te.reduce_axis((0, l_), name="k")
    c = te.compute((m_,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    offs = {t: te.var(f"{t.name}_off") for t in (a, b, c)}
    binds = {
        a: decl_buffer(a.shape, "float32", name="a", elem_offset=offs[a]),
        b: decl_buffer(b.shape, "float32", name="b", strides=(te.var("s"), 1), elem_offset=offs[b]),
        c: decl_buffer(c.shape, "float32", name="c", elem_offset=offs[c]),
    }

    def fcompute(ins, outs):  # noqa: ANN001, ANN202
        args = []
        for buf in (*ins, *outs):
            args += [buf.data, buf.elem_offset]
        return te.call_extern("int32", "gemv_update", *args, ins[1].strides[0])

    intrin = decl_tensor_intrin(c.op, fcompute, name="gemv_extern", binds=binds)
    A, B, C = dense_program(4, 32, 16)
    s = schedule_gemv(C, 16, 16, intrin)
    func = ember.lower(s, [A, B, C])
    calls: list[E.Call] = []
    post_order_visit(func.body, lambda n: calls.append(n) if isinstance(n, E.Call) else None)
    (call,) = [c for c in calls if c.op is E.Intrinsic.CALL_EXTERN]
    data = [p.data for p in func.params]
    assert [call.args[1], call.args[3], call.args[5]] == data
    assert E.const_value(call.args[-1]) == 16  # B's row stride
    # the offsets are i*16 (A), jo*16*16 (B), i*32 + jo*16 (C): check them at i=2, jo=1
    loop_vars = {}
    post_order_visit(
        func.body,
        lambda n: (
            loop_vars.setdefault(n.loop_var.name, n.loop_var) if hasattr(n, "loop_var") else None
        ),
    )
    from ember.tir.arith.analyzer import Analyzer

    at = {loop_vars["i"]: E.const(2), loop_vars["j_outer"]: E.const(1)}
    from ember.tir.functor import substitute

    got = [E.const_value(Analyzer().simplify(substitute(call.args[n], at))) for n in (2, 4, 6)]
    assert got == [2 * 16, 1 * 16 * 16, 2 * 32 + 16]


# -- mismatches ----------------------------------------------------------------------------


def test_mismatched_computation_shows_both() -> None:
    A = te.placeholder((4, 32), name="A")
    B = te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((4, 32), lambda i, j: te.sum(A[i, k] + B[j, k], axis=k), name="C")
    s = schedule_gemv(C, 16, 32, gemv_intrin(16, 32, "body"))
    with pytest.raises(ScheduleError, match="gemv") as info:
        ember.lower(s, [A, B, C])
    text = str(info.value)
    assert "stage computes" in text and "intrinsic computes" in text and "*" in text


def test_wrong_extent_is_an_error() -> None:
    A, B, C = dense_program(4, 32, 32)
    s = schedule_gemv(C, 8, 32, gemv_intrin(16, 32, "body"))
    with pytest.raises(ScheduleError, match="runs 8 iterations"):
        ember.lower(s, [A, B, C])


def test_dense_intrinsic_buffer_needs_matching_strides() -> None:
    A, B, C = dense_program(4, 32, 64)
    s = schedule_gemv(C, 16, 16, gemv_intrin(16, 16, "reset", strided=False))
    with pytest.raises(ScheduleError, match="symbolic strides"):
        ember.lower(s, [A, B, C])


def test_split_reduction_needs_update() -> None:
    A, B, C = dense_program(4, 32, 64)
    s = schedule_gemv(C, 16, 16, gemv_intrin(16, 16, "body"))
    with pytest.raises(ScheduleError, match="reduce_update"):
        ember.lower(s, [A, B, C])


def test_non_dividing_split_asks_for_padding() -> None:
    A, B, C = dense_program(4, 40, 32)
    s = schedule_gemv(C, 16, 32, gemv_intrin(16, 32, "body"))
    with pytest.raises(ScheduleError, match="pad"):
        ember.lower(s, [A, B, C])


def test_tensorize_argument_errors() -> None:
    A, B, C = dense_program(4, 32, 32)
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="decl_tensor_intrin"):
        s[C].tensorize(C.op.axis[1], "gemv")
    x = te.placeholder((4,), name="x")
    with pytest.raises(ArgumentError, match="te.compute"):
        decl_tensor_intrin(x.op, lambda i, o: None)
    y = te.compute((4,), lambda i: x[i] * 2.0, name="y")
    with pytest.raises(ArgumentError, match="triple"):
        decl_tensor_intrin(y.op, lambda i, o: (None, None))


@settings(max_examples=examples(8), deadline=None)
@given(
    M=st.integers(1, 5),
    nblocks=st.integers(1, 3),
    kblocks=st.integers(1, 3),
    kf=st.sampled_from([4, 8]),
    parts=st.sampled_from(["reset", "noreset"]),
)
def test_gemv_tensorize_property(M: int, nblocks: int, kblocks: int, kf: int, parts: str) -> None:
    A, B, C = dense_program(M, 16 * nblocks, kf * kblocks)
    run_dense(schedule_gemv(C, 16, kf, gemv_intrin(16, kf, parts)), A, B, C, seed=M)


def test_fragment_scope_must_match() -> None:
    """An intrinsic whose buffers are declared in a fragment scope binds only to stages in
    that scope (TVM checks the scope as it binds)."""
    x = te.placeholder((8,), name="x")
    y = te.placeholder((8,), name="y")
    z = te.compute((8,), lambda i: x[i] + y[i], name="z")
    intrin = decl_tensor_intrin(
        z.op,
        lambda ins, outs: te.call_extern("int32", "f", outs[0].data),
        name="frag",
        default_buffer_params={"scope": "wmma.accumulator"},
    )
    X = te.placeholder((4, 8), name="X")
    Y = te.placeholder((4, 8), name="Y")
    Z = te.compute((4, 8), lambda i, j: X[i, j] + Y[i, j], name="Z")
    s = te.create_schedule(Z.op)
    s[Z].tensorize(Z.op.axis[1], intrin)
    with pytest.raises(ScheduleError, match="wmma.accumulator"):
        ember.lower(s, [X, Y, Z])


def gemm_intrin(m: int, n: int, l: int, offset_factor: int = 1):  # noqa: E741, ANN201
    """A 2-D tile ``c[i, j] = sum_k a[i, k] * b[k, j]``, all buffers with symbolic strides."""
    a = te.placeholder((m, l), name="a")
    b = te.placeholder((l, n), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    binds = {
        t: decl_buffer(
            t.shape,
            "float32",
            name=t.name,
            strides=(te.var(f"{t.name}_s"), 1),
            offset_factor=offset_factor,
        )
        for t in (a, b, c)
    }

    def fcompute(ins, outs):  # noqa: ANN001, ANN202
        aa, bb = ins
        cc = outs[0]

        def loops(init: bool, acc: bool):  # noqa: ANN202
            ib = IRBuilder()
            with ib.for_range(0, m, name="i") as i:
                with ib.for_range(0, n, name="j") as j:
                    if init:
                        ib.store(cc, (i, j), 0.0)
                    if acc:
                        with ib.for_range(0, l, name="r") as r:
                            ib.store(cc, (i, j), cc[i, j] + aa[i, r] * bb[r, j])
            return ib.get()

        return loops(True, True), loops(True, False), loops(False, True)

    return decl_tensor_intrin(c.op, fcompute, name="gemm_tile", binds=binds)


@pytest.mark.parametrize("batch", [0, 3])
def test_gemm_tile_intrinsic(batch: int) -> None:
    """A 2-D intrinsic over a (batch) matmul: the batch axis stays outside (extent 1 in
    the region), rows and columns tiled 4 x 16, k split by 8 outside the region."""
    M, N, L = 12, 32, 24
    lead = (batch,) if batch else ()
    A = te.placeholder((*lead, M, L), name="A")
    B = te.placeholder((*lead, L, N), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute(
        (*lead, M, N), lambda *ij: te.sum(A[(*ij[:-1], k)] * B[(*ij[:-2], k, ij[-1])], axis=k)
    )
    s = te.create_schedule(C.op)
    *b, i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(*b, io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, gemm_intrin(4, 16, 8))
    f = ember.build(s, [A, B, C], "llvm")
    rng = np.random.default_rng(batch)
    a = rng.standard_normal((*lead, M, L)).astype("float32")
    bb = rng.standard_normal((*lead, L, N)).astype("float32")
    c = np.full((*lead, M, N), np.nan, "float32")
    f(a, bb, c)
    np.testing.assert_allclose(c, a @ bb, rtol=1e-4, atol=1e-4)


def test_interleaved_loops_are_refused() -> None:
    """The region must be a dense block: an inner split part outside it is an error."""
    A, B, C = dense_program(4, 32, 32)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(i, ji, k, jo)
    s[C].tensorize(k, gemv_intrin(16, 32, "body"))
    with pytest.raises(ScheduleError, match="tensorize"):
        ember.lower(s, [A, B, C])


def test_fixed_offset_buffer_binds_only_at_the_start() -> None:
    """A buffer declared without an offset variable (TVM's offset_factor=0) starts at 0."""
    A2 = te.placeholder((8, 8), name="A2")
    B2 = te.placeholder((8, 32), name="B2")
    k = te.reduce_axis((0, 8), name="k")
    C2 = te.compute((8, 32), lambda i, j: te.sum(A2[i, k] * B2[k, j], axis=k), name="C2")
    s = te.create_schedule(C2.op)
    i, j = C2.op.axis
    io, ii = s[C2].split(i, factor=4)
    jo, ji = s[C2].split(j, factor=16)
    s[C2].reorder(io, jo, ii, ji)
    s[C2].tensorize(ii, gemm_intrin(4, 16, 8, offset_factor=0))
    with pytest.raises(ScheduleError, match="fixed offset"):
        ember.lower(s, [A2, B2, C2])
