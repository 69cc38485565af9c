"""ONNX sequences and optionals: lists and None in and out, one compile per layout.

The reference is onnxruntime on the same file (numpy where it says so); data are random
and never zero, lengths odd, and an empty sequence is among them.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph.dynamic_model import DynamicModel

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(11)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _data(*shape: int) -> np.ndarray:
    """Random float32 data, never zero (magnitudes in [0.5, 2), either sign)."""
    mag = RNG.uniform(0.5, 2.0, shape)
    return (mag * RNG.choice([-1.0, 1.0], shape)).astype(np.float32)


def _seq(name: str, elem: int = F) -> object:
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None))
    )


def _opt(name: str, elem: int = F, of_sequence: bool = False) -> object:
    inner = helper.make_tensor_type_proto(elem, None)
    if of_sequence:
        inner = helper.make_sequence_type_proto(inner)
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def _tensor(name: str, elem: int = F, shape: object = None) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset: int = 18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what onnxruntime reads
    return model


def _same(got, want, where: str = "output") -> None:
    if want is None or isinstance(want, list):
        assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
        if want is None:
            return
        assert len(got) == len(want), f"{where}: {len(got)} tensors, expected {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{k}]")
        return
    assert isinstance(got, np.ndarray), f"{where}: {type(got).__name__}"
    assert got.dtype == want.dtype and got.shape == want.shape, f"{where}: {got.dtype}{got.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)


def _check(lib, model, feeds: dict) -> list:
    """Run ``lib`` on ``feeds`` and compare every output with onnxruntime's."""
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = lib.run(feeds)
    for k, (g, w) in enumerate(zip(got, want)):
        _same(g, w, f"output {k}")
    assert len(got) == len(want)
    return got


def _edit_model():
    """y = Insert(Erase(x, -2), At(x, -1), 0), n = Length(x): positions negative."""
    c = [
        helper.make_tensor("m1", I64, [], [-1]),
        helper.make_tensor("m2", I64, [], [-2]),
        helper.make_tensor("z", I64, [], [0]),
    ]
    nodes = [
        helper.make_node("SequenceAt", ["x", "m1"], ["last"]),
        helper.make_node("SequenceErase", ["x", "m2"], ["erased"]),
        helper.make_node("SequenceInsert", ["erased", "last", "z"], ["y"]),
        helper.make_node("SequenceLength", ["y"], ["n"]),
    ]
    return _model(nodes, [_seq("x")], [_seq("y"), _tensor("n", I64, [])], c)


def test_a_sequence_input_compiles_once_per_length():
    model = _edit_model()
    lib = ember.compile(model)
    assert isinstance(lib, DynamicModel) and lib.input_shapes == [None]
    for n in (3, 5, 2, 3, 5):
        _check(lib, model, {"x": [_data(4) for _ in range(n)]})
    assert len(lib.specializations) == 3  # lengths 3, 5 and 2
    for n in (3, 5):  # the same lengths again: no compile
        _check(lib, model, {"x": [_data(4) for _ in range(n)]})
    assert len(lib.specializations) == 3
    _check(lib, model, {"x": [_data(2, 3) for _ in range(3)]})  # new element shapes
    assert len(lib.specializations) == 4


def test_elements_of_one_sequence_may_differ_in_shape():
    nodes = [helper.make_node("SequenceMap", ["x", "t"], ["y"], body=_add_body())]
    model = _model(nodes, [_seq("x"), _tensor("t", F, [3])], [_seq("y")], opset=17)
    lib = ember.compile(model)
    _check(lib, model, {"x": [_data(3), _data(5, 3), _data(1, 3)], "t": _data(3)})
    _check(lib, model, {"x": [], "t": _data(3)})  # an empty sequence maps to an empty one


def _add_body():
    return helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "body",
        [_tensor("a", F, None), _tensor("b", F, None)],
        [_tensor("c", F, None)],
    )


def test_a_sequence_output_may_repeat_a_tensor_and_pass_inputs_through():
    nodes = [
        helper.make_node("SequenceConstruct", ["t", "t", "u"], ["s"]),
        helper.make_node("Identity", ["x"], ["same"]),
    ]
    inputs = [_tensor("t", F, [2, 3]), _tensor("u", F, [5, 3]), _seq("x")]
    model = _model(nodes, inputs, [_seq("s"), _seq("same")])
    lib = ember.compile(model)
    got = _check(lib, model, {"t": _data(2, 3), "u": _data(5, 3), "x": [_data(1), _data(3)]})
    assert got[0][0] is not got[0][1]  # two arrays of the caller's own


