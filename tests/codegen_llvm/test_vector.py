"""Vector accesses and operations: ramps of stride 1 to 4, gathers, broadcasts, selects, zmm."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from tests.codegen_llvm.llvm_helpers import (
    build,
    load,
    loop,
    map_func,
    param,
    ramp,
    rand,
    sentinel,
    store,
)


def test_stride_two_gather(rng):
    n, lanes = 40, 8
    A, out = param("A", (2 * n,)), param("out", (n,))
    body = loop(
        n // lanes,
        lambda i: store(
            out, ramp(i * lanes, lanes), load(A, ramp(i * 2 * lanes, lanes, stride=2), lanes)
        ),
    )
    mod = build(S.PrimFunc("gather2", (A, out), body))
    a = rand(2 * n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a[::2])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "float16"])
@pytest.mark.parametrize("stride", [2, 3, 4])
@pytest.mark.parametrize("lanes", [4, 16, 28])
def test_strided_load_is_a_masked_load_and_a_shuffle(dtype, stride, lanes, rng):
    n = 3 * lanes
    A, out = param("A", (stride * (n - 1) + 1,), dtype), param("out", (n,), dtype)
    body = loop(
        n // lanes,
        lambda i: store(
            out,
            ramp(i * lanes, lanes),
            load(A, ramp(i * stride * lanes, lanes, stride=stride), lanes),
        ),
    )
    mod = build(S.PrimFunc("strided", (A, out), body))
    assert "llvm.masked.load" in mod.get_source("ll-unopt")
    a = rand(stride * (n - 1) + 1, dtype, rng)
    o = sentinel(n, dtype)
    mod(a, o)
    np.testing.assert_array_equal(o, a[::stride])


def test_strided_load_reads_nothing_past_its_last_lane(rng):
    """The last lane's element ends the array, right before a page the process may not
    read: the masked load must not touch the stride - 1 elements a plain load would."""
    import ctypes
    import mmap

    lanes, stride = 16, 2
    page = mmap.PAGESIZE
    region = mmap.mmap(-1, 2 * page)
    libc = ctypes.CDLL(None, use_errno=True)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    assert libc.mprotect(ctypes.c_void_p(base + page), page, 0) == 0  # PROT_NONE
    count = stride * (lanes - 1) + 1
    a = np.frombuffer(region, np.float32, count, page - 4 * count)
    a[:] = rand(count, "float32", rng)
    A, out = param("A", (count,)), param("out", (lanes,))
    body = store(out, ramp(0, lanes), load(A, ramp(0, lanes, stride=stride), lanes))
    mod = build(S.PrimFunc("edge", (A, out), body))
    o = sentinel(lanes, "float32")
    mod(a, o)  # a read past the end would fault on the protected page
    np.testing.assert_array_equal(o, a[::stride])
    libc.mprotect(ctypes.c_void_p(base + page), page, 3)
    del a


def test_stride_two_scatter_leaves_gaps(rng):
    n, lanes = 40, 8
    A, out = param("A", (n,)), param("out", (2 * n,))
    body = loop(
        n // lanes,
        lambda i: store(
            out, ramp(i * 2 * lanes, lanes, stride=2), load(A, ramp(i * lanes, lanes), lanes)
        ),
    )
    mod = build(S.PrimFunc("scatter2", (A, out), body))
    a = rand(n, "float32", rng)
    o = np.full(2 * n, -7.0, dtype=np.float32)
    mod(a, o)
    np.testing.assert_array_equal(o[::2], a)
    assert (o[1::2] == -7.0).all()


def test_broadcast_plus_ramp_index_is_one_vector_load(rng):
    n, lanes = 64, 16
    A, out = param("A", (n,)), param("out", (n,))

    def body(i):
        idx = E.Broadcast(dt.with_lanes("int32", lanes), i * lanes, lanes) + ramp(0, lanes)
        return store(out, idx, load(A, idx, lanes) * E.const(2.0, "float32"))

    mod = build(S.PrimFunc("bcast_idx", (A, out), loop(n // lanes, body)))
    ll = mod.get_source("ll-unopt")
    assert "load <16 x float>" in ll and "store <16 x float>" in ll
    a = rand(n, "float32", rng)
    o = sentinel(n, "float32")
    mod(a, o)
    np.testing.assert_array_equal(o, a * 2)


def test_indirect_gather(rng):
    n, lanes = 48, 8
    A, idx_buf, out = param("A", (100,)), param("idx", (n,), "int32"), param("out", (n,))
    body = loop(
        n // lanes,
        lambda i: store(
            out,
            ramp(i * lanes, lanes),
            load(A, load(idx_buf, ramp(i * lanes, lanes), lanes), lanes),
        ),
    )
    mod = build(S.PrimFunc("indirect", (A, idx_buf, out), body))
    a = rand(100, "float32", rng)
    idx = rng.integers(0, 100, size=n).astype(np.int32)
    o = sentinel(n, "float32")
    mod(a, idx, o)
    np.testing.assert_array_equal(o, a[idx])


def test_broadcast_of_scalar_load(rng):
    n, lanes = 37, 8
    A, s, out = param("A", (n,)), param("s", (1,)), param("out", (n,))

    def fn(i_vec):
        return store(
            out,
            i_vec,
            load(A, i_vec, lanes)
            * E.Broadcast(dt.with_lanes("float32", lanes), load(s, E.const(0)), lanes),
        )

    body = S.seq(
        loop(n // lanes, lambda i: fn(ramp(i * lanes, lanes))),
        loop(
            n % lanes,
            lambda i: store(out, i, load(A, i) * load(s, E.const(0))),
            start=n - n % lanes,
        ),
    )
    mod = build(S.PrimFunc("bscale", (A, s, out), body))
    a, sv = rand(n, "float32", rng), np.array([1.5], np.float32)
    o = sentinel(n, "float32")
    mod(a, sv, o)
    np.testing.assert_array_equal(o, a * sv[0])


@pytest.mark.parametrize("lanes", [1, 8])
def test_select_and_vector_compare(lanes, rng):
    f = map_func(
        "sel",
        ["float32", "float32"],
        "float32",
        lambda a, b: E.select(a > b, a, b * 2.0),
        37,
        lanes=lanes,
    )
    mod = build(f)
    a, b = rand(37, "float32", rng), rand(37, "float32", rng)
    o = sentinel(37, "float32")
    mod(a, b, o)
    np.testing.assert_array_equal(o, np.where(a > b, a, b * np.float32(2)))


@pytest.mark.parametrize("lanes", [1, 16])
def test_compare_stored_as_bool(lanes, rng):
    f = map_func(
        "cmp", ["int32", "int32"], "bool", lambda a, b: (a <= b) | E.ne(a, b + 3), 37, lanes=lanes
    )
    mod = build(f)
    a, b = rand(37, "int32", rng), rand(37, "int32", rng)
    o = sentinel(37, "bool")
    mod(a, b, o)
    np.testing.assert_array_equal(o, (a <= b) | (a != b + 3))


def test_scalar_condition_selects_vectors(rng):
    n, lanes = 32, 16
    A, B, flag, out = (
        param("A", (n,)),
        param("B", (n,)),
        param("flag", (1,), "int32"),
        param("out", (n,)),
    )

    def body(i):
        idx = ramp(i * lanes, lanes)
        cond = load(flag, E.const(0)) > 0
        return store(
            out,
            idx,
            E.Select(
                dt.with_lanes("float32", lanes), cond, load(A, idx, lanes), load(B, idx, lanes)
            ),
        )

    mod = build(S.PrimFunc("ssel", (A, B, flag, out), loop(n // lanes, body)))
    a, b = rand(n, "float32", rng), rand(n, "float32", rng)
    for f, want in ((1, a), (-1, b)):
        o = sentinel(n, "float32")
        mod(a, b, np.array([f], np.int32), o)
        np.testing.assert_array_equal(o, want)


def test_ramp_as_value():
    n, lanes = 48, 16
    out = param("out", (n,), "int32")
    body = loop(
        n // lanes,
        lambda i: store(
            out, ramp(i * lanes, lanes), E.Ramp("int32x16", i * lanes * 3, E.const(3), lanes)
        ),
    )
    mod = build(S.PrimFunc("iota3", (out,), body))
    o = sentinel(n, "int32")
    mod(o)
    np.testing.assert_array_equal(o, np.arange(n) * 3)


def _host_has_avx512() -> bool:
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


@pytest.mark.skipif(not _host_has_avx512(), reason="host CPU has no AVX-512")
def test_float32x16_uses_zmm_registers(rng):
    f = map_func("vadd", ["float32", "float32"], "float32", lambda a, b: a * b + a, 256, lanes=16)
    mod = build(f)
    asm = mod.get_source("asm")
    assert "zmm" in asm
    a, b = rand(256, "float32", rng), rand(256, "float32", rng)
    o = sentinel(256, "float32")
    mod(a, b, o)
    np.testing.assert_allclose(o, a * b + a, rtol=1e-6)


def test_target_without_avx512_uses_no_zmm():
    f = map_func("vadd", ["float32", "float32"], "float32", lambda a, b: a + b, 256, lanes=16)
    mod = build(f, target="llvm -mcpu=haswell")
    assert "zmm" not in mod.get_source("asm") and "ymm" in mod.get_source("asm")


def test_nontemporal_stores_to_the_marked_buffer_only(rng):
    """Inside a ``nontemporal_stores`` attribute the vector stores to its buffer carry
    ``!nontemporal`` and a fence follows the body; the same body's stores to another buffer,
    and its scalar stores, stay plain. The values are the same either way."""
    from ember.codegen_llvm.memory import NONTEMPORAL

    n, lanes = 64, 8
    A, out, other = param("A", (n,)), param("out", (n + 1,)), param("other", (n,))

    def body(i: E.Var) -> S.Stmt:
        v = load(A, ramp(i * lanes, lanes), lanes)
        return S.SeqStmt(
            (store(out, ramp(i * lanes, lanes), v), store(other, ramp(i * lanes, lanes), v + v))
        )

    tail = store(out, E.const(n, "int32"), load(A, E.const(0, "int32")))
    marked = S.AttrStmt(
        out.data, NONTEMPORAL, E.const(1, "int32"), S.SeqStmt((loop(n // lanes, body), tail))
    )
    mod = build(S.PrimFunc("copy_nt", (A, out, other), marked))
    ir = mod.get_source()
    nt = [line.strip() for line in ir.splitlines() if "!nontemporal" in line]
    assert nt and all(line.startswith("store <8 x float>") for line in nt)
    assert ir.count("fence seq_cst") == 1
    stores = [line for line in ir.splitlines() if line.strip().startswith("store <8 x float>")]
    assert len(stores) > len(nt)  # the stores to ``other`` stay plain
    a = rand(n, "float32", rng)
    o, p = sentinel(n + 1, "float32"), sentinel(n, "float32")
    mod(a, o, p)
    np.testing.assert_array_equal(o, np.append(a, a[0]))
    np.testing.assert_array_equal(p, a + a)
