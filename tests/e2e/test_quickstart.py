"""The README's main job, run as a user would: the ``ember`` command line."""

from __future__ import annotations

import subprocess
import sys


def _ember(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_demo_builds_checks_and_reports():
    out = _ember("demo", "--size", "192", "--threads", "2")
    assert out.returncode == 0, out.stderr
    assert "matmul 192x192x192 float32: ember" in out.stdout
    assert "GFLOP/s" in out.stdout and "result checked" in out.stdout
    assert "fused bias + GELU" in out.stdout


def test_info_prints_host():
    out = _ember("info")
    assert out.returncode == 0, out.stderr
    assert "host cpu" in out.stdout
    assert "nvrtc" in out.stdout  # a version, or why NVRTC is unavailable
    assert "cuda driver" in out.stdout
    assert "no CUDA device:" in out.stdout or "cuda:0" in out.stdout


def test_cli_user_error_exits_1_without_traceback():
    out = _ember("demo", "--size", "0")
    assert out.returncode == 1
    assert "ember: error:" in out.stderr and "Traceback" not in out.stderr
