"""Reading ``.ember`` files back: ``ember.load(path)`` gives a CompiledModel or a DynamicModel.

The writers (``artifact.py``, ``artifact_dynamic.py``) need nothing of what they write;
the reader makes the objects again, so it sits above the executor, the dynamic model and
the compile driver (a loaded dynamic model compiles new sizes with the same steps).
Every part of a file is checked before it is used; see ``artifact.py`` for the format
and the checks.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ember.backend import Backend, get_backend
from ember.errors import EmberError, InvalidModelError
from ember.frontend.narrow_dtypes import storage_dtype
from ember.frontend.onnx_import.importer import load_model as load_onnx
from ember.graph.artifact import (
    graph_from_json,
    np_dtype,
    read_archive,
    read_defaults,
    read_params,
    sha256,
)
from ember.graph.artifact_dynamic import FORMAT as DYNAMIC_FORMAT
from ember.graph.compile import compile_graph
from ember.graph.dynamic_model import DynamicModel
from ember.graph.executor import CompiledModel
from ember.graph.kernels import bind_kernel
from ember.graph.model_source import GraphSource, OnnxSource
from ember.graph.step import Step, empty_kernel
from ember.runtime import artifact_archive as archive
from ember.runtime import artifact_schema as schema
from ember.runtime.load import load_module
from ember.target import Target


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
    if file_format(path) == DYNAMIC_FORMAT:
        return load_dynamic(path)
    return load_model(path)


def load_dynamic(path: str | Path) -> Any:
    """The DynamicModel stored in ``path`` by :func:`export_dynamic`, every part checked
    (:mod:`ember.runtime.artifact_schema`); each stored specialization must be the model compiled
    for its sizes: inputs and outputs of the types the symbolic signature gives them."""
    manifest, members = read_archive(path, DYNAMIC_FORMAT)
    schema.check_dynamic_manifest(manifest, path)
    source = _read_source(manifest, members, path)
    passes = None if manifest["graph_passes"] == "default" else ()
    model = DynamicModel(source, Target.parse(manifest["target"]), None, passes, compile_graph)
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
            compiled = load_model(nested)
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
    try:
        if manifest["source"] == "onnx":
            return OnnxSource(load_onnx(members["source.onnx"]), manifest["shapes"])
        body = archive.parse_json(members["source/graph.json"], "source/graph.json", path)
        schema.check_graph(body, path, symbolic=True)
        params = read_params(members, "source/params.npz", body, path)
        defaults = read_defaults(members, "source/defaults.npz", body, path)
        return GraphSource(graph_from_json(body, params, path, defaults, symbolic=True))
    except InvalidModelError:
        raise
    except EmberError as e:
        raise InvalidModelError(f"{path}: its source model does not import: {e}") from e
    except (*archive.ARCHIVE_ERRORS, RecursionError) as e:
        raise InvalidModelError(f"{path}: malformed source: {e}") from e


def load_model(path: str | Path) -> Any:
    """The CompiledModel stored in ``path`` by :func:`export_model`.

    Every part is checked before it is used (:mod:`ember.runtime.artifact_schema`): the archive
    by :func:`read_archive`, then the graph and steps, the params against the types the
    graph gives them, what the code needs against this host (the backend checks it),
    and each kernel's signature against the values its step passes it, all before any
    memory is planned for the model."""
    manifest, members = read_archive(path)
    body = archive.parse_json(members.get("graph.json", b"null"), "graph.json", Path(path))
    if not isinstance(body, dict):
        raise InvalidModelError(f"{path}: graph.json is not an object with graph and steps")
    schema.check_graph(body.get("graph"), path)
    count, modules = _kernel_modules(manifest, members, Path(path))
    schema.check_steps(body.get("steps"), body["graph"], count, path)
    params = read_params(members, "params.npz", body["graph"], path)
    defaults = read_defaults(members, "defaults.npz", body["graph"], path)
    graph = graph_from_json(body["graph"], params, path, defaults)
    steps = []
    for st in body["steps"]:
        k = st["kernel"]
        kernel: Any = empty_kernel
        if k is not None:
            kernel = _LoadedKernel(
                modules(k),
                len(st["inputs"]),
                st.get("scalar_outputs", ()),
                str(st.get("op", "kernel")),
            )
            _check_kernel_fits(kernel, st, graph, path)
        steps.append(Step(kernel, tuple(st["inputs"]), tuple(st["outputs"]), st["where"]))
    try:
        return CompiledModel(graph, steps, Target.parse(manifest["target"]))
    except MemoryError as e:
        raise InvalidModelError(f"{path}: its values need more memory than there is") from e


def _check_kernel_fits(kernel: Any, st: dict[str, Any], graph: Any, path: Any) -> None:
    """The step passes its kernel arrays of exactly the static shapes and dtypes the
    kernel's signature takes (a 0-d output a CUDA kernel writes as shape (1,))."""
    sigs = getattr(kernel.module, "signatures", None)
    if not sigs:
        return
    names = [*st["inputs"], *st["outputs"]]
    params = sigs[0].arrays
    if len(params) != len(names):
        raise InvalidModelError(
            f"{path}: step {st['where']} passes {len(names)} arrays, its kernel takes {len(params)}"
        )
    scalars = {kernel.n_inputs + k for k in kernel.scalar_outputs}
    for i, (name, p) in enumerate(zip(names, params)):
        t = graph.values[name].type
        shape = (1,) if i in scalars and t.shape == () else t.shape
        static = all(isinstance(d, int) for d in p.shape)
        if (static and tuple(p.shape) != shape) or storage_dtype(t.dtype) != np_dtype(p.dtype):
            raise InvalidModelError(
                f"{path}: step {st['where']} passes '{name}' as {t}, its kernel takes "
                f"{p.describe()}"
            )


