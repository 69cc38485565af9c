"""The runtime Module: argument checks, named functions, timing, sources, export and load."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.codegen_llvm import jit
from ember.codegen_llvm.module import metadata_ir
from ember.errors import ArgumentError, CompileError
from ember.runtime import TimingResult, load_module
from ember.runtime.export import link_shared
from ember.tir import expr as E
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import (
    build,
    load,
    loop,
    map_func,
    param,
    rand,
    sentinel,
    store,
)


@pytest.fixture(scope="module")
def add_mod():
    return build(
        map_func("add", ["float32", "float32"], "float32", lambda a, b: a + b, 37, lanes=8)
    )


def _args(rng):
    return rand(37, "float32", rng), rand(37, "float32", rng), sentinel(37, "float32")


def test_call_by_module_and_by_name(add_mod, rng):
    a, b, c = _args(rng)
    add_mod(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    c2 = sentinel(37, "float32")
    add_mod["add"](a, b, c2)
    add_mod.get_function("add")(a, b, c2)
    np.testing.assert_array_equal(c2, a + b)
    assert add_mod.entry_name == "add" and add_mod.function_names == ["add"]


def test_wrong_arity(add_mod, rng):
    a, b, _ = _args(rng)
    with pytest.raises(ArgumentError, match=r"add: expected 3 arguments \(x0, x1, out\), got 2"):
        add_mod(a, b)


def test_wrong_shape(add_mod, rng):
    a, b, c = _args(rng)
    with pytest.raises(ArgumentError, match=r"argument 'x1' expects shape \(37,\), got \(36,\)"):
        add_mod(a, b[:36].copy(), c)


def test_wrong_dtype(add_mod, rng):
    a, b, c = _args(rng)
    with pytest.raises(ArgumentError, match=r"argument 'x0' expects dtype float32, got float64"):
        add_mod(a.astype(np.float64), b, c)


def test_not_an_array(add_mod, rng):
    _, b, c = _args(rng)
    with pytest.raises(ArgumentError, match=r"argument 'x0' must be a numpy array .* got list"):
        add_mod([1.0] * 37, b, c)


def test_non_contiguous(add_mod, rng):
    a, b, c = _args(rng)
    strided = np.repeat(a, 2)[::2]
    with pytest.raises(ArgumentError, match=r"argument 'x0' must be C-contiguous"):
        add_mod(strided, b, c)


def test_misaligned(add_mod, rng):
    a, b, c = _args(rng)
    raw = np.zeros(37 * 4 + 1, np.uint8)
    mis = raw[1:].view(np.float32)
    mis[:] = a
    with pytest.raises(ArgumentError, match=r"argument 'x0' is not aligned"):
        add_mod(mis, b, c)


def test_read_only_output(add_mod, rng):
    a, b, c = _args(rng)
    c.flags.writeable = False
    with pytest.raises(
        ArgumentError, match=r"argument 'out' is written by the function but the array is read-only"
    ):
        add_mod(a, b, c)


def test_read_only_input_is_fine(add_mod, rng):
    a, b, c = _args(rng)
    a.flags.writeable = False
    add_mod(a, b, c)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("which", ["same", "view"])
def test_output_overlapping_input(add_mod, which, rng):
    a, b, _ = _args(rng)
    out = a if which == "same" else np.concatenate([a, a])[:37]
    inp = a if which == "same" else out
    with pytest.raises(ArgumentError, match=r"output 'out' overlaps argument 'x0'"):
        add_mod(inp, b, out)


def test_inputs_may_share_memory(add_mod, rng):
    a, _, c = _args(rng)
    add_mod(a, a, c)
    np.testing.assert_array_equal(c, a + a)


def test_dlpack_argument(add_mod, rng):
    class Wrapped:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kwargs):
            return self.arr.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    a, b, c = _args(rng)
    add_mod(Wrapped(a), b, c)
    np.testing.assert_array_equal(c, a + b)


def test_unknown_function(add_mod):
    with pytest.raises(ArgumentError, match=r"no function 'nope' in this module; it has: add"):
        add_mod["nope"]


def test_bfloat16_takes_uint16_bits(rng):
    mod = build(map_func("bf", ["bfloat16"], "bfloat16", lambda a: a * 2.0, 9))
    with pytest.raises(
        ArgumentError, match=r"expects dtype uint16 \(bfloat16 data is passed as its uint16 bits\)"
    ):
        mod(np.ones(9, np.float32), sentinel(9, "bfloat16"))


def test_several_functions_in_one_module(rng):
    f = map_func("first", ["float32"], "float32", lambda a: a + 1.0, 10)
    g = map_func("second", ["int32"], "int32", lambda a: a * 3, 10)
    mod = build(f, g)
    assert mod.function_names == ["first", "second"]
    x = rand(10, "int32", rng)
    out = sentinel(10, "int32")
    mod["second"](x, out)
    np.testing.assert_array_equal(out, x * 3)
    with pytest.raises(ArgumentError, match=r"first: argument 'x0' expects dtype float32"):
        mod(x, out)


def test_function_named_like_a_libm_symbol_is_renamed(rng):
    mod = build(map_func("expf", ["float32"], "float32", lambda a: E.call(E.Intrinsic.EXP, a), 33))
    a = rand(33, "float32", rng)
    o = sentinel(33, "float32")
    mod["expf"](a, o)
    np.testing.assert_allclose(o, np.exp(a), rtol=1e-6)


def test_time_evaluator(add_mod, rng):
    result = add_mod.time_evaluator(number=5, repeat=4)(*_args(rng))
    assert isinstance(result, TimingResult) and len(result.results) == 4
    assert all(isinstance(t, float) and t > 0 for t in result.results)
    assert result.min <= result.median <= max(result.results) and result.mean > 0
    assert "ms" in str(result)
    slow = add_mod.time_evaluator(number=1, repeat=1, min_repeat_ms=5)(*_args(rng))
    assert slow.results[0] > 0


def test_time_evaluator_checks_arguments(add_mod, rng):
    a, b, _ = _args(rng)
    with pytest.raises(ArgumentError, match="expected 3 arguments"):
        add_mod.time_evaluator()(a, b)
    with pytest.raises(ArgumentError, match="number must be a positive integer"):
        add_mod.time_evaluator(number=0)
    with pytest.raises(ArgumentError, match="min_repeat_ms must be >= 0"):
        add_mod.time_evaluator(min_repeat_ms=-1)


def test_time_evaluator_takes_tvms_leading_name_and_device(add_mod, rng):
    """``mod.time_evaluator(mod.entry_name, dev, number=...)`` as TVM scripts call it."""
    a, b, out = _args(rng)
    result = add_mod.time_evaluator(add_mod.entry_name, "cpu", number=2, repeat=2)(a, b, out)
    assert len(result.results) == 2 and result.mean > 0
    assert add_mod.time_evaluator(add_mod.entry_name, "llvm", 1, 1)(a, b, out).mean > 0
    with pytest.raises(ArgumentError, match="cpu module cannot be timed on device 'cuda'"):
        add_mod.time_evaluator(add_mod.entry_name, "cuda")
    with pytest.raises(ArgumentError, match="unknown device 'tpu'"):
        add_mod.time_evaluator(add_mod.entry_name, "tpu")
    with pytest.raises(ArgumentError, match="no function 'nope'"):
        add_mod.time_evaluator("nope", "cpu")


def test_get_source(add_mod):
    assert "define" in add_mod.get_source()
    assert "define" in add_mod.get_source("ll") and "define" in add_mod.get_source("ll-unopt")
    asm = add_mod.get_source("asm")
    assert "add:" in asm or "add" in asm
    with pytest.raises(
        ArgumentError, match=r"unknown source format 'cuda'; this module has: ll, ll-unopt, asm"
    ):
        add_mod.get_source("cuda")


def _library_func() -> list[S.PrimFunc]:
    n = 129
    A, B, out = param("A", (n,)), param("B", (n,)), param("out", (n,))
    body = loop(
        n,
        lambda i: S.AssertStmt(
            load(A, i) > -50.0, "A must exceed -50", store(out, i, load(A, i) * load(B, i) + 1.0)
        ),
        kind=S.ForKind.PARALLEL,
    )
    g = map_func("neg", ["int64"], "int64", lambda a: E.const(0, "int64") - a, 5)
    return [S.PrimFunc("muladd", (A, B, out), body), g]


def test_export_and_load_in_fresh_process(tmp_path, rng):
    mod = build(*_library_func())
    path = tmp_path / "lib" / "muladd.so"
    mod.export_library(path)
    assert path.is_file()
    script = textwrap.dedent(f"""
        import numpy as np
        import ember.runtime as rt
        from ember.errors import ArgumentError
        mod = rt.load_module({str(path)!r})
        assert mod.function_names == ["muladd", "neg"], mod.function_names
        rng = np.random.default_rng(1)
        a = rng.uniform(-4, 4, 129).astype(np.float32)
        b = rng.uniform(-4, 4, 129).astype(np.float32)
        out = np.full(129, np.nan, np.float32)
        for threads in (1, 2):
            rt.set_num_threads(threads)
            mod(a, b, out)
            np.testing.assert_allclose(out, a * b + 1, rtol=1e-6)
        x = np.arange(5, dtype=np.int64) - 2
        y = np.full(5, 77, np.int64)
        mod["neg"](x, y)
        assert (y == -x).all()
        for bad, phrase in (((a, b), "expected 3 arguments"),
                            ((a, b, b), "overlaps"),
                            ((a.astype(np.float64), b, out), "expects dtype float32")):
            try:
                mod(*bad)
            except ArgumentError as e:
                assert phrase in str(e), str(e)
            else:
                raise SystemExit("no error for " + phrase)
        a[7] = -100
        try:
            mod(a, b, out)
        except ArgumentError as e:
            assert "A must exceed -50" in str(e)
        else:
            raise SystemExit("assert did not fire")
        assert "define" in mod.get_source("ll")
        print("OK", mod.time_evaluator(number=2)(np.abs(a), b, out).median > 0)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK True" in proc.stdout


