"""Reading an ``.ember`` zip archive without trusting it: bounded, streamed, checked.

:func:`ember.graph.artifact.read_archive` (compiled models) and
:mod:`ember.graph.artifact_dynamic` (models with symbolic dims) read their files through
:func:`read_archive`. The manifest is read first, within a bound, and checked
(:mod:`ember.runtime.artifact_schema`); the archive's directory must then list exactly the
manifest's members, under plain relative names and of the sizes the manifest
records, each within what a member may expand to; only then is a member
decompressed, in chunks, up to its declared size, while its SHA-256 is computed. So
a zip bomb or a member lying about its size is refused from the directory, and a
damaged archive (bad deflate data, CRC, header, compression method) is an
``InvalidModelError``, never a ``zlib.error`` or a killed process.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, InvalidModelError
from ember.runtime import artifact_schema as schema


def read_archive(
    path: str | Path, fmt: str, versions: tuple[int, ...], reader: str
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the members of an artifact of format ``fmt``, every hash checked.

    Nothing is trusted before it is checked: the manifest is read first (bounded) and
    validated; the archive's member names must be exactly the manifest's, each a plain
    relative name; each member's declared size must be the manifest's (where recorded)
    and within :func:`ember.runtime.artifact_schema.member_limit` before a byte of it is
    decompressed, and it is read in chunks up to that size while its hash is computed,
    so a zip bomb or a member that lies about its size costs no more memory than its
    declared size allows. Every failure of the archive's bytes (bad deflate data, bad
    CRC, truncation, an unknown compression method) is an ``InvalidModelError``."""
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"load: no file {p}")
    try:
        with zipfile.ZipFile(p) as z:
            infos = member_infos(z, p)
            manifest = parse_json(read_member(z, infos["manifest.json"], p), "manifest.json", p)
            _check_header(manifest, fmt, versions, reader, p)
            schema.check_manifest(manifest, p)
            _check_directory(manifest, infos, p)
            members = {}
            for name, info in infos.items():
                if name != "manifest.json":
                    members[name] = read_member(z, info, p, manifest["sha256"][name])
    except InvalidModelError:  # a check's own refusal (an EmberError is a RuntimeError)
        raise
    except ARCHIVE_ERRORS as e:
        raise InvalidModelError(f"{p} is not an Ember model file (or it is truncated): {e}") from e
    return manifest, members


# What reading a damaged zip archive raises: a flipped bit can land in deflate data
# (zlib.error), a CRC or a header (BadZipFile), the compression method
# (NotImplementedError), the encryption flag (RuntimeError), a length (EOFError).
ARCHIVE_ERRORS = (
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


def member_infos(z: zipfile.ZipFile, p: Path) -> dict[str, zipfile.ZipInfo]:
    """The members of an artifact zip by name, refusing duplicates and oversized archives before
    anything is read (the file may come from elsewhere)."""
    infos: dict[str, zipfile.ZipInfo] = {}
    entries = z.infolist()
    if len(entries) > schema.MAX_MEMBERS:
        raise InvalidModelError(f"{p}: {len(entries)} members, more than any model has")
    for info in entries:
        if info.filename in infos:
            raise InvalidModelError(f"{p}: the member '{info.filename}' appears twice")
        schema.check_member_name(info.filename, p)
        infos[info.filename] = info
    total, limit = sum(i.file_size for i in entries), schema.archive_limit(p.stat().st_size)
    if total > limit:
        raise InvalidModelError(
            f"{p}: its members declare {total} bytes in all, over the {limit} a file of "
            f"{p.stat().st_size} bytes may expand to (a zip bomb?)"
        )
    if "manifest.json" not in infos:
        raise InvalidModelError(f"{p} is not an Ember model file (it has no manifest.json)")
    return infos


def read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, p: Path, digest: str = "") -> bytes:
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


def parse_json(data: bytes, name: str, p: Path) -> Any:
    """``data`` parsed as JSON, or an ``InvalidModelError`` naming the member, so a damaged
    artifact is reported as such rather than as a bare decoder error."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise InvalidModelError(f"{p}: '{name}' is not readable JSON: {e}") from e


def _check_header(manifest: Any, fmt: str, versions: tuple[int, ...], reader: str, p: Path) -> None:
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != fmt:
        raise InvalidModelError(f"{p} is not an Ember model file (format {found!r})")
    if manifest.get("format_version") not in versions:
        raise InvalidModelError(
            f"{p} was written by Ember {manifest.get('ember_version')} in format version "
            f"{manifest.get('format_version')}; this Ember ({reader}) reads versions "
            f"{', '.join(map(str, versions))}: compile the model again"
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


__all__ = ["ARCHIVE_ERRORS", "member_infos", "parse_json", "read_archive", "read_member"]
