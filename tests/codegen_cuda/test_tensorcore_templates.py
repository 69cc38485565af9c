"""Tensor-core templates (``matmul_tensorcore``, ``batch_matmul_tensorcore``,
``conv2d_nhwc_tensorcore``): emulated against numpy, compiled by NVRTC, mutated.

Inputs are random fp16 (or bf16) values; the reference is computed in float64 from the
rounded inputs, independently of Ember. Tolerance: the tensor cores multiply fp16
exactly and add in fp32, so a sum of ``K`` products of values in [-1, 1] is off by at
most about ``K * 2**-24 * sum|a*b|`` (below 1e-5 at these sizes): ``atol=1e-4,
rtol=1e-4`` for fp32 results; an fp16 result adds half an fp16 ulp (``2**-11``
relative): ``rtol=2e-3``, a bf16 one ``2**-8``; fp16 accumulation rounds every
partial sum to fp16: ``atol = K * 2**-10``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.tuner import create_task
from tests.nightly import examples, sample_in_ci

TC = "matmul_tensorcore.cuda"
BTC = "batch_matmul_tensorcore.cuda"
CTC = "conv2d_nhwc_tensorcore.cuda"


def build(name: str, args: tuple, arch: str = "sm_80", **knobs):  # noqa: ANN201
    task = create_task(name, args=args, target=f"cuda -arch={arch}")
    space = task.config_space
    choices = {k: knob.default_index for k, knob in space.knobs.items()}
    for k, v in knobs.items():
        choices[k] = list(space.knobs[k].candidates).index(v)
    s, tensors = task.instantiate(space.from_choices(choices))
    return ember.build(s, tensors, target=f"cuda -arch={arch}", name=name.split(".")[0])


def half(rng: np.random.Generator, shape: tuple, dtype: str = "float16") -> np.ndarray:
    x = rng.uniform(-1, 1, shape).astype("float32")
    if dtype == "bfloat16":  # round to nearest even on the top 16 bits
        bits = x.view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)
    return x.astype(dtype)


def bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """What the kernel takes: fp16 as is, bf16 as its uint16 bits."""
    return (x.view(np.uint32) >> 16).astype(np.uint16) if dtype == "bfloat16" else x


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def epilogue(acc: np.ndarray, bias: np.ndarray | None, act: str) -> np.ndarray:
    x = acc if bias is None else acc + bias.astype("float64")
    return {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0), "gelu": gelu}[act](x)


def conv_ref(x: np.ndarray, w: np.ndarray, KH: int, KW: int, stride: int, pad: int) -> np.ndarray:
    N, H, W, C = x.shape
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    xp = np.pad(x.astype("float64"), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    w4 = w.astype("float64").reshape(KH, KW, C, -1)
    out = np.zeros((N, OH, OW, w.shape[1]))
    for kh in range(KH):
        for kw in range(KW):
            win = xp[
                :,
                kh : kh + stride * (OH - 1) + 1 : stride,
                kw : kw + stride * (OW - 1) + 1 : stride,
            ]
            out += np.einsum("nhwc,co->nhwo", win, w4[kh, kw])
    return out.reshape(N * OH * OW, -1)


def run_matmul(
    rng: np.random.Generator, M: int, N: int, K: int, trans_b: bool = False,
    bias: bool = False, act: str = "none", out: str = "float32", dtype: str = "float16",
    acc: str = "float32", batch: int | None = None, **knobs: object,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Build, emulate on random inputs and return (result, float64 reference)."""
    lead = () if batch is None else (batch,)
    name = TC if batch is None else BTC
    mod = build(name, (*lead, M, N, K, dtype, out, trans_b, bias, act, acc), **knobs)
    a = half(rng, (*lead, M, K), dtype)
    b = half(rng, (*lead, N, K) if trans_b else (*lead, K, N), dtype)
    bv = half(rng, (N,), dtype) if bias else None
    c = np.full((*lead, M, N), np.nan, out if out != "bfloat16" else "float32")
    mod.emulate(bits(a, dtype), bits(b, dtype), *([bits(bv, dtype)] if bias else []), c)
    bm = np.swapaxes(b, -1, -2) if trans_b else b
    want = epilogue(np.matmul(a.astype("float64"), bm.astype("float64")), bv, act)
    return c, want


