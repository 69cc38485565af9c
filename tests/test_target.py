"""Target strings: parsing, canonical form, and clear errors."""

from __future__ import annotations

import pytest

import ember
from ember.target import Target


def test_canonical_form_sorts_options():
    t = Target.parse("llvm -num-threads=2 -mcpu=skylake-avx512")
    assert str(t) == "llvm -mcpu=skylake-avx512 -num-threads=2"
    assert t.mcpu == "skylake-avx512" and Target.parse("llvm").mcpu == "native"
    assert Target.parse("cuda -arch=sm_90").arch == "sm_90"


@pytest.mark.parametrize(
    "text,phrase",
    [
        ("", "target must be a string"),
        ("opencl", "unknown target kind 'opencl'"),
        ("llvm -arch=sm_80", "unknown option -arch for target 'llvm'"),
        ("cuda -arch=", "empty value"),
        ("cuda arch", "must look like -key=value"),
    ],
)
def test_bad_targets(text, phrase):
    with pytest.raises(ember.ArgumentError, match=phrase):
        Target.parse(text)


@pytest.mark.parametrize("kind", ["llvm", "cuda"])
@pytest.mark.parametrize(
    "flag,on",
    [("", False), (" -fast-math", True), (" -fast-math=1", True), (" -fast-math=0", False)],
)
def test_fast_math_reads_the_same_on_every_target(kind, flag, on):
    """``-fast-math`` is one option with one reading; on CUDA it used to be refused by the
    parser, so the backend's branch for it could never run."""
    assert Target.parse(kind + flag).flag("fast-math") is on


def test_cuda_fast_math_reaches_the_module():
    from ember import te

    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    assert ember.build(s, [A, B], target="cuda -fast-math").fast_math
    assert not ember.build(s, [A, B], target="cuda").fast_math


def test_target_facts_come_from_the_kind_table():
    assert (
        Target.parse("cuda").thread_warp_size == 32 and Target.parse("llvm").thread_warp_size == 1
    )
    assert Target.parse("cuda -max-threads-per-block=256").max_num_threads == 256
    assert Target.parse("cuda").keys == ("cuda", "gpu") and Target.parse("llvm").keys == ("cpu",)
