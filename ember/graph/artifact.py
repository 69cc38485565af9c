"""Compiled-model artifacts: ``CompiledModel.export(path)`` and ``ember.load(path)``.

One ``.ember`` file holds everything a fresh process needs to run a compiled model:
a zip archive with

- ``manifest.json``: format version, Ember version, target, the SHA-256 and the size
  of every other member, for CPU models the CPU the code was built for (``cpu``: LLVM
  CPU name, triple, features; :mod:`ember.codegen_llvm.cpu_features`), for CUDA models the kernel
  table;
- ``graph.json``: the graph (values with types, nodes with their attributes) and
  the steps (kernel, values read, values written);
- ``params.npz``: the constants, written and read without pickle;
- ``defaults.npz`` (only where the graph lists ``defaults``): the values of the inputs
  a run may leave out (ONNX initializers that are also graph inputs), so a loaded model
  takes the same inputs as the compiled one;
- ``kernels/k<i>.so``: for CPU models, one shared library per distinct kernel
  (``Module.export_library``); CUDA models hold per kernel module its TIR, CUDA
  source, cubins and PTX instead, and a ``cuda`` manifest section
  (:mod:`ember.codegen_cuda.artifact`).

``load`` trusts nothing in the file before it is checked: the archive is read within
bounds (:mod:`ember.runtime.artifact_archive`: names, declared sizes, hashes), the manifest,
graph and steps are validated (:mod:`ember.runtime.artifact_schema`), the params against the
graph's types, the CPU the code needs against this host, and every kernel's signature
against the arrays its step passes, so a damaged, edited or foreign file is refused
with :class:`~ember.errors.InvalidModelError` instead of being loaded into the process.
The hashes detect damage, not intent: a file's author can put any machine code in it,
so load ``.ember`` files only from sources you trust, as with any library. Libraries
are unpacked into a cache folder named by the archive's content hash, since the
dynamic loader needs files.
Format version 2 added CUDA models; version 1 files (CPU only, otherwise the same)
are still read.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import os
import struct
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.backend import get_backend
from ember.errors import ArgumentError, InternalError, InvalidModelError
from ember.frontend.graph import Graph, Node, TensorType, Value
from ember.frontend.narrow_dtypes import from_storage, storage_dtype, to_storage
from ember.frontend.string_tensors import STRING_NUMPY
from ember.graph.step import empty_kernel
from ember.runtime import artifact_archive as archive
from ember.runtime import artifact_schema as schema
from ember.tir.dtype import numpy_dtype
from ember.version import __version__

FORMAT = "ember-model"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``: the content hash an artifact records for each member it stores."""
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
        "defaults": sorted(graph.defaults),
        "nodes": [
            {
                "op": n.op,
                "name": n.name,
                "op_type": n.op_type,
                "inputs": list(n.inputs),
                "outputs": list(n.outputs),
                "attrs": {k: _attr_to_json(v) for k, v in n.attrs.items()},
                "group": n.group,
                **({"absorbed": list(n.absorbed)} if n.absorbed else {}),
            }
            for n in graph.nodes
        ],
    }


def graph_from_json(
    data: dict[str, Any],
    params: dict[str, np.ndarray],
    where: Any = "",
    defaults: dict[str, np.ndarray] | None = None,
    symbolic: bool = False,
) -> Any:
    """The Graph ``data`` describes, validated first (it comes from a file): a malformed
    or inconsistent one is an ``InvalidModelError`` naming ``where``. ``defaults``: the
    data of the inputs it lists as ``defaults`` (:func:`read_defaults`); ``symbolic``:
    named dims are allowed (the source graph of a model with symbolic input dims)."""

    where = where or "graph.json"
    schema.check_graph(data, where, symbolic)
    try:
        return _build_graph(data, params, defaults or {})
    except (ValueError, TypeError, InternalError) as e:
        raise InvalidModelError(f"{where}: an inconsistent graph: {e}") from e


def _build_graph(
    data: dict[str, Any], params: dict[str, np.ndarray], defaults: dict[str, np.ndarray]
) -> Any:

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
            absorbed=tuple(n.get("absorbed", ())),
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
        defaults,
    )
    return graph.verify()


def _npy_entry(array: np.ndarray) -> bytes:
    """``array`` as an ``.npy`` file (format 1.0, what ``np.save`` writes and ``np.load``
    reads), its header written here: on numpy 2.5.2 the headers of ``np.savez`` read back
    with NUL bytes in their padding, and neither numpy's reader nor ours took them (an
    H200 machine's numpy, 2026-12-01; numpy 2.4 wrote spaces)."""
    a = np.asarray(array)
    a = a if a.flags.c_contiguous else a.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
    text = (
        f"{{'descr': {np.lib.format.dtype_to_descr(a.dtype)!r}, 'fortran_order': False, "
        f"'shape': {tuple(int(d) for d in a.shape)!r}, }}"
    )
    pad = -(len(_NPY_MAGIC) + 2 + 2 + len(text) + 1) % 64  # the data starts 64-aligned
    header = (text + " " * pad + "\n").encode("latin-1")
    return _NPY_MAGIC + b"\x01\x00" + struct.pack("<H", len(header)) + header + a.tobytes()


