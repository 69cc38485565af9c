"""``.ember`` files that must not hurt the process that loads them (issue 22, items 10, 11,
13 and 30): code built for another CPU, zip bombs and size lies, archives whose hashes
are consistent but whose structure is wrong, and edited CUDA kernels' TIR. Each one is
refused with ``InvalidModelError`` saying what is wrong; the portable CPU target runs
and matches onnxruntime. The random counterpart is ``test_artifact_fuzz.py``.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.errors import InvalidModelError
from ember.graph import load as graph_load

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]

# The x86-64 psABI's levels (x86-64-v3 = v2 + these), written from the psABI text, in
# LLVM's feature names: what code for -mcpu=x86-64-v3 may use, and no more.
PSABI_V3 = {
    "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "64bit",
    "cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3",
    "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave",
}  # fmt: skip


def _ort(model, feeds):  # noqa: ANN001, ANN202
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.fixture(scope="module")
def cnn():  # noqa: ANN201
    from ember.frontend.testing.models import small_cnn

    model, feeds = small_cnn(np.random.default_rng(5), batch=2, h=9, w=7)
    return model, feeds, _ort(model, feeds)


@pytest.fixture(scope="module")
def cpu_file(cnn, tmp_path_factory) -> Path:  # noqa: ANN001
    path = tmp_path_factory.mktemp("trust") / "cnn.ember"
    ember.compile(cnn[0]).export(path)
    return path


def _read(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write(path: Path, members: dict[str, bytes], reseal: bool = True) -> Path:
    """Write ``members``, with the manifest's hashes and sizes recomputed (as anyone can)."""
    if reseal:
        m = json.loads(members["manifest.json"])
        others = {n: d for n, d in members.items() if n != "manifest.json"}
        m["sha256"] = {n: hashlib.sha256(d).hexdigest() for n, d in others.items()}
        m["sizes"] = {n: len(d) for n, d in others.items()}
        members = {**members, "manifest.json": json.dumps(m).encode()}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, d in members.items():
            z.writestr(n, d)
    return path


def _edit_json(src: Path, dst: Path, member: str, change) -> Path:  # noqa: ANN001
    members = _read(src)
    data = json.loads(members[member])
    data = change(data) or data
    members[member] = json.dumps(data).encode()
    return _write(dst, members)


# -- item 10: the CPU the code was built for ---------------------------------------------


def _host_features() -> set[str]:
    import llvmlite.binding as llvm

    return {k for k, on in llvm.get_host_cpu_features().items() if on}


