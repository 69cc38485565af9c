"""Workloads: the sizes of one operator call, as its strategies and templates name them.

A workload is the key of a tuning task: a template's positional arguments are
:meth:`Conv2DWorkload.args` (records on disk key on them, so their order and form are
fixed), and a strategy reads a graph node's shapes and attributes into one
(:meth:`Conv2DWorkload.from_node`) instead of passing eleven values around. The padding,
strides and dilations stay as the caller gave them (a template normalises them), so
the arguments of a graph's task equal those of a direct template call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import Any

IntPair = int | tuple[int, int]  # as given: a template call may pass one int
Padding = int | tuple[int, int] | tuple[int, int, int, int]


def _pair(v: IntPair) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _ints(shape: Sequence[Any]) -> tuple[int, ...]:
    return tuple(int(getattr(d, "value", d)) for d in shape)


@dataclass(frozen=True)
class Conv2DWorkload:
    """An NCHW 2-D convolution without groups: input (N, C, H, W), weights (O, C, KH, KW)."""

    N: int
    C: int
    H: int
    W: int
    O: int
    KH: int
    KW: int
    strides: IntPair
    pads: Padding
    dilations: IntPair
    dtype: str = "float32"

    @property
    def args(self) -> tuple[Any, ...]:
        """The template arguments ``(N, C, H, W, O, KH, KW, strides, pads, dilations,
        dtype)`` of ``conv2d_nchw.llvm`` and ``conv2d_NCHWc.llvm``."""
        return astuple(self)

    @classmethod
    def from_args(cls, args: Sequence[Any]) -> Conv2DWorkload:
        """The workload of a task's arguments (the inverse of :attr:`args`)."""
        return cls(*args)

    @property
    def stride_pair(self) -> tuple[int, int]:
        """``(sh, sw)``, however the strides were given."""
        return _pair(self.strides)

    @property
    def dilation_pair(self) -> tuple[int, int]:
        """``(dh, dw)``, however the dilations were given."""
        return _pair(self.dilations)

    @property
    def pads4(self) -> tuple[int, int, int, int]:
        """``(top, left, bottom, right)``, however the padding was given."""
        p = self.pads
        if isinstance(p, int):
            return (p, p, p, p)
        return (p[0], p[1], p[0], p[1]) if len(p) == 2 else (p[0], p[1], p[2], p[3])

    @classmethod
    def from_node(
        cls, x_shape: Sequence[Any], w_shape: Sequence[Any], attrs: dict[str, Any], dtype: str
    ) -> Conv2DWorkload:
        """The workload of a graph ``conv`` on an NCHW input and OIHW weights."""
        N, C, H, W = _ints(x_shape)
        O, _, KH, KW = _ints(w_shape)
        geometry = (tuple(attrs["strides"]), tuple(attrs["pads"]), tuple(attrs["dilations"]))
        return cls(N, C, H, W, O, KH, KW, *geometry, dtype)


@dataclass(frozen=True)
class DepthwiseConv2DWorkload:
    """An NCHW depthwise 2-D convolution: one input channel per group, ``multiplier``
    output channels per group; weights (C * multiplier, 1, KH, KW)."""

    N: int
    C: int
    H: int
    W: int
    multiplier: int
    KH: int
    KW: int
    strides: IntPair
    pads: Padding
    dilations: IntPair
    dtype: str = "float32"

    @property
    def args(self) -> tuple[Any, ...]:
        """The template arguments ``(N, C, H, W, multiplier, KH, KW, strides, pads,
        dilations, dtype)`` of ``depthwise_conv2d_nchw.llvm`` and
        ``depthwise_conv2d_NCHWc.llvm``."""
        return astuple(self)

    @classmethod
    def from_args(cls, args: Sequence[Any]) -> DepthwiseConv2DWorkload:
        """The workload of a task's arguments (the inverse of :attr:`args`)."""
        return cls(*args)
