"""Every graph pass: a Before graph built by hand, the graph the pass must give written out
by hand (Expected), compared by structural equality (``assert_graph_equal``).

Each case is a function giving ``(before, expected)``, registered under its pass's name;
the test runs the pass alone through the shared runner (verified after it) and also
checks the pass left its input as it was. Constants in Expected graphs are computed here
from the passes' documented layouts and formulas, element by element, not with the
passes' own helpers. ``test_every_graph_pass_has_a_case`` fails when a graph pass (in
``DEFAULT_PASSES`` or any module of ``frontend/passes``) has none.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from ember.frontend import passes
from ember.frontend.graph import Graph, Node
from ember.frontend.graph_equal import assert_graph_equal
from ember.frontend.passes import DEFAULT_PASSES, GRAPH, run_graph_passes
from ember.tir.transform.runner import Pass
from tests.frontend.passes.graphs import GraphBuilder

Case = Callable[[], tuple[Graph, Graph]]
CASES: dict[str, list[Case]] = {}


def expected(pass_name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        CASES.setdefault(pass_name, []).append(case)
        return case

    return register


def all_graph_passes() -> dict[str, Pass]:
    """Every graph pass object in the modules of ``frontend/passes`` and DEFAULT_PASSES."""
    found = {p.name: p for p in DEFAULT_PASSES}
    for info in pkgutil.iter_modules(passes.__path__):
        module = importlib.import_module(f"{passes.__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, Pass) and obj.ir is GRAPH:
                found.setdefault(obj.name, obj)
    return found


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


# -- eliminate_common_subexpr --------------------------------------------------------------


@expected("eliminate_common_subexpr")
def cse_merges_equal_nodes_and_equal_params() -> tuple[Graph, Graph]:
    c = np.arange(24, dtype="float32").reshape(4, 6)
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    c1, c2 = b.param("c1", c), b.param("c2", c.copy())  # one constant, two copies
    ra = b.node("relu", [b.node("add", [x, c1], (4, 6))], (4, 6))
    rb = b.node("relu", [b.node("add", [x, c2], (4, 6))], (4, 6))
    before = b.build(b.node("multiply", [ra, rb], (4, 6)))

    e = GraphBuilder()
    x = e.input("x", (4, 6))
    r = e.node("relu", [e.node("add", [x, e.param("c", c)], (4, 6))], (4, 6))
    return before, e.build(e.node("multiply", [r, r], (4, 6)))


@expected("eliminate_common_subexpr")
def cse_keeps_a_duplicate_that_is_an_output() -> tuple[Graph, Graph]:
    def g() -> Graph:
        b = GraphBuilder()
        x = b.input("x", (4, 6))
        return b.build(b.node("relu", [x], (4, 6)), b.node("relu", [x], (4, 6)))

    return g(), g()


# -- fold_batch_norm -----------------------------------------------------------------------

CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}


def _conv_bn(bias: bool) -> tuple[Graph, Graph]:
    r = rng()
    W = r.standard_normal((5, 3, 3, 3)).astype("float32")
    B = r.standard_normal(5).astype("float32")
    gamma, beta, mean = (r.standard_normal(5).astype("float32") for _ in range(3))
    var = r.uniform(0.5, 2, 5).astype("float32")
    eps = 1e-3
    b = GraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    conv_in = [x, b.param("W", W), *([b.param("B", B)] if bias else [])]
    c = b.node("conv", conv_in, (1, 5, 6, 6), **CONV)
    stats = [b.param(n, a) for n, a in zip("gbmv", (gamma, beta, mean, var))]
    n = b.node("batch_norm", [c, *stats], (1, 5, 6, 6), eps=eps)
    before = b.build(b.node("relu", [n], (1, 5, 6, 6)))

    # per output channel o: W'[o] = W[o] * s[o], B'[o] = (B[o] - mean[o]) * s[o] + beta[o],
    # s = gamma / sqrt(var + eps), in float64, stored as float32
    W2, B2 = np.empty_like(W), np.empty_like(B)
    for o in range(5):
        s = float(gamma[o]) / np.sqrt(float(var[o]) + eps)
        W2[o] = W[o].astype(np.float64) * s
        B2[o] = ((float(B[o]) if bias else 0.0) - float(mean[o])) * s + float(beta[o])
    e = GraphBuilder()
    x = e.input("x", (1, 3, 6, 6))
    c = e.node("conv", [x, e.param("W2", W2), e.param("B2", B2)], (1, 5, 6, 6), **CONV)
    return before, e.build(e.node("relu", [c], (1, 5, 6, 6)))


@expected("fold_batch_norm")
def batch_norm_folds_into_a_conv_with_bias() -> tuple[Graph, Graph]:
    return _conv_bn(bias=True)


@expected("fold_batch_norm")
def batch_norm_folds_into_a_conv_without_bias() -> tuple[Graph, Graph]:
    return _conv_bn(bias=False)


@expected("fold_batch_norm")
def a_conv_read_twice_keeps_its_batch_norm() -> tuple[Graph, Graph]:
    def g() -> Graph:
        b = GraphBuilder()
        x = b.input("x", (1, 2, 4, 4))
        W = np.ones((2, 2, 3, 3), "float32")
        c = b.node("conv", [x, b.param("W", W)], (1, 2, 4, 4), **CONV)
        stats = [b.param(n, np.full(2, 0.5, "float32")) for n in "gbmv"]
        n = b.node("batch_norm", [c, *stats], (1, 2, 4, 4), eps=1e-5)
        return b.build(n, c)  # the conv's output is also a graph output

    return g(), g()


# -- pack_dense_weights --------------------------------------------------------------------


def _panels(w: np.ndarray, nr: int) -> np.ndarray:
    """``P[p, k, z] = W[k, p*nr + z]``, zero past N."""
    k, n = w.shape
    p = np.zeros((-(-n // nr), k, nr), w.dtype)
    for col in range(n):
        p[col // nr, :, col % nr] = w[:, col]
    return p


@expected("pack_dense_weights")
def a_matmul_with_constant_weights_reads_panels() -> tuple[Graph, Graph]:
    w = rng().standard_normal((7, 20)).astype("float32")
    b = GraphBuilder()
    x = b.input("x", (5, 7))
    before = b.build(b.node("matmul", [x, b.param("w", w)], (5, 20)))
    e = GraphBuilder()
    x = e.input("x", (5, 7))
    panels = e.param("p", _panels(w, 32))  # 32: the narrowest panel width covering N = 20
    return before, e.build(e.node("dense_packed", [x, panels], (5, 20), n=20))


@expected("pack_dense_weights")
def a_gemm_with_beta_adds_the_scaled_bias_after_the_product() -> tuple[Graph, Graph]:
    r = rng()
    w = r.standard_normal((70, 3)).astype("float32")  # (N, K): trans_b
    c = r.standard_normal(70).astype("float32")
    gemm = {"alpha": 1.0, "beta": 0.5, "trans_a": False, "trans_b": True}
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    before = b.build(b.node("gemm", [x, b.param("w", w), b.param("c", c)], (2, 70), **gemm))
    e = GraphBuilder()
    x = e.input("x", (2, 3))
    prod = e.node("dense_packed", [x, e.param("p", _panels(w.T.copy(), 64))], (2, 70), n=70)
    half_c = e.param("c2", (c * np.float32(0.5)).astype("float32"))
    return before, e.build(e.node("add", [prod, half_c], (2, 70)))


@expected("pack_dense_weights")
def a_matmul_of_two_inputs_stays() -> tuple[Graph, Graph]:
    def g() -> Graph:
        b = GraphBuilder()
        x, y = b.input("x", (2, 3)), b.input("y", (3, 4))
        return b.build(b.node("matmul", [x, y], (2, 4)))

    return g(), g()


# -- pack_int8_weights ---------------------------------------------------------------------


def _vnni(w: np.ndarray) -> np.ndarray:
    """``P[x, g, z, q] = W[4g + q, 16x + z]``, zero past K and N."""
    k, n = w.shape
    p = np.zeros((-(-n // 16), -(-k // 4), 16, 4), np.int8)
    for row in range(k):
        for col in range(n):
            p[col // 16, row // 4, col % 16, row % 4] = w[row, col]
    return p


def _int8(zero_point: int | None) -> tuple[Graph, Graph]:
    w = rng().integers(-128, 128, (6, 20)).astype("int8")
    b = GraphBuilder()
    a = b.input("a", (3, 6), "uint8")
    ins = [a, b.param("w", w)]
    if zero_point is not None:
        ins.append(b.param("zp", np.array(zero_point, "uint8")))
    before = b.build(b.node("matmul_integer", ins, (3, 20), "int32"))

    e = GraphBuilder()
    a = e.input("a", (3, 6), "uint8")
    prod = e.node("matmul_int8_packed", [a, e.param("p", _vnni(w))], (3, 20), "int32", n=20, k=6)
    if not zero_point:
        return before, e.build(prod)
    # (A - zp) @ W = A @ W - zp * colsum(W)
    colsum = np.array([sum(int(v) for v in w[:, j]) for j in range(20)], "int32")
    zp32 = e.node(
        "cast", [e.param("zp", np.array(zero_point, "uint8"))], (), "int32", dtype="int32"
    )
    corr = e.node("multiply", [zp32, e.param("colsum", colsum)], (20,), "int32")
    return before, e.build(e.node("subtract", [prod, corr], (3, 20), "int32"))


@expected("pack_int8_weights")
def int8_weights_are_vnni_packed() -> tuple[Graph, Graph]:
    return _int8(None)


@expected("pack_int8_weights")
def a_zero_point_of_a_subtracts_its_product_with_the_column_sums() -> tuple[Graph, Graph]:
    return _int8(3)


@expected("pack_int8_weights")
def a_zero_zero_point_needs_no_correction() -> tuple[Graph, Graph]:
    return _int8(0)


# -- eliminate_dead_code -------------------------------------------------------------------


@expected("eliminate_dead_code")
def dead_nodes_go_with_their_params_and_inputs_stay() -> tuple[Graph, Graph]:
    b = GraphBuilder()
    x, _ = b.input("x", (4, 6)), b.input("unread", (2,))
    b.param("u", np.ones(3, "float32"))  # read by nothing
    a = b.node("relu", [x], (4, 6))
    dead = b.node("add", [x, b.param("w", np.ones((4, 6), "float32"))], (4, 6))
    b.node("exp", [dead], (4, 6))
    before = b.build(a)
    e = GraphBuilder()
    x, _ = e.input("x", (4, 6)), e.input("unread", (2,))
    return before, e.build(e.node("relu", [x], (4, 6)))


# -- fuse_ops ------------------------------------------------------------------------------


@expected("fuse_ops")
def a_matmul_takes_its_epilogue_and_softmax_stays_alone() -> tuple[Graph, Graph]:
    w = np.ones((3, 4), "float32")
    bias = np.ones(4, "float32")

    def g(groups: list[int | None]) -> Graph:
        b = GraphBuilder()
        x = b.input("x", (2, 3))
        m = b.node("matmul", [x, b.param("w", w)], (2, 4), fused=groups[0])
        a = b.node("add", [m, b.param("b", bias)], (2, 4), fused=groups[1])
        r = b.node("relu", [a], (2, 4), fused=groups[2])
        return b.build(b.node("softmax", [r], (2, 4), fused=groups[3], axis=1))

    return g([None] * 4), g([0, 0, 0, 1])


@expected("fuse_ops")
def a_diamond_fuses_whole() -> tuple[Graph, Graph]:
    def g(group: int | None) -> Graph:
        b = GraphBuilder()
        x = b.input("x", (3, 5))
        s = b.node("sigmoid", [x], (3, 5), fused=group)
        t = b.node("tanh", [s], (3, 5), fused=group)
        e = b.node("exp", [s], (3, 5), fused=group)
        return b.build(b.node("add", [t, e], (3, 5), fused=group))

    return g(None), g(0)


@expected("fuse_ops")
def an_intermediate_output_ends_its_group() -> tuple[Graph, Graph]:
    def g(groups: list[int | None]) -> Graph:
        b = GraphBuilder()
        x = b.input("x", (3, 5))
        s = b.node("sigmoid", [x], (3, 5), fused=groups[0])
        return b.build(b.node("exp", [s], (3, 5), fused=groups[1]), s)

    return g([None, None]), g([0, 1])


# -- conv1d_as_2d ---------------------------------------------------------------------------


@expected("conv1d_as_2d")
def a_1d_conv_becomes_a_2d_conv_of_height_1() -> tuple[Graph, Graph]:
    W = rng().standard_normal((4, 3, 5)).astype("float32")
    attrs = {"strides": (2,), "pads": (1, 2), "dilations": (1,), "group": 1}
    b = GraphBuilder()
    x = b.input("x", (1, 3, 20))
    before = b.build(b.node("conv", [x, b.param("W", W)], (1, 4, 9), **attrs))

    e = GraphBuilder()
    x = e.input("x", (1, 3, 20))
    x4 = e.node("reshape", [x], (1, 3, 1, 20), shape=(1, 3, 1, 20))
    w4 = e.param("W4", W.reshape(4, 3, 1, 5))
    attrs4 = {"strides": (1, 2), "pads": (0, 1, 0, 2), "dilations": (1, 1), "group": 1}
    y4 = e.node("conv", [x4, w4], (1, 4, 1, 9), **attrs4)
    return before, e.build(e.node("reshape", [y4], (1, 4, 9), shape=(1, 4, 9)))


# -- conv_as_gemm ---------------------------------------------------------------------------


@expected("conv_as_gemm")
def a_one_channel_conv_over_a_long_window_becomes_im2col_and_a_product() -> tuple[Graph, Graph]:
    W = rng().standard_normal((5, 1, 2, 40)).astype("float32")
    B = rng().standard_normal(5).astype("float32")
    attrs = {"strides": (1, 8), "pads": (0, 3, 1, 3), "dilations": (1, 1), "group": 1}
    b = GraphBuilder()
    x = b.input("x", (1, 1, 3, 70))
    w, bias = b.param("W", W), b.param("B", B)
    before = b.build(b.node("conv", [x, w, bias], (1, 5, 3, 5), **attrs))

    e = GraphBuilder()
    x = e.input("x", (1, 1, 3, 70))
    window = {"kernel": (2, 40), "strides": (1, 8), "pads": (0, 3, 1, 3), "dilations": (1, 1)}
    cols = e.node("im2col", [x], (15, 80), **window)
    prod = e.node("matmul", [cols, e.param("Wk", W.reshape(5, 80).T.copy())], (15, 5))
    prod = e.node("add", [prod, e.param("B", B)], (15, 5))
    per_image = e.node("reshape", [prod], (1, 15, 5), shape=(1, 15, 5))
    first = e.node("transpose", [per_image], (1, 5, 15), perm=(0, 2, 1))
    return before, e.build(e.node("reshape", [first], (1, 5, 3, 5), shape=(1, 5, 3, 5)))


# -- alter_conv_layout ---------------------------------------------------------------------


def _nchwc_weights(w: np.ndarray, cb: int, ob: int) -> np.ndarray:
    """OIHW as ``[O/ob, C/cb, KH, KW, cb, ob]``."""
    O, C, KH, KW = w.shape
    p = np.zeros((-(-O // ob), -(-C // cb), KH, KW, cb, ob), w.dtype)
    for o in range(O):
        for c in range(C):
            p[o // ob, c // cb, :, :, c % cb, o % ob] = w[o, c]
    return p


@expected("alter_conv_layout")
def a_conv_runs_blocked_with_transforms_at_the_edges() -> tuple[Graph, Graph]:
    r = rng()
    W = r.standard_normal((16, 8, 3, 3)).astype("float32")
    B = r.standard_normal(16).astype("float32")
    b = GraphBuilder()
    x = b.input("x", (1, 8, 5, 5))
    c = b.node("conv", [x, b.param("W", W), b.param("B", B)], (1, 16, 5, 5), **CONV)
    before = b.build(b.node("relu", [c], (1, 16, 5, 5)))

    e = GraphBuilder()
    x = e.input("x", (1, 8, 5, 5))
    xb = e.node("layout_transform", [x], (1, 1, 5, 5, 8), src=0, dst=8, channels=8)
    wb, bb = e.param("Wb", _nchwc_weights(W, 8, 16)), e.param("Bb", B.reshape(1, 16))
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
    cb = e.node("conv_nchwc", [xb, wb, bb], (1, 1, 5, 5, 16), **attrs, in_channels=8, channels=16)
    rb = e.node("relu", [cb], (1, 1, 5, 5, 16))
    y = e.node("layout_transform", [rb], (1, 16, 5, 5), src=16, dst=0, channels=16)
    return before, e.build(y)


@expected("alter_conv_layout")
def a_conv_with_few_output_channels_stays_nchw() -> tuple[Graph, Graph]:
    def g() -> Graph:
        b = GraphBuilder()
        x = b.input("x", (1, 8, 5, 5))
        W = np.ones((8, 8, 3, 3), "float32")
        return b.build(b.node("conv", [x, b.param("W", W)], (1, 8, 5, 5), **CONV))

    return g(), g()


# -- fuse_dw_pointwise ---------------------------------------------------------------------

DW = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
PW = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}


def _dw_pw_params(b: GraphBuilder) -> tuple[str, str, str, str]:
    r = rng()
    return (
        b.param("dw", r.standard_normal((2, 3, 3, 16)).astype("float32")),
        b.param("db", r.standard_normal((2, 16)).astype("float32")),
        b.param("pw", r.standard_normal((1, 2, 1, 1, 16, 16)).astype("float32")),
        b.param("pb", r.standard_normal((1, 16)).astype("float32")),
    )


DW_PW = {**DW, "channels": 32, "min": 0.0, "max": 6.0, "out_channels": 16}  # the fused node's


def _dw_clip_pw(h: int, w: int) -> Graph:
    """dwconv_nchwc (32 channels) -> clip [0, 6] -> 1x1 conv_nchwc to 16, at ``h x w``."""
    b = GraphBuilder()
    x = b.input("x", (1, 2, h, w, 16))
    dw, db, pw, pb = _dw_pw_params(b)
    d = b.node("dwconv_nchwc", [x, dw, db], (1, 2, h, w, 16), **DW, channels=32)
    c = b.node("clip", [d], (1, 2, h, w, 16), min=0.0, max=6.0)
    y = b.node("conv_nchwc", [c, pw, pb], (1, 1, h, w, 16), **PW, in_channels=32, channels=16)
    return b.build(y)


@expected("fuse_dw_pointwise")
def a_large_depthwise_clip_pointwise_chain_is_one_node() -> tuple[Graph, Graph]:
    h, w = 128, 64  # the depthwise output is 1 MB: MIN_BYTES
    e = GraphBuilder()
    x = e.input("x", (1, 2, h, w, 16))
    dw, db, pw, pb = _dw_pw_params(e)
    y = e.node("dwconv_pw_nchwc", [x, dw, db, pw, pb], (1, 1, h, w, 16), **DW_PW)
    g = e.build(y)
    fused = replace(g.nodes[0], op_type="Conv_nchwc")  # the 1x1 conv's, whose name it keeps
    return _dw_clip_pw(h, w), replace(g, nodes=[fused])


@expected("fuse_dw_pointwise")
def a_small_depthwise_output_stays_apart() -> tuple[Graph, Graph]:
    return _dw_clip_pw(9, 7), _dw_clip_pw(9, 7)


# -- fuse_expand_dw_pointwise ----------------------------------------------------------------


def _expand_params(b: GraphBuilder) -> tuple[str, str]:
    r = np.random.default_rng(1)
    return (
        b.param("ew", r.standard_normal((2, 1, 1, 1, 16, 16)).astype("float32")),
        b.param("eb", r.standard_normal((2, 16)).astype("float32")),
    )


def _expand_clip_block(h: int, w: int) -> Graph:
    """1x1 conv_nchwc 16 -> 32 channels -> clip [0, 6] -> dwconv_pw_nchwc, at ``h x w``."""
    b = GraphBuilder()
    x = b.input("x", (1, 1, h, w, 16))
    ew, eb = _expand_params(b)
    dw, db, pw, pb = _dw_pw_params(b)
    e = b.node("conv_nchwc", [x, ew, eb], (1, 2, h, w, 16), **PW, in_channels=16, channels=32)
    c = b.node("clip", [e], (1, 2, h, w, 16), min=0.0, max=6.0)
    y = b.node("dwconv_pw_nchwc", [c, dw, db, pw, pb], (1, 1, h, w, 16), **DW_PW)
    return b.build(y)


@expected("fuse_expand_dw_pointwise")
def a_large_expand_conv_and_its_clip_join_the_block() -> tuple[Graph, Graph]:
    h, w = 128, 96  # the expanded tensor is 1.5 MB: MIN_BYTES
    e = GraphBuilder()
    x = e.input("x", (1, 1, h, w, 16))
    ew, eb = _expand_params(e)
    dw, db, pw, pb = _dw_pw_params(e)
    attrs = {**DW_PW, "in_channels": 16, "expand_min": 0.0, "expand_max": 6.0}
    y = e.node("expand_dwconv_pw_nchwc", [x, ew, eb, dw, db, pw, pb], (1, 1, h, w, 16), **attrs)
    g = e.build(y)
    fused = replace(g.nodes[0], op_type="Dwconv_pw_nchwc")  # the block's, whose name it keeps
    return _expand_clip_block(h, w), replace(g, nodes=[fused])


@expected("fuse_expand_dw_pointwise")
def a_small_expanded_tensor_stays_apart() -> tuple[Graph, Graph]:
    return _expand_clip_block(9, 7), _expand_clip_block(9, 7)


# -- fuse_attention ------------------------------------------------------------------------

B, S, H, D = 2, 5, 3, 4  # scores [B, H, S, S]; a BERT-style [B, S, H*D] -> [B, S, H, D]
BHSD, BSHD, BSE = (0, 2, 1, 3), (B, S, H, D), (B, S, H * D)
NO_SPLIT = {"q_split": 0, "k_split": 0, "v_split": 0, "out_split": 0}


def _heads(b: GraphBuilder, x: str, perm: tuple[int, ...]) -> str:
    """``x`` [B, S, H*D] reshaped into heads and transposed by ``perm``."""
    split = b.node("reshape", [x], BSHD, shape=BSHD)
    return b.node("transpose", [split], tuple(BSHD[p] for p in perm), perm=perm)


@expected("fuse_attention")
def bert_attention_becomes_one_node_reading_the_unsplit_heads() -> tuple[Graph, Graph]:
    b = GraphBuilder()
    q, k, v = (b.input(n, BSE) for n in "qkv")
    mask = b.input("mask", (B, 1, 1, S))
    kt = _heads(b, k, (0, 2, 3, 1))  # K^T [B, H, D, S], as exporters write it
    s = b.node("matmul", [_heads(b, q, BHSD), kt], (B, H, S, S))
    s = b.node("divide", [s, b.param("c", np.array(8.0, "float32"))], (B, H, S, S))
    s = b.node("softmax", [b.node("add", [s, mask], (B, H, S, S))], (B, H, S, S), axis=3)
    ctx = b.node("matmul", [s, _heads(b, v, BHSD)], (B, H, S, D))
    merged = b.node("transpose", [ctx], BSHD, perm=BHSD)
    before = b.build(b.node("reshape", [merged], BSE, shape=BSE))

    e = GraphBuilder()
    q, k, v = (e.input(n, BSE) for n in "qkv")
    mask = e.input("mask", (B, 1, 1, S))
    _heads(e, k, (0, 2, 3, 1)), _heads(e, q, BHSD), e.param("c", np.array(8.0, "float32"))
    _heads(e, v, BHSD)  # the reshapes and transposes stay for dead-code elimination
    axes = {"q_axes": BHSD, "k_axes": BHSD, "v_axes": BHSD, "out_axes": BHSD}
    splits = {"q_split": D, "k_split": D, "v_split": D, "out_split": D}
    fused = e.node("attention", [q, k, v, mask], BSE, scale=0.125, **axes, **splits)
    return before, e.build(fused)


@expected("fuse_attention")
def a_multiplied_scale_and_k_given_transposed_fuse_without_a_mask() -> tuple[Graph, Graph]:
    def g(fused: bool) -> Graph:
        b = GraphBuilder()
        q, kt, v = (
            b.input("q", (B, H, S, D)),
            b.input("kt", (B, H, D, S + 2)),
            b.input("v", (B, H, S + 2, 7)),
        )
        c = b.param("c", np.full((1, 1, 1, 1), 0.5, "float32"))
        if fused:
            axes = {
                "q_axes": (0, 1, 2, 3),
                "k_axes": (0, 1, 3, 2),
                "v_axes": (0, 1, 2, 3),
                "out_axes": (0, 1, 2, 3),
            }
            attention = b.node("attention", [q, kt, v], (B, H, S, 7), scale=0.5, **axes, **NO_SPLIT)
            return b.build(attention)
        s = b.node("matmul", [q, kt], (B, H, S, S + 2))
        s = b.node(
            "softmax", [b.node("multiply", [c, s], (B, H, S, S + 2))], (B, H, S, S + 2), axis=3
        )
        return b.build(b.node("matmul", [s, v], (B, H, S, 7)))

    return g(False), g(True)


def _near_miss(axis: int = 3, scale: np.ndarray | None = None, shared: bool = False) -> Graph:
    b = GraphBuilder()
    q, kt, v = b.input("q", (B, H, S, D)), b.input("kt", (B, H, D, S)), b.input("v", (B, H, S, D))
    s = b.node("matmul", [q, kt], (B, H, S, S))
    if scale is not None:
        s = b.node("divide", [s, b.param("c", scale)], (B, H, S, S))
    p = b.node("softmax", [s], (B, H, S, S), axis=axis)
    out = b.node("matmul", [p, v], (B, H, S, D))
    return b.build(out, s) if shared else b.build(out)


@expected("fuse_attention")
def a_softmax_over_another_axis_is_left_alone() -> tuple[Graph, Graph]:
    return _near_miss(axis=2), _near_miss(axis=2)


@expected("fuse_attention")
def a_scale_of_more_than_one_element_is_left_alone() -> tuple[Graph, Graph]:
    c = np.array([1.0, 2.0, 3.0, 4.0, 5.0], "float32")  # one scale per key: not a scalar
    return _near_miss(scale=c), _near_miss(scale=c)


@expected("fuse_attention")
def scores_read_elsewhere_are_left_alone() -> tuple[Graph, Graph]:
    c = np.array(2.0, "float32")
    return _near_miss(scale=c, shared=True), _near_miss(scale=c, shared=True)


# -- fuse_cache_append ---------------------------------------------------------------------

IDENTITY_AXES = {f"{w}_axes": (0, 1, 2, 3) for w in ("q", "k", "v", "out")}


def _decode_step(
    fused: bool, queries: int = 1, past: int = 6, extra_reader: bool = False, parts: int = 2
) -> Graph:
    """A decode step's attention over a cache with the new key and value appended (GPT-2's
    ``present`` outputs), as ``fuse_attention`` leaves it, or fused into one node."""
    b = GraphBuilder()
    q = b.input("q", (1, H, queries, D))
    caches, present = [], []
    for kind in "kv":
        parts_in = [b.input(f"past_{kind}", (1, H, past, D))]
        parts_in += [b.input(f"new_{kind}{i}", (1, H, 1, D)) for i in range(parts - 1)]
        caches.append(parts_in)
        present.append((f"present_{kind}", (1, H, past + parts - 1, D)))
    mask = b.input("mask", (1, 1, queries, past + parts - 1))
    attrs = {"scale": 0.5, **IDENTITY_AXES, **NO_SPLIT}
    if fused:
        out = b._value("ctx", (1, H, queries, D), "float32")
        for name, shape in present:
            b._value(name, shape, "float32")
        inputs = (q, *caches[0], *caches[1], mask)
        outputs = (out, *(name for name, _ in present))
        b.nodes.append(Node("cached_attention", "ctx", inputs, outputs, attrs, "Attention"))
        return b.build(*outputs)
    k, v = (
        b.node("concat", parts_in, shape, out=name, axis=2)
        for parts_in, (name, shape) in zip(caches, present)
    )
    out = b.node("attention", [q, k, v, mask], (1, H, queries, D), out="ctx", **attrs)
    extra = [b.node("relu", [k], present[0][1])] if extra_reader else []
    return b.build(out, k, v, *extra)


@expected("fuse_cache_append")
def a_decode_steps_cache_append_joins_its_attention() -> tuple[Graph, Graph]:
    return _decode_step(False), _decode_step(True)


@expected("fuse_cache_append")
def an_append_for_several_query_rows_is_left_alone() -> tuple[Graph, Graph]:
    return _decode_step(False, queries=2), _decode_step(False, queries=2)


@expected("fuse_cache_append")
def a_cache_read_elsewhere_is_left_alone() -> tuple[Graph, Graph]:
    return _decode_step(False, extra_reader=True), _decode_step(False, extra_reader=True)


@expected("fuse_cache_append")
def a_concat_of_three_is_left_alone() -> tuple[Graph, Graph]:
    return _decode_step(False, parts=3), _decode_step(False, parts=3)


# -- fuse_gelu -----------------------------------------------------------------------------

GX = (2, 3, 8)


def _c(b: GraphBuilder, name: str, value: float, shape: tuple[int, ...] = ()) -> str:
    return b.param(name, np.full(shape, value, dtype="float32"))


def _gelu_erf_chain(b: GraphBuilder, x: str, form: str = "div", root: float = 2.0) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2))) as exporters write it: ``form`` "div" divides by
    the root and multiplies x first, "mul" multiplies by its reciprocal and halves x
    first, each binary node with its operands the other way round."""
    if form == "div":
        t = b.node("divide", [x, _c(b, "r", np.sqrt(root))], GX)
    else:
        t = b.node("multiply", [_c(b, "r", 1 / np.sqrt(root)), x], GX)
    one = b.node("add", [_c(b, "one", 1.0), b.node("erf", [t], GX)], GX)
    if form == "div":
        return b.node("multiply", [b.node("multiply", [x, one], GX), _c(b, "half", 0.5)], GX)
    return b.node("multiply", [one, b.node("multiply", [_c(b, "half", 0.5), x], GX)], GX)


