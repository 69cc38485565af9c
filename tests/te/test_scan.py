"""``te.scan`` against numpy on random data: cumulative sums, recurrences, init blocks of
several rows, updates of several stages, scans consumed by other stages; on the reference
interpreter, LLVM and (with the update bound to threads) the CUDA emulator, whose time
loop runs on the host, one launch per step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ArgumentError, LoweringError, ScheduleError
from ember.tir.interp import run
from tests.nightly import examples
from tests.numerics import assert_close

CUDA = "cuda -arch=sm_80"


def _cumsum(m, n):
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, init, update, te.scan(init, update, state, inputs=[X], name="cumsum")


def _bind(s, stage_tensor, factor):
    xo, xi = s[stage_tensor].split(stage_tensor.op.axis[1], factor=factor)
    s[stage_tensor].bind(xo, te.thread_axis("blockIdx.x"))
    s[stage_tensor].bind(xi, te.thread_axis("threadIdx.x"))


def _nan(shape, dtype="float32"):
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 77, dtype)


def _run_all(s, args, inputs, want, executors=("interp", "llvm"), **kw):
    for ex in executors:
        out = _nan(want.shape, want.dtype)
        if ex == "interp":
            run(ember.lower(s, args), *inputs, out, *kw.get("scalars", ()))
        elif ex == "llvm":
            ember.build(s, args, target="llvm")(*inputs, out, *kw.get("scalars", ()))
        else:
            ember.build(s, args, target=CUDA).emulate(*inputs, out, *kw.get("scalars", ()))
        assert_close(out, want, str(want.dtype), what=ex)


def test_scan_op_attributes():
    m, n = te.var("m"), te.var("n")
    X, init, update, res = _cumsum(m, n)
    op = res.op
    assert isinstance(op, te.ScanOp)
    assert len(res.shape) == 2 and res.shape[0] is m and res.shape[1] is n
    assert op.scan_axis.dom.min.value == 1  # the rows after init's one row
    assert [iv.dom.extent for iv in op.spatial_axis_] == [n]
    assert res.dtype == "float32" and op.input_tensors == (init, update)


@pytest.mark.parametrize("shape", [(1, 5), (2, 1), (7, 13), (33, 3)])
def test_cumsum_constant_shapes(rng, shape):
    X, init, update, res = _cumsum(*shape)
    s = te.create_schedule(res.op)
    x = rng.uniform(-1, 1, shape).astype("float32")
    _run_all(s, [X, res], [x], np.cumsum(x, axis=0))


def test_cumsum_symbolic_one_build_many_sizes(rng):
    m, n = te.var("m"), te.var("n")
    X, init, update, res = _cumsum(m, n)
    s = te.create_schedule(res.op)
    f = ember.build(s, [X, res], target="llvm")
    func = ember.lower(s, [X, res])
    for shape in [(1, 1), (5, 3), (17, 29), (2, 100)]:
        x = rng.uniform(-1, 1, shape).astype("float32")
        for call in (f, lambda *a: run(func, *a)):
            out = _nan(shape)
            call(x, out)
            assert_close(out, np.cumsum(x, axis=0), "float32")


def test_linear_recurrence_float64(rng):
    """s[t] = s[t-1] * a[t] + b[t], s[0] = b[0]."""
    m, n = 11, 6
    A = te.placeholder((m, n), "float64", name="A")
    B = te.placeholder((m, n), "float64", name="B")
    state = te.placeholder((m, n), "float64", name="state")
    init = te.compute((1, n), lambda _, i: B[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] * A[t, i] + B[t, i], name="upd")
    res = te.scan(init, update, state, inputs=[A, B])
    a = rng.uniform(-1.5, 1.5, (m, n))
    b = rng.uniform(-1, 1, (m, n))
    want = np.empty((m, n))
    want[0] = b[0]
    for t in range(1, m):
        want[t] = want[t - 1] * a[t] + b[t]
    s = te.create_schedule(res.op)
    _run_all(s, [A, B, res], [a, b], want)
    _bind(s, init, 4)
    _bind(s, update, 4)
    _run_all(s, [A, B, res], [a, b], want, executors=("emulator",))


def test_init_of_two_rows_fibonacci_like(rng):
    """init gives rows 0 and 1; the update reads two earlier steps."""
    m, n = 9, 4
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((2, n), lambda r, i: X[r, i], name="init")
    update = te.compute(
        (m, n), lambda t, i: state[t - 1, i] + 0.5 * state[t - 2, i] + X[t, i], name="upd"
    )
    res = te.scan(init, update, state)
    assert res.op.scan_axis.dom.min.value == 2
    x = rng.uniform(-1, 1, (m, n)).astype("float32")
    want = x.astype(np.float64).copy()
    for t in range(2, m):
        want[t] = want[t - 1] + 0.5 * want[t - 2] + x[t]
    s = te.create_schedule(res.op)
    _run_all(s, [X, res], [x], want.astype("float32"))


def _neighbour_scan(m, n):
    """Each step reads the previous row shifted by one column: a value another thread
    (and block) wrote in the previous step."""
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute(
        (m, n), lambda t, i: state[t - 1, (i + 1) % n] * 0.5 + X[t, i], name="update"
    )
    return X, init, update, te.scan(init, update, state)


def _neighbour_ref(x):
    want = x.astype(np.float64).copy()
    for t in range(1, x.shape[0]):
        want[t] = np.roll(want[t - 1], -1) * 0.5 + x[t]
    return want.astype(x.dtype)


@pytest.mark.parametrize("shape,factor", [((6, 300), 64), ((5, 7), 4), ((1, 33), 32)])
def test_tutorial_schedule_on_the_emulator(rng, shape, factor):
    X, init, update, res = _neighbour_scan(*shape)
    s = te.create_schedule(res.op)
    _bind(s, init, factor)
    _bind(s, update, factor)
    x = rng.uniform(-1, 1, shape).astype("float32")
    _run_all(s, [X, res], [x], _neighbour_ref(x), executors=("emulator", "interp"))
    _run_all(te.create_schedule(res.op), [X, res], [x], _neighbour_ref(x), executors=("llvm",))


def test_gpu_time_loop_is_on_the_host():
    """One kernel for init, one for the update launched once per step with the step as
    a scalar: the launch boundary orders a step's reads after the last step's writes."""
    m, n = te.var("m"), te.var("n")
    X, init, update, res = _neighbour_scan(m, n)
    s = te.create_schedule(res.op)
    _bind(s, init, 32)
    _bind(s, update, 32)
    mod = ember.build(s, [X, res], target=CUDA)
    first, step = mod.program.launches
    assert first.loops == () and [v.name for v, _, _ in step.loops] == ["scan.idx"]
    assert "scan.idx" in [v.name for v in step.sizes]
    assert "for (" not in mod.get_source()  # no time loop inside a kernel
    x = np.random.default_rng(1).uniform(-1, 1, (4, 70)).astype("float32")
    out = _nan(x.shape)
    mod.emulate(x, out)
    assert_close(out, _neighbour_ref(x), "float32")


@pytest.mark.nvrtc
def test_tutorial_scan_compiles_with_nvrtc():
    m, n = te.var("m"), te.var("n")
    X, init, update, res = _cumsum(m, n)
    s = te.create_schedule(res.op)
    _bind(s, init, 256)
    _bind(s, update, 256)
    mod = ember.build(s, [X, res], target=CUDA)
    assert len(mod.resource_usage()) == 2


def test_update_of_two_stages_computed_at_the_update(rng):
    """TVM's tutorial: a multi-stage update, the first stage computed at the second's axis."""
    m, n = 8, 37
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    s1 = te.compute((m, n), lambda t, i: state[t - 1, i] * 2, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    res = te.scan(init, s2, state, inputs=[X])
    x = rng.uniform(-1, 1, (m, n)).astype("float32")
    want = x.astype(np.float64).copy()
    for t in range(1, m):
        want[t] = want[t - 1] * 2 + x[t]
    s = te.create_schedule(res.op)
    xo, xi = s[s2].split(s2.op.axis[1], factor=8)
    s[s1].compute_at(s[s2], xo)
    _run_all(s, [X, res], [x], want.astype("float32"))
    s = te.create_schedule(res.op)
    _bind(s, init, 16)
    xo, xi = s[s2].split(s2.op.axis[1], factor=16)
    s[s2].bind(xo, te.thread_axis("blockIdx.x"))
    s[s2].bind(xi, te.thread_axis("threadIdx.x"))
    s[s1].compute_at(s[s2], xi)
    s[s1].set_scope("local")
    _run_all(s, [X, res], [x], want.astype("float32"), executors=("emulator",))


def test_update_reads_a_stage_computed_at_the_root(rng):
    """A producer outside the time loop is computed for every step, not only the first."""
    m, n = 6, 10
    X = te.placeholder((m, n), name="X")
    Y = te.compute((m, n), lambda t, i: X[t, i] * 3 - 1, name="Y")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: Y[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + Y[t, i], name="upd")
    res = te.scan(init, update, state)
    x = rng.uniform(-1, 1, (m, n)).astype("float32")
    s = te.create_schedule(res.op)
    _run_all(s, [X, res], [x], np.cumsum(x * 3 - 1, axis=0, dtype=np.float64).astype("float32"))


def test_scan_consumed_by_a_compute(rng):
    """The scan is an intermediate: it gets a scratch buffer; a compute reads it."""
    m, n = 7, 5
    X, init, update, res = _cumsum(m, n)
    out = te.compute((m, n), lambda t, i: res[t, i] * res[t, i], name="sq")
    s = te.create_schedule(out.op)
    x = rng.uniform(-1, 1, (m, n)).astype("float32")
    _run_all(s, [X, out], [x], np.cumsum(x, axis=0) ** 2)


def test_int32_scan_running_max(rng):
    m, n = 12, 9
    X = te.placeholder((m, n), "int32", name="X")
    state = te.placeholder((m, n), "int32", name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: te.max(state[t - 1, i], X[t, i]), name="upd")
    res = te.scan(init, update, state)
    x = rng.integers(-1000, 1000, (m, n)).astype("int32")
    s = te.create_schedule(res.op)
    _run_all(s, [X, res], [x], np.maximum.accumulate(x, axis=0))


@settings(max_examples=examples(15), deadline=None)
@given(
    m=st.integers(1, 9),
    n=st.integers(1, 40),
    factor=st.sampled_from([1, 3, 8, 32]),
    seed=st.integers(0, 2**16),
)
def test_property_cumsum_any_shape_and_split(m, n, factor, seed):
    rng = np.random.default_rng(seed)
    X, init, update, res = _cumsum(m, n)
    s = te.create_schedule(res.op)
    s[update].split(update.op.axis[1], factor=factor)
    x = rng.uniform(-1, 1, (m, n)).astype("float32")
    _run_all(s, [X, res], [x], np.cumsum(x, axis=0), executors=("llvm",))


# -- errors ---------------------------------------------------------------------------------


def test_error_dtype_and_shape_mismatch():
    X = te.placeholder((4, 3), name="X")
    state = te.placeholder((4, 3), name="state")
    init = te.compute((1, 3), lambda _, i: X[0, i].astype("float64"), name="init")
    update = te.compute((4, 3), lambda t, i: state[t - 1, i] + X[t, i], name="upd")
    with pytest.raises(ArgumentError, match="init has dtype float64"):
        te.scan(init, update, state)
    init2 = te.compute((1, 2), lambda _, i: X[0, i], name="init")
    with pytest.raises(ArgumentError, match="dimension 1"):
        te.scan(init2, update, state)
    with pytest.raises(ArgumentError, match="as many tensors"):
        te.scan([init, init], [update], [state])


def test_error_states_with_different_time_steps():
    X = te.placeholder((4, 3), name="X")
    a = te.placeholder((4, 3), name="a")
    b = te.placeholder((5, 3), name="b")
    ia = te.compute((1, 3), lambda _, i: X[0, i], name="ia")
    ib = te.compute((1, 3), lambda _, i: X[0, i], name="ib")
    ua = te.compute((4, 3), lambda t, i: a[t - 1, i] + b[t - 1, i], name="ua")
    ub = te.compute((5, 3), lambda t, i: b[t - 1, i], name="ub")
    with pytest.raises(ArgumentError, match="every state must have state 0's"):
        te.scan([ia, ib], [ua, ub], [a, b])


def test_error_scheduling_the_scan_stage_itself():
    X, init, update, res = _cumsum(5, 4)
    s = te.create_schedule(res.op)
    with pytest.raises(ScheduleError, match="compute stages"):
        s[res].split(res.op.scan_axis, factor=2)


def test_error_state_passed_as_an_argument():
    X = te.placeholder((5, 4), name="X")
    state = te.placeholder((5, 4), name="state")
    init = te.compute((1, 4), lambda _, i: X[0, i], name="init")
    update = te.compute((5, 4), lambda t, i: state[t - 1, i] + X[t, i], name="upd")
    res = te.scan(init, update, state)
    s = te.create_schedule(res.op)
    with pytest.raises(LoweringError, match="pass the scan's output"):
        ember.lower(s, [X, state, res])


def test_error_init_inlined():
    X, init, update, res = _cumsum(5, 4)
    s = te.create_schedule(res.op)
    s[init].compute_inline()
    with pytest.raises(ScheduleError, match="cannot be inlined"):
        ember.lower(s, [X, res])
