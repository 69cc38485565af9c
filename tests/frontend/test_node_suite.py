"""ONNX's backend node tests, every case, compiled for llvm with every input fed at run time.

New converters bring their cases in automatically; a case that should not pass yet
fails here with a named reason, never silently: one of ``EXPECTED_FAILURES`` (a
converted op in a form Ember does not take) or, for a case using an op Ember has no
converter for, that op's entry in ``UNCONVERTED`` (a test below requires every such op to
have one). An expected failure must still fail cleanly (refused, never a wrong result),
and one that passes must leave its list.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from ember.frontend.testing.node_suite import list_cases, node_test_root, run_case  # noqa: E402
from tests.nightly import NIGHTLY

_STRINGS = "string tensors are not supported"
_SEQUENCES = "sequence-typed values are not supported"
_OPTIONALS = "optional-typed values are not supported"
_RANDOM = "draws random numbers: no compiled model reproduces the reference's draws"
UNCONVERTED = {
    "Bernoulli": _RANDOM,
    "RandomUniformLike": _RANDOM,
    "DeformConv": "deformable convolution is not implemented yet",
    "ImageDecoder": "decoding JPEG/PNG bytes is not a tensor computation Ember compiles",
    "OptionalGetElement": _OPTIONALS,
    "OptionalHasElement": _OPTIONALS,
    "SequenceEmpty": _SEQUENCES,
    "SequenceInsert": _SEQUENCES,
    "SequenceLength": _SEQUENCES,
    "SequenceMap": _SEQUENCES,
    "SplitToSequence": _SEQUENCES,
    "RegexFullMatch": _STRINGS,
    "StringConcat": _STRINGS,
    "StringNormalizer": _STRINGS,
    "StringSplit": _STRINGS,
    "LabelEncoder": _STRINGS + " (and ai.onnx.ml is converted only in part)",
    "ArrayFeatureExtractor": "ai.onnx.ml feature extraction is not implemented yet",
    "TreeEnsemble": "ai.onnx.ml tree ensembles are not implemented yet",
}

EXPECTED_FAILURES = {
    "test_dequantizelinear_e4m3fn": "float8 types are not supported",
    "test_dequantizelinear_e4m3fn_float16": "float8 types are not supported",
    "test_dequantizelinear_e4m3fn_zero_point": "float8 types are not supported",
    "test_dequantizelinear_e5m2": "float8 types are not supported",
    "test_dequantizelinear_float4e2m1": "float4 types are not supported",
    "test_dequantizelinear_int2": "4-bit and 2-bit integer types are not supported",
    "test_dequantizelinear_int4": "4-bit and 2-bit integer types are not supported",
    "test_dequantizelinear_uint2": "4-bit and 2-bit integer types are not supported",
    "test_dequantizelinear_uint4": "4-bit and 2-bit integer types are not supported",
    "test_cast_BFLOAT16_to_FLOAT": "bfloat16 inputs and outputs are not supported",
    "test_cast_FLOAT16_to_FLOAT4E2M1": "float4 types are not supported",
    "test_cast_FLOAT16_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_cast_FLOAT16_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_cast_FLOAT16_to_FLOAT8E5M2": "float8 is not supported",
    "test_cast_FLOAT16_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_cast_FLOAT16_to_INT2": "int4/int2 types are not supported",
    "test_cast_FLOAT16_to_INT4": "int4/int2 types are not supported",
    "test_cast_FLOAT16_to_UINT2": "int4/int2 types are not supported",
    "test_cast_FLOAT16_to_UINT4": "int4/int2 types are not supported",
    "test_cast_FLOAT4E2M1_to_FLOAT": "float4 types are not supported",
    "test_cast_FLOAT4E2M1_to_FLOAT16": "float4 types are not supported",
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT": "float8 is not supported",
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT16": "float8 is not supported",
    "test_cast_FLOAT8E4M3FN_to_FLOAT": "float8 is not supported",
    "test_cast_FLOAT8E4M3FN_to_FLOAT16": "float8 is not supported",
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT": "float8 is not supported",
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT16": "float8 is not supported",
    "test_cast_FLOAT8E5M2_to_FLOAT": "float8 is not supported",
    "test_cast_FLOAT8E5M2_to_FLOAT16": "float8 is not supported",
    "test_cast_FLOAT_to_FLOAT4E2M1": "float4 types are not supported",
    "test_cast_FLOAT_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_cast_FLOAT_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_cast_FLOAT_to_FLOAT8E5M2": "float8 is not supported",
    "test_cast_FLOAT_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_cast_FLOAT_to_INT2": "int4/int2 types are not supported",
    "test_cast_FLOAT_to_INT4": "int4/int2 types are not supported",
    "test_cast_FLOAT_to_UINT2": "int4/int2 types are not supported",
    "test_cast_FLOAT_to_UINT4": "int4/int2 types are not supported",
    "test_cast_INT2_to_FLOAT": "int4/int2 types are not supported",
    "test_cast_INT2_to_FLOAT16": "int4/int2 types are not supported",
    "test_cast_INT2_to_INT8": "int4/int2 types are not supported",
    "test_cast_INT4_to_FLOAT": "int4/int2 types are not supported",
    "test_cast_INT4_to_FLOAT16": "int4/int2 types are not supported",
    "test_cast_INT4_to_INT8": "int4/int2 types are not supported",
    "test_cast_UINT2_to_FLOAT": "int4/int2 types are not supported",
    "test_cast_UINT2_to_FLOAT16": "int4/int2 types are not supported",
    "test_cast_UINT2_to_UINT8": "int4/int2 types are not supported",
    "test_cast_UINT4_to_FLOAT": "int4/int2 types are not supported",
    "test_cast_UINT4_to_FLOAT16": "int4/int2 types are not supported",
    "test_cast_UINT4_to_UINT8": "int4/int2 types are not supported",
    "test_cast_e8m0_FLOAT16_to_FLOAT8E8M0": "float8 is not supported",
    "test_cast_e8m0_FLOAT8E8M0_to_FLOAT": "float8 is not supported",
    "test_cast_e8m0_FLOAT8E8M0_to_FLOAT16": "float8 is not supported",
    "test_cast_e8m0_FLOAT_to_FLOAT8E8M0": "float8 is not supported",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2": "float8 is not supported",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2": "float8 is not supported",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_castlike_BFLOAT16_to_FLOAT": "bfloat16 inputs and outputs are not supported",
    "test_castlike_BFLOAT16_to_FLOAT_expanded": "bfloat16 inputs and outputs are not supported",
    "test_castlike_FLOAT16_to_FLOAT4E2M1": "float4 types are not supported",
    "test_castlike_FLOAT16_to_FLOAT4E2M1_expanded": "float4 types are not supported",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E5M2": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded": "float8 is not supported",
    "test_castlike_FLOAT16_to_FLOAT8E5M2_expanded": "float8 is not supported",
    "test_castlike_FLOAT16_to_INT2": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_INT2_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_INT4": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_INT4_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_UINT2": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_UINT2_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_UINT4": "int4/int2 types are not supported",
    "test_castlike_FLOAT16_to_UINT4_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT4E2M1_to_FLOAT": "float4 types are not supported",
    "test_castlike_FLOAT4E2M1_to_FLOAT16": "float4 types are not supported",
    "test_castlike_FLOAT4E2M1_to_FLOAT16_expanded": "float4 types are not supported",
    "test_castlike_FLOAT4E2M1_to_FLOAT_expanded": "float4 types are not supported",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT16": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT": "float8 is not supported",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16": "float8 is not supported",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E5M2_to_FLOAT": "float8 is not supported",
    "test_castlike_FLOAT8E5M2_to_FLOAT16": "float8 is not supported",
    "test_castlike_FLOAT8E5M2_to_FLOAT16_expanded": "float8 is not supported",
    "test_castlike_FLOAT8E5M2_to_FLOAT_expanded": "float8 is not supported",
    "test_castlike_FLOAT_to_BFLOAT16": "bfloat16 inputs and outputs are not supported",
    "test_castlike_FLOAT_to_BFLOAT16_expanded": "bfloat16 inputs and outputs are not supported",
    "test_castlike_FLOAT_to_FLOAT4E2M1": "float4 types are not supported",
    "test_castlike_FLOAT_to_FLOAT4E2M1_expanded": "float4 types are not supported",
    "test_castlike_FLOAT_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E5M2": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded": "float8 is not supported",
    "test_castlike_FLOAT_to_FLOAT8E5M2_expanded": "float8 is not supported",
    "test_castlike_FLOAT_to_INT2": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_INT2_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_INT4": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_INT4_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_UINT2": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_UINT2_expanded": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_UINT4": "int4/int2 types are not supported",
    "test_castlike_FLOAT_to_UINT4_expanded": "int4/int2 types are not supported",
    "test_castlike_INT2_to_FLOAT": "int4/int2 types are not supported",
    "test_castlike_INT2_to_FLOAT16": "int4/int2 types are not supported",
    "test_castlike_INT2_to_FLOAT16_expanded": "int4/int2 types are not supported",
    "test_castlike_INT2_to_FLOAT_expanded": "int4/int2 types are not supported",
    "test_castlike_INT2_to_INT8": "int4/int2 types are not supported",
    "test_castlike_INT2_to_INT8_expanded": "int4/int2 types are not supported",
    "test_castlike_INT4_to_FLOAT": "int4/int2 types are not supported",
    "test_castlike_INT4_to_FLOAT16": "int4/int2 types are not supported",
    "test_castlike_INT4_to_FLOAT16_expanded": "int4/int2 types are not supported",
    "test_castlike_INT4_to_FLOAT_expanded": "int4/int2 types are not supported",
    "test_castlike_INT4_to_INT8": "int4/int2 types are not supported",
    "test_castlike_INT4_to_INT8_expanded": "int4/int2 types are not supported",
    "test_castlike_UINT2_to_FLOAT": "int4/int2 types are not supported",
    "test_castlike_UINT2_to_FLOAT16": "int4/int2 types are not supported",
    "test_castlike_UINT2_to_FLOAT16_expanded": "int4/int2 types are not supported",
    "test_castlike_UINT2_to_FLOAT_expanded": "int4/int2 types are not supported",
    "test_castlike_UINT2_to_UINT8": "int4/int2 types are not supported",
    "test_castlike_UINT2_to_UINT8_expanded": "int4/int2 types are not supported",
    "test_castlike_UINT4_to_FLOAT": "int4/int2 types are not supported",
    "test_castlike_UINT4_to_FLOAT16": "int4/int2 types are not supported",
    "test_castlike_UINT4_to_FLOAT16_expanded": "int4/int2 types are not supported",
    "test_castlike_UINT4_to_FLOAT_expanded": "int4/int2 types are not supported",
    "test_castlike_UINT4_to_UINT8": "int4/int2 types are not supported",
    "test_castlike_UINT4_to_UINT8_expanded": "int4/int2 types are not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded": "float8 is not supported",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded": "float8 is not supported",
    "test_equal_string": "string tensors are not supported",
    "test_equal_string_broadcast": "string tensors are not supported",
    "test_identity_opt": "optional-typed inputs are not supported",
    "test_identity_sequence": "sequence-typed inputs are not supported",
    "test_quantizelinear_e4m3fn": "float8 types are not supported",
    "test_quantizelinear_e5m2": "float8 types are not supported",
    "test_quantizelinear_float4e2m1": "float4 types are not supported",
    "test_quantizelinear_int2": "4-bit and 2-bit integer types are not supported",
    "test_quantizelinear_int4": "4-bit and 2-bit integer types are not supported",
    "test_quantizelinear_uint2": "4-bit and 2-bit integer types are not supported",
    "test_quantizelinear_uint4": "4-bit and 2-bit integer types are not supported",
    "test_if_opt": "optional-typed If outputs are not supported",
    "test_if_seq": "sequence-typed If outputs are not supported",
    "test_loop11": "the Loop body uses Slice (no converter on branch opsrnn), with starts "
    "computed from the iteration number at run time",
    "test_loop13_seq": "sequence-typed Loop values are not supported",
    "test_loop16_seq_none": "optional- and sequence-typed Loop values are not supported",
    "test_range_bfloat16_type_positive_delta": "bfloat16 is not supported",
    "test_range_bfloat16_type_positive_delta_expanded": "bfloat16 is not supported",
    "test_resize_downsample_scales_cubic_antialias": "Resize antialias=1 is not supported",
    "test_resize_downsample_scales_linear_antialias": "Resize antialias=1 is not supported",
    "test_resize_downsample_sizes_cubic_antialias": "Resize antialias=1 is not supported",
    "test_resize_downsample_sizes_linear_antialias": "Resize antialias=1 is not supported",
    "test_training_dropout": "run-time training_mode: inference only",
    "test_training_dropout_default": "run-time training_mode: inference only",
    "test_training_dropout_default_mask": "run-time training_mode: inference only",
    "test_training_dropout_mask": "run-time training_mode: inference only",
}


def _unconverted(name: str) -> list[str]:
    import onnx

    from ember.frontend.onnx_import import supported_op_types

    model = onnx.load(str(node_test_root() / name / "model.onnx"), load_external_data=False)
    ops = set(supported_op_types())
    return sorted({n.op_type for n in model.graph.node} - ops)


CASES = list_cases()
UNCONVERTED_CASES = {name: ops for name in CASES if (ops := _unconverted(name))}


def _expected_failure(case: str) -> str | None:
    if case in EXPECTED_FAILURES:
        return EXPECTED_FAILURES[case]
    ops = UNCONVERTED_CASES.get(case)
    if ops:
        return "; ".join(f"{op}: {UNCONVERTED.get(op, 'no reason named')}" for op in ops)
    return None


def test_the_suite_finds_cases():
    assert len(CASES) > 1500
    assert not set(EXPECTED_FAILURES) - set(CASES), "an expected failure names no case"
    assert not set(EXPECTED_FAILURES) & set(UNCONVERTED_CASES), "listed twice"


def test_every_unconverted_op_has_a_reason():
    ops = {op for found in UNCONVERTED_CASES.values() for op in found}
    assert ops <= set(UNCONVERTED), f"name a reason for {sorted(ops - set(UNCONVERTED))}"
    assert set(UNCONVERTED) <= ops, f"converted now: {sorted(set(UNCONVERTED) - ops)}"


def _check(case: str, target: str) -> None:
    result = run_case(case, target=target)
    reason = _expected_failure(case)
    if reason is not None:
        assert result.status != "pass", f"{case} passes now: remove it from its list"
        assert result.status != "mismatch", f"{case} gives wrong numbers: {result.detail}"
        pytest.xfail(reason)
    assert result.status == "pass", f"{result.status}: {result.detail}"


@pytest.mark.parametrize("case", CASES)
def test_node_case(case: str) -> None:
    _check(case, "llvm")


# every fifth converted case in CI, every case nightly: the CPU run above covers each
# op's numbers; this one covers the generic CUDA schedule, whose emulation fills CI's
# minutes
CUDA_CASES = [c for c in CASES if c not in UNCONVERTED_CASES]
CUDA_CASES = CUDA_CASES if NIGHTLY else CUDA_CASES[::5]


@pytest.mark.nvrtc
@pytest.mark.parametrize("case", CUDA_CASES)
def test_node_case_cuda_emulated(case: str, monkeypatch) -> None:
    """The same cases for target="cuda" (generic thread-binding schedule), in the emulator."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    _check(case, "cuda")
