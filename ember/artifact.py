"""Compiled-model artifacts: ``CompiledModel.export(path)`` and ``ember.load(path)``.

One ``.ember`` file holds everything a fresh process needs to run a compiled model:
a zip archive with

- ``manifest.json``: format version, Ember version, target, the SHA-256 of every
  other member, and the kernel table (which library serves which step);
- ``graph.json``: the graph (values with types, nodes with their attributes) and
  the steps (kernel, values read, values written);
- ``params.npz``: the constants, written and read without pickle;
- ``kernels/k<i>.so``: for CPU models, one shared library per distinct kernel
  (``Module.export_library``); CUDA models hold per kernel module its TIR, CUDA
  source, cubins and PTX instead, and a ``cuda`` manifest section
  (:mod:`ember.artifact_cuda`).

``load`` checks the format version and every hash before it opens a library, so a
tampered or truncated file is refused with :class:`~ember.errors.InvalidModelError`
instead of being loaded into the process. Libraries are unpacked into a cache folder
named by the archive's content hash, since the dynamic loader needs files.
Format version 2 added CUDA models; version 1 files (CPU only, otherwise the same)
are still read.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ArgumentError, EmberError, InvalidModelError

FORMAT = "ember-model"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _attr_to_json(v: Any) -> Any:
    if isinstance(v, tuple):
        return {"tuple": [_attr_to_json(x) for x in v]}
    if isinstance(v, float) and not np.isfinite(v):
        return {"float": repr(v)}
    return v


def _attr_from_json(v: Any) -> Any:
    if isinstance(v, dict) and "tuple" in v:
        return tuple(_attr_from_json(x) for x in v["tuple"])
    if isinstance(v, dict) and "float" in v:
        return float(v["float"])
    return v


def graph_to_json(graph: Any) -> dict[str, Any]:
    """The graph as plain JSON data (params travel separately)."""
    return {
        "name": graph.name,
        "values": {n: [list(v.type.shape), v.type.dtype] for n, v in graph.values.items()},
        "inputs": graph.input_names,
        "outputs": graph.output_names,
        "params": sorted(graph.params),
        "nodes": [
            {
                "op": n.op,
                "name": n.name,
                "op_type": n.op_type,
                "inputs": list(n.inputs),
                "outputs": list(n.outputs),
                "attrs": {k: _attr_to_json(v) for k, v in n.attrs.items()},
                "group": n.group,
            }
            for n in graph.nodes
        ],
    }


def graph_from_json(data: dict[str, Any], params: dict[str, np.ndarray]) -> Any:
    from ember.frontend.graph import Graph, Node, TensorType, Value

    values = {n: Value(n, TensorType(tuple(s), d)) for n, (s, d) in data["values"].items()}
    nodes = [
        Node(
            n["op"],
            n["name"],
            tuple(n["inputs"]),
            tuple(n["outputs"]),
            {k: _attr_from_json(v) for k, v in n["attrs"].items()},
            n["op_type"],
            n["group"],
        )
        for n in data["nodes"]
    ]
    graph = Graph(
        [values[n] for n in data["inputs"]],
        [values[n] for n in data["outputs"]],
        nodes,
        params,
        values,
        data["name"],
    )
    return graph.verify()


def _params_bytes(params: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    # npz keys are the value names; positional order is kept in graph.json
    np.savez(buf, **{f"p{i}": params[n] for i, n in enumerate(sorted(params))})
    return buf.getvalue()


class _LibraryPacker:
    """The CPU kernels of a model as shared libraries, one per distinct module."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.members: dict[str, bytes] = {}
        self._ids: dict[int, int] = {}

    def add(self, module: Any, where: str) -> int:
        if id(module) not in self._ids:
            k = self._ids[id(module)] = len(self._ids)
            lib = self.folder / f"k{k}.so"
            module.export_library(lib)
            self.members[f"kernels/k{k}.so"] = lib.read_bytes()
        return self._ids[id(module)]


def _target_kind(target: str) -> str:
    from ember.target import Target

    return Target.parse(target).kind


