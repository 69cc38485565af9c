"""The executor's trusted fast path: kernels bound once to the memory plan, called unchecked.

The reference is the checked path (every kernel called with fresh arrays through
the module's per-call argument checks) and onnxruntime; inputs are still
validated at ``run``; an array the kernel would refuse can never be bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.errors import ArgumentError, InternalError
from ember.frontend.graph import TensorType, Value
from ember.frontend.testing.models import mlp, small_cnn
from ember.graph.executor import CompiledModel
from ember.graph.memory_plan import aliased_reshapes
from ember.runtime.module import BoundCall
from tests.frontend.onnx_models import check_against_ort, helper, make_model
from tests.nightly import examples


def _checked_run(lib: CompiledModel, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model run the old way: fresh arrays, each kernel call checked."""
    env = {**lib.graph.params, **inputs}
    for st_ in lib.steps:
        outs = [
            np.empty(lib.graph.values[o].type.shape, lib.graph.values[o].type.dtype)
            for o in st_.outputs
        ]
        st_.kernel(*[env[v] for v in st_.inputs], *outs)
        env.update(zip(st_.outputs, outs))
    return [env[v] for v in lib.output_names]


def _model_arrays(lib: CompiledModel) -> list[np.ndarray]:
    """Every array the model owns: the params and each idle workspace's buffers."""
    return [a for ws in lib._pool._idle for a in ws.env.values()]


@pytest.fixture(scope="module")
def cnn():
    model, inputs = small_cnn(np.random.default_rng(5), 2, 19, 23)
    return model, inputs, ember.compile(model)


def test_fast_path_matches_checked_path_and_onnxruntime(cnn) -> None:
    model, inputs, lib = cnn
    with lib._workspace() as ws:  # the input's reshape to blocks of one channel: a view
        views = set(aliased_reshapes(lib.graph, lib.steps))
        assert views and all(
            isinstance(c, BoundCall) for k, c in enumerate(ws.calls) if k not in views
        )
    rng = np.random.default_rng(11)
    for _ in range(3):  # the bound buffers are reused across runs with new data
        x = {"x": rng.standard_normal(inputs["x"].shape).astype("float32")}
        got = lib.run(x)
        for g, w in zip(got, _checked_run(lib, x)):
            np.testing.assert_array_equal(g, w)
    check_against_ort(model, inputs, rtol=1e-4, atol=1e-5)


def test_wrong_inputs_still_raise_and_leave_the_model_usable(cnn) -> None:
    _, inputs, lib = cnn
    x = inputs["x"]
    want = lib.run(inputs)[0]
    with pytest.raises(ArgumentError, match="unknown input"):
        lib.run({"y": x})
    with pytest.raises(ArgumentError, match="shape"):
        lib.run({"x": x[:, :, :-1]})
    with pytest.raises(ArgumentError, match="float32"):
        lib.run({"x": x.astype("float64")})
    with pytest.raises(ArgumentError, match="takes 1 inputs"):
        lib.run([x, x])
    np.testing.assert_array_equal(lib.run(inputs)[0], want)


def test_inputs_are_copied_and_outputs_are_the_callers(cnn) -> None:
    _, inputs, lib = cnn
    x = np.asfortranarray(inputs["x"])  # not C-contiguous: copied into the plan's buffer
    first = lib.run({"x": x})[0]
    np.testing.assert_array_equal(first, lib.run(inputs)[0])
    keep = first.copy()
    lib.run({"x": -inputs["x"]})
    np.testing.assert_array_equal(first, keep)  # a later run does not overwrite it
    assert not any(np.shares_memory(first, a) for a in _model_arrays(lib))


def test_bind_refuses_what_a_call_refuses(cnn) -> None:
    _, _, lib = cnn
    st_ = lib.steps[0]
    fn = st_.kernel.module.get_function(st_.kernel.module.entry_name)
    with lib._workspace() as ws:
        arrays = [ws.env[v] for v in (*st_.inputs, *st_.outputs)]
    bad = list(arrays)
    bad[0] = np.zeros(bad[0].shape[:-1] + (bad[0].shape[-1] + 1,), bad[0].dtype)
    with pytest.raises(ArgumentError, match="shape"):
        fn.bind(bad)
    bad[0] = arrays[0][..., ::-1]
    with pytest.raises(ArgumentError, match="contiguous"):
        fn.bind(bad)
    bad[0] = arrays[0].astype("float64")
    with pytest.raises(ArgumentError, match="dtype"):
        fn.bind(bad)


