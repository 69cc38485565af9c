"""Every test CI leaves to the nightly run still exists: a renamed test would otherwise
drop out of CI's skip list silently and run again, or its entry would hide nothing."""

from __future__ import annotations

import re
from pathlib import Path

from tests.nightly import HALF_IN_CI, HALF_SWEEPS, NEVER_HALVED, NIGHTLY_ONLY

ROOT = Path(__file__).resolve().parent.parent


def test_each_nightly_only_entry_names_a_test_and_the_tests_that_cover_it():
    for node, covered in NIGHTLY_ONLY.items():
        path, name = node.split("::")
        function = name.split("[")[0]
        text = (ROOT / path).read_text()
        assert re.search(rf"^def {function}\(", text, re.M), f"{node}: no such test"
        if "[" in name:  # a parametrized case: its test must be parametrized
            assert "parametrize" in text or "params=" in text, f"{node}: {function} takes none"
        for test in re.findall(r"\btest_\w+", covered):
            assert any(
                p.stem == test or f"def {test}(" in p.read_text()
                for p in (ROOT / "tests").rglob("test_*.py")
            ), f"{node}: the covering test {test} does not exist"


def test_each_half_in_ci_entry_names_a_parametrized_test():
    assert HALF_SWEEPS, "ci_half_sweeps.txt lists no sweep"
    assert not any(node.startswith(NEVER_HALVED) for node in HALF_SWEEPS)
    for node in [*HALF_IN_CI, *HALF_SWEEPS]:
        path, function = node.split("::")
        text = (ROOT / path).read_text()
        assert re.search(rf"^def {function}\(", text, re.M), f"{node}: no such test"
        assert "parametrize" in text or "params=" in text, f"{node}: takes no parameters"
