"""ONNX's backend node tests for every case whose ops Ember converts, compiled for llvm.

New converters bring their cases in automatically; a case that should not pass
yet is listed in ``EXPECTED_FAILURES`` with the reason, never skipped silently.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from ember.frontend.testing.node_suite import list_cases, node_test_root, run_case  # noqa: E402
from tests.nightly import NIGHTLY

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


def _supported_cases() -> list[str]:
    import onnx

    from ember.frontend.onnx_import import supported_op_types

    ops = set(supported_op_types())
    out = []
    for name in list_cases():
        model = onnx.load(str(node_test_root() / name / "model.onnx"), load_external_data=False)
        types = {n.op_type for n in model.graph.node}
        if types and types <= ops:
            out.append(name)
    return out


CASES = _supported_cases()


def test_the_suite_finds_cases():
    assert len(CASES) > 150
    assert not set(EXPECTED_FAILURES) - set(CASES), "an expected failure names no case"


@pytest.mark.parametrize("case", CASES)
def test_node_case(case: str) -> None:
    result = run_case(case)
    if case in EXPECTED_FAILURES:
        assert result.status != "pass", f"{case} passes now: remove it from EXPECTED_FAILURES"
        pytest.xfail(EXPECTED_FAILURES[case])
    assert result.status == "pass", f"{result.status}: {result.detail}"


CUDA_EXPECTED_FAILURES = {
    **EXPECTED_FAILURES,
}


# every other case in CI, every case nightly: the CPU run above covers each op's numbers;
# this one covers the generic CUDA schedule, whose emulation fills CI's minutes
CUDA_CASES = CASES if NIGHTLY else CASES[::2]


@pytest.mark.nvrtc
@pytest.mark.parametrize("case", CUDA_CASES)
def test_node_case_cuda_emulated(case: str, monkeypatch) -> None:
    """The same cases for target="cuda" (generic thread-binding schedule), in the emulator."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    result = run_case(case, target="cuda")
    if case in CUDA_EXPECTED_FAILURES:
        assert result.status != "pass", f"{case} passes now: remove it from the expected failures"
        pytest.xfail(CUDA_EXPECTED_FAILURES[case])
    assert result.status == "pass", f"{result.status}: {result.detail}"