def _gelu_fused(form: str, approximate: str = "none") -> Graph:
    e = GraphBuilder()
    x = e.input("x", GX)
    if approximate == "none":
        r = 1 / np.sqrt(2.0) if form == "mul" else np.sqrt(2.0)
        for name, v in (("r", r), ("one", 1.0), ("half", 0.5)):
            _c(e, name, v)  # the chain's constants stay until dead-code elimination
    else:
        for name, v in (
            ("three", 3.0),
            ("k", 0.044715),
            ("s", np.sqrt(2 / np.pi)),
            ("one", 1.0),
            ("half", 0.5),
        ):
            _c(e, name, v)
    return e.build(e.node("relu", [e.node("gelu", [x], GX, approximate=approximate)], GX))


@expected("fuse_gelu")
def an_erf_gelu_dividing_by_the_root_is_one_gelu() -> tuple[Graph, Graph]:
    b = GraphBuilder()
    before = b.build(b.node("relu", [_gelu_erf_chain(b, b.input("x", GX))], GX))
    return before, _gelu_fused("div")


@expected("fuse_gelu")
def an_erf_gelu_by_the_reciprocal_with_x_halved_first_is_one_gelu() -> tuple[Graph, Graph]:
    b = GraphBuilder()
    before = b.build(b.node("relu", [_gelu_erf_chain(b, b.input("x", GX), "mul")], GX))
    return before, _gelu_fused("mul")


