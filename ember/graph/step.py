"""One step of a compiled model's plan: a kernel (or a host step) and the values it reads
and writes. The compile driver makes them, the executor runs them, the artifact writer
stores them and the loader makes them again; this module is what all four share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Step:
    """``kernel(*inputs, *outputs)`` over the named values; ``where`` names the node or
    fused group it came from, for errors and profiles."""

    kernel: Callable[..., None]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    where: str


def empty_kernel(*arrays: Any) -> None:
    """The kernel of a node whose outputs have no elements: there is nothing to write."""