def export_model(
    model: Any, path: str | Path, archs: Sequence[str] | None = None, ptx: bool = True
) -> None:
    """Write ``model`` (a CompiledModel for target llvm or cuda) to one ``.ember`` file.

    For CUDA, ``archs`` lists the ``sm_XX`` to store cubins for (see
    :mod:`ember.artifact_cuda`) and ``ptx=False`` leaves the PTX out."""
    kind = _target_kind(str(model.target))
    if kind not in ("llvm", "cuda"):
        raise ArgumentError(f"export: models for '{model.target}' cannot be exported")
    if kind != "cuda" and (archs is not None or not ptx):
        raise ArgumentError("export: archs= and ptx= apply to CUDA models only")
    with tempfile.TemporaryDirectory(prefix="ember-export-") as tmp:
        if kind == "cuda":
            from ember.artifact_cuda import CudaPacker

            packer: Any = CudaPacker(archs, ptx)
        else:
            packer = _LibraryPacker(Path(tmp))
        steps = [_step_entry(st, packer) for st in model.steps]
    members = dict(packer.members)
    members["graph.json"] = json.dumps(
        {"graph": graph_to_json(model.graph), "steps": steps}, sort_keys=True
    ).encode()
    members["params.npz"] = _params_bytes(model.graph.params)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "ember_version": _ember_version(),
        "target": str(model.target),
        "sha256": {name: _sha256(data) for name, data in sorted(members.items())},
    }
    if kind == "cuda":
        manifest["cuda"] = packer.manifest_section()
    _write_atomically(Path(path), manifest, members)


def _step_entry(st: Any, packer: Any) -> dict[str, Any]:
    from ember.graph_compile import _nothing as empty_step

    entry: dict[str, Any] = {"inputs": st.inputs, "outputs": st.outputs, "where": st.where}
    entry["op"] = str(getattr(st.kernel, "op", "kernel"))
    if st.kernel is empty_step or st.kernel is _nothing:  # empty outputs: no work
        return {"kernel": None, **entry}
    module = getattr(st.kernel, "module", None)
    if module is None:
        raise ArgumentError(f"export: the step of {st.where} has no library form yet")
    scalars = list(getattr(st.kernel, "scalar_outputs", ()))
    if scalars:  # 0-d outputs a CUDA kernel writes through a (1,)-shaped view
        entry["scalar_outputs"] = scalars
    return {"kernel": packer.add(module, st.where), **entry}


def _ember_version() -> str:
    import ember

    return str(ember.__version__)


