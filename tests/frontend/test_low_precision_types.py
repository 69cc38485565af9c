"""Graph element types narrower than the kernels' own: float8 (e4m3fn, e4m3fnuz, e5m2,
e5m2fnuz, e8m0), float4 e2m1, int4/uint4, int2/uint2, and bfloat16 at a model's edge.

Cast, CastLike, QuantizeLinear and DequantizeLinear are checked bit for bit against
independent references: ml_dtypes' own conversions (ONNX's reference Cast is
``np.clip`` to the finite range then ml_dtypes' ``astype`` for a saturating float8
cast, ``astype`` alone otherwise), ``onnx.numpy_helper.to_float8e8m0`` for e8m0, and
onnx's ReferenceEvaluator for the quantization ops. The data holds NaN (with payloads
and both signs), infinities, signed zeros, float32 subnormals, values far out of range,
every float16, and each format's rounding ties with their neighbours.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ember  # noqa: E402
from ember.frontend import narrow_dtypes as nd  # noqa: E402
from ember.tir.topi.minifloat import MINIFLOATS, STORED_AS, TINY_INTS  # noqa: E402
from tests.nightly import examples, nightly_param  # noqa: E402

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
INTS = ["int4", "uint4", "int2", "uint2"]
ROUND_MODES = ["up", "down", "nearest"]


def _code(dtype: Any) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _model(nodes: list[Any], inputs: dict[str, Any], outputs: dict[str, Any], inits=()) -> Any:
    """A model of ``nodes``; ``inputs``/``outputs`` map names to (numpy dtype, shape)."""

    def infos(spec: dict[str, Any]) -> list[Any]:
        return [helper.make_tensor_value_info(n, _code(d), s) for n, (d, s) in spec.items()]

    graph = helper.make_graph(
        nodes, "g", infos(inputs), infos(outputs), [numpy_helper.from_array(a, n) for n, a in inits]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


def _grid_data(name: str) -> np.ndarray:
    """Every finite value of ``name``, the midpoints between neighbours (the ties), the
    float32 values either side of each, and the same negated."""
    t = getattr(ml_dtypes, name)
    width = MINIFLOATS[name].width if name in MINIFLOATS else 8
    values = np.arange(1 << width, dtype=np.uint8).view(t).astype(np.float64)
    values = np.unique(values[np.isfinite(values) & (values >= 0)])
    mids = (values[:-1] + values[1:]) / 2
    past = values[-1] + (values[-1] - values[-2]) / 2  # the tie just past the largest value
    ties = np.concatenate([mids, [past, 2 * values[-1]]]).astype(np.float32)
    near = [np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))]
    pos = np.concatenate([values.astype(np.float32), ties, *near])
    return np.concatenate([pos, -pos])


SPECIALS = np.concatenate(
    [
        np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FFFFFFF], np.uint32).view(
            np.float32
        ),
        np.array(
            [np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1.1754942e-38, 3.4028235e38],
            np.float32,
        ),
        np.array([1e6, -1e6, 1e-7, -1e-7, 65504, -65504, 1e30, -1e-30], np.float32),
    ]
)


def _float32_data(name: str) -> np.ndarray:
    rng = np.random.default_rng(len(name))
    scaled = rng.standard_normal(2000) * np.exp2(rng.uniform(-30, 20, 2000))
    return np.concatenate([SPECIALS, _grid_data(name), scaled.astype(np.float32)])


ALL_FLOAT16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


def _reference_cast(x: np.ndarray, name: str, saturate: bool) -> np.ndarray:
    """ONNX's reference Cast: clip to the finite range first when saturating to float8."""
    t = getattr(ml_dtypes, name)
    with np.errstate(all="ignore"):
        if saturate and name in FLOAT8:
            info = ml_dtypes.finfo(t)
            x = np.clip(x, info.min, info.max)
        return x.astype(t)


