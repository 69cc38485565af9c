"""Issue 22 item 12: schedules that aborted the process inside LLVM build and run.

llvmlite's LLVM (22) is built with assertions, and its loop vectorizer aborted the
process ("VPlan cost model and legacy cost model disagreed", LoopVectorize.cpp) on a
float ``maxnum``/``minnum`` reduction loop with certain constant trip counts (72-79,
88-95, 111, ... on Zen 4): the path that vectorizes such a reduction without fast-math
flags by checking for NaN. The rfactor property test found it (a max over 4x79 split
by 1), but any serial ``te.max`` over such a row reached it. Ember now keeps LLVM's
loop vectorizer off the loops around a float min/max reduction
(:mod:`ember.codegen_llvm.loop_hints`). The builds run in a child process, since a
regression would take pytest with it.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import ember
from ember import te

CHILD = """
import numpy as np
import ember
from ember import te
from tests.schedule.test_rfactor_properties import build

rng = np.random.default_rng(12)
s, args = build(4, 79, "max", 1, -1, False, 1)  # the rfactor schedule the property test found
a = rng.standard_normal((4, 79)).astype("float32")
b = np.full(4, np.nan, "float32")
ember.build(s, args, target="llvm")(a, b)
np.testing.assert_array_equal(b, a.max(axis=1))

for n in (72, 75, 79, 88, 95, 111, 175):
    for name, reducer, ref in (("max", te.max, np.max), ("min", te.min, np.min)):
        A = te.placeholder((3, n), name="A")
        k = te.reduce_axis((0, n), name="k")
        B = te.compute((3,), lambda i: reducer(A[i, k], axis=k), name="B")
        s = te.create_schedule(B.op)
        x = rng.standard_normal((3, n)).astype("float32")
        y = np.full(3, np.nan, "float32")
        ember.build(s, [A, B], target="llvm")(x, y)
        np.testing.assert_array_equal(y, ref(x, axis=1), err_msg=f"{name} over {n}")
print("ok")
"""


def test_item_12_minmax_reductions_that_aborted_llvm_build_and_match_numpy():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.strip() == "ok"


def _row_max(n: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((3, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="B")
    C = te.compute((3, n), lambda i, j: A[i, j] * 2.0, name="C")
    return A, B, C


def test_item_12_only_loops_around_a_min_max_reduction_skip_the_loop_vectorizer():
    """The generated IR marks the reduction's loops and no other: an elementwise loop
    keeps LLVM's loop vectorizer."""
    A, B, C = _row_max(80)  # 79 would abort the process if this regressed
    s = te.create_schedule([B.op, C.op])
    ll = ember.build(s, [A, B, C], target="llvm").get_source("ll-unopt")
    marked = [line for line in ll.splitlines() if "br " in line and "!llvm.loop" in line]
    assert [m.split('"')[1] for m in marked] == ["k.head", "i.head"], ll  # not C's i, j
    assert '!"llvm.loop.vectorize.enable", i1 0' in ll
    x = np.random.default_rng(1).standard_normal((3, 80)).astype("float32")
    b, c = np.empty(3, "float32"), np.empty((3, 80), "float32")
    ember.build(s, [A, B, C], target="llvm")(x, b, c)
    np.testing.assert_array_equal(b, x.max(axis=1))
    np.testing.assert_array_equal(c, x * 2)


def test_item_12_the_loops_found_are_those_around_a_min_max_accumulator():
    """Hand-built TIR: ``for i: for k: B[i] = max(B[i], A[i*8+k])`` marks i and k; a relu
    ``C[j] = max(A[j], 0)`` (no accumulator) and a sum accumulator mark nothing."""
    from ember.codegen_llvm.loop_hints import minmax_reduction_loops
    from ember.tir import expr as E
    from ember.tir import stmt as S
    from ember.tir.buffer import decl_buffer

    A, B = decl_buffer((64,), "float32", "A"), decl_buffer((8,), "float32", "B")
    C = decl_buffer((64,), "float32", "C")
    i, k, j, m = E.Var("i"), E.Var("k"), E.Var("j"), E.Var("m")
    acc = S.BufferStore(B, E.max_(B[i], A[i * 8 + k]), (i,))
    k_loop = S.For(k, E.const(0), E.const(8), S.ForKind.SERIAL, acc)
    i_loop = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL, k_loop)
    relu = S.BufferStore(C, E.max_(A[j], E.const(0.0, "float32")), (j,))
    j_loop = S.For(j, E.const(0), E.const(64), S.ForKind.SERIAL, relu)
    total = S.BufferStore(B, B[m] + A[m], (m,))
    m_loop = S.For(m, E.const(0), E.const(8), S.ForKind.SERIAL, total)
    found = minmax_reduction_loops(S.SeqStmt((i_loop, j_loop, m_loop)))
    assert found == {i_loop, k_loop}
