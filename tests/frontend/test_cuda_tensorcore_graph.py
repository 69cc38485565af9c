"""fp16 ONNX models compiled for CUDA take the tensor-core templates (the CUDA strategy
table, ``codegen_cuda/strategy.py``) with the fused tail as their epilogue,
run in the SIMT emulator (``EMBER_CUDA_EMULATE=1``).

References are computed in float64 from the fp16 inputs, rounding each intermediate
tensor the model types as fp16 to fp16, as ONNX's semantics ask. Tolerance: the kernel
multiplies fp16 exactly and adds in fp32 (off by at most ``K * 2**-24 * sum|a*b|``,
below 1e-5 here), then rounds to fp16 where the reference does; the fp32 sum may fall
on the other side of a rounding boundary, one fp16 ulp (``2**-11`` relative), which a
following layer carries into its sum of up to 64 products of values below 1:
``rtol=atol=4e-3``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.frontend.graph import TensorType
from ember.graph.kernels import get_kernel
from tests.frontend.onnx_models import helper, make_model
from tests.nightly import examples

pytestmark = pytest.mark.nvrtc
TOL = {"rtol": 4e-3, "atol": 4e-3}
F16 = np.float16


@pytest.fixture(autouse=True)
def _emulate(monkeypatch):
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")


def _half(rng: np.random.Generator, shape: tuple, scale: float = 1.0) -> np.ndarray:
    return rng.uniform(-scale, scale, shape).astype(F16)


def _sources(lib) -> dict[str, str]:  # noqa: ANN001
    """Each kernel's ops and CUDA source."""
    return {st.kernel.op: st.kernel.module.get_source() for st in lib.steps}


def _mlp(rng: np.random.Generator, dtype: type = F16):  # noqa: ANN202
    """Batch 5, 37 -> 64 (Gemm with transB, bias, Relu) -> 19 (MatMul, Add)."""
    x = _half(rng, (5, 37)).astype(dtype)
    w1, b1 = _half(rng, (64, 37), 0.5).astype(dtype), _half(rng, (64,), 0.5).astype(dtype)
    w2, b2 = _half(rng, (64, 19), 0.5).astype(dtype), _half(rng, (19,), 0.5).astype(dtype)
    n = helper.make_node
    nodes = [
        n("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
        n("Relu", ["h"], ["r"], name="relu"),
        n("MatMul", ["r", "w2"], ["m"], name="fc2"),
        n("Add", ["m", "b2"], ["y"], name="bias2"),
    ]
    params = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
    return make_model(nodes, {"x": x}, ["y"], params), x, params


def _mlp_reference(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    f8 = np.float64
    h = (x.astype(f8) @ p["w1"].astype(f8).T).astype(F16) + p["b1"]
    r = np.maximum(h, 0)
    return (r.astype(f8) @ p["w2"].astype(f8)).astype(F16) + p["b2"]


def test_fp16_mlp_runs_on_the_tensor_cores(rng):
    model, x, params = _mlp(rng)
    lib = ember.compile(model, target="cuda")
    got = lib.run({"x": x})[0]
    assert got.dtype == F16 and got.shape == (5, 19)
    want = _mlp_reference(x, params)
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), **TOL)
    sources = _sources(lib)
    # each layer is one kernel: the GEMM with its bias and activation as the epilogue
    assert set(sources) == {"gemm+relu", "matmul+add"}, set(sources)
    for op, src in sources.items():
        assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src, op


def test_a_batch_of_one_takes_the_tensor_cores_with_its_tail(rng):
    """A (1, M, K) input: the bias add reads the (1, M, N) product at index 0 along its
    batch of one, which is still its own element, so the tail is the epilogue (one
    tensor-core kernel) and the result is right."""
    x, w, b = _half(rng, (1, 32, 64)), _half(rng, (64, 48), 0.5), _half(rng, (48,), 0.5)
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w"], ["m"]), n("Add", ["m", "b"], ["a"]), n("Relu", ["a"], ["y"])]
    lib = ember.compile(make_model(nodes, {"x": x}, ["y"], {"w": w, "b": b}), target="cuda")
    want = np.maximum((x.astype("f8") @ w.astype("f8")).astype(F16) + b, 0)
    np.testing.assert_allclose(lib.run({"x": x})[0].astype("f8"), want.astype("f8"), **TOL)
    sources = _sources(lib)
    assert list(sources) == ["matmul+add+relu"], set(sources)
    assert "mma.sync.aligned.m16n8k16" in sources["matmul+add+relu"]


