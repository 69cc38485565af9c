"""The frontend's benchmark scripts run (on a small selection) and print their tables."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_node_suite_script_prints_a_per_op_table(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["onnx_node_suite.py", "--op", "Relu", "--op", "Flatten"])
    runpy.run_path(str(BENCH / "onnx_node_suite.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "Relu" in out and "Flatten" in out
    assert re.search(r"\n\d+/\d+ cases pass \(\d+\.\d%\)", out)


@pytest.mark.slow
def test_model_benchmark_script_checks_and_times(monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    argv = [
        "bench_models.py",
        "--models",
        "cnn,mlp",
        "--number",
        "1",
        "--repeat",
        "1",
        "--rounds",
        "2",
        "--mode",  # in this process, no pauses: the script's table, not its timing
        "blocks",
        "--pause",
        "0",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(BENCH / "bench_models.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "cnn" in out and "mlp" in out and "ort/ember" in out


def test_model_benchmark_lists_the_new_models():
    """The first six models keep their place; the bigger and the real ones follow."""
    scope = runpy.run_path(str(BENCH / "bench_models.py"))
    names = list(scope["models"](True))
    assert names[:6] == ["resnet18", "mobilenet_v2", "bert", "cnn", "mlp", "speech"]
    assert {"resnet50", "bert_base", "gpt2_past1024", "mel_spectrogram"} <= set(names)


def test_conv_benchmark_script_checks_every_template_and_tunes(monkeypatch, capsys, tmp_path):
    pytest.importorskip("onnxruntime")
    monkeypatch.syspath_prepend(str(BENCH))
    argv = ["bench_conv.py", "--shape", "1,8,10,9,16", "--rounds", "1", "--number", "1",
            "--trials", "3", "--tune", "nchwc", "--records", str(tmp_path / "r.jsonl")]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(BENCH / "bench_conv.py"), run_name="__main__")
    out = capsys.readouterr().out
    for name in ("direct fallback", "NCHWc fallback", "winograd fallback", "nchwc tuned (3"):
        assert name in out
    assert "vs onnxruntime" in out


def test_profile_script_compares_thread_counts(monkeypatch, capsys, avx512_tiles):
    """``--threads 1,2``: every step's time at each count, by turns, and the speedup (the
    step names those of AVX-512's blocks)."""
    argv = ["profile_model.py", "--model", "cnn", "--quick", "--threads", "1,2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--rounds", "1", "--number", "1"])
    monkeypatch.syspath_prepend(str(BENCH))
    runpy.run_path(str(BENCH / "profile_model.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["#", "ops", "1t", "ms", "2t", "ms", "2t/1t"]
    assert any(line.split()[1:2] == ["conv+relu"] for line in lines[1:])
    assert lines[-1].split()[0] == "run" and re.fullmatch(r"\d+\.\d\dx", lines[-1].split()[-1])


def test_host_noise_script_samples_every_cpu(monkeypatch, capsys):
    """Each sample times the loop pinned to each CPU, and the affinity is restored."""
    import os

    mask = os.sched_getaffinity(0)
    argv = ["host_noise.py", "--seconds", "0.3", "--interval", "0"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(BENCH / "host_noise.py"), run_name="__main__")
    assert os.sched_getaffinity(0) == mask
    lines = capsys.readouterr().out.splitlines()
    samples = int(lines[0].split()[0])
    assert samples >= 1 and len(lines) == 1 + samples + len(mask) + 1
    figures = [float(f) for line in lines[1 : 1 + samples] for f in line.split()]
    assert len(figures) == samples * len(mask) and min(figures) == 1.0
    assert lines[-1].startswith("every CPU slow at once:")


def test_contention_benchmark_takes_any_catalog_model():
    """``bench_contention.py --models NAME`` times its own small models, and
    ``catalog/NAME`` any model of ``ember bench``'s catalog at full size (its MobileNetV2
    at 224, not the script's at 96); an unknown name stops with the names it knows."""
    import numpy as np

    from ember.frontend.testing.catalog import CATALOG

    scope = runpy.run_path(str(BENCH / "bench_contention.py"))
    model, inputs = scope["builder"]("catalog/kws_dscnn")(np.random.default_rng(0))
    expected, _ = CATALOG["kws_dscnn"](np.random.default_rng(0), False)
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in expected.graph.node]
    small, _ = scope["builder"]("mlp")(np.random.default_rng(0))  # the script's own MLP
    full, _ = scope["builder"]("catalog/mlp")(np.random.default_rng(0))
    size = [d.dim_value for d in small.graph.input[0].type.tensor_type.shape.dim]
    assert size != [d.dim_value for d in full.graph.input[0].type.tensor_type.shape.dim]
    with pytest.raises(SystemExit, match="unknown model 'nope'"):
        scope["builder"]("nope")


def test_contention_summary_charges_a_pool_for_its_stalls():
    """A runtime whose busy runs are mostly quiet-fast with a few 4 ms stalls has a busy
    median near its quiet one but a mean factor over 2; one running steadily at half speed
    reads 2 by both. The summary's factor is of the means, so the steady one is not worse."""
    import statistics

    scope = runpy.run_path(str(BENCH / "bench_contention.py"))
    quiet = [0.2e-3] * 100
    gamble = [0.2e-3] * 85 + [4.0e-3] * 15
    steady = [0.4e-3] * 100

    def rounds(busy: list[float]) -> dict:
        def block(times: list[float]) -> dict:
            return {
                "mean": statistics.fmean(times),
                "median": statistics.median(times),
                "p95": sorted(times)[94],
            }

        return {"quiet": [block(quiet)] * 2, "busy": [block(busy)] * 2}

    risky, even = scope["summary"](rounds(gamble)), scope["summary"](rounds(steady))
    assert risky["median"] == pytest.approx(1.0) and risky["mean"] == pytest.approx(3.85)
    assert even["median"] == pytest.approx(2.0) == even["mean"]
    assert risky["p95"] == pytest.approx(20.0) and even["p95"] == pytest.approx(2.0)
    assert even["mean"] < risky["mean"] and risky["busy_ms"] == pytest.approx(0.77)


def test_conv_knobs_script_times_configs_by_turns_and_names_a_broken_one(monkeypatch, capsys):
    argv = ["conv_knobs.py", "--shape", "8,6,5,16,3,1", "--rounds", "2", "--number", "1",
            "--repeat", "1", "{}", '{"ow_bn": 1}']  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(BENCH / "conv_knobs.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("defaults: {") and "2 rounds by turns, l2 flushed" in lines[1]
    assert [line.split()[0] for line in lines[2:]] == ["{}", '{"ow_bn":']
    assert all(float(line.split()[-1]) > 0 for line in lines[2:])
    monkeypatch.setattr(sys, "argv", [*argv[:-2], '{"ow_bn": 7}'])  # rows are 5 pixels wide
    with pytest.raises(SystemExit, match=r"ow_bn is not one of \[1, 2, 3, 4, 5\]"):
        runpy.run_path(str(BENCH / "conv_knobs.py"), run_name="__main__")
