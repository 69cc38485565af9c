"""Counts the architecture figures issue 23 asks to see before and after.

Run from the repository root: ``python .ci/arch_metrics.py [--mypy]``. It prints
target-kind comparisons outside the backends, imports placed inside functions,
import cycles among modules (module-level imports), files over 400 lines, and
public names without a docstring; with ``--mypy`` also the mypy error count
(through ``.ci/mypy.sh``). Everything is read with ``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "ember": "ember",
    "tir": "ember.tir",
    "codegen_llvm": "ember.codegen_llvm",
    "codegen_cuda": "ember.codegen_cuda",
    "frontend": "ember.frontend",
    "tuner": "ember.tuner",
}
BACKENDS = ("codegen_llvm", "codegen_cuda")
KINDS = {"llvm", "cuda", "c", "cpu", "gpu"}


def modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


def _is_kind_compare(node: ast.Compare) -> bool:
    """A comparison of something with a target-kind string ("llvm", "cuda", ...)."""
    names = ast.unparse(node.left) + " ".join(ast.unparse(c) for c in node.comparators)
    if "kind" not in names and "target" not in names:
        return False
    for side in [node.left, *node.comparators]:
        consts = side.elts if isinstance(side, (ast.Tuple, ast.Set, ast.List)) else [side]
        if any(isinstance(c, ast.Constant) and c.value in ("llvm", "cuda") for c in consts):
            return True
    return False


def kind_branches(mods: dict[str, Path]) -> list[str]:
    out = []
    for path in mods.values():
        if path.relative_to(ROOT).parts[0] in BACKENDS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and _is_kind_compare(node):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def _resolve(name: str, node: ast.ImportFrom | ast.Import, mods: dict[str, Path]) -> list[str]:
    """The package modules an import statement in module ``name`` loads."""
    targets = []
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = name.split(".")
            is_pkg = mods[name].name == "__init__.py"
            pkg = pkg if is_pkg else pkg[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join([*pkg, base]) if base else ".".join(pkg)
        targets = [base] + [f"{base}.{a.name}" for a in node.names]
    return [t for t in targets if t in mods]


def function_imports(mods: dict[str, Path]) -> list[str]:
    out = []
    for path in mods.values():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return sorted(set(out))


def module_graph(mods: dict[str, Path], everywhere: bool = False) -> dict[str, set[str]]:
    """Edges from module-level imports (TYPE_CHECKING blocks left out); with
    ``everywhere``, imports inside functions count too (TYPE_CHECKING ones never run)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        if everywhere:
            typing_only = {
                id(n)
                for node in ast.walk(tree)
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for stmt in node.body
                for n in ast.walk(stmt)
            }
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only:
                    graph[name].update(t for t in _resolve(name, node, mods) if t != name)
            continue
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(t for t in _resolve(name, node, mods) if t != name)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            elif isinstance(node, (ast.If, ast.Try)):
                stack += [*node.body, *node.orelse, *getattr(node, "handlers", [])]
                stack += getattr(node, "finalbody", [])
            elif isinstance(node, ast.ExceptHandler):
                stack += node.body
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan).

    A package's ``__init__`` importing its own submodules is not a cycle of the
    kind the issue means, so edges from a package to its own children are dropped.
    """
    edges = {a: {b for b in bs if not b.startswith(a + ".")} for a, bs in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def long_files(mods: dict[str, Path], limit: int = 400) -> list[str]:
    return [
        f"{p.relative_to(ROOT)} ({n})"
        for p in mods.values()
        if (n := len(p.read_text().splitlines())) > limit
    ]


def _is_overload(node: ast.AST) -> bool:
    """An ``@overload`` stub: its implementation carries the docstring (as ruff's D103 sees it)."""
    decorators = getattr(node, "decorator_list", [])
    return any(ast.unparse(d).split(".")[-1] == "overload" for d in decorators)


def undocumented(mods: dict[str, Path]) -> list[str]:
    """Public module-level functions and classes (and public methods of public classes)
    in public modules that carry no docstring."""
    out = []
    for name, path in mods.items():
        if any(part.startswith("_") and part != "__init__" for part in name.split(".")):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_") or _is_overload(node):
                continue
            if ast.get_docstring(node) is None:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return out


def mypy_errors() -> int:
    run = subprocess.run(
        ["bash", str(ROOT / ".ci" / "mypy.sh"), "--count"], capture_output=True, text=True
    )
    return int(run.stdout.strip().splitlines()[-1])


def main() -> None:
    mods = modules()
    graph = module_graph(mods)
    cyc = cycles(graph)
    hidden = cycles(module_graph(mods, everywhere=True))
    rows = {
        "target-kind comparisons outside the backends": len(kind_branches(mods)),
        "imports inside functions": len(function_imports(mods)),
        "import cycles (modules in them)": f"{len(cyc)} ({sum(map(len, cyc))})",
        "import cycles counting function-level imports": f"{len(hidden)} ({sum(map(len, hidden))})",
        "files over 400 lines": len(long_files(mods)),
        "public functions/classes without a docstring": len(undocumented(mods)),
    }
    if "--mypy" in sys.argv:
        rows["mypy errors"] = mypy_errors()
    for key, value in rows.items():
        print(f"{key:48s} {value}")
    if "-v" in sys.argv:
        for c in cyc:
            print("cycle:", " ".join(c))
        for c in hidden:
            print("hidden cycle:", " ".join(c))
        for k in kind_branches(mods):
            print("kind:", k)
        for f in long_files(mods):
            print("long:", f)


if __name__ == "__main__":
    main()
