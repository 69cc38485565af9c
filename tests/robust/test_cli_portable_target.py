"""The portable CPU choice from the shell (issue 22, item 10: "give users a portable choice
(``--target "llvm -mcpu=x86-64-v3"`` or similar)").

``ember compile --help`` names it, and the commands a user types work end to end: the
compile writes a file whose manifest records x86-64-v3 and no AVX-512, ``ember run
--random`` runs it, and its outputs on given inputs match onnxruntime's.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.frontend.onnx_models import run_ort

onnx = pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]


def _ember() -> str:
    """The ``ember`` command as a user's shell finds it in this environment."""
    script = Path(sys.executable).parent / "ember"
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m ember.cli"


def _shell(command: str, cwd: Path) -> str:
    proc = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_item_10_cli_portable_target_end_to_end(tmp_path: Path) -> None:
    import llvmlite.binding as llvm

    from ember.frontend.testing.models import small_cnn

    ember = _ember()
    assert "llvm -mcpu=x86-64-v3" in " ".join(_shell(f"{ember} compile --help", tmp_path).split())

    host = {k for k, on in llvm.get_host_cpu_features().items() if on}
    if not {"avx2", "fma", "bmi2", "movbe"} <= host:
        pytest.skip("this CPU is below x86-64-v3: it cannot run the file")
    model, feeds = small_cnn(np.random.default_rng(10), batch=2, h=9, w=7)
    onnx.save(model, str(tmp_path / "model.onnx"))
    _shell(f'{ember} compile model.onnx --target "llvm -mcpu=x86-64-v3" -o m.ember', tmp_path)
    with zipfile.ZipFile(tmp_path / "m.ember") as z:
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["cpu"]["name"] == "x86-64-v3"
    assert "avx2" in manifest["cpu"]["features"]
    assert not [f for f in manifest["cpu"]["features"] if f.startswith("avx512")]

    out = _shell(f"{ember} run m.ember --random", tmp_path)
    assert "float32[2, 10]" in out, out

    ((name, x),) = feeds.items()
    np.save(tmp_path / "x.npy", x)
    _shell(f"{ember} run m.ember --input {name}=x.npy --output out.npz", tmp_path)
    with np.load(tmp_path / "out.npz") as got:
        outputs = [got[k] for k in got.files]
    want = run_ort(model, feeds)
    assert len(outputs) == len(want)
    for g, w in zip(outputs, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
