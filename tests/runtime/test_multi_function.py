"""Several functions in one module, as TVM users build them: an IRModule of lowered
functions (``IRModule({...})``, ``update``, item assignment) or a ``{target: IRModule}``
dict through ``ember.build``; each entry point fetched by name and checked against
numpy on random data, on LLVM, in the CUDA emulator and through an export/load round trip.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as tvm
from ember import te
from ember.errors import ArgumentError

GPU = "cuda -arch=sm_80"


def _add(n: int, target: str) -> tuple[object, list[object]]:
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    if target.startswith("cuda"):
        bx, tx = s[C].split(C.op.axis[0], factor=32)
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def _mul_rows(m: int, k: int, target: str) -> tuple[object, list[object]]:
    """out[i] = sum_k X[i, k] * w[k] - a reduction, with a second kernel-free shape."""
    X = te.placeholder((m, k), name="X")
    w = te.placeholder((k,), name="w")
    r = te.reduce_axis((0, k), name="r")
    Y = te.compute((m,), lambda i: te.sum(X[i, r] * w[r], axis=r), name="Y")
    s = te.create_schedule(Y.op)
    if target.startswith("cuda"):
        bx, tx = s[Y].split(Y.op.axis[0], factor=16)
        s[Y].bind(bx, te.thread_axis("blockIdx.x"))
        s[Y].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [X, w, Y]


def _irmodule(target: str, n: int = 37, m: int = 19, k: int = 13) -> tvm.IRModule:
    s1, a1 = _add(n, target)
    s2, a2 = _mul_rows(m, k, target)
    return tvm.IRModule(
        {"add": tvm.lower(s1, a1, name="add")["add"], "mul": tvm.lower(s2, a2, name="mul")}
    )


def _check_both(run_add, run_mul, n: int = 37, m: int = 19, k: int = 13) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(n, "float32"), rng.standard_normal(n, "float32")
    c = np.full(n, np.nan, "float32")
    run_add(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    x, w = rng.standard_normal((m, k), "float32"), rng.standard_normal(k, "float32")
    y = np.full(m, np.nan, "float32")
    run_mul(x, w, y)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-5)


def test_llvm_module_of_two_functions() -> None:
    m = tvm.build(_irmodule("llvm"), target="llvm")
    assert m.function_names == ["add", "mul"]
    _check_both(m["add"], m.get_function("mul"))
    _check_both(m, m["mul"])  # calling the module calls its first function


def test_cuda_module_of_two_functions_in_the_emulator() -> None:
    m = tvm.build(_irmodule(GPU), target=GPU)
    _check_both(m["add"].emulate, lambda *a: m.emulate(*a, func_name="mul"))
    _check_both(m.emulate, m["mul"].emulate)


def test_cuda_functions_run_emulated_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    m = tvm.build(_irmodule(GPU), target=GPU)
    _check_both(m["add"], m["mul"])


@pytest.mark.nvrtc
def test_cuda_module_is_one_nvrtc_program_with_every_kernel() -> None:
    m = tvm.build(_irmodule(GPU), target=GPU)
    src = m.get_source()
    assert "add_kernel" in src and "mul_kernel" in src
    assert src.count('extern "C" __global__') == 2
    assert set(m.compile().resources) == {"add_kernel", "mul_kernel"}


def test_update_and_item_assignment_build_one_module() -> None:
    s1, a1 = _add(37, "llvm")
    s2, a2 = _mul_rows(19, 13, "llvm")
    mod = tvm.IRModule.from_expr(tvm.lower(s1, a1, name="add"))
    mod.update(tvm.IRModule({"mul": tvm.lower(s2, a2, name="f")}))  # renamed to its key
    assert list(mod) == ["add", "mul"] and "mul" in mod and mod["mul"].name == "mul"
    m = tvm.build({"llvm": mod})
    _check_both(m["add"], m["mul"])
    mod["add"] = tvm.lower(s2, a2, name="g")  # as TVM, assignment replaces
    assert tvm.build(mod, target="llvm")["add"].signature.params[0].name == "X"


def test_export_and_load_keep_every_function(tmp_path) -> None:
    m = tvm.build(_irmodule("llvm"), target="llvm")
    path = tmp_path / "two.so"
    m.export_library(path)
    loaded = tvm.runtime.load_module(path)
    assert loaded.function_names == ["add", "mul"]
    _check_both(loaded["add"], loaded.get_function("mul"))


def test_symbolic_and_static_functions_share_a_module() -> None:
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s2, a2 = _add(37, "llvm")
    m = tvm.build(tvm.IRModule({"affine": tvm.lower(s, [A, B]), "add": tvm.lower(s2, a2)}))
    rng = np.random.default_rng(1)
    for size in (1, 7, 64):
        a = rng.standard_normal(size, "float32")
        b = np.full(size, np.nan, "float32")
        m["affine"](a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_unknown_function_name_lists_the_names() -> None:
    m = tvm.build(_irmodule("llvm"), target="llvm")
    with pytest.raises(ArgumentError, match="no function 'sub'.*add, mul"):
        m["sub"]
    cm = tvm.build(_irmodule(GPU), target=GPU)
    with pytest.raises(ArgumentError, match="no function 'sub'.*add, mul"):
        cm.emulate(func_name="sub")
    with pytest.raises(ArgumentError, match="no function 'sub'.*add, mul"):
        _irmodule("llvm")["sub"]


def test_duplicate_names_are_errors() -> None:
    class GV:  # a key spelled as TVM's GlobalVar, by name_hint
        def __init__(self, name: str) -> None:
            self.name_hint = name

    s1, a1 = _add(8, "llvm")
    f = tvm.lower(s1, a1, name="add")
    with pytest.raises(ArgumentError, match="two functions are named 'add'"):
        tvm.IRModule({GV("add"): f, "add": f})
    # 'free' is exported as 'ember_fn_free' (generated code calls free), so these collide
    with pytest.raises(ArgumentError, match="must differ"):
        tvm.build(tvm.IRModule({"free": f, "ember_fn_free": f}), target="llvm")


def test_bad_build_inputs() -> None:
    mod = _irmodule("llvm")
    with pytest.raises(ArgumentError, match="one target"):
        tvm.build({"llvm": mod, GPU: mod})
    with pytest.raises(ArgumentError, match="build takes a schedule.*got list"):
        tvm.build([mod["add"]], target="llvm")
    with pytest.raises(ArgumentError, match="needs args"):
        tvm.build(_add(8, "llvm")[0], target="llvm")
    with pytest.raises(ArgumentError, match="C identifier"):
        tvm.IRModule({"not a name": mod["add"]})
    with pytest.raises(ArgumentError, match="PrimFunc"):
        tvm.IRModule({"x": 3})
    with pytest.raises(ArgumentError, match="no functions"):
        tvm.build(tvm.IRModule(), target="llvm")
