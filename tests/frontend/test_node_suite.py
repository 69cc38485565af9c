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

_RANDOM = (
    "draws random numbers: no other generator reproduces numpy's draws (shape, dtype and "
    "support are checked: status 'random')"
)
# training_mode is true and the ratio nonzero: the expected outputs hold a mask numpy's
# MT19937 drew for seed 0 when the data was made, which only that generator reproduces
_DROPOUT = (
    "Dropout in training mode drops a random mask (numpy's draws for seed 0 in the expected "
    "outputs); Ember compiles Dropout for inference only and refuses training mode"
)
UNCONVERTED = {
    "ImageDecoder": "decoding JPEG/PNG bytes is not a tensor computation Ember compiles",
}

EXPECTED_FAILURES = {
    "test_bernoulli": _RANDOM,
    "test_bernoulli_double": _RANDOM,
    "test_bernoulli_double_expanded": _RANDOM,
    "test_bernoulli_expanded": _RANDOM,
    "test_bernoulli_seed": _RANDOM,
    "test_bernoulli_seed_expanded": _RANDOM,
    "test_training_dropout": _DROPOUT,
    "test_training_dropout_default": _DROPOUT,
    "test_training_dropout_default_mask": _DROPOUT,
    "test_training_dropout_mask": _DROPOUT,
}


def _op_types(name: str) -> tuple[str, ...]:
    import onnx

    model = onnx.load(str(node_test_root() / name / "model.onnx"), load_external_data=False)
    return tuple(sorted({n.op_type for n in model.graph.node}))


CASES = list_cases()
OP_TYPES = {name: _op_types(name) for name in CASES}


def _unconverted(name: str) -> list[str]:
    from ember.frontend.onnx_import import supported_op_types

    return sorted(set(OP_TYPES[name]) - set(supported_op_types()))


UNCONVERTED_CASES = {name: ops for name in CASES if (ops := _unconverted(name))}


def _sample_per_op_set(cases: list[str], every: int) -> list[str]:
    """Every ``every``-th case of each set of op types (the first of each always): CI's
    share of the suite, in which every op and op combination still runs."""
    seen: dict[tuple[str, ...], int] = {}
    out = []
    for case in cases:
        k = seen.get(OP_TYPES[case], 0)
        seen[OP_TYPES[case]] = k + 1
        if k % every == 0:
            out.append(case)
    return out


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


# every case nightly; in CI every twelfth case of each op set, 319 of 1,765, each of the 270
# op sets at least once (``benchmarks/onnx_node_suite.py --all`` runs them all and prints
# the table)
CPU_CASES = CASES if NIGHTLY else _sample_per_op_set(CASES, 12)


@pytest.mark.parametrize("case", CPU_CASES)
def test_node_case(case: str) -> None:
    _check(case, "llvm")


# every twentieth converted case in CI, every case nightly: the CPU run above covers each
# op's numbers; this one covers the generic CUDA schedule, whose emulation fills CI's
# minutes
CUDA_CASES = [c for c in CASES if c not in UNCONVERTED_CASES]
CUDA_CASES = CUDA_CASES if NIGHTLY else CUDA_CASES[::20]


@pytest.mark.nvrtc
@pytest.mark.parametrize("case", CUDA_CASES)
def test_node_case_cuda_emulated(case: str, monkeypatch) -> None:
    """The same cases for target="cuda" (generic thread-binding schedule), in the emulator."""
    pytest.importorskip("cuda")
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    _check(case, "cuda")
