"""Issue 22 item 9: a max window with padding selects, accumulated in a local cache whose
row axis is unrolled, came out one column off on AVX-512 CPUs.

Found by the graph frontend (branch fecore): a 3x3 max window over a 5x5 input padded
by 1 (a ``select`` of the clamped load or -inf), accumulated in a local cache computed
at the column block, with the cache's row axis unrolled. Ember's TIR and LLVM IR were
right (the interpreter and ``-opt-level=0``/``1`` agree with numpy, and so do CPUs
without AVX-512); LLVM 22's loop vectorizer was wrong: it vectorizes a ``maxnum``
reduction without fast-math flags by checking the inputs for NaN (LLVM pull request
148239), and with its loop unroller on, that version read the wrong taps. Ember now
keeps LLVM's loop vectorizer off the loops around a float min/max reduction
(:mod:`ember.codegen_llvm.loop_hints`), and the graph schedule unrolls the rows again.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_llvm.schedules.generic import schedule_generic as schedule_cpu
from ember.tir import expr as E
from ember.tir import stmt as S


def padded_window(n: int, m: int, k: int, pad: int, reducer):  # type: ignore[no-untyped-def]
    """``Y[i, j] = reduce over a k x k window of X padded by ``pad`` (-inf or 0 outside)."""
    X = te.placeholder((n, m), name="X")
    r0 = te.reduce_axis((0, k), name="r0")
    r1 = te.reduce_axis((0, k), name="r1")
    ho, wo = n + 2 * pad - k + 1, m + 2 * pad - k + 1

    def f(i, j):  # noqa: ANN001, ANN202
        p, q = i + r0 - pad, j + r1 - pad
        ok = E.logical_and(E.logical_and(p >= 0, p < n), E.logical_and(q >= 0, q < m))
        v = X[E.max_(E.min_(p, n - 1), 0), E.max_(E.min_(q, m - 1), 0)]
        fill = te.min_value("float32") if reducer is te.max else E.const(0.0, "float32")
        return reducer(E.select(ok, v, fill), axis=(r0, r1))

    return X, te.compute((ho, wo), f, name="Y")


def numpy_window(x: np.ndarray, k: int, pad: int, kind: str) -> np.ndarray:
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype(np.float64), pad, constant_values=fill)
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k))
    out = windows.max(axis=(2, 3)) if kind == "max" else windows.sum(axis=(2, 3))
    return out.astype(np.float32)


def _local_accumulator_schedule(X, Y, unroll: bool):  # type: ignore[no-untyped-def]
    s = te.create_schedule(Y.op)
    acc = s.cache_write(Y, "local")
    i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=8)
    io, ii = s[Y].split(i, factor=4)
    s[Y].reorder(io, jo, ii, ji)
    s[acc].compute_at(s[Y], jo)
    ic, jc = s[acc].op.axis
    s[acc].reorder(*s[acc].op.reduce_axis, ic, jc)
    if unroll:
        s[acc].unroll(ic)
    return s


def host_has(feature: str) -> bool:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_features().get(feature, False)


# the miscompile needs AVX-512 code; a CPU level the host lacks would die of SIGILL
CPUS = [
    "native",
    pytest.param("x86-64-v4", marks=pytest.mark.skipif(not host_has("avx512f"), reason="AVX-512")),
    pytest.param("x86-64-v3", marks=pytest.mark.skipif(not host_has("avx2"), reason="AVX2")),
]


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("kind,unroll", [("max", True), ("max", False), ("sum", True)])
def test_item_09_unrolled_local_max_accumulator_matches_numpy(cpu, kind, unroll):
    X, Y = padded_window(5, 5, 3, 1, te.max if kind == "max" else te.sum)
    s = _local_accumulator_schedule(X, Y, unroll)
    x = np.random.default_rng(9).standard_normal((5, 5)).astype("float32")
    got = np.full((5, 5), np.nan, "float32")
    ember.build(s, [X, Y], target=f"llvm -mcpu={cpu}")(x, got)
    np.testing.assert_allclose(got, numpy_window(x, 3, 1, kind), rtol=1e-6)


@pytest.mark.parametrize("shape", [(5, 5), (7, 13), (11, 6)])
def test_item_09_graph_schedule_unrolls_rows_and_matches_numpy(shape):
    """The generic CPU schedule (``schedule_cpu``) unrolls its accumulator rows again."""
    X, Y = padded_window(*shape, 3, 1, te.max)
    s = schedule_cpu([Y])
    kinds = [a.kind for st in s.stages for a in st.iter_attrs.values()]
    assert S.ForKind.UNROLLED in kinds
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype("float32")
    got = np.full([int(d.value) for d in Y.shape], np.nan, "float32")
    ember.build(s, [X, Y], target="llvm")(x, got)
    np.testing.assert_allclose(got, numpy_window(x, 3, 1, "max"), rtol=1e-6)
