"""``ember --help`` and every verb's ``--help`` stay fast: they list every verb and load
none of the compiler, onnx, optuna, rich or matplotlib (ember/cli/ imports those only
when a verb runs)."""

from __future__ import annotations

import subprocess
import sys

VERBS = ("demo", "info", "compile", "run", "inspect", "tune", "rpc-server", "records", "bench")
HEAVY_PACKAGES = ("llvmlite", "onnx", "optuna", "rich", "matplotlib", "rpyc", "cuda")
COMPILER = (
    "ember.codegen_llvm",
    "ember.tir.te",
    "ember.tir.topi",
    "ember.tir.schedule",
    "ember.frontend.onnx_import",
    "ember.graph.compile",
    "ember.graph.kernels",
)
CODE = f"""
import contextlib, io, sys
from ember.cli import main
for argv in ([], *([v] for v in {VERBS!r}), ["records", "show"]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main([*argv, "--help"])
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
    assert "usage: ember" in out.getvalue(), argv
    if not argv:
        print(out.getvalue())
heavy = [m for m in sys.modules if m.split(".")[0] in {HEAVY_PACKAGES!r}]
heavy += [m for m in sys.modules if m.startswith({COMPILER!r})]
print("LOADED:" + ",".join(sorted(heavy)))
"""


def test_help_lists_every_verb_and_loads_no_compiler() -> None:
    run = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    for verb in VERBS:
        assert verb in run.stdout
    assert run.stdout.strip().splitlines()[-1] == "LOADED:"
