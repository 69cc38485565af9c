"""PyTorch graphs with symbolic sizes as Ember models with symbolic dims.

A graph Dynamo captures after a size changed, or a program exported with
``dynamic_shapes``, carries its sizes as ``SymInt`` symbols (``s0``); Ember's symbolic dims
are named strings in an input's shape (``("s0", 128)``), each binding compiled once by a
:class:`~ember.graph.dynamic_model.DynamicModel`. :class:`TorchSource` is that model's
source for a PyTorch callable: it reads the symbols off the graph's placeholders, so the
model reports them (``input_shapes``), checks every run's sizes against them (a symbol
given two sizes is an :class:`~ember.errors.ArgumentError` before anything runs), keeps one
copy of the weights for all sizes, and traces the callable with ``make_fx`` at each new
binding. The symbolic ranges an exported program was checked for (its
``range_constraints``, e.g. a batch of 2 and up) are guards: a size outside them is refused
with the range, since the program was only checked within it (``ExportedProgram.module()``
itself runs such a size without a word).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import Graph, TensorType, Value
from ember.frontend.torch.importer import DTYPES, from_module

Placeholder = TensorType | str | int | float | bool
"""What one argument of the traced callable is: a tensor of a (possibly symbolic) type, a
size Dynamo passes (the name of its symbol), or a number fixed in the graph."""


def placeholder_kind(value: Any) -> Placeholder | None:
    """The :data:`Placeholder` of one FX placeholder's fake value (Dynamo's
    ``example_value``, ``make_fx``'s or ``torch.export``'s ``val``); None where Ember's
    symbolic dims cannot stand for it (a dim that is an expression, not one symbol)."""
    import torch  # optional dependency: present whenever a torch graph is imported
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    if isinstance(value, torch.SymInt) and not is_concrete_int(value):
        name = str(value)
        return name if name.isidentifier() else None
    if isinstance(value, (int, float, bool, torch.SymInt)):
        return int(value) if isinstance(value, torch.SymInt) else value
    if not isinstance(value, torch.Tensor):
        return None
    dtype = DTYPES.get(str(value.dtype).removeprefix("torch."))
    if dtype is None:
        return None
    dims: list[int | str] = []
    for d in value.shape:
        if is_concrete_int(d):
            dims.append(int(d))
        elif str(d).isidentifier():
            dims.append(str(d))
        else:
            return None
    return TensorType(tuple(dims), dtype)


def symbolic_placeholders(values: Sequence[Any]) -> list[Placeholder] | None:
    """The placeholders of a graph whose fake ``values`` name symbolic sizes that Ember can
    bind from its tensor inputs; None where there are none, or where a size is not one
    symbol or is not some tensor input's dim (an integer argument made dynamic), for
    which the caller specialises per call signature instead."""
    kinds = [placeholder_kind(v) for v in values]
    if any(k is None for k in kinds):
        return None
    tensors = [k for k in kinds if isinstance(k, TensorType)]
    dims = {d for t in tensors for d in t.shape if isinstance(d, str)}
    sizes = {k for k in kinds if isinstance(k, str)}
    if not dims or not sizes <= dims:
        return None
    return kinds  # type: ignore[return-value]


class TorchSource:
    """A PyTorch callable with symbolic input sizes, traced again (``make_fx``) for each
    binding of its symbols (the source a :class:`~ember.graph.dynamic_model.DynamicModel`
    specializes; see the module notes)."""

    kind = "torch"
    exportable = False  # a loaded file could not trace new sizes: no PyTorch there

    def __init__(
        self,
        fn: Callable[..., Any],
        placeholders: Sequence[Placeholder],
        names: Sequence[str],
        n_outputs: int,
        ranges: Mapping[str, tuple[int, int | None]] | None = None,
    ) -> None:
        """``fn`` takes one argument per placeholder; ``names`` names its tensor inputs;
        ``ranges`` maps a symbol to its guard, the sizes ``(low, high)`` it may take
        (``high`` None: no bound)."""
        self.fn = fn
        self.placeholders = list(placeholders)
        tensors = [p for p in self.placeholders if isinstance(p, TensorType)]
        if len(names) != len(tensors):
            raise ArgumentError(f"torch source: {len(tensors)} tensor inputs, {len(names)} names")
        self.inputs = [Value(n, t) for n, t in zip(names, tensors)]
        self.outputs = [Value(f"output{i}", TensorType(("?",), "?")) for i in range(n_outputs)]
        self.defaults: dict[str, Any] = {}
        self.value_inputs: list[str] = []
        self.ranges = dict(ranges or {})

    def specialize(self, binding: Mapping[Any, Any], values: Any = None) -> Graph:
        """The callable traced at these sizes (on zeros: a graph Dynamo or export captured
        has no data-dependent control flow)."""
        import torch  # optional dependency: present whenever a torch graph is imported

        for symbol, (low, high) in self.ranges.items():
            size = binding.get(symbol)
            if size is not None and (size < low or (high is not None and size > high)):
                bound = f"[{low}, {high}]" if high is not None else f"{low} or more"
                raise ArgumentError(
                    f"symbolic dim '{symbol}' is {size}; the program was exported for {bound}"
                )
        args: list[Any] = []
        for p in self.placeholders:
            if isinstance(p, TensorType):
                shape = tuple(binding[d] if isinstance(d, str) else d for d in p.shape)
                args.append(torch.zeros(shape, dtype=getattr(torch, p.dtype)))
            else:
                args.append(binding[p] if isinstance(p, str) else p)
        return from_module(self.fn, args)  # inputs in order: a DynamicModel runs by position

    def learn_value_inputs(self, error: Any) -> bool:
        """A traced graph never needs an input's value (Dynamo breaks the graph first)."""
        return False


def is_exported_program(model: Any) -> bool:
    """Whether ``model`` is a ``torch.export.ExportedProgram`` (told without importing
    torch, so ``ember.compile`` takes one and ``import ember`` stays torch-free)."""
    kind = type(model)
    return kind.__name__ == "ExportedProgram" and kind.__module__.startswith("torch.export")


def exported_source(program: Any) -> TorchSource | None:
    """The source of an exported program whose inputs have symbolic sizes (exported with
    ``dynamic_shapes``), its ranges the guards; None for a static one."""
    if program.example_inputs is not None and program.example_inputs[1]:
        keywords = ", ".join(sorted(program.example_inputs[1]))
        raise ArgumentError(
            f"ember.compile: the program was exported with keyword example inputs ({keywords}), "
            "which Ember's runs cannot name; export it with them positional: "
            "torch.export.export(model, (x, ...))"
        )
    signature = program.graph_signature
    nodes = [
        n for n in program.graph.nodes if n.op == "placeholder" and n.name in signature.user_inputs
    ]
    kinds = symbolic_placeholders([n.meta.get("val") for n in nodes])
    if kinds is None:
        return None
    constraints = program.range_constraints.items()
    ranges = {str(s): (_bound(r.lower) or 0, _bound(r.upper)) for s, r in constraints}
    names = [n.name for n, k in zip(nodes, kinds) if isinstance(k, TensorType)]
    return TorchSource(program.module(), kinds, names, len(signature.user_outputs), ranges)


def _bound(value: Any) -> int | None:
    """A range end as an int; None for an infinite one (sympy's ``oo``, PyTorch's ``int_oo``)."""
    return None if "oo" in str(value) else int(value)