def test_loaded_module_exports_again(tmp_path, rng):
    mod = build(map_func("twice", ["float32"], "float32", lambda a: a * 2.0, 16))
    first = tmp_path / "a.so"
    mod.export_library(first)
    loaded = load_module(first)
    second = tmp_path / "b.so"
    loaded.export_library(second)
    again = ember.runtime.load_module(second)
    a = rand(16, "float32", rng)
    o = sentinel(16, "float32")
    again(a, o)
    np.testing.assert_array_equal(o, a * 2)


def test_load_module_errors(tmp_path):
    with pytest.raises(ArgumentError, match="no file"):
        load_module(tmp_path / "missing.so")
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not a library")
    with pytest.raises(ArgumentError, match="cannot load module"):
        load_module(junk)
    libm = "/usr/lib/x86_64-linux-gnu/libm.so.6"
    if Path(libm).exists():
        with pytest.raises(ArgumentError, match="not a library exported by Ember"):
            load_module(libm)


def test_export_without_c_compiler(tmp_path, monkeypatch, add_mod):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompileError, match="needs a C compiler to link it"):
        add_mod.export_library(tmp_path / "x.so")


def test_export_link_failure_carries_log(tmp_path, monkeypatch, add_mod):
    fake = tmp_path / "fakecc"
    fake.write_text("#!/bin/sh\necho 'ld: cannot do it' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    with pytest.raises(CompileError, match="linking x.so failed") as info:
        add_mod.export_library(tmp_path / "x.so")
    assert "cannot do it" in info.value.log


def test_load_rejects_other_format_versions(tmp_path, add_mod):
    meta = dict(add_mod.metadata(), version=99)
    obj = jit.emit(
        add_mod.get_source("ll"), add_mod.spec, "object", extra_ll=metadata_ir(json.dumps(meta))
    )
    path = tmp_path / "future.so"
    link_shared(obj, path)
    with pytest.raises(ArgumentError, match="format 'ember-cpu-library' version 99"):
        load_module(path)
