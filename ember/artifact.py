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
import math
import os
import re
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember import artifact_schema as schema
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


def graph_from_json(data: dict[str, Any], params: dict[str, np.ndarray], where: Any = "") -> Any:
    """The Graph ``data`` describes, validated first (it comes from a file): a malformed
    or inconsistent one is an ``InvalidModelError`` naming ``where``."""
    from ember.errors import InternalError

    where = where or "graph.json"
    schema.check_graph(data, where)
    try:
        return _build_graph(data, params)
    except (ValueError, TypeError, InternalError) as e:
        raise InvalidModelError(f"{where}: an inconsistent graph: {e}") from e


def _build_graph(data: dict[str, Any], params: dict[str, np.ndarray]) -> Any:
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
        "sizes": {name: len(data) for name, data in sorted(members.items())},
    }
    if kind == "cuda":
        manifest["cuda"] = packer.manifest_section()
    else:
        from ember.cpu_features import built_for

        manifest["cpu"] = built_for(str(model.target))
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
    """The manifest and the members of an artifact of format ``fmt``, every hash checked.

    Nothing is trusted before it is checked: the manifest is read first (bounded) and
    validated; the archive's member names must be exactly the manifest's, each a plain
    relative name; each member's declared size must be the manifest's (where recorded)
    and within :func:`ember.artifact_schema.member_limit` before a byte of it is
    decompressed, and it is read in chunks up to that size while its hash is computed,
    so a zip bomb or a member that lies about its size costs no more memory than its
    declared size allows. Every failure of the archive's bytes (bad deflate data, bad
    CRC, truncation, an unknown compression method) is an ``InvalidModelError``."""
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"load: no file {p}")
    try:
        with zipfile.ZipFile(p) as z:
            infos = _member_infos(z, p)
            manifest = _parse_json(_read_member(z, infos["manifest.json"], p), "manifest.json", p)
            _check_header(manifest, fmt, p)
            schema.check_manifest(manifest, p)
            _check_directory(manifest, infos, p)
            members = {}
            for name, info in infos.items():
                if name != "manifest.json":
                    members[name] = _read_member(z, info, p, manifest["sha256"][name])
    except _ARCHIVE_ERRORS as e:
        raise InvalidModelError(f"{p} is not an Ember model file (or it is truncated): {e}") from e
    return manifest, members


# What reading a damaged zip archive raises: a flipped bit can land in deflate data
# (zlib.error), a CRC or a header (BadZipFile), the compression method
# (NotImplementedError), the encryption flag (RuntimeError), a length (EOFError).
_ARCHIVE_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    KeyError,
    ValueError,
    OSError,
    EOFError,
    NotImplementedError,
    RuntimeError,
    struct.error,
    OverflowError,
)
_CHUNK = 1 << 20


def _member_infos(z: zipfile.ZipFile, p: Path) -> dict[str, zipfile.ZipInfo]:
    infos: dict[str, zipfile.ZipInfo] = {}
    entries = z.infolist()
    if len(entries) > schema.MAX_MEMBERS:
        raise InvalidModelError(f"{p}: {len(entries)} members, more than any model has")
    for info in entries:
        if info.filename in infos:
            raise InvalidModelError(f"{p}: the member '{info.filename}' appears twice")
        schema.check_member_name(info.filename, p)
        infos[info.filename] = info
    if "manifest.json" not in infos:
        raise InvalidModelError(f"{p} is not an Ember model file (it has no manifest.json)")
    return infos


def _read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, p: Path, digest: str = "") -> bytes:
    """The member's bytes, read in chunks up to its (checked) declared size; its SHA-256
    must be ``digest`` when one is given."""
    limit = schema.member_limit(info.filename, info.compress_size)
    if info.file_size > limit:
        raise InvalidModelError(
            f"{p}: the member '{info.filename}' declares {info.file_size} bytes from "
            f"{info.compress_size} compressed, over the {limit} a model file may hold "
            "(a zip bomb?)"
        )
    h = hashlib.sha256()
    chunks = []
    got = 0
    with z.open(info) as f:
        while chunk := f.read(min(_CHUNK, info.file_size + 1)):
            h.update(chunk)
            chunks.append(chunk)
            got += len(chunk)
            if got > info.file_size:  # zipfile stops there itself; this does not rely on it
                raise InvalidModelError(f"{p}: '{info.filename}' is longer than it declares")
    if digest and h.hexdigest() != digest:
        raise InvalidModelError(
            f"{p}: '{info.filename}' does not match its hash (tampered or corrupt)"
        )
    return b"".join(chunks)


def _parse_json(data: bytes, name: str, p: Path) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise InvalidModelError(f"{p}: '{name}' is not readable JSON: {e}") from e


def _check_header(manifest: Any, fmt: str, p: Path) -> None:
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != fmt:
        raise InvalidModelError(f"{p} is not an Ember model file (format {found!r})")
    if manifest.get("format_version") not in READ_VERSIONS:
        raise InvalidModelError(
            f"{p} was written by Ember {manifest.get('ember_version')} in format version "
            f"{manifest.get('format_version')}; this Ember ({_ember_version()}) reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}: compile the model again"
        )


def _check_directory(manifest: dict[str, Any], infos: dict[str, zipfile.ZipInfo], p: Path) -> None:
    """The archive holds exactly the manifest's members, of the sizes it records."""
    hashes = manifest["sha256"]
    names = set(infos) - {"manifest.json"}
    if set(hashes) != names:
        extra, absent = sorted(names - set(hashes)), sorted(set(hashes) - names)
        raise InvalidModelError(
            f"{p}: its members do not match its manifest (tampered?): "
            f"unlisted {extra[:5]}, missing {absent[:5]}"
        )
    sizes = manifest.get("sizes")
    for name in sorted(names):
        if sizes is not None and infos[name].file_size != sizes[name]:
            raise InvalidModelError(
                f"{p}: '{name}' declares {infos[name].file_size} bytes, its manifest "
                f"{sizes[name]} (tampered?)"
            )


