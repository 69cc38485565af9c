"""The native step loop: runs of CPU kernels called in one native call between host steps.

References: onnxruntime and numpy on random data, and the same workspace run the old
way (every bound call from Python), which must give bit-identical results.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import ember
from ember import te, tir
from ember.errors import ArgumentError, InternalError, PackedFuncError
from ember.graph.workspace import Workspace
from ember.runtime.step_loop import NativeRun, StepFailed, StepLoop
from ember.runtime.threads import set_num_threads
from tests.frontend.onnx_models import helper, make_model, run_ort


def _chain(n: int, shape: tuple[int, ...], seed: int):
    """``n`` alternating Add/Mul nodes with random constants (one kernel each, unfused)."""
    rng = np.random.default_rng(seed)
    nodes, consts, prev = [], {}, "x"
    for k in range(n):
        op = "Add" if k % 2 == 0 else "Mul"
        consts[f"c{k}"] = rng.uniform(0.5, 1.5, shape).astype("float32")
        nodes.append(helper.make_node(op, [prev, f"c{k}"], [f"v{k}"], name=f"{op}{k}"))
        prev = f"v{k}"
    x = rng.standard_normal(shape).astype("float32")
    return make_model(nodes, {"x": x}, [prev], consts), {"x": x}, consts


def _numpy_chain(x: np.ndarray, consts: dict[str, np.ndarray]) -> np.ndarray:
    for k in range(len(consts)):
        x = x + consts[f"c{k}"] if k % 2 == 0 else x * consts[f"c{k}"]
    return x


def _python_path(lib, inputs) -> list[np.ndarray]:
    """The model run with every step called from Python (a workspace without the loop)."""
    ws = Workspace(lib.graph, lib.steps, lib._params)
    assert not any(isinstance(c, NativeRun) for _, c in ws.program)
    ws.load(lib._check_inputs(inputs))
    for _, call in ws.program:
        call()
    return [ws.env[v].copy() for v in lib.output_names]


@pytest.fixture(scope="module")
def chain():
    model, inputs, consts = _chain(23, (3, 7, 5), seed=1)
    return model, inputs, consts, ember.compile(model, graph_passes=())


def test_a_chain_runs_as_one_native_call_and_matches_numpy(chain) -> None:
    model, inputs, consts, lib = chain
    (item,) = lib._pool.first.program
    assert isinstance(item[1], NativeRun) and len(item[1]) == len(lib.steps) == 23
    rng = np.random.default_rng(7)
    for _ in range(3):  # the tables are reused across runs with new data
        x = rng.standard_normal((3, 7, 5)).astype("float32")
        (got,) = lib.run({"x": x})
        np.testing.assert_allclose(got, _numpy_chain(x, consts), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got, _python_path(lib, {"x": x})[0])
    np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


def test_concurrent_runs_from_threads(chain) -> None:
    _, _, consts, lib = chain
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((3, 7, 5)).astype("float32") for _ in range(12)]
    got: dict[int, list[np.ndarray]] = {}
    start = threading.Barrier(4)

    def worker(t: int) -> None:
        start.wait()
        got[t] = [lib.run({"x": feeds[(t + r) % 12]})[0] for r in range(12)]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got) == [0, 1, 2, 3]
    for t, outs in got.items():
        for r, out in enumerate(outs):
            want = _numpy_chain(feeds[(t + r) % 12], consts)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def _mixed_model():
    """x*2 -> If(cond: +w, else: *x) -> Tanh -> Gather(rows) -> Add(b): kernels, a host
    If over compiled branches, and a gather whose run-time indices are checked."""

    def branch(node, out, name):
        info = helper.make_tensor_value_info(out, 1, [6, 5])
        return helper.make_graph([node], name, [], [info])

    then_g = branch(helper.make_node("Add", ["a", "w"], ["t_out"]), "t_out", "then")
    else_g = branch(helper.make_node("Mul", ["a", "x"], ["e_out"]), "e_out", "else")
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["a"], name="mul"),
        helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g, name="if"),
        helper.make_node("Tanh", ["r"], ["t"], name="tanh"),
        helper.make_node("Gather", ["t", "rows"], ["g"], name="gather", axis=0),
        helper.make_node("Add", ["g", "b"], ["y"], name="add"),
    ]
    rng = np.random.default_rng(11)
    inits = {
        "two": np.array(2.0, np.float32),
        "w": rng.standard_normal((6, 5)).astype(np.float32),
        "b": rng.standard_normal((4, 5)).astype(np.float32),
    }
    inputs = {
        "x": rng.standard_normal((6, 5)).astype(np.float32),
        "cond": np.array(True),
        "rows": np.array([5, 0, 3, 3], np.int64),
    }
    return make_model(nodes, inputs, ["y"], inits, opset=13), inputs


def test_a_model_mixing_native_and_host_steps() -> None:
    model, inputs = _mixed_model()
    lib = ember.compile(model, graph_passes=())
    kinds = [type(c).__name__ for _, c in lib._pool.first.program]
    assert kinds.count("NativeRun") >= 2 and "partial" in kinds  # the If between runs
    assert "method" in kinds  # the gather's index check, run from Python
    rng = np.random.default_rng(5)
    for flag in (True, False, True):
        feed = dict(inputs, cond=np.array(flag))
        feed["x"] = rng.standard_normal((6, 5)).astype(np.float32)
        feed["rows"] = rng.integers(-6, 6, 4).astype(np.int64)  # negative rows count back
        (got,) = lib.run(feed)
        np.testing.assert_allclose(got, run_ort(model, feed)[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got, _python_path(lib, feed)[0])


def test_an_index_out_of_range_still_names_its_step() -> None:
    model, inputs = _mixed_model()
    lib = ember.compile(model, graph_passes=())
    bad = dict(inputs, rows=np.array([0, 6, 1, 2], np.int64))
    with pytest.raises(ArgumentError, match=r"(?s)while running.*gather"):
        lib.run(bad)
    np.testing.assert_allclose(lib.run(inputs)[0], run_ort(model, inputs)[0], rtol=1e-5)


@pytest.fixture
def failing_kernel():
    """A CPU kernel ``out = in`` that fails (its callback raises) when ``in[0] > 100``."""

    def copy_or_fail(src, dst) -> None:
        a = np.asarray(src)
        if a.flat[0] > 100:
            raise ValueError("too large")
        np.asarray(dst)[...] = a

    ember.register_func("test.steploop.copy", copy_or_fail, override=True)
    A = te.placeholder((3, 7, 5), name="A")
    B = te.extern(
        (3, 7, 5), [A], lambda ins, outs: tir.call_packed("test.steploop.copy", ins[0], outs[0])
    )
    yield ember.build(te.create_schedule(B.op), [A, B], target="llvm")
    ember.remove_global_func("test.steploop.copy")


def _fail_at(lib, failing_kernel, step: int) -> Workspace:
    """``lib``'s workspace with step ``step`` replaced by the failing copy (in -> out)."""
    with lib._workspace() as ws:
        st = lib.steps[step]
        fn = failing_kernel.get_function(failing_kernel.entry_name)
        ws.calls[step] = fn.bind([ws.env[st.inputs[0]], ws.env[st.outputs[0]]])
        ws.link()
    return ws