def _params_bytes(params: dict[str, np.ndarray]) -> bytes:
    """The params as an npz archive: ``p0.npy``, ``p1.npy``... in the order of their sorted
    value names (graph.json keeps that order), stored uncompressed, dated 1980 so that
    the same params give the same bytes; a narrow type (float8...) as its storage, which
    numpy reads without ml_dtypes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for i, n in enumerate(sorted(params)):
            data = to_storage(params[n], str(params[n].dtype))
            z.writestr(zipfile.ZipInfo(f"p{i}.npy", (1980, 1, 1, 0, 0, 0)), _npy_entry(data))
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


def export_model(
    model: Any, path: str | Path, archs: Sequence[str] | None = None, ptx: bool = True
) -> None:
    """Write ``model`` (a CompiledModel for target llvm or cuda) to one ``.ember`` file.

    For CUDA, ``archs`` lists the ``sm_XX`` to store cubins for (see
    :mod:`ember.codegen_cuda.artifact`) and ``ptx=False`` leaves the PTX out."""
    strings = sorted(n for n, p in model.graph.params.items() if p.dtype == STRING_NUMPY)
    if strings:  # params are .npy without pickle, which holds no Python str objects
        raise ArgumentError(
            f"export: the model holds string tensors ({', '.join(strings[:4])}), which "
            ".ember files cannot store yet; compile it from its ONNX file where it runs"
        )
    backend = get_backend(model.target)
    with tempfile.TemporaryDirectory(prefix="ember-export-") as tmp:
        packer = backend.artifact_packer(archs, ptx) or _LibraryPacker(Path(tmp))
        steps = [_step_entry(st, packer) for st in model.steps]
    members = dict(packer.members)
    members["graph.json"] = json.dumps(
        {"graph": graph_to_json(model.graph), "steps": steps}, sort_keys=True
    ).encode()
    members["params.npz"] = _params_bytes(model.graph.params)
    if model.graph.defaults:
        members["defaults.npz"] = _params_bytes(model.graph.defaults)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "ember_version": _ember_version(),
        "target": str(model.target),
        "sha256": {name: sha256(data) for name, data in sorted(members.items())},
        "sizes": {name: len(data) for name, data in sorted(members.items())},
    }
    manifest.update(backend.artifact_manifest(packer))
    _write_atomically(Path(path), manifest, members)


def _step_entry(st: Any, packer: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"inputs": st.inputs, "outputs": st.outputs, "where": st.where}
    entry["op"] = str(getattr(st.kernel, "op", "kernel"))
    if st.kernel is empty_kernel:  # empty outputs: no work
        return {"kernel": None, **entry}
    module = getattr(st.kernel, "module", None)
    if module is None:
        raise ArgumentError(f"export: the step of {st.where} has no library form yet")
    scalars = list(getattr(st.kernel, "scalar_outputs", ()))
    if scalars:  # 0-d outputs a CUDA kernel writes through a (1,)-shaped view
        entry["scalar_outputs"] = scalars
    return {"kernel": packer.add(module, st.where), **entry}


def _ember_version() -> str:
    return __version__


def _write_atomically(path: Path, manifest: dict[str, Any], members: dict[str, bytes]) -> None:
    if path.is_dir():
        raise ArgumentError(f"export: {path} is a directory; give a file path such as model.ember")
    part = path.with_name(path.name + ".part")
    try:
        with zipfile.ZipFile(part, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
            for name, data in sorted(members.items()):
                # weights barely deflate (ResNet-18's by 7%) but cost the time: stored, a
                # 90 MB model loads in 0.3 s instead of 1.1 s and exports 3 s sooner
                how = zipfile.ZIP_STORED if name.endswith(".npz") else zipfile.ZIP_DEFLATED
                z.writestr(name, data, compress_type=how)
        os.replace(part, path)
    except OSError as e:
        part.unlink(missing_ok=True)
        raise ArgumentError(f"export: cannot write {path}: {e.strerror or e}") from e


def read_archive(path: str | Path, fmt: str = FORMAT) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the members of an artifact of format ``fmt``, every hash checked
    (:func:`ember.runtime.artifact_archive.read_archive`)."""
    return archive.read_archive(path, fmt, READ_VERSIONS, _ember_version())


