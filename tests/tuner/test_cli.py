"""``ember tune`` and ``ember records`` end to end: records and a PNG written, user
errors exit 1 with a message."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ember.cli import main
from ember.tuner import read_records


def test_tune_writes_records_and_a_plot(tmp_path, capsys):
    log, png = tmp_path / "X.jsonl", tmp_path / "Y.png"
    # not re-timed, so that each trial is one record (re-timing: tests/tuner/test_retime.py)
    argv = ["tune", "--op", "matmul", "--shape", "64,64,64", "--retime-rounds", "0"]
    argv += ["--trials", "3"]
    assert main([*argv, "--log", str(log), "--plot", str(png), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "tuning summary" in out and "measured trials" in out
    recs = read_records(log)
    assert len(recs) == 3 and all(r.template == "matmul.llvm" for r in recs)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["records", "best", str(log)]) == 0
    assert "matmul.llvm" in capsys.readouterr().out
    merged = tmp_path / "M.jsonl"
    assert main(["records", "merge", str(merged), str(log), str(log)]) == 0
    assert len(read_records(merged)) == 3
    assert main(["records", "show", str(merged), "--limit", "2"]) == 0
    # resuming continues the same study up to the new total
    assert main([*argv[:-1], "4", "--log", str(log), "--resume"]) == 0
    assert len(read_records(log)) == 4


@pytest.mark.parametrize(
    "args,message",
    [
        (["--op", "matmulx", "--shape", "64,64,64"], "no schedule template named 'matmulx.llvm'"),
        (["--op", "matmul", "--shape", "64,x"], "--shape must be comma-separated positive ints"),
        (["--op", "matmul", "--shape", "64,64"], "takes arguments (M, N, K, dtype)"),
        (["--op", "matmul", "--shape", "8,8,8", "--trials", "0"], "--trials must be >= 1"),
        (
            ["--op", "matmul", "--shape", "8,8,8", "--sampler", "grid", "--target", "gpu"],
            "unknown target kind",
        ),
    ],
)
def test_user_errors_exit_1(args, message, capsys):
    assert main(["tune", *args]) == 1
    assert message in capsys.readouterr().err


def test_exit_status_from_the_shell(tmp_path):
    cmd = [sys.executable, "-m", "ember.cli", "tune", "--op", "nope", "--shape", "4"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "ember: error:" in out.stderr
    cmd = [sys.executable, "-m", "ember.cli", "records", "show", str(tmp_path / "missing.jsonl")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "cannot read records file" in out.stderr
