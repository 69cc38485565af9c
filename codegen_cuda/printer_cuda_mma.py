"""CUDA C for the tensor-core intrinsics of :mod:`ember.tir.tensor_core`.

Used by :class:`ember.codegen_cuda.printer_cuda.CUDAPrinter` for ``Evaluate`` statements
of those calls and for allocations in the ``wmma.*`` scopes. ``mma.sync`` and
``ldmatrix`` are inline PTX (``asm volatile``) on the 32-bit registers of per-thread
``local`` arrays (a pair of 16-bit elements, or one float, per register, the array being
16-byte aligned); ``ldmatrix`` takes a shared-space address
(``__cvta_generic_to_shared``). The wmma API is ``nvcuda::wmma`` from ``<mma.h>``
(NVRTC finds it among the CUDA headers, :func:`ember.codegen_cuda.nvrtc.include_dirs`);
a ``matrix_a``/``matrix_b`` fragment's C++ type carries its layout, taken from the
``tvm_load_matrix_sync`` calls that fill it.
"""

from __future__ import annotations

from ember.codegen_cuda.printer_cuda_protocol import CUDAPrinting
from ember.errors import InternalError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer
from ember.tir.functor import post_order_visit
from ember.tir.tensor_core import WMMA_ELEMS, mma_spec

I = E.Intrinsic  # noqa: E741
WMMA = "nvcuda::wmma::"


def _pointer(p: CUDAPrinting, var: E.PrimExpr) -> str:
    name = p.names.get(var) if isinstance(var, E.Var) else None
    if name is None:
        raise InternalError(f"tensor-core call on {var!r}, which is not a buffer of the kernel")
    return name


def _at(p: CUDAPrinting, var: E.PrimExpr, offset: E.PrimExpr) -> str:
    """``name + offset`` (just ``name`` at offset 0)."""
    base = _pointer(p, var)
    return base if E.is_const_int(offset, 0) else f"({base} + {p.expr(offset)})"


def _regs(p: CUDAPrinting, var: E.PrimExpr, offset: E.PrimExpr, n: int, cons: str) -> list[str]:
    """``n`` 32-bit registers of a local array from ``offset``, as asm operands."""
    words = f"((unsigned int*){_at(p, var, offset)})"
    return [f'"{cons}"({words}[{k}])' for k in range(n)]


def _operands(first: int, n: int) -> str:
    return "{" + ", ".join(f"%{first + k}" for k in range(n)) + "}"


