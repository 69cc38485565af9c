"""libgomp's spin count: Ember shortens it before loading libgomp, unless the user chose.

Each case runs in a fresh interpreter, since libgomp reads its environment once, when
it is loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ember.runtime.threads import OPENMP_SPINCOUNT

SNIPPET = (
    "import os\n"
    "from ember.codegen_llvm.jit import load_libgomp\n"
    "load_libgomp()\n"
    "print(os.environ.get('GOMP_SPINCOUNT', '-'), os.environ.get('OMP_WAIT_POLICY', '-'))\n"
)


def _run(extra: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(extra)
    out = subprocess.run(
        [sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


@pytest.mark.parametrize(
    "extra,want",
    [
        ({}, [str(OPENMP_SPINCOUNT), "-"]),
        ({"GOMP_SPINCOUNT": "77"}, ["77", "-"]),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, ["-", "ACTIVE"]),
    ],
)
def test_spin_count_set_before_libgomp_loads_unless_user_chose(extra, want) -> None:
    assert _run(extra) == want