def _backend_of(manifest: dict[str, Any], path: Path) -> Backend:
    """The backend of the target the file's kernels were built for."""
    try:
        return get_backend(str(manifest.get("target", "")))
    except EmberError as e:
        raise InvalidModelError(f"{path}: the manifest's target is not one Ember knows") from e


def _kernel_modules(
    manifest: dict[str, Any], members: dict[str, bytes], path: Path
) -> tuple[int, Callable[[int], Any]]:
    """How many kernel modules the file holds (a step's kernel must be one of them), and
    ``module(k)``: the k-th, rebuilt once. The target's backend reads its own kinds of
    kernel (a CUDA model's images); others are shared libraries."""
    loader = _backend_of(manifest, path).artifact_loader(manifest, members, path)
    if loader is not None:
        return loader.count(), loader.module
    libs = [n for n in members if n.startswith("kernels/")]
    for n in libs:
        if not re.fullmatch(r"kernels/k(0|[1-9][0-9]*)\.so", n):
            raise InvalidModelError(f"{path}: the member '{n}' is not a kernel library")
    if sorted(libs) != sorted(f"kernels/k{k}.so" for k in range(len(libs))):
        raise InvalidModelError(f"{path}: its kernel libraries are not numbered k0.so, k1.so...")
    folder = _unpack_kernels(members) if libs else None
    modules: dict[int, Any] = {}

    def module(k: int) -> Any:
        if k not in modules:
            modules[k] = load_module(folder / f"k{k}.so")
        return modules[k]

    return len(libs), module


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
        """A call on ``arrays`` (see :func:`ember.graph.kernels.bind_kernel`)."""
        return bind_kernel(self, arrays)


def _unpack_kernels(members: dict[str, bytes]) -> Path:
    """The kernels' libraries as files, in a cache folder named by their content."""
    libs = {n: d for n, d in members.items() if n.startswith("kernels/")}
    digest = sha256(b"".join(sha256(d).encode() for _, d in sorted(libs.items())))
    folder = Path(tempfile.gettempdir()) / "ember-models" / digest[:32]
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in libs.items():
        target = folder / Path(name).name
        if not target.exists() or sha256(target.read_bytes()) != sha256(data):
            part = target.with_name(target.name + f".{os.getpid()}.part")
            part.write_bytes(data)
            os.replace(part, target)
    return folder
