"""Code follows the TARGET's CPU features, never the host's (issue 22, item 10 follow-up).

``matmul_int8.llvm`` tensorizes to AVX-512 VNNI whatever the target; built for a
portable ``-mcpu=x86-64-v3`` on a VNNI host, LLVM aborted the whole process. The
builds run in a subprocess, so an abort shows as a failed test, not a dead run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ember.codegen_llvm.cpu_features import built_for, host_mismatch
from ember.codegen_llvm.cpu_intrinsics import CpuFacts, expansion_for
from ember.errors import CompileError

TARGETS = (
    "llvm",
    "llvm -mcpu=x86-64-v3",
    "llvm -mcpu=x86-64-v4",
    "llvm -mcpu=x86-64",
    "llvm -mcpu=haswell",
    "llvm -mattr=-avx512vnni",
    "llvm -mattr=-avx512f",
)

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import ember
    from ember.codegen_llvm.schedules.matmul_int8 import matmul_int8_llvm, pack_b
    from ember.codegen_llvm.tensor_intrinsics import has_vnni

    M, N, K = 5, 37, 45  # odd: a row guard, a partial panel, k padded to 48
    rng = np.random.default_rng(22)
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64)  # numpy, in int64: no overflow
    out = {}
    for target in sys.argv[1:]:
        s, args = matmul_int8_llvm(M, N, K)
        f = ember.build(s, args, target=target)
        c = np.zeros((M, N), np.int32)
        try:  # code this CPU cannot run is refused, not entered
            f(a, pack_b(b), c)
            refused = ""
        except ember.DeviceError as e:
            refused = str(e)
        out[target] = {
            "exact": bool(np.array_equal(c, want)),
            "refused": refused,
            "vpdpbusd": "vpdpbusd" in f.get_source("ll"),
            "has_vnni": has_vnni(target),
        }
    print(json.dumps(out))
    """
)


def test_item_10_int8_template_follows_target_features() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *TARGETS], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stderr[-3000:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for target in TARGETS:
        got = results[target]
        missing = host_mismatch(built_for(target), unknown_ok=True)
        if missing is None:
            assert got["exact"] and not got["refused"], (target, got)
        else:  # built for more than this host has (x86-64-v4 on an AVX2 machine)
            assert "cannot run on this machine" in got["refused"], (target, got)
            assert missing in got["refused"], (target, got)
        # the VNNI instruction only where the target has it, never on a portable level
        assert got["vpdpbusd"] == got["has_vnni"], (target, got)
    for portable in TARGETS[1:]:
        assert not results[portable]["has_vnni"], portable


_X86_V3 = CpuFacts("x86_64-unknown-linux-gnu", frozenset({"avx", "avx2", "fma", "sse2"}))


def test_item_10_target_specific_intrinsics_checked() -> None:
    """An intrinsic the target cannot run is refused (or expanded), never handed to LLVM."""
    assert expansion_for("llvm.x86.avx512.vpdpbusd.512", _X86_V3) is not None
    assert expansion_for("llvm.x86.avx2.pmadd.wd", _X86_V3) is None
    with pytest.raises(CompileError, match="avx512f"):
        expansion_for("llvm.x86.avx512.permvar.sf.512", _X86_V3)
    with pytest.raises(CompileError, match="aarch64 architecture"):
        expansion_for("llvm.aarch64.neon.sdot.v4i32.v16i8", _X86_V3)
    unknown_cpu = CpuFacts("x86_64-unknown-linux-gnu", None)  # -mcpu=skylake-avx512
    assert expansion_for("llvm.x86.avx512.vpdpbusd.512", unknown_cpu) is not None
    assert expansion_for("llvm.fma.v4f32", _X86_V3) is None  # generic: any CPU


def test_item_10_int8_template_tunes_for_a_portable_target(tmp_path) -> None:  # noqa: ANN001
    """The tuner builds, runs and checks each candidate for the task's target (isolated
    processes), against the template's numpy reference, which must itself be numpy's
    product at an N that is not whole 16-column panels (it returned the padded width)."""
    import numpy as np

    from ember.codegen_llvm.schedules.matmul_int8 import pack_b
    from ember.tuner.task import create_task
    from ember.tuner.template import lookup_template
    from ember.tuner.tune import tune

    M, N, K = 5, 37, 45
    rng = np.random.default_rng(10)
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    reference = lookup_template("matmul_int8.llvm").reference
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(reference(a, pack_b(b), workload=(M, N, K)), want)

    task = create_task("matmul_int8.llvm", (M, N, K), target="llvm -mcpu=x86-64-v3")
    result = tune(task, n_trials=2, records=tmp_path / "r.jsonl")
    errors = [t.result.message for t in result.trials if t.result.error.value != "ok"]
    assert not errors, errors
    assert result.best_config is not None