def _assert_bits(got: np.ndarray, want: np.ndarray, what: str, inputs: np.ndarray) -> None:
    assert got.dtype == want.dtype, what
    bad = np.nonzero(_bits(got).ravel() != _bits(want).ravel())[0]
    assert bad.size == 0, (
        f"{what}: {bad.size} differ, e.g. x={inputs.ravel()[bad[:5]]!r} got "
        f"{_bits(got).ravel()[bad[:5]]} want {_bits(want).ravel()[bad[:5]]}"
    )


# the fnuz formats nightly: their node-suite cases and the random-bits test run in CI
@pytest.mark.parametrize(
    "name", [nightly_param(n) if n.endswith("fnuz") else n for n in [*FLOAT8, "float4_e2m1fn"]]
)
def test_cast_to_minifloat_rounds_as_the_reference(name):
    """From float32, every float16 and float64, saturating and not (float4 always saturates)."""
    x32 = _float32_data(name)
    x64 = np.concatenate([x32.astype(np.float64), [1e300, -1e-300, 5e-324, 1 + 2.0**-40]])
    sources = {"x32": x32, "x16": ALL_FLOAT16, "x64": x64}
    code = _code(getattr(ml_dtypes, name))
    saturates = (1, 0) if name in FLOAT8 else (1,)
    nodes, outs, wants = [], {}, []
    for src, x in sources.items():
        for sat in saturates[1:] if src == "x64" else saturates:
            out = f"{src}_sat{sat}"
            nodes.append(helper.make_node("Cast", [src], [out], to=code, saturate=sat))
            outs[out] = (getattr(ml_dtypes, name), list(x.shape))
            wants.append((out, x, _reference_cast(x, name, bool(sat))))
    model = _model(nodes, {k: (v.dtype, list(v.shape)) for k, v in sources.items()}, outs)
    got = ember.compile(model, target="llvm").run(sources)
    for g, (out, x, want) in zip(got, wants):
        _assert_bits(g, want, f"{name} {out}", x)


def test_cast_to_e8m0_follows_the_reference_round_modes():
    """Cast to float8e8m0 with each round_mode, saturating or not, from float32 and float16,
    against ``onnx.numpy_helper.to_float8e8m0`` (the reference Cast's own)."""
    x32 = np.concatenate([_float32_data("float8_e8m0fnu"), np.exp2(np.arange(-149, 128.0))])
    x32 = np.concatenate([x32, x32 * np.float32(1.5), x32 * np.float32(1.25)]).astype(np.float32)
    sources = {"x32": x32, "x16": ALL_FLOAT16}
    code = TensorProto.FLOAT8E8M0
    nodes, outs, wants = [], {}, []
    for src, x in sources.items():
        for mode in ROUND_MODES:
            for sat in (1, 0):
                out = f"{src}_{mode}_{sat}"
                nodes.append(
                    helper.make_node("Cast", [src], [out], to=code, saturate=sat, round_mode=mode)
                )
                outs[out] = (ml_dtypes.float8_e8m0fnu, list(x.shape))
                wants.append((out, x, numpy_helper.to_float8e8m0(x, bool(sat), mode)))
    model = _model(nodes, {k: (v.dtype, list(v.shape)) for k, v in sources.items()}, outs)
    got = ember.compile(model, target="llvm").run(sources)
    for g, (out, x, want) in zip(got, wants):
        _assert_bits(g, want, out, x)


