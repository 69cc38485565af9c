"""Cases run only by the nightly run (``EMBER_NIGHTLY=1``): end-to-end checks too slow for
CI's 15 minutes whose block kinds CI covers elsewhere."""

from __future__ import annotations

import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

NIGHTLY = bool(os.environ.get("EMBER_NIGHTLY"))
skip_unless_nightly = pytest.mark.skipif(not NIGHTLY, reason="nightly: set EMBER_NIGHTLY=1")


def nightly_param(*values: Any) -> Any:
    """A ``parametrize`` case marked ``slow`` that runs only in the nightly run."""
    return pytest.param(*values, marks=[pytest.mark.slow, skip_unless_nightly])


def examples(n: int) -> int:
    """A property test's ``max_examples``: ``n`` in the nightly run, an eighth of it (at
    least 2) in CI, whose 15 minutes the slowest property tests (builds of random configs)
    fill: on a 2-core Zen 3 (AVX2) a clean clone's CI took 886 s with half, 820-900 s
    with a third and 922 s with a quarter as the host's load moved, and 906 s with a
    sixth on a slow evening (2026-12-04). The nightly run draws all ``n``."""
    return n if NIGHTLY else max(2, n // 8)


def configs(n: int) -> int:
    """How many sampled configs a template test builds: ``n`` nightly, a quarter (at least
    2) in CI (each is a full LLVM build of a template kernel, 1-3 s; see :func:`examples`)."""
    return n if NIGHTLY else max(2, n // 4)


def sample_in_ci(*params: Any, every: int = 2) -> None:
    """Skip this case of a large sweep in CI unless it falls in CI's 1-in-``every``
    sample (chosen by a stable hash of ``params``, so the same cases run each time and
    each parameter's values still appear); nightly runs every case. For stacked
    ``parametrize`` sweeps, where marking single cases nightly would mean writing out the
    product."""
    if not NIGHTLY and _left_out(repr(params), every):
        pytest.skip(f"nightly: EMBER_NIGHTLY=1 (CI runs 1 in {every} of this sweep)")


def _left_out(key: str, every: int) -> bool:
    """Whether the case named ``key`` falls outside CI's stable 1-in-``every`` sample."""
    return zlib.crc32(key.encode()) % every != 0


NIGHTLY_ONLY: dict[str, str] = {
    # test id: the tests that cover it in CI
    "tests/frontend/test_torch_frontend.py::test_compile_backend_specialises_per_shape_and_matches_eager": (  # noqa: E501
        "the encoder at several sizes: test_models_through_torch_compile_match_eager_at_each_"
        "size; compile counts: test_sizes_dynamo_makes_symbolic_are_the_dynamic_models_dims"
    ),
    "tests/frontend/test_e2e_zoo.py::test_model_matches_onnxruntime[mobilenet_v2]": (
        "the full model against onnxruntime: test_fuse_dw_pointwise.py::"
        "test_mobilenet_v2_fuses_its_large_blocks_only"
    ),
    "tests/frontend/test_e2e_zoo.py::test_model_compiles_for_cuda[mobilenet_v2]": (
        "its [resnet18] and [bert] cases"
    ),
    "tests/tuner/test_measure.py::test_tuning_finishes_despite_faults": (
        "test_each_fault_gets_its_kind_and_the_measurer_goes_on"
    ),
    "tests/tuner/test_rpc.py::test_cli_tunes_through_the_server": (
        "test_tuning_through_the_server, and the CLI's tune: tests/tuner/test_cli.py"
    ),
    "tests/tuner/test_rpc.py::test_dry_run_builds_and_emulates_cuda_candidates": (
        "the dry run: test_dry_run_checks_cpu_candidates_without_timing; CUDA candidates built "
        "and emulated without a device: test_without_a_device_candidates_are_built_and_"
        "emulated_but_not_timed"
    ),
    "tests/e2e/test_kernel_cache.py::test_a_corrupt_entry_is_rebuilt_not_loaded[meta]": (
        "its [missing-library] case"
    ),
    "tests/e2e/test_kernel_cache.py::test_a_corrupt_entry_is_rebuilt_not_loaded[library]": (
        "its [missing-library] case"
    ),
    "tests/frontend/test_benchmark_scripts.py::test_conv_benchmark_script_checks_every_template_and_tunes": (  # noqa: E501
        "each conv template's own tests (tests/codegen_llvm/schedules) and the tuner's"
    ),
    "tests/codegen_llvm/schedules/test_batch_matmul.py::test_every_packing_matches_numpy[dense.llvm-ahead]": (  # noqa: E501
        "[matmul.llvm-ahead] (the same packing) and the other dense.llvm cases"
    ),
    "tests/frontend/test_alter_conv_layout.py::test_chain_through_compile_matches_onnxruntime[(13, 32, 9, 11)]": (  # noqa: E501
        "the (3, 64, 15, 14) and (64, 64, 7, 9) chains"
    ),
    "tests/codegen_llvm/schedules/test_winograd.py::test_odd_shapes[(1, 13, 13, 7, 3, 0)-4]": (
        "the other odd shapes"
    ),
    "tests/codegen_llvm/schedules/test_winograd_nchwc.py::test_blocked_kernel_matches_numpy[16-48-11-5-8-48-pads2-4]": (  # noqa: E501
        "the other blocked shapes"
    ),
    "tests/frontend/test_symbolic_batch.py::test_a_size_seen_before_reuses_its_compiled_model[cnn]": (  # noqa: E501
        "its [mlp] case"
    ),
    "tests/frontend/test_symbolic_batch.py::test_runs_at_any_batch_size_like_onnxruntime[cnn]": (
        "its [mlp] case"
    ),
    "tests/codegen_cuda/test_vthread.py::test_vthread_matmul_emulated[shape1-2]": (
        "its [shape2-4] case, also of sizes no tile divides"
    ),
    "tests/tuner/test_model_tuning.py::test_cli_tunes_a_model_and_compiles_with_the_records": (
        "test_tuned_records_are_used_and_results_match_onnxruntime (the same tuning by the "
        "API) and tests/tuner/test_cli.py (the command)"
    ),
}
"""Tests CI skips, each covered in CI by the tests named (``tests/conftest.py`` marks them;
``test_nightly_list.py`` checks every entry still names a test)."""


HALF_IN_CI: dict[str, str] = {
    # a parametrized test: the kind of cases CI's half still covers
    "tests/codegen_cuda/test_barrier_mutation.py::test_dropping_any_one_barrier_is_a_race": (
        "barriers of each kernel kind"
    ),
    "tests/codegen_cuda/test_pipeline.py::test_pipelined_kernels_compile": "pipeline depths",
    "tests/codegen_cuda/test_pipeline.py::test_pipelined_matmul_matches_numpy": "shapes and depths",
    "tests/codegen_cuda/test_gpu_templates.py::test_edge_tiles_keep_registers_out_of_local_memory": (  # noqa: E501
        "edge tiles"
    ),
    "tests/codegen_cuda/test_conv2d_gemm_cuda.py::test_conv2d_gemm_matches_numpy": "conv shapes",
    "tests/frontend/ops/test_resize.py::test_resize_antialias_matches_onnxruntime": "modes",
    "tests/frontend/test_fuse_dw_pointwise.py::test_fused_kernel_matches_onnxruntime": "blocks",
    "tests/codegen_llvm/schedules/test_depthwise_conv2d_nchwc.py::test_template_sampled_configs": (
        "workloads"
    ),
    "tests/codegen_llvm/schedules/test_depthwise_conv2d_nchwc.py::test_template_fallback": (
        "workloads"
    ),
    "tests/codegen_llvm/schedules/test_dense_packed.py::test_sampled_configs_match_numpy": (
        "workloads"
    ),
    "tests/codegen_llvm/schedules/test_depthwise_conv2d.py::test_fallback_medium_llvm": "workloads",
    "tests/codegen_llvm/schedules/test_depthwise_conv2d.py::test_fallback_small": "workloads",
    "tests/codegen_llvm/schedules/test_conv2d.py::test_fallback_small": "workloads",
    "tests/codegen_llvm/schedules/test_conv2d_nchwc.py::test_template_fallback": "workloads",
    "tests/robust/test_llvm_target_options.py::test_bad_cpu_or_feature_in_a_subprocess": (
        "bad names"
    ),
    "tests/frontend/ops/test_sampling.py::test_grid_sample_5d": "modes",
    "tests/frontend/ops/test_sampling.py::test_grid_sample_nan_and_far_coordinates": "modes",
    "tests/robust/test_nan_semantics.py::test_item_01_topk_with_nan_matches_onnxruntime": (
        "NaN placements"
    ),
    "tests/tvm_scripts/test_te_int4.py::test_int4_division_and_reductions": "ops",
    "tests/frontend/test_max_pool_strategy.py::test_max_pool_on_template_matches_onnxruntime": (
        "pools"
    ),
    "tests/frontend/ops/test_host_ops.py::test_roi_align_matches_onnxruntime": "modes",
}
"""Parametrized tests CI runs a stable half of (by a hash of each case's id, the first case
always), every case nightly: sweeps whose cases cost seconds each and differ in degree,
not in kind."""


SWEEPS_FILE = Path(__file__).with_name("ci_half_sweeps.txt")
SWEEP_CASE_SECONDS = 0.1  # a sweep's mean seconds a case from which CI runs half of it


def _read_sweeps(path: Path) -> frozenset[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return frozenset(line for line in lines if line)


HALF_SWEEPS: frozenset[str] = _read_sweeps(SWEEPS_FILE)
"""Parametrized tests CI also runs a stable half of, listed in ``ci_half_sweeps.txt``: the
sweeps whose cases took :data:`SWEEP_CASE_SECONDS` or more each in a full run's
``--durations=0`` (written by ``python -m tests.nightly DURATIONS``). The suite's time is
spread thin (6,400 tests, none over 30 s), so no short list of slow tests held CI to its
15 minutes: a clean clone's ``.ci/run`` read 876-995 s in one day on this 2-core host."""


def half_reason(base: str) -> str:
    """What CI's half of the sweep ``base`` still covers."""
    return HALF_IN_CI.get(base) or "a stable half of the cases, the first always"


def half_in_ci(nodeid: str, first: bool) -> bool:
    """Whether CI skips this case of a :data:`HALF_IN_CI` or :data:`HALF_SWEEPS` test
    (never its first case)."""
    base, case = nodeid.partition("[")[::2]
    if NIGHTLY or first or not case or (base not in HALF_IN_CI and base not in HALF_SWEEPS):
        return False
    return _left_out(nodeid, 2)


# never halved by :func:`heavy_sweeps`: every README block, the ONNX node suite (sampled
# per op set above), the known miscompiles (each case one that went wrong), and the trust,
# end-to-end, runtime and tuner behaviour tests, whose cases differ in kind (each a
# tampering, an error, a fork); the numeric sweeps of kernels and operators differ in degree
NEVER_HALVED = (
    "tests/test_readme.py::",
    "tests/frontend/test_node_suite.py::",
    "tests/codegen_llvm/test_known_",
    "tests/test_layering.py::",
    "tests/robust/",
    "tests/e2e/",
    "tests/runtime/",
    "tests/tuner/",
)


def heavy_sweeps(durations: str, min_cases: int = 3) -> list[str]:
    """The parametrized tests of a ``pytest --durations=0`` report whose cases averaged
    :data:`SWEEP_CASE_SECONDS` or more (setup and teardown counted), not yet halved."""
    seconds: dict[str, float] = {}
    cases: dict[str, int] = {}
    for m in re.finditer(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+\[\S*)", durations, re.M):
        base = m[3].split("[")[0]
        seconds[base] = seconds.get(base, 0.0) + float(m[1])
        cases[base] = cases.get(base, 0) + (m[2] == "call")
    return sorted(
        base
        for base, total in seconds.items()
        if cases[base] >= min_cases
        and total / cases[base] >= SWEEP_CASE_SECONDS
        and base not in HALF_IN_CI
        and not base.startswith(NEVER_HALVED)
    )


if __name__ == "__main__":  # python -m tests.nightly DURATIONS > tests/ci_half_sweeps.txt
    print(f"# written by: python -m tests.nightly {Path(sys.argv[1]).name}")
    print("\n".join(heavy_sweeps(Path(sys.argv[1]).read_text())))
