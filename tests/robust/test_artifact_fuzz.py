"""Fuzzing the ``.ember`` loader (issue 22, "How it must be shown"): random truncation, bit
flips, member renames, size fields that lie, JSON mutations and params edits behind a
recomputed hash table (``artifact_mutations.py``), of a valid CPU (llvm) file, a valid
CUDA file (loaded and run in the SIMT emulator) and a model with a symbolic batch (whose
file nests a compiled one).

Every case must be refused with an ``EmberError`` or load and run to outputs that match
onnxruntime's; none may raise anything else or crash the process, and none may allocate
more than ``PEAK_BYTES`` while it loads and runs (measured with tracemalloc, which sees
numpy's buffers and zipfile's decompression output). CI runs ``CI_CASES`` cases per
target; the nightly run (``EMBER_NIGHTLY=1``, marked ``slow``) runs ``NIGHTLY_CASES``.
"""

from __future__ import annotations

import collections
import os
import random
import resource
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.errors import EmberError
from tests.robust.artifact_mutations import MUTATIONS

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

CI_CASES = 100
NIGHTLY_CASES = 2000
PEAK_BYTES = 48 << 20  # the models are tiny: a real leak or a bomb is far above this
RSS_GROWTH_BYTES = 512 << 20


def _build(kind: str, folder: Path) -> tuple[bytes, dict, list[np.ndarray]]:
    """A valid file of ``kind`` ("llvm", "cuda", or "dynamic": a model with a symbolic
    batch and one stored size), its feeds and onnxruntime's outputs."""
    from ember.frontend.testing.models import mlp, small_cnn, symbolic_batch

    rng = np.random.default_rng(17)
    if kind == "cuda":
        pytest.importorskip("cuda")
        model, feeds = mlp(rng, batch=3, sizes=(13, 24, 7))
    else:
        model, feeds = small_cnn(rng, batch=2, h=9, w=7)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    path = folder / f"{kind}.ember"
    if kind == "dynamic":
        compiled = ember.compile(symbolic_batch(model, "N"))
        compiled.run(feeds)  # compiles (and so stores) batch 2
    else:
        compiled = ember.compile(model, target=kind)
    compiled.export(path)
    return path.read_bytes(), feeds, sess.run(None, feeds)


def _outcome(path: Path, feeds: dict, want: list[np.ndarray]) -> str:
    try:
        got = ember.load(path).run(feeds)
    except EmberError:
        return "refused"
    same = len(got) == len(want) and all(
        g.shape == w.shape and np.allclose(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want)
    )
    return "correct" if same else "WRONG"


def _fuzz(kind: str, cases: int, folder: Path) -> collections.Counter:
    data, feeds, want = _build(kind, folder)
    assert _outcome(folder / f"{kind}.ember", feeds, want) == "correct"
    names = sorted(MUTATIONS)
    seen: collections.Counter = collections.Counter()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    path = folder / "case.ember"
    for i in range(cases):
        name = names[i % len(names)]
        path.write_bytes(MUTATIONS[name](data, random.Random(f"{kind}{i}")))
        tracemalloc.start()
        try:
            result = _outcome(path, feeds, want)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert result != "WRONG", f"case {i} ({name}) loads and gives wrong outputs"
        assert peak < PEAK_BYTES, f"case {i} ({name}) took {peak} bytes"
        seen[name, result] += 1
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    assert growth < RSS_GROWTH_BYTES, growth
    return seen


@pytest.fixture
def emulate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")


def _check_coverage(seen: collections.Counter) -> None:
    """Every mutation ran, and some cases of the archive-level kinds were refused (the
    fuzz reaches the checks rather than only harmless bytes)."""
    kinds = {name for name, _ in seen}
    assert kinds == set(MUTATIONS)
    for name in ("truncate", "rename_member", "mutate_json"):
        assert seen[name, "refused"] > 0, seen


KINDS = ["llvm", "dynamic", pytest.param("cuda", marks=pytest.mark.nvrtc)]


@pytest.mark.parametrize("kind", KINDS)
def test_fuzzed_artifacts_are_refused_or_correct(kind, tmp_path, emulate):
    _check_coverage(_fuzz(kind, CI_CASES if kind != "dynamic" else CI_CASES // 2, tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("EMBER_NIGHTLY"), reason="nightly: set EMBER_NIGHTLY=1")
@pytest.mark.parametrize("kind", KINDS)
def test_fuzzed_artifacts_nightly(kind, tmp_path, emulate):
    _check_coverage(_fuzz(kind, NIGHTLY_CASES, tmp_path))
