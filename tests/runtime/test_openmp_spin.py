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


KEEP = "from ember.runtime.threads import keep_openmp_spin\nkeep_openmp_spin()\n"
OURS = {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "EMBER_SET_GOMP_SPINCOUNT"}


def _run(extra: dict[str, str], prefix: str = "") -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env.update(extra)
    out = subprocess.run(
        [sys.executable, "-c", prefix + SNIPPET], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
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


@pytest.mark.parametrize(
    "extra,want",
    [
        ({}, ["-", "-"]),
        ({"GOMP_SPINCOUNT": "2000", "EMBER_SET_GOMP_SPINCOUNT": "1"}, ["-", "-"]),  # a parent's
        ({"GOMP_SPINCOUNT": "77"}, ["77", "-"]),  # the user's
    ],
)
def test_a_timing_worker_keeps_libgomps_own_spin(extra, want) -> None:
    """The tuner's workers undo the spin count Ember set in their parent, never the user's."""
    assert _run(extra, KEEP) == want