def test_item_10_portable_cpu_target_compiles_exports_and_loads(cnn, tmp_path):
    model, feeds, want = cnn
    if not PSABI_V3 <= _host_features():
        pytest.skip("this CPU is below x86-64-v3")
    compiled = ember.compile(model, target="llvm -mcpu=x86-64-v3")
    path = tmp_path / "portable.ember"
    compiled.export(path)
    members = _read(path)
    cpu = json.loads(members["manifest.json"])["cpu"]
    assert cpu["name"] == "x86-64-v3" and set(cpu["features"]) == PSABI_V3
    # the machine code itself uses no AVX-512 register, whatever this host has
    for name, data in members.items():
        if name.endswith(".so"):
            lib = tmp_path / Path(name).name
            lib.write_bytes(data)
            asm = subprocess.run(["objdump", "-d", str(lib)], capture_output=True, text=True)
            if asm.returncode == 0:
                assert "%zmm" not in asm.stdout and "%k1" not in asm.stdout, name
    got = ember.load(path).run(feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    # the same from the command line
    from ember.cli import main as cli_main

    onnx.save(model, str(tmp_path / "m.onnx"))
    art = tmp_path / "cli.ember"
    target = "llvm -mcpu=x86-64-v3"
    assert cli_main(["compile", str(tmp_path / "m.onnx"), "-o", str(art), "--target", target]) == 0
    assert json.loads(_read(art)["manifest.json"])["cpu"]["name"] == "x86-64-v3"
    got = ember.load(art).run(feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_item_10_portable_target_on_a_vnni_host_compiles_int8(tmp_path):
    """MatMulInteger took the AVX-512 VNNI kernel for any target on a VNNI host, and LLVM
    aborted the process compiling it for x86-64-v3; run apart so an abort is a failure."""
    script = (
        "import numpy as np, ember\n"
        "from tests.frontend.test_pack_int8_weights import _model, _operands\n"
        "a, b = _operands(7, 21, 13, 3)\n"
        "m = ember.compile(_model(a.shape, b), target='llvm -mcpu=x86-64-v3')\n"
        "want = a.astype(np.int64) @ b.astype(np.int64)\n"
        "assert np.array_equal(m.run({'a': a})[0], want)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def _with_cpu(src: Path, dst: Path, **changes) -> Path:  # noqa: ANN003
    members = _read(src)
    m = json.loads(members["manifest.json"])
    m["cpu"].update(changes)
    members["manifest.json"] = json.dumps(m).encode()
    return _write(dst, members, reseal=False)


def test_item_10_code_for_missing_instructions_is_refused(cpu_file, tmp_path):
    lacking = sorted(
        {"avx512fp16", "amx-tile", "avx512vp2intersect", "fake-feature"} - _host_features()
    )
    cpu = json.loads(_read(cpu_file)["manifest.json"])["cpu"]
    bad = _with_cpu(cpu_file, tmp_path / "f.ember", features=cpu["features"] + lacking)
    with pytest.raises(InvalidModelError, match="lacks: " + ", ".join(lacking)) as e:
        ember.load(bad)
    assert "x86-64-v3" in str(e.value)  # the message names the portable choice
    other = _with_cpu(cpu_file, tmp_path / "n.ember", name="not-this-cpu", features=None)
    with pytest.raises(InvalidModelError, match="not-this-cpu.*cannot check"):
        ember.load(other)
    arm = _with_cpu(cpu_file, tmp_path / "a.ember", triple="aarch64-unknown-linux-gnu")
    with pytest.raises(InvalidModelError, match="aarch64"):
        ember.load(arm)


# -- item 11: zip bombs and size lies ----------------------------------------------------


def _bomb(src: Path, dst: Path, member: str, listed: bool, size: int = 256 << 20) -> Path:
    """``src`` plus ``member``: ``size`` zero bytes (about ``size / 1000`` on disk)."""
    members = _read(src)
    m = json.loads(members["manifest.json"])
    chunk = bytes(1 << 20)
    if listed:
        h = hashlib.sha256()
        for _ in range(size >> 20):
            h.update(chunk)
        m["sha256"][member] = h.hexdigest()
        m["sizes"][member] = size
    members["manifest.json"] = json.dumps(m).encode()
    with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for n, d in members.items():
            z.writestr(n, d)
        with z.open(member, "w", force_zip64=True) as f:
            for _ in range(size >> 20):
                f.write(chunk)
    return dst


@pytest.mark.parametrize("listed", [False, True], ids=["unlisted", "listed"])
def test_item_11_zip_bomb_is_refused_before_it_is_read(cpu_file, tmp_path, listed):
    bomb = _bomb(cpu_file, tmp_path / "bomb.ember", "kernels/k9.so", listed)
    assert bomb.stat().st_size < 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModelError, match="bomb|do not match its manifest"):
            ember.load(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_item_11_many_small_bombs_are_refused_together(cpu_file, tmp_path):
    """300 members of 1 MiB of zeros each: every one under the per-member limit, together
    a bomb; the archive's total is checked before any member is read."""
    members = _read(cpu_file)
    for k in range(300):
        members[f"kernels/pad{k}"] = bytes(1 << 20)
    bad = tmp_path / "many.ember"
    with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for n, d in members.items():
            z.writestr(n, d)
    del members
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModelError, match="in all.*zip bomb"):
            ember.load(bad)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_item_11_a_param_bomb_inside_params_npz_is_refused(cpu_file, tmp_path):
    """params.npz is itself a zip: a param entry of 256 MiB of zeros (with the outer hashes
    recomputed) is refused from its declared size, against the graph's type for it."""
    members = _read(cpu_file)
    inner = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(members["params.npz"])) as src,
        zipfile.ZipFile(inner, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as out,
    ):
        for n in src.namelist():
            if n == "p0.npy":
                with out.open(n, "w", force_zip64=True) as f:
                    f.write(src.read(n))
                    for _ in range(256):
                        f.write(bytes(1 << 20))
            else:
                out.writestr(n, src.read(n))
    members["params.npz"] = inner.getvalue()
    bad = _write(tmp_path / "npzbomb.ember", members)
    del members, inner
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModelError, match="p0.npy declares"):
            ember.load(bad)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_item_11_a_member_that_lies_about_its_size_is_refused(cpu_file, tmp_path):
    data = bytearray(cpu_file.read_bytes())
    at = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 4)  # 2nd central entry
    size = int.from_bytes(data[at + 24 : at + 28], "little")
    for lie in (size - 1, size + 1, 2**32 - 1):
        bad = tmp_path / "lie.ember"
        bad.write_bytes(data[: at + 24] + lie.to_bytes(4, "little") + data[at + 28 :])
        with pytest.raises(InvalidModelError):
            ember.load(bad)