@expected("fuse_gelu")
def gpt2s_tanh_gelu_with_pow_is_one_tanh_gelu() -> tuple[Graph, Graph]:
    b = GraphBuilder()
    x = b.input("x", GX)
    three, k = _c(b, "three", 3.0), _c(b, "k", 0.044715)
    s, one, half = _c(b, "s", np.sqrt(2 / np.pi)), _c(b, "one", 1.0), _c(b, "half", 0.5)
    cube = b.node("multiply", [b.node("pow", [x, three], GX), k], GX)
    inner = b.node("multiply", [s, b.node("add", [x, cube], GX)], GX)
    y = b.node("add", [b.node("tanh", [inner], GX), one], GX)
    before = b.build(
        b.node("relu", [b.node("multiply", [b.node("multiply", [x, half], GX), y], GX)], GX)
    )
    return before, _gelu_fused("", "tanh")


@expected("fuse_gelu")
def a_root_of_three_is_left_alone() -> tuple[Graph, Graph]:
    def graph() -> Graph:
        b = GraphBuilder()
        return b.build(_gelu_erf_chain(b, b.input("x", GX), root=3.0))

    return graph(), graph()


@expected("fuse_gelu")
def an_erf_read_outside_the_chain_is_left_alone() -> tuple[Graph, Graph]:
    def graph() -> Graph:
        b = GraphBuilder()
        y = _gelu_erf_chain(b, b.input("x", GX))
        return b.build(y, b.nodes[1].outputs[0])  # the erf is also an output

    return graph(), graph()


