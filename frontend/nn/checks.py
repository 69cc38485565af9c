"""The argument checks the layers of ``ember.frontend.nn`` share.

The layers (:mod:`.layers`, :mod:`.normalization`, :mod:`.pooling`, :mod:`.attention`)
take PyTorch's arguments and check them here as they are made or called: a size given
as an int or a pair, an input's rank and dtype, whether an optional parameter exists.
Each refusal is an :class:`~ember.errors.ArgumentError` naming the layer, as
PyTorch's own message would.
"""

from __future__ import annotations

import operator
from typing import Any

from ember.errors import ArgumentError
from ember.frontend.nn.module import Module
from ember.frontend.nn.tensor import Tensor


def pair(v: Any, what: str, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints, each at least ``minimum``, as a pair."""
    try:
        if isinstance(v, bool):
            raise TypeError
        pair = (operator.index(v),) * 2 if not isinstance(v, (tuple, list)) else tuple(v)
        if len(pair) != 2 or any(isinstance(p, bool) for p in pair):
            raise TypeError
        out = (operator.index(pair[0]), operator.index(pair[1]))
    except TypeError as e:
        raise ArgumentError(f"{what} must be an int or a pair of ints, got {v!r}") from e
    if min(out) < minimum:
        raise ArgumentError(f"{what} must be at least {minimum}, got {v!r}")
    return out


def expect_ndim(x: Tensor, ndim: int, what: str) -> None:
    """An ArgumentError unless ``x`` has ``ndim`` dims (``what``: the layer, for the message)."""
    if x.ndim != ndim:
        raise ArgumentError(f"nn.{what} expects a {ndim}-D input, got shape {list(x.shape)}")


def expect_float(x: Tensor, what: str) -> None:
    """Weights are float32; PyTorch refuses to mix them with another input dtype, and so do we
    (``x.float()`` converts)."""
    if x.dtype != "float32":
        raise ArgumentError(
            f"nn.{what} has float32 parameters and got a {x.dtype} input; use x.float()"
        )


def has_param(module: Module, name: str) -> bool:
    """Whether ``module`` has parameter ``name`` (one made with ``None`` is absent)."""
    return module._params.get(name) is not None