# -- item 13: consistent hashes, wrong structure -----------------------------------------


def _graph(change):  # noqa: ANN001, ANN202
    def edit(body):  # noqa: ANN001, ANN202
        change(body)
        return body

    return edit


STRUCTURE_CASES = {
    "manifest is a list": ("manifest.json", lambda m: [m]),
    "sha256 is null": ("manifest.json", lambda m: {**m, "sha256": None}),
    "graph without nodes": ("graph.json", _graph(lambda b: b["graph"].pop("nodes"))),
    "graph is a list": ("graph.json", lambda b: {**b, "graph": [b["graph"]]}),
    "unknown dtype": (
        "graph.json",
        _graph(lambda b: b["graph"]["values"][b["graph"]["inputs"][0]].__setitem__(1, "float99")),
    ),
    "dimension of 10**12": (
        "graph.json",
        _graph(
            lambda b: b["graph"]["values"][b["steps"][0]["outputs"][0]][0].__setitem__(0, 10**12)
        ),
    ),
    "a step writes an unknown value": (
        "graph.json",
        _graph(lambda b: b["steps"][0]["outputs"].__setitem__(0, "nowhere")),
    ),
    "no steps": ("graph.json", lambda b: {**b, "steps": []}),
    "step kernel out of range": (
        "graph.json",
        _graph(lambda b: b["steps"][0].__setitem__("kernel", 99)),
    ),
    "a value of another shape": (
        "graph.json",
        _graph(lambda b: b["graph"]["values"][b["steps"][0]["outputs"][0]][0].__setitem__(0, 3)),
    ),
    "a node's absorbed names are not strings": (
        "graph.json",
        _graph(lambda b: b["graph"]["nodes"][0].__setitem__("absorbed", [7])),
    ),
}


@pytest.mark.parametrize("case", sorted(STRUCTURE_CASES))
def test_item_13_wrong_structure_with_consistent_hashes_is_refused(cpu_file, tmp_path, case):
    member, change = STRUCTURE_CASES[case]
    if member == "manifest.json":  # the manifest is not hashed: write it as changed
        members = _read(cpu_file)
        members["manifest.json"] = json.dumps(change(json.loads(members[member]))).encode()
        bad = _write(tmp_path / "bad.ember", members, reseal=False)
    else:
        bad = _edit_json(cpu_file, tmp_path / "bad.ember", member, change)
    with pytest.raises(InvalidModelError, match="bad.ember"):  # the message names the file
        ember.load(bad)


def test_item_13_a_member_named_kernels_dotdot_writes_nothing_outside(cpu_file, tmp_path):
    members = _read(cpu_file)
    members["kernels/.."] = b"\x7fELF not a library"
    bad = _write(tmp_path / "dotdot.ember", members)
    with pytest.raises(InvalidModelError, match="not a plain relative file name"):
        ember.load(bad)


