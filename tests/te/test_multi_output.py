"""Multi-output ``te.compute``: one op, one stage, one loop nest writing every output.

Each case runs against numpy on random data (odd shapes) on the interpreter and LLVM,
and through the CUDA emulator where the stage is bound to threads.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError, ScheduleError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from tests.numerics import assert_close, check, random_array

CUDA = "cuda -arch=sm_80"


def two_outputs(m: int = 7, n: int = 13):
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((m, n), name="B")
    T0, T1 = te.compute((m, n), lambda i, j: (A[i, j] + B[i, j], A[i, j] * B[i, j]), name="T")
    return A, B, T0, T1


def test_a_tuple_lambda_gives_tensors_of_one_op():
    A, B, T0, T1 = two_outputs()
    assert T0.op is T1.op and T0.op.num_outputs == 2
    assert (T0.value_index, T1.value_index) == (0, 1)
    assert T0.op.output(1) == T1 and T0 != T1
    assert (T0.name, T1.name) == ("T.v0", "T.v1")
    s = te.create_schedule(T0.op)
    assert s[T0] is s[T1]
    with pytest.raises(ArgumentError, match="has 2 output"):
        T0.op.output(2)


def test_a_list_lambda_of_mixed_dtypes():
    A = te.placeholder((9,), name="A")
    outs = te.compute((9,), lambda i: [A[i] * 2.0, (A[i] > 0).astype("int32")], name="T")
    assert isinstance(outs, list) and [t.dtype for t in outs] == ["float32", "int32"]
    s = te.create_schedule(outs[0].op)
    check(
        s,
        [A, *outs],
        lambda a: (a * 2, (a > 0).astype("int32")),
        np.random.default_rng(1),
        n_inputs=1,
    )


def test_one_loop_nest_writes_both(rng):
    A, B, T0, T1 = two_outputs()
    s = te.create_schedule(T0.op)
    xo, xi = s[T0].split(s[T0].op.axis[1], factor=4)  # 13 = 3*4 + 1: a guarded tail
    func = ember.lower(s, [A, B, T0, T1])
    loops = []
    post_order_visit(func.body, lambda n: loops.append(n) if isinstance(n, S.For) else None)
    stores = []
    post_order_visit(
        func.body, lambda n: stores.append(n) if isinstance(n, S.BufferStore) else None
    )
    assert {st.buffer.name for st in stores} == {"T.v0", "T.v1"}
    assert len({id(x) for x in loops}) <= 4  # no second nest (partitioning may add a tail)
    check(s, [A, B, T0, T1], lambda a, b: (a + b, a * b), rng, n_inputs=2)


def test_either_output_alone_is_an_argument(rng):
    A, B, T0, T1 = two_outputs(5, 6)
    s = te.create_schedule(T0.op)
    check(s, [A, B, T1], lambda a, b: a * b, rng, n_inputs=2)
    check(s, [A, B, T0], lambda a, b: a + b, rng, n_inputs=2)


def test_consumers_of_each_output_with_compute_at(rng):
    A, B, T0, T1 = two_outputs(7, 11)
    C = te.compute((7, 11), lambda i, j: T0[i, j] - 3.0 * T1[i, j], name="C")
    s = te.create_schedule(C.op)
    s[T0].compute_at(s[C], C.op.axis[0])
    check(s, [A, B, C], lambda a, b: (a + b) - 3 * a * b, rng, n_inputs=2)


def test_consumers_of_each_output_with_inline(rng):
    A, B, T0, T1 = two_outputs(5, 9)
    C = te.compute((5, 9), lambda i, j: T1[i, j] / (T0[i, j] + 4.0), name="C")
    s = te.create_schedule(C.op)
    s[T1].compute_inline()
    assert s[T0].attach is s[T1].attach
    check(s, [A, B, C], lambda a, b: a * b / (a + b + 4), rng, n_inputs=2)


def test_outputs_and_a_consumer_all_arguments(rng):
    A, B, T0, T1 = two_outputs(4, 7)
    C = te.compute((4, 7), lambda i, j: T0[i, j] + T1[i, j], name="C")
    s = te.create_schedule(C.op)
    check(s, [A, B, T0, T1, C], lambda a, b: (a + b, a * b, a + b + a * b), rng, n_inputs=2)


def test_multi_output_stage_on_gpu_threads(rng):
    A, B, T0, T1 = two_outputs(9, 37)
    s = te.create_schedule(T0.op)
    fused = s[T0].fuse(*s[T0].op.axis)
    bx, tx = s[T0].split(fused, factor=64)
    s[T0].bind(bx, "blockIdx.x")
    s[T1].bind(tx, "threadIdx.x")  # s[T1] is the same stage
    mod = ember.build(s, [A, B, T0, T1], target=CUDA)
    a, b = random_array((9, 37), "float32", rng), random_array((9, 37), "float32", rng)
    t0, t1 = np.full_like(a, np.nan), np.full_like(a, np.nan)
    mod.emulate(a, b, t0, t1)
    assert_close(t0, a + b, "float32")
    assert_close(t1, a * b, "float32")
    assert "T_v0[" in mod.get_source() and "T_v1[" in mod.get_source()


def test_mixing_a_reduction_with_a_plain_value_is_an_error():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    with pytest.raises(ArgumentError, match="all plain expressions or all the values"):
        te.compute((4,), lambda i: (te.sum(A[i, k], axis=k), A[i, 0]), name="T")
    with pytest.raises(ArgumentError, match="all plain expressions or all the values"):
        te.compute((4,), lambda i: (te.sum(A[i, k], axis=k), te.max(A[i, k], axis=k)))


def test_values_out_of_order_are_an_error():
    from tests.te.reducers import argmax

    I = te.placeholder((4, 5), name="I", dtype="int32")
    V = te.placeholder((4, 5), name="V")
    k = te.reduce_axis((0, 5), name="k")

    def swapped(i):
        a, b = argmax((I[i, k], V[i, k]), axis=k)
        return b, a

    with pytest.raises(ArgumentError, match="not value 0 of the same tuple reduction"):
        te.compute((4,), swapped, name="T")


def test_cache_write_of_one_output_of_a_multi_output_stage_is_refused():
    """As TVM: the outputs of one compute are cached together (s.cache_write([T0, T1]))."""
    A, B, T0, T1 = two_outputs()
    s = te.create_schedule(T0.op)
    with pytest.raises(ScheduleError, match="cache them together"):
        s.cache_write(T0, "local")
    with pytest.raises(ScheduleError, match="every output of one multi-output"):
        s.cache_write([T0, T0], "local")


def test_tuple_reducer_nodes_compare_structurally():
    from ember.tir.structural import structural_equal
    from tests.te.reducers import argmax

    I = te.placeholder((4, 5), name="I", dtype="int32")
    V = te.placeholder((4, 5), name="V")
    k = te.reduce_axis((0, 5), name="k")
    r0, r1 = argmax((I[0, k], V[0, k]), axis=k)
    assert isinstance(r0.combiner, E.TupleReducer) and r0.combiner is r1.combiner
    assert r0.sources == r1.sources and (r0.value_index, r1.value_index) == (0, 1)
    assert structural_equal(r0, r0) and not structural_equal(r0, r1)


def test_an_extern_reads_the_second_output(rng):
    """te.extern's input placeholder for T1 is bound to T1's buffer, not T0's."""
    from ember import tir

    ember.register_func(
        "test.mo.copy", lambda x, y: np.copyto(np.asarray(y), np.asarray(x)), override=True
    )
    try:
        A, B, T0, T1 = two_outputs(5, 6)
        E_ = te.extern(
            (5, 6), [T1], lambda ins, outs: tir.call_packed("test.mo.copy", ins[0], outs[0])
        )
        s = te.create_schedule(E_.op)
        check(s, [A, B, E_], lambda a, b: a * b, rng, n_inputs=2)
    finally:
        ember.remove_global_func("test.mo.copy")