def _write_atomically(path: Path, manifest: dict[str, Any], members: dict[str, bytes]) -> None:
    if path.is_dir():
        raise ArgumentError(f"export: {path} is a directory; give a file path such as model.ember")
    part = path.with_name(path.name + ".part")
    try:
        with zipfile.ZipFile(part, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
            for name, data in sorted(members.items()):
                z.writestr(name, data)
        os.replace(part, path)
    except OSError as e:
        part.unlink(missing_ok=True)
        raise ArgumentError(f"export: cannot write {path}: {e.strerror or e}") from e


def read_archive(path: str | Path, fmt: str = FORMAT) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the members of an artifact of format ``fmt``, every hash checked."""
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"load: no file {p}")
    try:
        with zipfile.ZipFile(p) as z:
            manifest = json.loads(z.read("manifest.json"))
            members = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as e:
        raise InvalidModelError(f"{p} is not an Ember model file (or it is truncated): {e}") from e
    if manifest.get("format") != fmt:
        found = manifest.get("format")
        raise InvalidModelError(f"{p} is not an Ember model file (format {found!r})")
    if manifest.get("format_version") not in READ_VERSIONS:
        raise InvalidModelError(
            f"{p} was written by Ember {manifest.get('ember_version')} in format version "
            f"{manifest.get('format_version')}; this Ember ({_ember_version()}) reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}: compile the model again"
        )
    hashes = manifest.get("sha256", {})
    if set(hashes) != set(members):
        raise InvalidModelError(f"{p}: its members do not match its manifest (tampered?)")
    for name, data in members.items():
        if _sha256(data) != hashes[name]:
            raise InvalidModelError(f"{p}: '{name}' does not match its hash (tampered or corrupt)")
    return manifest, members


def load_model(path: str | Path) -> Any:
    """The CompiledModel stored in ``path`` by :func:`export_model`."""
    from ember.executor import CompiledModel, Step

    manifest, members = read_archive(path)
    try:
        body = json.loads(members["graph.json"])
        names = body["graph"]["params"]
        with np.load(io.BytesIO(members["params.npz"]), allow_pickle=False) as z:
            params = {n: z[f"p{i}"] for i, n in enumerate(names)}
    except (KeyError, ValueError, OSError) as e:
        raise InvalidModelError(f"{path}: unreadable graph or params: {e}") from e
    graph = graph_from_json(body["graph"], params)
    modules = _module_source(manifest, members, Path(path))
    steps = []
    for st in body["steps"]:
        k = st["kernel"]
        kernel: Any = _nothing
        if k is not None:
            kernel = _LoadedKernel(
                modules(k),
                len(st["inputs"]),
                st.get("scalar_outputs", ()),
                str(st.get("op", "kernel")),
            )
        steps.append(Step(kernel, tuple(st["inputs"]), tuple(st["outputs"]), st["where"]))
    return CompiledModel(graph, steps, manifest["target"])


def _module_source(manifest: dict[str, Any], members: dict[str, bytes], path: Path) -> Any:
    """``module(k)``: the k-th kernel module of the artifact, rebuilt once."""
    try:
        kind = _target_kind(str(manifest.get("target", "")))
    except EmberError as e:
        raise InvalidModelError(f"{path}: the manifest's target is not one Ember knows") from e
    if kind == "cuda":
        from ember.artifact_cuda import CudaLoader

        return CudaLoader(manifest, members, path).module
    from ember.runtime import load_module

    folder = _unpack_kernels(members)
    modules: dict[int, Any] = {}

    def module(k: int) -> Any:
        if k not in modules:
            modules[k] = load_module(folder / f"k{k}.so")
        return modules[k]

    return module


class _LoadedKernel:
    """A kernel read back from an artifact: its module, called like a Kernel (0-d outputs
    a CUDA kernel writes as shape (1,) are passed as such views)."""

    def __init__(
        self, module: Any, n_inputs: int, scalar_outputs: Sequence[int] = (), op: str = "kernel"
    ) -> None:
        self.module = module
        self.n_inputs = n_inputs
        self.scalar_outputs = tuple(scalar_outputs)
        self.op = op  # the ops of its fused group, as profiles name them

    def __call__(self, *arrays: Any) -> None:
        if self.scalar_outputs:
            args = list(arrays)
            for k in self.scalar_outputs:
                args[self.n_inputs + k] = args[self.n_inputs + k].reshape(1)
            arrays = tuple(args)
        self.module(*arrays)

    def bind(self, arrays: Any) -> Any:
        """A call on ``arrays`` (see :func:`ember.kernels.bind_kernel`)."""
        from ember.kernels import bind_kernel

        return bind_kernel(self, arrays)


def _nothing(*arrays: Any) -> None:
    """The step of a node whose outputs have no elements."""


def _unpack_kernels(members: dict[str, bytes]) -> Path:
    """The kernels' libraries as files, in a cache folder named by their content."""
    libs = {n: d for n, d in members.items() if n.startswith("kernels/")}
    digest = _sha256(b"".join(_sha256(d).encode() for _, d in sorted(libs.items())))
    folder = Path(tempfile.gettempdir()) / "ember-models" / digest[:32]
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in libs.items():
        target = folder / Path(name).name
        if not target.exists() or _sha256(target.read_bytes()) != _sha256(data):
            part = target.with_name(target.name + f".{os.getpid()}.part")
            part.write_bytes(data)
            os.replace(part, target)
    return folder