def test_fp16_mlp_matches_onnxruntime(rng):
    ort = pytest.importorskip("onnxruntime")
    model, x, _ = _mlp(rng)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        want = sess.run(None, {"x": x})[0]
    except Exception as e:  # an onnxruntime build without fp16 Gemm kernels
        pytest.skip(f"onnxruntime cannot run the fp16 model: {e}")
    got = ember.compile(model, target="cuda").run({"x": x})[0]
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), **TOL)


def test_fp16_attention_batched_matmuls(rng):
    """softmax(Q K^T * scale) V over (batch 2, heads 3): both batched products on the
    tensor cores, their four-dimensional batch on grid z."""
    B, H, S, D = 2, 3, 7, 12
    q, k, v = (_half(rng, (B, H, S, D)) for _ in range(3))
    n = helper.make_node
    nodes = [
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
        n("MatMul", ["q", "kt"], ["s"], name="qk"),
        n("Mul", ["s", "scale"], ["ss"], name="scale"),
        n("Softmax", ["ss"], ["p"], axis=-1, name="softmax"),
        n("MatMul", ["p", "v"], ["o"], name="pv"),
    ]
    inputs = {"q": q, "k": k, "v": v}
    model = make_model(nodes, inputs, ["o"], {"scale": np.array(0.3, F16)})
    lib = ember.compile(model, target="cuda")
    got = lib.run(inputs)[0]
    f8 = np.float64
    s = (q.astype(f8) @ k.astype(f8).transpose(0, 1, 3, 2)).astype(F16) * F16(0.3)
    e = np.exp(s.astype(f8) - s.max(-1, keepdims=True))
    p = (e / e.sum(-1, keepdims=True)).astype(F16)
    want = p.astype(f8) @ v.astype(f8)
    np.testing.assert_allclose(got.astype(f8), want, **TOL)
    tc = [op for op, src in _sources(lib).items() if "mma.sync" in src]
    assert sorted(tc) == ["matmul", "matmul+multiply"], _sources(lib).keys()


def test_float32_model_keeps_the_simt_path(rng):
    model, x, params = _mlp(rng, np.float32)
    lib = ember.compile(model, target="cuda")
    got = lib.run({"x": x})[0]
    p = {k: v.astype("f8") for k, v in params.items()}
    want = np.maximum(x @ p["w1"].T + p["b1"], 0) @ p["w2"] + p["b2"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert not any("mma.sync" in src for src in _sources(lib).values())


def test_architecture_without_mma_keeps_the_simt_path(rng):
    """sm_75 lacks ``mma.sync`` m16n8k16: the generic schedule, which sums in fp16 (each
    partial sum rounded: ``atol = K * 2**-10`` for the 64-deep second layer)."""
    model, x, params = _mlp(rng)
    lib = ember.compile(model, target="cuda -arch=sm_75")
    assert not any("mma.sync" in src for src in _sources(lib).values())
    got = lib.run({"x": x})[0]
    want = _mlp_reference(x, params).astype("f8")
    np.testing.assert_allclose(got.astype("f8"), want, rtol=4e-3, atol=64 * 2**-10)


def test_group_with_two_outputs_falls_back_correctly(rng):
    """A GEMM whose result is also a graph output: the group has two outputs, the tensor-core
    schedule does not apply, the generic one computes the template's stages."""
    a, b = _half(rng, (9, 20)), _half(rng, (20, 11))
    n = helper.make_node
    nodes = [n("MatMul", ["a", "b"], ["m"], name="mm"), n("Relu", ["m"], ["y"], name="relu")]
    model = make_model(nodes, {"a": a, "b": b}, ["m", "y"])
    got_m, got_y = ember.compile(model, target="cuda").run({"a": a, "b": b})
    want = (a.astype("f8") @ b.astype("f8")).astype(F16)
    np.testing.assert_allclose(got_m.astype("f8"), want.astype("f8"), **TOL)
    np.testing.assert_allclose(got_y.astype("f8"), np.maximum(want, 0).astype("f8"), **TOL)


@settings(
    max_examples=examples(8),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 70),
    k=st.integers(1, 70),
    batch=st.sampled_from([(), (2,), (2, 2)]),
    shared_b=st.booleans(),
)
def test_matmul_kernel_property(rng, m, n, k, batch, shared_b):
    """Random shapes (any M, N, K, batch dims, B batched or shared) through the strategy."""
    b_shape = (k, n) if shared_b or not batch else (*batch, k, n)
    a, b = _half(rng, (*batch, m, k)), _half(rng, b_shape)
    types = [TensorType(a.shape, "float16"), TensorType(b.shape, "float16")]
    kern = get_kernel("matmul", {}, types, "cuda")
    assert "mma.sync" in kern.module.get_source()
    got = kern.run([a, b])[0]
    want = a.astype("f8") @ b.astype("f8")
    np.testing.assert_allclose(got.astype("f8"), want, rtol=2e-3, atol=2e-3)


