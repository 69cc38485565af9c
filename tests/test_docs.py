"""docs/architecture.md states the pass lists; they must be the lists the code runs."""

from __future__ import annotations

import re
from pathlib import Path

from ember.codegen_cuda.pipeline import cuda_passes
from ember.tir.transform.context import PassContext
from ember.tir.transform.pipeline import Pass, default_passes

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def _documented(name: str) -> list[str]:
    text = DOC.read_text()
    block = re.search(rf"<!-- pass-list: {name} -->\n(.*?)<!-- end pass-list -->", text, re.S)
    assert block, f"docs/architecture.md has no '{name}' pass list"
    items = re.findall(r"^\d+\. `(\w+)`(.*)$", block.group(1), re.M)
    return [n + (" (required)" if "required" in rest else "") for n, rest in items]


def _in_code(passes: list[Pass]) -> list[str]:
    return [p.name + (" (required)" if p.required else "") for p in passes]


def test_the_common_pass_list_matches_the_code():
    assert _documented("common") == _in_code(default_passes(PassContext()))


def test_the_cuda_pass_list_matches_the_code():
    assert _documented("cuda") == _in_code(cuda_passes())


def test_the_cpu_pass_list_matches_the_code():
    from ember.backend import get_backend

    assert _documented("llvm") == _in_code(get_backend("llvm").passes(PassContext()))


def test_the_graph_pass_list_matches_the_code():
    from ember.frontend.passes import DEFAULT_PASSES

    assert _documented("graph") == _in_code(list(DEFAULT_PASSES))


def test_a_changed_list_would_be_seen(tmp_path, monkeypatch):
    changed = DOC.read_text().replace("1. `split_host_device`", "1. `split_host`")
    fake = tmp_path / "architecture.md"
    fake.write_text(changed)
    monkeypatch.setattr(f"{__name__}.DOC", fake)
    assert _documented("cuda") != _in_code(cuda_passes())


def test_the_readme_links_the_architecture_page():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
    assert "../shared/DESIGN.md" not in readme
