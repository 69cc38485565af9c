"""ONNX ``ai.onnx.ml`` LabelEncoder: each element mapped through a table of keys to values.

Where strings are involved the table is applied at import: string tensors are
compile-time constants (``frontend/string_tensors.py``), so a string input is known then,
and an output of strings must be (a number input that maps to strings is then needed at
compile time: the model compiles per value of it). A numbers-to-numbers table over an
input fed at run time is a kernel instead, so that each new input does not compile the
model again: the input compared with every key (``equal`` against a constant row), the
first match's position (``arg_reduce``), the value there (``gather``), and the default
where the key read back there is not the input (``where``). That is O(keys) work per
element, fine for the label tables this op holds.

Semantics (opsets 2 and 4; opset 1's ``classes_strings`` form is converted too): a key
repeated takes its last value; a NaN key matches every NaN input (opset 4's rule; opset
2 asked for a bitwise match, which would also tell 0.0 from -0.0); an element matching no
key takes the default of the values' type (``default_tensor``, ``default_string``
"_Unused", ``default_int64`` -1, ``default_float`` -0.0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.string_tensors import STRING, STRING_NUMPY, string_array

# the attribute suffix of each kind of list, its dtype, and its default's attribute
_LISTS = {"strings": STRING, "int64s": "int64", "floats": "float32"}
_DEFAULTS: dict[str, tuple[str, Any]] = {
    "strings": ("default_string", "_Unused"),
    "int64s": ("default_int64", -1),
    "floats": ("default_float", -0.0),
}


def _numpy(values: Any, dtype: str) -> np.ndarray:
    """A list of keys or values as an array of ``dtype`` (an object array for strings)."""
    if dtype == STRING:
        return string_array([str(v) for v in values])
    return np.asarray(values, dtype=dtype).reshape(-1)


def _table(ctx: ConvertContext, side: str) -> tuple[np.ndarray, str, str]:
    """The ``keys_*`` or ``values_*`` attribute given: its data, dtype and kind."""
    given = [k for k in (*_LISTS, "tensor") if ctx.has_attr(f"{side}_{k}")]
    if len(given) != 1:
        raise ArgumentError(
            f"LabelEncoder needs exactly one {side}_* attribute, got "
            f"{[f'{side}_{k}' for k in given] or 'none'}"
        )
    kind = given[0]
    data = ctx.attr(f"{side}_{kind}")
    if kind == "tensor":
        array = np.asarray(data).reshape(-1)
        dtype = STRING if array.dtype == STRING_NUMPY else str(array.dtype)
        return _numpy(array.tolist(), dtype) if dtype == STRING else array, dtype, kind
    return _numpy(data, _LISTS[kind]), _LISTS[kind], kind


def _default(ctx: ConvertContext, kind: str, dtype: str) -> Any:
    """The value of an element no key matches, as the values' type has it."""
    if kind == "tensor" and ctx.has_attr("default_tensor"):
        return np.asarray(ctx.attr("default_tensor")).reshape(-1)[0].item()
    if kind == "tensor":  # the spec's defaults for a values_tensor of each type
        return "_Unused" if dtype == STRING else (-0.0 if "float" in dtype else -1)
    name, fallback = _DEFAULTS[kind]
    return ctx.attr(name, fallback)


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _lookup(x: np.ndarray, mapping: dict, nan_value: Any, default: Any, dtype: str) -> np.ndarray:
    """The table applied on the host (``x`` known now)."""
    out = np.empty(x.size, dtype=STRING_NUMPY if dtype == STRING else dtype)
    out[:] = [
        nan_value if _is_nan(v) and nan_value is not None else mapping.get(v, default)
        for v in x.reshape(-1).tolist()
    ]
    return out.reshape(x.shape)