def test_gelu_and_cast_tail_is_the_epilogue(rng):
    """A transformer FFN layer: MatMul, bias, exact GELU spelled with Erf, cast to float32,
    and a Gemm with ``beta`` and a row-broadcast C: one tensor-core kernel each."""
    x, w = _half(rng, (6, 40)), _half(rng, (40, 27), 0.5)
    b, w2 = _half(rng, (27,), 0.5), _half(rng, (33, 27), 0.5)
    c2 = _half(rng, (1, 33), 0.5)
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w"], ["m"], name="fc"),
        n("Add", ["m", "b"], ["h"], name="bias"),
        n("Div", ["h", "sqrt2"], ["hs"], name="div"),
        n("Erf", ["hs"], ["e"], name="erf"),
        n("Add", ["e", "one"], ["e1"], name="add1"),
        n("Mul", ["h", "e1"], ["he"], name="mul"),
        n("Mul", ["he", "half"], ["g"], name="half"),
        n("Cast", ["g"], ["y"], to=1, name="cast"),
        n("Gemm", ["g", "w2", "c2"], ["z"], transB=1, beta=0.5, name="fc2"),
    ]
    consts = {"sqrt2": np.array(np.sqrt(2), F16), "one": np.array(1, F16)}
    consts |= {"half": np.array(0.5, F16), "w": w, "b": b, "w2": w2, "c2": c2}
    model = make_model(nodes, {"x": x}, ["y", "z"], consts)
    lib = ember.compile(model, target="cuda")
    y, z = lib.run({"x": x})
    assert y.dtype == np.float32 and z.dtype == F16
    from math import erf

    f8 = np.float64
    h = (x.astype(f8) @ w.astype(f8)).astype(F16) + b
    hf = h.astype(f8)
    g = 0.5 * hf * (1 + np.vectorize(erf)(hf / np.sqrt(2)))
    np.testing.assert_allclose(y, g, **TOL)
    want_z = g.astype(F16).astype(f8) @ w2.astype(f8).T + 0.5 * c2.astype(f8)
    np.testing.assert_allclose(z.astype(f8), want_z, **TOL)
    tc = [op for op, src in _sources(lib).items() if "mma.sync" in src]
    assert "gemm" in tc and any(op.startswith("matmul+add") and "erf" in op for op in tc), tc


