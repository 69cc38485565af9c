"""TVM APIs that TE programs call and Ember lacked (issue 22), each used as TVM's tests and
tutorials use it, with results checked against numpy: ``tir.stmt_functor`` in the
"Writing a Customized Pass" tutorial, ``IterVar`` iteration types and
``Stage.iter_var_attrs``, ``te.div``, the ``"float"`` dtype, ``Allocate.extents``,
``Schedule.normalize``, ``decl_buffer(data_alignment=, offset_factor=)``,
``cuda.kernels_output_dir``, ``Module.save`` and ``export_library(fcompile=)``, and
``contrib.cblas.matmul`` in the extern_op tutorial."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ember as tvm
from ember import te
from tests.tvm_scripts.common import CUDA


def test_low_level_custom_pass_tutorial():
    n = tvm.tir.const(128, "int32")
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((n,), lambda i: a[i] + b[i], name="c")
    sch = te.create_schedule(c.op)
    loops = []

    def find_width8(op):
        """Find all the 'tir.For' nodes whose extent can be divided by 8."""
        if isinstance(op, tvm.tir.For):
            if isinstance(op.extent, tvm.tir.IntImm):
                if op.extent.value % 8 == 0:
                    loops.append(op)

    def vectorize8(op):
        """Split can vectorize the loops found in `find_width8`."""
        if op in loops:
            extent = op.extent.value
            name = op.loop_var.name
            lo, li = te.var(name + ".outer"), te.var(name + ".inner")
            body = tvm.tir.stmt_functor.substitute(op.body, {op.loop_var: lo * 8 + li})
            body = tvm.tir.For(li, 0, 8, tvm.tir.ForKind.VECTORIZED, body)
            body = tvm.tir.For(lo, 0, extent // 8, tvm.tir.ForKind.SERIAL, body)
            return body
        return None

    @tvm.tir.transform.prim_func_pass(opt_level=0)
    def vectorize(f, mod, ctx):
        tvm.tir.stmt_functor.post_order_visit(f.body, find_width8)
        if not loops:
            return f
        return f.with_body(tvm.tir.stmt_functor.ir_transform(f.body, None, vectorize8, ["tir.For"]))

    with tvm.transform.PassContext(config={"tir.add_lower_pass": [(1, vectorize)]}):
        text = str(tvm.lower(sch, [a, b, c]))
        f = tvm.build(sch, [a, b, c], "llvm")
    assert "ramp(i.outer * 8, 1, 8)" in text and "for i.outer in range(16)" in text
    x, y = np.random.uniform(-1, 1, (2, 128)).astype("float32")
    z = np.full(128, np.nan, "float32")
    f(x, y, z)
    np.testing.assert_allclose(z, x + y, rtol=1e-6)


def test_ir_transform_preorder_replaces_and_skips_children():
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i] * 3.0, name="B")
    func = tvm.lower(te.create_schedule(B.op), [A, B])
    seen = []

    def pre(op):
        seen.append(type(op).__name__)
        if isinstance(op, tvm.tir.BufferStore):
            return tvm.tir.BufferStore(op.buffer, op.value + 1.0, op.indices)
        return None

    body = tvm.tir.stmt_functor.ir_transform(func.body, pre, None, ["tir.BufferStore", "For"])
    assert seen == ["For", "BufferStore"]  # children of the replaced store are not visited
    f = tvm.build(func.with_body(body), target="llvm")
    a = np.random.default_rng(0).uniform(-1, 1, 6).astype("float32")
    b = np.full(6, np.nan, "float32")
    f(a, b)
    # atol: LLVM may fuse a*3+1 into one FMA, which rounds once where numpy rounds twice;
    # near a = -1/3 the sum cancels and that one rounding is a large relative error
    np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-6, atol=1e-6)


def test_allocate_extents():
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i, j] + 1, name="B")
    C = te.compute((5, 7), lambda i, j: B[i, j] * 2, name="C")
    s = te.create_schedule(C.op)
    allocs = []
    tvm.tir.stmt_functor.post_order_visit(
        tvm.lower(s, [A, C]).body,
        lambda n: allocs.append(n) if isinstance(n, tvm.tir.Allocate) else None,
    )
    (alloc,) = allocs
    assert [e.value for e in alloc.extents] == [35]  # flattened, as TVM's lower() prints it
    assert alloc.dtype == "float32" and alloc.buffer_var is alloc.buffer.data


def test_iter_var_attrs_iter_types():
    """test_te_schedule's test_vectorize and test_pragma (the key part)."""
    m = te.size_var("m")
    n = te.size_var("n")
    A = te.placeholder((m, n), name="A")
    T = te.compute((m, n), lambda i, j: A[i, j])
    s = te.create_schedule(T.op)
    xo, yo, xi, yi = s[T].tile(T.op.axis[0], T.op.axis[1], x_factor=10, y_factor=5)
    s[T].vectorize(yi)
    s[T].unroll(xi)
    s[T].pragma(xo, "pragma1")
    UNROLL = tvm.te.schedule.IterVar.Unrolled
    VECTORIZE = tvm.te.schedule.IterVar.Vectorized
    assert s[T].iter_var_attrs[xi].iter_type == UNROLL
    assert s[T].iter_var_attrs[yi].iter_type == VECTORIZE
    assert s[T].iter_var_attrs[xo].pragma_keys[0].value == "pragma1"
    s[T].parallel(xo)
    assert s[T].iter_var_attrs[xo].iter_type == tvm.tir.IterVar.Parallelized
    assert T.op.axis[0].iter_type == tvm.tir.IterVar.DataPar
    k = te.reduce_axis((0, 4))
    assert k.iter_type == tvm.te.IterVar.CommReduce
    f = tvm.build(s, [A, T], "llvm")
    a = np.random.uniform(size=(23, 12)).astype("float32")
    t = np.full((23, 12), np.nan, "float32")
    f(a, t)
    np.testing.assert_array_equal(t, a)


