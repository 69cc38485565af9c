"""fp16 ONNX convolutions compiled for CUDA (sm_80+) take the implicit GEMM on the tensor
cores (the CUDA strategy table's ``conv`` entry, ``tir/topi/conv_gemm.py``):
the GEMM reads the NCHW input as its im2col matrix, the NCHW output and the group's tail
(Relu, residual Add) are a second kernel. Run in the SIMT emulator.

References are computed in float64 from the fp16 inputs; the conv (with its bias) is
rounded to fp16 where ONNX types it so, and so is every later fp16 tensor. Tolerance:
the kernel multiplies fp16 exactly and adds in fp32 (off by at most ``K * 2**-24 *
sum|a*b|``, ``K = 13 * 9 = 117``: below 1e-4 for values below 1), then rounds to fp16;
the fp32 sum may fall on the other side of a rounding boundary: one fp16 ulp
(``2**-11`` relative, values here below 8), and a residual Add rounds once more:
``rtol=atol=4e-3``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.onnx_models import helper, make_model
from tests.nightly import examples

pytestmark = pytest.mark.nvrtc
TOL = {"rtol": 4e-3, "atol": 4e-3}
F16 = np.float16


@pytest.fixture(autouse=True)
def _emulate(monkeypatch):
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")


def _sources(lib) -> dict[str, str]:  # noqa: ANN001
    return {st.kernel.op: st.kernel.module.get_source() for st in lib.steps}


def _conv_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int | tuple = 1,
    pads: int | tuple = 0, dil: tuple = (1, 1),
) -> np.ndarray:  # fmt: skip
    """A float64 NCHW convolution by explicit loops over the taps (independent of Ember);
    ``pads`` is ONNX's (top, left, bottom, right) or one int."""
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    pt, pl, pb, pr = (pads,) * 4 if isinstance(pads, int) else pads
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt : pt + h, pl : pl + wd] = x
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dil[0], j * dil[1]
            patch = xp[:, :, y0 : y0 + sh * oh : sh, x0 : x0 + sw * ow : sw]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


def _block(rng: np.random.Generator, stride: int, dtype: type = F16):  # noqa: ANN202
    """Conv 3x3 pad 1 (13 -> 19 channels, bias) + Relu on a 1x13x7x9 input."""
    x = rng.uniform(-1, 1, (1, 13, 7, 9)).astype(dtype)
    w = rng.uniform(-0.3, 0.3, (19, 13, 3, 3)).astype(dtype)
    b = rng.uniform(-0.5, 0.5, (19,)).astype(dtype)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
          strides=[stride, stride], name="conv"),
        n("Relu", ["c"], ["y"], name="relu"),
    ]  # fmt: skip
    return make_model(nodes, {"x": x}, ["y"], {"w": w, "b": b}), x, w, b


@pytest.mark.parametrize("stride", [1, 2])
def test_fp16_conv_bias_relu_on_the_tensor_cores(rng, stride):
    model, x, w, b = _block(rng, stride)
    lib = ember.compile(model, target="cuda")
    got = lib.run({"x": x})[0]
    want = np.maximum(_conv_ref(x, w, b, stride, 1).astype(F16), 0)
    assert got.dtype == F16 and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), **TOL)
    src = "\n".join(_sources(lib).values())
    assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src


def test_fp16_conv_residual_add(rng):
    """Conv + bias, then Add of the block's own input (19 channels in and out) and Relu."""
    x = rng.uniform(-1, 1, (1, 19, 7, 9)).astype(F16)
    w = rng.uniform(-0.2, 0.2, (19, 19, 3, 3)).astype(F16)
    b = rng.uniform(-0.5, 0.5, (19,)).astype(F16)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
        n("Add", ["c", "x"], ["s"], name="residual"),
        n("Relu", ["s"], ["y"], name="relu"),
    ]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w, "b": b})
    lib = ember.compile(model, target="cuda")
    got = lib.run({"x": x})[0]
    c = _conv_ref(x, w, b, 1, 1).astype(F16)
    want = np.maximum((c.astype("f8") + x.astype("f8")).astype(F16), 0)
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), **TOL)
    assert any("mma.sync" in src for src in _sources(lib).values())


