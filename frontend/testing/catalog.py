"""The benchmark's models by name: what ``ember bench resnet18`` and
``benchmarks/bench_models.py`` build.

``CATALOG`` maps a name to a builder ``(rng, quick) -> (onnx model, inputs)``; ``quick``
asks for small inputs (64x64 images, 32 tokens, a smaller MLP and CNN) so a run takes
seconds, for CI and tests. The models themselves are built in :mod:`zoo` and :mod:`models`
from seeded random weights (the ``light_*`` models are the ONNX model zoo's CNNs that ship in
the onnx wheel, given seeded random weights; always 224x224). More models are added here as
one entry each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.frontend.testing import zoo, zoo_audio, zoo_cnn, zoo_light, zoo_transformer
from ember.frontend.testing.models import mlp, small_cnn, speech_lstm

Builder = Callable[[np.random.Generator, bool], tuple[Any, dict[str, np.ndarray]]]


def _resnet18(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    return zoo.resnet18(rng, 1, 64 if quick else 224)


def _mobilenet_v2(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    return zoo.mobilenet_v2(rng, 1, 64 if quick else 224)


def _bert(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    return zoo.bert_encoder(rng, 1, 32 if quick else 128, layers=4, hidden=256, heads=4)


def _cnn(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    return small_cnn(rng, 2, 32, 32) if quick else small_cnn(rng, 8, 64, 64)


def _mlp(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    return mlp(rng, 16, (256, 512, 128)) if quick else mlp(rng, 64, (512, 1024, 256))


def _speech(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    return speech_lstm()  # tiny either way (its weights have their own seed): per-call overhead


def _gpt2(past: int) -> Builder:
    """The GPT-2-small decode step at cache length ``past`` (a symbolic dim: the compiled
    model specializes to it on its first run)."""

    def build(rng: np.random.Generator, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
        return zoo_transformer.gpt2_decode(rng, quick, past=past)

    return build


CATALOG: dict[str, Builder] = {
    "resnet18": _resnet18,
    "mobilenet_v2": _mobilenet_v2,
    "bert": _bert,
    "cnn": _cnn,
    "mlp": _mlp,
    "speech": _speech,
    **zoo_cnn.BUILDERS,  # resnet50, squeezenet, shufflenet_v2
    "bert_base": zoo_transformer.bert_base,
    "vit": zoo_transformer.vit,
    "gpt2_past128": _gpt2(128),
    "gpt2_past1024": _gpt2(1024),
    **zoo_audio.BUILDERS,  # mel_spectrogram, kws_dscnn
    **zoo_light.light_builders(),  # the onnx wheel's real CNNs (none without the wheel's data)
}
