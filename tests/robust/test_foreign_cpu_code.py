"""Code built for a CPU this machine is not is refused with DeviceError, never entered.

``ember.build(..., target="llvm -mcpu=x86-64-v4")`` on a host without AVX-512 built and
linked, and its first call died of SIGILL, taking the process (a test run, a notebook)
with it; a kernel cache entry or library exported for such a target did the same. These
tests make the host *look* older than the code (``host_cpu`` reports x86-64-v2), so they
check the refusal on every x86 machine without ever running code it cannot run.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_llvm import cpu_features
from ember.errors import ArgumentError, DeviceError
from ember.runtime.load import _cannot_run_here

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 levels")

V3 = "llvm -mcpu=x86-64-v3"


def _double(n: int, target: str):  # noqa: ANN202
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    return ember.build(te.create_schedule(B.op), [A, B], target=target, name="double")


@pytest.fixture
def older_host(monkeypatch):  # noqa: ANN001, ANN201
    """This process's CPU as LLVM would report an x86-64-v2 machine."""
    name, triple, _ = cpu_features.host_cpu()
    v2 = cpu_features.built_for("llvm -mcpu=x86-64-v2")["features"]
    monkeypatch.setattr(cpu_features, "host_cpu", lambda: ("x86-64-v2", triple, frozenset(v2)))


def test_a_call_is_refused_naming_the_missing_instructions(older_host) -> None:  # noqa: ANN001
    f = _double(33, V3)
    a, b = np.ones(33, "float32"), np.zeros(33, "float32")
    with pytest.raises(DeviceError, match=r"cannot run on this machine.*lacks: avx, avx2"):
        f(a, b)
    with pytest.raises(DeviceError, match="cannot run on this machine"):
        f.time_evaluator(f.entry_name, number=1)(a, b)
    assert f.entry_address(f.entry_name) is None  # the step loop never calls it directly
    assert "define" in f.get_source("ll")  # built all the same: its sources are there


def test_a_model_run_is_refused_and_names_its_node(older_host) -> None:  # noqa: ANN001
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"], name="relu_node")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
    )
    model = helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    lib = ember.compile(model, target=V3)
    with pytest.raises(DeviceError, match=r"(?s)cannot run on this machine.*relu_node"):
        lib.run({"x": np.ones((3, 5), "float32")})


def test_a_loaded_library_is_refused(tmp_path: Path, monkeypatch, rng) -> None:  # noqa: ANN001
    """The library records the CPU it was built for; a process on an older CPU refuses its
    calls, and the process it was built for runs it."""
    path = tmp_path / "double.so"
    _double(17, "llvm").export_library(path)
    a = rng.uniform(-1, 1, 17).astype("float32")
    out = np.full(17, np.nan, "float32")
    ember.runtime.load_module(path)(a, out)
    np.testing.assert_array_equal(out, a * 2)
    _, triple, _ = cpu_features.host_cpu()
    monkeypatch.setattr(cpu_features, "host_cpu", lambda: ("x86-64", triple, frozenset({"sse2"})))
    with pytest.raises(DeviceError, match="cannot run on this machine"):
        ember.runtime.load_module(path)(a, out)


def test_code_this_host_can_run_still_runs(rng) -> None:
    a = rng.uniform(-1, 1, 40).astype("float32")
    for target in ("llvm", "llvm -mcpu=x86-64", "llvm -mcpu=x86-64-v2"):
        b = np.full(40, np.nan, "float32")
        _double(40, target)(a, b)
        np.testing.assert_array_equal(b, a * 2)


@pytest.mark.parametrize(
    "cpu",
    [
        "x86-64",
        {"name": 3, "triple": "x86_64-unknown-linux-gnu", "features": []},
        {"name": "x", "triple": "x86_64-unknown-linux-gnu", "features": "avx"},
        {"name": "x", "triple": "x86_64-unknown-linux-gnu", "features": [1]},
        {"name": "x", "features": []},
    ],
)
def test_a_malformed_cpu_entry_is_refused(cpu) -> None:  # noqa: ANN001
    with pytest.raises(ArgumentError, match="'cpu' entry is malformed"):
        _cannot_run_here(cpu, Path("lib.so"))


def test_a_library_without_a_cpu_entry_is_not_checked() -> None:
    assert _cannot_run_here(None, Path("lib.so")) is None
