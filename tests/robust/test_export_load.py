"""export_library / load_module on hostile paths and files: no crash, no stale code, no overrun."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError


def _scale(n: int, c: float):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * c + 0.5, name="B")
    return ember.build(te.create_schedule(B.op), [A, B], target="llvm", name="scale")


def test_reexport_over_a_loaded_library_in_a_subprocess(tmp_path: Path) -> None:
    """Re-exporting over a mapped library rewrote it in place and the next call segfaulted;
    run in a subprocess so a regression cannot take the test session down."""
    script = textwrap.dedent(f"""
        import numpy as np, ember
        from tests.robust.test_export_load import _scale
        path = {str(tmp_path / "m.so")!r}
        rng = np.random.default_rng(3)
        a = rng.uniform(-2, 2, 37).astype(np.float32)
        out = np.full(37, np.nan, np.float32)
        _scale(37, 2.0).export_library(path)
        first = ember.runtime.load_module(path)
        first(a, out); np.testing.assert_allclose(out, a * 2 + 0.5, rtol=1e-6)
        _scale(37, 3.0).export_library(path)          # over the mapped file
        first(a, out); np.testing.assert_allclose(out, a * 2 + 0.5, rtol=1e-6)
        second = ember.runtime.load_module(path)      # the new code, not the mapped old one
        second(a, out); np.testing.assert_allclose(out, a * 3 + 0.5, rtol=1e-6)
        first.export_library(path)                    # a loaded module copies itself back
        third = ember.runtime.load_module(path)
        third(a, out); np.testing.assert_allclose(out, a * 2 + 0.5, rtol=1e-6)
        print("OK")
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert "OK" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.so"]  # no temporary files left


def test_export_leaves_no_temporary_file_on_failure(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "fakecc"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    with pytest.raises(ember.CompileError):
        _scale(8, 2.0).export_library(tmp_path / "out" / "x.so")
    assert not any((tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else True


def test_export_to_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="is a directory; give a file path"):
        _scale(8, 2.0).export_library(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_export_to_unwritable_folder(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ArgumentError, match="cannot write"):
            _scale(8, 2.0).export_library(ro / "x.so")
    finally:
        ro.chmod(0o700)


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs sysfs")
def test_export_to_sysfs_even_as_root() -> None:
    with pytest.raises(ArgumentError, match="cannot write to /sys"):
        _scale(8, 2.0).export_library("/sys/ember_test.so")


def test_export_below_a_file(tmp_path: Path) -> None:
    """A parent 'folder' that is a file: the error names it instead of FileExistsError."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ArgumentError, match="cannot create the folder"):
        _scale(8, 2.0).export_library(blocker / "sub" / "x.so")


def test_loaded_module_export_to_directory(tmp_path: Path) -> None:
    path = tmp_path / "m.so"
    _scale(8, 2.0).export_library(path)
    loaded = ember.runtime.load_module(path)
    with pytest.raises(ArgumentError, match="is a directory"):
        loaded.export_library(tmp_path)


def test_cuda_module_export_message() -> None:
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    mod = ember.build(s, [A, B], target="cuda -arch=sm_80")
    with pytest.raises(ArgumentError, match="a cuda module cannot be exported") as info:
        mod.export_library("x.so")
    assert "module module" not in str(info.value)


def _patch(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) >= 1, old
    path.write_bytes(data.replace(old, new))


def test_metadata_with_edited_shapes_is_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    """The code loops over 1000 elements; metadata edited to say 1 would let a call pass
    one-element arrays and write past them. Any edit (same length, so the ELF stays valid)
    is refused at load."""
    path = tmp_path / "m.so"
    mod = _scale(1000, 2.0)
    mod.export_library(path)
    loaded = ember.runtime.load_module(path)  # the untouched file loads and computes
    a = rng.uniform(-1, 1, 1000).astype("float32")
    out = np.full(1000, np.nan, "float32")
    loaded(a, out)
    np.testing.assert_allclose(out, a * 2 + 0.5, rtol=1e-6)
    for edited in (b'"shape": [9000]', b'"shape": [   1]'):
        bad = tmp_path / f"bad{len(list(tmp_path.iterdir()))}.so"
        bad.write_bytes(path.read_bytes())
        _patch(bad, b'"shape": [1000]', edited)
        with pytest.raises(ArgumentError, match="does not match its hash.*export the module"):
            ember.runtime.load_module(bad)


def test_metadata_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "m.so"
    _scale(1000, 2.0).export_library(path)
    _patch(path, b'"shape": [1000]', b'"shape": {1000]')
    with pytest.raises(ArgumentError, match="not valid JSON"):
        ember.runtime.load_module(path)


def test_a_library_links_the_jits_own_object_code(tmp_path: Path, monkeypatch, rng) -> None:  # noqa: ANN001
    """One code generation per kernel: the JIT's object code (position-independent, with the
    metadata linked in) is what the library links; LLVM is not asked for it again."""
    from ember.codegen_llvm import jit

    mod = _scale(29, 1.5)

    def no_second_codegen(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("object code emitted a second time")

    monkeypatch.setattr(jit, "emit", no_second_codegen)
    path = tmp_path / "m.so"
    mod.export_library(str(path))
    loaded = ember.runtime.load_module(str(path))
    a = rng.uniform(-2, 2, 29).astype(np.float32)
    out = np.full(29, np.nan, np.float32)
    loaded(a, out)
    np.testing.assert_allclose(out, a * 1.5 + 0.5, rtol=1e-6)
    assert loaded.get_source("ll") == mod.get_source("ll")  # the metadata came along