def test_every_minifloat_bit_pattern_widens_exactly():
    """Every byte of every float8 and float4 type, Cast to float32, float16, float64 and
    bfloat16: ml_dtypes' values, NaNs of the same sign (but for bfloat16: LLVM code rounds
    every NaN to +NaN, ``codegen_llvm/casts.py``)."""
    sources = {}
    for name in MINIFLOATS:
        width = MINIFLOATS[name].width
        sources[name] = np.arange(1 << width, dtype=np.uint8).view(getattr(ml_dtypes, name))
    targets = [np.float32, np.float16, np.float64, ml_dtypes.bfloat16]
    nodes, outs, wants = [], {}, []
    for name, x in sources.items():
        for t in targets:
            out = f"{name}_{np.dtype(t).name}"
            nodes.append(helper.make_node("Cast", [name], [out], to=_code(t)))
            outs[out] = (t, list(x.shape))
            wants.append((out, x, x.astype(t)))
    model = _model(nodes, {k: (v.dtype, list(v.shape)) for k, v in sources.items()}, outs)
    got = ember.compile(model, target="llvm").run(sources)
    for g, (out, x, want) in zip(got, wants):
        nan = np.isnan(want.astype(np.float64))
        assert np.array_equal(np.isnan(g.astype(np.float64)), nan), out
        signed = ~nan if g.dtype == ml_dtypes.bfloat16 else slice(None)
        sign = [np.signbit(a.astype(np.float64))[signed] for a in (g, want)]
        assert np.array_equal(*sign), out
        _assert_bits(g[~nan], want[~nan], out, x[~nan])


def _wrapped(x: np.ndarray, name: str) -> np.ndarray:
    """Ember's rule for any number as a 4- or 2-bit integer, in plain numpy integer arithmetic:
    truncate a float, keep the low bits, sign-extend a signed type (``tir/topi/minifloat.py``).
    ml_dtypes agrees for integers, and for floats up to 0.6; 0.7 makes a float out of range
    0, where onnxruntime and the ONNX conformance data wrap it (onnxruntime rounds a
    fraction to nearest first)."""
    bits, signed = TINY_INTS[name]  # the types' widths; the arithmetic below is numpy's
    v = (np.trunc(x).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64)) & (
        (1 << bits) - 1
    )
    if signed:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v.astype(np.int8).astype(getattr(ml_dtypes, name))


def test_wrapped_reference_is_ml_dtypes_where_they_agree():
    """The reference below against ml_dtypes: every integer, and every float in range."""
    x = np.concatenate([np.arange(-300, 300), [2**62, -(2**62) - 3]]).astype(np.int64)
    f = np.arange(-8.75, 16, 0.25, dtype=np.float32)
    for name in INTS:
        t = getattr(ml_dtypes, name)
        info = ml_dtypes.iinfo(t)
        inside = f[(np.trunc(f) >= info.min) & (np.trunc(f) <= info.max)]
        for a in (x, inside):
            _assert_bits(_wrapped(a, name), a.astype(t), f"{name} reference", a)


def test_small_integers_wrap_as_the_reference():
    """int4, uint4, int2, uint2 from float32 (truncated, then wrapped), int64 and uint8, and
    back to float32, float16 and int8; the reference is :func:`_wrapped`, since a float out
    of range converts differently in each ml_dtypes version."""
    rng = np.random.default_rng(4)
    xf = np.concatenate([np.arange(-40, 40, 0.25), rng.uniform(-1e6, 1e6, 200)]).astype(np.float32)
    xi = np.concatenate([np.arange(-300, 300), rng.integers(-(2**62), 2**62, 200)]).astype(np.int64)
    xu = np.arange(256, dtype=np.uint8)
    sources = {"xf": xf, "xi": xi, "xu": xu}
    nodes, outs, wants = [], {}, []
    for name in INTS:
        t = getattr(ml_dtypes, name)
        for src, x in sources.items():
            out = f"{src}_{name}"
            nodes.append(helper.make_node("Cast", [src], [out], to=_code(t)))
            outs[out] = (t, list(x.shape))
            wants.append((out, x, _wrapped(x, name)))
            for back in (np.float32, np.float16, np.int8):
                again = f"{out}_{np.dtype(back).name}"
                nodes.append(helper.make_node("Cast", [out], [again], to=_code(back)))
                outs[again] = (back, list(x.shape))
                wants.append((again, x, _wrapped(x, name).astype(back)))
    model = _model(nodes, {k: (v.dtype, list(v.shape)) for k, v in sources.items()}, outs)
    got = ember.compile(model, target="llvm").run(sources)
    for g, (out, x, want) in zip(got, wants):
        _assert_bits(g, want, out, x)