def test_te_div_truncates_integers_and_divides_floats():
    A = te.placeholder((9,), name="A", dtype="int32")
    X = te.placeholder((9,), name="X", dtype="float")
    B = te.compute((9,), lambda i: te.div(A[i], 4), name="B")
    Y = te.compute((9,), lambda i: te.div(X[i], 4.0), name="Y")
    assert X.dtype == "float32" and Y.dtype == "float32"
    s = te.create_schedule([B.op, Y.op])
    f = tvm.build(s, [A, X, B, Y], "llvm")
    a = np.array([-9, -8, -7, -1, 0, 1, 3, 4, 9], "int32")
    x = np.random.uniform(-5, 5, 9).astype("float32")
    b = np.full(9, 77, "int32")
    y = np.full(9, np.nan, "float32")
    f(a, x, b, y)
    np.testing.assert_array_equal(b, np.trunc(a / 4).astype("int32"))
    np.testing.assert_allclose(y, x / 4, rtol=1e-6)
    assert tvm.nd.empty((3,), "float").numpy().dtype == np.float32


def test_schedule_normalize_legalizes_invalid_attach():
    """test_te_schedule's test_legalize_invalid_attach, through normalize and lower."""
    A = te.compute((10, 10), lambda i, j: 1.0, name="A")
    B = te.compute((10, 10), lambda i, j: A[i][j], name="B")
    s = te.create_schedule([B.op])
    s[A].compute_at(s[B], B.op.axis[1])
    _, inner = s[B].split(B.op.axis[1], 2)
    s = s.normalize()
    assert s[A].attach_ivar is inner
    stmt = tvm.lower(s, [A, B], simple_mode=True).body
    assert isinstance(stmt.body.body, tvm.tir.For)
    s = te.create_schedule([B.op])
    s[A].compute_at(s[B], B.op.axis[1])
    fused = s[B].fuse(B.op.axis[0], B.op.axis[1])
    assert s.normalize()[A].attach_ivar is fused
    b = np.full((10, 10), np.nan, "float32")
    a = np.full((10, 10), np.nan, "float32")
    tvm.build(s, [A, B], "llvm")(a, b)
    np.testing.assert_array_equal(b, np.ones((10, 10), "float32"))


