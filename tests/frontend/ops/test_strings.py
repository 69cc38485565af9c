"""String tensors (compile-time constants, string inputs compiled per value) and the ops on
them: StringConcat, StringSplit, RegexFullMatch, StringNormalizer, LabelEncoder, Equal and
the element-moving ops, against onnxruntime, or ``onnx.reference`` where onnxruntime
cannot run them here (StringNormalizer's case changes need an installed C++ locale) or
the spec leaves the answer to the reference. Also: a run-time string input fed several
values (one compile per distinct value), wrong inputs refused by name, and a numeric
LabelEncoder compiled to a kernel that needs no recompiles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

S = T.STRING
ML = "ai.onnx.ml"


def _strings(*values: str) -> np.ndarray:
    return np.array(values, dtype=object)


def _model(op: str, feeds: dict[str, np.ndarray], outs: list[int], opset: int = 20, **attrs):
    """A one-node model taking ``feeds`` (their dtypes and shapes) with outputs of the
    ONNX element types ``outs``; LabelEncoder is ai.onnx.ml at ``opset``."""
    domain = ML if op == "LabelEncoder" else ""
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    names = [f"y{k}" for k in range(len(outs))]
    node = helper.make_node(op, list(feeds), names, domain=domain, **attrs)
    out_info = [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, outs)]
    imports = [helper.make_opsetid("", 20 if domain else opset)]
    imports += [helper.make_opsetid(ML, opset)] if domain else []
    model = helper.make_model(helper.make_graph([node], "g", ins, out_info), opset_imports=imports)
    model.ir_version = 9
    inferred = onnx.shape_inference.infer_shapes(model).graph.output  # the checker wants shapes
    del model.graph.output[:]
    for info, t in zip(inferred, outs):
        if not info.type.tensor_type.HasField("shape"):  # LabelEncoder 1: the input's rank
            rank = next(iter(feeds.values())).ndim
            info = helper.make_tensor_value_info(info.name, t, [None] * rank)
        model.graph.output.append(info)
    return model


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        w = w.astype(object) if w.dtype.kind == "U" else w  # the reference's str_ arrays
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_array_equal(g, w)


def _ember(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ember.compile(model).run(feeds)


def check_ort(op: str, feeds: dict[str, np.ndarray], outs: list[int], **attrs) -> None:
    model = _model(op, feeds, outs, **attrs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _same(_ember(model, feeds), sess.run(None, feeds))


def check_reference(op: str, feeds: dict[str, np.ndarray], outs: list[int], **attrs) -> None:
    model = _model(op, feeds, outs, **attrs)
    _same(_ember(model, feeds), ReferenceEvaluator(model).run(None, feeds))


@pytest.mark.parametrize(
    "x,y",
    [
        (_strings("ab", "", "日本"), _strings("", "x", "語")),
        (np.array([["a"], ["bc"]], dtype=object), _strings("1", "22", "")),  # (2, 1) + (3,)
        (np.array("cat", dtype=object), _strings("s", "")),  # 0-d with 1-d
        (np.empty((0, 2), dtype=object), _strings("z", "w")),
    ],
)
def test_string_concat_matches_onnxruntime(x, y):
    check_ort("StringConcat", {"x": x, "y": y}, [S])


_TEXT = np.array([["a.b..c", " x  y\tz ", ""], ["no-delims", "..", "日本.語 テスト"]], dtype=object)


@pytest.mark.parametrize("delimiter", [None, "", ".", ".."])
@pytest.mark.parametrize("maxsplit", [None, 0, 1, 3])
def test_string_split_matches_the_reference(delimiter, maxsplit):
    attrs = {k: v for k, v in (("delimiter", delimiter), ("maxsplit", maxsplit)) if v is not None}
    check_reference("StringSplit", {"x": _TEXT}, [S, T.INT64], **attrs)


@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_string_split_of_an_empty_tensor(shape):
    check_ort("StringSplit", {"x": np.empty(shape, dtype=object)}, [S, T.INT64], delimiter=",")


def test_string_split_matches_onnxruntime_where_they_agree():
    x = _strings("a,b,,c", "日,本", ",", "x")
    check_ort("StringSplit", {"x": x}, [S, T.INT64], delimiter=",", maxsplit=2)


@pytest.mark.parametrize(
    "pattern",
    [r"www\.[\w.-]+\.\bcom\b", r"[\w]+", r"(a|b)*c?", r".+", r"\d{2,3}-\s?x", r"(?i)abc"],
)
def test_regex_full_match_matches_onnxruntime(pattern):
    """RE2's classes are ASCII: 'bücher' is no \\w+ (onnx.reference, Unicode, says it is)."""
    x = np.array([["www.bbc.com", "bücher", "", "aab"], ["12- x", "ABC", "a\nb", "日本"]], object)
    check_ort("RegexFullMatch", {"x": x}, [T.BOOL], pattern=pattern)


