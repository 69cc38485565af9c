"""``alter_conv_layout``: Before/Expected on small graphs, and models through
``ember.compile`` (where ``llvm`` runs the pass by default) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import ember
from ember.frontend.passes import (
    DEFAULT_PASSES,
    alter_conv_layout,
    alter_conv_layout_with,
    fuse_ops,
    run_graph_passes,
)
from ember.frontend.passes.conv_blocks import ConvWorkload, channel_block, default_blocks
from ember.tir.topi.conv_nchwc import pack_nchwc_weights
from tests.frontend.onnx_models import make_model, run_ort
from tests.nightly import examples, sample_in_ci

pytest.importorskip("onnxruntime")
n = helper.make_node


def default_graph_passes(kind: str) -> tuple[object, ...]:
    """The graph passes ``ember.compile`` runs for ``kind`` (its backend's list)."""
    return ember.get_backend(kind).graph_passes(DEFAULT_PASSES)


def _w(rng, *shape):  # noqa: ANN001, ANN202
    return (rng.standard_normal(shape) * 0.2).astype("float32")


def conv_chain(rng, c=13, o=32, h=9, w=11):  # noqa: ANN001, ANN202
    """conv-relu-conv-add(residual)-relu-flatten: a blocked chain ending at a boundary."""
    weights = {"W1": _w(rng, o, c, 3, 3), "B1": _w(rng, o), "W2": _w(rng, o, o, 3, 3)}
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        n("Add", ["c2", "r1"], ["s"], name="add"),
        n("Relu", ["s"], ["r2"], name="relu2"),
        n("Flatten", ["r2"], ["f"], name="flatten"),
    ]
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    return make_model(nodes, {"x": x}, ["f"], weights), {"x": x}


def ops(g):  # noqa: ANN001, ANN202
    return [(nd.op, nd.inputs, nd.outputs) for nd in g.nodes]


def test_a_conv_chain_stays_blocked_up_to_flatten(rng):  # noqa: ANN001
    model, _ = conv_chain(rng)
    before = ember.frontend.from_onnx(model)
    after = run_graph_passes(before, [alter_conv_layout])
    w1, b1, w2 = "W1_nchwc", "B1_nchwc", "W2_nchwc"
    assert ops(after) == [
        ("layout_transform", ("x",), ("x_nchw13c",)),
        ("conv_nchwc", ("x_nchw13c", w1, b1), ("c1_nchw32c",)),
        ("relu", ("c1_nchw32c",), ("r1_nchw32c",)),
        ("conv_nchwc", ("r1_nchw32c", w2), ("c2_nchw32c",)),
        ("add", ("c2_nchw32c", "r1_nchw32c"), ("s_nchw32c",)),
        ("relu", ("s_nchw32c",), ("r2_nchw32c",)),
        ("layout_transform", ("r2_nchw32c",), ("r2",)),
        ("reshape", ("r2",), ("f",)),
    ]
    first, *_, back, _ = after.nodes
    assert first.attrs == {"src": 0, "dst": 13, "channels": 13}
    assert back.attrs == {"src": 32, "dst": 0, "channels": 32}
    assert after.nodes[1].attrs == {
        "strides": (1, 1),
        "pads": (1, 1, 1, 1),
        "dilations": (1, 1),
        "in_channels": 13,
        "channels": 32,
    }
    np.testing.assert_array_equal(after.params[w1], pack_nchwc_weights(before.params["W1"], 13, 32))
    assert after.params[b1].shape == (1, 32) and after.params[w2].shape == (1, 1, 3, 3, 32, 32)
    assert set(after.params) == {w1, b1, w2}  # the NCHW weights are gone
    assert after.values["c2_nchw32c"].shape == (1, 1, 9, 11, 32)


