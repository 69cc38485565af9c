"""NVRTC compilation of printed kernels for sm_80 and sm_90: PTX, cubin, resources, errors, cache.

These need cuda-python with NVRTC (no GPU); they skip where it is not installed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ember.codegen_cuda.nvrtc import compile_cuda, format_compile_error, include_dirs
from ember.codegen_cuda.printer_cuda import print_kernel, print_module
from ember.errors import ArgumentError, CompileError, DeviceError
from tests.codegen_cuda import handmade_kernels as K

ARCHS = ["sm_80", "sm_90"]
KERNELS = {
    "elementwise": lambda: K.elementwise(1000, 128),
    "elementwise_f16": lambda: K.elementwise(777, 64, "float16"),
    "tiled_matmul": lambda: K.tiled_matmul(70, 50, 33, tile=16),
    "cooperative_fetch": lambda: K.cooperative_fetch(512),
    "vector_f32x4": lambda: K.vector_copy(1024, 4, "float32"),
    "vector_misaligned": lambda: K.vector_copy(1024, 4, "float32", offset=1),
    "vector_f16x8": lambda: K.vector_copy(1024, 8, "float16"),
    "vector_bf16x2": lambda: K.vector_copy(1024, 2, "bfloat16"),
    "strided_gather": lambda: K.strided_gather(256),
    "intrinsics_f32": lambda: K.intrinsics("float32"),
    "intrinsics_f64": lambda: K.intrinsics("float64"),
    "intrinsics_f16": lambda: K.intrinsics("float16"),
    "intrinsics_bf16": lambda: K.intrinsics("bfloat16"),
    "bf16_casts": lambda: K.casts(),
    "division_i32": lambda: K.index_division(300, "int32"),
    "division_i64": lambda: K.index_division(300, "int64"),
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cuda-cache"))


def _needs_nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc")


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_compiles_to_ptx_and_cubin(name, arch):
    _needs_nvrtc()
    func = KERNELS[name]()
    compiled = compile_cuda(print_kernel(func), arch)
    assert f".target {arch}" in compiled.ptx and f".entry {func.name}(" in compiled.ptx
    assert compiled.cubin[:4] == b"\x7fELF"
    usage = compiled.resources[func.name]
    threads = func.attr("launch")[1]
    assert 0 < usage.registers <= 255
    assert usage.max_threads == threads[0] * threads[1] * threads[2]
    assert usage.spill_bytes == 0


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_shared_memory_is_reported(arch):
    _needs_nvrtc()
    compiled = compile_cuda(print_kernel(K.cooperative_fetch(512)), arch)
    assert compiled.resources["reverse_tiles"].shared_bytes >= 2048
    matmul = compile_cuda(print_kernel(K.tiled_matmul(64, 64, 64, 16)), arch)
    assert matmul.resources["tiled_matmul"].shared_bytes >= 2 * 16 * 16 * 4
    assert (
        compile_cuda(print_kernel(K.elementwise()), arch).resources["elementwise"].shared_bytes == 0
    )


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_more_than_48k_of_shared_memory_compiles_as_dynamic(arch):
    _needs_nvrtc()
    compiled = compile_cuda(print_kernel(K.cooperative_fetch(16384)), arch)
    usage = compiled.resources["reverse_tiles"]
    assert usage.shared_bytes == 0 and usage.dynamic_shared_bytes == 65536


@pytest.mark.nvrtc
def test_module_reports_every_kernel():
    _needs_nvrtc()
    funcs = [K.elementwise(), K.casts(), K.intrinsics("float16")]
    compiled = compile_cuda(print_module(funcs), "sm_80")
    assert set(compiled.resources) == {f.name for f in funcs}


@pytest.mark.nvrtc
def test_fast_math_compiles():
    _needs_nvrtc()
    func = K.intrinsics("float32").with_attr("fast_math", True)
    compiled = compile_cuda(print_kernel(func), "sm_90", fast_math=True)
    assert "ex2.approx" in compiled.ptx


@pytest.mark.nvrtc
def test_compile_error_marks_the_offending_line():
    _needs_nvrtc()
    source = print_kernel(K.elementwise()).replace("* 2.0f", "* undefined_thing")
    with pytest.raises(CompileError) as info:
        compile_cuda(source, "sm_80", use_cache=False)
    err = info.value
    bad = next(n for n, text in enumerate(source.splitlines(), 1) if "undefined_thing" in text)
    assert "NVRTC could not compile" in str(err) and "sm_80" in str(err)
    assert 'identifier "undefined_thing" is undefined' in str(err)
    assert f"  > {bad} |     B[bx * 128 + tx] = A[bx * 128 + tx] * undefined_thing" in str(err)
    assert f"    {bad - 1} | " in str(err)  # context around it, unmarked
    assert err.source == source and "undefined_thing" in err.log


@pytest.mark.nvrtc
def test_disk_cache_hits_on_second_compile(tmp_path, monkeypatch):
    _needs_nvrtc()
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_DISK_CACHE", "1")
    source = print_kernel(K.tiled_matmul(32, 32, 32, 16))
    first = compile_cuda(source, "sm_80")
    second = compile_cuda(source, "sm_80")
    assert not first.from_cache and second.from_cache
    assert second.ptx == first.ptx and second.cubin == first.cubin
    assert second.resources == first.resources
    assert not compile_cuda(source, "sm_90").from_cache  # the arch is part of the key
    assert not compile_cuda(source, "sm_80", fast_math=True).from_cache
    assert len(list((tmp_path / "cuda").iterdir())) == 3


@pytest.mark.nvrtc
def test_headers_come_from_the_wheels():
    _needs_nvrtc()
    dirs = include_dirs()
    assert dirs and all("site-packages" in d or "dist-packages" in d for d in dirs)


def test_unknown_arch_is_an_argument_error():
    with pytest.raises(ArgumentError, match="sm_80"):
        compile_cuda("", "ampere")


def test_missing_cuda_python_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    with pytest.raises(DeviceError, match=r"pip install ember\[cuda\]"):
        compile_cuda(print_kernel(K.elementwise()), "sm_80", use_cache=False)


def test_compile_error_format_without_nvrtc():
    source = "\n".join(f"line {n}" for n in range(1, 11))
    log = (
        'ember_kernels.cu(3): error: expected a ";"\n'
        "cuda_fp16.hpp(120): error: something in a header\n"
        'ember_kernels.cu(9): error: identifier "q" is undefined\n'
        '3 errors detected in the compilation of "ember_kernels.cu".\n'
    )
    text = format_compile_error(source, log, "sm_90")
    assert text.startswith("NVRTC could not compile 'ember_kernels.cu' for sm_90:")
    assert "  >  3 | line 3" in text and "     1 | line 1" in text and "     5 | line 5" in text
    assert "  >  9 | line 9" in text and "    10 | line 10" in text
    assert "line 120" not in text and "cuda_fp16.hpp(120): error" in text
    assert format_compile_error(source, "", "sm_80").endswith("(no log)")


def test_importing_the_backend_does_not_import_cuda():
    code = (
        "import sys, ember, ember.codegen_cuda as c\n"
        "import ember.codegen_cuda.nvrtc, ember.codegen_cuda.printer_cuda\n"
        "assert c.print_kernel and c.ResourceUsage\n"
        "assert not [m for m in sys.modules if m == 'cuda' or m.startswith('cuda.')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.nvrtc
@pytest.mark.parametrize("off", [("EMBER_CACHE_DIR", ""), ("EMBER_DISK_CACHE", "0")])
def test_the_disk_cache_switches_turn_the_nvrtc_cache_off(monkeypatch, off):
    _needs_nvrtc()
    monkeypatch.setenv(*off)
    source = print_kernel(K.elementwise(333, 64))
    assert not compile_cuda(source, "sm_80").from_cache
    assert not compile_cuda(source, "sm_80").from_cache