@pytest.mark.parametrize("pattern", ["[[:alpha:]]+", r"\pL+", "(unclosed"])
def test_regex_full_match_refuses_what_python_reads_otherwise(pattern):
    model = _model("RegexFullMatch", {"x": _strings("a")}, [T.BOOL], pattern=pattern)
    with pytest.raises(ember.ArgumentError, match="RegexFullMatch"):
        _ember(model, {"x": _strings("a")})


_WORDS = _strings("Monday", "tuesday", "MONDAY", "friday", "Friday", "monday")


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("locale", [None, "en_US", "fr_FR"])
def test_string_normalizer_matches_the_reference(action, sensitive, locale):
    attrs = {"case_change_action": action, "is_case_sensitive": sensitive}
    attrs.update({"stopwords": ["monday", "FRIDAY"]}, **({"locale": locale} if locale else {}))
    check_reference("StringNormalizer", {"x": _WORDS}, [S], opset=10, **attrs)
    check_reference("StringNormalizer", {"x": _WORDS.reshape(1, -1)}, [S], opset=10, **attrs)


def test_string_normalizer_without_case_change_matches_onnxruntime():
    """Whole elements are stopwords, empty strings kept (the reference drops both)."""
    x = _strings("monday", "monday morning", "", "Monday", "tuesday")
    stops = ["monday", "tuesday"]
    attrs = {"is_case_sensitive": 1, "stopwords": stops}
    check_ort("StringNormalizer", {"x": x}, [S], opset=10, **attrs)
    check_ort("StringNormalizer", {"x": x.reshape(1, -1)}, [S], opset=10, **attrs)


def test_string_normalizer_ignores_case_as_the_spec_says():
    """case_change_action NONE, case-insensitive: every casing of a stopword goes (the
    reference compares case-sensitively then); nothing left is one empty string."""
    model = _model("StringNormalizer", {"x": _WORDS}, [S], opset=10, stopwords=["monday"])
    assert _ember(model, {"x": _WORDS})[0].tolist() == ["tuesday", "friday", "Friday"]
    x = _strings("MONDAY", "Monday")
    model = _model("StringNormalizer", {"x": x.reshape(1, 2)}, [S], opset=10, stopwords=["monday"])
    assert _ember(model, {"x": x.reshape(1, 2)})[0].tolist() == [[""]]


@pytest.mark.parametrize("y", [_strings("a", "é", ""), _strings("é"), np.array("", object)])
def test_equal_on_strings_matches_onnxruntime(y):
    check_ort("Equal", {"x": _strings("a", "é", "b"), "y": y}, [T.BOOL], opset=19)


def test_element_moving_ops_carry_strings():
    x = np.array([["a", "日本"], ["", "d"]], dtype=object)
    check_ort("Transpose", {"x": x}, [S], opset=19)
    check_ort("Where", {"c": np.array([True, False]), "x": x, "y": _strings("p", "q")}, [S])
    model = _model("Identity", {"x": x}, [S])
    _same(_ember(model, {"x": x}), [x])


def test_arithmetic_on_strings_is_refused():
    feeds = {"x": _strings("1.5")}
    model = _model("Cast", feeds, [T.FLOAT], opset=19, to=T.FLOAT)
    with pytest.raises(ember.UnsupportedOperatorError, match="on string tensors is not supported"):
        _ember(model, feeds)


def test_a_string_input_compiles_once_per_distinct_value():
    model = _model("StringConcat", {"x": _strings("a", "b"), "y": _strings("c", "d")}, [S])
    lib = ember.compile(model)
    feeds = [
        (_strings("a", "b"), _strings("c", "d")),
        (_strings("日", ""), _strings("c", "d")),
        (np.array(["a", "b"]), _strings("c", "d")),  # a str_ array: the first value again
        (_strings("a", "b"), _strings("c", "d\x00")),
    ]
    outs = [lib.run({"x": x, "y": y})[0].tolist() for x, y in feeds]
    assert outs == [["ac", "bd"], ["日c", "d"], ["ac", "bd"], ["ac", "bd\x00"]]
    assert set(lib.value_inputs) == {"x", "y"} and len(lib.value_specializations) == 3


@pytest.mark.parametrize(
    "value,why",
    [(np.array([1, 2]), "must be a string tensor"), (_strings("a", None), "must hold only str")],
)
def test_a_wrong_string_input_is_refused_by_name(value, why):
    lib = ember.compile(_model("RegexFullMatch", {"x": _strings("a", "b")}, [T.BOOL], pattern="a"))
    with pytest.raises(ember.ArgumentError, match=f"input 'x' {why}"):
        lib.run({"x": value})


