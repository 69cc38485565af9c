"""What a compiled function expects of its arguments, and the checks made before every call.

A :class:`FunctionSignature` is built by a code generator from a PrimFunc and
travels with the compiled code (as JSON inside an exported library), so a
module loaded in a fresh process checks calls exactly as the one that was
built. :func:`check_arguments` turns the Python arguments into arrays and
rejects, with an ``ArgumentError`` naming the function and the parameter, any
call native code must not see: wrong arity, a non-array, a wrong shape or
dtype, a non-contiguous or misaligned array, a read-only output, or an output
overlapping another argument (compiled code assumes outputs alias nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.tir import dtype as dt


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    written: bool  # the function stores into it

    def describe(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class FunctionSignature:
    """Parameters in call order; ``errors[k-1]`` is the message of status code ``k``.

    ``symbol`` is the native function's name when it differs from ``name``
    (a name that a C library function already has is renamed).
    """

    name: str
    params: tuple[ParamSpec, ...]
    errors: tuple[str, ...] = ()
    symbol: str = ""

    @property
    def native_symbol(self) -> str:
        return self.symbol or self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": [
                {"name": p.name, "shape": list(p.shape), "dtype": p.dtype, "written": p.written}
                for p in self.params
            ],
            "errors": list(self.errors),
            "symbol": self.native_symbol,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> FunctionSignature:
        params = tuple(
            ParamSpec(p["name"], tuple(int(s) for s in p["shape"]), p["dtype"], bool(p["written"]))
            for p in data["params"]
        )
        errors = tuple(data.get("errors", ()))
        return FunctionSignature(data["name"], params, errors, data.get("symbol", ""))


def _as_array(sig: FunctionSignature, p: ParamSpec, x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError) as e:
            raise ArgumentError(
                f"{sig.name}: argument '{p.name}' ({type(x).__name__}) cannot be viewed as a CPU "
                f"array through DLPack: {e}"
            ) from e
    raise ArgumentError(
        f"{sig.name}: argument '{p.name}' must be a numpy array (or support DLPack), "
        f"got {type(x).__name__}"
    )


def _expected_dtype(p: ParamSpec) -> np.dtype:
    return dt.numpy_dtype(p.dtype)


def _check_one(sig: FunctionSignature, p: ParamSpec, x: Any) -> np.ndarray:
    arr = _as_array(sig, p, x)
    where = f"{sig.name}: argument '{p.name}'"
    if p.dtype == "bfloat16" and arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:
        arr = arr.view(np.uint16)  # ml_dtypes' bfloat16 has the same bits
    want = _expected_dtype(p)
    if arr.dtype != want:
        hint = " (bfloat16 data is passed as its uint16 bits)" if p.dtype == "bfloat16" else ""
        raise ArgumentError(f"{where} expects dtype {want.name}{hint}, got {arr.dtype.name}")
    if tuple(arr.shape) != p.shape:
        raise ArgumentError(f"{where} expects shape {p.shape}, got {tuple(arr.shape)}")
    if not arr.flags.c_contiguous:
        raise ArgumentError(
            f"{where} must be C-contiguous (row-major without gaps); pass np.ascontiguousarray(x)"
        )
    if not arr.flags.aligned:
        raise ArgumentError(f"{where} is not aligned to its element size; pass a copy")
    if p.written and not arr.flags.writeable:
        raise ArgumentError(f"{where} is written by the function but the array is read-only")
    return arr


def check_arguments(sig: FunctionSignature, args: Sequence[Any]) -> list[np.ndarray]:
    """The arguments as checked arrays, or an ``ArgumentError`` saying what is wrong."""
    if len(args) != len(sig.params):
        names = ", ".join(p.name for p in sig.params)
        raise ArgumentError(
            f"{sig.name}: expected {len(sig.params)} arguments ({names}), got {len(args)}"
        )
    arrays = [_check_one(sig, p, x) for p, x in zip(sig.params, args)]
    for i, p in enumerate(sig.params):
        if not p.written or arrays[i].size == 0:
            continue
        for j, q in enumerate(sig.params):
            if j != i and arrays[j].size and np.may_share_memory(arrays[i], arrays[j]):
                raise ArgumentError(
                    f"{sig.name}: output '{p.name}' overlaps argument '{q.name}'; compiled code "
                    "assumes outputs share no memory with other arguments, pass a separate array"
                )
    return arrays


__all__ = ["FunctionSignature", "ParamSpec", "check_arguments"]


def param_specs(func: Any, backend: str) -> tuple[ParamSpec, ...]:
    """Names, static shapes, dtypes of a PrimFunc's parameters, and which it writes.

    ``backend`` names the code generator in the error for a symbolic shape.
    """
    from ember.errors import LoweringError
    from ember.tir import expr as E
    from ember.tir import stmt as S
    from ember.tir.functor import post_order_visit

    written: set[Any] = set()

    def visit(node: object) -> None:
        if isinstance(node, S.BufferStore):
            written.add(node.buffer.data)

    post_order_visit(func.body, visit)
    params = []
    for buf in func.params:
        shape = []
        for extent in buf.shape:
            if not isinstance(extent, E.IntImm):
                raise LoweringError(
                    f"parameter '{buf.name}' of '{func.name}' has the symbolic shape "
                    f"{tuple(buf.shape)}; the {backend} backend needs static shapes"
                )
            shape.append(extent.value)
        params.append(ParamSpec(buf.name, tuple(shape), buf.dtype, buf.data in written))
    return tuple(params)