@expected("fuse_gelu")
def a_half_that_grows_the_shape_is_left_alone() -> tuple[Graph, Graph]:
    """0.5 of shape (1, 1, 1, 1) makes the product 4-D: a gelu node would keep x's 3-D."""

    def graph() -> Graph:
        b = GraphBuilder()
        x = b.input("x", GX)
        t = b.node("divide", [x, _c(b, "r", np.sqrt(2.0))], GX)
        one = b.node("add", [b.node("erf", [t], GX), _c(b, "one", 1.0)], GX)
        xy = b.node("multiply", [x, one], GX)
        return b.build(b.node("multiply", [xy, _c(b, "half", 0.5, (1, 1, 1, 1))], (1, *GX)))

    return graph(), graph()


# -- fuse_layer_norm -----------------------------------------------------------------------

LN = (2, 3, 6)  # normalized over the last axis


def _decomposed_ln(b: GraphBuilder, x: str, square: str = "pow", exponent: float = 2.0) -> str:
    """LayerNorm as exporters before opset 17 write it, up to the division."""
    mu = b.node("reduce", [x], (2, 3, 1), kind="mean", axes=(2,), keepdims=True)
    d = b.node("subtract", [x, mu], LN)
    if square == "pow":
        sq = b.node("pow", [d, b.param("two", np.array(exponent, "float32"))], LN)
    else:
        sq = b.node("multiply", [d, d], LN)
    var = b.node("reduce", [sq], (2, 3, 1), kind="mean", axes=(2,), keepdims=True)
    root = b.node(
        "sqrt",
        [b.node("add", [var, b.param("eps", np.array(1e-5, "float32"))], (2, 3, 1))],
        (2, 3, 1),
    )
    return b.node("divide", [d, root], LN)


