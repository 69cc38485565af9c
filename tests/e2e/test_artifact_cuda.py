"""CUDA model artifacts: export, load in a fresh process, emulate; images, refusals, the CLI.

Without a GPU the loaded model runs its stored TIR in the SIMT emulator; its outputs
must equal the in-process model's bit for bit and onnxruntime's within float32
tolerance. The stored cubins and PTX are checked for what they claim to be (an ELF
image per architecture, PTX naming every kernel of the launch table). Which image a
device loads is tested against pretend devices here and on a real one under ``gpu``.
"""

from __future__ import annotations

import hashlib
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
pytest.importorskip("cuda")
pytestmark = pytest.mark.nvrtc
ROOT = Path(__file__).resolve().parents[2]


def _conv_block(rng: np.random.Generator):
    """Conv (odd channels, stride 2, asymmetric pads) + BatchNorm + Relu + MaxPool."""
    from onnx import helper

    from ember.frontend.testing.models import build_model

    c_in, c_out = 3, 5
    weights = {
        "W": (rng.standard_normal((c_out, c_in, 3, 3)) * 0.4).astype("float32"),
        "B": rng.standard_normal(c_out).astype("float32"),
        "gamma": rng.uniform(0.5, 1.5, c_out).astype("float32"),
        "beta": rng.standard_normal(c_out).astype("float32"),
        "mean": rng.standard_normal(c_out).astype("float32") * 0.1,
        "var": rng.uniform(0.5, 2.0, c_out).astype("float32"),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W", "B"], ["c"], name="conv", strides=[2, 2], pads=[1, 0, 1, 1]),
        n("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
        n("Relu", ["bn"], ["r"], name="relu"),
        n("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[1, 1]),
    ]
    x = rng.standard_normal((2, c_in, 11, 9)).astype("float32")
    return build_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def _mlp(rng: np.random.Generator):
    from ember.frontend.testing.models import mlp

    return mlp(rng, batch=3, sizes=(13, 24, 7))


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Both models compiled for CUDA (lowered for sm_80, as on a machine without a GPU,
    whatever the machine holds), run in the emulator, and exported (default archs)."""
    folder = tmp_path_factory.mktemp("cuda_artifacts")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_CUDA_EMULATE", "1")
        for name, build in [("mlp", _mlp), ("conv", _conv_block)]:
            model, feeds = build(np.random.default_rng(11))
            compiled = ember.compile(model, target="cuda -arch=sm_80")
            want = compiled.run(feeds)
            art = folder / f"{name}.ember"
            compiled.export(art)
            np.save(folder / f"{name}_x.npy", feeds["x"])
            out[name] = (model, feeds, compiled, want, art)
    return folder, out


def _members(art: Path) -> tuple[dict, dict[str, bytes]]:
    with zipfile.ZipFile(art) as z:
        members = {n: z.read(n) for n in z.namelist()}
    return json.loads(members.pop("manifest.json")), members


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_export_load_in_a_fresh_process_and_emulate(exported, name):
    folder, models = exported
    model, feeds, _, want, art = models[name]
    ref = _ort(model, feeds)[0]
    np.testing.assert_allclose(want[0], ref, rtol=1e-4, atol=1e-5)
    if name == "mlp":  # numpy, independently of onnxruntime
        init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
        h = np.maximum(feeds["x"] @ init["w0"] + init["b0"], 0)
        np.testing.assert_allclose(want[0], h @ init["w1"], rtol=1e-4, atol=1e-5)
    script = (
        "import sys, numpy as np, ember\n"
        "m = ember.load(sys.argv[1])\n"
        "assert m.target.kind == 'cuda', m.target\n"
        "np.save(sys.argv[3], m.run({'x': np.load(sys.argv[2])})[0])\n"
    )
    got = folder / f"{name}_got.npy"
    env = {**_plain_env(), "EMBER_CUDA_EMULATE": "1"}
    subprocess.run(
        [sys.executable, "-c", script, str(art), str(folder / f"{name}_x.npy"), str(got)],
        check=True,
        cwd=ROOT,
        timeout=300,
        env=env,
    )
    np.testing.assert_array_equal(np.load(got), want[0])


def _plain_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "EMBER_CUDA_EMULATE"}


def test_the_artifact_holds_cubins_ptx_source_and_launch_metadata(exported):
    _, models = exported
    manifest, members = _members(models["conv"][4])
    cuda = manifest["cuda"]
    assert manifest["target"].startswith("cuda") and manifest["format_version"] == 2
    assert cuda["archs"] == ["sm_80", "sm_90"] and cuda["ptx_arch"] == "compute_80"
    assert set(manifest["sha256"]) == set(members)
    for name, data in members.items():
        assert manifest["sha256"][name] == hashlib.sha256(data).hexdigest()
    for entry in cuda["modules"]:
        for arch, cubin in entry["cubin"].items():
            assert members[cubin][:4] == b"\x7fELF", arch
        ptx = members[entry["ptx"]].decode()
        source = members[entry["source"]].decode()
        assert ".target sm_80" in ptx
        for k in entry["launches"]:
            assert f".entry {k['symbol']}" in ptx and k["symbol"] in source
            assert len(k["grid"]) == 3 and all(b >= 1 for b in k["block"])
            assert k["args"] and all(how in ("pointer", "value") for _, _, how in k["args"])
        assert json.loads(members[entry["tir"]])["programs"]["format"] == "ember-tir-json"


def _rewrite(src: Path, dst: Path, change, rehash: bool = False) -> None:
    manifest, members = _members(src)
    change(manifest, members)
    if rehash:
        manifest["sha256"] = {n: hashlib.sha256(d).hexdigest() for n, d in members.items()}
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            z.writestr(n, d)


def _flip_cubin_byte(manifest, members):
    name = manifest["cuda"]["modules"][0]["cubin"]["sm_90"]
    data = bytearray(members[name])
    data[len(data) // 2] ^= 0x01
    members[name] = bytes(data)


def _change_tir_constant(manifest, members):
    """A serial loop's bound changed in the stored TIR (hashes then recomputed to match)."""
    name = manifest["cuda"]["modules"][0]["tir"]
    data = json.loads(members[name])
    nodes = data["programs"]["nodes"]
    loop = next(n for n in nodes if n["c"] == "For" and n["f"]["kind"] == {"e": "ForKind.SERIAL"})
    nodes[loop["f"]["extent"]["n"]]["f"]["value"] += 1
    members[name] = json.dumps(data).encode()


def _change_launch_table(manifest, members):
    """The launch table changed and the section's digest recomputed: the TIR disagrees."""
    from ember.codegen_cuda.artifact import section_digest

    cuda = manifest["cuda"]
    cuda["modules"][0]["launches"][0]["block"][0] += 32
    cuda["sha256"] = section_digest(cuda)


def _swap_cubin_names(manifest, members):
    cubin = manifest["cuda"]["modules"][0]["cubin"]
    cubin["sm_80"], cubin["sm_90"] = cubin["sm_90"], cubin["sm_80"]


@pytest.mark.parametrize(
    "change, rehash, phrase",
    [
        (_flip_cubin_byte, False, "does not match its hash"),
        (_change_tir_constant, True, "does not print to the stored CUDA source"),
        (_change_launch_table, False, "launch table disagrees"),
        (_swap_cubin_names, False, "'cuda' section does not match its hash"),
    ],
)
def test_a_changed_cuda_artifact_is_refused(exported, tmp_path, change, rehash, phrase):
    _, models = exported
    bad = tmp_path / "bad.ember"
    _rewrite(models["mlp"][4], bad, change, rehash)
    with pytest.raises(ember.InvalidModelError, match=phrase):
        ember.load(bad)


def test_a_version_1_cpu_artifact_still_loads(tmp_path):
    from ember.frontend.testing.models import mlp

    model, feeds = mlp(np.random.default_rng(2), batch=2, sizes=(5, 6, 3))
    compiled = ember.compile(model)
    art, old = tmp_path / "m.ember", tmp_path / "old.ember"
    compiled.export(art)
    _rewrite(art, old, lambda manifest, _: manifest.update(format_version=1))
    np.testing.assert_array_equal(ember.load(old).run(feeds)[0], compiled.run(feeds)[0])


def _pretend_device(monkeypatch, arch: str | None) -> None:
    from ember.codegen_cuda import device

    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    monkeypatch.setattr(device, "visible_arch", lambda: arch)


@pytest.mark.parametrize(
    "device_arch, kind, arch",
    [("sm_80", "cubin", "sm_80"), ("sm_86", "cubin", "sm_80"), ("sm_90", "cubin", "sm_90")],
)
def test_loading_picks_the_cubin_of_the_device(exported, monkeypatch, device_arch, kind, arch):
    _, models = exported
    art = models["mlp"][4]
    manifest, members = _members(art)
    _pretend_device(monkeypatch, device_arch)
    module = ember.load(art).steps[0].kernel.module
    stored = members[manifest["cuda"]["modules"][0]["cubin"][arch]]
    assert module.compile().cubin == stored and module.compile().arch == arch


def test_a_newer_device_without_its_cubin_jits_the_ptx(exported, monkeypatch):
    _, models = exported
    art = models["mlp"][4]
    manifest, members = _members(art)
    _pretend_device(monkeypatch, "sm_120")
    compiled = ember.load(art).steps[0].kernel.module.compile()
    assert compiled.cubin == b"" and compiled.arch == "compute_80"
    assert compiled.ptx == members[manifest["cuda"]["modules"][0]["ptx"]].decode()


def test_a_device_outside_the_archs_without_ptx_is_a_clear_error(exported, tmp_path, monkeypatch):
    _, models = exported
    compiled = models["mlp"][2]
    art = tmp_path / "noptx.ember"
    compiled.export(art, archs=["sm_90"], ptx=False)
    manifest, members = _members(art)
    assert manifest["cuda"]["archs"] == ["sm_90"] and manifest["cuda"]["ptx_arch"] is None
    assert not any(n.endswith((".ptx", "sm_80.cubin")) for n in members)
    _pretend_device(monkeypatch, "sm_120")
    with pytest.raises(ember.DeviceError, match=r"sm_120.*cubins for sm_90 and no PTX"):
        ember.load(art)
    _pretend_device(monkeypatch, "sm_75")  # older than the PTX of a default export
    with pytest.raises(ember.DeviceError, match=r"PTX for compute_80 \(too new for it\)"):
        ember.load(models["mlp"][4])


def test_export_arch_choices_are_checked(exported, tmp_path):
    _, models = exported
    compiled = models["mlp"][2]
    with pytest.raises(ember.ArgumentError, match="lowered for sm_80"):
        compiled.export(tmp_path / "a.ember", archs=["sm_75"])
    with pytest.raises(ember.ArgumentError, match="not a cubin architecture"):
        compiled.export(tmp_path / "a.ember", archs=["compute_90"])
    with pytest.raises(ember.ArgumentError, match="unknown CUDA architecture"):
        compiled.export(tmp_path / "a.ember", archs=["sm_x"])
    assert not list(tmp_path.iterdir())


def test_without_a_gpu_a_plain_run_says_to_emulate(exported, monkeypatch):
    from ember.codegen_cuda.device import device_available

    if device_available():
        pytest.skip("this machine has a GPU")
    _, models = exported
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    _, feeds, _, _, art = models["mlp"]
    loaded = ember.load(art)
    with pytest.raises(ember.DeviceError, match="EMBER_CUDA_EMULATE"):
        loaded.run(feeds)


def test_scalar_outputs_survive_export(tmp_path, monkeypatch):
    """0-d results, which CUDA kernels write through (1,)-shaped views."""
    from onnx import helper

    from ember.frontend.testing.models import build_model

    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(301).astype("float32") for _ in range(2))
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["dot"], name="dot"),
        helper.make_node("Mul", ["dot", "dot"], ["sq"], name="sq"),
    ]
    model = build_model(nodes, {"a": a, "b": b}, ["sq", "dot"], {})
    art = tmp_path / "scalar.ember"
    ember.compile(model, target="cuda").export(art)
    got = ember.load(art).run({"a": a, "b": b})
    assert got[0].shape == () and got[1].shape == ()
    np.testing.assert_allclose(got[1], a @ b, rtol=1e-4)
    np.testing.assert_allclose(got[0], (a @ b) ** 2, rtol=1e-4)