def test_transposing_tail_is_not_taken_as_an_epilogue(rng):
    """A square GEMM read transposed has the GEMM's shape but not its indices: the
    tensor-core schedule (whose shared tile holds one block's rows) must not take it."""
    from ember import te
    from ember.codegen_cuda.schedules.generic import schedule_generic
    from ember.codegen_cuda.schedules.tensorcore_epilogue import tensorcore_stages
    from ember.codegen_cuda.strategy import compute_for
    from ember.tir.schedule.schedule import create_schedule

    M = K = 40
    A = te.placeholder((M, K), "float16", name="A")
    B = te.placeholder((K, M), "float16", name="B")
    (C,) = compute_for("matmul", [A, B], {}, "sm_80")
    T = te.compute((M, M), lambda i, j: C[j, i] + C[i, j], name="T")
    assert tensorcore_stages(create_schedule(T.op), [T]) == set()
    mod = ember.build(schedule_generic([T]), [A, B, T], target="cuda -arch=sm_80")
    a, b = _half(rng, (M, K)), _half(rng, (K, M))
    got = np.zeros((M, M), F16)
    mod.emulate(a, b, got)
    c = (a.astype("f8") @ b.astype("f8")).astype(F16).astype("f8")
    np.testing.assert_allclose(got.astype("f8"), c + c.T, **TOL)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 rounded to nearest even bfloat16, as its uint16 bits."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype("f8")


def test_bfloat16_matmul_kernel(rng):
    """bf16 graph kernels take the template too (data passed as uint16 bits); the result
    rounds to 8 significant bits: ``rtol=2**-8``."""
    M, N, K = 13, 21, 29
    a = _bf16_bits(rng.uniform(-1, 1, (M, K)))
    b = _bf16_bits(rng.uniform(-1, 1, (K, N)))
    types = [TensorType((M, K), "bfloat16"), TensorType((K, N), "bfloat16")]
    kern = get_kernel("matmul", {}, types, "cuda")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16" in kern.module.get_source()
    out = np.zeros((M, N), np.uint16)
    kern(a, b, out)
    want = _from_bf16(a) @ _from_bf16(b)
    np.testing.assert_allclose(_from_bf16(out), want, rtol=2**-8, atol=1e-6)


def test_tuning_record_knobs_are_used(rng, tmp_path):
    """A ``matmul_tensorcore.cuda`` record for the first layer's workload (its route, wmma,
    and tiles) is what the graph kernel runs with, and the model still matches."""
    from ember.tuner import apply_history_best, create_task
    from ember.tuner.records import Record, RecordWriter

    model, x, params = _mlp(rng)
    task = create_task(
        "matmul_tensorcore.cuda", args=(5, 64, 37, "float16", "float16", True), target="cuda"
    )
    space = task.config_space
    knobs = {"bm": 32, "bn": 64, "wm": 16, "wn": 32, "ks": 16, "stages": 2}
    knobs |= {"layout": "pad", "route": "wmma"}
    choices = {k: list(space.knobs[k].candidates).index(v) for k, v in knobs.items()}
    cfg = space.from_choices(choices)
    rec = Record(
        task.key, task.name, task.workload_key, task.template.version, str(task.target),
        cfg.to_json(), (1e-3,), "ok", "test", ember.__version__,
    )  # fmt: skip
    log = tmp_path / "tc.jsonl"
    with RecordWriter(log) as w:
        w.write(rec)
    with apply_history_best(log):
        lib = ember.compile(model, target="cuda")
    sources = _sources(lib)
    assert "wmma::mma_sync" in sources["gemm+relu"] and "wmma" not in sources["matmul+add"]
    got = lib.run({"x": x})[0]
    np.testing.assert_allclose(got.astype("f8"), _mlp_reference(x, params).astype("f8"), **TOL)


def test_extract_tasks_lists_the_tensorcore_workloads(rng):
    model, _, _ = _mlp(rng)
    got = [(t.task.name, t.task.args, t.weight) for t in ember.extract_tasks(model, "cuda")]
    assert got == [
        ("matmul_tensorcore.cuda", (5, 64, 37, "float16", "float16", True), 1),
        ("matmul_tensorcore.cuda", (5, 19, 64, "float16", "float16", False), 1),
    ]
    assert ember.extract_tasks(model, "cuda -arch=sm_75") == []


def test_tensorcore_model_exports_and_loads(rng, tmp_path):
    """The artifact of an fp16 model (cubins for the default architectures, all sm_80+)
    loads and gives the in-process model's result bit for bit."""
    model, x, _ = _mlp(rng)
    lib = ember.compile(model, target="cuda")
    want = lib.run({"x": x})[0]
    lib.export(tmp_path / "mlp.ember")
    got = ember.load(tmp_path / "mlp.ember").run({"x": x})[0]
    np.testing.assert_array_equal(got, want)