def test_an_empty_sequence_input():
    nodes = [
        helper.make_node("SequenceInsert", ["x", "t"], ["y"]),
        helper.make_node("SequenceLength", ["x"], ["n"]),
    ]
    model = _model(nodes, [_seq("x"), _tensor("t", F, [2, 3])], [_seq("y"), _tensor("n", I64, [])])
    lib = ember.compile(model)
    got = _check(lib, model, {"x": [], "t": _data(2, 3)})
    assert got[1] == 0 and len(got[0]) == 1


def _positions_model():
    """y = At(Insert(x, t, p), q): both positions fed at run time."""
    nodes = [
        helper.make_node("SequenceInsert", ["x", "t", "p"], ["s"]),
        helper.make_node("SequenceAt", ["s", "q"], ["y"]),
    ]
    inputs = [_seq("x"), _tensor("t", F, [3]), _tensor("p", I64, []), _tensor("q", I64, [])]
    return _model(nodes, inputs, [_tensor("y", F, [3])])


def test_positions_fed_at_run_time_compile_per_value():
    model = _positions_model()
    lib = ember.compile(model)
    x = [_data(3) for _ in range(3)]
    for p, q in ((0, 0), (-1, 3), (3, -4), (-3, -1), (0, 0)):
        feeds = {"x": x, "t": _data(3), "p": np.array(p, np.int64), "q": np.array(q, np.int64)}
        _check(lib, model, feeds)
    assert lib.value_inputs == ["p", "q"]
    assert len(lib.value_specializations) == 4


@pytest.mark.parametrize("p, q", [(4, 0), (-4, 0), (0, 4), (0, -5)])
def test_a_position_out_of_range_is_an_error_naming_the_range(p, q):
    lib = ember.compile(_positions_model())
    feeds = {"x": [_data(3) for _ in range(3)], "t": _data(3)}
    with pytest.raises(ember.ArgumentError, match=r"out of range .* \(valid: -\d\.\.\d\)"):
        lib.run({**feeds, "p": np.array(p, np.int64), "q": np.array(q, np.int64)})


def test_erasing_from_an_empty_sequence_is_an_error():
    nodes = [helper.make_node("SequenceErase", ["x"], ["y"])]
    lib = ember.compile(_model(nodes, [_seq("x")], [_seq("y")]))
    with pytest.raises(ember.ArgumentError, match="the sequence is empty"):
        lib.run({"x": []})


@pytest.mark.parametrize(
    "split, keepdims, pieces", [(None, 0, 7), (None, 1, 7), (3, 1, 3), ([2, 0, 5], 1, 3)]
)
def test_split_to_sequence_and_concat_back(split, keepdims, pieces):
    """Pieces of one (the axis kept or dropped), of three (7 = 3 + 3 + 1), of given sizes
    (an empty one among them); joined again, and stacked on a new last axis."""
    inputs, inits, args = [_tensor("x", F, [4, 7])], [], ["x"]
    if split is not None:
        dims = [] if np.ndim(split) == 0 else [len(split)]
        inits.append(helper.make_tensor("split", I64, dims, np.atleast_1d(split).tolist()))
        args.append("split")
    rank = 1 + keepdims  # of each piece
    nodes = [
        helper.make_node("SplitToSequence", args, ["s"], axis=-1, keepdims=keepdims),
        helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=-1),
    ]
    outputs = [_seq("s"), _tensor("cat", F, ["a", "b"][:rank])]
    if split is None:  # equal pieces
        nodes.append(helper.make_node("ConcatFromSequence", ["s"], ["st"], axis=-1, new_axis=1))
        outputs.append(_tensor("st", F, ["a", "b", "c"][: rank + 1]))
    model = _model(nodes, inputs, outputs, inits)
    got = _check(ember.compile(model), model, {"x": _data(4, 7)})
    assert len(got[0]) == pieces


