"""Mutations of a valid ``.ember`` file for the artifact-loader fuzz tests.

Each mutation takes the file's bytes and a seeded ``random.Random`` and returns new bytes:
raw damage (truncation, bit flips), archive edits (a member renamed, a size field that
lies), and edits an author could make on purpose, with the hash table (and the CUDA
section's digest) recomputed so the damage reaches the checks behind the hashes: JSON
mutations of the manifest, the graph and the stored TIR, and bit flips inside the
params, CUDA source, ONNX source or nested artifacts. Native libraries
(``kernels/*.so``) are never edited behind a recomputed hash: an ``.ember`` file holds
machine code, which a consistent hash cannot make safe.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import random
import struct
import zipfile
from collections.abc import Callable
from typing import Any

_JUNK: tuple[Any, ...] = (
    None,
    -1,
    10**12,
    2**63,
    1.5,
    True,
    "",
    "junk",
    "kernels/..",
    [],
    {},
    [None],
    {"tuple": 3},
    [[10**12], "float32"],
)


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _pack(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, d in members.items():
            z.writestr(n, d)
    return buf.getvalue()


def _reseal(members: dict[str, bytes]) -> dict[str, bytes]:
    """Recompute the manifest's hashes, sizes and CUDA digest, as anyone can."""
    try:
        m = json.loads(members["manifest.json"])
    except (KeyError, ValueError):
        return members
    if not isinstance(m, dict):
        return members
    others = {n: d for n, d in members.items() if n != "manifest.json"}
    if isinstance(m.get("sha256"), dict):
        m["sha256"] = {n: hashlib.sha256(d).hexdigest() for n, d in others.items()}
    if isinstance(m.get("sizes"), dict):
        m["sizes"] = {n: len(d) for n, d in others.items()}
    cuda = m.get("cuda")
    if isinstance(cuda, dict):
        body = {k: v for k, v in cuda.items() if k != "sha256"}
        cuda["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    members["manifest.json"] = json.dumps(m).encode()
    return members


def truncate(data: bytes, r: random.Random) -> bytes:
    return data[: r.randrange(len(data))]


def flip_bits(data: bytes, r: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(r.randint(1, 3)):
        k = r.randrange(len(out) * 8)
        out[k // 8] ^= 1 << (k % 8)
    return bytes(out)


def rename_member(data: bytes, r: random.Random) -> bytes:
    members = _members(data)
    old = r.choice(sorted(members))
    new = r.choice(["kernels/..", "kernels/k99.so", "../x", old + "x", "/abs", "graph.json"])
    members[new] = members.pop(old)
    return _pack(_reseal(members) if r.random() < 0.5 else members)


def lie_about_size(data: bytes, r: random.Random) -> bytes:
    """Rewrite the uncompressed size in one member's local or central header."""
    out = bytearray(data)
    sig, field = r.choice([(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)])
    spots = [i for i in range(len(out) - 4) if out[i : i + 4] == sig]
    if not spots:
        return data
    at = r.choice(spots) + field
    size = struct.unpack_from("<I", out, at)[0]
    struct.pack_into("<I", out, at, r.choice([0, 1, size + 1, size * 2, 2**31, 2**32 - 1]))
    return bytes(out)


def _mutate_json(value: Any, r: random.Random) -> Any:
    """One random edit somewhere in a JSON tree: a value replaced by junk, a key removed,
    a list element removed or duplicated."""
    value = copy.deepcopy(value)
    path: list[Any] = []
    node = value
    while isinstance(node, (dict, list)) and node and r.random() < 0.8:
        key = r.choice(sorted(node)) if isinstance(node, dict) else r.randrange(len(node))
        path.append(key)
        node = node[key]
    if not path:
        return r.choice(_JUNK)
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = r.random()
    if action < 0.6:
        parent[key] = copy.deepcopy(r.choice(_JUNK))
    elif isinstance(parent, dict):
        del parent[key]
    elif action < 0.8:
        del parent[key]
    else:
        parent.insert(key, copy.deepcopy(parent[key]))
    return value


def mutate_json_member(data: bytes, r: random.Random) -> bytes:
    members = _members(data)
    names = [n for n in members if n.endswith(".json")]
    name = r.choice(names)
    members[name] = json.dumps(_mutate_json(json.loads(members[name]), r)).encode()
    return _pack(members if name == "manifest.json" and r.random() < 0.3 else _reseal(members))


def flip_params(data: bytes, r: random.Random) -> bytes:
    members = _members(data)
    # params, CUDA source and PTX, an ONNX source, a nested artifact (whose own hashes
    # still guard its libraries)
    names = [n for n in members if n.endswith((".npz", ".cu", ".ptx", ".onnx", ".ember"))]
    name = r.choice(names)
    members[name] = flip_bits(members[name], r)
    return _pack(_reseal(members))


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "truncate": truncate,
    "flip_bits": flip_bits,
    "rename_member": rename_member,
    "lie_about_size": lie_about_size,
    "mutate_json": mutate_json_member,
    "flip_params": flip_params,
}