@pytest.mark.parametrize("shape", [(37, 53, 29), (130, 70, 200)])
def test_matmul_default_config_odd_shapes(rng, shape):
    c, want = run_matmul(rng, *shape)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("act", "out", "trans_b"), [("relu", "float16", False), ("gelu", "float32", True)]
)
def test_matmul_fused_epilogue(rng, act, out, trans_b):
    c, want = run_matmul(rng, 37, 53, 29, trans_b=trans_b, bias=True, act=act, out=out)
    tol = 2e-3 if out == "float16" else 1e-4
    np.testing.assert_allclose(c.astype("float64"), want, rtol=tol, atol=tol)


def test_tensorcore_gemm_takes_any_epilogue(rng):
    """A fused tail reading another tensor (a residual), as a frontend's fused group would."""
    from ember.codegen_cuda.schedules.matmul_tensorcore import tensorcore_gemm
    from ember.tuner.space import FallbackConfig
    from ember.tuner.template import using_config

    M, N, K = 29, 38, 45
    A = te.placeholder((M, K), "float16", name="A")
    B = te.placeholder((K, N), "float16", name="B")
    R = te.placeholder((M, N), "float32", name="R")
    with using_config(FallbackConfig()):
        s, C = tensorcore_gemm(A, B, lambda acc, idx: acc * 0.5 + R[idx])
    mod = ember.build(s, [A, B, R, C], target="cuda -arch=sm_80")
    a, b = half(rng, (M, K)), half(rng, (K, N))
    r = rng.uniform(-1, 1, (M, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    mod.emulate(a, b, r, c)
    want = 0.5 * (a.astype("f8") @ b.astype("f8")) + r
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "args", "match"),
    [
        (TC, (8, 8, 8, "float32"), "inputs must be one of"),
        (TC, (8, 8, 8, "bfloat16", "float32", False, False, "none", "float16"), "accumulate"),
        (TC, (8, 8, 8, "float16", "float32", False, False, "tanh"), "activation"),
        (TC, (0, 8, 8), "positive"),
        (CTC, (1, 2, 2, 3, 4, 5, 5), "empty"),
        (CTC, (1, 5, 5, 3, 4, 3, 3, 1, -1), "padding"),
    ],
)
def test_bad_arguments_are_argument_errors(name, args, match):
    with pytest.raises(ember.ArgumentError, match=match):
        create_task(name, args=args, target="cuda").instantiate()


def test_matmul_bf16_inputs(rng):
    c, want = run_matmul(rng, 33, 40, 48, dtype="bfloat16", ks=16, stages=2)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_matmul_bf16_in_and_out_with_bias_relu(rng):
    """bf16 results round to 8 significant bits: ``rtol=2**-8``."""
    M, N, K = 37, 53, 29
    mod = build(TC, (M, N, K, "bfloat16", "bfloat16", False, True, "relu"))
    a, b, bias = (half(rng, shape, "bfloat16") for shape in ((M, K), (K, N), (N,)))
    c = np.zeros((M, N), np.uint16)
    mod.emulate(bits(a, "bfloat16"), bits(b, "bfloat16"), bits(bias, "bfloat16"), c)
    got = (c.astype(np.uint32) << 16).view(np.float32)
    want = epilogue(a.astype("f8") @ b.astype("f8"), bias, "relu")
    np.testing.assert_allclose(got, want, rtol=2**-8, atol=1e-6)


def test_matmul_fp16_accumulation(rng):
    K = 40
    c, want = run_matmul(rng, 20, 24, K, out="float16", acc="float16", bm=32, bn=32, wm=16, wn=16)
    np.testing.assert_allclose(c.astype("float64"), want, atol=K * 2**-10)