def read_defaults(members: dict[str, bytes], member: str, g: dict[str, Any], path: Any) -> dict:
    """The default values of the inputs the validated graph ``g`` lists as ``defaults``,
    stored in ``member`` (absent in files without defaults, which older Embers wrote),
    read as :func:`read_params` reads params."""
    if not g.get("defaults") and member not in members:
        return {}
    return read_params(members, member, g, path, key="defaults")


def read_params(
    members: dict[str, bytes], member: str, g: dict[str, Any], path: Any, key: str = "params"
) -> dict:
    """The arrays stored in ``member`` (an npz archive) for the names the validated graph
    ``g`` lists under ``key``, each of the shape and dtype ``g`` gives it. Each array's
    header is checked before its data is read, so a header claiming a huge shape
    allocates nothing."""
    names = g.get(key, [])
    data = members.get(member)
    if data is None:
        raise InvalidModelError(f"{path}: the file has no {member}")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            if sorted(z.namelist()) != sorted(f"p{i}.npy" for i in range(len(names))):
                raise InvalidModelError(f"{path}: {member} does not hold the graph's {key}")
            return {
                n: _read_param(z, f"p{i}.npy", g["values"][n], path) for i, n in enumerate(names)
            }
    except InvalidModelError:
        raise
    except archive.ARCHIVE_ERRORS as e:
        raise InvalidModelError(f"{path}: unreadable params in {member}: {e}") from e


_NPY_HEADER_BYTES = 1 << 16  # numpy writes a version 1.0 header (< 64 KiB) for any param


_NPY_MAGIC = b"\x93NUMPY"
_NPY_KEYS = {"descr", "fortran_order", "shape"}


def _npy_header(f: Any, name: str, path: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, order and dtype an ``.npy`` entry's header declares (format versions 1 to
    3), parsed here and checked before any data is read. numpy's header readers are not
    meant for untrusted bytes, and on numpy 2.5.2 (an H200 machine, 2026-12-01) they failed
    on the params numpy itself had written."""
    magic = f.read(8)
    if len(magic) != 8 or magic[:6] != _NPY_MAGIC or magic[6] not in (1, 2, 3):
        raise InvalidModelError(f"{path}: param {name} is not an .npy array (magic {magic!r})")
    size_format = "<H" if magic[6] == 1 else "<I"
    size = f.read(struct.calcsize(size_format))
    length = struct.unpack(size_format, size)[0] if len(size) == struct.calcsize(size_format) else 0
    text = f.read(length) if 0 < length <= _NPY_HEADER_BYTES else b""
    if not text or len(text) != length:
        raise InvalidModelError(f"{path}: param {name} has a truncated or oversized header")
    bad = InvalidModelError(f"{path}: param {name} has an unreadable header {text[:80]!r}")
    try:
        header = ast.literal_eval(text.decode("utf-8" if magic[6] == 3 else "latin-1"))
    except (SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError):
        raise bad from None
    if not isinstance(header, dict) or set(header) != _NPY_KEYS:
        raise bad
    shape, fortran = header["shape"], header["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad
    if not isinstance(fortran, bool):
        raise bad
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except (TypeError, ValueError):
        raise bad from None
    return shape, fortran, dtype


def _read_param(z: zipfile.ZipFile, name: str, value: list[Any], path: Any) -> np.ndarray:
    """One ``.npy`` entry, whose header must give the graph's ``[shape, dtype]`` (a float8
    param's storage, ``uint8``: :func:`_params_bytes`)."""
    shape, dtype = tuple(value[0]), storage_dtype(value[1])
    if not all(isinstance(d, int) for d in shape):
        raise InvalidModelError(f"{path}: param {name} has the symbolic shape {list(shape)}")
    nbytes = math.prod(shape) * dtype.itemsize
    if z.getinfo(name).file_size > nbytes + _NPY_HEADER_BYTES:  # before a byte is inflated
        raise InvalidModelError(
            f"{path}: param {name} declares {z.getinfo(name).file_size} bytes, its graph "
            f"type {dtype}{list(shape)} needs {nbytes}"
        )
    with z.open(name) as f:
        got_shape, fortran, got_dtype = _npy_header(f, name, path)
        if got_shape != shape or got_dtype != dtype:
            raise InvalidModelError(
                f"{path}: a param is {got_dtype}{list(got_shape)}, its graph type "
                f"{dtype}{list(shape)}"
            )
        data = f.read(nbytes + 1)
    if len(data) != nbytes:
        raise InvalidModelError(f"{path}: param {name} holds {len(data)} bytes, not {nbytes}")
    flat = np.frombuffer(bytearray(data), dtype=dtype)
    return from_storage(flat.reshape(shape, order="F" if fortran else "C"), value[1])


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of an Ember dtype name, for arrays read back from an artifact."""
    return numpy_dtype(dtype)