def test_a_constant_string_output_runs_beside_kernels_and_export_refuses(tmp_path):
    """A model with no string input: compiled at once, its string output a constant."""
    x = helper.make_tensor_value_info("x", T.FLOAT, [3])
    label = helper.make_tensor("v", S, [2], [b"ok", "été".encode()])
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Constant", [], ["c"], value=label),
        helper.make_node("StringConcat", ["c", "c"], ["s"]),
    ]
    outs = [
        helper.make_tensor_value_info("y", T.FLOAT, [3]),
        helper.make_tensor_value_info("s", S, [2]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 20)]
    )
    lib = ember.compile(model)
    assert lib.output_dtypes == ["float32", "string"]
    for _ in range(2):  # the caller's copy: changing it changes no later run
        y, s = lib.run({"x": np.array([-1, 2, 3], np.float32)})
        assert y.tolist() == [0, 2, 3] and s.tolist() == ["okok", "étéété"]
        s[0] = "changed"
    with pytest.raises(ember.ArgumentError, match="string tensors"):
        lib.export(tmp_path / "m.ember")


_KEYS = {"keys_strings": ["a", "é", "", "a"], "values_int64s": [1, 2, 3, 4]}  # "a": the last


@pytest.mark.parametrize("default", [{}, {"default_int64": 42}])
def test_label_encoder_strings_to_ints_matches_the_reference(default):
    x = np.array([["a", "é", "zz"], ["", "A", "a"]], dtype=object)
    check_reference("LabelEncoder", {"x": x}, [T.INT64], opset=2, **_KEYS, **default)


def test_label_encoder_ints_to_strings_compiles_per_value():
    attrs = {"keys_int64s": [3, -1, 7], "values_strings": ["three", "", "日本"]}
    model = _model("LabelEncoder", {"x": np.zeros(3, np.int64)}, [S], opset=2, **attrs)
    lib = ember.compile(model)
    ref = ReferenceEvaluator(model)
    for x in (np.array([3, 7, 5], np.int64), np.array([-1, -1, 0], np.int64)):
        _same(lib.run({"x": x}), ref.run(None, {"x": x}))
    assert lib.value_inputs == ["x"] and len(lib.value_specializations) == 2


def test_label_encoder_numbers_to_numbers_is_a_kernel(rng):
    """Float keys, a NaN key (it matches every NaN: opset 4), -0.0 finds the key 0.0, a
    repeated key takes its last value; fed at run time, nothing compiles per value."""
    keys = [1.5, float("nan"), 0.0, 1.5, -2.25]
    attrs = {"keys_floats": keys, "values_int64s": [10, 20, 30, 40, 50], "default_int64": -7}
    model = _model("LabelEncoder", {"x": np.zeros((2, 3), np.float32)}, [T.INT64], opset=4, **attrs)
    lib = ember.compile(model)
    assert isinstance(lib, ember.CompiledModel)
    x = np.array([[1.5, np.nan, -0.0], [-2.25, 3.0, 0.0]], np.float32)
    assert lib.run({"x": x})[0].tolist() == [[40, 20, 30], [50, -7, 30]]
    for _ in range(2):
        x = rng.choice(np.array([1.5, np.nan, 0.0, -2.25, 9.0], np.float32), (2, 3))
        want = [
            [{1.5: 40, 0.0: 30, -2.25: 50}.get(v, 20 if v != v else -7) for v in r]
            for r in x.tolist()
        ]
        assert lib.run({"x": x})[0].tolist() == want


def test_label_encoder_tensor_attributes_and_defaults():
    """Opset 4's keys_tensor / values_tensor, with and without default_tensor (the spec's
    default for an integral type: -1)."""
    tables = {
        "keys_tensor": helper.make_tensor("k", T.INT32, [3], [4, 5, 6]),
        "values_tensor": helper.make_tensor("v", T.INT16, [3], [-4, -5, -6]),
    }
    x = np.array([6, 0, 4, 5], np.int32)
    nine = helper.make_tensor("d", T.INT16, [1], [9])
    for extra, default in (({}, -1), ({"default_tensor": nine}, 9)):
        model = _model("LabelEncoder", {"x": x}, [T.INT16], opset=4, **tables, **extra)
        (got,) = _ember(model, {"x": x})
        assert got.dtype == np.int16 and got.tolist() == [-6, default, -4, -5]


def test_label_encoder_opset_1_matches_onnxruntime():
    classes = {"classes_strings": ["a", "b", "a"]}
    check_ort("LabelEncoder", {"x": _strings("a", "b", "c")}, [T.INT64], opset=1, **classes)
    x = np.array([0, 1, 2, -1], np.int64)
    check_ort("LabelEncoder", {"x": x}, [S], opset=1, default_string="zz", **classes)
