"""Artifacts of models with symbolic input dims, and ``ember.load`` for both kinds of file.

A :class:`~ember.graph.dynamic_model.DynamicModel` is a source plus the sizes compiled so far,
so its ``.ember`` file (a zip archive, format ``ember-dynamic-model``) holds:

- ``manifest.json``: format and Ember versions, target, the SHA-256 of every other
  member, the inputs and outputs with their symbolic dims, the graph passes, and the
  specializations (which sizes each nested artifact was compiled for);
- the source: ``source.onnx`` (the ONNX model, imported again for each new size) or
  ``source/graph.json`` plus ``source/params.npz`` (an Ember Graph, no pickle) and, where
  the graph has inputs with defaults, ``source/defaults.npz``;
- ``specs/<i>.ember``: one complete static-shape artifact (``ember/artifact.py``) per size
  compiled before export, checked again by its own manifest when loaded.

So a loaded model runs the exported sizes without compiling and compiles other sizes on
first use (an ONNX source needs the ``onnx`` package for that). Tuning records are not
carried: sizes compiled after loading use the templates' default configs. The archive is
read through :func:`ember.graph.artifact.read_archive`, so a tampered or truncated file is
refused with :class:`~ember.errors.InvalidModelError` before anything is loaded.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError
from ember.graph import artifact

FORMAT = "ember-dynamic-model"


def export_dynamic(model: Any, path: str | Path, archs: Any = None, ptx: bool = True) -> None:
    """Write ``model`` (a DynamicModel) and its specializations so far to ``path``."""
    passes = model.graph_passes
    if passes is not None and len(passes):
        raise ArgumentError(
            "export: a model with symbolic dims compiled with custom graph_passes cannot be "
            "exported (a loaded model could not compile new sizes the same way); compile it "
            "with shapes=, or with the default passes"
        )
    members = _source_members(model.source)
    specs = []
    with tempfile.TemporaryDirectory(prefix="ember-export-") as tmp:
        for k, (key, compiled) in enumerate(model.specializations.items()):
            nested = Path(tmp) / f"{k}.ember"
            compiled.export(nested, archs=archs, ptx=ptx)
            members[f"specs/{k}.ember"] = nested.read_bytes()
            specs.append({"sizes": dict(key), "member": f"specs/{k}.ember"})
    manifest = {
        "format": FORMAT,
        "format_version": artifact.FORMAT_VERSION,
        "ember_version": artifact._ember_version(),
        "target": str(model.target),
        "source": model.source.kind,
        "shapes": {k: list(v) for k, v in getattr(model.source, "shapes", {}).items()},
        "graph_passes": "default" if passes is None else "none",
        "inputs": _signature(model.input_names, model.input_types),
        "outputs": _signature(model.output_names, model.output_types),
        "specializations": specs,
        "sha256": {name: artifact.sha256(data) for name, data in sorted(members.items())},
        "sizes": {name: len(data) for name, data in sorted(members.items())},
    }
    artifact._write_atomically(Path(path), manifest, members)


def _signature(names: list[str], types: list[Any]) -> list[list[Any]]:
    return [[n, list(t.shape), t.dtype] for n, t in zip(names, types)]


def _source_members(source: Any) -> dict[str, bytes]:
    if source.kind == "onnx":
        return {"source.onnx": source.data}
    graph = source.graph
    members = {
        "source/graph.json": json.dumps(artifact.graph_to_json(graph), sort_keys=True).encode(),
        "source/params.npz": artifact._params_bytes(graph.params),
    }
    if graph.defaults:
        members["source/defaults.npz"] = artifact._params_bytes(graph.defaults)
    return members
