"""ember.compile's machinery: kernel cache, memory plan, model metadata, CUDA via the emulator."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph.executor import plan_memory
from ember.graph.kernels import _CACHE, get_kernel
from tests.frontend.onnx_models import check_against_ort, helper, make_model


def _chain(rng, n_relu: int = 4, shape=(3, 50)):
    x = rng.standard_normal(shape).astype("float32")
    nodes, prev = [], "x"
    for k in range(n_relu):
        nodes.append(
            helper.make_node("Tanh" if k % 2 else "Sigmoid", [prev], [f"h{k}"], name=f"n{k}")
        )
        prev = f"h{k}"
    nodes.append(helper.make_node("Add", [prev, "x"], ["y"], name="skip"))
    return make_model(nodes, {"x": x}, ["y"]), x


def test_same_workload_compiles_once(rng):
    model, x = _chain(rng)
    lib = ember.compile(model, graph_passes=())  # one kernel per node
    kernels = {id(st.kernel) for st in lib.steps}
    assert len(lib.steps) == 5 and len(kernels) == 3  # sigmoid, tanh, add
    before = len(_CACHE)
    ember.compile(model, graph_passes=())
    assert len(_CACHE) == before
    fused = ember.compile(model)  # the chain fuses into one kernel, cached as well
    assert len(fused.steps) == 1
    before = len(_CACHE)
    ember.compile(model)
    assert len(_CACHE) == before


def test_memory_plan_reuses_dead_buffers(rng):
    model, x = _chain(rng, n_relu=6)
    lib = ember.compile(model, graph_passes=())  # unfused: every intermediate in memory
    views, total = plan_memory(lib.graph, lib.steps)
    assert set(views) == {f"h{k}" for k in range(6)}
    one = 3 * 50 * 4
    assert total == 2 * one  # a chain needs two live intermediates at a time
    for k in range(5):  # a step never writes the buffer it reads
        assert not np.shares_memory(views[f"h{k}"], views[f"h{k + 1}"])
    check_against_ort(model, {"x": x}, rtol=1e-6, atol=1e-6)


def test_outputs_are_fresh_arrays_each_run(rng):
    model, x = _chain(rng)
    lib = ember.compile(model)
    a = lib.run({"x": x})[0]
    b = lib.run([x * 2])[0]
    assert not np.shares_memory(a, b)
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(lib([x])[0], a)  # __call__ is run


def test_compiled_model_metadata_and_benchmark(rng):
    model, x = _chain(rng)
    lib = ember.compile(model, graph_passes=())
    assert lib.input_names == ["x"] and lib.output_names == ["y"]
    assert lib.input_shapes == [(3, 50)] and lib.output_shapes == [(3, 50)]
    assert lib.input_dtypes == ["float32"] and lib.output_dtypes == ["float32"]
    times = lib.benchmark(number=2, repeat=2)
    assert 0 < times["min"] <= times["median"]
    assert "5 kernels" in repr(lib)


def test_compile_takes_a_path_and_a_graph(tmp_path, rng):
    model, x = _chain(rng)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    want = ember.compile(model).run({"x": x})[0]
    np.testing.assert_array_equal(ember.compile(str(path)).run({"x": x})[0], want)
    graph = ember.frontend.from_onnx(str(path))
    np.testing.assert_array_equal(ember.compile(graph).run({"x": x})[0], want)


def test_kernel_direct(rng):
    from ember.frontend.graph import TensorType

    k = get_kernel("transpose", {"perm": (1, 0)}, [TensorType((5, 3), "float32")])
    x = rng.standard_normal((5, 3)).astype("float32")
    np.testing.assert_array_equal(k.run([x])[0], x.T)


@pytest.mark.nvrtc
def test_cuda_target_through_the_emulator(rng, monkeypatch):
    pytest.importorskip("cuda")
    from ember.frontend.testing.models import small_cnn

    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    model, inputs = small_cnn(rng, 1, 8, 7)
    lib = ember.compile(model, target="cuda")
    assert lib.target.kind == "cuda"
    got = lib.run(inputs)[0]
    want = ember.compile(model, target="llvm").run(inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_shapes_with_a_graph_and_bad_targets_are_argument_errors(rng):
    model, _ = _chain(rng)
    graph = ember.frontend.from_onnx(model)
    with pytest.raises(ember.ArgumentError, match="shapes= applies when importing"):
        ember.compile(graph, shapes={"x": (3, 50)})
    with pytest.raises(ember.ArgumentError, match="unknown target kind"):
        ember.compile(graph, target="tpu")


@pytest.mark.nvrtc
def test_cuda_scalar_outputs(rng, monkeypatch):
    """0-d results on the GPU: a reduction to a scalar across one block's threads, and a
    0-d gather, both written through a (1,)-shaped view of the caller's array."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    a, b = (rng.standard_normal(700).astype("float32") for _ in range(2))
    n = helper.make_node
    nodes = [
        n("MatMul", ["a", "b"], ["dot"], name="dot"),
        n("Gather", ["a", "i"], ["pick"], name="pick", axis=0),
        n("Mul", ["dot", "pick"], ["y"], name="mul"),
    ]
    model = make_model(nodes, {"a": a, "b": b}, ["y", "dot"], {"i": np.array(5, "int64")})
    got = ember.compile(model, target="cuda").run({"a": a, "b": b})
    assert got[0].shape == () and got[1].shape == ()
    np.testing.assert_allclose(got[1], a @ b, rtol=1e-4)
    np.testing.assert_allclose(got[0], (a @ b) * a[5], rtol=1e-4)
