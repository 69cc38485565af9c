"""A schedule that once aborted the process in LLVM, kept as a regression test.

llvmlite's LLVM is built with assertions, and its loop vectorizer aborted the process
("VPlan cost model and legacy cost model disagreed", LoopVectorize.cpp) on the loop of
one rfactor schedule found by the property test: a max over 4x79 split by 1 and
factored on the last axis. That loop is the main part of a partitioned loop; since
``vectorize_loops`` vectorizes such parts itself (a loop that starts past its guards
used to stay serial), LLVM's loop vectorizer no longer meets it. The build runs in a
child process, since a regression would take pytest with it.
"""

from __future__ import annotations

import subprocess
import sys

SNIPPET = """
import numpy as np
import ember
from tests.schedule.test_rfactor_properties import build
s, args = build(4, 79, "max", 1, -1, False, 1)
mod = ember.build(s, args, target="llvm")
a = np.random.default_rng(0).standard_normal((4, 79)).astype("float32")
b = np.empty(4, "float32")
mod(a, b)
np.testing.assert_array_equal(b, a.max(axis=1))
"""


def test_rfactor_max_4x79_split_1_builds_and_matches_numpy():
    done = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]
