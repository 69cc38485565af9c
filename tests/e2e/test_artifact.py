"""Compiled-model artifacts and the model CLI: export, load in a fresh process, refusals.

The outputs of a loaded model must equal the in-process model's bit for bit (the same
machine code runs), and onnxruntime's within float32 tolerance; a file whose bytes
were changed, truncated, or written in another format version is refused before any
library is opened.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.cli import main as cli_main

onnx = pytest.importorskip("onnx")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from ember.frontend.testing.models import small_cnn

    model, feeds = small_cnn(np.random.default_rng(7), batch=2, h=13, w=11)
    folder = tmp_path_factory.mktemp("cnn")
    path = folder / "cnn.onnx"
    onnx.save(model, str(path))
    np.save(folder / "x.npy", feeds["x"])
    compiled = ember.compile(model)
    return folder, path, feeds, compiled


def _ort(path: Path, feeds: dict) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_export_then_load_in_a_fresh_process(cnn):
    folder, path, feeds, compiled = cnn
    art = folder / "cnn.ember"
    compiled.export(art)
    want = compiled.run(feeds)
    np.testing.assert_allclose(want[0], _ort(path, feeds)[0], rtol=1e-4, atol=1e-5)
    script = (
        "import sys, numpy as np, ember\n"
        "m = ember.load(sys.argv[1])\n"
        "out = m.run({'x': np.load(sys.argv[2])})\n"
        "np.save(sys.argv[3], out[0])\n"
    )
    got_path = folder / "got.npy"
    subprocess.run(
        [sys.executable, "-c", script, str(art), str(folder / "x.npy"), str(got_path)],
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    np.testing.assert_array_equal(np.load(got_path), want[0])
    loaded = ember.load(art)
    assert loaded.input_names == compiled.input_names
    assert loaded.output_types == compiled.output_types
    assert "conv" in str(loaded.graph)


def _rewrite(src: Path, dst: Path, change) -> None:
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    change(members)
    with zipfile.ZipFile(dst, "w") as z:
        for n, d in members.items():
            z.writestr(n, d)


def _flip_kernel_byte(members):
    name = next(n for n in members if n.startswith("kernels/"))
    data = bytearray(members[name])
    data[len(data) // 2] ^= 0xFF
    members[name] = bytes(data)


def _old_format(members):
    manifest = json.loads(members["manifest.json"])
    manifest["format_version"] = 0
    members["manifest.json"] = json.dumps(manifest).encode()


def _extra_member(members):
    members["kernels/evil.so"] = b"\x7fELF"


@pytest.mark.parametrize(
    "change, phrase",
    [
        (_flip_kernel_byte, "does not match its hash"),
        (_old_format, "format version 0"),
        (_extra_member, "do not match its manifest"),
    ],
)
def test_a_changed_artifact_is_refused(cnn, tmp_path, change, phrase):
    folder, _, _, compiled = cnn
    art = tmp_path / "a.ember"
    compiled.export(art)
    bad = tmp_path / "bad.ember"
    _rewrite(art, bad, change)
    with pytest.raises(ember.InvalidModelError, match=phrase):
        ember.load(bad)


def test_truncated_and_foreign_files_are_refused(cnn, tmp_path):
    _, path, _, compiled = cnn
    art = tmp_path / "a.ember"
    compiled.export(art)
    cut = tmp_path / "cut.ember"
    cut.write_bytes(art.read_bytes()[: art.stat().st_size // 2])
    with pytest.raises(ember.InvalidModelError, match="truncated"):
        ember.load(cut)
    with pytest.raises(ember.InvalidModelError, match="not an Ember model"):
        ember.load(path)  # an ONNX file is not an artifact
    with pytest.raises(ember.ArgumentError, match="no file"):
        ember.load(tmp_path / "missing.ember")


def test_export_to_a_directory_is_an_argument_error(cnn, tmp_path):
    _, _, _, compiled = cnn
    with pytest.raises(ember.ArgumentError, match="is a directory"):
        compiled.export(tmp_path)
    assert not list(tmp_path.glob("*.part"))


def test_cli_compile_and_run_match_the_python_api(cnn, tmp_path, capsys):
    folder, path, feeds, compiled = cnn
    art = tmp_path / "cli.ember"
    assert cli_main(["compile", str(path), "-o", str(art)]) == 0
    out = tmp_path / "out.npz"
    code = cli_main(
        ["run", str(art), "--input", f"x={folder / 'x.npy'}", "--output", str(out), "--bench", "2"]
        + ["--profile", "2"]
    )
    assert code == 0
    with np.load(out) as z:
        np.testing.assert_array_equal(z["probs"], compiled.run(feeds)[0])
    printed = capsys.readouterr().out
    assert "latency" in printed and "probs: float32[2, 10]" in printed
    assert "outside kernels" in printed and "conv" in printed  # the --profile table


def test_cli_inspect(cnn, tmp_path, capsys):
    _, path, _, _ = cnn
    assert cli_main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "input  x: float32[2, 3, 13, 11]" in text and "conv" in text
    from onnx import helper

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("NoSuchOp", ["a"], ["b"], name="mystery1", domain="ember.test"),
    ]
    odd = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [2, 3])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ember.test", 1)],
    )
    bad = tmp_path / "odd.onnx"
    onnx.save(odd, str(bad))
    assert cli_main(["inspect", str(bad)]) == 1
    assert "mystery1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, phrase",
    [
        (["compile", "M", "--shape", "x=1,a"], "--shape"),
        (["compile", "M", "--shape", "x"], "--shape"),
        (["run", "M", "--input", "x"], "--input"),
        (["run", "M", "--bench", "-1"], "--bench"),
        (["run", "M", "--profile", "-1"], "--profile"),
    ],
)
def test_cli_user_errors_exit_1(cnn, argv, phrase, capsys):
    _, path, _, compiled = cnn
    argv = [str(path) if a == "M" else a for a in argv]
    assert cli_main(argv) == 1
    assert phrase in capsys.readouterr().err


def test_params_are_npy_entries_that_numpy_reads_and_the_same_params_give_the_same_bytes():
    """Ember writes the params' npz itself (numpy 2.5.2's ``savez`` headers read back with
    NUL bytes): standard ``.npy`` 1.0 entries, data 64-byte aligned, 0-d, empty, bool and
    Fortran-ordered arrays kept, no timestamps in the bytes."""
    import io
    import zipfile

    from ember.graph.artifact import _params_bytes, _read_param

    rng = np.random.default_rng(0)
    params = {
        "w": rng.standard_normal((5, 3, 3, 3)).astype("float32"),
        "b": rng.standard_normal(24).astype("float32"),
        "n": np.array(3, "int64"),
        "m": rng.random((2, 3)) < 0.5,
        "f": np.asfortranarray(rng.standard_normal((3, 4))),
        "e": np.zeros((0, 3), "float16"),
    }
    data = _params_bytes(params)
    assert _params_bytes(dict(reversed(params.items()))) == data
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for i, name in enumerate(sorted(params)):
            raw = z.read(f"p{i}.npy")
            assert (10 + int.from_bytes(raw[8:10], "little")) % 64 == 0
            got = np.load(io.BytesIO(raw))
            assert got.dtype == params[name].dtype and got.shape == params[name].shape
            np.testing.assert_array_equal(got, params[name])
            value = [list(params[name].shape), str(params[name].dtype)]
            np.testing.assert_array_equal(_read_param(z, f"p{i}.npy", value, "m"), params[name])


def test_a_loaded_model_names_the_nodes_its_kernels_absorbed(tmp_path):
    """A conv with its batch norm folded in keeps naming the BN after export and load (in
    its errors, ``profile()`` and the steps' names)."""
    from tests.frontend.test_graph_passes import _conv_bn

    model, feeds = _conv_bn(np.random.default_rng(5))
    compiled = ember.compile(model)
    compiled.export(tmp_path / "m.ember")
    loaded = ember.load(tmp_path / "m.ember")
    absorbed = [n.absorbed for n in compiled.graph.nodes]
    assert "ONNX node 'bn' (BatchNormalization)" in {a for names in absorbed for a in names}
    assert [n.absorbed for n in loaded.graph.nodes] == absorbed
    assert [s.where for s in loaded.steps] == [s.where for s in compiled.steps]
    assert any("'bn' (BatchNormalization)" in s.where for s in loaded.steps)
    np.testing.assert_array_equal(loaded.run(feeds)[0], compiled.run(feeds)[0])
