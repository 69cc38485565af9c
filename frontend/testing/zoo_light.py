"""The ONNX model zoo's "light" models that ship inside the installed ``onnx`` wheel.

``onnx/backend/test/data/light/`` holds nine classic CNNs as the zoo published them
(AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet v1, SqueezeNet 1.0,
VGG-19, ZFNet-512; opset 9, 1x3x224x224 inputs), with every large weight replaced by a
``ConstantOfShape`` filled with 0.02 so that the files stay small. With those weights
every image gives the same uniform softmax, which would hide a wrong kernel; so
:func:`light_model` puts seeded random weights of the same shapes in their place
(He-scaled, batch-norm variances positive) and keeps every other node as published.
``randomize=False`` keeps the file as shipped (its ``*_output_0.pb`` is then the
expected output). They are the only real models found on a machine without a download.
Their Reshape targets are constants of the 224x224 graph, so they have no quick size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError


def light_dir() -> Path | None:
    """The wheel's folder of light models, or None when onnx (or the folder) is missing."""
    try:
        # optional dependency: onnx
        import onnx
    except ImportError:
        return None
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return path if path.is_dir() else None


def light_models() -> dict[str, Path]:
    """``{name: path}`` for each light model found (names without the ``light_`` prefix,
    e.g. ``resnet50``), sorted by name; empty without onnx."""
    folder = light_dir()
    if folder is None:
        return {}
    return {p.stem.removeprefix("light_"): p for p in sorted(folder.glob("light_*.onnx"))}


def _scaled_weight(rng: np.random.Generator, shape: tuple[int, ...], use: tuple[str, int]) -> Any:
    """A random stand-in for a zoo weight of ``shape`` used as input ``use[1]`` of a
    ``use[0]`` node: He-scaled for matrices and kernels, positive for batch-norm scales and
    variances, small for biases and shifts (so activations keep their range in 121 layers)."""
    op, slot = use
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
    if op == "BatchNormalization" and slot in (1, 4):
        return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape) * 0.1


def randomize_weights(model: Any, rng: np.random.Generator) -> Any:
    """A copy of ``model`` whose ``ConstantOfShape`` weights (a constant shape in, the
    placeholder value out) are seeded random initializers of the same shape."""
    # optional dependency: onnx
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    uses = {i: (n.op_type, k) for n in graph.node for k, i in enumerate(n.input)}
    keep, dropped = [], set()
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            keep.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        value = _scaled_weight(rng, shape, uses.get(node.output[0], ("", 0)))
        graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        if out.ir_version < 4:  # IR 3 lists every initializer among the graph inputs too
            graph.input.append(helper.make_tensor_value_info(node.output[0], 1, shape))
        dropped.add(node.input[0])
    del graph.node[:]
    graph.node.extend(keep)
    still_used = {i for n in keep for i in n.input}
    for name in dropped - still_used:
        graph.initializer.remove(next(t for t in graph.initializer if t.name == name))
        for vi in [vi for vi in graph.input if vi.name == name]:
            graph.input.remove(vi)
    return out


def light_model(
    name: str, rng: np.random.Generator, randomize: bool = True
) -> tuple[Any, dict[str, np.ndarray]]:
    """The light model ``name`` (a key of :func:`light_models`) and a random image for each
    graph input; seeded random weights unless ``randomize`` is False."""
    # optional dependency: onnx
    import onnx

    found = light_models()
    if name not in found:
        raise ArgumentError(
            f"no light model {name!r} in the installed onnx wheel; found: {', '.join(found)}"
        )
    model = onnx.load(str(found[name]))
    if randomize:
        model = randomize_weights(model, rng)
    inits = {t.name for t in model.graph.initializer}
    inputs = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        inputs[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return model, inputs


def expected_output(name: str) -> np.ndarray:
    """The output the wheel ships for the light model ``name`` as published (unrandomized)."""
    # optional dependency: onnx
    import onnx
    from onnx import numpy_helper

    path = light_models()[name]
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.with_name(f"{path.stem}_output_0.pb").read_bytes())
    return numpy_helper.to_array(tensor)


def _builder(name: str, rng: np.random.Generator, quick: bool = False) -> tuple[Any, dict]:
    return light_model(name, rng)  # no quick size: the graphs' Reshape targets are fixed


def light_builders() -> dict[str, Callable[[np.random.Generator, bool], tuple[Any, dict]]]:
    """``{"light_<name>": builder(rng, quick)}`` for the catalog; ``quick`` changes nothing
    (the published graphs fix their 224x224 size)."""
    return {f"light_{n}": functools.partial(_builder, n) for n in light_models()}
