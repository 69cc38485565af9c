"""What ``ember bench`` may be given as a model: a name from the catalog
(:data:`ember.frontend.testing.catalog.CATALOG`) or the path of an ``.onnx`` file, which
is fed seeded random inputs (a symbolic dim is 1; integer inputs are drawn from 0-9, as
``ember run --random`` draws them, so token ids and indices stay small)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError, InvalidModelError
from ember.frontend.testing.catalog import CATALOG


def resolve(spec: str, quick: bool = False, seed: int = 0) -> tuple[str, Any, dict]:
    """``(name, ONNX model, inputs)`` for a catalog name or an ``.onnx`` path."""
    rng = np.random.default_rng(seed)
    if spec in CATALOG:
        model, inputs = CATALOG[spec](rng, quick)
        return spec, model, inputs
    path = Path(spec)
    if path.suffix != ".onnx" and not path.exists():
        raise ArgumentError(
            f"unknown model {spec!r}: neither a catalog name ({', '.join(CATALOG)}) "
            "nor an .onnx file"
        )
    if not path.is_file():
        raise ArgumentError(f"model file {spec!r} does not exist")
    # optional dependency: onnx
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError, OSError, ValueError, ...
        raise InvalidModelError(f"{spec}: not a readable ONNX model ({e})") from e
    return path.stem, model, random_inputs(model, rng)


def random_inputs(model: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Seeded random values for every graph input of ``model`` that no initializer
    gives (see the module's docstring for the rules)."""
    # optional dependency: onnx
    from onnx import helper

    given = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in given:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise ArgumentError(f"input {value.name!r} is not a tensor; give a model of tensors")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        shape = tuple(d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim)
        if dtype.kind in "iu":
            feeds[value.name] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
