"""The batch_matmul.llvm template, and the matmul/dense templates whose GEMM schedule it shares."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.batch_matmul import batch_matmul_llvm
from ember.codegen_llvm.schedules.matmul import (
    GemmTiles,
    define_pack_knob,
    dense_llvm,
    matmul_llvm,
)
from ember.tuner import FallbackConfig
from ember.tuner.template import using_config
from tests.codegen_llvm.schedules.template_helpers import config_with, sampled_configs, task_of
from tests.nightly import NIGHTLY, configs, examples
from tests.numerics import check


def bmm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


@pytest.mark.parametrize(
    "shape", [(3, 17, 13, 9), (2, 5, 70, 33), (1, 1, 1, 1), (4, 8, 16, 3)], ids=str
)
def test_fallback(shape, rng):  # noqa: ANN001
    s, args = batch_matmul_llvm(*shape)
    check(s, args, bmm_ref, rng)


def test_fallback_medium_llvm(rng):  # noqa: ANN001
    s, args = batch_matmul_llvm(6, 64, 100, 72)
    check(s, args, bmm_ref, rng, executors=("llvm",))


def test_sampled_configs(rng):  # noqa: ANN001
    task = task_of("batch_matmul.llvm", 2, 11, 37, 10, "float32")
    for cfg in sampled_configs(task, configs(4), seed=4):
        s, args = task.instantiate(cfg)
        check(s, args, bmm_ref, rng)


def test_batch_is_in_the_parallel_loop():
    s, args = batch_matmul_llvm(8, 16, 64, 16)
    text = str(ember.lower(s, args))
    assert "parallel(" in text and ", 1, 64)]" in text


@pytest.mark.parametrize("shape", [(17, 35, 13), (4, 64, 8)], ids=str)
def test_matmul_and_dense_fallback(shape, rng):  # noqa: ANN001
    s, args = matmul_llvm(*shape)
    check(s, args, bmm_ref, rng)
    s, args = dense_llvm(*shape)
    check(s, args, lambda x, w: bmm_ref(x, w.T), rng)


@pytest.mark.parametrize("pack", ["ahead", "block", "none"])
@pytest.mark.parametrize(
    "name",
    # dense.llvm packs through the same code as matmul.llvm (its weights transposed):
    # one packing of it in CI, all three nightly
    ["matmul.llvm", "dense.llvm"],
)
def test_every_packing_matches_numpy(name, pack, rng):  # noqa: ANN001
    if name == "dense.llvm" and pack != "ahead" and not NIGHTLY:
        pytest.skip("nightly: EMBER_NIGHTLY=1 (dense.llvm shares matmul.llvm's packing)")
    """37 rows in 6-row tiles, 150 columns in 32-wide blocks of two 16-lane panels: the
    edge row tile, edge block and edge panel all partial."""
    task = task_of(name, 37, 150, 29, "float32")
    cfg = config_with(task, pack=pack, mr=6, nr=16, nc_panels=2, ku=4)
    s, args = task.instantiate(cfg)
    if name == "dense.llvm":
        check(s, args, lambda x, w: bmm_ref(x, w.T), rng)
    else:
        check(s, args, bmm_ref, rng)


def test_packing_per_block_packs_inside_the_parallel_column_block_loop():
    task = task_of("matmul.llvm", 64, 256, 32, "float32")
    s, args = task.instantiate(config_with(task, pack="block", nr=32, nc_panels=2))
    text = str(ember.lower(s, args))
    parallel, packing = text.index("parallel("), text.index("B_packed[")
    assert parallel < packing  # the pack is in each column block's iteration
    ahead = task.instantiate(config_with(task, pack="ahead", nr=32, nc_panels=2))
    text = str(ember.lower(*ahead))
    assert text.index("B_packed[") < text.index("parallel(", text.index("B_packed[") + 1)


def test_packing_default_follows_the_column_blocks():
    """Per block from 8 column blocks on, ahead below (the row blocks then share the
    threads), none for a few rows; ``dense`` always packs."""

    def default(M: int, N: int, dense: bool = False) -> str:
        with using_config(FallbackConfig()):
            return define_pack_knob(M, N, GemmTiles(4, 64, 4, 2), dense)

    assert default(128, 3072) == "block"
    assert default(64, 256) == "ahead"
    assert default(2, 4096) == "none"
    assert default(2, 4096, dense=True) == "block"
    assert default(2, 256, dense=True) == "ahead"


@settings(max_examples=examples(16), deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 200),
    k=st.integers(1, 40),
    pack=st.sampled_from(["ahead", "block", "none"]),
    mr=st.sampled_from([1, 2, 4, 6]),
    nr=st.sampled_from([16, 32, 48]),
    nc_panels=st.sampled_from([1, 2, 4]),
)
def test_packing_property(m, n, k, pack, mr, nr, nc_panels):  # noqa: ANN001
    """Any packing, row tile and panel width (48: cut into vectors of 32 and 16) on
    shapes the tiles do not divide: the column edge of an "ahead" GEMM sits in the
    fused parallel loop, where its guard versions the vector loops."""
    task = task_of("matmul.llvm", m, n, k, "float32")
    if "gemv" in task.config_space.knobs:
        return  # a one-row product: test_gemv covers it
    cfg = config_with(task, pack=pack, mr=mr, nr=nr, nc_panels=nc_panels)
    s, args = task.instantiate(cfg)
    check(s, args, bmm_ref, np.random.default_rng(m * 1000 + n), executors=("llvm",))


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
