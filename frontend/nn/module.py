"""``nn.Module``: PyTorch-style model building for users who write models in Python.

A module owns named parameters (numpy arrays) and child modules, and says in
``forward`` what it computes on :class:`~ember.frontend.nn.tensor.Tensor` values.
``to_onnx(spec)`` traces ``forward`` into an ONNX model (opset 20) and ``export(spec)``
imports that into an Ember :class:`~ember.frontend.graph.Graph` for ``ember.compile``,
so a model written here and one exported from PyTorch take the same road. Parameter
names follow PyTorch (``fc1.weight``), so ``load_state_dict`` takes a PyTorch state
dict (CPU tensors or numpy arrays), or a safetensors file.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend import from_onnx
from ember.frontend.graph import SUPPORTED_DTYPES
from ember.frontend.nn.tensor import OPSET, Tensor, Tracer

_RNG = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    """Seed the initialisation of parameters made after this call."""
    _RNG[0] = np.random.default_rng(seed)


def init_uniform(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """PyTorch's default for linear and conv layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / np.sqrt(max(fan_in, 1))
    return _RNG[0].uniform(-bound, bound, size=shape).astype(np.float32)


def as_array(value: Any, what: str) -> np.ndarray:
    """``value`` (a numpy array, array-like or CPU PyTorch tensor) as a numpy array of
    numbers; anything else is an ``ArgumentError`` naming ``what``."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch.Tensor or Parameter
        try:
            value = value.detach().cpu().numpy()
        except (RuntimeError, TypeError) as e:
            raise ArgumentError(f"{what}: cannot read this tensor as numpy data ({e})") from e
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"{what}: not an array of numbers ({e})") from e
    if array.dtype.kind not in "biuf":
        raise ArgumentError(f"{what}: expected an array of numbers, got dtype {array.dtype}")
    return array


class Module:
    """The base of every layer and model.

    Parameters live in ``_params`` (name -> numpy array, or None where PyTorch would hold
    ``None``, as ``Linear(bias=False).bias``) with the shape and dtype each must keep in
    ``_specs``. Assigning to a parameter's attribute (``lin.weight = w``) goes through the
    same check as ``load_state_dict`` and replaces what the next ``export`` reads; a
    wrong shape or dtype is an ``ArgumentError``.
    """

    training = False  # Ember modules always compute as PyTorch's do after eval()
    # set through object.__setattr__ (this class's __setattr__ routes parameters)
    _params: dict[str, np.ndarray | None]
    _specs: dict[str, tuple[tuple[int, ...], str]]  # shape, dtype
    _children: dict[str, Module]
    _scope: str  # the name prefix of this module's constants, set by export

    def __init__(self) -> None:
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_specs", {})
        object.__setattr__(self, "_children", {})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__.get("_params", {}):
            self._set_param(name, value, f"nn.{type(self).__name__}.{name}")
            return
        if isinstance(value, Module):
            self._children[name] = value
        elif name in self.__dict__.get("_children", {}):
            if value is not None:  # PyTorch refuses this too
                raise ArgumentError(
                    f"nn.{type(self).__name__}.{name} is a child module; "
                    f"a {type(value).__name__} cannot replace it (a Module or None can)"
                )
            del self._children[name]
        object.__setattr__(self, name, value)

    def param(
        self,
        name: str,
        array: np.ndarray | None,
        shape: tuple[int, ...] | None = None,
        dtype: str = "float32",
    ) -> np.ndarray | None:
        """Register a parameter (or buffer) of a fixed shape and dtype and return it.

        ``array`` None registers an absent parameter (PyTorch's ``bias=False``); it then
        needs ``shape``, which a later assignment must match.
        """
        if array is not None and shape is None:
            shape = tuple(np.shape(array))
        self._specs[name] = (tuple(shape or ()), dtype)
        self._params[name] = None
        self._set_param(name, array, f"nn.{type(self).__name__}.{name}")
        return self._params[name]

    def _checked(self, name: str, value: Any, what: str, copy: bool) -> np.ndarray | None:
        """``value`` checked against parameter ``name``'s shape and dtype kind.

        Float parameters take float data of any width, converted to the parameter's dtype
        (as PyTorch's ``load_state_dict`` copies into the parameter); integer buffers
        (``num_batches_tracked``) take integers. Other kinds are refused rather than cast,
        so a weight of strings or booleans never silently turns into numbers.
        """
        if value is None:
            return None
        shape, dtype = self._specs[name]
        array = as_array(value, what)
        want_kind = "f" if np.dtype(dtype).kind == "f" else "iu"
        if array.dtype.kind not in want_kind:
            raise ArgumentError(
                f"{what}: expected {dtype} data, got dtype {array.dtype} "
                "(cast it first if that is meant)"
            )
        if array.shape != shape:
            raise ArgumentError(
                f"{what}: has shape {list(array.shape)}, the model expects {list(shape)}"
            )
        if copy or array.dtype != np.dtype(dtype) or not array.flags.c_contiguous:
            array = np.array(array, dtype=dtype, order="C")
        return array

    def _set_param(self, name: str, value: Any, what: str, copy: bool = False) -> None:
        array = self._checked(name, value, what, copy)
        self._params[name] = array
        object.__setattr__(self, name, array)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        for name, array in self._params.items():
            if array is not None:
                yield prefix + name, array
        for cname, child in self._children.items():
            yield from child.named_parameters(f"{prefix}{cname}.")

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self.named_parameters())

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Replace parameters by name; shapes must match and data must be numbers of the
        parameter's kind (``ArgumentError`` naming the parameter otherwise). ``strict``:
        every name both ways. Values are copied, as PyTorch copies into its parameters."""
        if not isinstance(state, Mapping):
            raise ArgumentError(
                f"load_state_dict takes a mapping of names to arrays, got {type(state).__name__}"
            )
        own = self.state_dict()
        unknown = sorted(str(k) for k in set(state) - set(own))
        missing = sorted(set(own) - set(state) - set(self._optional_names()))
        if strict and (unknown or missing):
            raise ArgumentError(
                f"load_state_dict: unknown parameters {unknown}, missing parameters {missing}"
            )
        checked = []
        for name, value in state.items():
            if name in own:
                owner, _, leaf = self._owner_of(name)
                what = f"load_state_dict: '{name}'"
                checked.append((owner, leaf, owner._checked(leaf, value, what, copy=True)))
        for owner, leaf, array in checked:  # every value checked before any is replaced
            owner._params[leaf] = array
            object.__setattr__(owner, leaf, array)

    def load_safetensors(self, path: str | Path, strict: bool = True) -> None:
        """Load parameters from a safetensors file (``pip install safetensors``)."""
        try:
            # optional dependency: safetensors
            from safetensors.numpy import load_file
        except ImportError as e:
            raise ArgumentError(
                "load_safetensors needs the safetensors package: pip install safetensors"
            ) from e
        self.load_state_dict(load_file(str(path)), strict=strict)

    def _optional_names(self, prefix: str = "") -> Iterator[str]:
        """Entries ``load_state_dict`` may leave out (each module's ``_optional_state``)."""
        for name in getattr(self, "_optional_state", ()):
            yield prefix + name
        for cname, child in self._children.items():
            yield from child._optional_names(f"{prefix}{cname}.")

    def _owner_of(self, dotted: str) -> tuple[Module, str, str]:
        *path, leaf = dotted.split(".")
        mod: Module = self
        for part in path:
            mod = mod._children[part]
        return mod, ".".join(path), leaf

    def eval(self) -> Module:
        """PyTorch's ``eval()``: nothing to do, Ember modules always evaluate."""
        return self

    def train(self, mode: bool = True) -> Module:
        """Only ``train(False)``: Ember compiles for inference, so training-mode behaviour
        (dropout, batch statistics) is refused rather than silently replaced by evaluation."""
        if mode:
            raise ArgumentError("nn: training mode is not supported; Ember compiles for inference")
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def traced(self, tracer: Tracer, name: str) -> Tensor:
        """This module's parameter ``name`` as a traced constant."""
        return tracer.constant(self._params[name], f"{getattr(self, '_scope', 'p')}.{name}")

    def to_onnx(self, spec: Mapping[str, Any]) -> Any:
        """Trace ``forward`` on inputs ``spec`` (``{"x": (8, 64)}`` or ``{"ids": ((1, 16),
        "int64")}``) into a checked ONNX ``ModelProto``."""
        # optional dependency: onnx
        import onnx
        from onnx import helper, numpy_helper

        if not isinstance(spec, Mapping) or not all(isinstance(k, str) and k for k in spec):
            raise ArgumentError(
                f"nn: export takes a mapping of input names to shapes, got {spec!r}"
            )
        tracer = Tracer(reserved=spec)
        self._name_scopes("")
        inputs = [Tensor(tracer, name, *_shape_dtype(name, s)) for name, s in spec.items()]
        result = self.forward(*inputs)
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        if not all(isinstance(o, Tensor) for o in outputs):
            raise ArgumentError("nn: forward must return Tensors (or a tuple of them)")
        outputs = _distinct_outputs(tracer, outputs, {t.name for t in inputs})

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
        return from_onnx(self.to_onnx(spec))

    def _name_scopes(self, prefix: str) -> None:
        object.__setattr__(self, "_scope", prefix.rstrip(".") or type(self).__name__.lower())
        for cname, child in self._children.items():
            child._name_scopes(f"{prefix}{cname}.")


def _distinct_outputs(tracer: Tracer, outputs: list[Tensor], inputs: set[str]) -> list[Tensor]:
    """Each output its own computed value: an output that is an input (``Identity``,
    ``Dropout``), a parameter, or another output gets an ``Identity`` node, as ONNX
    graphs need distinct output names made by nodes."""
    seen: set[str] = set()
    fixed = []
    for t in outputs:
        if t.name in seen or t.name in inputs or t.name in tracer.initializers:
            t = t.unary("Identity")
        seen.add(t.name)
        fixed.append(t)
    return fixed


def _shape_dtype(name: str, spec: Any) -> tuple[tuple[int, ...], str]:
    """An input's (shape, dtype) from ``(8, 64)`` or ``((1, 16), "int64")``; a shape that is
    not positive ints or a dtype Ember cannot take is an ``ArgumentError`` naming the input."""
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], (tuple, list)):
        shape, dtype = spec
    else:
        shape, dtype = spec, "float32"
    try:
        if isinstance(shape, (str, bytes)) or any(isinstance(d, bool) for d in shape):
            raise TypeError("not a shape")
        dims = tuple(operator.index(d) for d in shape)
    except TypeError as e:
        raise ArgumentError(
            f"nn: input '{name}' needs a shape of positive ints, got {spec!r}"
        ) from e
    if not all(d > 0 for d in dims):
        raise ArgumentError(f"nn: input '{name}' needs a shape of positive ints, got {spec!r}")
    try:
        dtype_name = str(np.dtype(dtype))
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"nn: input '{name}' has an unknown dtype {dtype!r}") from e
    if dtype_name not in SUPPORTED_DTYPES:
        raise ArgumentError(
            f"nn: input '{name}' has dtype {dtype_name}, which Ember does not support "
            f"(supported: {', '.join(SUPPORTED_DTYPES)})"
        )
    return dims, dtype_name