def test_cli_compile_inspect_and_run_a_cuda_model(exported, tmp_path, capsys, monkeypatch):
    folder, models = exported
    model, feeds, _, want, _ = models["conv"]
    src = tmp_path / "conv.onnx"
    onnx.save(model, str(src))
    art = tmp_path / "conv.ember"
    argv = ["compile", str(src), "--target", "cuda", "--arch", "sm_80,sm_90", "-o", str(art)]
    assert cli_main(argv) == 0
    assert cli_main(["inspect", str(art)]) == 0
    text = capsys.readouterr().out
    assert "for cuda" in text and "cubins for sm_80, sm_90; PTX for compute_80" in text
    assert "<<<" in text and "float32* " in text
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    out = tmp_path / "out.npz"
    x = f"x={folder / 'conv_x.npy'}"
    from ember.codegen_cuda.device import device_available

    if not device_available():
        assert cli_main(["run", str(art), "--input", x]) == 1
        assert "--emulate" in capsys.readouterr().err
    assert cli_main(["run", str(art), "--input", x, "--output", str(out), "--emulate"]) == 0
    with np.load(out) as z:
        np.testing.assert_array_equal(z["y"], want[0])
    import os

    assert "EMBER_CUDA_EMULATE" not in os.environ  # --emulate does not leak