def test_castlike_takes_saturate_and_the_second_inputs_type():
    x = _float32_data("float8_e5m2")
    like = np.zeros(0, ml_dtypes.float8_e5m2)
    node = helper.make_node("CastLike", ["x", "like"], ["y"], saturate=0)
    ins = {"x": (np.float32, list(x.shape)), "like": (ml_dtypes.float8_e5m2, [0])}
    model = _model([node], ins, {"y": (ml_dtypes.float8_e5m2, list(x.shape))})
    (got,) = ember.compile(model, target="llvm").run({"x": x, "like": like})
    _assert_bits(got, _reference_cast(x, "float8_e5m2", False), "castlike", x)


SAT_TARGETS = [(n, s) for n in FLOAT8 for s in (True, False)] + [("float4_e2m1fn", True)]


@pytest.fixture(scope="module")
def bits_model() -> Any:
    """float32 of 64 elements Cast to each float8 type (saturating and not) and float4."""
    nodes, outs = [], {}
    for name, sat in SAT_TARGETS:
        out = f"{name}_{int(sat)}"
        code = _code(getattr(ml_dtypes, name))
        nodes.append(helper.make_node("Cast", ["x"], [out], to=code, saturate=int(sat)))
        outs[out] = (getattr(ml_dtypes, name), [64])
    return ember.compile(_model(nodes, {"x": (np.float32, [64])}, outs), target="llvm")


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=64, max_size=64))
def test_any_float32_bits_round_as_the_reference(bits_model, bits):
    x = np.array(bits, np.uint32).view(np.float32)
    for got, (name, sat) in zip(bits_model.run([x]), SAT_TARGETS):
        _assert_bits(got, _reference_cast(x, name, sat), f"{name} saturate={sat}", x)


def _reference_run(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)


