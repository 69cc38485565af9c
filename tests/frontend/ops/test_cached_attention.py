"""The ``cached_attention`` op (``fuse_cache_append`` makes it): its shape rule and its
generic compute (the concatenations and the unfused attention, what any target without a
kernel of its own runs), against numpy in float64."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ArgumentError
from ember.frontend.graph import TensorType
from ember.frontend.ops.registry import get_op
from ember.tir.topi.attention import AttentionLayout, cached_attention

ATTRS = {"scale": 0.5, **AttentionLayout().attrs()}


def _types(*shapes: tuple[int, ...]) -> list[TensorType]:
    return [TensorType(s, "float32") for s in shapes]


def test_shapes_are_the_attention_and_the_appended_caches():
    q, cache, new = (1, 3, 1, 8), (1, 3, 10, 8), (1, 3, 2, 8)
    out = get_op("cached_attention").infer(_types(q, cache, new, cache, new), ATTRS)
    assert [t.shape for t in out] == [(1, 3, 1, 8), (1, 3, 12, 8), (1, 3, 12, 8)]


@pytest.mark.parametrize(
    "new, attrs, message",
    [
        ((1, 3, 1, 7), ATTRS, "does not extend"),  # another head size
        ((1, 3, 1), ATTRS, "4-D"),
        ((1, 3, 1, 8), {**ATTRS, "k_split": 8}, "no split"),
    ],
)
def test_caches_that_do_not_fit_are_refused(new, attrs, message):  # noqa: ANN001
    q, cache = (1, 3, 1, 8), (1, 3, 10, 8)
    with pytest.raises(ArgumentError, match=message):
        get_op("cached_attention").infer(_types(q, cache, new, cache, (1, 3, 1, 8)), attrs)


def test_generic_compute_matches_numpy_in_float64(rng):  # noqa: ANN001
    """Two query rows over a cache of 6 with 2 new positions, caches stored [B, S, H, D]
    (the position axis 1), with a mask."""
    B, H, Sq, P, N, D = 2, 3, 2, 6, 2, 5
    layout = AttentionLayout(*[(0, 2, 1, 3)] * 4)
    q = rng.standard_normal((B, Sq, H, D))
    caches = [rng.standard_normal((B, P, H, D)) for _ in "kv"]
    news = [rng.standard_normal((B, N, H, D)) for _ in "kv"]
    mask = np.where(rng.random((B, 1, Sq, P + N)) < 0.3, -1e4, 0.0)
    arrays = [q, caches[0], news[0], caches[1], news[1], mask]
    ph = [te.placeholder(a.shape, name=f"in{i}", dtype="float64") for i, a in enumerate(arrays)]
    outs = cached_attention(*ph, 0.5, layout)
    mod = ember.build(te.create_schedule([o.op for o in outs]), [*ph, *outs], target="llvm")
    got = [np.full(tuple(int(d) for d in o.shape), np.nan) for o in outs]
    mod(*arrays, *got)
    k, v = (np.concatenate([c, n], axis=1) for c, n in zip(caches, news))
    np.testing.assert_array_equal(got[1], k)
    np.testing.assert_array_equal(got[2], v)
    s = np.einsum("bihd,bjhd->bhij", q, k) * 0.5 + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bhij,bjhd->bihd", p / p.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(got[0], want, rtol=1e-10, atol=1e-12)
