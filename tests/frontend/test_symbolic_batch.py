"""Models with a symbolic batch dim compile without ``shapes=`` and run on any batch size.

The reference is onnxruntime on the same ONNX file (independent of Ember), on random
inputs, at batch sizes 1, 3 and 7; the symbolic dim must show in ``input_shapes``, in
``ember inspect`` and survive export and load in a fresh process.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.cli import main as cli_main
from ember.graph.dynamic_model import DynamicModel
from tests.nightly import examples

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from ember.frontend.testing.models import mlp, small_cnn, symbolic_batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _mlp() -> object:
    model, _ = mlp(np.random.default_rng(1), batch=2, sizes=(13, 20, 7))
    return symbolic_batch(model, "N")


def _cnn() -> object:
    model, _ = small_cnn(np.random.default_rng(2), batch=2, h=13, w=11)
    return symbolic_batch(model, "batch_size")


MODELS = {"mlp": (_mlp, "N", (13,)), "cnn": (_cnn, "batch_size", (3, 13, 11))}


@pytest.fixture(scope="module", params=sorted(MODELS))
def case(request):
    make, dim, rest = MODELS[request.param]
    model = make()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, dim, rest, sess, ember.compile(model)


def test_runs_at_any_batch_size_like_onnxruntime(case):
    model, dim, rest, sess, compiled = case
    assert isinstance(compiled, DynamicModel)
    assert compiled.input_shapes == [(dim, *rest)]
    assert compiled.output_shapes[0][0] == dim
    rng = np.random.default_rng(3)
    for batch in (1, 3, 7):
        x = rng.standard_normal((batch, *rest)).astype("float32")
        (got,) = compiled.run({"x": x})
        (want,) = sess.run(None, {"x": x})
        assert got.shape == want.shape == (batch, *compiled.output_shapes[0][1:])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert set(compiled.specializations) >= {((dim, 1),), ((dim, 3),), ((dim, 7),)}
    assert str(dim) in repr(compiled)


def test_a_size_seen_before_reuses_its_compiled_model(case):
    _, dim, rest, _, compiled = case
    x = np.random.default_rng(4).standard_normal((5, *rest)).astype("float32")
    first = compiled([x])[0]
    spec = compiled.specializations[((dim, 5),)]
    second = compiled.run([x])[0]
    assert compiled.specializations[((dim, 5),)] is spec
    np.testing.assert_array_equal(first, second)
    assert compiled.specialize({dim: 5}) is spec


def test_a_wrong_static_dim_rank_dtype_or_name_raises_before_compiling(case):
    _, dim, rest, _, _ = case
    compiled = ember.compile(case[0])
    rng = np.random.default_rng(5)
    bad_dim = (2, *rest[:-1], rest[-1] + 1)
    with pytest.raises(ember.ArgumentError, match=r"input 'x' must have shape \[" + dim):
        compiled.run({"x": rng.standard_normal(bad_dim).astype("float32")})
    with pytest.raises(ember.ArgumentError, match="must have shape"):
        compiled.run({"x": rng.standard_normal((2, 2, *rest)).astype("float32")})
    with pytest.raises(ember.ArgumentError, match="must be float32"):
        compiled.run({"x": np.ones((2, *rest), dtype="float64")})
    with pytest.raises(ember.ArgumentError, match="unknown input name"):
        compiled.run({"y": np.ones((2, *rest), dtype="float32")})
    with pytest.raises(ember.ArgumentError, match="takes 1 inputs"):
        compiled.run([])
    assert compiled.specializations == {}


def test_specialize_checks_its_sizes(case):
    compiled = ember.compile(case[0])
    with pytest.raises(ember.ArgumentError, match="missing"):
        compiled.specialize()
    with pytest.raises(ember.ArgumentError, match="unknown"):
        compiled.specialize({case[1]: 2, "M": 3})
    with pytest.raises(ember.ArgumentError, match="non-negative"):
        compiled.specialize({case[1]: -1})


def _two_inputs() -> object:
    from onnx import TensorProto, helper

    n = helper.make_node
    g = helper.make_graph(
        [n("Mul", ["a", "b"], ["m"]), n("Sub", ["m", "a"], ["y"])],
        "two",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, ["B", 5]) for k in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 5])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_inputs_sharing_a_symbol_must_agree_on_its_size():
    compiled = ember.compile(_two_inputs())
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((4, 5)).astype("float32"), rng.standard_normal((4, 5))
    (got,) = compiled.run({"a": a, "b": b.astype("float32")})
    np.testing.assert_allclose(got, a * b.astype("float32") - a, rtol=1e-6)
    with pytest.raises(ember.ArgumentError, match=r"\{'B': 4\} from the inputs before it"):
        compiled.run({"a": a, "b": np.ones((3, 5), "float32")})


def test_shapes_still_fixes_the_batch():
    compiled = ember.compile(_mlp(), shapes={"x": (3, 13)})
    assert not isinstance(compiled, DynamicModel)
    assert compiled.input_shapes == [(3, 13)]
    with pytest.raises(ember.ArgumentError, match="does not fit"):
        ember.compile(_mlp(), shapes={"x": (3, 12)})


def test_a_symbolic_graph_is_retyped_per_size():
    model = _mlp()
    graph = ember.frontend.from_onnx(model)
    assert graph.inputs[0].type.shape == ("N", 13)
    compiled = ember.compile(graph)
    assert isinstance(compiled, DynamicModel) and compiled.source.kind == "graph"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (2, 6):
        x = np.random.default_rng(batch).standard_normal((batch, 13)).astype("float32")
        np.testing.assert_allclose(
            compiled.run([x])[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5
        )


@functools.lru_cache(maxsize=1)
def _mlp_and_weights() -> tuple[DynamicModel, dict]:
    from onnx import numpy_helper

    model = _mlp()
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return ember.compile(model), weights


@settings(max_examples=examples(6), deadline=None)
@given(batch=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_mlp_matches_numpy_at_random_batch_sizes(batch, seed):
    compiled, w = _mlp_and_weights()
    x = np.random.default_rng(seed).standard_normal((batch, 13)).astype("float32")
    want = np.maximum(x @ w["w0"] + w["b0"], 0) @ w["w1"]
    np.testing.assert_allclose(compiled.run([x])[0], want, rtol=1e-4, atol=1e-4)


LOAD_AND_RUN = """
import sys, numpy as np, ember
model = ember.load(sys.argv[1])
seen = sorted(dict(k)["batch_size"] for k in model.specializations)
outs = [model.run([np.load(f)])[0] for f in sys.argv[2:]]
np.savez(sys.argv[1] + ".out.npz", *outs)
print(seen, model.input_shapes)
"""


def test_export_and_load_in_a_fresh_process(tmp_path):
    compiled = ember.compile(_cnn())
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((b, 3, 13, 11)).astype("float32") for b in (3, 4)]
    want = [compiled.run([x])[0] for x in xs]
    del compiled.specializations[(("batch_size", 4),)]  # batch 4 must compile after loading
    path = tmp_path / "cnn.ember"
    compiled.export(path)
    files = []
    for k, x in enumerate(xs):
        files.append(str(tmp_path / f"x{k}.npy"))
        np.save(files[-1], x)
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(path), *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "[3] [('batch_size', 3, 13, 11)]" in done.stdout
    with np.load(str(path) + ".out.npz") as z:
        for k, w in enumerate(want):
            np.testing.assert_array_equal(z[f"arr_{k}"], w)


def test_a_tampered_symbolic_artifact_is_refused(tmp_path):
    compiled = ember.compile(_mlp())
    compiled.run([np.ones((2, 13), "float32")])
    path, bad = tmp_path / "m.ember", tmp_path / "bad.ember"
    compiled.export(path)
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(bad, "w") as out:
        for name in z.namelist():
            data = z.read(name)
            if name == "source.onnx":
                data = data[:-3] + bytes(b ^ 1 for b in data[-3:])
            out.writestr(name, data)
    with pytest.raises(ember.InvalidModelError, match="source.onnx"):
        ember.load(bad)
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    assert manifest["inputs"] == [["x", ["N", 13], "float32"]]
    assert manifest["specializations"] == [{"sizes": {"N": 2}, "member": "specs/0.ember"}]


def test_custom_graph_passes_refuse_export(tmp_path):
    from ember.frontend.passes import DEFAULT_PASSES

    compiled = ember.compile(_mlp(), graph_passes=DEFAULT_PASSES[:1])
    with pytest.raises(ember.ArgumentError, match="custom graph_passes"):
        compiled.export(tmp_path / "m.ember")


def test_cli_compile_inspect_and_run_keep_the_symbol(tmp_path, capsys):
    src, out = tmp_path / "cnn.onnx", tmp_path / "cnn.ember"
    onnx.save(_cnn(), str(src))
    assert cli_main(["inspect", str(src)]) == 0
    text = capsys.readouterr().out
    assert "input  x: float32[batch_size, 3, 13, 11]" in text
    assert "symbolic dims ['batch_size']" in text and "conv" in text
    assert cli_main(["compile", str(src), "-o", str(out)]) == 0
    assert "symbolic dims ['batch_size']" in capsys.readouterr().out
    assert cli_main(["inspect", str(out)]) == 0
    assert "input  x: float32[batch_size, 3, 13, 11]" in capsys.readouterr().out
    x = np.random.default_rng(9).standard_normal((3, 3, 13, 11)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    assert cli_main(["run", str(out), "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    assert "float32[3, 10]" in capsys.readouterr().out


def _view_flatten() -> object:
    """PyTorch's ``x.view(x.size(0), -1) @ w``: the batch read at run time by Shape/Gather."""
    from onnx import TensorProto, helper, numpy_helper

    n = helper.make_node
    w = np.random.default_rng(10).standard_normal((24, 5)).astype("float32")
    consts = {
        "zero": np.array(0, dtype="int64"),
        "minus1": np.array([-1], dtype="int64"),
        "axes0": np.array([0], dtype="int64"),
        "w": w,
    }
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["b"], axis=0),
        n("Unsqueeze", ["b", "axes0"], ["b1"]),
        n("Concat", ["b1", "minus1"], ["shape"], axis=0),
        n("Reshape", ["x", "shape"], ["flat"]),
        n("MatMul", ["flat", "w"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "view",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_shape_subgraph_reading_the_batch_folds_for_each_size():
    model = _view_flatten()
    compiled = ember.compile(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 3, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 2, 3, 4)).astype("float32")
        np.testing.assert_allclose(
            compiled.run({"x": x})[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5
        )