def _lookup_kernel(
    ctx: ConvertContext, keys: np.ndarray, values: np.ndarray, default: Any, nan_value: Any
) -> str:
    """The table applied by kernels to input 0, fed at run time (see the module notes)."""
    t = ctx.type(0)
    if not t.is_static:
        raise ArgumentError(f"LabelEncoder: input {t} must have a static shape (shapes=...)")
    x, dtype = ctx.input(0), str(values.dtype)
    if not keys.size or not t.size:
        out = ctx.const(np.full(t.dims, default, dtype=dtype))
    else:
        column = ctx.emit1("reshape", [x], {"shape": (*t.dims, 1)})
        hits = ctx.emit1("equal", [column, ctx.const(keys)])
        hits = ctx.emit1("cast", [hits], {"dtype": "int8"})
        at = {"kind": "max", "axis": t.ndim, "keepdims": False, "select_last": False}
        first = ctx.emit1("arg_reduce", [hits], at)
        found = ctx.emit1("equal", [ctx.emit1("gather", [ctx.const(keys), first], {"axis": 0}), x])
        value = ctx.emit1("gather", [ctx.const(values), first], {"axis": 0})
        fill = ctx.const(np.asarray(default, dtype=dtype))
        out = ctx.emit1("where", [found, value, fill])
    if nan_value is not None:
        nan = ctx.const(np.asarray(nan_value, dtype=dtype))
        out = ctx.emit1("where", [ctx.emit1("isnan", [x]), nan, out])
    return out


@converter("LabelEncoder", since=2, domain="ai.onnx.ml")
def label_encoder(ctx: ConvertContext) -> list[str]:
    """ONNX LabelEncoder (opsets 2 and 4): keys_* to values_*, a default elsewhere."""
    keys, key_dtype, _ = _table(ctx, "keys")
    values, value_dtype, kind = _table(ctx, "values")
    if keys.size != values.size:
        raise ArgumentError(f"LabelEncoder: {keys.size} keys but {values.size} values")
    if ctx.type(0).dtype != key_dtype:
        raise ArgumentError(f"LabelEncoder: input {ctx.type(0)} does not fit {key_dtype} keys")
    default = _default(ctx, kind, value_dtype)
    mapping, nan_value = {}, None
    for k, v in zip(keys.tolist(), values.tolist()):  # a repeated key: the last value
        if _is_nan(k):
            nan_value = v
        else:
            mapping[k] = v
    if key_dtype == STRING or value_dtype == STRING or ctx.is_constant(0):
        x = ctx.constant(0)  # a number input mapped to strings: needed at compile time
        return [ctx.const(_lookup(x, mapping, nan_value, default, value_dtype))]
    unique = np.asarray(list(mapping), dtype=key_dtype)
    table = np.asarray([mapping[k] for k in unique.tolist()], dtype=value_dtype)
    return [_lookup_kernel(ctx, unique, table, default, nan_value)]


@converter("LabelEncoder", since=1, until=1, domain="ai.onnx.ml")
def label_encoder_1(ctx: ConvertContext) -> list[str]:
    """ONNX LabelEncoder opset 1: a string's position in ``classes_strings`` (the last
    one, as onnxruntime; ``default_int64`` if absent), or an int64's class there
    (``default_string`` out of range); the input's type says which way."""
    classes = [str(c) for c in ctx.attr("classes_strings", ())]
    x = ctx.constant(0)  # strings are constants; ints map to strings, needed now too
    if ctx.type(0).dtype == STRING:
        position = {c: i for i, c in enumerate(classes)}
        missing = int(ctx.attr("default_int64", -1))
        return [ctx.const(_lookup(x, position, None, missing, "int64"))]
    if ctx.type(0).dtype != "int64":
        raise ArgumentError(f"LabelEncoder: input must be string or int64, got {ctx.type(0)}")
    by_index = dict(enumerate(classes))
    default = str(ctx.attr("default_string", "_Unused"))
    return [ctx.const(_lookup(x, by_index, None, default, STRING))]
