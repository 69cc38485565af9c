"""The shape of a trustworthy ``.ember`` file, checked before any of it is used.

An ``.ember`` file (:mod:`ember.graph.artifact`, :mod:`ember.graph.artifact_dynamic`) comes from
anywhere: its SHA-256 table says only that the members are the ones the manifest
names, and anyone who edits a member can recompute it. So everything read from the
archive is checked here against a small hand-written schema before the loader
touches it: member names (no path may leave the cache folder the kernels are
unpacked into), the manifest's fields and types, the graph's values (known dtypes,
sizes a machine can hold), its nodes and steps, and the data flow of the steps
(every value a step reads and every model output is written first, so a model
never returns memory no kernel wrote). Each refusal is an
:class:`~ember.errors.InvalidModelError` that names the file and the offending field.

The limits on sizes are here too: what a member may expand to before it is read
(so a zip bomb is refused from its directory entry, not after it filled memory).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from ember.errors import InvalidModelError
from ember.runtime.dtype import HELD_AS_BYTES, numpy_dtype

# A member name: slash-separated parts of letters, digits, '_', '-', '.', none of them
# '.' or '..' and none empty, so joining it under a folder never leaves the folder.
_MEMBER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")
MAX_MEMBERS = 100_000
# What one JSON member (manifest, graph) may hold: far above any real model's graph.
MAX_JSON_BYTES = 64 << 20
# What any other member may expand to relative to its compressed size, past the first
# 64 MiB: deflate reaches ~1000:1 only on runs of one byte (a zip bomb); code, weights
# and nested archives stay far below 64:1. A model whose weights are mostly one byte
# value and larger than 64 MiB is refused with a message saying why.
SMALL_MEMBER_BYTES = 64 << 20
MAX_EXPANSION = 64
# The largest value a graph may declare (256 GiB): a dim of 10**12 is an edited file.
MAX_VALUE_BYTES = 1 << 38
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GRAPH_DTYPES = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    + ("float16", "float32", "float64", "bfloat16", *HELD_AS_BYTES)
)


def _fail(where: Any, what: str) -> InvalidModelError:
    return InvalidModelError(f"{where}: {what} (the file is corrupt or was edited)")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def check_member_name(name: str, where: Any) -> None:
    """Refuse a member name that is not a plain relative path (``kernels/..``, ``/etc``)."""
    if not _MEMBER_NAME.match(name) or any(p in (".", "..") for p in name.split("/")):
        raise _fail(where, f"the member name {name!r} is not a plain relative file name")


def archive_limit(disk_bytes: int) -> int:
    """The most bytes all members of an archive of ``disk_bytes`` may expand to together
    (many members each under :func:`member_limit` must not add up to a bomb)."""
    return max(4 * SMALL_MEMBER_BYTES, MAX_EXPANSION * disk_bytes)


def member_limit(name: str, compressed: int) -> int:
    """The most bytes member ``name`` may expand to, given its compressed size."""
    if name.endswith(".json"):
        return MAX_JSON_BYTES
    return max(SMALL_MEMBER_BYTES, MAX_EXPANSION * compressed)


def check_manifest(manifest: Any, where: Any) -> None:
    """The fields every format's manifest has, with their types."""
    if not isinstance(manifest, dict):
        raise _fail(where, f"the manifest is a {type(manifest).__name__}, not an object")
    hashes = manifest.get("sha256")
    if not isinstance(hashes, dict):
        raise _fail(where, "the manifest has no 'sha256' table of its members")
    for name, digest in hashes.items():
        check_member_name(name, where)
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise _fail(where, f"the hash of '{name}' is {str(digest)[:80]!r}, not a SHA-256")
    sizes = manifest.get("sizes")
    if sizes is not None:  # files before the sizes were recorded have none
        if not isinstance(sizes, dict) or set(sizes) != set(hashes):
            raise _fail(where, "the manifest's 'sizes' do not list exactly its members")
        if not all(_is_int(s) and s >= 0 for s in sizes.values()):
            raise _fail(where, "the manifest's 'sizes' are not all byte counts")
    if not isinstance(manifest.get("target"), str):
        raise _fail(where, "the manifest names no target")
    cpu = manifest.get("cpu")
    if cpu is not None and not (
        isinstance(cpu, dict)
        and isinstance(cpu.get("name"), str)
        and isinstance(cpu.get("triple"), str)
        and (cpu.get("features") is None or _str_list(cpu.get("features")))
    ):
        raise _fail(where, "the manifest's 'cpu' section is malformed")


