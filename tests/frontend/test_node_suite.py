"""ONNX's backend node tests for every case whose ops Ember converts, compiled for llvm.

New converters bring their cases in automatically; a case that should not pass
yet is listed in ``EXPECTED_FAILURES`` with the reason, never skipped silently.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from ember.frontend.testing.node_suite import list_cases, node_test_root, run_case  # noqa: E402

EXPECTED_FAILURES = {
    "test_batchnorm_epsilon_training_mode": "BatchNormalization training mode is not supported",
    "test_batchnorm_example_training_mode": "BatchNormalization training mode is not supported",
    "test_identity_opt": "optional-typed inputs are not supported",
    "test_identity_sequence": "sequence-typed inputs are not supported",
    "test_reduce_sum_empty_set_non_reduced_axis_zero": "zero-size tensors are not supported",
    "test_reduce_sum_square_empty_set_expanded": "zero-size tensors are not supported",
    "test_reshape_allowzero_reordered": "zero-size tensors are not supported",
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
    "test_det_2d": "a 0-d output has no axis to bind to GPU threads",
    "test_einsum_inner_prod": "a 0-d output has no axis to bind to GPU threads",
    "test_einsum_scalar": "a 0-d output has no axis to bind to GPU threads",
    "test_matmul_1d_1d": "a 0-d output has no axis to bind to GPU threads",
}


@pytest.mark.nvrtc
@pytest.mark.parametrize("case", CASES)
def test_node_case_cuda_emulated(case: str, monkeypatch) -> None:
    """The same cases for target="cuda" (generic thread-binding schedule), in the emulator."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    result = run_case(case, target="cuda")
    if case in CUDA_EXPECTED_FAILURES:
        assert result.status != "pass", f"{case} passes now: remove it from the expected failures"
        pytest.xfail(CUDA_EXPECTED_FAILURES[case])
    assert result.status == "pass", f"{result.status}: {result.detail}"
