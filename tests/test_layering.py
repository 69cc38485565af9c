"""The import graph keeps the layers apart (STYLE.md): lower layers never import upper ones."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "tir": "ember.tir",
    "codegen_llvm": "ember.codegen_llvm",
    "codegen_cuda": "ember.codegen_cuda",
    "tuner": "ember.tuner",
    "frontend": "ember.frontend",
    "ember": "ember",
}
# module prefix -> prefixes it must not import
FORBIDDEN = {
    "ember.tir": (
        "ember.codegen_llvm",
        "ember.codegen_cuda",
        "ember.frontend",
        "ember.tuner",
        "ember.driver",
        "ember.module",
        "ember.cli",
    ),
    "ember.tuner": (
        "ember.codegen_llvm",
        "ember.codegen_cuda",
        "ember.frontend",
        "ember.driver",
        "ember.cli",
    ),
    "ember.codegen_llvm": ("ember.codegen_cuda", "ember.frontend", "ember.driver", "ember.cli"),
    "ember.codegen_cuda": ("ember.codegen_llvm", "ember.frontend", "ember.driver", "ember.cli"),
    # The frontend sits above TE/TIR and beside the code generators: it never builds code
    # itself except through ember.graph.kernels (constant folding of large tensors, lazily).
    "ember.frontend": (
        "ember.codegen_llvm",
        "ember.codegen_cuda",
        "ember.tuner",
        "ember.driver",
        "ember.cli",
        "ember.graph.compile",
        "ember.graph.executor",
    ),
    # The runtime is the bottom layer (TVM's): modules, arrays, the function registry. It
    # imports the base layer and itself, never the IR, a backend or the model compiler.
    "ember.runtime": (
        "ember.tir",
        "ember.codegen_llvm",
        "ember.codegen_cuda",
        "ember.frontend",
        "ember.tuner",
        "ember.graph",
        "ember.driver",
        "ember.cli",
    ),
    "ember.errors": ("ember.",),
    "ember.config": ("ember.tir", "ember.codegen", "ember.tuner", "ember.frontend", "ember.driver"),
    "ember.target": ("ember.tir", "ember.codegen", "ember.tuner", "ember.frontend", "ember.driver"),
}
ALLOWED_FROM_BASE = ("ember.errors", "ember.config", "ember.target")


def _modules():
    for folder, pkg in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([pkg, *parts]), path


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def _dynamic_imports(path: Path) -> list[str]:
    """Calls that import a module named at run time (importlib.import_module, __import__)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in ("import_module", "__import__"):
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


def test_lower_layers_import_no_module_by_string():
    """A string import would hide an upward edge from the check above (the tuner once
    imported ``ember.codegen_<kind>.schedules`` that way); only same-package lazy
    attribute loading in ``__init__`` files may name a module at run time."""
    problems = []
    for name, path in _modules():
        if not name.startswith(("ember.tuner", "ember.tir", "ember.codegen_llvm")):
            continue
        if path.name == "__init__.py":
            continue
        problems += [f"{name} {call}" for call in _dynamic_imports(path)]
    assert not problems, "\n".join(problems)


def test_the_layering_checks_see_a_string_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import importlib\nimportlib.import_module(f'ember.codegen_{k}.schedules')\n")
    assert _dynamic_imports(bad)


def test_layers_do_not_import_upwards():
    problems = []
    for name, path in _modules():
        for rule, banned in FORBIDDEN.items():
            if name != rule and not name.startswith(rule + "."):
                continue
            for imp in _imports(path):
                if imp.startswith(banned) and not imp.startswith(ALLOWED_FROM_BASE):
                    problems.append(f"{name} imports {imp}")
    assert not problems, "\n".join(problems)


def test_no_bare_folder_imports():
    bare = ("tir", "codegen_llvm", "codegen_cuda", "tuner", "frontend")
    problems = [
        f"{name} imports {imp}"
        for name, path in _modules()
        for imp in _imports(path)
        if imp.split(".")[0] in bare
    ]
    assert not problems, "\n".join(problems)


def test_import_ember_is_light():
    import subprocess
    import sys

    heavy = "('llvmlite', 'onnx', 'optuna')"
    code = f"import sys, ember; print(','.join(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