def _dim(d: Any, symbolic: bool) -> bool:
    return (_is_int(d) and d >= 0) or (symbolic and isinstance(d, str) and 0 < len(d) <= 256)


def check_shape(shape: Any, dtype: Any, what: str, where: Any, symbolic: bool = False) -> None:
    """A shape of non-negative ints (and names, where ``symbolic``) and a known dtype,
    whose static part fits in MAX_VALUE_BYTES."""
    if not isinstance(dtype, str) or dtype not in _GRAPH_DTYPES:
        raise _fail(where, f"{what} has the unknown dtype {str(dtype)[:40]!r}")
    if not isinstance(shape, list) or not all(_dim(d, symbolic) for d in shape):
        raise _fail(where, f"{what} has the shape {str(shape)[:80]}, not a list of sizes")
    itemsize = np.dtype(HELD_AS_BYTES.get(dtype) or numpy_dtype(dtype)).itemsize
    nbytes = math.prod(d for d in shape if _is_int(d)) * itemsize
    if nbytes > MAX_VALUE_BYTES:
        raise _fail(
            where, f"{what} ({dtype}{shape}) would take {nbytes} bytes, over {MAX_VALUE_BYTES}"
        )


def check_graph(g: Any, where: Any, symbolic: bool = False) -> None:
    """A graph as :func:`ember.graph.artifact.graph_to_json` writes it (with named dims where
    ``symbolic``: the source of a model with symbolic input dims)."""
    if not isinstance(g, dict):
        raise _fail(where, f"the graph is a {type(g).__name__}, not an object")
    values = g.get("values")
    if not isinstance(values, dict):
        raise _fail(where, "the graph has no table of 'values'")
    for name, entry in values.items():
        if not isinstance(entry, list) or len(entry) != 2:
            raise _fail(where, f"value '{name}' is not [shape, dtype]")
        check_shape(entry[0], entry[1], f"value '{name}'", where, symbolic)
    if not isinstance(g.get("name"), str):
        raise _fail(where, "the graph has no name")
    for key in ("inputs", "outputs", "params"):
        _distinct_names(g.get(key), f"the graph's '{key}'", where)
        _known(g[key], values, f"the graph's {key}", where)
    if not g["outputs"]:
        raise _fail(where, "the graph has no outputs")
    defaults = g.get("defaults", [])  # files before defaults were kept have none
    _distinct_names(defaults, "the graph's 'defaults'", where)
    if not set(defaults) <= set(g["inputs"]):
        raise _fail(where, f"the graph's 'defaults' {sorted(defaults)[:5]} are not all inputs")
    nodes = g.get("nodes")
    if not isinstance(nodes, list):
        raise _fail(where, "the graph has no list of 'nodes'")
    for n in nodes:
        _check_node(n, values, where)


def _distinct_names(names: Any, what: str, where: Any) -> None:
    if not _str_list(names) or len(set(names)) != len(names):
        raise _fail(where, f"{what} is not a list of distinct value names")


def _known(names: Iterable[str], values: dict[str, Any], what: str, where: Any) -> None:
    unknown = [n for n in names if n not in values]
    if unknown:
        raise _fail(where, f"{what} name(s) {unknown[:5]} that the graph does not define")


def _check_node(n: Any, values: dict[str, Any], where: Any) -> None:
    if not isinstance(n, dict):
        raise _fail(where, f"a node is a {type(n).__name__}, not an object")
    for key in ("op", "name", "op_type"):
        if not isinstance(n.get(key), str):
            raise _fail(where, f"a node has no string '{key}'")
    for key in ("inputs", "outputs"):
        if not _str_list(n.get(key)):
            raise _fail(where, f"node '{n['name']}' has no list of '{key}'")
        _known(n[key], values, f"node '{n['name']}' names", where)
    if not isinstance(n.get("attrs"), dict) or not (
        "group" in n and (n["group"] is None or _is_int(n["group"]))
    ):
        raise _fail(where, f"node '{n['name']}' has malformed 'attrs' or 'group'")
    if "absorbed" in n and not _str_list(n["absorbed"]):
        raise _fail(where, f"node '{n['name']}' has a malformed 'absorbed' list")


