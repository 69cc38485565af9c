"""The normalisation layers of ``ember.frontend.nn``: ``LayerNorm`` and ``BatchNorm2d``.

They keep PyTorch's parameter and buffer names and defaults, so a PyTorch state dict
loads into them, and trace what PyTorch exports in evaluation mode: ``LayerNorm`` one
``LayerNormalization`` over the last dims, ``BatchNorm2d`` a ``BatchNormalization`` with
the running statistics or, with ``track_running_stats=False``, the batch's own mean and
biased variance written with elementwise operators. Re-exported by :mod:`.layers` and
by ``ember.frontend.nn``.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.nn.checks import expect_float, expect_ndim, has_param
from ember.frontend.nn.module import Module
from ember.frontend.nn.tensor import Tensor


class LayerNorm(Module):
    """Normalise over the last ``len(normalized_shape)`` dims; ``weight`` (ones) and
    ``bias`` (zeros) of that shape unless ``elementwise_affine=False`` / ``bias=False``."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        shape = (
            (operator.index(normalized_shape),)
            if not isinstance(normalized_shape, (tuple, list))
            else tuple(operator.index(d) for d in normalized_shape)
        )
        self.normalized_shape, self.eps = shape, float(eps)
        self.elementwise_affine = elementwise_affine
        self.size = shape[-1] if len(shape) == 1 else shape
        ones, zeros = np.ones(shape, np.float32), np.zeros(shape, np.float32)
        self.param("weight", ones if elementwise_affine else None, shape=shape)
        self.param("bias", zeros if elementwise_affine and bias else None, shape=shape)

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if x.shape[x.ndim - k :] != self.normalized_shape or x.ndim < k:
            raise ArgumentError(
                f"nn.LayerNorm({list(self.normalized_shape)}) got input {list(x.shape)}"
            )
        expect_float(x, "LayerNorm")
        t = x.tracer
        scale = (
            self.traced(t, "weight")
            if has_param(self, "weight")
            else t.constant(np.ones(self.normalized_shape, np.float32), f"{self._scope}.ones")
        )
        ins = [x.name, scale.name]
        if has_param(self, "bias"):
            ins.append(self.traced(t, "bias").name)
        return t.node("LayerNormalization", ins, x.shape, axis=-k, epsilon=self.eps)


class BatchNorm2d(Module):
    """Batch norm in evaluation mode, with PyTorch's names and buffers (``running_mean``,
    ``running_var``, ``num_batches_tracked``). ``momentum`` only matters in training and is
    kept for the signature; ``track_running_stats=False`` normalises with the batch's own
    statistics (biased variance), as PyTorch does in evaluation mode."""

    # PyTorch fills a missing num_batches_tracked in load_state_dict (older checkpoints).
    _optional_state = frozenset({"num_batches_tracked"})

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        c = (num_features,)
        self.num_features, self.eps, self.momentum = num_features, float(eps), momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.param("weight", np.ones(c, np.float32) if affine else None, shape=c)
        self.param("bias", np.zeros(c, np.float32) if affine else None, shape=c)
        track = track_running_stats
        self.param("running_mean", np.zeros(c, np.float32) if track else None, shape=c)
        self.param("running_var", np.ones(c, np.float32) if track else None, shape=c)
        count = np.array(0, np.int64) if track else None
        self.param("num_batches_tracked", count, shape=(), dtype="int64")

    def _param_or(self, t: Any, name: str, fill: float) -> Tensor:
        if has_param(self, name):
            return self.traced(t, name)
        return t.constant(np.full(self.num_features, fill, np.float32), f"{self._scope}.{name}")

    def forward(self, x: Tensor) -> Tensor:
        expect_ndim(x, 4, "BatchNorm2d")
        expect_float(x, "BatchNorm2d")
        if x.shape[1] != self.num_features:
            raise ArgumentError(f"nn.BatchNorm2d({self.num_features}) got {x.shape[1]} channels")
        t = x.tracer
        weight, bias = self._param_or(t, "weight", 1.0), self._param_or(t, "bias", 0.0)
        if not has_param(self, "running_mean"):
            return self._batch_stats(x, weight, bias)
        ins = [x.name, weight.name, bias.name]
        ins += [self.traced(t, "running_mean").name, self.traced(t, "running_var").name]
        return t.node("BatchNormalization", ins, x.shape, epsilon=self.eps)

    def _batch_stats(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        centred = x - x.mean((0, 2, 3))
        var = (centred * centred).mean((0, 2, 3))
        normed = centred / (var + self.eps).unary("Sqrt")
        c = (1, self.num_features, 1, 1)
        return normed * weight.reshape(*c) + bias.reshape(*c)