def load_model(path: str | Path) -> Any:
    """The CompiledModel stored in ``path`` by :func:`export_model`.

    Every part is checked before it is used (:mod:`ember.artifact_schema`): the archive
    by :func:`read_archive`, then the graph and steps, the params against the types the
    graph gives them, the CPU the code needs against this host (:mod:`ember.cpu_features`),
    and each kernel's signature against the values its step passes it, all before any
    memory is planned for the model."""
    from ember.executor import CompiledModel, Step

    manifest, members = read_archive(path)
    body = _parse_json(members.get("graph.json", b"null"), "graph.json", Path(path))
    if not isinstance(body, dict):
        raise InvalidModelError(f"{path}: graph.json is not an object with graph and steps")
    schema.check_graph(body.get("graph"), path)
    kernels = _kernel_count(manifest, members, path)
    schema.check_steps(body.get("steps"), body["graph"], kernels, path)
    params = _read_params(members, body["graph"], path)
    graph = graph_from_json(body["graph"], params, path)
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
            _check_kernel_fits(kernel, st, graph, path)
        steps.append(Step(kernel, tuple(st["inputs"]), tuple(st["outputs"]), st["where"]))
    try:
        return CompiledModel(graph, steps, manifest["target"])
    except MemoryError as e:
        raise InvalidModelError(f"{path}: its values need more memory than there is") from e


def _kernel_count(manifest: dict[str, Any], members: dict[str, bytes], path: Any) -> int:
    """How many kernel modules the file holds (a step's kernel must be one of them)."""
    if _target_kind_of(manifest, Path(path)) == "cuda":
        section = manifest.get("cuda")
        modules = section.get("modules") if isinstance(section, dict) else None
        return len(modules) if isinstance(modules, list) else 0
    libs = [n for n in members if n.startswith("kernels/")]
    for n in libs:
        if not re.fullmatch(r"kernels/k(0|[1-9][0-9]*)\.so", n):
            raise InvalidModelError(f"{path}: the member '{n}' is not a kernel library")
    if sorted(libs) != sorted(f"kernels/k{k}.so" for k in range(len(libs))):
        raise InvalidModelError(f"{path}: its kernel libraries are not numbered k0.so, k1.so...")
    return len(libs)


def _read_params(members: dict[str, bytes], g: dict[str, Any], path: Any) -> dict[str, Any]:
    """The params, each of the shape and dtype the graph gives it."""
    names = g["params"]
    data = members.get("params.npz")
    if data is None:
        raise InvalidModelError(f"{path}: the file has no params.npz")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            if sorted(z.files) != sorted(f"p{i}" for i in range(len(names))):
                raise InvalidModelError(f"{path}: params.npz does not hold the graph's params")
            params = {}
            for i, n in enumerate(names):
                want = tuple(g["values"][n][0]), g["values"][n][1]
                arr = _read_param(z, f"p{i}", want, path)
                params[n] = arr
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError) as e:
        raise InvalidModelError(f"{path}: unreadable params: {e}") from e
    return params


def _read_param(z: Any, key: str, want: tuple[Any, str], path: Any) -> np.ndarray:
    """One npz entry, its header checked against the graph before its data is read."""
    info = z.zip.getinfo(key + ".npy")
    shape, dtype = want
    need = math.prod(shape) * np.dtype(dtype).itemsize + (1 << 16)
    if info.file_size > need:
        raise InvalidModelError(
            f"{path}: param {key} declares {info.file_size} bytes; its type needs {need}"
        )
    arr = z[key]
    if arr.shape != shape or arr.dtype != np.dtype(dtype):
        raise InvalidModelError(
            f"{path}: a param is {arr.dtype}{list(arr.shape)}, its graph type {dtype}{list(shape)}"
        )
    return arr


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
        if (static and tuple(p.shape) != shape) or np.dtype(t.dtype) != _np_dtype(p.dtype):
            raise InvalidModelError(
                f"{path}: step {st['where']} passes '{name}' as {t}, its kernel takes "
                f"{p.describe()}"
            )


def _np_dtype(dtype: str) -> np.dtype:
    from ember.tir.dtype import numpy_dtype

    return numpy_dtype(dtype)


def _target_kind_of(manifest: dict[str, Any], path: Path) -> str:
    try:
        kind = _target_kind(str(manifest.get("target", "")))
    except EmberError as e:
        raise InvalidModelError(f"{path}: the manifest's target is not one Ember knows") from e
    if kind not in ("llvm", "cuda"):
        raise InvalidModelError(
            f"{path}: the manifest's target '{manifest['target']}' has no kernels"
        )
    return kind


def _module_source(manifest: dict[str, Any], members: dict[str, bytes], path: Path) -> Any:
    """``module(k)``: the k-th kernel module of the artifact, rebuilt once."""
    kind = _target_kind_of(manifest, path)
    if kind == "cuda":
        from ember.artifact_cuda import CudaLoader

        return CudaLoader(manifest, members, path).module
    from ember.cpu_features import check_host
    from ember.runtime import load_module

    if isinstance(manifest.get("cpu"), dict):  # files before format 2's cpu record: unchecked
        check_host(manifest["cpu"], path)
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