@expected("fuse_layer_norm")
def a_decomposed_layer_norm_with_gamma_and_beta_is_one_normalize() -> tuple[Graph, Graph]:
    g, beta = np.linspace(0.5, 1.5, 6, dtype="float32"), np.linspace(-1, 1, 6, dtype="float32")
    b = GraphBuilder()
    x = b.input("x", LN)
    y = b.node("multiply", [_decomposed_ln(b, x), b.param("g", g)], LN)
    before = b.build(b.node("relu", [b.node("add", [y, b.param("beta", beta)], LN)], LN))

    e = GraphBuilder()
    x = e.input("x", LN)
    e.param("two", np.array(2.0, "float32")), e.param("eps", np.array(1e-5, "float32"))
    attrs = {"axes": (2,), "eps": float(np.float32(1e-5)), "center": True, "acc": "float32"}
    n = e.node("normalize", [x, e.param("g", g), e.param("beta", beta)], LN, **attrs)
    return before, e.build(e.node("relu", [n], LN))


@expected("fuse_layer_norm")
def an_rms_norm_with_a_reciprocal_is_an_uncentred_normalize() -> tuple[Graph, Graph]:
    g = np.linspace(0.5, 1.5, 6, dtype="float32")

    def graph(fused: bool) -> Graph:
        b = GraphBuilder()
        x = b.input("x", LN)
        eps, gp = b.param("eps", np.array(1e-6, "float32")), b.param("g", g)
        if fused:
            attrs = {
                "axes": (2,),
                "eps": float(np.float32(1e-6)),
                "center": False,
                "acc": "float32",
            }
            return b.build(b.node("normalize", [x, gp], LN, **attrs))
        var = b.node(
            "reduce",
            [b.node("multiply", [x, x], LN)],
            (2, 3, 1),
            kind="mean",
            axes=(2,),
            keepdims=True,
        )
        root = b.node("sqrt", [b.node("add", [eps, var], (2, 3, 1))], (2, 3, 1))
        y = b.node("multiply", [x, b.node("reciprocal", [root], (2, 3, 1))], LN)
        return b.build(b.node("multiply", [gp, y], LN))

    return graph(False), graph(True)