def test_quantize_and_dequantize_match_onnx_reference():
    """Per-tensor, per-axis and blocked scales; float8 saturating and not, float4 with a
    zero point, 4- and 2-bit integers with theirs; the zero points as initializers (held
    in their storage by the model)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 6)) * 40).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    scale_axis = np.array([0.5, 2.0, 3.0, 0.125], np.float32)
    scale_block = np.exp2(rng.integers(-3, 4, (4, 3))).astype(np.float32)
    zp = {
        "float4_e2m1fn": np.array([0, 1.5, -2, 0.5], np.float32).astype(ml_dtypes.float4_e2m1fn),
        "int4": np.array([1, -3, 0, 7], np.int8).astype(ml_dtypes.int4),
        "uint4": np.array([8, 0, 15, 3], np.uint8).astype(ml_dtypes.uint4),
        "int2": np.array([1, -2, 0, -1], np.int8).astype(ml_dtypes.int2),
        "uint2": np.array([3, 0, 1, 2], np.uint8).astype(ml_dtypes.uint2),
        "float8_e4m3fn": np.zeros(4, ml_dtypes.float8_e4m3fn),
        "float8_e5m2fnuz": np.zeros(4, ml_dtypes.float8_e5m2fnuz),
    }
    inits = [("s_axis", scale_axis), ("s_block", scale_block), ("s_one", np.float32(0.75))]
    inits += [("s_axis16", scale_axis.astype(np.float16))]
    inits += [(f"zp_{k}", v) for k, v in zp.items()]
    nodes, outs = [], {}
    for k, name in enumerate(zp):
        q = f"q_{name}"
        sat = k % 2
        nodes.append(
            helper.make_node(
                "QuantizeLinear", ["x", "s_axis", f"zp_{name}"], [q], axis=0, saturate=sat
            )
        )
        outs[q] = (getattr(ml_dtypes, name), [4, 6])
        for scale, out_type in (("s_axis", np.float32), ("s_axis16", np.float16)):
            y = f"dq_{name}_{np.dtype(out_type).name}"
            dq = helper.make_node("DequantizeLinear", [q, scale, f"zp_{name}"], [y], axis=0)
            nodes.append(dq)
            outs[y] = (out_type, [4, 6])
    code = _code(ml_dtypes.float8_e4m3fn)
    nodes.append(
        helper.make_node("QuantizeLinear", ["x", "s_block"], ["qb"], axis=1, block_size=2,
                         output_dtype=code, saturate=0)
    )  # fmt: skip
    nodes.append(helper.make_node("DequantizeLinear", ["qb", "s_one"], ["dqb"]))
    outs.update({"qb": (ml_dtypes.float8_e4m3fn, [4, 6]), "dqb": (np.float32, [4, 6])})
    model = _model(nodes, {"x": (np.float32, [4, 6])}, outs, inits)
    got = ember.compile(model, target="llvm").run({"x": x})
    want = _reference_run(model, {"x": x})
    finite = np.isfinite(x)
    for g, w, out in zip(got, want, outs):
        w = np.asarray(w)
        if "int" in out:  # NaN and infinity to an integer: numpy's undefined cast there
            g, w = g[finite], w[finite]
        _assert_bits(g, w, out, x)


def test_constants_fold_through_the_interpreter_and_compiled_kernels():
    """A Cast and a DequantizeLinear of float8 and int4 initializers fold at import (small:
    interpreted; large: a compiled kernel) to the reference's values."""
    rng = np.random.default_rng(3)
    small = _float32_data("float8_e4m3fn")[:300].astype(ml_dtypes.float8_e4m3fn)
    large = (rng.standard_normal(5000) * 100).astype(ml_dtypes.float8_e5m2)
    ints = rng.integers(-8, 8, 5000).astype(np.int8).astype(ml_dtypes.int4)
    inits = [("a", small), ("b", large), ("c", ints), ("s", np.float32(0.5))]
    nodes = [
        helper.make_node("Cast", ["a"], ["ya"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["b"], ["yb"], to=TensorProto.FLOAT8E4M3FNUZ, saturate=0),
        helper.make_node("DequantizeLinear", ["c", "s"], ["yc"]),
        helper.make_node("Add", ["x", "x"], ["yx"]),
    ]
    outs = {
        "ya": (np.float32, [300]),
        "yb": (ml_dtypes.float8_e4m3fnuz, [5000]),
        "yc": (np.float32, [5000]),
        "yx": (np.float32, [1]),
    }
    model = _model(nodes, {"x": (np.float32, [1])}, outs, inits)
    compiled = ember.compile(model, target="llvm")
    assert [n.op for n in compiled.graph.nodes] == ["add"]  # the rest are params
    ya, yb, yc, _ = compiled.run({"x": np.ones(1, np.float32)})
    _assert_bits(ya, small.astype(np.float32), "ya", small)
    _assert_bits(yb, large.astype(ml_dtypes.float8_e4m3fnuz), "yb", large)
    _assert_bits(yc, ints.astype(np.float32) * np.float32(0.5), "yc", ints)


def test_narrow_inputs_are_checked_by_name():
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)
    model = _model([node], {"x": (ml_dtypes.float8_e4m3fn, [3])}, {"y": (np.float32, [3])})
    compiled = ember.compile(model, target="llvm")
    good = np.array([1, -2, 448], np.float32).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(compiled.run([good])[0], [1, -2, 448])
    for bad in (good.view(np.uint8), good.astype(np.float32), good.astype(ml_dtypes.float8_e5m2)):
        with pytest.raises(ember.ArgumentError, match=r"input 'x' must be float8_e4m3fn, got"):
            compiled.run([bad])


def test_arithmetic_on_a_byte_held_type_is_refused():
    node = helper.make_node("Add", ["x", "x"], ["y"])
    t = (ml_dtypes.float8_e4m3fn, [3])
    with pytest.raises(ember.UnsupportedOperatorError, match=r"'add' on float8_e4m3fn"):
        ember.compile(_model([node], {"x": t}, {"y": t}), target="llvm")


