"""If and Loop against onnxruntime: inlined, unrolled and host-run forms, outer-scope reads."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import ember
from tests.frontend.onnx_models import (
    check_against_ort,
    helper,
    make_model,
    numpy_helper,
    run_ort,
)

F = TensorProto.FLOAT


def _vi(name: str, elem: int = F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _typed(model, shapes: dict[str, list[int]]):
    """``model`` with the float outputs named in ``shapes`` typed (onnx leaves a Loop's
    carried outputs without a shape, which its checker then rejects)."""
    for k, out in enumerate(model.graph.output):
        if out.name in shapes:
            model.graph.output[k].CopyFrom(_vi(out.name, F, shapes[out.name]))
    return model


def _graph(nodes, name: str, outputs, inputs=()):
    return helper.make_graph(nodes, name, list(inputs), [_vi(o) for o in outputs])


def _if_model(cond_const: bool | None = None):
    """y = tanh(If(cond, then: a + w, else: a * x)) with a = x * 2: both branches read
    outer values (a runtime one and an initializer); the condition is an input or a constant."""
    then_g = _graph([helper.make_node("Add", ["a", "w"], ["t_out"])], "then", ["t_out"])
    else_g = _graph([helper.make_node("Mul", ["a", "x"], ["e_out"])], "else", ["e_out"])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["a"]),
        helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g, name="if"),
        helper.make_node("Tanh", ["r"], ["y"]),
    ]
    rng = np.random.default_rng(0)
    inits = {"two": np.array(2.0, np.float32), "w": rng.standard_normal((3, 5)).astype(np.float32)}
    if cond_const is not None:
        inits["cond"] = np.array(cond_const)
    inputs = {"x": rng.standard_normal((3, 5)).astype(np.float32)}
    if cond_const is None:
        inputs["cond"] = np.array(True)
    return make_model(nodes, inputs, ["y"], inits, opset=13), inputs


@pytest.mark.parametrize("flag", [True, False])
def test_if_runtime_condition(flag: bool) -> None:
    model, inputs = _if_model()
    graph = ember.frontend.from_onnx(model)
    (node,) = [n for n in graph.nodes if n.op == "if"]
    assert set(node.subgraphs) == {"then_branch", "else_branch"}
    assert "    then_branch: graph then(" in str(graph)  # printed under the node
    inputs["cond"] = np.array(flag)
    check_against_ort(model, inputs)


def test_if_runtime_condition_one_compile_both_ways() -> None:
    model, inputs = _if_model()
    lib = ember.compile(model)
    for flag in (True, False, True):
        inputs["cond"] = np.array(flag)
        np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


@pytest.mark.parametrize("flag", [True, False])
def test_if_constant_condition_is_inlined(flag: bool) -> None:
    model, inputs = _if_model(cond_const=flag)
    graph = ember.frontend.from_onnx(model)
    assert not any(n.subgraphs for n in graph.nodes)
    assert [n.op for n in graph.nodes][-2] == ("add" if flag else "multiply")
    check_against_ort(model, inputs)


def test_nested_if_reads_two_scopes_out() -> None:
    inner_then = _graph([helper.make_node("Add", ["x", "x"], ["it"])], "it", ["it"])
    inner_else = _graph([helper.make_node("Sub", ["x", "b"], ["ie"])], "ie", ["ie"])
    outer_then = _graph(
        [helper.make_node("If", ["c2"], ["o"], then_branch=inner_then, else_branch=inner_else)],
        "ot",
        ["o"],
    )
    outer_else = _graph([helper.make_node("Relu", ["x"], ["oe"])], "oe", ["oe"])
    node = helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.standard_normal((2, 7)).astype(np.float32),
        "b": rng.standard_normal((2, 7)).astype(np.float32),
        "c1": np.array(True),
        "c2": np.array(False),
    }
    model = make_model([node], inputs, ["y"], opset=16)
    lib = ember.compile(model)
    for c1, c2 in [(True, False), (True, True), (False, True)]:
        inputs["c1"], inputs["c2"] = np.array(c1), np.array(c2)
        np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-6)


def test_if_branches_of_different_shapes_raise() -> None:
    then_g = _graph([helper.make_node("Identity", ["x"], ["t"])], "t", ["t"])
    else_g = _graph([helper.make_node("Transpose", ["x"], ["e"], perm=[1, 0])], "e", ["e"])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="sw")
    inputs = {"x": np.ones((2, 3), np.float32), "c": np.array(True)}
    model = make_model([node], inputs, ["y"], opset=13)
    with pytest.raises(ember.ArgumentError, match="different types") as info:
        ember.frontend.from_onnx(model)
    assert "ONNX node 'sw' (If)" in str(info.value)


def _cumprod_model(trip: int, runtime_trip: bool = False):
    """Loop computing the running product of the rows of ``xs``: carried ``prod``, scan
    output the product after each row (so the scan is np.cumprod)."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["xs", "i"], ["row"], axis=0),
            helper.make_node("Mul", ["prod_in", "row"], ["prod_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["prod_out"], ["scan"]),
        ],
        "body",
        [
            _vi("i", TensorProto.INT64, []),
            _vi("cond_in", TensorProto.BOOL, []),
            _vi("prod_in", F, [5]),
        ],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("prod_out", F, [5]), _vi("scan", F, [5])],
    )
    node = helper.make_node("Loop", ["M", "", "p0"], ["prod", "partial"], body=body, name="loop")
    rng = np.random.default_rng(2)
    xs = (0.5 + rng.random((trip, 5))).astype(np.float32)
    inputs = {"xs": xs, "p0": rng.standard_normal(5).astype(np.float32)}
    inits = {}
    if runtime_trip:
        inputs["M"] = np.array(trip, np.int64)
    else:
        inits["M"] = np.array(trip, np.int64)
    model = make_model([node], inputs, ["prod", "partial"], inits, opset=16)
    return _typed(model, {"prod": [5], "partial": [trip, 5]}), inputs