def test_cli_arch_on_a_cpu_model_and_emulate_on_a_cpu_model_are_errors(tmp_path, capsys):
    from ember.frontend.testing.models import mlp

    model, feeds = mlp(np.random.default_rng(1), batch=2, sizes=(5, 6, 3))
    src = tmp_path / "m.onnx"
    onnx.save(model, str(src))
    assert cli_main(["compile", str(src), "--arch", "sm_80", "-o", str(tmp_path / "m.e")]) == 1
    assert "CUDA models only" in capsys.readouterr().err
    art = tmp_path / "m.ember"
    assert cli_main(["compile", str(src), "-o", str(art)]) == 0
    assert cli_main(["run", str(art), "--random", "--emulate"]) == 1
    assert "--emulate applies to CUDA models" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("force_ptx", [False, True])
def test_on_a_gpu_the_loaded_model_matches_onnxruntime(exported, monkeypatch, force_ptx):
    """The stored cubin for the device (or, pretending a device with no cubin here, the
    PTX JIT-compiled by the driver) runs the model on the GPU."""
    _, models = exported
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    if force_ptx:
        _pretend_device(monkeypatch, "sm_120")  # no sm_12x cubin: the PTX is loaded
    for model, feeds, _, want, art in models.values():
        loaded = ember.load(art)
        got = loaded.run(feeds)[0]
        np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-5)