def test_optional_inputs_absent_and_present():
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("OptionalHasElement", ["os"], ["has_seq"]),
        helper.make_node("Identity", ["os"], ["same"]),
    ]
    inputs = [_opt("o"), _opt("os", of_sequence=True)]
    outputs = [
        _tensor("has", TensorProto.BOOL, []),
        _tensor("has_seq", TensorProto.BOOL, []),
        _opt("same", of_sequence=True),
    ]
    model = _model(nodes, inputs, outputs)
    lib = ember.compile(model)
    for o, os_ in ((None, None), (_data(3), [_data(2), _data(5)]), (_data(3), []), (None, None)):
        _check(lib, model, {"o": o, "os": os_})
    assert lib.run({})[0] == np.array(False)  # a dict may leave an optional out
    assert len(lib.specializations) == 3


def test_getting_the_element_of_an_empty_optional_is_an_error():
    nodes = [helper.make_node("OptionalGetElement", ["o"], ["y"])]
    model = _model(nodes, [_opt("o")], [_tensor("y", F, ["a", "b"])])
    lib = ember.compile(model)
    _check(lib, model, {"o": _data(2, 3)})
    with pytest.raises(ember.ArgumentError, match="the optional is empty"):
        lib.run([None])


def _if_model(then_len: int, else_len: int):
    def branch(name: str, n: int):
        consts = [f"{name}_c{k}" for k in range(n)]
        nodes = [
            helper.make_node("Constant", [], [c], value=helper.make_tensor(c, F, [2], _data(2)))
            for c in consts
        ]
        nodes.append(helper.make_node("Mul", ["x", "x"], [f"{name}_sq"]))
        nodes.append(helper.make_node("SequenceConstruct", [f"{name}_sq", *consts], [f"{name}_o"]))
        return helper.make_graph(nodes, name, [], [_seq(f"{name}_o")])

    node = helper.make_node(
        "If",
        ["c"],
        ["y"],
        then_branch=branch("then", then_len),
        else_branch=branch("else", else_len),
    )
    return _model([node], [_tensor("c", TensorProto.BOOL, []), _tensor("x", F, [2])], [_seq("y")])


def test_if_whose_branches_give_sequences_of_one_length_compiles_once():
    model = _if_model(2, 2)
    lib = ember.compile(model)
    for c in (True, False, True):
        _check(lib, model, {"c": np.array(c), "x": _data(2)})
    assert lib.value_inputs == [] and len(lib.specializations) == 1


def test_if_whose_branches_differ_in_length_compiles_per_condition():
    model = _if_model(3, 0)
    lib = ember.compile(model)
    for c in (True, False, True):
        _check(lib, model, {"c": np.array(c), "x": _data(2)})
    assert lib.value_inputs == ["c"] and len(lib.value_specializations) == 2


def test_loop_carrying_a_sequence_until_its_condition_turns_false():
    """No trip count: the body's condition (iteration < 4) is known as the loop unrolls."""
    four = helper.make_tensor("four", I64, [], [4])
    body = helper.make_graph(
        [
            helper.make_node("Less", ["i", "four"], ["go"]),
            helper.make_node("Mul", ["x", "x"], ["sq"]),
            helper.make_node("SequenceInsert", ["s_in", "sq"], ["s_out"]),
            helper.make_node("Add", ["x", "x"], ["x_out"]),
        ],
        "body",
        [
            _tensor("i", I64, []),
            _tensor("cond", TensorProto.BOOL, []),
            _seq("s_in"),
            _tensor("x", F, [3]),
        ],
        [_tensor("go", TensorProto.BOOL, []), _seq("s_out"), _tensor("x_out", F, [3])],
        initializer=[four],
    )
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"]),
        helper.make_node("Loop", ["", "", "empty", "x"], ["s", "x_final"], body=body),
    ]
    model = _model(nodes, [_tensor("x", F, [3])], [_seq("s"), _tensor("x_final", F, [3])])
    got = _check(ember.compile(model), model, {"x": _data(3)})
    assert len(got[0]) == 5


def test_loop_carrying_a_sequence_with_a_data_dependent_condition_is_refused():
    body = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
            helper.make_node("Less", ["m", "lim"], ["go"]),
            helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"]),
        ],
        "body",
        [_tensor("i", I64, []), _tensor("cond", TensorProto.BOOL, []), _seq("s_in")],
        [_tensor("go", TensorProto.BOOL, []), _seq("s_out")],
    )
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"]),
        helper.make_node("Loop", ["", "", "empty"], ["s"], body=body),
    ]
    inputs = [_tensor("x", F, [3]), _tensor("lim", F, [])]
    lib = ember.compile(_model(nodes, inputs, [_seq("s")]))
    with pytest.raises(ember.ArgumentError, match="condition depends on run-time data"):
        lib.run({"x": _data(3), "lim": np.float32(1.5)})


