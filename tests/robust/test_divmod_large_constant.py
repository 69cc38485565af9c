"""floordiv/floormod by a large constant: the simplifier stays bounded and keeps values."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from math import isfinite
from pathlib import Path

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.tir import expr as E
from ember.tir.arith import Analyzer
from ember.tir.arith.canonical import _small_remainder
from ember.tir.arith.linear import LinearForm, to_expr, to_linear
from tests.nightly import examples


def test_large_divisors_simplify_quickly_in_a_subprocess() -> None:
    """Trying every divisor below the constant hung for minutes; a regression must not hang
    the suite, so the work runs in a subprocess under a timeout."""
    script = textwrap.dedent("""
        from ember.tir import expr as E
        from ember.tir.arith import Analyzer
        x, f = E.Var("x", "int64"), E.Var("f", "int64")
        for c in (2**31 - 1, 2**31, 10**12 + 39, 2**62):
            ana = Analyzer()
            ana.bind(f, E.Range(E.const(0, "int64"), E.const(4, "int64")))
            for e in (E.floormod(x * 8 + f + 7, c), E.floordiv(x * 8 + f, c),
                      E.floormod(x * 6 + f * 2, c), E.truncmod(x * 3 + 1, c)):
                ana.simplify(e)
        ana = Analyzer()
        ana.bind(f, E.Range(E.const(0, "int64"), E.const(4, "int64")))
        got = repr(ana.simplify((x * 2**32 + f) // 2**33))
        assert got == "x // int64(2)", got
        print("OK")
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def _brute_force(r: LinearForm, c: int, ana: Analyzer):
    """The old search: every divisor of ``c`` below it, largest first (the reference)."""
    for g in sorted((d for d in range(2, c) if c % d == 0), reverse=True):
        big = [k for k, (_, coef) in r.terms.items() if coef % g == 0]
        small = LinearForm(r.dtype)
        for key, (atom, coef) in r.terms.items():
            if coef % g:
                small.add_term(key, atom, coef)
        small.const = r.const
        if not big or small.is_const():
            continue
        lo, hi = ana.bound(to_expr(small))
        if isfinite(lo) and isfinite(hi) and lo >= 0 and hi < g:
            return g
    return None


@settings(max_examples=examples(150), deadline=None)
@given(
    coefs=st.lists(st.integers(1, 96), min_size=1, max_size=4),
    extents=st.lists(st.integers(1, 40), min_size=4, max_size=4),
    const=st.integers(0, 20),
    c=st.integers(2, 400),
)
def test_divisor_choice_matches_brute_force(coefs, extents, const, c) -> None:
    # as divide_by_const calls it: the terms ``c`` divides were already moved to the quotient
    assume(all(k % c for k in coefs))
    xs = [E.Var(f"v{i}") for i in range(len(coefs))]
    ana = Analyzer()
    for v, n in zip(xs, extents):
        ana.bind(v, E.Range(E.const(0), E.const(n)))
    expr = E.const(const)
    for v, k in zip(xs, coefs):
        expr = expr + v * k
    r = to_linear(expr, ana.keys)
    got = _small_remainder(r, c, ana)
    assert (got[2] if got else None) == _brute_force(r, c, ana)


def test_compute_with_large_modulus(rng: np.random.Generator) -> None:
    """An index taken modulo a constant far larger than the data, checked against numpy."""
    n, big = 61, 2**31 - 1
    A = te.placeholder((n,), name="A", dtype="int64")
    B = te.compute(
        (n,), lambda i: E.floormod(A[i] * 1000003 + 17, big) + E.floordiv(A[i], big), name="B"
    )
    mod = ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    a = rng.integers(-(2**40), 2**40, n).astype("int64")
    out = np.zeros(n, "int64")
    mod(a, out)
    np.testing.assert_array_equal(out, np.mod(a * 1000003 + 17, big) + np.floor_divide(a, big))
