"""Issue 22, the CLI, cache, target and tuner-trust items: kernel cache keys (7, 19), records
reading (16), ``ember run --output`` (20), Ctrl-C and stale journal locks (21), CUDA arch
limits (29), target options (31), TVM-style ``Target`` and ``ember.testing`` (33), tuning
errors shown (35) and the CLI's ``--threads``, broken pipes and per-verb usage (36).

Each test is named ``test_item_NN_...`` and checks against an independent reference: numpy
for numbers, the CUDA programming guide's limits, the documented flags."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.graph.kernels import clear_cache, kernel_key

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
from ember.graph import kernel_cache, model_cache
model = ember.compile(sys.argv[1], "llvm", sys.argv[2])
x = np.load(sys.argv[3])
np.save(sys.argv[4], model.run({"x": x})[0])
print(json.dumps({"kernels": kernel_cache.STATS, "models": model_cache.STATS}))
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
    for seed in ("1", "2", "3"):  # different string-hash salts
        if seed == "3":  # the kernels alone: what a compile the whole model misses finds
            shutil.rmtree(tmp_path / "cache" / "models")
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
    kernels, models = [s["kernels"] for s in stats], [s["models"] for s in stats]
    assert kernels[0]["stored"] >= 1 and kernels[0]["hit"] == 0 and models[0]["stored"] == 1
    assert models[1]["hit"] == 1 and kernels[1] == dict.fromkeys(kernels[1], 0)
    assert kernels[2]["hit"] == kernels[0]["stored"] and kernels[2]["stored"] == 0
    assert len(list((tmp_path / "cache").glob("kernels/*/*/kernel.so"))) == kernels[0]["stored"]


# --- item 16: one reading rule for records ---------------------------------------------


def _record(**over) -> dict:
    base = json.loads(_fake_record_line())
    base.update(over)
    return base


def test_item_16_records_commands_skip_what_read_records_skips(tmp_path, capsys) -> None:
    from ember.cli import main
    from ember.tuner import read_records

    good = _record(task_key="good", template="good.llvm", workload_key='["good.llvm",[3,5]]')
    bad = [
        _record(config=None),
        _record(config=[1, 2]),
        _record(task_key=7),
        _record(workload_key=12),
        _record(config={"values": [1]}),
        _record(costs=["fast"]),
        _record(target="gpu"),
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [*bad, good]) + '\n{"cut short')
    with pytest.warns(UserWarning, match="skipped 8 line"):
        recs = read_records(path)
    assert [r.task_key for r in recs] == ["good"]
    for verb in ("show", "best"):
        with pytest.warns(UserWarning, match="skipped 8 line"):
            assert main(["records", verb, str(path)]) == 0
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err + captured.out
        assert "good.llvm" in captured.out and "3,5" in captured.out
    merged = tmp_path / "m.jsonl"
    with pytest.warns(UserWarning):
        assert main(["records", "merge", str(merged), str(path)]) == 0
    assert [json.loads(line)["task_key"] for line in merged.read_text().splitlines()] == ["good"]


# --- item 35: tuning failures and busy measurements shown -------------------------------


def _fake_tune_result():
    """Four trials: a fallback measured on a loaded machine (repeats 1 ms and 9 ms), a
    runtime error with its message, a crash, and a clean 2 ms trial."""

    from ember.tuner import create_task
    from ember.tuner.result import ErrorKind, MeasureResult
    from ember.tuner.search import TrialRecord
    from ember.tuner.tune import TuneResult, fallback_entity

    results = [
        MeasureResult((1e-3, 9e-3, 8e-3)),
        MeasureResult.failed(ErrorKind.RUNTIME, "kernel raised: index 70 out of range\nmore"),
        MeasureResult.failed(ErrorKind.CRASH, "the worker process was killed by SIGSEGV"),
        MeasureResult((2.0e-3, 2.02e-3, 2.01e-3)),
    ]
    best = [8e-3, 8e-3, 8e-3, 2.01e-3]
    task = create_task("matmul.llvm", (8, 8, 8, "float32"))
    configs = [fallback_entity(task), None, None, None]  # the fallback is measured first
    trials = [TrialRecord(k, c, r, b) for k, (c, r, b) in enumerate(zip(configs, results, best))]
    return TuneResult(task, None, 2.01e-3, trials, 0, 0, "trials", None), task


def test_item_35_tuning_errors_and_busy_measurements_are_shown(
    tmp_path, capsys, monkeypatch
) -> None:
    from types import SimpleNamespace

    from ember.cli import main
    from ember.cli.tune import plot_convergence, print_summary
    from ember.cli.tune_model import print_model_summary

    result, task = _fake_tune_result()
    print_summary(result, None)
    out = capsys.readouterr().out
    assert "index 70 out of range" in out and "killed by SIGSEGV" in out
    assert "busy machine" in out and "x9.00 spread" in out  # 9 ms / 1 ms, from the repeats
    print_model_summary([SimpleNamespace(task=task, weight=3)], [result], None)
    out = capsys.readouterr().out
    assert "failed" in out and "runtime 1" in out and "crash 1" in out
    assert "index 70 out of range" in out
    assert "unreliable" in out  # 8 ms / 2.01 ms = 3.98x, but from a busy measurement
    # records show: the message beside the kind, and the busy flag
    line = _record(error="runtime", costs=[], message="launch failed: bad grid\ntrace")
    noisy = _record(costs=[1e-3, 4e-3, 2e-3])
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(noisy) + "\n")
    monkeypatch.setenv("COLUMNS", "200")  # rich folds cells to the terminal's width
    assert main(["records", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "runtime: launch failed: bad grid" in out and "busy" in out
    # the plot keeps the failed trials
    import matplotlib.figure

    seen = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(fig, *a, **k):
        seen["labels"] = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        return real_savefig(fig, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.figure.Figure, "savefig", savefig)
        plot_convergence(result, tmp_path / "p.png")
    assert "failed (2)" in seen["labels"]


# --- item 20: `ember run --output` writes the name given --------------------------------


@pytest.fixture
def leaky_onnx(tmp_path):
    x = np.random.default_rng(20).standard_normal((3, 4)).astype("float32")
    onnx.save(_leaky_model(x, 0.5), str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", x)
    return tmp_path / "m.onnx", x


def test_item_20_run_output_writes_exactly_the_named_file(
    leaky_onnx, tmp_path, monkeypatch, capsys
) -> None:
    from ember.cli import main

    model, x = leaky_onnx
    monkeypatch.chdir(tmp_path)
    argv = ["run", str(model), "--input", f"x={tmp_path / 'x.npy'}"]
    assert main([*argv, "--output", "o2"]) == 0
    assert "wrote o2\n" in capsys.readouterr().out
    assert (tmp_path / "o2").is_file() and not (tmp_path / "o2.npz").exists()
    with np.load(tmp_path / "o2") as z:  # an .npz archive under the name given
        np.testing.assert_allclose(z["y"], np.where(x < 0, 0.5 * x, x), rtol=1e-6)
    for folder in (".", str(tmp_path / "sub") + "/"):
        assert main([*argv, "--output", folder]) == 1
        assert "is a folder; name the .npz file" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.npz"))


# --- item 36: --threads, broken pipes, the verb's usage on a typo -----------------------


def test_item_36_threads_flag_broken_pipe_and_verb_usage(leaky_onnx, tmp_path, monkeypatch, capsys):
    from ember.cli import main
    from ember.runtime import get_num_threads, set_num_threads

    model, x = leaky_onnx
    monkeypatch.delenv("EMBER_NUM_THREADS", raising=False)
    try:
        assert main(["run", str(model), "--random", "--threads", "1"]) == 0
        assert get_num_threads() == 1 and os.environ["EMBER_NUM_THREADS"] == "1"
    finally:
        set_num_threads(None)
    capsys.readouterr()
    for verb in (["run", str(model), "--random"], ["compile", str(model)]):
        assert main([*verb, "--threads", "0"]) == 1
        assert "--threads must be a positive integer, got 0" in capsys.readouterr().err
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--threads", "-1"]) == 1
    assert "--threads must be a positive integer" in capsys.readouterr().err
    # a misspelt flag: the verb's usage, not the top level's
    for argv, usage in (
        (["run", str(model), "--outptu", "o"], "usage: ember run"),
        (["records", "show", "f.jsonl", "--lmit", "3"], "usage: ember records show"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and usage in err and "unrecognized arguments" in err
    # a reader that stops early: no traceback, for any verb (they share main's handler)
    rec = tmp_path / "r.jsonl"
    rec.write_text((json.dumps(_record()) + "\n") * 200)
    for argv in (["inspect", str(model), "--graph"], ["records", "show", str(rec)]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ember.cli", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        proc.stdout.close()  # closed before the command has printed anything
        err = proc.stderr.read().decode()
        # 141 as for a SIGPIPE death; rich's tables end with its own quiet exit 1
        assert proc.wait(timeout=120) in (141, 1), err
        assert "Traceback" not in err and "BrokenPipe" not in err, err


# --- item 29: per-arch limits for every arch NVRTC offers; legal grids from strategies --

# From the CUDA programming guide's "technical specifications per compute capability":
# (max threads per SM, max blocks per SM, shared bytes per block with the opt-in)
GUIDE = {
    "sm_75": (1024, 16, 64 * 1024),
    "sm_80": (2048, 32, 163 * 1024),
    "sm_86": (1536, 16, 99 * 1024),
    "sm_87": (1536, 16, 163 * 1024),
    "sm_89": (1536, 24, 99 * 1024),
    "sm_90": (2048, 32, 227 * 1024),
    "sm_100": (2048, 32, 227 * 1024),
    "sm_120": (1536, 24, 99 * 1024),
}


def _fp16_matmul(a_shape, b_shape, seed):
    from onnx import helper

    from ember.frontend.testing.models import build_model

    rng = np.random.default_rng(seed)
    a = rng.standard_normal(a_shape).astype("float16")
    b = rng.standard_normal(b_shape).astype("float16")
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    return build_model([node], {"a": a, "b": b}, ["c"], {}), a, b


def test_item_29_arch_table_covers_nvrtc_and_the_guide() -> None:
    from ember.codegen_cuda.resources import arch_limits, arch_number

    pytest.importorskip("cuda.bindings")
    from ember.codegen_cuda.nvrtc import supported_archs

    for arch in supported_archs():  # every architecture the installed NVRTC offers
        assert arch_limits(arch).max_threads_per_block == 1024
    for arch, (per_sm, blocks, shared) in GUIDE.items():
        limits = arch_limits(arch)
        assert (limits.max_threads_per_sm, limits.max_blocks_per_sm) == (per_sm, blocks)
        assert limits.max_shared_per_block == shared
    assert arch_limits("sm_90a") == arch_limits("sm_90") == arch_limits("compute_90")
    assert (arch_number("sm_90a"), arch_number("sm_100f"), arch_number("x")) == (90, 100, 0)
    from ember.codegen_cuda.transform.inject_pipeline import uses_async_copy

    assert uses_async_copy("sm_100f") and uses_async_copy("sm_90a") and not uses_async_copy("sm_75")


@pytest.mark.nvrtc
def test_item_29_fp16_gemm_builds_on_real_archs(monkeypatch) -> None:
    """A 256x64 @ 64x128 fp16 MatMul takes the tensor-core template, whose tiles need about
    60 KiB of shared memory: legal on sm_80+ (and on sm_90a, a suffix not a generation)."""
    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    model, _, _ = _fp16_matmul((256, 64), (64, 128), 29)
    for arch in ("sm_90a", "sm_87", "sm_100", "sm_120"):
        clear_cache()
        cm = ember.compile(model, f"cuda -arch={arch}")
        module = cm.steps[0].kernel.module
        assert "mma" in module.cuda_source()
        (usage,) = module.resource_usage().values()  # NVRTC and ptxas built it
        assert usage.shared_bytes + usage.dynamic_shared_bytes > 48 * 1024


def _grid(cm) -> tuple[int, int, int]:
    (kernel,) = cm.steps[0].kernel.module.kernels
    return tuple(kernel.attr("launch")[0])


def test_item_29_batched_fp16_matmul_keeps_the_grid_legal(monkeypatch) -> None:
    from ember.codegen_cuda.schedules import common

    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    model, _, _ = _fp16_matmul((70000, 3, 5), (70000, 5, 4), 1)
    grid = _grid(ember.compile(model, "cuda -arch=sm_80"))  # was refused: z = 70000
    assert grid[1] <= 65535 and grid[2] <= 65535 and np.prod(grid) >= 70000
    # the fused grid computes what numpy does: force it on a small batch, run it emulated
    monkeypatch.setattr(common, "MAX_GRID_YZ", 2)
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    clear_cache()
    model, a, b = _fp16_matmul((5, 19, 7), (5, 7, 33), 2)
    cm = ember.compile(model, "cuda -arch=sm_80")
    assert _grid(cm)[1:] == (1, 1)
    ref = (a.astype("float32") @ b.astype("float32")).astype("float16")
    np.testing.assert_allclose(cm.run({"a": a, "b": b})[0], ref, rtol=2e-3, atol=2e-3)
    clear_cache()


# --- item 31: target options validated, and the limits they set enforced -----------------


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("cuda -max-threads-per-block=abc", "must be a whole number in 1..1024"),
        ("cuda -max-threads-per-block=0", "must be a whole number in 1..1024"),
        ("cuda -max-threads-per-block=2048", "must be a whole number in 1..1024"),
        ("cuda -max-threads-per-block", "must be a whole number"),
        ("cuda -max-shared-memory-per-block=-5", "must be a whole number in 1 or more"),
        ("cuda -arch=sm_80 -arch=sm_90", "-arch is given twice"),
        ("llvm -mcpu=haswell -mcpu=znver3", "-mcpu is given twice"),
    ],
)
def test_item_31_target_options_are_validated(text: str, phrase: str) -> None:
    from ember.errors import ArgumentError
    from ember.target import Target

    with pytest.raises(ArgumentError, match=phrase):
        Target.parse(text)


def test_item_31_target_limits_are_enforced_and_export_takes_a_string(tmp_path, monkeypatch):
    from ember import te
    from ember.errors import EmberError

    n = 4096
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=512)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    ember.build(s, [A, B], target="cuda -max-threads-per-block=512")  # at the limit
    with pytest.raises(EmberError, match="-max-threads-per-block is 256"):
        ember.build(s, [A, B], target="cuda -max-threads-per-block=256")
    S = te.compute((n,), lambda i: A[i] + 1.0, name="S")
    s2 = te.create_schedule(S.op)
    AS = s2.cache_read(A, "shared", [S])
    bo, ti = s2[S].split(S.op.axis[0], factor=256)
    s2[S].bind(bo, "blockIdx.x")
    s2[S].bind(ti, "threadIdx.x")
    s2[AS].compute_at(s2[S], bo)
    s2[AS].bind(s2[AS].op.axis[0], "threadIdx.x")
    ember.build(s2, [A, S], target="cuda -max-shared-memory-per-block=1024")  # 256 floats
    with pytest.raises(EmberError, match="-max-shared-memory-per-block allows 1000"):
        ember.build(s2, [A, S], target="cuda -max-shared-memory-per-block=1000")
    # export(archs="sm_80"): the string names an architecture, not four characters
    from ember.codegen_cuda.images import export_archs

    assert export_archs("sm_80", "sm_80") == ["sm_80"]
    assert export_archs("sm_80", "sm_90, sm_80") == ["sm_80", "sm_90"]


@pytest.mark.nvrtc
def test_item_31_export_archs_as_one_string(tmp_path, monkeypatch) -> None:
    import zipfile

    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    clear_cache()
    x = np.random.default_rng(31).standard_normal((3, 5)).astype("float32")
    cm = ember.compile(_leaky_model(x, 0.1), "cuda -arch=sm_80")
    cm.export(tmp_path / "m.ember", archs="sm_80")
    with zipfile.ZipFile(tmp_path / "m.ember") as z:
        assert json.loads(z.read("manifest.json"))["cuda"]["archs"] == ["sm_80"]
    clear_cache()


# --- item 33: Target as TVM builds it; ember.testing and ember.contrib.utils ------------


def test_item_33_target_parses_like_tvm() -> None:
    from ember.errors import ArgumentError
    from ember.target import Target

    t = Target("llvm -mcpu=haswell")
    assert t.kind == "llvm" and t.kind.name == "llvm" and str(t) == "llvm -mcpu=haswell"
    assert t.attrs == {"mcpu": "haswell", "keys": ["cpu"]} and t.keys == ("cpu",)
    assert Target(t) == t and Target.parse("llvm -mcpu=haswell") == t
    h = Target(target="cuda -arch=sm_80 -max-threads-per-block=256", host="llvm")
    assert h.kind.name == "cuda" and h.arch == "sm_80" and h.host.kind.name == "llvm"
    assert h.keys == ("cuda", "gpu") and h.max_num_threads == 256
    assert h.attrs["max-threads-per-block"] == 256
    assert Target({"kind": "cuda", "arch": "sm_90"}) == Target("cuda -arch=sm_90")
    assert str(Target(target="llvm", host="llvm")) == "llvm"  # the key ignores the host
    with pytest.raises(ArgumentError, match="host must be an 'llvm' target"):
        Target("llvm", host="cuda")
    with pytest.raises(ArgumentError, match="unknown target kind 'opencl'"):
        Target("opencl -device=mali")


def test_item_33_tvm_getting_started_vector_add_runs(tmp_path) -> None:
    """The calls of TVM's tensor_expr_get_started tutorial (its vector add, written anew
    here): ``Target(target=, host=)``, ``device(tgt.kind.name)``, ``testing.assert_allclose``,
    ``contrib.utils.tempdir``, against numpy."""
    import ember as tvm
    import ember.testing
    from ember import te
    from ember.contrib import utils

    tgt = tvm.target.Target(target="llvm -mcpu=x86-64", host="llvm")
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    fadd = tvm.build(s, [A, B, C], tgt, name="myadd")
    tvm.build(s, [A, B, C], tvm.target.Target("llvm -mcpu=haswell"))  # builds, as in TVM
    dev = tvm.device(tgt.kind.name, 0)
    rng = np.random.default_rng(33)
    a = tvm.nd.array(rng.uniform(size=1027).astype(A.dtype), dev)
    b = tvm.nd.array(rng.uniform(size=1027).astype(B.dtype), dev)
    c = tvm.nd.array(np.zeros(1027, dtype=C.dtype), dev)
    fadd(a, b, c)
    ember.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    with pytest.raises(AssertionError):
        ember.testing.assert_allclose(c, a.numpy() + b.numpy() + 1e-5)  # TVM's 1e-7 tolerance
    with pytest.raises(AssertionError, match="shapes differ"):
        ember.testing.assert_allclose(c.numpy()[:5], a.numpy()[:6])
    with utils.tempdir() as temp:
        fadd.export_library(temp.relpath("myadd_pack.so"))
        assert temp.listdir() == ["myadd_pack.so"]
        fadd2 = tvm.runtime.load_module(temp.relpath("myadd_pack.so"))
        c2 = tvm.nd.array(np.zeros(1027, dtype=C.dtype), dev)
        fadd2(a, b, c2)
        ember.testing.assert_allclose(c2, a.numpy() + b.numpy())
        folder = temp.temp_dir
    assert not os.path.exists(folder)
    assert ("llvm", "cpu") in ember.testing.enabled_targets()
    assert ember.testing.device_enabled(tgt)


# --- item 21: one line on Ctrl-C; no wait on a dead run's journal lock --------------------


def test_item_21_ctrl_c_prints_one_line(tmp_path) -> None:
    import signal
    import time

    def as_in_a_terminal() -> None:
        # a shell starts a command with SIGINT handled and unblocked; a test process may
        # pass on another state (ignored or blocked by an earlier test or by the runner)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    log = tmp_path / "t.jsonl"
    cmd = [sys.executable, "-m", "ember.cli", "tune", "--op", "matmul", "--shape", "32,32,32"]
    proc = subprocess.Popen(
        [*cmd, "--trials", "400", "--jobs", "2", "--log", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True,
        preexec_fn=as_in_a_terminal,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or len(log.read_bytes()) < 1):
        time.sleep(0.2)  # workers are up and measuring
    assert log.exists(), proc.communicate()[1].decode()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    start = time.monotonic()
    _, err = proc.communicate(timeout=120)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 130
    assert lines == ["ember: interrupted (a tuning run continues with --resume)"], lines
    assert time.monotonic() - start < 10  # queued builds are not waited for


def test_item_21_an_interrupted_command_exits_though_a_thread_hangs() -> None:
    """After Ctrl-C the ``ember`` entry exits within its grace period even when the
    interpreter's exit would wait forever on a thread (as the tuner's once did under CI
    load); an interrupted run's status is still 130, and a run that ended normally still
    waits for its threads."""
    import time

    from ember.cli import EXIT_GRACE_S

    assert EXIT_GRACE_S <= 10
    script = (
        "import threading, time, ember.cli as cli\n"
        "cli.EXIT_GRACE_S = 0.5\n"
        "def late():\n"
        "    time.sleep({sleep})\n"
        "    print('joined', flush=True)\n"
        "def command():\n"
        "    threading.Thread(target=late).start()\n"  # not a daemon: exit waits for it
        "    return {status}\n"
        "cli.main = command\n"
        "cli.run()\n"
    )
    start = time.monotonic()
    run = [sys.executable, "-c", script.format(sleep=600, status=130)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (130, "")
    assert time.monotonic() - start < 30
    run = [sys.executable, "-c", script.format(sleep=2, status=0)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "joined\n")


def test_item_21_a_dead_runs_journal_lock_is_taken_at_once(tmp_path) -> None:
    import socket
    import threading
    import time

    optuna = pytest.importorskip("optuna")
    from ember.tuner.tune import open_storage

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no process now
    lock = tmp_path / "r.jsonl.journal.lock"
    lock.write_text(f"{socket.gethostname()}:{dead.pid}")
    start = time.monotonic()
    storage = open_storage(None, tmp_path / "r.jsonl")
    optuna.create_study(study_name="s", storage=storage)
    assert time.monotonic() - start < 5  # Optuna's own lock waited out 30 s
    assert not lock.exists()
    # a live holder is waited for, not robbed
    lock.write_text(f"{socket.gethostname()}:{os.getppid()}")
    threading.Timer(0.5, lock.unlink).start()
    start = time.monotonic()
    optuna.create_study(study_name="t", storage=storage)
    assert time.monotonic() - start >= 0.45
    assert set(optuna.get_all_study_names(storage)) == {"s", "t"}


@pytest.mark.parametrize("template", ["conv2d_nchw.cuda", "conv2d_nchw_gemm.cuda"])
def test_item_29_conv_templates_fold_an_oversized_grid_onto_x(monkeypatch, template) -> None:
    """With y/z limits forced down to 1, both conv templates put every block on x and still
    compute the convolution numpy does (a reference written from the definition)."""
    from ember.codegen_cuda.schedules import common
    from ember.tuner import create_task

    monkeypatch.setattr(common, "MAX_GRID_YZ", 1)
    args = (2, 5, 7, 9, 6, 3, 3, 1, 1, 1)  # N, C, H, W, O, KH, KW, stride, pad, dilation
    task = create_task(template, args=(*args, "float32"), target="cuda -arch=sm_80")
    s, tensors = task.instantiate()
    mod = ember.build(s, tensors, target="cuda -arch=sm_80", name="conv")
    (kernel,) = mod.program.kernels
    assert tuple(kernel.attr("launch")[0])[1:] == (1, 1)
    rng = np.random.default_rng(29)
    x = rng.uniform(-1, 1, (2, 5, 7, 9)).astype("float32")
    w = rng.uniform(-1, 1, (6, 5, 3, 3)).astype("float32")
    y = np.full((2, 6, 7, 9), np.nan, "float32")
    mod.emulate(x, w, y)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 6, 7, 9))
    for i in range(7):
        for j in range(9):
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i : i + 3, j : j + 3], w)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_item_29_fp16_gemms_run_on_the_gpu(monkeypatch) -> None:
    """On a real device: the tensor-core GEMM built for the device's arch with the ``a``
    suffix where it has one (sm_90a on Hopper), and the 70,000-batch MatMul whose grid the
    template folds onto x, both against numpy in fp32."""
    from ember.codegen_cuda.device import visible_arch

    monkeypatch.setenv("EMBER_DISK_CACHE", "0")
    arch = visible_arch()
    archs = [arch, f"{arch}a"] if arch in ("sm_90", "sm_100") else [arch]
    for a in archs:
        clear_cache()
        model, x, y = _fp16_matmul((256, 64), (64, 128), 290)
        out = ember.compile(model, f"cuda -arch={a}").run({"a": x, "b": y})[0]
        ref = x.astype("float32") @ y.astype("float32")
        np.testing.assert_allclose(out.astype("float32"), ref, rtol=2e-2, atol=5e-2)
    clear_cache()
    model, x, y = _fp16_matmul((70000, 3, 5), (70000, 5, 4), 291)
    cm = ember.compile(model, f"cuda -arch={arch}")
    assert _grid(cm)[2] <= 65535
    ref = np.einsum("bik,bkj->bij", x.astype("float32"), y.astype("float32"))
    np.testing.assert_allclose(cm.run({"a": x, "b": y})[0].astype("float32"), ref, atol=2e-2)
    clear_cache()