def test_partial_index_then_more_indices():
    """TVM's ``A[i][j]`` (test_legalize_invalid_attach writes it) is ``A[i, j]``; a partial
    index used as a value is an ArgumentError."""
    A = te.placeholder((3, 4), name="A")
    B = te.compute((3, 4), lambda i, j: A[i][j] * 2.0, name="B")
    with pytest.raises(tvm.ArgumentError, match="indexed with 1"):
        te.compute((3,), lambda i: A[i] + 1, name="C")
    a = np.random.uniform(size=(3, 4)).astype("float32")
    b = np.full((3, 4), np.nan, "float32")
    tvm.build(te.create_schedule(B.op), [A, B], "llvm")(a, b)
    np.testing.assert_allclose(b, a * 2, rtol=1e-6)


def test_decl_buffer_data_alignment_and_offset_factor():
    buf = tvm.tir.decl_buffer((16,), "float32", name="X", data_alignment=32, offset_factor=1)
    assert buf.align == 32 and buf.elem_offset is not None
    with pytest.raises(tvm.ArgumentError, match="power of two"):
        tvm.tir.decl_buffer((16,), "float32", data_alignment=24)
    # as a tensor intrinsic's binding, then tensorized at an offset
    x = te.placeholder((8,), name="x")
    y = te.compute((8,), lambda i: x[i] * 2.0, name="y")
    binds = {
        t: tvm.tir.decl_buffer(t.shape, t.dtype, name=t.name, offset_factor=1, data_alignment=4)
        for t in (x, y)
    }

    def fcompute(ins, outs):
        ib = tvm.tir.ir_builder.create()
        with ib.for_range(0, 8, name="i") as i:
            ib.store(outs[0], (i,), ins[0][i] * 2.0)
        return ib.get()

    intrin = te.decl_tensor_intrin(y.op, fcompute, binds=binds)
    X = te.placeholder((5, 8), name="X")
    Y = te.compute((5, 8), lambda i, j: X[i, j] * 2.0, name="Y")
    s = te.create_schedule(Y.op)
    s[Y].tensorize(Y.op.axis[1], intrin)
    f = tvm.build(s, [X, Y], "llvm")
    a = np.random.uniform(size=(5, 8)).astype("float32")
    b = np.full((5, 8), np.nan, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 2, rtol=1e-6)


