"""Issue 22, the CLI, cache, target and tuner-trust items: kernel cache keys (7, 19), records
reading (16), ``ember run --output`` (20), Ctrl-C and stale journal locks (21), CUDA arch
limits (29), target options (31), TVM-style ``Target`` and ``ember.testing`` (33), tuning
errors shown (35) and the CLI's ``--threads``, broken pipes and per-verb usage (36).

Each test is named ``test_item_NN_...`` and checks against an independent reference: numpy
for numbers, the CUDA programming guide's limits, the documented flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.kernels import clear_cache, kernel_key

onnx = pytest.importorskip("onnx")
ROOT = Path(__file__).resolve().parents[2]


def _leaky_model(x: np.ndarray, alpha: float):
    from onnx import helper

    from ember.frontend.testing.models import build_model

    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha)
    return build_model([node], {"x": x}, ["y"], {})


# --- item 7: float attributes keyed by their bits ---------------------------------------


def test_item_07_kernel_keys_tell_signed_zeros_and_nans_apart(monkeypatch) -> None:
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 7)).astype("float32")
    for alpha in (0.0, -0.0):  # the second must not reuse the first's kernel
        y = ember.compile(_leaky_model(x, alpha)).run({"x": x})[0]
        ref = np.where(x < 0, x * np.float32(alpha), x)  # ONNX LeakyRelu, in numpy
        np.testing.assert_array_equal(y, ref)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(ref))
    assert kernel_key("leaky_relu", {"alpha": 0.0}, (), "") != kernel_key(
        "leaky_relu", {"alpha": -0.0}, (), ""
    )
    nan_a, nan_b = float("nan"), float(np.float64("nan"))
    assert kernel_key("x", {"v": nan_a}, (), "") == kernel_key("x", {"v": nan_b}, (), "")
    assert kernel_key("x", {"v": [1.0, -0.0]}, (), "") != kernel_key("x", {"v": [1.0, 0.0]}, (), "")


# --- item 19: a stable records fingerprint in the disk cache key ------------------------

_COMPILE_WITH_RECORDS = """
import json, sys, numpy as np, ember
model = ember.compile(sys.argv[1], "llvm", sys.argv[2])
x = np.load(sys.argv[3])
np.save(sys.argv[4], model.run({"x": x})[0])
print(json.dumps(kernel_cache.STATS))
"""


def _fake_record_line() -> str:
    from ember.target import host_cpu_model

    return json.dumps(
        {
            "task_key": "t0", "template": "nothing.llvm", "workload_key": '["nothing.llvm",[1]]',
            "template_version": 1, "target": "llvm", "config": {"values": {"tile": 4}},
            "costs": [1e-3], "error": "ok", "device": host_cpu_model(), "ember_version": "x",
        }
    )  # fmt: skip


def test_item_19_disk_cache_hits_across_processes_with_records(tmp_path) -> None:
    rng = np.random.default_rng(19)
    x = rng.standard_normal((2, 5)).astype("float32")
    onnx.save(_leaky_model(x, 0.25), str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "rec.jsonl").write_text(_fake_record_line() + "\n")
    stats = []
    for seed in ("1", "2"):  # different string-hash salts
        env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONHASHSEED": seed}
        env.pop("EMBER_DISK_CACHE", None)
        argv = [str(tmp_path / p) for p in ("m.onnx", "rec.jsonl", "x.npy", f"y{seed}.npy")]
        done = subprocess.run(
            [sys.executable, "-c", _COMPILE_WITH_RECORDS, *argv],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        stats.append(json.loads(done.stdout.strip().splitlines()[-1]))
        y = np.load(tmp_path / f"y{seed}.npy")
        np.testing.assert_allclose(y, np.where(x < 0, 0.25 * x, x), rtol=1e-6)
    assert stats[0]["stored"] >= 1 and stats[0]["hit"] == 0
    assert stats[1]["hit"] == stats[0]["stored"] and stats[1]["stored"] == 0
    assert len(list((tmp_path / "cache").glob("kernels/*/*/kernel.so"))) == stats[0]["stored"]
