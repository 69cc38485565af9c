"""``ember demo`` / ``ember info`` arguments and figures, and CUDA architecture checks:
malformed ``-arch`` strings at parse time, and architectures the installed NVRTC
no longer compiles (CUDA 13 dropped sm_70) refused with the list it supports."""

from __future__ import annotations

import platform
import re

import pytest

import ember
from ember import te
from ember.cli import main
from ember.cli.demo import format_rate
from ember.cli.demo import main as demo_main
from ember.errors import ArgumentError
from ember.target import Target, host_cpu_model


@pytest.mark.parametrize("argv", [["--threads", "0"], ["--threads", "-2"], ["--size", "0"]])
def test_demo_refuses_counts_below_one(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", *argv]) == 1  # a user error: the message, exit status 1
    err = capsys.readouterr().err
    assert f"ember: error: ember demo: {argv[0]} must be a positive integer, got {argv[1]}" in err


def test_demo_function_refuses_zero_threads() -> None:
    with pytest.raises(ArgumentError, match="positive integer"):
        demo_main(size=8, threads=0)


@pytest.mark.parametrize(
    ("flops", "seconds", "want"),
    [
        (2 * 33**3, 1e-5, "7.2 GFLOP/s"),
        (2 * 33**3, 1e-3, "71.9 MFLOP/s"),
        (1e3, 1.0, "1.0 kFLOP/s"),
        (5.0, 1.0, "5.0 FLOP/s"),
        (3e12, 1.0, "3.0 TFLOP/s"),
    ],
)
def test_format_rate_keeps_significant_digits(flops: float, seconds: float, want: str) -> None:
    assert format_rate(flops, seconds).strip() == want


def test_small_demo_reports_nonzero_rates(capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", "--size", "33", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    rates = re.findall(r"(\d+\.\d) [kMGT]?FLOP/s", out)
    assert len(rates) == 4, out
    assert all(float(r) > 0 for r in rates), out


def test_info_shows_the_os_cpu_model(capsys: pytest.CaptureFixture) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    want = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        want = names[0] if names else want
    except OSError:
        pass
    assert f"cpu model: {want}" in out
    assert host_cpu_model() == want
    assert "(LLVM's guess)" in out


@pytest.mark.parametrize("arch", ["sm_5", "sm_", "sm80", "sm_08", "gfx90a", "sm_80x"])
def test_malformed_cuda_arch_is_refused_at_parse(arch: str) -> None:
    with pytest.raises(ArgumentError, match=f"-arch={arch} in .* is not a CUDA architecture"):
        Target.parse(f"cuda -arch={arch}")


@pytest.mark.parametrize("arch", ["sm_75", "sm_90a", "sm_100f", "compute_80", "sm_120"])
def test_well_formed_cuda_arch_parses(arch: str) -> None:
    assert Target.parse(f"cuda -arch={arch}").arch == arch


def _copy_kernel(arch: str):  # noqa: ANN202
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return ember.build(s, [A, B], target=f"cuda -arch={arch}")


@pytest.mark.nvrtc
def test_arch_outside_nvrtc_list_is_refused_with_the_list() -> None:
    from cuda.bindings import nvrtc

    err, archs = nvrtc.nvrtcGetSupportedArchs()
    supported = [f"sm_{a}" for a in archs]
    assert supported
    for arch in ("sm_70", "sm_35", "sm_99"):
        if arch in supported:
            continue
        with pytest.raises(ArgumentError, match=f"cannot compile for {arch}") as info:
            _copy_kernel(arch)
        assert ", ".join(supported) in str(info.value)


@pytest.mark.nvrtc
def test_arch_in_nvrtc_list_compiles() -> None:
    from cuda.bindings import nvrtc

    _, archs = nvrtc.nvrtcGetSupportedArchs()
    newest = f"sm_{max(a for a in archs if a < 100) if any(a < 100 for a in archs) else archs[0]}"
    mod = _copy_kernel(newest)
    assert mod.compile().cubin