def test_float32_conv_keeps_the_simt_path(rng):
    model, x, w, b = _block(rng, 1, np.float32)
    lib = ember.compile(model, target="cuda")
    got = lib.run({"x": x})[0]
    want = np.maximum(_conv_ref(x, w, b, 1, 1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert not any("mma.sync" in src for src in _sources(lib).values())


@settings(
    max_examples=examples(6),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(1, 2), c=st.integers(1, 9), o=st.integers(1, 21), h=st.integers(3, 7),
    w=st.integers(3, 8), k=st.sampled_from([(1, 1), (3, 3), (2, 3)]),
    stride=st.sampled_from([(1, 1), (2, 1), (2, 2)]),
    pads=st.sampled_from([(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 2, 0)]),
    dil=st.sampled_from([(1, 1), (2, 1)]), bias=st.booleans(), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_fp16_conv_geometries_property(n, c, o, h, w, k, stride, pads, dil, bias, seed):
    """Any 2-D group-1 geometry (batch, odd channels, asymmetric pads, dilation) matches
    the float64 reference rounded to fp16 once, as the lone Conv's output is."""
    if h + pads[0] + pads[2] < dil[0] * (k[0] - 1) + 1 or w + pads[1] + pads[3] < k[1]:
        return  # an empty output: not a convolution ONNX defines
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, c, h, w)).astype(F16)
    wt = rng.uniform(-0.5, 0.5, (o, c, *k)).astype(F16)
    b = rng.uniform(-0.5, 0.5, (o,)).astype(F16) if bias else None
    names = ["x", "w", "b"] if bias else ["x", "w"]
    node = helper.make_node("Conv", names, ["y"], kernel_shape=list(k), pads=list(pads),
                            strides=list(stride), dilations=list(dil), name="conv")  # fmt: skip
    params = {"w": wt, **({"b": b} if bias else {})}
    lib = ember.compile(make_model([node], {"x": x}, ["y"], params), target="cuda")
    got = lib.run({"x": x})[0]
    want = _conv_ref(x, wt, b, stride, pads, dil).astype(F16)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), **TOL)
    assert any("mma.sync" in src for src in _sources(lib).values())


def test_grouped_fp16_conv_keeps_the_simt_path(rng):
    """group 2 is not one GEMM: the generic path (which sums in fp16: ``atol = K * 2**-10``
    for the 3 * 9 = 27 deep sums)."""
    x = rng.uniform(-1, 1, (1, 6, 5, 7)).astype(F16)
    w = rng.uniform(-0.5, 0.5, (4, 3, 3, 3)).astype(F16)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], group=2, name="g")
    lib = ember.compile(make_model([node], {"x": x}, ["y"], {"w": w}), target="cuda")
    got = lib.run({"x": x})[0]
    want = np.concatenate(
        [_conv_ref(x[:, 3 * g : 3 * g + 3], w[2 * g : 2 * g + 2], None) for g in range(2)], 1
    )
    np.testing.assert_allclose(got.astype("f8"), want, rtol=4e-3, atol=27 * 2**-10)
    assert not any("mma.sync" in src for src in _sources(lib).values())


def test_architecture_without_mma_keeps_the_simt_path(rng):
    model, x, w, b = _block(rng, 1)
    lib = ember.compile(model, target="cuda -arch=sm_75")
    assert not any("mma.sync" in src for src in _sources(lib).values())
    got = lib.run({"x": x})[0]
    want = np.maximum(_conv_ref(x, w, b, 1, 1), 0)
    np.testing.assert_allclose(got.astype("f8"), want, rtol=4e-3, atol=117 * 2**-10)
