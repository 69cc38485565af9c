"""The ``grid_sample`` op: an image read at coordinates that arrive as a tensor (ONNX GridSample).

Attributes (set by the converter, every one present): mode ("nearest", "linear",
"cubic"; the converter maps opset 16's bilinear and bicubic onto these), padding_mode
("zeros", "border", "reflection"), align_corners (bool). Inputs: the image
(N, C, *spatial) and the grid (N, *output spatial, number of spatial axes), floating
point. The output is (N, C, *output spatial) in the image's dtype. The compute is
``tir/topi/grid_sample.py``; it reads taps at data-dependent positions, one output
element at a time, so it is INJECTIVE like resize and the gathers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.op_kinds import INJECTIVE
from ember.frontend.ops.registry import register_op
from ember.tir.topi import grid_sample as topi_gs


def _infer_grid_sample(types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x, grid = types
    r = x.ndim - 2
    fits = r >= 1 and grid.ndim == x.ndim and grid.shape[-1] == r and grid.shape[0] == x.shape[0]
    if not fits:
        raise ArgumentError(
            f"grid_sample: grid {grid} does not fit image {x}: it must be "
            f"(N, *output spatial, {max(r, 1)}) for an (N, C, *spatial) image"
        )
    if not grid.dtype.startswith(("float", "bfloat")):
        raise ArgumentError(f"grid_sample: the grid must be floating point, got {grid}")
    if attrs["mode"] not in topi_gs.MODES or attrs["padding_mode"] not in topi_gs.PADDING_MODES:
        raise ArgumentError(
            f"grid_sample: unknown mode {attrs['mode']!r} or padding {attrs['padding_mode']!r}"
        )
    return [TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


@register_op("grid_sample", INJECTIVE, infer=_infer_grid_sample, num_inputs=2)
def grid_sample(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Samples each image of the batch at its grid's normalised coordinates."""
    a = attrs
    return [
        topi_gs.grid_sample(
            inputs[0], inputs[1], a["mode"], a["padding_mode"], bool(a["align_corners"])
        )
    ]