def test_a_model_lowered_for_sm_90_stores_sm_90_images(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    model, feeds = _mlp(np.random.default_rng(4))
    compiled = ember.compile(model, target="cuda -arch=sm_90")
    art = tmp_path / "sm90.ember"
    compiled.export(art)
    manifest, _ = _members(art)
    assert manifest["cuda"]["archs"] == ["sm_90"] and manifest["cuda"]["ptx_arch"] == "compute_90"
    np.testing.assert_array_equal(ember.load(art).run(feeds)[0], compiled.run(feeds)[0])
    with pytest.raises(ember.ArgumentError, match="lowered for sm_90"):
        compiled.export(tmp_path / "b.ember", archs=["sm_80", "sm_90"])
    _pretend_device(monkeypatch, "sm_86")
    with pytest.raises(ember.DeviceError, match=r"\(sm_86\).*cubins for sm_90"):
        ember.load(art)


def test_cli_arch_list_lowers_for_the_oldest_on_a_machine_with_a_newer_gpu(
    exported, tmp_path, capsys, monkeypatch
):
    """``--target cuda --arch sm_80,sm_90`` where the visible GPU is an sm_90: the kernels
    are lowered for sm_80, so both cubins are stored (lowered for the GPU's sm_90, the sm_80
    cubin was refused: seen on an H200, 2026-12-01)."""
    from ember.codegen_cuda import device

    monkeypatch.setattr(device, "visible_arch", lambda: "sm_90")
    model = exported[1]["mlp"][0]
    src, art = tmp_path / "mlp.onnx", tmp_path / "mlp.ember"
    onnx.save(model, str(src))
    argv = ["compile", str(src), "--target", "cuda", "--arch", "sm_90,sm_80", "-o", str(art)]
    assert cli_main(argv) == 0
    assert cli_main(["inspect", str(art)]) == 0
    assert "cubins for sm_80, sm_90; PTX for compute_80" in capsys.readouterr().out
