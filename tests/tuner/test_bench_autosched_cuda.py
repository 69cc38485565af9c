"""``benchmarks/bench_autosched_cuda.py`` in its no-device mode on tiny workloads: sketches
built with NVRTC and checked on the emulator, a failing candidate counted and never fatal,
so the script the GPU runners run once stays working."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")
pytest.importorskip("onnx")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_autosched_cuda as B  # noqa: E402

pytestmark = pytest.mark.nvrtc


@pytest.fixture(autouse=True)
def no_device(monkeypatch):
    monkeypatch.setattr(B.cuda_device, "device_available", lambda: False)
    monkeypatch.setattr(B.cuda_device, "visible_arch", lambda: None)


def test_without_a_device_candidates_are_built_and_emulated_but_not_timed(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--tiny", "--emulate", "--trials", "2", "--only", "softmax", "--json", str(out)]
    assert B.main(argv) == 0
    text = capsys.readouterr().out
    assert "cannot be measured" in text and "emulator" in text
    report = json.loads(out.read_text())
    assert report["mode"] == "emulate" and report["arch"] == "sm_90"
    rows = {r["name"]: r for r in report["workloads"]}
    # softmax alone, and BERT's scale+mask (a group of its own) then softmax
    assert set(rows) == {"softmax 8x64", "scale_mask_softmax 2x16"}
    assert rows["scale_mask_softmax 2x16"]["groups"] == 2
    for r in rows.values():
        assert r["candidates"] == 2 * r["groups"]
        assert r["built"] == r["errors"]["ok"] == r["candidates"]  # all built and correct
        assert not r["generic_errors"] and "generic_us" not in r


def test_a_wrong_or_crashing_candidate_is_counted_and_the_run_goes_on(monkeypatch, capsys):
    monkeypatch.setattr(B, "_close", lambda got, want: False)
    calls = []
    real = B.ember.build

    def flaky(s, tensors, target):
        calls.append(target)
        if len(calls) == 3:  # the reference, the generic, then the first candidate
            raise RuntimeError("boom")
        return real(s, tensors, target=target)

    monkeypatch.setattr(B.ember, "build", flaky)
    assert B.main(["--tiny", "--emulate", "--trials", "3", "--only", "softmax 8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("softmax"))
    assert "crash:1" in line and "wrong_result:2" in line


def test_a_workload_runs_in_a_process_of_its_own_as_on_a_gpu():
    """The isolation a GPU run uses (here the child finds no device and only builds)."""
    opts = B.parse(["--tiny", "--trials", "2"])
    opts.arch = "sm_80"
    row = B._child("gelu_residual 4x64", opts, 60.0)
    assert "failed" not in row, row
    assert row["name"] == "gelu_residual 4x64" and row["built"] == row["candidates"] == 2
    assert B._child("no such workload", opts, 60.0)["failed"].startswith("exit 1")
