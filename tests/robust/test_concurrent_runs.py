"""One compiled model run from several threads at once, run's input checks, and the weights a
DynamicModel's sizes share (issue 22, items 2, 15 and 24).

The reference is onnxruntime throughout (never another Ember path): every thread's result
is compared with what onnxruntime gives for that thread's own inputs. Before item 2, runs
shared the model's input and intermediate buffers and about a quarter of the results of 8
threads on an MLP were another thread's or a mix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.errors import ArgumentError
from ember.frontend.testing.models import mlp, symbolic_batch
from ember.graph.executor import CompiledModel
from tests.concurrency import in_threads
from tests.frontend.onnx_models import helper, make_model, numpy_helper, run_ort
from tests.nightly import examples

THREADS = 8


def _in_threads(work: Callable[[int], None], n: int = THREADS) -> None:
    in_threads(work, n)


def _check_concurrent(
    lib: Any,
    model: Any,
    feeds: Sequence[dict[str, np.ndarray]],
    repeats: int = 4,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """Thread k runs ``feeds[k % len(feeds)]`` ``repeats`` times; every result must match
    onnxruntime's for those inputs."""
    want = [run_ort(model, f) for f in feeds]

    def work(k: int) -> None:
        f = feeds[k % len(feeds)]
        for _ in range(repeats):
            got = lib.run(f)
            assert len(got) == len(want[k % len(feeds)])
            for g, w in zip(got, want[k % len(feeds)]):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)

    _in_threads(work)


