"""The ``dense_packed.llvm`` template (the graph's GEMM over weights packed at compile
time) against numpy, on random data, odd shapes and every kind of config."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.codegen_llvm.schedules.generic import dense_packed_tiles, whole_panels_pay
from ember.tir.topi.conv_nchwc import blocks
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.nightly import examples


def _run(task, cfg, rng) -> None:
    """Build ``cfg`` of ``task``, run it on random A and panels, and compare with numpy:
    the weights unpacked from the panels by hand, their first N columns."""
    M, N, K, nr, lead, _ = task.args
    s, tensors = task.instantiate(cfg)
    mod = ember.build(s, tensors, target="llvm")
    a = rng.standard_normal((*lead, M, K)).astype("float32")
    w = rng.standard_normal((K, N)).astype("float32")
    panels = np.zeros((blocks(N, nr), K, nr), "float32")
    for p in range(panels.shape[0]):
        cols = w[:, p * nr : (p + 1) * nr]
        panels[p, :, : cols.shape[1]] = cols
    out = np.full((*lead, M, N), np.nan, "float32")  # every element must be written
    mod(a, panels, out)
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "args",
    [
        (128, 768, 256, 64, (1,)),  # BERT's QKV projection, as the graph shapes it
        (5, 20, 12, 32, ()),  # the MLP test model: N short of its panel
        (1, 1000, 512, 64, ()),  # a classifier GEMV: whole panels (1000 is not 64k)
        (7, 200, 33, 64, (2,)),  # batch axis, odd rows and K, a partial last panel
    ],
)
def test_sampled_configs_match_numpy(args):
    task = task_of("dense_packed.llvm", *args, "float32")
    rng = np.random.default_rng(0)
    for cfg in sampled_configs(task, 4, seed=1):
        _run(task, cfg, rng)


def test_the_fallback_is_the_graphs_default_and_nr_is_not_a_knob():
    task = task_of("dense_packed.llvm", 13, 200, 12, 64, (), "float32")
    assert set(task.config_space.knobs) == {"mr", "ku", "nc_panels"}
    want = dense_packed_tiles((13, 200), 64)
    got = task.config_space.default_entity()
    assert (got["mr"].val, got["ku"].val, got["nc_panels"].val) == (
        want.mr,
        want.ku,
        want.nc_panels,
    )
    assert whole_panels_pay((13, 200), 64)  # the task's compute spans whole panels too
    _run(task, got, np.random.default_rng(2))


def test_long_k_takes_blocks_of_one_panel():
    """Two panels a block only while the pair's weights fit ``PAIRED_PANELS_BYTES``: ViT's
    197x768x3072 GEMM (1.5 MB a pair) ran 1.22x faster on one. The default of such a task
    against numpy (k 2,100, a partial row block)."""
    assert dense_packed_tiles((197, 3072), 64, 768).nc_panels == 2
    assert dense_packed_tiles((197, 768), 64, 3072).nc_panels == 1
    assert dense_packed_tiles((197, 768), 64).nc_panels == 2  # no k given: no limit
    task = task_of("dense_packed.llvm", 9, 128, 2100, 64, (), "float32")
    got = task.config_space.default_entity()
    assert got["nc_panels"].val == 1
    _run(task, got, np.random.default_rng(3))


@settings(max_examples=examples(6), deadline=None)
@given(
    M=st.integers(1, 19),
    N=st.integers(1, 150),
    K=st.integers(1, 40),
    nr=st.sampled_from([16, 32, 64]),
    lead=st.sampled_from([(), (1,), (3,)]),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_and_configs_match_numpy(M, N, K, nr, lead, seed):
    task = task_of("dense_packed.llvm", M, N, K, nr, lead, "float32")
    rng = np.random.default_rng(seed)
    (cfg,) = sampled_configs(task, 1, seed)
    _run(task, cfg, rng)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ((5, 20, 12, 0, ()), "nr"),
        ((0, 20, 12, 32, ()), "M"),
        ((5, 20, 12, 32, (-1,)), "lead\\[0\\]"),
        ((5, 20, 12, 32, "x"), "lead must be a list"),
        ((5, True, 12, 32, ()), "N"),
    ],
)
def test_bad_sizes_are_an_argument_error(args, names):
    from ember.errors import ArgumentError

    with pytest.raises(ArgumentError, match=names):
        task_of("dense_packed.llvm", *args, "float32")