def test_control_flow_and_symbolic_sizes_keep_narrow_values():
    """An If branch and a Loop body take and give float8 and bfloat16 values (the executor
    holds their storage, a body is run as a model of its own); a symbolic size compiles
    per size."""
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, ["n"])
    then = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["t"], to=TensorProto.FLOAT8E5M2)],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT8E5M2, ["n"])],
    )
    other = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["e"], to=TensorProto.FLOAT8E5M2, saturate=0)],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT8E5M2, ["n"])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Add", ["v", "v"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", TensorProto.BFLOAT16, [2]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.BFLOAT16, [2]),
        ],
    )
    w = np.array([0.5, -3, 448, np.nan], np.float32).astype(ml_dtypes.float8_e4m3fn)
    nodes = [
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Loop", ["trip", "", "v0"], ["vf"], body=body),
        helper.make_node("Concat", ["w", "w"], ["ww"], axis=0),
    ]
    ins = [
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        x_info,
        helper.make_tensor_value_info("trip", TensorProto.INT64, []),
        helper.make_tensor_value_info("v0", TensorProto.BFLOAT16, [2]),
    ]
    outs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT8E5M2, ["n"]),
        helper.make_tensor_value_info("vf", TensorProto.BFLOAT16, [2]),
        helper.make_tensor_value_info("ww", TensorProto.FLOAT8E4M3FN, [8]),
    ]
    graph = helper.make_graph(nodes, "g", ins, outs, [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    x = np.array([1.5, -448, np.nan], np.float32).astype(ml_dtypes.float8_e4m3fn)
    v0 = np.array([1.5, 3.0], np.float32).astype(ml_dtypes.bfloat16)
    feeds = {"cond": np.array(False), "x": x, "trip": np.array(3, np.int64), "v0": v0}
    compiled = ember.compile(model, target="llvm")
    want = [
        _reference_cast(x.astype(np.float32), "float8_e5m2", False),  # the else branch
        (v0.astype(np.float32) * 8).astype(ml_dtypes.bfloat16),  # doubled three times
        np.concatenate([w, w]),
    ]
    for g, wnt in zip(compiled.run(feeds), want):
        _assert_bits(g, wnt, "control flow", x)
    x2 = np.array([1, 2, 3, 4, 5], np.float32).astype(ml_dtypes.float8_e4m3fn)
    y2 = compiled.run({**feeds, "x": x2, "cond": np.array(True)})[0]  # another size of n
    _assert_bits(y2, x2.astype(ml_dtypes.float8_e5m2), "n = 5", x2)


def test_narrow_params_inputs_and_outputs_survive_export(tmp_path):
    """A float8 param, a float4 input and an int4 output through a .ember file (params are
    written as their storage, which numpy reads without ml_dtypes)."""
    w = np.array([0.5, -3, 448, np.nan], np.float32).astype(ml_dtypes.float8_e4m3fn)
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT8E4M3FN),
        helper.make_node("Concat", ["xf", "w"], ["y"], axis=0),
        helper.make_node("Cast", ["x"], ["z"], to=TensorProto.INT4),
    ]
    ins = {"x": (ml_dtypes.float4_e2m1fn, [4])}
    outs = {"y": (ml_dtypes.float8_e4m3fn, [8]), "z": (ml_dtypes.int4, [4])}
    compiled = ember.compile(_model(nodes, ins, outs, [("w", w)]), target="llvm")
    path = tmp_path / "m.ember"
    compiled.export(path)
    x = np.array([-6, 0.5, 3, -0.0], np.float32).astype(ml_dtypes.float4_e2m1fn)
    want = [np.concatenate([x.astype(ml_dtypes.float8_e4m3fn), w]), x.astype(ml_dtypes.int4)]
    for model in (compiled, ember.load(path)):
        for g, wnt in zip(model.run([x]), want):
            _assert_bits(g, wnt, "export", x)


def test_the_type_tables_agree_with_ml_dtypes():
    assert set(STORED_AS) == {*MINIFLOATS, *TINY_INTS}
    for name in nd.NARROW_DTYPES:
        t = np.dtype(getattr(ml_dtypes, name))
        assert nd.numpy_dtype(name) == t and str(t) == name
        assert nd.storage_dtype(name).itemsize == t.itemsize
        stored = nd.to_storage(np.zeros(3, t), name)
        assert stored.dtype == nd.storage_dtype(name)
        assert nd.from_storage(stored, name).dtype == t