@expected("fuse_layer_norm")
def a_cube_instead_of_a_square_is_left_alone() -> tuple[Graph, Graph]:
    def graph() -> Graph:
        b = GraphBuilder()
        return b.build(_decomposed_ln(b, b.input("x", LN), exponent=3.0))

    return graph(), graph()


@expected("fuse_layer_norm")
def a_mean_read_outside_the_chain_is_left_alone() -> tuple[Graph, Graph]:
    def graph() -> Graph:
        b = GraphBuilder()
        y = _decomposed_ln(b, b.input("x", LN), square="multiply")
        return b.build(y, b.nodes[0].outputs[0])  # the mean is also an output

    return graph(), graph()


def _ln_with(op: str, made: int) -> Graph:
    """The decomposed norm's result, scaled by a constant gamma first where ``op`` adds,
    and then by ``op``, the value its node number ``made`` makes."""
    b = GraphBuilder()
    y = _decomposed_ln(b, b.input("x", LN))
    d2 = b.nodes[made].outputs[0]
    if op == "add":
        y = b.node("multiply", [y, b.param("g", np.linspace(0.5, 1.5, 6, dtype="float32"))], LN)
    return b.build(b.node(op, [y, d2], LN))


@expected("fuse_layer_norm")
def beta_made_inside_the_chain_is_left_alone() -> tuple[Graph, Graph]:
    """``y * g + d²`` with beta the chain's own square: every reader of the square is in
    the chain, but a fused node cannot read what it removes (a random transformer graph,
    seed 989, raised InternalError here: a residual add read the square)."""
    return _ln_with("add", 2), _ln_with("add", 2)


@expected("fuse_layer_norm")
def gamma_made_inside_the_chain_is_left_alone() -> tuple[Graph, Graph]:
    """``y * d`` with gamma the centred input."""
    return _ln_with("multiply", 1), _ln_with("multiply", 1)


# -- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, case",
    [(name, case) for name, cases in CASES.items() for case in cases],
    ids=lambda v: v.__name__ if callable(v) else v,
)
def test_pass_gives_the_expected_graph(name: str, case: Case):
    before, want = case()
    untouched, _ = case()
    got = run_graph_passes(before, [all_graph_passes()[name]])
    assert_graph_equal(got, want)
    assert_graph_equal(before, untouched)  # passes never mutate their input


def test_every_graph_pass_has_a_case():
    missing = sorted(set(all_graph_passes()) - set(CASES))
    assert not missing, f"graph passes without a Before/Expected case: {missing}"
    assert {p.name for p in DEFAULT_PASSES} <= set(CASES)


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