def test_blocks_pad_channels_and_constants_are_relaid(rng):  # noqa: ANN001
    """20 output channels in blocks of 16 (zero lanes past 20), a per-channel Mul, a
    max pool (ceil mode, padding) and a global average pool run blocked, and the three
    graph outputs transformed back at the end."""
    weights = {"W": _w(rng, 20, 5, 3, 3), "S": _w(rng, 1, 20, 1, 1)}
    nodes = [
        n("Conv", ["x", "W"], ["c"], name="conv", pads=[0, 1, 1, 0], strides=[2, 1]),
        n("Mul", ["c", "S"], ["m"], name="scale"),
        n("Sigmoid", ["m"], ["y"], name="act"),
        n(
            "MaxPool",
            ["y"],
            ["p"],
            name="pool",
            kernel_shape=[3, 2],
            pads=[1, 0, 0, 1],
            ceil_mode=1,
        ),
        n("GlobalAveragePool", ["y"], ["g"], name="gap"),
    ]
    x = rng.standard_normal((2, 5, 8, 7)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y", "p", "g"], weights)
    after = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    assert [nd.op for nd in after.nodes] == [
        "layout_transform",
        "conv_nchwc",
        "multiply",
        "sigmoid",
        "max_pool_nchwc",
        "avg_pool_nchwc",
        "layout_transform",
        "layout_transform",
        "layout_transform",
    ]
    assert after.params["S_nchw16c"].shape == (1, 2, 1, 1, 16)
    assert not after.params["S_nchw16c"][0, 1, 0, 0, 4:].any()  # lanes past 20
    assert [nd.outputs for nd in after.nodes[-3:]] == [("y",), ("p",), ("g",)]
    want = run_ort(model, {"x": x})
    got = ember.compile(after, graph_passes=[fuse_ops]).run({"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "channels,block",
    [(24, 8), (40, 8), (120, 8), (136, 16), (1000, 16), (20, 16), (13, 13), (96, 32), (48, 16)],
)
def test_channel_blocks(channels, block):
    """Half a register only below eight registers of channels; zero-padded above."""
    assert channel_block(channels) == block


def test_a_classifier_conv_of_1000_channels_runs_padded_blocks(rng):  # noqa: ANN001
    """SqueezeNet's head: a 1x1 conv to 1,000 channels, ReLU, global average pool; its
    output lanes 1,000..1,007 are zero padding that the pool never reads."""
    weights = {"W": _w(rng, 1000, 24, 1, 1), "B": _w(rng, 1000)}
    nodes = [
        n("Conv", ["x", "W", "B"], ["c"], name="conv"),
        n("Relu", ["c"], ["r"], name="relu"),
        n("GlobalAveragePool", ["r"], ["g"], name="gap"),
    ]
    x = rng.standard_normal((1, 24, 5, 3)).astype("float32")
    model = make_model(nodes, {"x": x}, ["g"], weights)
    after = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    conv = next(nd for nd in after.nodes if nd.op == "conv_nchwc")
    assert after.values[conv.outputs[0]].type.shape == (1, 63, 5, 3, 16)
    got = ember.compile(model).run({"x": x})[0]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,extra", [("Sum", 0), ("Sum", 1), ("Max", 0), ("Mean", 1)])
def test_a_variadic_residual_stays_blocked(op, extra, rng):  # noqa: ANN001
    """Caffe2-exported ResNets add the shortcut with ONNX Sum: it stays blocked, like Add
    (it went back to NCHW and forward again around every residual: 8 of ResNet-50's 87 ms)."""
    weights = {"W1": _w(rng, 32, 13, 3, 3), "W2": _w(rng, 32, 32, 1, 1)}
    weights["S"] = _w(rng, 1, 32, 1, 1)
    nodes = [
        n("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "W2"], ["c2"], name="conv2"),
        n(op, ["c2", "r1", *(["S"] * extra)], ["s"], name="residual"),
        n("Relu", ["s"], ["y"], name="relu2"),
    ]
    x = rng.standard_normal((1, 13, 7, 9)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], weights)
    after = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    assert [nd.op for nd in after.nodes].count("layout_transform") == 2  # in and out only
    got = ember.compile(model).run({"x": x})[0]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_convs_it_does_not_take_stay(rng):  # noqa: ANN001
    """Few output channels (the rule), groups, and float64 keep their NCHW conv."""
    weights = {"W": _w(rng, 8, 4, 3, 3), "G": _w(rng, 32, 2, 3, 3)}
    nodes = [
        n("Conv", ["x", "W"], ["a"], name="narrow"),
        n("Conv", ["x", "G"], ["b"], name="grouped", group=2),
    ]
    x = rng.standard_normal((1, 4, 6, 6)).astype("float32")
    g = ember.frontend.from_onnx(make_model(nodes, {"x": x}, ["a", "b"], weights))
    assert alter_conv_layout(g) is g
    assert default_blocks(ConvWorkload(1, 4, 6, 6, 8, 3, 3, (1, 1), (0,) * 4, (1, 1))) is None


def inverted_residual(rng, c=16, e=32, hw=9, stride=1, pads=(1, 1, 1, 1), relu_first=True):  # noqa: ANN001, ANN202
    """MobileNetV2's block: 1x1 expand, ReLU, depthwise 3x3, 1x1 project (+ residual)."""
    weights = {
        "E": _w(rng, e, c, 1, 1),
        "D": _w(rng, e, 1, 3, 3),
        "DB": _w(rng, e),
        "P": _w(rng, c, e, 1, 1),
    }
    nodes = [
        n("Conv", ["x", "E"], ["e"], name="expand"),
        n("Relu", ["e"], ["er"], name="relu"),
        n(
            "Conv",
            ["er" if relu_first else "e", "D", "DB"],
            ["d"],
            name="dw",
            group=e,
            pads=list(pads),
            strides=[stride, stride],
        ),  # fmt: skip
        n("Conv", ["d", "P"], ["p"], name="project"),
    ]
    out = "p"
    if stride == 1:
        nodes.append(n("Add", ["p", "x"], ["y"], name="residual"))
        out = "y"
    x = rng.standard_normal((1, c, hw, hw)).astype("float32")
    return make_model(nodes, {"x": x}, [out], weights), {"x": x}


def test_a_depthwise_conv_stays_in_its_inputs_blocks(rng):  # noqa: ANN001
    """An inverted-residual block stays blocked from the expand conv to the residual add:
    the depthwise conv takes its input's block, its weights and bias blocked here."""
    from ember.tir.topi.conv_nchwc import pack_nchwc_depthwise_weights

    model, _ = inverted_residual(rng)
    before = ember.frontend.from_onnx(model)
    after = run_graph_passes(before, [alter_conv_layout])
    assert ops(after) == [
        ("layout_transform", ("x",), ("x_nchw16c",)),
        ("conv_nchwc", ("x_nchw16c", "E_nchwc"), ("e_nchw32c",)),
        ("relu", ("e_nchw32c",), ("er_nchw32c",)),
        ("dwconv_nchwc", ("er_nchw32c", "D_nchwc", "DB_nchwc"), ("d_nchw32c",)),
        ("conv_nchwc", ("d_nchw32c", "P_nchwc"), ("p_nchw16c",)),
        ("add", ("p_nchw16c", "x_nchw16c"), ("y_nchw16c",)),
        ("layout_transform", ("y_nchw16c",), ("y",)),
    ]
    dw = after.nodes[3]
    assert dw.attrs == {
        "strides": (1, 1),
        "pads": (1, 1, 1, 1),
        "dilations": (1, 1),
        "channels": 32,
    }
    np.testing.assert_array_equal(
        after.params["D_nchwc"], pack_nchwc_depthwise_weights(before.params["D"], 32)
    )
    assert after.params["DB_nchwc"].shape == (1, 32)


def test_depthwise_convs_it_does_not_take_stay(rng):  # noqa: ANN001
    """A depthwise conv on an NCHW input (no blocked producer), a grouped conv that is not
    depthwise, and a channel multiplier of 2 keep their NCHW conv."""
    weights = {"D": _w(rng, 8, 1, 3, 3), "G": _w(rng, 8, 4, 3, 3), "M": _w(rng, 16, 1, 3, 3)}
    nodes = [
        n("Conv", ["x", "D"], ["a"], name="dw_on_input", group=8),
        n("Conv", ["x", "G"], ["b"], name="grouped", group=2),
        n("Conv", ["x", "M"], ["c"], name="multiplier2", group=8),
    ]
    x = rng.standard_normal((1, 8, 6, 6)).astype("float32")
    g = ember.frontend.from_onnx(make_model(nodes, {"x": x}, ["a", "b", "c"], weights))
    assert alter_conv_layout(g) is g


@pytest.mark.parametrize(
    "case",
    [
        {"c": 16, "e": 32, "hw": 9},
        {"c": 24, "e": 144, "hw": 7, "stride": 2},  # blocks of 8 and 16, a strided dw
        {"c": 16, "e": 40, "hw": 8, "stride": 2, "pads": (0, 1, 1, 0), "relu_first": False},
    ],
    ids=str,
)
def test_inverted_residual_blocks_match_onnxruntime(case, rng):  # noqa: ANN001
    model, inputs = inverted_residual(rng, **case)
    graph = run_graph_passes(ember.frontend.from_onnx(model), default_graph_passes("llvm"))
    assert "dwconv_nchwc" in {nd.op for nd in graph.nodes}
    lib = ember.compile(model, target="llvm")
    for got, want in zip(lib.run(inputs), run_ort(model, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_chooser_picks_the_blocks_and_mismatches_reblock(rng):  # noqa: ANN001
    """A chooser's blocks; a conv reading a blocked value keeps its block."""
    model, inputs = conv_chain(rng, c=16, o=32)
    g = ember.frontend.from_onnx(model)
    told = []
    chooser = lambda w, b, want: told.append((b, want)) or (8, 16)  # noqa: E731
    after = run_graph_passes(g, [alter_conv_layout_with(chooser)])
    # the second conv is told its input's block, and that its output meets r1 (block 16)
    assert told == [(None, None), (16, 16)]
    convs = [nd for nd in after.nodes if nd.op == "conv_nchwc"]
    assert [after.params[c.inputs[1]].shape[4:] for c in convs] == [(8, 16), (16, 16)]
    got = ember.compile(after, graph_passes=[fuse_ops]).run(inputs)
    np.testing.assert_allclose(got[0], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


def test_an_add_of_two_blocks_reblocks_one_operand(rng):  # noqa: ANN001
    """conv2's output block (32) differs from the residual's (16): the add stays blocked,
    in the first operand's block, with one transform of the other (not both to NCHW)."""
    model, _ = conv_chain(rng, c=13, o=32)
    chooser = lambda w, b, want: (13, 16) if b is None else (b, 32)  # noqa: E731
    after = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout_with(chooser)])
    assert ops(after) == [
        ("layout_transform", ("x",), ("x_nchw13c",)),
        ("conv_nchwc", ("x_nchw13c", "W1_nchwc", "B1_nchwc"), ("c1_nchw16c",)),
        ("relu", ("c1_nchw16c",), ("r1_nchw16c",)),
        ("conv_nchwc", ("r1_nchw16c", "W2_nchwc"), ("c2_nchw32c",)),
        ("layout_transform", ("r1_nchw16c",), ("r1_nchw32c",)),
        ("add", ("c2_nchw32c", "r1_nchw32c"), ("s_nchw32c",)),
        ("relu", ("s_nchw32c",), ("r2_nchw32c",)),
        ("layout_transform", ("r2_nchw32c",), ("r2",)),
        ("reshape", ("r2",), ("f",)),
    ]
    assert after.nodes[4].attrs == {"src": 16, "dst": 32, "channels": 32}
    # run against onnxruntime: tests/codegen_llvm/test_conv_layout_records.py (fallback)


def test_a_conv_is_told_the_block_its_output_is_added_to(rng):  # noqa: ANN001
    """A shortcut conv after the main path (a ResNet's downsampling block) is told the
    main path's block as the one it wants: the add needs no transform when it takes it."""
    weights = {"W0": _w(rng, 16, 5, 3, 3), "W1": _w(rng, 32, 16, 3, 3), "W2": _w(rng, 32, 16, 1, 1)}
    nodes = [
        n("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1]),
        n("Conv", ["c0", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Conv", ["c0", "W2"], ["c2"]),
        n("Relu", ["c2"], ["r2"]),
        n("Add", ["c1", "r2"], ["y"]),
    ]
    x = rng.standard_normal((1, 5, 6, 7)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], weights)
    told = []

    def chooser(w, b, want):  # noqa: ANN001, ANN202
        told.append((w.C, b, want))
        return (5, 16) if b is None else (b, want if w.KH == 1 else 8)

    after = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout_with(chooser)])
    assert told == [(5, None, None), (16, 16, 16), (16, 16, 8)]
    assert [nd.op for nd in after.nodes].count("layout_transform") == 2  # x in, y out
    got = ember.compile(after, graph_passes=[fuse_ops]).run({"x": x})
    np.testing.assert_allclose(got[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_an_epilogue_keeps_its_layout_transform_out(rng):  # noqa: ANN001
    """fuse_ops: the transform back to NCHW is not fused into the conv's epilogue."""
    model, _ = conv_chain(rng)
    g = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout, fuse_ops])
    group = {nd.outputs[0]: nd.group for nd in g.nodes}
    assert group["r2_nchw32c"] == group["s_nchw32c"] == group["c2_nchw32c"]
    assert group["r2"] != group["r2_nchw32c"]


@pytest.mark.parametrize("shape", [(13, 32, 9, 11), (3, 64, 15, 14), (64, 64, 7, 9)], ids=str)
def test_chain_through_compile_matches_onnxruntime(shape, rng):  # noqa: ANN001
    sample_in_ci(shape)
    model, inputs = conv_chain(rng, *shape)
    lib = ember.compile(model, target="llvm")
    ops = {nd.op for nd in lib.graph.nodes}
    assert ops & {"conv_nchwc", "conv_winograd_nchwc"}  # blocked (64 channels: Winograd)
    np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


def test_default_passes_per_target():
    assert alter_conv_layout.name == "alter_conv_layout"
    names = [p.name for p in default_graph_passes("llvm")]
    assert names.index("alter_conv_layout") < names.index("fuse_ops")
    # CUDA adds only attention fusion (before dead-code elimination): no CPU layout passes
    cuda = [p.name for p in default_graph_passes("cuda")]
    assert [n for n in cuda if n != "fuse_attention"] == [p.name for p in DEFAULT_PASSES]
    assert cuda.index("fuse_attention") < cuda.index("eliminate_dead_code")


@pytest.mark.slow
def test_resnet18_quick_matches_onnxruntime():
    from ember.frontend.testing import zoo

    model, inputs = zoo.resnet18(np.random.default_rng(0), 1, 32)
    lib = ember.compile(model, target="llvm")
    blocked = [nd for nd in lib.graph.nodes if nd.op in ("conv_nchwc", "conv_winograd_nchwc")]
    assert len(blocked) == 20  # every conv of ResNet-18 (the 64-channel 3x3s at 8x8 Winograd)
    transforms = [nd for nd in lib.graph.nodes if nd.op == "layout_transform"]
    assert len(transforms) == 1  # before the global pool
    (stem,) = [nd for nd in lib.graph.nodes if nd.inputs == ("input",)]
    assert stem.op == "reshape" and stem.attrs["shape"] == (1, 3, 32, 32, 1)  # blocks of one
    want = run_ort(model, inputs)
    np.testing.assert_allclose(lib.run(inputs)[0], want[0], rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(6), deadline=None, derandomize=True)
@given(
    c=st.integers(1, 20),
    o=st.integers(16, 40),
    hw=st.tuples(st.integers(4, 11), st.integers(4, 11)),
    k=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    tail=st.sampled_from(["relu", "add", "pool"]),
)
def test_random_blocked_graphs_match_onnxruntime(c, o, hw, k, stride, tail):  # noqa: ANN001
    """conv -> relu -> conv (+ a residual add or a max pool) on random workloads, with
    and without padded channel blocks, through ember.compile against onnxruntime."""
    rng = np.random.default_rng(c * 1000 + o * 10 + k)
    p = k // 2
    weights = {"W1": _w(rng, o, c, k, k), "B1": _w(rng, o), "W2": _w(rng, o, o, 3, 3)}
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], pads=[p] * 4, strides=[stride] * 2),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
    ]
    if tail == "add":
        nodes.append(n("Add", ["c2", "r1"], ["y"]))
    elif tail == "pool":
        nodes.append(n("MaxPool", ["c2"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]))
    else:
        nodes.append(n("Relu", ["c2"], ["y"]))
    x = rng.standard_normal((1, c, *hw)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], weights)
    lib = ember.compile(model, target="llvm")
    assert sum(nd.op == "conv_nchwc" for nd in lib.graph.nodes) == 2
    np.testing.assert_allclose(
        lib.run({"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4
    )


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