def test_loop_with_a_trip_count_fed_at_run_time_compiles_per_value():
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["f"], to=F),
            helper.make_node("Mul", ["t", "f"], ["v"]),
            helper.make_node("SequenceInsert", ["s_in", "v"], ["s_out"]),
        ],
        "body",
        [_tensor("i", I64, []), _tensor("cond", TensorProto.BOOL, []), _seq("s_in")],
        [_tensor("cond_out", TensorProto.BOOL, []), _seq("s_out")],
    )
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["s"], body=body)]
    inputs = [_tensor("n", I64, []), _seq("x"), _tensor("t", F, [2])]
    model = _model(nodes, inputs, [_seq("s")])
    lib = ember.compile(model)
    for n in (3, 0, 3):
        _check(lib, model, {"n": np.array(n, np.int64), "x": [_data(2)], "t": _data(2)})
    assert lib.value_inputs == ["n"] and len(lib.value_specializations) == 2


def test_loop_reading_a_sequence_by_iteration_number_is_unrolled():
    """Only tensors are carried, but the body reads the outer sequence at the iteration
    number (as an expanded SequenceMap does): unrolled over the sequence's length."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("SequenceAt", ["x", "i"], ["e"]),
            helper.make_node("Add", ["acc", "e"], ["acc_out"]),
            helper.make_node("Mul", ["e", "e"], ["sq"]),
        ],
        "body",
        [_tensor("i", I64, []), _tensor("cond", TensorProto.BOOL, []), _tensor("acc", F, [3])],
        [
            _tensor("cond_out", TensorProto.BOOL, []),
            _tensor("acc_out", F, [3]),
            _tensor("sq", F, [3]),
        ],
    )
    nodes = [
        helper.make_node("SequenceLength", ["x"], ["n"]),
        helper.make_node("Loop", ["n", "", "t"], ["acc", "squares"], body=body),
    ]
    inputs = [_seq("x"), _tensor("t", F, [3])]
    model = _model(nodes, inputs, [_tensor("acc", F, [3]), _tensor("squares", F, ["n", 3])])
    lib = ember.compile(model)
    for n in (5, 1):
        _check(lib, model, {"x": [_data(3) for _ in range(n)], "t": _data(3)})


def test_wrong_kinds_of_input_are_errors_naming_the_input():
    lib = ember.compile(_edit_model())
    with pytest.raises(ember.ArgumentError, match="input 'x' is a sequence .* list of arrays"):
        lib.run({"x": _data(3, 4)})
    with pytest.raises(ember.ArgumentError, match=r"input 'x\[1\]' must be float32, got float64"):
        lib.run({"x": [_data(4), _data(4).astype(np.float64), _data(4)]})
    with pytest.raises(ember.ArgumentError, match="input 'x' is a sequence .* got None"):
        lib.run([None])
    opt = ember.compile(
        _model(
            [helper.make_node("OptionalHasElement", ["o"], ["h"])],
            [_opt("o")],
            [_tensor("h", TensorProto.BOOL, [])],
        )
    )
    with pytest.raises(ember.ArgumentError, match="input 'o' is optional.* got a list"):
        opt.run([[_data(2)]])


def test_shapes_cannot_fix_a_sequence_input_in_compile():
    with pytest.raises(ember.ArgumentError, match="input 'x' is sequence"):
        ember.compile(_edit_model(), shapes={"x": [(4,), (4,)]})


def test_from_onnx_specializes_sequences_as_shapes_says():
    graph = ember.frontend.from_onnx(_edit_model(), shapes={"x": [(4,), (2, 2), (4,)]})
    assert graph.input_names == ["x[0]", "x[1]", "x[2]"]
    assert [p.kind for p in graph.interface.outputs] == ["sequence", "tensor"]
    assert graph.output_names[:3] == ["y[0]", "y[1]", "y[2]"]
    with pytest.raises(ember.ArgumentError, match="pass shapes="):
        ember.frontend.from_onnx(_edit_model())


def test_a_model_with_sequences_is_not_exported(tmp_path):
    lib = ember.compile(_edit_model())
    with pytest.raises(ember.ArgumentError, match="cannot be exported"):
        lib.export(tmp_path / "m.ember")
