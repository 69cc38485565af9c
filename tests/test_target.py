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
