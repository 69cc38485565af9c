"""The import graph keeps the layers apart: the rules are the layer table in
``docs/architecture.md``, read here, so the documentation and the check cannot drift.

Every import counts, those inside functions too (a lazy import is still an edge);
only imports under ``if TYPE_CHECKING:`` are exempt, since they never run.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "tir": "ember.tir",
    "codegen_llvm": "ember.codegen_llvm",
    "codegen_cuda": "ember.codegen_cuda",
    "tuner": "ember.tuner",
    "frontend": "ember.frontend",
    "ember": "ember",
}
TABLE = ROOT / "docs" / "architecture.md"


@functools.cache
def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


@functools.cache
def _nodes(path: Path) -> tuple[list[ast.Import | ast.ImportFrom], list[ast.Call], set[int]]:
    """The file's import statements, its calls, and the ids of the nodes under ``if
    TYPE_CHECKING:``, from one parse and one walk shared by every check here (parsing and
    walking all modules once per check took ~10 s of the suite)."""
    imports: list[ast.Import | ast.ImportFrom] = []
    calls: list[ast.Call] = []
    skip: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
        elif isinstance(node, ast.Call):
            calls.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return imports, calls, skip


def _layer_table(text: str) -> dict[str, tuple[list[str], set[str]]]:
    """layer -> (its paths, the layers it may import), from the marked table."""
    body = text.split("<!-- layers: begin -->")[1].split("<!-- layers: end -->")[0]
    rows = [r for r in body.strip().splitlines()[2:] if r.startswith("|")]
    table = {}
    for row in rows:
        layer, paths, imports, _ = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", paths)
        allowed = set() if imports in ("—", "-", "") else {x.strip() for x in imports.split(",")}
        table[layer] = (names, allowed)
    return table


def _owner(path: Path, table: dict[str, tuple[list[str], set[str]]]) -> str | None:
    """The layer whose most specific path holds ``path``."""
    rel = path.relative_to(ROOT).as_posix()
    best, best_len = None, -1
    for layer, (paths, _) in table.items():
        for p in paths:
            hit = rel == p if p.endswith(".py") else rel.startswith(p)
            if hit and len(p) > best_len:
                best, best_len = layer, len(p)
    return best


def _resolve(name: str, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> list[str]:
    """The package modules an import statement in module ``name`` loads (a ``from ember
    import config`` loads ``ember.config``, not the package root's contents)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    base = node.module or ""
    if node.level:
        pkg = name.split(".")
        pkg = pkg if mods[name].name == "__init__.py" else pkg[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base]) if base else ".".join(pkg)
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
    if subs and len(subs) == len(node.names):
        return subs
    return ([base] if base in mods else []) + subs


@functools.cache
def _file_edges(name: str, path: Path) -> list[tuple[int, str]]:
    return _edges(name, path, _modules())


def _edges(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, TYPE_CHECKING blocks left out."""
    imports, _, skip = _nodes(path)
    out = []
    for node in imports:
        if id(node) not in skip:
            out += [(node.lineno, m) for m in _resolve(name, node, mods)]
    return out


def check_layers(text: str) -> list[str]:
    """Every import the table forbids, every module no row owns, every row path missing."""
    table = _layer_table(text)
    mods = _modules()
    problems = []
    for layer, (paths, allowed) in table.items():
        problems += [
            f"layer {layer!r} names {p}, which does not exist"
            for p in paths
            if not (ROOT / p).exists()
        ]
        problems += [
            f"layer {layer!r} may import unknown layer {a!r}" for a in allowed if a not in table
        ]
    owner = {name: _owner(path, table) for name, path in mods.items()}
    for name, path in mods.items():
        layer = owner[name]
        if layer is None:
            problems.append(f"{path.relative_to(ROOT)} belongs to no layer of the table")
            continue
        allowed = table[layer][1] | {layer}
        for line, target in _file_edges(name, path):
            if owner.get(target) not in allowed:
                problems.append(
                    f"{path.relative_to(ROOT)}:{line} ({layer}) imports {target} "
                    f"({owner.get(target)})"
                )
    return problems


def test_imports_follow_the_layer_table():
    problems = check_layers(TABLE.read_text())
    assert not problems, "\n".join(problems)


def test_the_check_sees_an_upward_and_a_lazy_import():
    """The check can fail: a table that lets the IR import nothing flags tir's imports of
    the runtime, and one that moves the executor below the frontend flags the lazy
    imports... any edge at all, function-level ones included."""
    text = TABLE.read_text()
    strict = re.sub(r"(\| IR \| `tir/` \| )base, runtime( \|)", r"\1base\2", text)
    assert strict != text
    assert any("(IR) imports ember.runtime" in p for p in check_layers(strict))


def test_the_table_covers_every_folder_and_room():
    table = _layer_table(TABLE.read_text())
    paths = {p for ps, _ in table.values() for p in ps}
    for folder in ("tir/", "tuner/", "frontend/", "codegen_llvm/", "codegen_cuda/"):
        assert folder in paths
    for room in ("ember/runtime/", "ember/graph/", "ember/cli/"):
        assert room in paths


def _dynamic_imports(path: Path) -> list[str]:
    """Calls that import a module named at run time (importlib.import_module, __import__),
    other than a fixed name outside Ember (an optional package such as cuda-python)."""
    out = []
    for node in _nodes(path)[1]:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        arg = ast.unparse(node.args[0]) if node.args else ""
        third_party = (
            isinstance(node.args[0], ast.Constant) and "ember" not in arg if arg else False
        )
        if name in ("import_module", "__import__") and not third_party:
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


def test_lower_layers_import_no_module_by_string():
    """A string import would hide an edge from the check above (the tuner once imported
    ``ember.codegen_<kind>.schedules`` that way); only same-package lazy attribute loading
    in ``__init__`` files may name a module at run time."""
    problems = []
    for name, path in _modules().items():
        if path.name == "__init__.py" or not name.startswith(
            ("ember.tuner", "ember.tir", "ember.codegen_", "ember.frontend", "ember.graph")
        ):
            continue
        problems += [f"{name} {call}" for call in _dynamic_imports(path)]
    assert not problems, "\n".join(problems)


def test_the_layering_checks_see_a_string_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import importlib\nimportlib.import_module(f'ember.codegen_{k}.schedules')\n")
    assert _dynamic_imports(bad)


def test_no_bare_folder_imports():
    bare = ("tir", "codegen_llvm", "codegen_cuda", "tuner", "frontend")
    problems = []
    for name, path in _modules().items():
        for node in _nodes(path)[0]:
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            problems += [f"{name} imports {n}" for n in names if n.split(".")[0] in bare]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("heavy", ["llvmlite", "onnx", "optuna", "ember.tir"])
def test_import_ember_is_light(heavy):
    code = f"import sys, ember; print({heavy!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
