"""Whole-vector loads and stores for the CUDA printer (``float4``, ``uint4`` carriers).

A Ramp index of stride 1 whose base is provably a multiple of the lane count, on
a buffer aligned at least to the vector's size, is read and written as one
access: ``float4 A_v = *(const float4*)(A + base);`` and ``make_float4(...)`` for
types with named lanes, a raw ``uint4``/``uint2``/``unsigned int`` carrier through
a 16-byte aligned lane array for the others (eight halves, four int8s). Anything
else falls back to the base printer's lane-by-lane code. This is the one place
that decides what the hardware's vector memory instructions are used for.
"""

from __future__ import annotations

from ember.codegen_cuda.printer_c import ADD, PRIMARY, CPrinter, Text
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.buffer import Buffer

# Whole-vector types with named lanes and a make_ function, by vector dtype.
VECTOR_TYPES: dict[str, str] = {
    "float32x2": "float2",
    "float32x4": "float4",
    "int32x2": "int2",
    "int32x4": "int4",
    "uint32x2": "uint2",
    "uint32x4": "uint4",
    "float64x2": "double2",
    "int64x2": "longlong2",
}
# Other vectors move through a raw carrier of the same size (8 halves in a uint4).
CARRIERS: dict[int, str] = {4: "unsigned int", 8: "uint2", 16: "uint4"}
LANE_FIELDS = ("x", "y", "z", "w")
VECTOR_ALIGN = 16  # shared and local arrays are declared __align__(16)


class CUDAVectorMemory(CPrinter):
    """The vector-access hooks of :class:`ember.codegen_cuda.printer_cuda.CUDAPrinter`."""

    # -- vector memory ----------------------------------------------------------------
    def _vector_access(self, buf: Buffer, index: E.PrimExpr) -> tuple[str, bool] | None:
        """The vector type for a whole access at ``index`` (and whether it has fields)."""
        if not isinstance(index, E.Ramp) or not E.is_const_int(index.stride, 1):
            return None
        dtype = dt.with_lanes(buf.dtype, index.lanes)
        size = dt.bytes_of(dtype)
        if dt.is_bool(dtype) or size not in CARRIERS:
            return None
        align = VECTOR_ALIGN if buf.scope in ("shared", "local") else buf.align
        if align % size or not self.divisible(index.base, index.lanes):
            return None
        if dtype in VECTOR_TYPES:
            return VECTOR_TYPES[dtype], True
        return CARRIERS[size], False

    def _address(self, buf: Buffer, index: E.Ramp) -> str:
        base = self.wrap(self.print(index.base), ADD + 1)
        return f"{self.buffer_ref(buf)} + {base}"

    def print_vector_load(self, e: E.BufferLoad, lane: int) -> Text | None:
        index = self.flat_index(e.buffer, e.indices)
        access = self._vector_access(e.buffer, index)
        if access is None:
            return None
        vtype, fields = access
        name = self._hoisted.get(id(e))
        if name is None:
            assert isinstance(index, E.Ramp)
            name = self.names.fresh(f"{e.buffer.name}_v")
            address = self._address(e.buffer, index)
            if fields:
                self.hoist(f"{vtype} {name} = *(const {vtype}*)({address});")
            else:
                ctype = self.type_name(e.buffer.dtype)
                self.hoist(f"__align__(16) {ctype} {name}[{index.lanes}];")
                self.hoist(f"*({vtype}*){name} = *(const {vtype}*)({address});")
            self._hoisted[id(e)] = name
        return (f"{name}.{LANE_FIELDS[lane]}" if fields else f"{name}[{lane}]"), PRIMARY

    def print_guarded_vector(self, e: E.Call, lane: int) -> Text:
        """A lane of ``if_then_else(c, t, f)`` on vectors with one scalar condition ``c``.

        The lanes are filled by an ``if (c) {...} else {...}`` hoisted before the
        statement, each branch with the whole-vector loads its side needs, so a
        padded fetch reads ``float4``s only where the whole vector is in bounds and
        never touches memory outside (a ``c ? A_v.x : 0`` would load ``A_v`` first).
        """
        name = self._hoisted.get(id(e))
        if name is None:
            cond, t, f = e.args
            lanes = dt.lanes_of(e.dtype)
            c = self.expr(cond)
            name = self.names.fresh("guarded")
            ctype = self.type_name(dt.element_of(e.dtype))
            self.hoist(f"__align__(16) {ctype} {name}[{lanes}];")
            self.hoist(f"if ({c}) {{")
            self._hoist_lanes(name, t, lanes)
            self.hoist("} else {")
            self._hoist_lanes(name, f, lanes)
            self.hoist("}")
            self._hoisted[id(e)] = name
        return f"{name}[{lane}]", PRIMARY

    def _hoist_lanes(self, name: str, side: E.PrimExpr, lanes: int) -> None:
        """Hoist ``name[k] = side[k];`` for each lane, after the loads ``side`` hoists
        (kept inside the branch: they are not visible to the rest of the statement)."""
        outer_pending, outer_hoisted = self._pending, self._hoisted
        self._pending, self._hoisted = [], {}
        try:
            values = [self.expr(side, k) for k in range(lanes)]
            inner = self._pending
        finally:
            self._pending, self._hoisted = outer_pending, outer_hoisted
        unit = self.indent_unit
        for decl in inner:
            self.hoist(unit + decl)
        for k, value in enumerate(values):
            self.hoist(f"{unit}{name}[{k}] = {value};")

    def print_vector_store(self, s: S.BufferStore) -> bool:
        index = self.flat_index(s.buffer, s.indices)
        access = self._vector_access(s.buffer, index)
        if access is None or dt.lanes_of(s.value.dtype) != dt.lanes_of(index.dtype):
            return False
        assert isinstance(index, E.Ramp)
        vtype, fields = access
        values = [self.expr(s.value, k) for k in range(index.lanes)]
        if fields:
            address = self._address(s.buffer, index)
            self.line(f"*({vtype}*)({address}) = make_{vtype}({', '.join(values)});")
            return True
        with self.block(""):
            tmp = self.names.fresh("lanes")
            ctype = self.type_name(s.buffer.dtype)
            self.line(f"__align__(16) {ctype} {tmp}[{index.lanes}] = {{{', '.join(values)}}};")
            self.line(f"*({vtype}*)({self._address(s.buffer, index)}) = *(const {vtype}*){tmp};")
        return True


__all__ = ["CARRIERS", "VECTOR_TYPES", "CUDAVectorMemory"]