def check_steps(steps: Any, g: dict[str, Any], n_kernels: int | None, where: Any) -> None:
    """The steps: fields and types, kernels that exist, and a data flow in which every
    value is written before it is read and every model output is written."""
    if not isinstance(steps, list):
        raise _fail(where, "the model has no list of 'steps'")
    values = g["values"]
    ready = set(g["inputs"]) | set(g["params"])
    for k, st in enumerate(steps):
        if not isinstance(st, dict) or not isinstance(st.get("where"), str):
            raise _fail(where, f"step {k} is not an object with a 'where'")
        kernel = st.get("kernel", "absent")
        if kernel is not None and not (
            _is_int(kernel) and 0 <= kernel < (n_kernels if n_kernels is not None else 1 << 62)
        ):
            raise _fail(where, f"step {k} ({st['where']}) names the absent kernel {kernel!r}")
        for key in ("inputs", "outputs"):
            if not _str_list(st.get(key)):
                raise _fail(where, f"step {k} ({st['where']}) has no list of '{key}'")
            _known(st[key], values, f"step {k} ({st['where']}) names", where)
        unready = [v for v in st["inputs"] if v not in ready]
        if unready:
            raise _fail(where, f"step {k} ({st['where']}) reads {unready[:5]} before any write")
        if set(st["outputs"]) & ready or len(set(st["outputs"])) != len(st["outputs"]):
            raise _fail(where, f"step {k} ({st['where']}) writes a value written before")
        scalars = st.get("scalar_outputs", [])
        if not isinstance(scalars, list) or not all(
            _is_int(s) and 0 <= s < len(st["outputs"]) for s in scalars
        ):
            raise _fail(where, f"step {k} ({st['where']}) has malformed 'scalar_outputs'")
        if not isinstance(st.get("op", ""), str):
            raise _fail(where, f"step {k} ({st['where']}) has a malformed 'op'")
        ready.update(st["outputs"])
    unwritten = [v for v in g["outputs"] if v not in ready]
    if unwritten:
        raise _fail(where, f"no step writes the model output(s) {unwritten[:5]}")


def check_dynamic_manifest(m: dict[str, Any], where: Any) -> None:
    """The fields of an ``ember-dynamic-model`` manifest (beyond :func:`check_manifest`)."""
    if m.get("source") not in ("onnx", "graph") or m.get("graph_passes") not in ("default", "none"):
        raise _fail(where, "the manifest's 'source' or 'graph_passes' is not one Ember writes")
    shapes = m.get("shapes")
    if not isinstance(shapes, dict) or not all(
        isinstance(v, list) and all(_is_int(d) and d >= 0 for d in v) for v in shapes.values()
    ):
        raise _fail(where, "the manifest's 'shapes' is not a table of input shapes")
    for key in ("inputs", "outputs"):
        sig = m.get(key)
        if not isinstance(sig, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) for e in sig
        ):
            raise _fail(where, f"the manifest's '{key}' is not a list of [name, shape, dtype]")
        for name, shape, dtype in sig:
            check_shape(shape, dtype, f"{key[:-1]} '{name}'", where, symbolic=True)
    specs = m.get("specializations")
    if not isinstance(specs, list):
        raise _fail(where, "the manifest has no list of 'specializations'")
    for s in specs:
        if not (
            isinstance(s, dict)
            and isinstance(s.get("member"), str)
            and s["member"] in m["sha256"]
            and isinstance(s.get("sizes"), dict)
            and all(_is_int(v) and v >= 0 for v in s["sizes"].values())
        ):
            raise _fail(where, f"a specialization entry {str(s)[:80]} is malformed")


def check_cuda_section(section: Any, where: Any) -> None:
    """The manifest's ``cuda`` section (:mod:`ember.codegen_cuda.artifact`): its fields' types."""
    if not isinstance(section, dict) or not isinstance(section.get("modules"), list):
        raise _fail(where, "a CUDA model without its 'cuda' manifest section")
    if not _str_list(section.get("archs")) or not (
        section.get("ptx_arch") is None or isinstance(section.get("ptx_arch"), str)
    ):
        raise _fail(where, "the 'cuda' section's 'archs' or 'ptx_arch' is malformed")
    for k, m in enumerate(section["modules"]):
        ok = (
            isinstance(m, dict)
            and isinstance(m.get("tir"), str)
            and isinstance(m.get("source"), str)
            and (m.get("ptx") is None or isinstance(m.get("ptx"), str))
            and isinstance(m.get("cubin"), dict)
            and all(isinstance(a, str) and isinstance(n, str) for a, n in m["cubin"].items())
            and isinstance(m.get("launches"), list)
        )
        if not ok:
            raise _fail(where, f"the 'cuda' section's entry of kernel module {k} is malformed")


__all__ = [
    "archive_limit",
    "check_cuda_section",
    "check_dynamic_manifest",
    "MAX_VALUE_BYTES",
    "check_graph",
    "check_manifest",
    "check_member_name",
    "check_shape",
    "check_steps",
    "member_limit",
]
