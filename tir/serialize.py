"""TIR as JSON: lowered functions written to plain data and read back, sharing preserved.

An artifact that must run a kernel somewhere other than the process that lowered it
(the SIMT emulator, which executes TIR, reading a CUDA model back from an ``.ember``
file) stores the kernel's TIR with :func:`to_json` and restores it with
:func:`from_json`. Nodes have identity semantics (two ``Var("i")`` are different
variables, a buffer's ``data`` pointer is shared by its views), so the encoding is a
flat table of nodes in post-order, each child a reference to an earlier entry, and
decoding rebuilds one object per entry: what was shared is shared again.

Only the TIR node classes (expressions, statements, buffers, ``PrimFunc``) and their
operator enums are written or read, plus the classes a caller names (a code
generator's program records). Anything else is refused on both sides, so reading a
file builds nothing but IR, whatever the file holds.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import numbers
import sys
import types
import typing
from collections.abc import Iterable
from typing import Any

from ember.errors import CompileError, InvalidModelError
from ember.tir import buffer as _buffer
from ember.tir import expr as _expr
from ember.tir import stmt as _stmt

FORMAT = "ember-tir-json"
VERSION = 1


def _node_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in (_expr, _stmt, _buffer):
        for name, obj in vars(module).items():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                if obj.__module__ == module.__name__:
                    found[name] = obj
    return found


NODE_CLASSES: dict[str, type] = _node_classes()
ENUMS: dict[str, type[enum.Enum]] = {
    e.__name__: e for e in (_expr.BinaryOp, _expr.CompareOp, _expr.Intrinsic, _stmt.ForKind)
}


def _classes(extra: Iterable[type]) -> dict[str, type]:
    table = dict(NODE_CLASSES)
    for cls in extra:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a dataclass")
        table[cls.__name__] = cls
    return table


class _Encoder:
    def __init__(self, classes: dict[str, type]) -> None:
        self.classes = classes
        self.nodes: list[dict[str, Any]] = []
        self.index: dict[int, int] = {}
        self.keep: list[Any] = []  # holds every encoded node so that no id() is reused

    def value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, enum.Enum):
            if ENUMS.get(type(v).__name__) is not type(v):
                raise CompileError(f"cannot store the enum {type(v).__name__} in TIR JSON")
            return {"e": f"{type(v).__name__}.{v.name}"}
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real):
            return {"f": repr(float(v))}  # exact, and nan/inf/-0.0 survive
        if isinstance(v, tuple):
            return [self.value(x) for x in v]
        if dataclasses.is_dataclass(v) and self.classes.get(type(v).__name__) is type(v):
            return {"n": self.node(v)}
        raise CompileError(
            f"cannot store a {type(v).__module__}.{type(v).__name__} in TIR JSON "
            "(only TIR nodes, tuples, numbers, strings and the operator enums)"
        )

    def node(self, obj: Any) -> int:
        hit = self.index.get(id(obj))
        if hit is not None:
            return hit
        fields = {f.name: self.value(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        self.keep.append(obj)
        self.index[id(obj)] = len(self.nodes)
        self.nodes.append({"c": type(obj).__name__, "f": fields})
        return self.index[id(obj)]


def to_json(root: Any, extra_classes: Iterable[type] = ()) -> dict[str, Any]:
    """``root`` (a node, or a tuple of them) as JSON-ready data."""
    enc = _Encoder(_classes(extra_classes))
    try:
        top = enc.value(root)
    except RecursionError as e:
        raise CompileError("the TIR is nested too deeply to store as JSON") from e
    return {"format": FORMAT, "version": VERSION, "nodes": enc.nodes, "root": top}


class _Decoder:
    def __init__(self, classes: dict[str, type]) -> None:
        self.classes = classes
        self.objects: list[Any] = []

    def value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, list):
            return tuple(self.value(x) for x in v)
        if isinstance(v, dict) and len(v) == 1:
            ((tag, payload),) = v.items()
            if tag == "n" and isinstance(payload, int) and 0 <= payload < len(self.objects):
                return self.objects[payload]
            if tag == "f" and isinstance(payload, str):
                return float(payload)
            if tag == "e" and isinstance(payload, str):
                cls_name, _, member = payload.partition(".")
                cls = ENUMS.get(cls_name)
                if cls is not None and member in cls.__members__:
                    return cls[member]
        raise InvalidModelError(f"TIR JSON: unreadable value {str(v)[:80]!r}")

    def node(self, entry: Any) -> None:
        if not isinstance(entry, dict) or not isinstance(entry.get("f"), dict):
            raise InvalidModelError(f"TIR JSON: malformed node {str(entry)[:80]!r}")
        cls = self.classes.get(entry.get("c"))  # type: ignore[arg-type]
        if cls is None:
            raise InvalidModelError(f"TIR JSON: {entry.get('c')!r} is not a TIR node class")
        names = {f.name for f in dataclasses.fields(cls)}
        given = entry["f"]
        if set(given) != names:
            raise InvalidModelError(
                f"TIR JSON: a {cls.__name__} has fields {sorted(given)}, expected {sorted(names)}"
            )
        fields = {k: self.value(x) for k, x in given.items()}
        hints = _field_hints(cls)
        for k, v in fields.items():
            if not _fits(v, hints.get(k, Any)):
                raise InvalidModelError(
                    f"TIR JSON: a {cls.__name__}'s field '{k}' holds {str(v)[:80]!r}, "
                    f"not a {hints[k]}"
                )
        try:
            self.objects.append(cls(**fields))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
            raise InvalidModelError(f"TIR JSON: cannot rebuild a {cls.__name__}: {e}") from e


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    """The resolved type of each field of ``cls`` (names resolved across the TIR modules,
    whose annotations refer to each other's classes)."""
    names: dict[str, Any] = {}
    for module in (_expr, _stmt, _buffer, sys.modules[cls.__module__]):
        names.update(vars(module))
    try:
        return typing.get_type_hints(cls, globalns=names)
    except (NameError, TypeError):  # an annotation this check cannot read: no check
        return {}


def _fits(v: Any, hint: Any) -> bool:
    """Whether the decoded value ``v`` is of the annotated type ``hint`` (the shapes TIR
    fields have: classes, ``X | None``, ``tuple[X, ...]``, fixed tuples, ``Any``)."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(v, h) for h in typing.get_args(hint))
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(v, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(x, args[0]) for x in v)
        return len(args) == len(v) and all(_fits(x, h) for x, h in zip(v, args))
    if hint is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if hint is int:
        return isinstance(v, int)
    if isinstance(hint, type):
        return isinstance(v, hint)
    return True  # a form TIR's fields do not use: not checked here


def from_json(data: Any, extra_classes: Iterable[type] = ()) -> Any:
    """The object :func:`to_json` wrote; ``InvalidModelError`` for anything malformed."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidModelError("not TIR JSON (missing its format tag)")
    if data.get("version") != VERSION:
        raise InvalidModelError(
            f"TIR JSON version {data.get('version')!r}; this Ember reads version {VERSION}"
        )
    dec = _Decoder(_classes(extra_classes))
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise InvalidModelError("TIR JSON: no node table")
    for entry in nodes:
        dec.node(entry)
    return dec.value(data.get("root"))


__all__ = ["from_json", "to_json"]