@pytest.mark.parametrize(
    ("trans_b", "layout", "acc"), [(False, "pad", "float32"), (True, "plain", "float16")]
)
def test_matmul_wmma_route(rng, trans_b, layout, acc):
    c, want = run_matmul(
        rng, 37, 45, 50, trans_b=trans_b, out=acc, acc=acc, route="wmma", layout=layout,
        bm=64, bn=32, wm=32, wn=16, ks=16, stages=2,
    )  # fmt: skip
    np.testing.assert_allclose(c.astype("float64"), want, atol=1e-4 if acc == "float32" else 0.05)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wmma_route_compiles_without_spills(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    mod = build(TC, (4096, 4096, 4096), arch, route="wmma", layout="pad")
    for u in mod.resource_usage().values():
        assert u.registers <= 255 and u.local_bytes == 0 and u.spill_bytes == 0, u


def test_batch_matmul_on_grid_z(rng):
    c, want = run_matmul(rng, 19, 21, 35, batch=3, bm=32, bn=32, wm=16, wn=32, ks=16)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    mod = build(BTC, (3, 19, 21, 35), bm=32, bn=32, wm=16, wn=32, ks=16)
    assert mod.kernels[0].attr("launch")[0][2] == 3


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_nhwc_default_config(rng, stride):
    N, H, W, C, O = 1, 7, 9, 13, 19
    mod = build(CTC, (N, H, W, C, O, 3, 3, stride, 1))
    x, w = half(rng, (N, H, W, C)), half(rng, (9 * C, O))
    want = conv_ref(x, w, 3, 3, stride, 1)
    y = np.full(want.shape, np.nan, "float32")
    mod.emulate(x, w, y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_conv2d_nhwc_bias_relu_fp16_out(rng):
    N, H, W, C, O = 2, 5, 6, 16, 24
    args = (N, H, W, C, O, 3, 3, 1, 1, 1, "float16", "float16", True, "relu")
    mod = build(CTC, args, bm=32, bn=32, wm=16, wn=16, ks=16)
    x, w, bias = half(rng, (N, H, W, C)), half(rng, (9 * C, O)), half(rng, (O,))
    want = epilogue(conv_ref(x, w, 3, 3, 1, 1), bias, "relu")
    y = np.full(want.shape, np.nan, "float16")
    mod.emulate(x, w, bias, y)
    np.testing.assert_allclose(y.astype("float64"), want, rtol=2e-3, atol=2e-3)
    # channels in runs of 8: the im2col tile is fetched by 16-byte zero-filling cp.async
    assert "cp_async_zfill_16(&AP" in mod.get_source()


def test_ldmatrix_conflict_free_at_default_config(rng):
    """Swizzled (the default) and padded tiles: no ldmatrix bank conflict; plain ones
    conflict (so the count can fail)."""
    a, b = half(rng, (128, 64)), half(rng, (64, 128))
    conflicts = {}
    for layout in ("swizzle", "pad", "plain"):
        mod = build(TC, (128, 128, 64), layout=layout)
        c = np.zeros((128, 128), "float32")
        (prof,) = mod.emulate(a, b, c, profile=True)
        conflicts[layout] = prof.ldmatrix_bank_conflicts
        np.testing.assert_allclose(c, a.astype("f8") @ b.astype("f8"), rtol=1e-4, atol=1e-4)
    assert conflicts["swizzle"] == conflicts["pad"] == 0 < conflicts["plain"], conflicts
    src = build(TC, (128, 128, 64)).get_source()
    assert "^" in src and "ldmatrix" in src and "mma.sync.aligned.m16n8k16" in src


def test_missing_barrier_after_the_cp_async_wait_is_a_race(rng):
    """Mutation: the pipeline's barrier between a K step's cp.async wait and its ldmatrix
    reads removed; the emulator reports ldmatrix reading a tile that has not landed for
    every thread (test_barrier_mutation.py drops each barrier in turn)."""
    import dataclasses

    from tests.codegen_cuda.test_cuda_build import _DropBarrier

    mod = build(TC, (64, 64, 96))
    program = mod.program
    (kernel,) = program.kernels
    assert "cp_async" in mod.get_source() and repr(kernel).count("barrier(") == 2
    a, b = half(rng, (64, 96)), half(rng, (96, 64))
    mod.emulate(a, b, np.zeros((64, 64), "float32"))
    mod.program = dataclasses.replace(program, kernels=(_DropBarrier(0).visit_func(kernel),))
    with pytest.raises(ember.RaceError, match="ldmatrix"):
        mod.emulate(a, b, np.zeros((64, 64), "float32"))


@pytest.mark.parametrize("side", ["store", "load"])
def test_swizzle_on_one_side_only_gives_a_wrong_result(rng, monkeypatch, side):
    """Mutation: the XOR layout applied to the tile's writes only, or its ldmatrix reads."""
    from functools import partial

    from ember.codegen_cuda import pipeline
    from ember.codegen_cuda.transform.swizzle_shared import swizzle_shared

    monkeypatch.setattr(pipeline, "swizzle_shared", partial(swizzle_shared, sides=(side,)))
    c, want = run_matmul(rng, 64, 64, 64, bm=64, bn=64, wm=32, wn=32, ks=32, layout="swizzle")
    assert not np.allclose(c, want, rtol=1e-2, atol=1e-2)
    monkeypatch.undo()
    c, want = run_matmul(rng, 64, 64, 64, bm=64, bn=64, wm=32, wn=32, ks=32, layout="swizzle")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_wrong_lane_mapping_gives_a_wrong_result(rng, monkeypatch):
    """Mutation: the accumulator store with two lanes' rows exchanged (g <-> g ^ 1)."""
    from ember.codegen_cuda.schedules import tensorcore_intrin as ti

    real = ti.tc.lane_coords

    def swapped(spec, operand, lane, reg):  # noqa: ANN001, ANN202
        row, col = real(spec, operand, lane, reg)
        return row + 1 - 2 * (lane // 4 % 2), col

    monkeypatch.setattr(ti.tc, "lane_coords", swapped)
    c, want = run_matmul(rng, 32, 32, 16, bm=32, bn=32, wm=32, wn=32, ks=16)
    assert not np.allclose(c, want, rtol=1e-2, atol=1e-2)


def test_verify_gpu_rejects_too_much_shared_memory_before_compiling():
    with pytest.raises(ember.LoweringError, match="shared memory"):
        build(TC, (256, 256, 256), bm=128, bn=128, wm=64, wn=64, ks=64, stages=4)


@pytest.mark.parametrize(("route", "layout"), [("mma", "swizzle"), ("wmma", "pad")])
def test_verify_gpu_rejects_an_architecture_without_the_instructions(route, layout):
    """mma.sync m16n8k16 needs sm_80 (ptxas would fail late); wmma works from sm_70."""
    knobs = dict(bm=32, bn=32, wm=16, wn=16, ks=16, route=route, layout=layout)
    with pytest.raises(
        ember.LoweringError, match="needs sm_80" if route == "mma" else "needs sm_70"
    ):
        build(TC, (32, 32, 32), "sm_75" if route == "mma" else "sm_60", **knobs)


@pytest.mark.parametrize(
    ("name", "args"),
    [(TC, (4096, 4096, 4096)), (BTC, (8, 512, 512, 512)), (CTC, (8, 56, 56, 64, 64, 3, 3, 1, 1))],
)
@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_default_configs_compile_without_spills(name, args, arch):
    sample_in_ci(name, args, arch)
    pytest.importorskip("cuda.bindings.nvrtc")
    mod = build(name, args, arch)
    usage = mod.resource_usage()
    assert usage
    for u in usage.values():
        assert u.registers <= 255 and u.local_bytes == 0 and u.spill_bytes == 0, u


# -- property: shapes and configs drawn from each template's space ------------------------------
SHAPES = {
    TC: st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(1, 48)),
    BTC: st.tuples(st.integers(1, 2), st.integers(1, 24), st.integers(1, 24), st.integers(1, 40)),
    CTC: st.tuples(
        st.integers(1, 2),
        st.integers(3, 6),
        st.integers(3, 6),
        st.integers(1, 12),
        st.integers(1, 20),
        st.sampled_from([1, 3]),
        st.sampled_from([1, 3]),
        st.sampled_from([1, 2]),
        st.sampled_from([0, 1]),
    ),  # fmt: skip
}
# small block tiles keep the emulation short
SMALL = {"bm": (32, 64), "bn": (32, 64), "ks": (16, 32)}


def _inputs(rng, name, args):  # noqa: ANN001, ANN202
    if name == CTC:
        N, H, W, C, O, KH, KW, stride, pad = args
        x, w = half(rng, (N, H, W, C)), half(rng, (KH * KW * C, O))
        return [x, w], conv_ref(x, w, KH, KW, stride, pad)
    lead = args[:-3]
    M, N, K = args[-3:]
    a, b = half(rng, (*lead, M, K)), half(rng, (*lead, K, N))
    return [a, b], np.matmul(a.astype("f8"), b.astype("f8"))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_tensorcore_template_property(name):
    @settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck))
    @given(args=SHAPES[name], data=st.data(), arch=st.sampled_from(["sm_80", "sm_90"]))
    def run(args, data, arch):
        if name == CTC:
            N, H, W, C, O, KH, KW, stride, pad = args
            assume(min(H, W) + 2 * pad >= max(KH, KW))
        task = create_task(name, args=args, target=f"cuda -arch={arch}")
        space = task.config_space
        choices = {
            k: data.draw(st.sampled_from(
                [i for i, c in enumerate(knob.candidates) if k not in SMALL or c in SMALL[k]]
            ), label=k)
            for k, knob in space.knobs.items()
        }  # fmt: skip
        config = space.from_choices(choices)
        assume(space.is_valid(config))
        s, tensors = task.instantiate(config)
        mod = ember.build(s, tensors, target=f"cuda -arch={arch}")
        rng = np.random.default_rng(sum(args))
        inputs, want = _inputs(rng, name, args)
        out = np.full(want.shape, np.nan, "float32")
        mod.emulate(*inputs, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(config))

    run()