def test_a_plan_with_a_wrong_buffer_never_reaches_a_kernel(cnn) -> None:
    """A planned intermediate of the wrong shape is refused when the model is built."""
    _, _, lib = cnn
    graph = lib.graph
    v = lib.steps[0].outputs[0]
    assert v not in graph.output_names
    old = graph.values[v]
    shape = (*old.shape[:-1], old.shape[-1] + 1)
    graph.values[v] = Value(v, TensorType(shape, old.type.dtype))
    try:
        with pytest.raises(InternalError, match="refuses"):
            CompiledModel(graph, lib.steps, lib.target)
    finally:
        graph.values[v] = old


@settings(max_examples=examples(6), deadline=None)
@given(
    batch=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 33), min_size=2, max_size=4).map(tuple),
    seed=st.integers(0, 2**16),
)
def test_mlp_fast_path_property(batch: int, sizes: tuple[int, ...], seed: int) -> None:
    model, inputs = mlp(np.random.default_rng(seed), batch, sizes)
    lib = ember.compile(model)
    x = {"x": np.random.default_rng(seed + 1).standard_normal((batch, sizes[0])).astype("f4")}
    for g, w in zip(lib.run(x), _checked_run(lib, x)):
        np.testing.assert_array_equal(g, w)


def test_graph_output_that_is_an_input_and_a_param() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype("float32")
    c = rng.standard_normal((3, 5)).astype("float32")
    nodes = [
        helper.make_node("Identity", ["x"], ["same"], name="id"),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    model = make_model(nodes, {"x": x}, ["y", "same"], {"c": c})
    lib = ember.compile(model)
    y, same = lib.run({"x": x})
    np.testing.assert_allclose(y, x + c, rtol=1e-6)
    np.testing.assert_array_equal(same, x)


def test_profile_times_every_step(cnn) -> None:
    _, inputs, lib = cnn
    prof = lib.profile(inputs, number=3)
    assert [s.where for s in prof.steps] == [st_.where for st_ in lib.steps]
    views = set(aliased_reshapes(lib.graph, lib.steps))  # nothing to run: no time
    assert all((s.seconds > 0) != (k in views) for k, s in enumerate(prof.steps))
    assert prof.total > 0
    assert sum(s.seconds for s in prof.steps) <= 3 * prof.total  # medians, not a bound
    assert set(prof.by_ops()) == {s.ops for s in prof.steps}
    text = prof.table(top=2)
    assert len(text.splitlines()) == 1 + 2 + 2 and "outside kernels" in text
    with pytest.raises(ArgumentError, match="number"):
        lib.profile(inputs, number=0)


def test_every_array_a_kernel_touches_starts_on_a_cache_line(cnn) -> None:
    """numpy aligns to 16 bytes only; a 64-byte vector access to such an array straddles
    two cache lines (ResNet-18 ran 1.15x faster with the model's arrays aligned)."""
    from ember.runtime.aligned import CACHE_LINE, aligned_copy, aligned_empty

    lib = ember.compile(cnn[0], target="llvm")
    arrays = [a for a in _model_arrays(lib) if a.nbytes]
    assert arrays and all(a.ctypes.data % CACHE_LINE == 0 for a in arrays)
    odd = np.arange(1, 40, dtype="float32")[1:].reshape(2, 19)  # 4 bytes off numpy's start
    same = aligned_copy(odd)
    assert same.ctypes.data % CACHE_LINE == 0 and same.flags.c_contiguous
    np.testing.assert_array_equal(same, odd)
    assert aligned_copy(same) is same
    empty = aligned_empty(0, "float32", (0, 3))
    assert empty.shape == (0, 3)
