"""An expression object met again within one statement is emitted once (``CodeGenLLVM.visit``).

Simplified TIR shares subexpressions, and the LLVM backend used to emit a shared node at
every place it appears: ResNet-18's Winograd kernels came to 11.7 MB of LLVM IR text, which
LLVM's CSE then merged back (6.1 MB with the reuse, same optimised code). Each test below
reads one node object at several places, and each but the first breaks one of the
conditions under which reuse is sound: a store between statements, a variable bound again,
a value computed in a branch that does not dominate the later use.
"""

from __future__ import annotations

import numpy as np

from ember.tir import expr as E
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import build, load, loop, param, rand, sentinel, store


def test_a_shared_subexpression_is_emitted_once_per_statement(rng):
    n = 19
    A, out = param("A", (n,)), param("out", (n,))

    def body(i):
        t = load(A, i) * 2.5  # one object, read three times
        return store(out, i, t * t + t)

    mod = build(S.PrimFunc("shared", (A, out), loop(n, body)))
    unoptimised = mod.get_source("ll-unopt")
    # t once; t * t + t is one fmuladd (before: t emitted at each of its three places)
    assert unoptimised.count("fmul float") == 1
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    t = a.astype(np.float64) * 2.5
    np.testing.assert_allclose(o, t * t + t, rtol=1e-5, atol=1e-6)


def test_a_load_after_a_store_reads_the_stored_value(rng):
    n = 13
    A, out = param("A", (n,)), param("out", (n,))

    def body(i):
        a_i = load(A, i)  # one object in both statements
        return S.seq(store(A, i, a_i + 1.0), store(out, i, a_i * 3.0))

    mod = build(S.PrimFunc("store_then_load", (A, out), loop(n, body)))
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a.copy(), o)
    np.testing.assert_allclose(o, (a.astype(np.float64) + 1.0) * 3.0, rtol=1e-5, atol=1e-6)


def test_one_node_under_two_lets_of_the_same_variable_takes_each_binding(rng):
    n = 11
    A, B, out = param("A", (n,)), param("B", (n,)), param("out", (n,))
    x = E.Var("x", "float32")
    tripled = x * 3.0  # one object: its value differs under each Let

    def body(i):
        first = E.Let("float32", x, load(A, i), tripled)
        second = E.Let("float32", x, load(B, i), tripled)
        return store(out, i, first + second)

    mod = build(S.PrimFunc("two_lets", (A, B, out), loop(n, body)))
    a, b = rand(n, "float32", rng), rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, b, o)
    np.testing.assert_allclose(o, (a.astype(np.float64) + b) * 3.0, rtol=1e-5, atol=1e-6)


def test_a_value_first_computed_in_a_branch_is_computed_again_after_it(rng):
    """``if_then_else`` evaluates its taken side in a block of its own: a value made there
    does not dominate the block after the merge, so the later read emits it anew (LLVM's
    verifier refuses the module otherwise)."""
    n = 17
    A, out = param("A", (n,)), param("out", (n,))

    def body(i):
        doubled = load(A, i) * 2.0
        guarded = E.if_then_else(i < 9, doubled, E.const(0.0, "float32"))
        return store(out, i, guarded - doubled)  # not a multiply-add: reads `doubled` itself

    mod = build(S.PrimFunc("branch_then_merge", (A, out), loop(n, body)))
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    d = a.astype(np.float64) * 2.0
    np.testing.assert_allclose(o, np.where(np.arange(n) < 9, d, 0.0) - d, rtol=1e-5, atol=1e-6)