def test_cuda_kernels_output_dir(tmp_path):
    n, lanes = 64, 2
    A = te.placeholder((n,), name="A", dtype="float32x%d" % lanes)  # noqa: UP031
    B = te.compute((n,), lambda i: A[i] + tvm.tir.const(1, A.dtype), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    out = tmp_path / "kernels"
    with tvm.transform.PassContext(opt_level=3, config={"cuda.kernels_output_dir": str(out)}):
        mod = tvm.build(s, [A, B], CUDA)
    assert "tvm_kernels.cu" in os.listdir(out)
    assert (out / "tvm_kernels.cu").read_text() == mod.get_source()
    a = np.random.uniform(size=(n, lanes)).astype("float32")
    b = np.full((n, lanes), np.nan, "float32")
    mod.emulate(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)
    with pytest.raises(tvm.ArgumentError, match="directory path"):
        tvm.transform.PassContext(config={"cuda.kernels_output_dir": 3})


def test_module_save_and_export_library_with_fcompile(tmp_path):
    """tensor_expr_get_started's "Save and Load Compiled Modules", with contrib.cc."""
    from ember.contrib import cc

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    fadd = tvm.build(s, [A, B, C], "llvm", name="myadd")
    fadd.save(str(tmp_path / "myadd.o"))
    fadd.save(str(tmp_path / "myadd.ll"))
    cc.create_shared(str(tmp_path / "myadd.so"), [str(tmp_path / "myadd.o")])
    fadd.export_library(str(tmp_path / "myadd_pack.so"), fcompile=cc.create_shared)
    assert "define" in (tmp_path / "myadd.ll").read_text()
    for lib in ("myadd.so", "myadd_pack.so"):
        fadd1 = tvm.runtime.load_module(str(tmp_path / lib))
        a = np.random.uniform(size=13).astype("float32")
        b = np.random.uniform(size=13).astype("float32")
        c = np.full(13, np.nan, "float32")
        fadd1(a, b, c)
        np.testing.assert_allclose(c, a + b, rtol=1e-6)
    with pytest.raises(tvm.ArgumentError, match="unknown format"):
        fadd.save(str(tmp_path / "myadd.txt"))

    def broken(output, objects, options=None):
        raise RuntimeError("no linker here")

    with pytest.raises(tvm.CompileError, match="no linker here"):
        fadd.export_library(str(tmp_path / "x.so"), fcompile=broken)


def test_extern_op_tutorial_with_cblas():
    from ember.contrib import cblas

    assert tvm.get_global_func("tvm.contrib.cblas.matmul", allow_missing=True)
    n, l, m = 37, 16, 23
    bias = te.var("bias", dtype="float32")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    C = te.extern(
        (n, m),
        [A, B],
        lambda ins, outs: tvm.tir.call_packed(
            "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False
        ),
        name="C",
    )
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    s = te.create_schedule(D.op)
    dev = tvm.cpu(0)
    f = tvm.build(s, [A, B, D, bias], "llvm")
    a = tvm.nd.array(np.random.uniform(size=(n, l)).astype(A.dtype), dev)
    b = tvm.nd.array(np.random.uniform(size=(l, m)).astype(B.dtype), dev)
    d = tvm.nd.array(np.zeros((n, m), dtype=D.dtype), dev)
    bb = 10.0
    f(a, b, d, bb)
    np.testing.assert_allclose(d.numpy(), np.dot(a.numpy(), b.numpy()) + 10, rtol=1e-5)
    C = cblas.matmul(A, B)
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    s = te.create_schedule(D.op)
    f = tvm.build(s, [A, B, D, bias], "llvm")
    d = tvm.nd.array(np.zeros((n, m), dtype=D.dtype), dev)
    f(a, b, d, 2.5)
    np.testing.assert_allclose(d.numpy(), np.dot(a.numpy(), b.numpy()) + 2.5, rtol=1e-5)
    Ct = cblas.matmul(B, A, transa=True, transb=True)
    s = te.create_schedule(Ct.op)
    c = np.full((m, n), np.nan, "float32")
    tvm.build(s, [A, B, Ct], "llvm")(a, b, c)
    np.testing.assert_allclose(c, (a.numpy() @ b.numpy()).T, rtol=1e-5)


def test_tensor_intrin_scalar_params_in_tensorize():
    """test_te_schedule.test_tensor_intrin_scalar_params's declaration, tensorized: the
    scalar parameters take the stage's values (``v = i + 1``, ``w = 3.0``)."""
    n = 8
    x = te.placeholder((n,), name="x")
    v = te.var("v", dtype="float32")
    w = te.var("w", dtype="float32")
    z = te.compute((n,), lambda i: x[i] * v + w, name="z")

    def intrin_func(ins, outs, sp):
        assert sp[0] is v and sp[1] is w
        ib = tvm.tir.ir_builder.create()
        with ib.for_range(0, n, name="i") as i:
            ib.store(outs[0], (i,), ins[0][i] * sp[0] + sp[1])
        return ib.get()

    intrin = te.decl_tensor_intrin(
        z.op, intrin_func, scalar_params=[v, w], default_buffer_params={"offset_factor": 1}
    )
    assert intrin.op == z.op
    assert intrin.reduce_init is None
    assert tuple(intrin.inputs) == tuple(z.op.input_tensors)
    assert tuple(intrin.scalar_params) == (v, w)
    A = te.placeholder((5, 16), name="A")
    C = te.compute((5, 16), lambda i, j: A[i, j] * (i + 1).astype("float32") + 3.0, name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].tensorize(ji, intrin)
    f = tvm.build(s, [A, C], "llvm")
    a = np.random.uniform(-1, 1, (5, 16)).astype("float32")
    c = np.full((5, 16), np.nan, "float32")
    f(a, c)
    want = a * np.arange(1, 6, dtype="float32")[:, None] + 3
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)  # a fused multiply-add may round once
    # a value that changes inside the region cannot be a scalar parameter
    C2 = te.compute((5, 16), lambda i, j: A[i, j] * j.astype("float32") + 3.0, name="C2")
    s = te.create_schedule(C2.op)
    jo, ji = s[C2].split(C2.op.axis[1], factor=8)
    s[C2].tensorize(ji, intrin)
    with pytest.raises(tvm.ScheduleError, match="changes inside the tensorized region"):
        tvm.lower(s, [A, C2])


