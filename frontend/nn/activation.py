"""The activation layers of ``ember.frontend.nn``: one ONNX operator each, as PyTorch exports.

``ReLU``, ``Sigmoid``, ``Tanh``, ``LeakyReLU`` and ``GELU`` trace one elementwise ONNX
operator of the same name over their input (with its attribute: the slope, the GELU
form); ``Softmax`` traces ``Softmax`` over a dim and, like PyTorch, picks one from the
rank with a warning when none is given. They take PyTorch's arguments and defaults
(``inplace`` is kept and means nothing in a traced graph). Re-exported by
:mod:`.layers` and by ``ember.frontend.nn``.
"""

from __future__ import annotations

import warnings
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.nn.module import Module
from ember.frontend.nn.tensor import Tensor


class _Activation(Module):
    op_type = ""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace  # no meaning in a traced graph; kept for PyTorch's signature
        self.attrs: dict[str, Any] = {}

    def forward(self, x: Tensor) -> Tensor:
        return x.unary(self.op_type, **self.attrs)


class ReLU(_Activation):
    """``torch.nn.ReLU``: exports as ONNX ``Relu``."""

    op_type = "Relu"


class Sigmoid(_Activation):
    """``torch.nn.Sigmoid``: exports as ONNX ``Sigmoid``."""

    op_type = "Sigmoid"

    def __init__(self) -> None:
        super().__init__()


class Tanh(_Activation):
    """``torch.nn.Tanh``: exports as ONNX ``Tanh``."""

    op_type = "Tanh"

    def __init__(self) -> None:
        super().__init__()


class LeakyReLU(_Activation):
    """``max(0, x) + negative_slope * min(0, x)``; PyTorch's default slope is 0.01."""

    op_type = "LeakyRelu"

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__(inplace)
        self.negative_slope = float(negative_slope)
        self.attrs = {"alpha": self.negative_slope}


class GELU(_Activation):
    """GELU; exact (erf) by default, ``approximate="tanh"`` for the tanh form, as in PyTorch."""

    op_type = "Gelu"

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ArgumentError(
                f"nn.GELU: approximate must be 'none' or 'tanh', got {approximate!r}"
            )
        self.approximate = approximate
        self.attrs = {"approximate": approximate}


class Softmax(Module):
    """Softmax over ``dim``. PyTorch's default ``dim=None`` picks a dim from the rank
    (0 for 0-, 1- and 3-D inputs, else 1) with a deprecation warning; so does this."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        dim = self.dim
        if dim is None:
            warnings.warn(
                "nn.Softmax: implicit dimension choice is deprecated (as in PyTorch); pass dim=",
                UserWarning,
                stacklevel=2,
            )
            dim = 0 if x.ndim in (0, 1, 3) else 1
        return x.softmax(dim)