def test_item_13_bit_flips_in_compressed_data_are_invalid_model_errors(cpu_file, tmp_path):
    data = cpu_file.read_bytes()
    with zipfile.ZipFile(cpu_file) as z:
        info = z.getinfo("params.npz")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    rng = np.random.default_rng(13)
    bad = tmp_path / "flip.ember"
    for bit in rng.integers(0, info.compress_size * 8, 120):
        flipped = bytearray(data)
        flipped[start + bit // 8] ^= 1 << (bit % 8)
        bad.write_bytes(flipped)
        assert graph_load.file_format(bad) == "ember-model"  # the manifest is intact
        with pytest.raises(InvalidModelError):
            ember.load(bad)
    with zipfile.ZipFile(cpu_file) as z:  # flips inside the manifest's compressed data
        info = z.getinfo("manifest.json")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for bit in rng.integers(0, info.compress_size * 8, 60):
        flipped = bytearray(data)
        flipped[start + bit // 8] ^= 1 << (bit % 8)
        bad.write_bytes(flipped)
        assert graph_load.file_format(bad) in (None, "ember-model")
        with pytest.raises(InvalidModelError):
            ember.load(bad)


# -- item 30: edited CUDA artifacts ------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_file(tmp_path_factory):  # noqa: ANN201
    pytest.importorskip("cuda")
    from ember.frontend.testing.models import mlp

    model, feeds = mlp(np.random.default_rng(7), batch=3, sizes=(13, 24, 7))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_CUDA_EMULATE", "1")
        compiled = ember.compile(model, target="cuda")
        path = tmp_path_factory.mktemp("trust_cuda") / "mlp.ember"
        compiled.export(path)
    return path, feeds, _ort(model, feeds)


def _tir_edit(kind: str):  # noqa: ANN202
    """One edit of a stored TIR table (``kernels/k0.tir.json``)."""

    def edit(data):  # noqa: ANN001, ANN202
        nodes = data["programs"]["nodes"] if "programs" in data else data["nodes"]
        first = {
            c: next(n for n in nodes if n["c"] == c)
            for c in ("Var", "IntImm", "Buffer", "For")
            if any(n["c"] == c for n in nodes)
        }
        if kind == "field of the wrong type":
            first["Var"]["f"]["dtype"] = 32
        elif kind == "a node where a tuple belongs":
            first["Buffer"]["f"]["shape"] = {"n": 0}
        elif kind == "an int field holding a string":
            first["IntImm"]["f"]["value"] = "7"
        elif kind == "a dangling node reference":
            first["For"]["f"]["body"] = {"n": 10**6}
        elif kind == "a list where the node table belongs":
            data["programs"]["nodes"] = {"0": nodes[0]}
        elif kind == "programs missing":
            del data["programs"]
        elif kind == "arch not a string":
            data["arch"] = ["sm_80"]

    return edit


TIR_EDITS = (
    "field of the wrong type",
    "a node where a tuple belongs",
    "an int field holding a string",
    "a dangling node reference",
    "a list where the node table belongs",
    "programs missing",
    "arch not a string",
)


@pytest.mark.nvrtc
@pytest.mark.parametrize("kind", TIR_EDITS)
def test_item_30_edited_cuda_tir_is_refused(cuda_file, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    path, feeds, want = cuda_file
    bad = _edit_json(path, tmp_path / "bad.ember", "kernels/k0.tir.json", _tir_edit(kind))
    with pytest.raises(InvalidModelError):
        ember.load(bad).run(feeds)


@pytest.mark.nvrtc
def test_item_30_edited_cuda_section_is_refused(cuda_file, tmp_path, monkeypatch):
    from ember.codegen_cuda.artifact import section_digest

    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    path, feeds, want = cuda_file
    for change in (
        lambda s: s["modules"].__setitem__(0, "k0"),
        lambda s: s["modules"][0].__setitem__("cubin", ["sm_80"]),
        lambda s: s.__setitem__("archs", None),
        lambda s: s["modules"][0]["launches"][0].__setitem__("block", [1, 1, 1]),
    ):
        members = _read(path)
        m = json.loads(members["manifest.json"])
        change(m["cuda"])
        m["cuda"]["sha256"] = section_digest(m["cuda"])
        members["manifest.json"] = json.dumps(m).encode()
        with pytest.raises(InvalidModelError):
            ember.load(_write(tmp_path / "s.ember", members, reseal=False)).run(feeds)
    np.testing.assert_allclose(ember.load(path).run(feeds)[0], want[0], rtol=1e-4, atol=1e-5)


def _npy(magic: bytes, header: bytes, size: str = "<H") -> bytes:
    return magic + struct.pack(size, len(header)) + header


@pytest.mark.parametrize(
    "entry, words",
    [
        (_npy(b"\x93NUMPY\x01\x00", b"\x00\x00{'descr': '<f4'}"), "unreadable header"),
        (_npy(b"\x93NUMPY\x01\x00", b"__import__('os').getcwd()"), "unreadable header"),
        (_npy(b"\x93NUMPY\x01\x00", b"{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}"),
         "unreadable header"),
        (_npy(b"\x93NUMPY\x01\x00", b"{'descr': 'O', 'fortran_order': False, 'shape': (-1,)}"),
         "unreadable header"),
        (_npy(b"\x93NUMPY\x09\x00", b"{}"), "not an .npy array"),
        (b"\x93NUMPY\x01\x00\xff", "truncated or oversized header"),
        (_npy(b"\x93NUMPY\x02\x00", b"{'descr': '<f4'}")[:14], "truncated or oversized header"),
    ],
    ids=["null-bytes", "code", "order-not-bool", "negative-shape", "version", "short", "cut"],
)  # fmt: skip
def test_item_11_a_param_with_a_tampered_npy_header_is_refused(cpu_file, tmp_path, entry, words):
    """Each param's header is parsed by Ember, never evaluated as code, and checked
    before its data: null bytes, code, wrong field types, a foreign version, cut short."""
    members = _read(cpu_file)
    inner = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(members["params.npz"])) as src,
        zipfile.ZipFile(inner, "w") as out,
    ):
        for n in src.namelist():
            out.writestr(n, entry if n == "p0.npy" else src.read(n))
    members["params.npz"] = inner.getvalue()
    with pytest.raises(InvalidModelError, match=words):
        ember.load(_write(tmp_path / "tampered.ember", members))