def test_vscale_in_a_split_is_one_granule():
    """Ember's targets have fixed-width vectors: ``4 * vscale()`` splits by 4."""
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4 * tvm.tir.vscale())
    s[B].vectorize(xi)
    assert "vectorized(4)" in str(tvm.lower(s, [A, B], simple_mode=True))
    a = np.random.uniform(size=37).astype("float32")
    b = np.full(37, np.nan, "float32")
    tvm.build(s, [A, B], "llvm")(a, b)
    np.testing.assert_allclose(b, a * 2, rtol=1e-6)


GEMV_C = """
int gemv_update(float *cc, float *aa, float *bb, int m, int l, int stride) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < l; ++j) {
      cc[i] += aa[j] * bb[i * stride + j];
    }
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def gemv_library(tmp_path_factory):
    """The tensorize tutorial's C function, compiled and loaded into the process (the
    tutorial links it with ``pragma(x, "import_llvm", ...)``; Ember resolves
    ``call_extern`` symbols from the process)."""
    import subprocess

    import llvmlite.binding as llvm

    from ember.runtime.export import find_c_compiler

    try:
        cc = find_c_compiler()
    except tvm.EmberError:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("gemv")
    (folder / "gemv.c").write_text(GEMV_C)
    lib = folder / "libgemv.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(folder / "gemv.c")], check=True
    )
    llvm.load_library_permanently(str(lib))
    return lib


def _intrin_gemv(m, l):
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Ab = tvm.tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1])
    Bb = tvm.tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1, strides=[te.var("s1"), 1])
    Cb = tvm.tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1])

    def intrin_func(ins, outs):
        ib = tvm.tir.ir_builder.create()
        aa, bb = ins
        cc = outs[0]
        ib.emit(
            tvm.tir.call_extern(
                "int32",
                "gemv_update",
                cc.access_ptr("w"),
                aa.access_ptr("r"),
                bb.access_ptr("r"),
                m,
                l,
                bb.strides[0],
            )
        )
        return ib.get()

    return te.decl_tensor_intrin(c.op, intrin_func, binds={a: Ab, b: Bb, c: Cb})


@pytest.mark.parametrize("N, M, L", [(64, 48, 32), (5, 16, 7)])
def test_tensorize_tutorial_with_access_ptr(gemv_library, N, M, L):
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((M, L), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    factor = 16
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=factor)
    s[C].reorder(x, yo, yi, z)
    s[C].tensorize(yi, _intrin_gemv(factor, L))
    assert "access_ptr(C" in str(tvm.lower(s, [A, B, C], simple_mode=True))
    func = tvm.build(s, [A, B, C], target="llvm", name="gemv")
    a = np.random.uniform(size=(N, L)).astype(A.dtype)
    b = np.random.uniform(size=(M, L)).astype(B.dtype)
    c = np.zeros((N, M), dtype=C.dtype)  # the tutorial's gemv_update accumulates into C
    a.flags.writeable = False  # read through access_ptr("r"): a read-only input is fine
    func(a, b, c)
    np.testing.assert_allclose(c, np.dot(a, b.T), rtol=1e-4)


def test_access_ptr_on_cuda_prints_pointer_arithmetic():
    x = te.placeholder((1,), name="x")
    z = te.compute((1,), lambda i: x[i], name="z")

    def fcompute(ins, outs):
        ib = tvm.tir.ir_builder.create()
        ib.emit(tvm.tir.call_extern("float32", "atomicAdd", outs[0].access_ptr("w"), ins[0][0]))
        return ib.get()

    intrin = te.decl_tensor_intrin(z.op, fcompute, name="atomic_add")
    A = te.placeholder((64,), name="A")
    C = te.compute((64,), lambda i: A[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=1)
    bx, tx = s[C].split(xo, factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].tensorize(xi, intrin)
    mod = tvm.build(s, [A, C], CUDA)  # NVRTC compiles it where installed
    src = mod.get_source()
    assert "atomicAdd((C + i_outer_outer * 32 + i_outer_inner)" in src
    assert "const float* __restrict__ C" not in src  # written through the pointer
    with pytest.raises(tvm.EmberError):  # the emulator has no addresses
        mod.emulate(np.zeros(64, "float32"), np.zeros(64, "float32"))
    with pytest.raises(tvm.ArgumentError, match="access_mask"):
        tvm.tir.decl_buffer((4,), "float32").access_ptr("x")