@pytest.mark.parametrize(("trip", "form"), [(4, "unrolled"), (37, "host")])
def test_loop_cumulative_product(trip: int, form: str) -> None:
    model, inputs = _cumprod_model(trip)
    graph = ember.frontend.from_onnx(model)
    assert any(n.op == "loop" for n in graph.nodes) == (form == "host")
    prod, partial = check_against_ort(model, inputs)
    want = np.cumprod(inputs["xs"], axis=0) * inputs["p0"]
    np.testing.assert_allclose(partial, want, rtol=1e-5)
    np.testing.assert_allclose(prod, want[-1], rtol=1e-5)


def test_loop_scan_needs_a_constant_trip_count() -> None:
    model, _ = _cumprod_model(3, runtime_trip=True)
    with pytest.raises(ember.ArgumentError, match="must be a constant") as info:
        ember.frontend.from_onnx(model)
    assert "ONNX node 'loop' (Loop)" in str(info.value)


def _sum_model(with_scan: bool = False):
    """Loop adding ``step`` to ``acc`` M times (M a runtime input); the body's condition is
    an outer flag, so the loop stops after one iteration when the flag is false."""
    nodes = [
        helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        helper.make_node("Identity", ["flag"], ["cond_out"]),
    ]
    outs = [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", F, [2, 3])]
    if with_scan:
        nodes.append(helper.make_node("Identity", ["acc_out"], ["scan"]))
        outs.append(_vi("scan", F, [2, 3]))
    body = helper.make_graph(
        nodes,
        "body",
        [
            _vi("i", TensorProto.INT64, []),
            _vi("cond_in", TensorProto.BOOL, []),
            _vi("acc_in", F, [2, 3]),
        ],
        outs,
    )
    names = ["acc", "scan"] if with_scan else ["acc"]
    node = helper.make_node("Loop", ["M", "go", "a0"], names, body=body)
    rng = np.random.default_rng(3)
    inputs = {
        "M": np.array(5, np.int64),
        "go": np.array(True),
        "a0": rng.standard_normal((2, 3)).astype(np.float32),
        "step": rng.standard_normal((2, 3)).astype(np.float32),
        "flag": np.array(True),
    }
    model = make_model([node], inputs, names, opset=13)
    return _typed(model, {"acc": [2, 3], "scan": [5, 2, 3]}), inputs


def test_loop_runtime_trip_count_and_condition() -> None:
    model, inputs = _sum_model()
    lib = ember.compile(model)
    for m, go, flag in [(5, True, True), (9, True, False), (3, False, True), (0, True, True)]:
        inputs.update(M=np.array(m, np.int64), go=np.array(go), flag=np.array(flag))
        np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


def test_loop_scan_stopping_early_raises_at_run_time() -> None:
    model, inputs = _sum_model(with_scan=True)
    model.graph.input.remove(model.graph.input[0])
    model.graph.initializer.append(numpy_helper.from_array(inputs.pop("M"), "M"))
    lib = ember.compile(model)
    np.testing.assert_allclose(lib.run(inputs)[1], run_ort(model, inputs)[1], rtol=1e-5)
    inputs["flag"] = np.array(False)
    with pytest.raises(ember.ArgumentError, match="Loop ran 1 iterations"):
        lib.run(inputs)


@pytest.mark.nvrtc
def test_if_and_host_loop_on_cuda_emulated(monkeypatch) -> None:
    """The subgraphs compile for the model's target: CUDA kernels, run in the emulator."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    model, inputs = _if_model()
    lib = ember.compile(model, target="cuda")
    for flag in (True, False):
        inputs["cond"] = np.array(flag)
        np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)
    model, inputs = _sum_model()
    lib = ember.compile(model, target="cuda")
    np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


def _scan_model(length: int):
    """Scan over x [4, T] along axis 1 and y [T, 4] backwards: s = s * w + x_t (w an outer
    value), scan outputs s + y_t stacked on axis 1 and s stacked in reverse order."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["s_in", "w"], ["sw"]),
            helper.make_node("Add", ["sw", "x_t"], ["s_out"]),
            helper.make_node("Add", ["s_out", "y_t"], ["o1"]),
            helper.make_node("Identity", ["s_out"], ["o2"]),
        ],
        "body",
        [_vi("s_in", F, [4]), _vi("x_t", F, [4]), _vi("y_t", F, [4])],
        [_vi("s_out", F, [4]), _vi("o1", F, [4]), _vi("o2", F, [4])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x", "y"],
        ["s", "out1", "out2"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=[1, 0],
        scan_input_directions=[0, 1],
        scan_output_axes=[1, 0],
        scan_output_directions=[0, 1],
    )
    rng = np.random.default_rng(4)
    inputs = {
        "s0": rng.standard_normal(4).astype(np.float32),
        "x": rng.standard_normal((4, length)).astype(np.float32),
        "y": rng.standard_normal((length, 4)).astype(np.float32),
        "w": (0.5 + 0.5 * rng.random(4)).astype(np.float32),
    }
    return make_model([node], inputs, ["s", "out1", "out2"], opset=16), inputs


@pytest.mark.parametrize(("length", "form"), [(5, "unrolled"), (23, "host")])
def test_scan_axes_and_directions(length: int, form: str) -> None:
    model, inputs = _scan_model(length)
    graph = ember.frontend.from_onnx(model)
    assert any(n.op == "scan" for n in graph.nodes) == (form == "host")
    check_against_ort(model, inputs)


def test_host_loop_with_a_runtime_if_in_its_body() -> None:
    """The If inside the body reads the body's carried value, the body's input and a value
    two scopes out (``scale``); Loop and If both run on the host."""
    then_g = _graph([helper.make_node("Mul", ["acc_in", "scale"], ["t"])], "t", ["t"])
    else_g = _graph([helper.make_node("Sub", ["acc_in", "step"], ["e"])], "e", ["e"])
    body = helper.make_graph(
        [
            helper.make_node("If", ["flag"], ["picked"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Add", ["picked", "step"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in")],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", F, [3, 2])],
    )
    node = helper.make_node("Loop", ["M", "", "a0"], ["acc"], body=body)
    rng = np.random.default_rng(5)
    inputs = {
        "M": np.array(4, np.int64),
        "a0": rng.standard_normal((3, 2)).astype(np.float32),
        "step": rng.standard_normal((3, 2)).astype(np.float32),
        "scale": rng.standard_normal((3, 2)).astype(np.float32),
        "flag": np.array(True),
    }
    model = _typed(make_model([node], inputs, ["acc"], opset=13), {"acc": [3, 2]})
    lib = ember.compile(model)
    assert [n.op for n in lib.graph.nodes] == ["loop"]
    for m, flag in [(4, True), (6, False), (1, True)]:
        inputs.update(M=np.array(m, np.int64), flag=np.array(flag))
        np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


def test_unrolled_loop_whose_carried_value_grows() -> None:
    """Concat makes the carried value longer each iteration: only unrolling can compile it."""
    body = helper.make_graph(
        [
            helper.make_node("Concat", ["v_in", "piece"], ["v_out"], axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("v_in", F, ["n"])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("v_out", F, ["m"])],
    )  # fmt: skip
    node = helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)
    rng = np.random.default_rng(6)
    inputs = {
        "v0": rng.standard_normal(2).astype(np.float32),
        "piece": rng.standard_normal(3).astype(np.float32),
    }
    model = make_model([node], inputs, ["v"], {"M": np.array(3, np.int64)}, opset=13)
    model = _typed(model, {"v": [11]})
    (got,) = ember.compile(model).run(inputs)
    np.testing.assert_array_equal(got, np.concatenate([inputs["v0"], *[inputs["piece"]] * 3]))
    runtime = make_model([node], {**inputs, "M": np.array(3, np.int64)}, ["v"], opset=13)
    with pytest.raises(ember.ArgumentError, match="changes the shapes of its carried values"):
        ember.frontend.from_onnx(_typed(runtime, {"v": [11]}))


def test_subgraphs_are_compiled_with_the_callers_graph_passes() -> None:
    """A branch goes through the same compile steps as the model around it: with
    ``graph_passes=()`` its two ops stay two kernels, by default they fuse into one (the
    subgraph compile used to drop the caller's passes)."""
    then_g = _graph(
        [helper.make_node("Add", ["a", "w"], ["s"]), helper.make_node("Relu", ["s"], ["t_out"])],
        "then",
        ["t_out"],
    )
    else_g = _graph([helper.make_node("Mul", ["a", "x"], ["e_out"])], "else", ["e_out"])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["a"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    rng = np.random.default_rng(1)
    inits = {"two": np.array(2.0, np.float32), "w": rng.standard_normal((3, 5)).astype(np.float32)}
    inputs = {"x": rng.standard_normal((3, 5)).astype(np.float32), "cond": np.array(True)}
    model = make_model(nodes, inputs, ["y"], inits, opset=13)

    def then_kernels(lib) -> int:
        (step,) = [st for st in lib.steps if hasattr(st.kernel, "then_model")]
        return len(step.kernel.then_model.steps)

    assert then_kernels(ember.compile(model)) == 1
    unfused = ember.compile(model, graph_passes=())
    assert then_kernels(unfused) == 2
    np.testing.assert_allclose(unfused.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)