def test_a_kernel_failing_inside_a_native_run_names_its_step(failing_kernel) -> None:
    model, _, consts = _chain(6, (3, 7, 5), seed=2)
    lib = ember.compile(model, graph_passes=())
    ws = _fail_at(lib, failing_kernel, 3)  # step 3 becomes the failing copy (v2 -> v3)
    (item,) = ws.program
    assert isinstance(item[1], NativeRun)
    x = np.random.default_rng(4).uniform(-1, 1, (3, 7, 5)).astype("float32")
    want = x
    for k in range(6):
        if k != 3:
            want = want + consts[f"c{k}"] if k % 2 == 0 else want * consts[f"c{k}"]
    np.testing.assert_allclose(lib.run({"x": x})[0], want, rtol=1e-5, atol=1e-6)
    x[0, 0, 0] = 1e4
    with pytest.raises(PackedFuncError, match=r"(?s)too large.*while running ONNX node 'Mul3'"):
        lib.run({"x": x})
    assert lib._pool._idle == [ws]  # the workspace came back


def test_a_call_with_more_arguments_than_the_loop_takes_stays_in_python(chain) -> None:
    _, inputs, consts, lib = chain
    loop = lib._loop
    ws = Workspace(lib.graph, lib.steps, lib._params, StepLoop(loop.function, 2, loop.owner))
    assert not any(isinstance(c, NativeRun) for _, c in ws.program)  # each Add/Mul takes 3
    ws.load(lib._check_inputs(inputs))
    lib._call_steps(ws)
    np.testing.assert_allclose(ws.env[lib.output_names[0]], _numpy_chain(inputs["x"], consts))


def test_an_entry_the_loop_was_not_compiled_for_is_refused(chain) -> None:
    _, inputs, _, lib = chain
    ws = Workspace(lib.graph, lib.steps, lib._params, lib._loop)
    run = ws.program[0][1]
    assert isinstance(run, NativeRun)
    run._table[4].nargs = 10_000  # what no loop has a case for
    with pytest.raises(StepFailed) as info:
        run()
    assert info.value.step == 4 and isinstance(info.value.error, InternalError)


