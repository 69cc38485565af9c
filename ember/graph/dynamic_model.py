"""Models with symbolic input dims (a batch ``"N"``): compiled per concrete size on first use.

``ember.compile`` returns a :class:`DynamicModel` when an input keeps a symbolic dim (a
string such as ``"N"`` or ``"batch_size"``, as PyTorch writes for ``dynamic_axes``) and
``shapes=`` does not fix it. The design is specialization, not symbolic kernels: the
first run with a new binding of the symbols (``{"N": 3}``) imports the model again with
those sizes, runs the graph passes and compiles it (:func:`ember.compile` with static
shapes), and keeps that :class:`~ember.graph.executor.CompiledModel`, with its own memory
plan, for every later run of the same sizes. Why: the tuned templates
(``conv2d_nchw.llvm``, ``matmul.llvm``) and several importer rules (Flatten, Reshape,
shape subgraphs) need static sizes, and a kernel compiled for its sizes is the fast one.
A new size costs one compile, which the disk kernel cache (``ember/kernel_cache.py``)
makes cheap for kernels whose sizes do not change with the batch (across processes too).

The model is kept as its source (``model_source.py``): the ONNX bytes (imported again per
binding, so every importer rule sees static shapes), or an Ember Graph whose node types
are re-inferred through each op's shape rule. ``input_shapes`` reports the symbolic dims;
outputs are typed as the model declares them (``?`` where it does not). Inputs are checked before
anything compiles: a wrong name, rank, static dim or dtype, or one symbol given two sizes,
raises :class:`~ember.errors.ArgumentError`. ``export`` writes the source plus every
specialization compiled so far (``ember/artifact_dynamic.py``), so a loaded model runs
those sizes at once and compiles others on first use.

Values are specialized the same way. An input that carries a shape rather than data (a
Reshape's ``shape``, TopK's ``k``, Resize's ``sizes``) fed at run time makes the importer
raise :class:`~ember.errors.NeedsConstantError`; the model then becomes one whose
``value_inputs`` (the graph inputs that tensor is computed from) key the specializations
beside the sizes: each distinct value imports the model with it as a constant
(``frontend/onnx_import/value_inputs.py``) and compiles it once. onnxruntime computes such
shapes on the host per run with kernels that take any shape; Ember keeps kernels
specialized for their shapes and pays one compile per new value instead (the disk kernel
cache makes repeats cheap), warning once a model has compiled for many values. A string
input is always a value input (kernels hold no strings: ``frontend/string_tensors.py``),
keyed on its strings, not its pointers.

Sequences and optionals are specialized the same way. A model with a sequence or
optional input or output is always a DynamicModel: ``run`` takes a list of arrays for a
sequence input and None (or a value) for an optional one, and each new layout (the
sequences' lengths and element shapes, which optionals are present) imports the model
with it (``from_onnx``'s ``shapes``) and compiles once; the compiled graph works on flat
tensors and ``structured_io.py`` groups its outputs back into lists and None.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError, NeedsConstantError
from ember.frontend.graph import Graph, TensorType
from ember.frontend.interface import OptionalType, is_structured
from ember.frontend.onnx_import.value_inputs import (
    MAX_VALUE_ELEMENTS,
)
from ember.frontend.passes.graph_pass import GraphFn
from ember.frontend.string_tensors import STRING, content_key
from ember.graph.artifact_dynamic import export_dynamic
from ember.graph.executor import CompiledModel, ParamStore, input_array, inputs_in_order
from ember.graph.model_source import (
    layout_key,
)
from ember.graph.structured_io import bind_structured, flatten_inputs, run_structured
from ember.target import Target
from ember.tir.transform.runner import Pass

Binding = tuple[tuple[Any, Any], ...]
"""The sizes of the symbolic dims, ``(symbol, size)``, then for each sequence or optional
input ``(("layout", name), layout)`` (``structured_io.py``): what a specialization is for."""
ValueKey = tuple[tuple[str, str, tuple[int, ...], bytes], ...]
"""The values of a model's value inputs, hashable: name, dtype, shape and bytes of each
(a string input's bytes are its strings', ``string_tensors.content_key``)."""

MANY_VALUES = 32
"""Distinct values of the value inputs after which a run warns that it keeps compiling."""


class DynamicModel:
    """A model with symbolic input dims, run like a :class:`~ember.graph.executor.CompiledModel`
    (``run``, ``__call__``, ``benchmark``, ``export``, input and output names and types);
    see the module docstring for how sizes are specialized.

    The sizes share their weights: every specialization takes its params from one
    :class:`~ember.graph.executor.ParamStore`, so a param with the same bytes at two sizes is
    one array in memory. ``run`` is thread-safe as ``CompiledModel.run`` is; a size not
    compiled yet is compiled by one thread while the others wait for it (runs of sizes
    already compiled do not wait).
    """

    def __init__(
        self,
        source: Any,
        target: Target,
        records: Any,
        graph_passes: Sequence[Pass | GraphFn] | None,
        compile_graph: Callable[
            [Graph, Target, Any, Sequence[Pass | GraphFn] | None], CompiledModel
        ],
    ) -> None:
        """``compile_graph(graph, target, records, graph_passes)`` compiles one size: the
        compile driver's own steps, passed in by the driver (and the loader) so that this
        module does not call back up into them."""
        self.source = source
        self.target = target
        self._compile_graph = compile_graph
        self.records = records
        self.graph_passes = graph_passes
        self.input_names = [v.name for v in source.inputs]
        self.output_names = [v.name for v in source.outputs]
        # a sequence or optional input or output has a SequenceType or OptionalType here
        self.input_types: list[TensorType] = [v.type for v in source.inputs]
        self.output_types: list[TensorType] = [v.type for v in source.outputs]
        # what a dict of inputs may leave out: an overridable initializer, an optional
        self._defaults = {
            **source.defaults,
            **{v.name: None for v in source.inputs if isinstance(v.type, OptionalType)},
        }
        self.specializations: dict[Binding, CompiledModel] = {}
        # models with value inputs: one per sizes and values (not exported, see export)
        self.value_specializations: dict[tuple[Binding, ValueKey], CompiledModel] = {}
        self._params = ParamStore()  # the weights every size shares
        self._compiling = threading.Lock()  # one compile at a time, and one per size

    input_shapes = property(lambda self: [t.shape for t in self.input_types])
    output_shapes = property(lambda self: [t.shape for t in self.output_types])
    input_dtypes = property(lambda self: [t.dtype for t in self.input_types])
    output_dtypes = property(lambda self: [t.dtype for t in self.output_types])

    @property
    def value_inputs(self) -> list[str]:
        """The inputs whose values the model needs at compile time (a Reshape's shape fed
        at run time): each distinct value compiles the model once, as a new size does."""
        return list(self.source.value_inputs)

    @property
    def symbols(self) -> list[str]:
        """The symbolic dims, in the order the inputs first name them."""
        tensors = [t for t in self.input_types if isinstance(t, TensorType)]
        dims = (d for t in tensors for d in t.shape if isinstance(d, str))
        return list(dict.fromkeys(dims))

    @property
    def structured(self) -> bool:
        """Whether the model takes or gives sequences or optionals (``run`` takes a list of
        arrays for a sequence, None or a value for an optional, and gives them back so);
        each layout of its inputs (lengths, element shapes, presence) compiles once."""
        return any(is_structured(t) for t in (*self.input_types, *self.output_types))

    def specialize(self, binding: Mapping[str, int] | None = None, **sizes: int) -> Any:
        """The CompiledModel for these sizes (``specialize(N=8)``), compiled on first use:
        call it ahead of time to keep a compile out of the first run of a size."""
        if self.value_inputs:
            raise ArgumentError(
                f"this model needs the values of its inputs {self.value_inputs} to compile; "
                "run it (each distinct value compiles once) instead of specializing by size"
            )
        if any(is_structured(t) for t in self.input_types):
            raise ArgumentError(
                "this model takes sequences or optionals; run it (each length of its sequence "
                "inputs compiles once) instead of specializing by size"
            )
        given = {**(binding or {}), **sizes}
        missing = [s for s in self.symbols if s not in given]
        extra = sorted(set(given) - set(self.symbols))
        if missing or extra:
            raise ArgumentError(
                f"specialize needs a size for each symbolic dim {self.symbols}; "
                f"missing {missing}, unknown {extra}"
            )
        bad = {k: v for k, v in given.items() if not isinstance(v, (int, np.integer)) or v < 0}
        if bad:
            raise ArgumentError(f"symbolic dim sizes must be non-negative integers, got {bad}")
        return self._specialized(tuple((s, int(given[s])) for s in self.symbols))

    def _specialized(self, key: Binding) -> Any:
        """The CompiledModel for ``key`` (sizes and layouts), compiled on first use."""
        model = self.specializations.get(key)
        if model is not None and model._shared_with is self._params:
            return model  # the common case: no lock
        with self._compiling:
            model = self.specializations.get(key)  # another thread may have compiled it
            if model is None:
                model = self._compile(key)
            # a size compiled here, or loaded from a file, takes the shared weights before
            # any thread can run it
            model.share_params(self._params)
            self.specializations[key] = model
        return model

    def _compile(self, key: Binding, values: Mapping[str, np.ndarray] | None = None) -> Any:
        try:
            graph = self.source.specialize(dict(key), values)
        except EmberError as e:
            raise e.add_context(f"while specializing the model for {dict(key)}") from None
        return self._compile_graph(graph, self.target, self.records, self.graph_passes)

    def _model_for(self, key: Binding, arrays: list[Any]) -> tuple[Any, list[Any]]:
        """The compiled model for these sizes and (for value inputs) values, and the
        arrays it takes: those of every input that is not a value input."""
        if not self.value_inputs:
            try:
                return self._specialized(key), arrays
            except NeedsConstantError as e:  # a shape the model feeds at run time
                with self._compiling:
                    if not self.value_inputs and not self.source.learn_value_inputs(e):
                        raise
        vkey = (key, self._value_key(arrays))
        model = self.value_specializations.get(vkey)
        if model is None or model._shared_with is not self._params:
            with self._compiling:
                model, vkey = self._compile_values(key, arrays)
        frozen = {entry[0] for entry in vkey[1]}
        rest = [a for n, a in zip(self.input_names, arrays) if n not in frozen]
        return model, rest

    def _compile_values(
        self, key: Binding, arrays: list[Any]
    ) -> tuple[Any, tuple[Binding, ValueKey]]:
        """Under the lock: the model for ``arrays``' values, compiled if new; an import
        that needs yet another input's value learns it and compiles again."""
        while True:
            vkey = (key, self._value_key(arrays))
            model = self.value_specializations.get(vkey)
            if model is not None:
                return model, vkey
            values = {n: a for n, a in zip(self.input_names, arrays) if n in self.value_inputs}
            try:
                model = self._compile(key, values)
            except NeedsConstantError as e:
                if not self.source.learn_value_inputs(e):
                    raise
                continue
            model.share_params(self._params)
            self.value_specializations[vkey] = model
            if len(self.value_specializations) == MANY_VALUES:
                warnings.warn(
                    f"{MANY_VALUES} distinct values of the inputs {self.value_inputs} have "
                    "each compiled this model; it compiles again for every new one (feed "
                    "them as initializers if they are fixed)",
                    UserWarning,
                    stacklevel=4,
                )
            return model, vkey

    def _value_key(self, arrays: list[Any]) -> ValueKey:
        key = []
        for name, arr in zip(self.input_names, arrays):
            if name not in self.value_inputs:
                continue
            if not isinstance(arr, np.ndarray):
                raise ArgumentError(
                    f"input '{name}' is a sequence or optional, and the model needs its values "
                    "at compile time (they set a shape or a position); not supported"
                )
            if arr.size > MAX_VALUE_ELEMENTS:
                raise ArgumentError(
                    f"input '{name}' has {arr.size} elements, and the model needs its values "
                    f"at compile time (it sets a shape); Ember compiles per value only for "
                    f"inputs of at most {MAX_VALUE_ELEMENTS} elements: make it an initializer"
                )
            key.append((name, str(arr.dtype), tuple(arr.shape), content_key(arr)))
        return tuple(key)

    def bind(self, inputs: Mapping[str, Any] | Sequence[Any]) -> tuple[Binding, list[Any]]:
        """The sizes ``inputs`` give the symbolic dims, and the inputs in order; every
        static dim, rank and dtype is checked first."""
        given = inputs_in_order(self.input_names, inputs, self._defaults)
        sizes: dict[str, int] = {}
        arrays: list[Any] = []
        layouts: list[tuple[Any, Any]] = []
        for name, t, value in zip(self.input_names, self.input_types, given):
            if is_structured(t):
                value, layout = bind_structured(name, t, value)  # type: ignore[arg-type]
                arrays.append(value)
                layouts.append((layout_key(name), layout))
                continue
            before = dict(sizes)
            arr = input_array(name, value, t.dtype)
            fits = arr.ndim == t.ndim and all(
                d == n if isinstance(d, int) else sizes.setdefault(d, n) == n
                for d, n in zip(t.shape, arr.shape)
            )
            if not fits:
                raise ArgumentError(
                    f"input '{name}' must have shape [{', '.join(map(str, t.shape))}], got "
                    f"{list(arr.shape)}" + _bound_note(t, before)
                )
            arrays.append(arr)
        return (*((s, sizes[s]) for s in self.symbols), *layouts), arrays

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
        """Run on ``inputs`` (a dict by name or a list), compiling for their sizes if new.

        A sequence input takes a list of arrays (of its dtype; their number and shapes may
        change from run to run, each new layout compiling once), an optional one None (or
        left out of a dict) or its value; a sequence output is a list of arrays, an empty
        optional None (``structured_io.py``)."""
        key, arrays = self.bind(inputs)
        model, arrays = self._model_for(key, arrays)
        return run_structured(model, arrays)

    __call__ = run

    def benchmark(
        self,
        inputs: Mapping[str, Any] | Sequence[Any] | None = None,
        number: int = 10,
        repeat: int = 3,
    ) -> dict[str, float]:
        """Seconds per run as ``CompiledModel.benchmark``; without ``inputs``, every symbolic
        dim is 1 and the data is random."""
        if inputs is None:
            model = self.specialize({s: 1 for s in self.symbols})
            return model.benchmark(None, number, repeat)
        key, arrays = self.bind(inputs)
        model, arrays = self._model_for(key, arrays)
        if model.graph.interface is not None:
            arrays = flatten_inputs(model.graph.interface, arrays)
        return model.benchmark(arrays, number, repeat)

    def export(self, path: Any, archs: Any = None, ptx: bool = True) -> None:
        """Write the source and the specializations so far to one ``.ember`` file
        (``archs``/``ptx``: the GPU images of a CUDA model's sizes, as
        :meth:`CompiledModel.export` takes them)."""
        if self.structured:
            raise ArgumentError(
                "export: a model that takes or gives sequences or optionals cannot be exported yet"
            )
        if not self.source.exportable:
            raise ArgumentError(
                f"export: a model whose sizes are specialized from a {self.source.kind} source "
                "cannot be exported (the file could not compile new sizes); compile it at "
                "fixed sizes"
            )
        strings = [n for n, d in zip(self.input_names, self.input_dtypes) if d == STRING]
        strings += [n for n, d in zip(self.output_names, self.output_dtypes) if d == STRING]
        if strings:
            raise ArgumentError(
                f"export: the model takes or gives string tensors ({', '.join(strings)}), "
                "which .ember files cannot hold yet; compile it from its ONNX file where it runs"
            )
        export_dynamic(self, path, archs, ptx)

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {t}" for n, t in zip(self.input_names, self.input_types))
        sizes = ", ".join(str(dict(k)) for k in self.specializations) or "none yet"
        if self.value_inputs:
            sizes = f"{len(self.value_specializations)} values of {self.value_inputs}"
        return f"DynamicModel({sig}) on {self.target}, compiled for: {sizes}"


def _bound_note(t: TensorType, sizes: Mapping[str, int]) -> str:
    bound = {d: sizes[d] for d in t.shape if isinstance(d, str) and d in sizes}
    return f" (with {bound} from the inputs before it)" if bound else ""