def print_mma(p: CUDAPrinting, e: E.Call) -> None:
    """Emits inline PTX ``mma.sync`` for one warp-level matrix multiply-accumulate."""
    shape, _, _, in_dtype, _, acc_dtype = (a.value for a in e.args[:6])  # type: ignore[attr-defined]
    spec = mma_spec(shape, in_dtype, acc_dtype)
    a, a_off, b, b_off, c, c_off = e.args[6:]
    wide = in_dtype != "tf32"
    na, nb = (spec.a_elems // 2, spec.b_elems // 2) if wide else (spec.a_elems, spec.b_elems)
    if acc_dtype == "float32":
        base = _at(p, c, c_off)
        outs = [f'"+f"({base}[{k}])' for k in range(spec.c_elems)]
    else:
        outs = _regs(p, c, c_off, spec.c_elems // 2, "+r")
    nc = len(outs)
    ins = _regs(p, a, a_off, na, "r") + _regs(p, b, b_off, nb, "r")
    text = (
        f"{spec.ptx} {_operands(0, nc)}, {_operands(nc, na)}, {_operands(nc + na, nb)}, "
        f"{_operands(0, nc)};\\n"
    )
    p.line(f'asm volatile("{text}"')
    p.line(f"    : {', '.join(outs)}")
    p.line(f"    : {', '.join(ins)});")


def print_ldmatrix(p: CUDAPrinting, e: E.Call) -> None:
    """Emits inline PTX ``ldmatrix``, loading shared-memory tiles into mma operand registers."""
    trans, num = (E.const_value(x) for x in e.args[:2])
    dst, dst_off, src, src_off = e.args[3:]
    addr = p.names.fresh("ldmatrix_addr")
    with p.block(""):
        shared = _at(p, src, src_off)
        p.line(f"unsigned int {addr} = (unsigned int)__cvta_generic_to_shared({shared});")
        kind = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"
        p.line(f'asm volatile("{kind} {_operands(0, int(num))}, [%{num}];\\n"')
        p.line(f"    : {', '.join(_regs(p, dst, dst_off, int(num), '=r'))}")
        p.line(f'    : "r"({addr}));')


def _fragment(p: CUDAPrinting, var: E.PrimExpr, index: E.PrimExpr) -> str:
    return f"{_pointer(p, var)}[{p.expr(index)}]"


def print_wmma(p: CUDAPrinting, e: E.Call) -> None:
    """Emits the ``nvcuda::wmma`` call for a fill, load, store or multiply-accumulate intrinsic."""
    p.headers.add("mma.h")
    if e.op is I.TVM_FILL_FRAGMENT:
        frag, _, _, _, index, value = e.args
        p.line(f"{WMMA}fill_fragment({_fragment(p, frag, index)}, {p.expr(value)});")
    elif e.op is I.TVM_MMA_SYNC:
        frags = ", ".join(_fragment(p, e.args[k], e.args[k + 1]) for k in range(0, 8, 2))
        p.line(f"{WMMA}mma_sync({frags});")
    else:
        frag, _, _, _, index, ptr, off, stride, layout = e.args
        assert isinstance(layout, E.StringImm)
        mem = f", {WMMA}mem_{layout.value}"
        f, where, ld = _fragment(p, frag, index), _at(p, ptr, off), p.expr(stride)
        if e.op is I.TVM_LOAD_MATRIX_SYNC:
            accumulator = p.fragment_scopes.get(frag) == "wmma.accumulator"
            p.line(f"{WMMA}load_matrix_sync({f}, {where}, {ld}{mem if accumulator else ''});")
        else:
            p.line(f"{WMMA}store_matrix_sync({where}, {f}, {ld}{mem});")


def print_tensor_core(p: CUDAPrinting, e: E.Call) -> None:
    """The statement(s) of one tensor-core call."""
    if e.op is I.PTX_MMA:
        print_mma(p, e)
    elif e.op is I.PTX_LDMATRIX:
        print_ldmatrix(p, e)
    else:
        print_wmma(p, e)


def fragment_layouts(body: S.Stmt) -> dict[E.Var, str]:
    """The layout each ``matrix_a``/``matrix_b`` fragment is loaded with (its C++ type's)."""
    layouts: dict[E.Var, str] = {}

    def visit(n: object) -> None:
        if isinstance(n, E.Call) and n.op is I.TVM_LOAD_MATRIX_SYNC:
            frag, layout = n.args[0], n.args[8]
            assert isinstance(frag, E.Var) and isinstance(layout, E.StringImm)
            if layouts.setdefault(frag, layout.value) != layout.value:
                raise InternalError(
                    f"wmma fragment '{frag.name}' is loaded both row- and column-major; a "
                    "fragment's layout is part of its type"
                )

    post_order_visit(body, visit, once=True)
    return layouts


def print_fragment_allocation(p: CUDAPrinting, buf: Buffer, count: int) -> str:
    """``nvcuda::wmma::fragment<...> name[count];`` for a ``wmma.*`` allocation."""
    p.headers.add("mma.h")
    use = buf.scope.split(".")[1]
    ctype = p.type_name(buf.dtype)
    layout = ""
    if use != "accumulator":
        layout = f", {WMMA}{p.fragment_layouts.get(buf.data, 'row_major')}"
    name = p.names.bind(buf.data, buf.name)
    p.fragment_scopes[buf.data] = buf.scope
    return f"{WMMA}fragment<{WMMA}{use}, 16, 16, 16, {ctype}{layout}> {name}[{count}];"


def fragment_count(buf: Buffer) -> int:
    """How many 16x16 wmma fragments (256 elements each) a fragment-scope buffer holds."""
    size = buf.flat_size()
    if not isinstance(size, E.IntImm) or size.value % WMMA_ELEMS:
        raise InternalError(f"wmma fragment array '{buf.name}' has size {size!r}, not k * 256")
    return size.value // WMMA_ELEMS


__all__ = ["fragment_layouts", "print_fragment_allocation", "print_tensor_core"]
