"""Every TIR pass a pipeline can run has a Before/Expected test compared structurally.

The passes: the common list (``tir/transform/pipeline.py::default_passes``), the CUDA
list (``codegen_cuda/pipeline.py::cuda_passes``), the CPU's own pass, and, as a net for
lists this test does not know of yet, every ``Pass("name", ...)`` written in the TIR
layers' sources (``tir/``, ``codegen_llvm/``, ``codegen_cuda/``). A pass is covered by
a function ``test_<name>`` in a ``tests/**/test_*expected*.py`` file that compares with
``assert_structural_equal`` (or an ``assert_*_equal`` helper built on it), or by one of
the older tests listed in ``ELSEWHERE``. A new pass without such a test fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ember.codegen_cuda.pipeline import cuda_passes
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import default_passes, pass_names

ROOT = Path(__file__).resolve().parent.parent
TIR_LAYERS = ("tir", "codegen_llvm", "codegen_cuda")

# Passes a target runs outside the literal lists: ``codegen_llvm/build.py`` applies
# ``version_lane_guards`` by hand before code generation (issue 23 moves it into the CPU
# backend's list; the source scan below then finds it there too).
CPU_OWN = ("version_lane_guards",)

# Before/Expected tests written before this file, outside the ``*expected*`` files.
ELSEWHERE = {
    "instrument_bound_checkers": (
        "tests/tir/transform/test_instrument_bound_checkers.py",
        "test_before_expected_gather",
    ),
}

_PASS_LITERAL = re.compile(r"\bPass\(\s*\"(\w+)\"")
_COMPARE = re.compile(r"^assert_\w*equal$")


def pipeline_pass_names() -> set[str]:
    """The names of the passes the pipelines run, read from the lists themselves."""
    names = pass_names(default_passes(PassContext())) + pass_names(cuda_passes())
    return {*names, *CPU_OWN}


def passes_in_sources() -> set[str]:
    """Every ``Pass("name", ...)`` written in the TIR layers' sources."""
    found: set[str] = set()
    for folder in TIR_LAYERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.update(_PASS_LITERAL.findall(path.read_text()))
    return found


def _compares_structurally(func: ast.FunctionDef) -> bool:
    for n in ast.walk(func):
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            if _COMPARE.match(name):
                return True
    return False


def _tests_in(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    }


def covered_pass_names() -> set[str]:
    """The passes with a structural Before/Expected test."""
    covered: set[str] = set()
    for path in sorted((ROOT / "tests").rglob("test_*expected*.py")):
        for name, func in _tests_in(path).items():
            if _compares_structurally(func):
                covered.add(name.removeprefix("test_"))
    for pass_name, (file, test) in ELSEWHERE.items():
        func = _tests_in(ROOT / file).get(test)
        if func is not None and _compares_structurally(func):
            covered.add(pass_name)
    return covered


def test_every_pipeline_pass_has_a_before_expected_test() -> None:
    missing = sorted((pipeline_pass_names() | passes_in_sources()) - covered_pass_names())
    assert not missing, (
        f"passes without a Before/Expected test: {missing}; add a test_<pass name> that "
        "compares with assert_structural_equal to tests/tir/transform/test_passes_expected.py "
        "(common and CPU passes) or tests/codegen_cuda/test_passes_expected.py (CUDA passes)"
    )


def test_the_source_scan_sees_the_pipelines() -> None:
    """The net is real: it finds every pass of the lists read at run time (the CPU's own
    pass, applied by hand, aside)."""
    assert pipeline_pass_names() - set(CPU_OWN) <= passes_in_sources()


def test_a_pass_without_a_test_is_reported() -> None:
    assert "no_such_pass" not in covered_pass_names()
    assert {"simplify", "split_host_device", "version_lane_guards"} <= covered_pass_names()