def _te_cases() -> list[tuple[str, str, np.ndarray]]:
    x32 = SPECIALS.astype(np.float32)
    cases = [("float32", n, x32) for n in [*MINIFLOATS, *TINY_INTS]]
    cases += [("float64", "float8_e5m2fnuz", x32.astype(np.float64))]
    return cases + [(n, "float16", np.arange(256, dtype=np.uint8)) for n in MINIFLOATS]


def _te_cast(src: str, dst: str, x: np.ndarray, target: str) -> np.ndarray:
    """``narrow_cast`` of ``x`` run on ``target`` ("interp", "llvm", "cuda")."""
    from ember import te
    from ember.tir.interp import run
    from ember.tir.topi.minifloat import narrow_cast

    A = te.placeholder(x.shape, dtype=str(x.dtype), name="A")
    B = narrow_cast(A, src, dst, saturate=False, round_mode="nearest")
    s = te.create_schedule(B.op)
    if target == "cuda":
        outer, inner = s[B].split(B.op.axis[0], factor=32)
        s[B].bind(outer, "blockIdx.x")
        s[B].bind(inner, "threadIdx.x")
    out = np.empty(x.shape, nd.storage_dtype(dst))
    if target == "interp":
        run(ember.lower(s, [A, B]), x, out)
    else:
        ember.build(s, [A, B], target=target)(x, out)
    return out


def test_the_interpreter_converts_as_compiled_code():
    """Folding runs conversions on the reference interpreter: the same bits as LLVM."""
    for src, dst, x in _te_cases():
        want = _te_cast(src, dst, x, "llvm")
        np.testing.assert_array_equal(
            _bits(_te_cast(src, dst, x, "interp")), _bits(want), err_msg=f"{src} -> {dst}"
        )


@pytest.mark.nvrtc
def test_conversions_compile_with_nvrtc_and_emulate_as_llvm(monkeypatch):
    """The CUDA C of every conversion compiles (integer bit operations, no float8
    intrinsics), and the emulated kernels give the LLVM ones' bits."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from ember import te
    from ember.codegen_cuda.nvrtc import compile_cuda
    from ember.tir.topi.minifloat import narrow_cast

    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    for src, dst, x in _te_cases():
        got = _te_cast(src, dst, x, "cuda")
        want = _te_cast(src, dst, x, "llvm")
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{src} -> {dst}")
    A = te.placeholder((64,), dtype="float32", name="A")
    B = narrow_cast(A, "float32", "float8_e4m3fn")
    s = te.create_schedule(B.op)
    outer, inner = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(outer, "blockIdx.x")
    s[B].bind(inner, "threadIdx.x")
    source = ember.build(s, [A, B], target="cuda").get_source()
    assert compile_cuda(source, "sm_80").cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", ["int4", "uint4"])
def test_float_to_small_int_wraps_as_onnxruntime(name):
    """A second, independent reference for whole floats out of range: onnxruntime's Cast
    (read back through int8: its Python API returns no 4-bit arrays). onnxruntime rounds a
    fraction to nearest where Ember truncates, so the data is whole numbers."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    x = np.concatenate([np.arange(-40, 40), np.round(rng.uniform(-1e6, 1e6, 100))])
    x = x.astype(np.float32)
    t = getattr(ml_dtypes, name)
    nodes = [
        helper.make_node("Cast", ["x"], ["q"], to=_code(t)),
        helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT8),
    ]
    model = _model(nodes, {"x": (np.float32, list(x.shape))}, {"y": (np.int8, list(x.shape))})
    model.ir_version = 10  # onnxruntime 1.2x reads up to 10 or 11
    model.opset_import[0].version = 21
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    (got,) = ember.compile(model, target="llvm").run({"x": x})
    _assert_bits(got, want, f"{name} via int8", x)
