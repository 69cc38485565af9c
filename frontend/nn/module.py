"""``nn.Module``: PyTorch-style model building for users who write models in Python.

A module owns named parameters (numpy arrays) and child modules, and says in
``forward`` what it computes on :class:`~ember.frontend.nn.tensor.Tensor` values.
``to_onnx(spec)`` traces ``forward`` into an ONNX model (opset 20) and ``export(spec)``
imports that into an Ember :class:`~ember.frontend.graph.Graph` for ``ember.compile``,
so a model written here and one exported from PyTorch take the same road. Parameter
names follow PyTorch (``fc1.weight``), so ``load_state_dict`` takes a PyTorch state
dict converted to numpy, or a safetensors file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.tensor import OPSET, Tensor, Tracer

_RNG = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Seed the initialisation of parameters made after this call."""
    _RNG[0] = np.random.default_rng(seed)


def init_uniform(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """PyTorch's default for linear and conv layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / np.sqrt(max(fan_in, 1))
    return _RNG[0].uniform(-bound, bound, size=shape).astype(np.float32)


class Module:
    """The base of every layer and model."""

    def __init__(self) -> None:
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_children", {})

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._children[name] = value
        object.__setattr__(self, name, value)

    def param(self, name: str, array: np.ndarray) -> np.ndarray:
        """Register a parameter (kept as float32 numpy data) and return it."""
        array = np.ascontiguousarray(array, dtype=np.float32)
        self._params[name] = array
        object.__setattr__(self, name, array)
        return array

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        for name, array in self._params.items():
            yield prefix + name, array
        for cname, child in self._children.items():
            yield from child.named_parameters(f"{prefix}{cname}.")

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self.named_parameters())

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Replace parameters by name; shapes must match. ``strict``: every name both ways."""
        own = self.state_dict()
        unknown = sorted(set(state) - set(own))
        missing = sorted(set(own) - set(state))
        if strict and (unknown or missing):
            raise ArgumentError(
                f"load_state_dict: unknown parameters {unknown}, missing parameters {missing}"
            )
        for name, value in state.items():
            if name not in own:
                continue
            array = np.asarray(value)
            if array.shape != own[name].shape:
                raise ArgumentError(
                    f"load_state_dict: '{name}' has shape {list(array.shape)}, "
                    f"the model expects {list(own[name].shape)}"
                )
            owner, _, leaf = self._owner_of(name)
            owner.param(leaf, array)

    def load_safetensors(self, path: str | Path, strict: bool = True) -> None:
        """Load parameters from a safetensors file (``pip install safetensors``)."""
        try:
            from safetensors.numpy import load_file
        except ImportError as e:
            raise ArgumentError(
                "load_safetensors needs the safetensors package: pip install safetensors"
            ) from e
        self.load_state_dict(load_file(str(path)), strict=strict)

    def _owner_of(self, dotted: str) -> tuple[Module, str, str]:
        *path, leaf = dotted.split(".")
        mod: Module = self
        for part in path:
            mod = mod._children[part]
        return mod, ".".join(path), leaf

    def forward(self, *args: Tensor) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Tensor) -> Any:
        return self.forward(*args)

    def traced(self, tracer: Tracer, name: str) -> Tensor:
        """This module's parameter ``name`` as a traced constant."""
        return tracer.constant(self._params[name], f"{getattr(self, '_scope', 'p')}.{name}")

    def to_onnx(self, spec: Mapping[str, Any]) -> Any:
        """Trace ``forward`` on inputs ``spec`` (``{"x": (8, 64)}`` or ``{"ids": ((1, 16),
        "int64")}``) into a checked ONNX ``ModelProto``."""
        import onnx
        from onnx import helper, numpy_helper

        tracer = Tracer()
        self._name_scopes("")
        inputs = [Tensor(tracer, name, *_shape_dtype(name, s)) for name, s in spec.items()]
        result = self.forward(*inputs)
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        if not all(isinstance(o, Tensor) for o in outputs):
            raise ArgumentError("nn: forward must return Tensors (or a tuple of them)")

        def info(t: Tensor) -> Any:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
            return helper.make_tensor_value_info(t.name, elem, list(t.shape))

        graph = helper.make_graph(
            tracer.nodes,
            type(self).__name__,
            [info(t) for t in inputs],
            [info(t) for t in outputs],
            [numpy_helper.from_array(a, n) for n, a in tracer.initializers.items()],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 10
        onnx.checker.check_model(model)
        return model

    def export(self, spec: Mapping[str, Any]) -> Any:
        """The model as an Ember graph, ready for ``ember.compile``."""
        from ember.frontend.onnx_import.importer import from_onnx

        return from_onnx(self.to_onnx(spec))

    def _name_scopes(self, prefix: str) -> None:
        object.__setattr__(self, "_scope", prefix.rstrip(".") or type(self).__name__.lower())
        for cname, child in self._children.items():
            child._name_scopes(f"{prefix}{cname}.")


def _shape_dtype(name: str, spec: Any) -> tuple[tuple[int, ...], str]:
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and isinstance(spec[1], str)
        and isinstance(spec[0], (tuple, list))
    ):
        shape, dtype = tuple(spec[0]), spec[1]
    else:
        shape, dtype = tuple(spec), "float32"
    if not all(isinstance(d, int) and d > 0 for d in shape):
        raise ArgumentError(f"nn: input '{name}' needs a shape of positive ints, got {spec!r}")
    return shape, dtype
