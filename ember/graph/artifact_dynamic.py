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
import zipfile
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, InvalidModelError
from ember.graph import artifact
from ember.graph import artifact_archive as archive
from ember.graph import artifact_schema as schema

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
        "sha256": {name: artifact._sha256(data) for name, data in sorted(members.items())},
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


def load_dynamic(path: str | Path) -> Any:
    """The DynamicModel stored in ``path`` by :func:`export_dynamic`, every part checked
    (:mod:`ember.graph.artifact_schema`); each stored specialization must be the model compiled
    for its sizes: inputs and outputs of the types the symbolic signature gives them."""
    from ember.graph.dynamic_model import DynamicModel

    manifest, members = artifact.read_archive(path, FORMAT)
    schema.check_dynamic_manifest(manifest, path)
    source = _read_source(manifest, members, path)
    passes = None if manifest["graph_passes"] == "default" else ()
    model = DynamicModel(source, manifest["target"], None, passes)
    with tempfile.TemporaryDirectory(prefix="ember-load-") as tmp:
        for k, spec in enumerate(manifest["specializations"]):
            if set(spec["sizes"]) != set(model.symbols):
                raise InvalidModelError(
                    f"{path}: specialization {k} binds {sorted(spec['sizes'])}, the model's "
                    f"symbols are {model.symbols}"
                )
            nested = Path(tmp) / f"{k}.ember"
            nested.write_bytes(members[spec["member"]])
            key = tuple((s, spec["sizes"][s]) for s in model.symbols)
            compiled = artifact.load_model(nested)
            _check_specialization(model, compiled, dict(key), f"{path}: specialization {k}")
            model.specializations[key] = compiled
    return model


def _check_specialization(model: Any, compiled: Any, sizes: dict[str, int], where: str) -> None:
    """``compiled`` takes and gives what ``model`` does at ``sizes``."""
    for names, types, got_names, got_types in (
        (model.input_names, model.input_types, compiled.input_names, compiled.input_types),
        (model.output_names, model.output_types, compiled.output_names, compiled.output_types),
    ):
        want = [(tuple(sizes.get(d, d) for d in t.shape), t.dtype) for t in types]
        got = [(tuple(t.shape), t.dtype) for t in got_types]
        if list(names) != list(got_names) or want != got:
            raise InvalidModelError(
                f"{where} is not the model at sizes {sizes}: it takes or gives {got}, not {want}"
            )


def _read_source(manifest: dict[str, Any], members: dict[str, bytes], path: Any) -> Any:
    from ember.errors import EmberError
    from ember.graph.dynamic_model import GraphSource, OnnxSource

    try:
        if manifest["source"] == "onnx":
            from ember.frontend.onnx_import.importer import load_model

            return OnnxSource(load_model(members["source.onnx"]), manifest["shapes"])
        body = archive.parse_json(members["source/graph.json"], "source/graph.json", path)
        schema.check_graph(body, path, symbolic=True)
        params = artifact.read_params(members, "source/params.npz", body, path)
        defaults = artifact.read_defaults(members, "source/defaults.npz", body, path)
        return GraphSource(artifact.graph_from_json(body, params, path, defaults, symbolic=True))
    except InvalidModelError:
        raise
    except EmberError as e:
        raise InvalidModelError(f"{path}: its source model does not import: {e}") from e
    except (*archive.ARCHIVE_ERRORS, RecursionError) as e:
        raise InvalidModelError(f"{path}: malformed source: {e}") from e


def file_format(path: str | Path) -> str | None:
    """The ``format`` an ``.ember`` file's manifest names, or None when it has none (or
    the file is unreadable: :func:`ember.graph.artifact.read_archive` then says why)."""
    try:
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("manifest.json")
            manifest = json.loads(archive.read_member(z, info, Path(path)))
    except (*archive.ARCHIVE_ERRORS, InvalidModelError, RecursionError):
        return None
    return manifest.get("format") if isinstance(manifest, dict) else None


def load(path: str | Path) -> Any:
    """``ember.load``: the model in an ``.ember`` file, a CompiledModel or a DynamicModel."""
    if file_format(path) == FORMAT:
        return load_dynamic(path)
    return artifact.load_model(path)