def _feeds(inputs: dict[str, np.ndarray], n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``n`` input sets like ``inputs``: random floats, the other inputs kept."""
    rng = np.random.default_rng(seed)
    return [
        {
            k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
            for k, v in inputs.items()
        }
        for _ in range(n)
    ]


# -- item 2: concurrent runs -----------------------------------------------------------------
def _conv_model(batch: Any = 2) -> tuple[Any, dict[str, np.ndarray]]:
    """Conv (odd spatial size, padding) + Relu + MaxPool: x [batch, 3, 7, 9]."""
    rng = np.random.default_rng(20)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["r"]),
        n("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype("float32") * 0.3,
        "b": rng.standard_normal(4).astype("float32"),
    }
    inputs = {"x": rng.standard_normal((2, 3, 7, 9)).astype("float32")}
    return make_model(nodes, inputs, ["y"], weights), inputs


def _mlp(seed: int, batch: int = 5) -> tuple[Any, dict[str, np.ndarray]]:
    """The MLP every test here uses (7 -> 12 -> 5): its kernels compile once per batch size
    in this process, whatever the weights."""
    return mlp(np.random.default_rng(seed), batch, (7, 12, 5))


def test_item_02_eight_threads_on_one_model_match_onnxruntime() -> None:
    model, inputs = _conv_model()
    lib = ember.compile(model)
    _check_concurrent(lib, model, _feeds(inputs, THREADS, 1), repeats=10, rtol=1e-4)
    model, inputs = _mlp(6)
    lib = ember.compile(model)
    _check_concurrent(lib, model, _feeds(inputs, THREADS, 2), repeats=20)


def test_item_02_runs_in_flight_take_workspaces_of_their_own() -> None:
    """A run while another holds a workspace does not wait for it: it gets a new one (so
    threads run in parallel), and the pool keeps both for later runs."""
    model, inputs = _mlp(7)
    lib = ember.compile(model)
    want = run_ort(model, inputs)[0]
    assert lib._pool.size == 1
    with lib._workspace() as held:
        done: list[np.ndarray] = []
        t = threading.Thread(target=lambda: done.append(lib.run(inputs)[0]))
        t.start()
        t.join(timeout=60)
        assert done, "a run waited for a workspace another run holds"
        np.testing.assert_allclose(done[0], want, rtol=1e-5, atol=1e-6)
        assert lib._pool.size == 2
        other = lib._pool._idle[0]
        assert not any(np.shares_memory(a, b) for a in held.inputs for b in other.inputs)
    for name, p in lib._params.items():  # the params are one copy for every workspace
        assert held.env[name] is p and other.env[name] is p
    np.testing.assert_allclose(lib.run(inputs)[0], want, rtol=1e-5, atol=1e-6)
    assert lib._pool.size == 2


def test_item_02_a_failing_run_returns_its_workspace() -> None:
    model, inputs = _mlp(8)
    lib = ember.compile(model)

    def boom() -> None:
        raise ember.EmberError("boom")

    with lib._workspace() as ws:
        kept, ws.calls[-1] = ws.calls[-1], boom
        ws.link()
    with pytest.raises(ember.EmberError, match="boom"):
        lib.run(inputs)
    assert lib._pool.size == 1 and lib._pool._idle == [ws]
    ws.calls[-1] = kept
    ws.link()
    np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


def test_item_02_if_and_loop_models_from_threads() -> None:
    from tests.frontend.ops.test_control_flow import _cumprod_model, _if_model, _sum_model

    model, inputs = _if_model()
    lib = ember.compile(model)
    feeds = _feeds(inputs, 4, 3)
    for k, f in enumerate(feeds):
        f["cond"] = np.array(k % 2 == 0)  # both branches at once
    _check_concurrent(lib, model, feeds)

    model, inputs = _cumprod_model(23)  # a host-run Loop with a scan output
    lib = ember.compile(model)
    assert any(n.op == "loop" for n in lib.graph.nodes)
    feeds = _feeds(inputs, 4, 4)
    for f in feeds:
        f["xs"] = 0.5 + np.abs(f["xs"]) / 4
    _check_concurrent(lib, model, feeds, rtol=1e-4)

    model, inputs = _sum_model()  # runtime trip count and condition
    lib = ember.compile(model)
    feeds = _feeds(inputs, 4, 5)
    for k, f in enumerate(feeds):
        f["M"] = np.array(2 + 3 * k, np.int64)
        f["flag"] = np.array(k != 1)
    _check_concurrent(lib, model, feeds)


def test_item_02_dynamic_model_from_threads_new_and_known_sizes() -> None:
    """Threads run three batch sizes, two of them compiled by the threads themselves."""
    model = symbolic_batch(_mlp(9)[0], "N")
    lib = ember.compile(model)
    lib.specialize(N=5)
    rng = np.random.default_rng(10)
    feeds = [{"x": rng.standard_normal(([5, 1, 2][k % 3], 7)).astype("f4")} for k in range(8)]
    _check_concurrent(lib, model, feeds, repeats=30)
    assert {k for ((_, k),) in lib.specializations} == {1, 2, 5}


@pytest.mark.nvrtc
def test_item_02_cuda_model_emulated_from_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    model, inputs = _conv_model()
    lib = ember.compile(model, target="cuda")
    _check_concurrent(lib, model, _feeds(inputs, 4, 12), repeats=2, rtol=1e-4)


def test_item_02_cuda_module_workspace_is_held_by_one_call(monkeypatch) -> None:
    """A CUDA module keeps one device workspace (an intermediate between two kernels) for
    all calls: a call's kernels must not interleave with another thread's. Run against
    the test suite's fake driver (device memory in host arrays, kernels emulated), made to
    yield the GIL after each launch so that unlocked calls would interleave."""
    import time

    from ember.codegen_cuda import device, runtime
    from tests.codegen_cuda import test_runtime as tr

    class YieldingDriver(tr.FakeDriver):
        def cuLaunchKernel(self, func: str, *rest: Any) -> tuple[Any, ...]:
            out = super().cuLaunchKernel(func, *rest)
            time.sleep(0.002)  # another thread's call gets to launch here
            return out

        def at(self, ptr: int) -> np.ndarray:
            for base, raw in list(self.memory.items()):  # other threads allocate meanwhile
                if base <= ptr < base + raw.nbytes:
                    return raw[ptr - base :]
            raise KeyError(f"{ptr:#x} is not device memory")

    drv = YieldingDriver()
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    monkeypatch.setattr(runtime, "_CONTEXT", [])
    monkeypatch.setattr(runtime, "_CURRENT", threading.local())
    monkeypatch.setattr(device, "_probe", lambda: ([("Fake GPU", 9, 0, 80 * 2**30)], ""))
    monkeypatch.delenv("EMBER_CUDA_EMULATE", raising=False)
    mod = tr._module(tr._two_stage(), drv)
    assert mod.programs[mod.entry_name].workspaces  # B lives in a device workspace
    rng = np.random.default_rng(13)
    xs = [rng.uniform(-1, 1, 300).astype("float32") for _ in range(THREADS)]

    def work(k: int) -> None:
        for _ in range(3):
            c = np.full(300, np.nan, "float32")
            mod(xs[k], c)
            np.testing.assert_allclose(c, (xs[k][::-1] + 1) * 2, rtol=1e-6)

    _in_threads(work)


@pytest.mark.gpu
def test_item_02_cuda_on_the_gpu_from_threads() -> None:
    """On a real device: a CUDA model from 8 threads against onnxruntime, and a module whose
    two kernels share a device workspace (the lock keeps calls from interleaving)."""
    from tests.codegen_cuda import test_runtime as tr

    model, inputs = _conv_model()
    lib = ember.compile(model, target="cuda")
    _check_concurrent(lib, model, _feeds(inputs, THREADS, 21), repeats=10, rtol=1e-4)
    s, args = tr._two_stage()
    mod = ember.build(s, args, target="cuda")
    rng = np.random.default_rng(22)
    xs = [rng.uniform(-1, 1, 300).astype("float32") for _ in range(THREADS)]

    def work(k: int) -> None:
        for _ in range(50):
            c = np.full(300, np.nan, "float32")
            mod(xs[k], c)
            np.testing.assert_allclose(c, (xs[k][::-1] + 1) * 2, rtol=1e-6)

    _in_threads(work)


# -- item 15: what run takes --------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_inputs() -> tuple[Any, dict[str, np.ndarray], CompiledModel]:
    rng = np.random.default_rng(14)
    inputs = {
        "a": rng.standard_normal((3, 5)).astype("float32"),
        "b": rng.standard_normal((3, 5)).astype("float32"),
    }
    model = make_model([helper.make_node("Sub", ["a", "b"], ["y"])], inputs, ["y"])
    return model, inputs, ember.compile(model)


@pytest.mark.parametrize(
    ("given", "phrase"),
    [
        (None, "run takes a dict {input name: array} or a list of arrays in the order"),
        (3.0, "run takes a dict .* got float"),
        ("a", "run takes a dict .* got str"),
        (b"ab", "run takes a dict .* got bytes"),
        (np.zeros((2, 3, 5), "float32"), "got ndarray; for a single array write run"),
        ({0: 1, "a": 2}, r"unknown input name\(s\) \[0\]"),
        ({"a": 1, "c": 2, "b": 3}, r"unknown input name\(s\) \['c'\]"),
        ({"a": 1}, r"missing input\(s\) \['b'\]"),
        ([1], r"takes 2 inputs \['a', 'b'\], got 1"),
    ],
)
def test_item_15_run_refuses_what_it_cannot_take(two_inputs, given: Any, phrase: str) -> None:
    _, _, lib = two_inputs
    with pytest.raises(ArgumentError, match=phrase):
        lib.run(given)


def test_item_15_each_wrong_input_is_named(two_inputs) -> None:
    model, inputs, lib = two_inputs
    a, b = inputs["a"], inputs["b"]
    cases = [
        ({"a": a, "b": b.astype("float64")}, "input 'b' must be float32, got float64"),
        ({"a": a.tolist(), "b": b}, r"input 'a' must be float32, got float64 \(convert it"),
        ({"a": a, "b": b[:, :4]}, r"input 'b' must have shape \[3, 5\], got \[3, 4\]"),
        ({"a": a[None], "b": b}, r"input 'a' must have shape \[3, 5\], got \[1, 3, 5\]"),
        ({"a": a, "b": [[1.0, 2.0], [3.0]]}, "input 'b' is not an array"),  # ragged
        ({"a": None, "b": b}, "input 'a' must be float32, got NoneType"),
        ({"a": a, "b": "text"}, "input 'b' must be float32, got <U4"),
        ({"a": a, "b": b.astype(">f4")}, "input 'b' must be float32, got >f4"),
    ]
    for bad, phrase in cases:
        with pytest.raises(ArgumentError, match=phrase):
            lib.run(bad)
    # what onnxruntime accepts runs correctly: views that are not C-contiguous, a tuple
    want = run_ort(model, inputs)[0]
    wide = np.zeros((3, 10), "float32")
    wide[:, ::2] = a
    for args in (
        {"a": np.asfortranarray(a), "b": b},
        {"a": wide[:, ::2], "b": b[::-1][::-1]},
        {"a": a.T.copy().T, "b": b},
        (a, b),
    ):
        np.testing.assert_allclose(lib.run(args)[0], want, rtol=1e-6)
    np.testing.assert_allclose(lib.run({"a": a, "b": b})[0], a - b, rtol=1e-6)


def test_item_15_dynamic_model_checks_the_same_way() -> None:
    model = symbolic_batch(_mlp(15)[0], "N")
    lib = ember.compile(model)
    x = np.random.default_rng(16).standard_normal((5, 7)).astype("float32")
    for bad, phrase in [
        (None, "run takes a dict"),
        (3.0, "run takes a dict"),
        (x, "for a single array write run"),
        ({1: x}, r"unknown input name\(s\) \[1\]"),
        ({"x": x.tolist()}, "input 'x' must be float32, got float64"),
        ({"x": [[1.0], [2.0, 3.0]]}, "input 'x' is not an array"),
        ({"x": x[:, :5]}, r"input 'x' must have shape \[N, 7\], got \[5, 5\]"),
    ]:
        with pytest.raises(ArgumentError, match=phrase):
            lib.run(bad)
    assert not lib.specializations  # nothing compiled for a refused call
    np.testing.assert_allclose(
        lib.run({"x": np.asfortranarray(x)})[0], run_ort(model, {"x": x})[0], rtol=1e-5
    )


# -- item 24: a DynamicModel's sizes share their weights ------------------------------------------
@pytest.mark.parametrize("which", ["mlp", "cnn"])
def test_item_24_sizes_share_one_copy_of_the_weights(which: str) -> None:
    rng = np.random.default_rng(17)
    base = _mlp(17)[0] if which == "mlp" else _conv_model()[0]
    rest: tuple[int, ...] = (7,) if which == "mlp" else (3, 7, 9)
    model = symbolic_batch(base, "N")
    lib = ember.compile(model)
    xs = {n: rng.standard_normal((n, *rest)).astype("float32") for n in (2, 5)}
    for x in xs.values():
        np.testing.assert_allclose(
            lib.run({"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5
        )
    two, five = lib.specialize(N=2), lib.specialize(N=5)
    assert two is not five
    initializers = {i.name for i in model.graph.initializer}
    shared = [n for n in two._params if n in five._params]
    assert initializers & set(shared)  # the model's weights reach both sizes' kernels
    for n in shared:
        a, b = two._params[n], five._params[n]
        if np.array_equal(a.view(np.uint8), b.view(np.uint8)):
            assert a is b, n  # the same bytes are one array, not a copy per size
            assert two.graph.params[n] is a and five.graph.params[n] is a
            assert two._pool.first.env[n] is a  # what the kernels are bound to
    for n in initializers & set(shared):
        weight = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == n))
        np.testing.assert_array_equal(two._params[n], weight)
    # and the shared weights still give the right numbers, size after size
    for x in xs.values():
        np.testing.assert_allclose(
            lib.run({"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5
        )


def test_item_24_loaded_sizes_share_their_weights_too(tmp_path) -> None:
    rng = np.random.default_rng(18)
    model = symbolic_batch(_mlp(18)[0], "N")
    lib = ember.compile(model)
    lib.specialize(N=1), lib.specialize(N=5)
    lib.export(tmp_path / "m.ember")
    loaded = ember.load(tmp_path / "m.ember")
    for n in (1, 5):
        x = rng.standard_normal((n, 7)).astype("float32")
        np.testing.assert_allclose(
            loaded.run({"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6
        )
    one, five = loaded.specialize(N=1), loaded.specialize(N=5)
    assert set(one._params) == set(five._params) and len(one._params) == 3  # b0, packed w0, w1
    for name, p in one._params.items():
        assert five._params[name] is p, name


# -- random graphs from threads against onnxruntime ------------------------------------------------
OPS = ["matmul", "add", "relu", "softmax", "reshape"]


@st.composite
def _graphs(draw: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """A chain of a few ops over one input: an optional Conv (+Relu) over a 4-D input
    flattened by Reshape, then MatMul, Add (broadcast bias), Relu, Softmax and Reshape in
    a random order, with random weights. Sizes come from small sets, so kernels repeat
    between examples (the kernel cache keeps the test short)."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes, inits = [], {}
    batch = draw(st.sampled_from([1, 3]))
    if draw(st.booleans()):
        c, hw, co = draw(st.sampled_from([2, 3])), draw(st.sampled_from([5, 6])), 4
        x = rng.standard_normal((batch, c, hw, hw)).astype("float32")
        inits["cw"] = rng.standard_normal((co, c, 3, 3)).astype("float32") * 0.3
        inits["cb"] = rng.standard_normal(co).astype("float32")
        nodes.append(n("Conv", ["x", "cw", "cb"], ["v0"], pads=[1, 1, 1, 1]))
        if draw(st.booleans()):
            nodes.append(n("Relu", ["v0"], ["v0r"]))
        inits["flat"] = np.array([batch, co * hw * hw], np.int64)
        nodes.append(n("Reshape", [nodes[-1].output[0], "flat"], ["v1"]))
        shape = (batch, co * hw * hw)
    else:
        shape = (batch, draw(st.sampled_from([6, 7])))
        x = rng.standard_normal(shape).astype("float32")
        nodes.append(n("Identity", ["x"], ["v1"]))
    prev = "v1"
    for k, op in enumerate(draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=4))):
        out = f"h{k}"
        if op == "matmul":
            width = draw(st.sampled_from([5, 8]))
            inits[f"w{k}"] = (rng.standard_normal((shape[1], width)) / 3).astype("float32")
            nodes.append(n("MatMul", [prev, f"w{k}"], [out]))
            shape = (shape[0], width)
        elif op == "add":
            inits[f"b{k}"] = rng.standard_normal(shape[1]).astype("float32")
            nodes.append(n("Add", [prev, f"b{k}"], [out]))
        elif op == "relu":
            nodes.append(n("Relu", [prev], [out]))
        elif op == "softmax":
            nodes.append(n("Softmax", [prev], [out], axis=-1))
        else:  # reshape to another 2-D factorisation of the same elements
            total = shape[0] * shape[1]
            cols = draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0]))
            inits[f"s{k}"] = np.array([-1, cols], np.int64)
            nodes.append(n("Reshape", [prev, f"s{k}"], [out]))
            shape = (total // cols, cols)
        prev = out
    model = make_model(nodes, {"x": x}, [prev], inits)
    return model, {"x": x}


@settings(max_examples=examples(10), deadline=None)
@given(case=_graphs())
def test_random_graphs_from_threads_match_onnxruntime(case: tuple[Any, dict]) -> None:
    model, inputs = case
    lib = ember.compile(model)
    _check_concurrent(lib, model, _feeds(inputs, 4, 19), repeats=3, rtol=1e-4)