def test_the_thread_count_reaches_the_kernels() -> None:
    model, inputs, _ = _chain(2, (64, 4099), seed=6)  # large enough to run a parallel loop
    lib = ember.compile(model, graph_passes=())
    cells = [st.kernel.module._threads_cell for st in lib.steps if st.kernel.module.parallel]
    assert cells
    try:
        for n in (1, 2, 1):
            set_num_threads(n)
            lib.run(inputs)
            assert all(c.value == n for c in cells)
    finally:
        set_num_threads(None)


def test_kernels_the_loop_calls_launch_on_the_thread_pool() -> None:
    """The loop calls kernels without their module's per-call setup, which points a
    module's parallel loops at Ember's pool: the loop must do it (else libgomp runs them,
    which collapses on a busy machine)."""
    from ember.runtime.threads import parallel_launcher

    model, inputs, consts = _chain(2, (64, 4099), seed=7)
    lib = ember.compile(model, graph_passes=())
    mods = [st.kernel.module for st in lib.steps if st.kernel.module.parallel]
    assert mods and all(m._launch_cell is not None for m in mods)
    try:
        set_num_threads(2)
        got = lib.run(inputs)
        assert parallel_launcher() != 0  # the pool (EMBER_THREAD_POOL is not set to gomp)
        assert all(m._launch_cell.value == parallel_launcher() for m in mods)
    finally:
        set_num_threads(None)
    np.testing.assert_allclose(got[0], _numpy_chain(inputs["x"], consts), rtol=1e-5, atol=1e-6)


# --- profiles: the loop stamps the clock between kernels -------------------------------


def test_a_timed_run_stamps_each_kernel_and_computes_the_same(chain) -> None:
    _, inputs, consts, lib = chain
    with lib._workspace() as ws:
        (item,) = ws.program
        run = item[1]
        assert run.timeable  # Linux: the loop reads clock_gettime
        ws.load(lib._check_inputs(inputs))
        start = time.perf_counter()
        seconds = run.timed()
        wall = time.perf_counter() - start
        got = ws.env[lib.output_names[0]].copy()
        assert run._job.stamps is None  # a plain run after it writes no stamps
    assert len(seconds) == 23 and all(s > 0 for s in seconds)
    assert sum(seconds) <= wall  # read inside the call: the same clock as perf_counter
    np.testing.assert_allclose(got, _numpy_chain(inputs["x"], consts), rtol=1e-5, atol=1e-6)


def test_a_profile_gives_each_kernel_its_own_time() -> None:
    """A 192x192 product among tiny elementwise kernels: the loop's stamps must give the
    product's time to the product's step, not to the step after it."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((192, 192)).astype(np.float32)
    c = rng.standard_normal((192, 192)).astype(np.float32)
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="add0"),
        helper.make_node("MatMul", ["a", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "c"], ["b"], name="add1"),
        helper.make_node("Mul", ["b", "c"], ["y"], name="mul"),
    ]
    x = rng.standard_normal((192, 192)).astype(np.float32)
    lib = ember.compile(make_model(nodes, {"x": x}, ["y"], {"w": w, "c": c}), graph_passes=())
    kinds = [type(call).__name__ for _, call in lib._pool.first.program]
    assert kinds == ["NativeRun"]
    prof = lib.profile({"x": x}, number=5)
    slowest = max(prof.steps, key=lambda s: s.seconds)
    assert "matmul" in slowest.where
    assert sum(s.seconds for s in prof.steps) <= prof.total


def test_a_kernel_failing_in_a_profile_names_its_step(failing_kernel) -> None:
    model, _, _ = _chain(4, (3, 7, 5), seed=8)
    lib = ember.compile(model, graph_passes=())
    ws = _fail_at(lib, failing_kernel, 2)  # step 2 becomes the failing copy (v1 -> v2)
    x = np.random.default_rng(9).uniform(-1, 1, (3, 7, 5)).astype("float32")
    x[0, 0, 0] = 1e4
    with pytest.raises(PackedFuncError, match=r"(?s)too large.*while running ONNX node 'Add2'"):
        lib.profile({"x": x}, number=1)
    assert ws.program[0][1]._job.stamps is None
    assert lib._pool._idle == [ws]


def test_a_loop_without_a_clock_profiles_from_python(chain) -> None:
    _, inputs, _, lib = chain
    loop = lib._loop
    ws = Workspace(lib.graph, lib.steps, lib._params, StepLoop(loop.function, 48, loop.owner))
    run = ws.program[0][1]
    assert isinstance(run, NativeRun) and not run.timeable
    with pytest.raises(InternalError, match="without a clock"):
        run.timed()
    idle, lib._pool._idle = lib._pool._idle, [ws]  # the profile takes this one: Python calls
    try:
        prof = lib.profile(inputs, number=2)
    finally:
        lib._pool._idle = idle
    assert len(prof.steps) == 23 and all(s.seconds > 0 for s in prof.steps)
