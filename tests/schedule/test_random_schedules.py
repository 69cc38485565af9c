"""Property test: random legal schedules of four kernels compute what numpy computes.

Hypothesis draws shapes (often not divisible by the factors), split factors,
loop orders, fusion, annotations and staging (inline, compute_at, caches);
every drawn schedule is lowered, run on the interpreter and built with LLVM.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import te
from tests.nightly import examples
from tests.numerics import check

SETTINGS = settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


def _random_loops(draw, s, stage, allow_parallel=True):
    """Maybe add a unit loop (``fuse()``), split some leaves, permute some of them (TVM's
    partial ``reorder``), maybe fuse a pair (given in either order), annotate the innermost."""
    if draw(st.integers(0, 3)) == 0:
        stage.fuse()
    for iv in list(stage.leaf_iter_vars):
        if draw(st.booleans()):
            stage.split(iv, factor=draw(st.integers(1, 6)))
    leaves = list(stage.leaf_iter_vars)
    order = draw(st.permutations(leaves))
    stage.reorder(*order[: draw(st.integers(0, len(order)))])
    leaves = list(stage.leaf_iter_vars)
    if len(leaves) >= 2 and draw(st.booleans()):
        n = draw(st.integers(0, len(leaves) - 2))
        a, b = leaves[n], leaves[n + 1]
        if a.kind == b.kind:
            stage.fuse(*((b, a) if draw(st.booleans()) else (a, b)))
    leaves = list(stage.leaf_iter_vars)
    inner = leaves[-1]
    choice = draw(st.sampled_from(["none", "vec", "unroll"]))
    from ember.tir.te.tensor import IterKind

    if choice == "unroll":
        stage.unroll(inner)
    elif choice == "vec" and inner.kind is not IterKind.REDUCE:
        stage.vectorize(
            inner
        )  # may have a non-constant extent only if fused... factors are constant
    if allow_parallel and leaves[0].kind is not IterKind.REDUCE and draw(st.booleans()):
        if leaves[0] is not inner or choice == "none":
            stage.parallel(leaves[0])


@st.composite
def matmul_case(draw):
    M, N, K = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    if draw(st.booleans()):
        CL = s.cache_write(C, "local")
        _random_loops(draw, s, s[C])
        data_leaves = [iv for iv in s[C].leaf_iter_vars]
        at = draw(st.sampled_from(data_leaves))
        s[CL].compute_at(s[C], at)
        _random_loops(draw, s, s[CL], allow_parallel=False)
    else:
        _random_loops(draw, s, s[C])
    return s, [A, B, C], lambda a, b: a @ b


@st.composite
def conv_case(draw):
    N, C, H, W = 1, draw(st.integers(1, 3)), draw(st.integers(3, 7)), draw(st.integers(3, 7))
    O, KH, KW = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pad = draw(st.integers(0, 1))
    stride = draw(st.integers(1, 2))
    from ember.tir.topi import conv2d_nchw

    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((O, C, KH, KW), name="W")
    Y = conv2d_nchw(X, Wt, stride=stride, padding=pad)
    s = te.create_schedule(Y.op)
    P = Y.op.input_tensors[0] if Y.op.input_tensors[0].name.endswith("pad") else None
    if P is None:
        P = next((t for t in Y.op.input_tensors if t.name.endswith("_pad")), None)
    _random_loops(draw, s, s[Y])
    if P is not None:
        how = draw(st.sampled_from(["inline", "root", "at"]))
        if how == "inline":
            s[P].compute_inline()
        elif how == "at":
            s[P].compute_at(s[Y], draw(st.sampled_from(list(s[Y].leaf_iter_vars))))

    def ref(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        OH = (H + 2 * pad - KH) // stride + 1
        OW = (W + 2 * pad - KW) // stride + 1
        out = np.zeros((N, O, OH, OW), np.float64)
        for y in range(OH):
            for x_ in range(OW):
                patch = xp[:, :, y * stride : y * stride + KH, x_ * stride : x_ * stride + KW]
                out[:, :, y, x_] = np.einsum("nchw,ochw->no", patch, w)
        return out

    return s, [X, Wt, Y], ref


@st.composite
def reduction_case(draw):
    R, C = draw(st.integers(1, 8)), draw(st.integers(1, 17))
    A = te.placeholder((R, C), name="A")
    k = te.reduce_axis((0, C), name="k")
    kind = draw(st.sampled_from(["sum", "max"]))
    red = te.sum if kind == "sum" else te.max
    B = te.compute((R,), lambda r: red(A[r, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _random_loops(draw, s, s[B])
    return s, [A, B], (lambda a: a.sum(axis=1)) if kind == "sum" else (lambda a: a.max(axis=1))


@st.composite
def chain_case(draw):
    R, C = draw(st.integers(1, 8)), draw(st.integers(1, 20))
    X = te.placeholder((R, C), name="X")
    bias = te.placeholder((C,), name="bias")
    Y1 = te.compute((R, C), lambda i, j: X[i, j] * 2.0 + bias[j], name="Y1")
    Y2 = te.compute((R, C), lambda i, j: te.exp(Y1[i, j]) - Y1[i, j], name="Y2")
    Y3 = te.compute((R, C), lambda i, j: te.sigmoid(Y2[i, j]) * Y1[i, j], name="Y3")
    s = te.create_schedule(Y3.op)
    _random_loops(draw, s, s[Y3])
    # Y1 is read by Y2 and Y3, so it may sit inside Y3 only at or above where Y2 sits.
    leaves = list(s[Y3].leaf_iter_vars)
    how2 = draw(st.sampled_from(["inline", "root", "at"]))
    at2 = draw(st.integers(0, len(leaves) - 1))
    if how2 == "inline":
        s[Y2].compute_inline()
    elif how2 == "at":
        s[Y2].compute_at(s[Y3], leaves[at2])
    how1 = draw(st.sampled_from(["inline", "root", "at"]))
    at1 = draw(st.integers(0, at2 if how2 == "at" else len(leaves) - 1))
    if how1 == "inline":
        s[Y1].compute_inline()
    elif how1 == "at" and how2 != "root":
        s[Y1].compute_at(s[Y3], leaves[at1])

    def ref(x, b):
        y1 = x * 2 + b
        y2 = np.exp(y1) - y1
        return 1 / (1 + np.exp(-y2)) * y1

    return s, [X, bias, Y3], ref


@SETTINGS
@given(matmul_case())
def test_random_matmul_schedules(case):
    s, args, ref = case
    check(s, args, ref, np.random.default_rng(1))


@SETTINGS
@given(conv_case())
def test_random_conv2d_schedules(case):
    s, args, ref = case
    check(s, args, ref, np.random.default_rng(2))


@SETTINGS
@given(reduction_case())
def test_random_reduction_schedules(case):
    s, args, ref = case
    check(s, args, ref, np.random.default_rng(3))


@SETTINGS
@given(chain_case())
def test_random_elementwise_chain_schedules(case):
    s, args, ref = case
    check(s, args, ref, np.random.default_rng(4))
