"""``ember bench``: the gate fails on a baseline it cannot meet and passes one it meets,
``--update-baseline`` writes a baseline the next run passes, the report and chart are
written, each runtime runs in its own process by default (the first test; the others time
in this process, which is quicker to start), and bad input is a clean error.

Timings here are not checked (the machine is shared); the tiny MLP of ``--quick`` with
one round of single runs and no pauses keeps each run to about a second.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ember.cli import main

pytest.importorskip("onnxruntime")

FAST = [
    "--quick",
    "--rounds",
    "1",
    "--number",
    "1",
    "--repeat",
    "1",
    "--threads",
    "1",
    "--pause",
    "0",
]


def _bench(*args: str) -> list[str]:
    return ["bench", "mlp", *FAST, "--mode", "blocks", *args]


def _baseline(path, ratio: float) -> str:
    entry = {"ratio": ratio, "ratio_min": ratio, "ratio_max": ratio}
    path.write_text(json.dumps({"threads": 1, "quick": True, "models": {"mlp": entry}}))
    return str(path)


def test_a_baseline_it_cannot_meet_fails_naming_the_model(tmp_path, capsys):
    baseline = _baseline(tmp_path / "b.json", 1000.0)
    status = main(["bench", "mlp", *FAST, "--baseline", baseline])  # each runtime its process
    out = capsys.readouterr().out
    assert status == 3
    assert "mlp: ratio" in out and "vs baseline 1000.00" in out and "REGRESSION" in out
    assert "noise allowance 30.00" in out  # the 3% floor of 1000: one round has no range
    assert "slower than the baseline allows: mlp" in out


def test_a_baseline_it_meets_passes_and_the_report_and_chart_are_written(tmp_path, capsys):
    report, chart = tmp_path / "out" / "r.json", tmp_path / "c.png"
    baseline = _baseline(tmp_path / "b.json", 0.0001)
    status = main(_bench("--baseline", baseline, "--report", str(report), "--chart", str(chart)))
    assert status == 0, capsys.readouterr()
    assert " ok" in capsys.readouterr().out
    data = json.loads(report.read_text())
    assert data["threads"] == 1 and data["quick"] is True and data["rounds"] == 1
    assert data["machine"]["cpu"] and data["machine"]["cores"] >= 1
    assert {"ember", "onnxruntime", "numpy"} <= set(data["versions"]) and data["date"]
    mlp = data["models"]["mlp"]
    assert mlp["ember_ms"] > 0 and mlp["ort_ms"] > 0
    assert mlp["ratio_min"] <= mlp["ratio"] <= mlp["ratio_max"]
    assert mlp["ratio"] == pytest.approx(mlp["ort_ms"] / mlp["ember_ms"])
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the host was probed around the round (a retake at most, one round)
    assert data["host_check"] is True and 0 <= mlp["retaken"] <= 1
    # a probe over its CPU's usual time; under 1.0 when the calibration's probes were slower
    assert mlp["rounds"][0]["host_slowdown"] > 0


def test_no_host_check_times_the_rounds_as_they_come(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main(_bench("--no-host-check", "--report", str(report))) == 0
    data = json.loads(report.read_text())
    mlp = data["models"]["mlp"]
    assert data["host_check"] is False and mlp["retaken"] == 0
    assert "host_slowdown" not in mlp["rounds"][0]


def test_update_baseline_writes_a_baseline_the_next_run_passes(tmp_path, capsys):
    baseline = str(tmp_path / "baseline.json")
    (tmp_path / "baseline.json").write_text('{"threads": 2, "quick": true, "models": {}}')
    assert main(_bench("--baseline", baseline, "--update-baseline")) == 0
    assert "taken with threads=2 and this run with threads=1; " in capsys.readouterr().out
    written = json.loads(open(baseline).read())
    assert set(written["models"]) == {"mlp"} and written["threads"] == 1
    # a generous floor: this checks the file round-trips, not the shared machine's noise
    assert main(_bench("--baseline", baseline, "--noise-floor", "0.99")) == 0
    assert "vs baseline" in capsys.readouterr().out


def test_a_model_may_be_an_onnx_file(tmp_path, capsys):
    import onnx

    from ember.frontend.testing.catalog import CATALOG

    model, _ = CATALOG["mlp"](np.random.default_rng(1), True)
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    assert main(["bench", str(path), *FAST, "--mode", "blocks"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("tiny ")


def test_records_reach_ember_s_compile_and_the_report(tmp_path, capsys, monkeypatch):
    import ember

    records = tmp_path / "tuned.jsonl"
    records.write_text("")  # an empty log: no record applies, the compile still reads it
    seen = []
    real = ember.compile

    def spy(*args, **kwargs):
        seen.append(kwargs.get("records"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ember, "compile", spy)
    out = tmp_path / "r.json"
    assert main(_bench("--records", str(records), "--report", str(out))) == 0
    assert seen == [str(records)]
    assert json.loads(out.read_text())["records"] == str(records)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "mlp", "--records", "nosuch.jsonl"], "--records: no file 'nosuch.jsonl'"),
        (["bench", "nosuch"], "unknown model 'nosuch': neither a catalog name (resnet18,"),
        (["bench", "missing.onnx"], "model file 'missing.onnx' does not exist"),
        (["bench", "mlp", "--update-baseline"], "--update-baseline needs --baseline FILE"),
        (["bench", "mlp", "--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_bad_input_is_a_clean_error(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember: error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "is not a readable JSON file"),
        ('{"threads": 1, "quick": true}', "expected an object with a 'models' object"),
        ('{"threads": 1, "quick": true, "models": {"mlp": {"ratio": 1}}}', "model 'mlp' needs"),
    ],
)
def test_a_malformed_baseline_is_a_clean_error(text, message, tmp_path, capsys):
    path = tmp_path / "b.json"
    path.write_text(text)
    assert main(["bench", "mlp", "--quick", "--baseline", str(path)]) == 1
    assert message in capsys.readouterr().err


def test_a_baseline_of_another_thread_count_is_refused_before_timing(tmp_path, capsys):
    baseline = _baseline(tmp_path / "b.json", 1.0)  # taken at 1 thread
    assert main(["bench", "mlp", "--quick", "--threads", "2", "--baseline", baseline]) == 1
    err = capsys.readouterr().err
    assert "the baseline was taken with threads=1 and this run with threads=2" in err
