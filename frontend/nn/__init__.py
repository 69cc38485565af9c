"""``ember.frontend.nn``: build models in Python, PyTorch-style, and compile them with Ember.

::

    from ember.frontend import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x))) + x

    graph = Block().export({"x": (8, 64)})        # an Ember graph; to_onnx() gives ONNX
    lib = ember.compile(graph, target="llvm")
"""

from ember.frontend.nn.attention import MultiheadAttention
from ember.frontend.nn.layers import (
    GELU,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)
from ember.frontend.nn.module import Module, manual_seed
from ember.frontend.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from ember.frontend.nn.tensor import Tensor


def export(module: Module, spec: dict) -> object:
    """``module.export(spec)``: the module as an Ember graph."""
    return module.export(spec)


__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Identity",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "MaxPool2d",
    "Module",
    "MultiheadAttention",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "Tensor",
    "export",
    "manual_seed",
]
