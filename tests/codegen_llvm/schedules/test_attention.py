"""The CPU's fused attention kernel (online softmax, no stored scores) against numpy.

Odd sequence lengths and head dims (the key and query tails of the blocks, vector tails),
the multi-head layouts the graph pass folds in, masks with -inf and -10000 entries, a
fully masked row (NaN, as the unfused softmax gives), and scores large enough that
exp overflows unless the running maximum is subtracted.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.codegen_llvm.schedules.attention import flash_attention
from ember.tir.topi.attention import AttentionLayout, attention
from tests.nightly import examples

BHSD = (0, 2, 1, 3)  # [B, S, H, D] views: BERT's heads before their transpose
# (with a split of D: the [B, S, H·D] tensor before its reshape into heads)


def reference(q, k, v, mask, scale):  # noqa: ANN001, ANN201
    """softmax(q kᵀ · scale + mask) v in float64, logical [B, H, S, D] operands."""
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):  # a fully masked row: -inf - -inf, NaN as in ORT
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


def run_stored(kernel, target, call, q, k, v, mask, scale, layout, **blocks):  # noqa: ANN001, ANN003, ANN201
    """``kernel`` (a fused attention compute) built for ``target`` and run by ``call(module,
    *arrays)`` on logical operands stored in ``layout``; the output in logical order, and
    the module."""
    arrays = []
    for a, which in zip((q, k, v), "qkv"):
        view = np.ascontiguousarray(np.transpose(a, np.argsort(getattr(layout, which))))
        split = getattr(layout, f"{which}_split")
        arrays.append(view.reshape(*view.shape[:2], -1) if split else view)
    ph = [te.placeholder(a.shape, name=n) for a, n in zip(arrays, "qkv")]
    m = None if mask is None else te.placeholder(mask.shape, name="mask")
    out = kernel(*ph, m, scale, layout, **blocks)
    s = te.create_schedule(out.op)
    args = [*ph, *([m] if m is not None else []), out]
    mod = ember.build(s, args, target=target, name="attention")
    o = np.full(tuple(int(d) for d in out.shape), np.nan, np.float32)
    call(mod, *arrays, *([mask] if mask is not None else []), o)
    if layout.out_split:
        o = o.reshape(*o.shape[:2], -1, layout.out_split)
    return np.transpose(o, layout.out), mod


def run(q, k, v, mask, scale, layout, **blocks):  # noqa: ANN001, ANN003, ANN201
    """The CPU kernel on logical operands stored in ``layout``; the output in logical order."""
    call = lambda mod, *arrays: mod(*arrays)  # noqa: E731
    return run_stored(flash_attention, "llvm", call, q, k, v, mask, scale, layout, **blocks)[0]


CASES = [  # B, H, Sq, Sk, D, Dv, mask kind, layout
    (2, 3, 7, 33, 80, 80, "pad", AttentionLayout(BHSD, BHSD, BHSD, BHSD, 80, 80, 80, 80)),
    (1, 2, 1, 33, 64, 24, "causal", AttentionLayout(BHSD, (0, 2, 3, 1), BHSD)),
    (1, 1, 1, 1, 8, 8, None, AttentionLayout()),
    (1, 2, 129, 129, 8, 8, "full", AttentionLayout()),
]


# each row's softmax whole (rows up to WHOLE_ROW_KEYS keys, the default) or online
PATHS = {"whole": {}, "online": {"whole_row_keys": 0}}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])) + f"-{c[6]}")
def test_matches_numpy(case, path, rng):  # noqa: ANN001
    B, H, Sq, Sk, D, Dv, kind, layout = case
    q, k = rng.standard_normal((B, H, Sq, D)), rng.standard_normal((B, H, Sk, D))
    v = rng.standard_normal((B, H, Sk, Dv))
    q, k, v = (a.astype(np.float32) for a in (q, k, v))
    mask = None
    if kind == "pad":  # BERT's padding mask, [B, 1, 1, Sk]: -inf past each sequence's end
        mask = np.zeros((B, 1, 1, Sk), np.float32)
        mask[0, ..., 20:] = -np.inf
        mask[1, ..., 5:9] = -np.inf
    elif kind == "causal":  # [Sq, Sk], -10000 above the diagonal, as GPT-2's exporters add
        mask = np.triu(np.full((Sq, Sk), -10000.0, np.float32), 1 + Sk - Sq)
    elif kind == "full":  # one value per score, some -inf, row 3 of head 1 all -inf
        mask = rng.standard_normal((B, H, Sq, Sk)).astype(np.float32)
        mask[rng.random(mask.shape) < 0.3] = -np.inf
        mask[0, 1, 3, :] = -np.inf
    scale = 1.0 / np.sqrt(D)
    got = run(q, k, v, mask, scale, layout, **PATHS[path])
    want = reference(q, k, v, mask, scale)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if kind == "full":
        assert np.isnan(got[0, 1, 3]).all() and not np.isnan(np.delete(got[0, 1], 3, 0)).any()


@pytest.mark.parametrize("path", PATHS)
def test_large_scores_are_stable(path, rng):  # noqa: ANN001
    """Scores near 1000: exp would overflow without the row's max subtracted; online, later
    key blocks with a larger max rescale what earlier ones added (three key blocks of 16)."""
    q = rng.standard_normal((1, 1, 5, 16)).astype(np.float32) * 8
    k = rng.standard_normal((1, 1, 37, 16)).astype(np.float32) * 8
    k[0, 0, 30:] *= 2  # the largest scores come last
    v = rng.standard_normal((1, 1, 37, 16)).astype(np.float32)
    got = run(q, k, v, None, 1.0, AttentionLayout(), block_q=4, block_k=16, **PATHS[path])
    np.testing.assert_allclose(got, reference(q, k, v, None, 1.0), rtol=1e-4, atol=1e-5)


def test_generic_compute_matches_numpy_in_float64(rng):  # noqa: ANN001
    """The op's generic compute (scores stored; what float64 and other targets run), on the
    BERT layout with its reshapes folded in (a plain schedule: building it is what costs)."""
    B, H, Sq, Sk, D = 2, 3, 5, 9, 4
    layout = AttentionLayout(BHSD, BHSD, BHSD, BHSD, D, D, D, D)
    q, k, v = (rng.standard_normal((B, H, n, D)) for n in (Sq, Sk, Sk))
    mask = np.where(rng.random((B, 1, 1, Sk)) < 0.3, -1e4, 0.0)
    arrays = [
        np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(B, -1, H * D) for a in (q, k, v)
    ]
    ph = [te.placeholder(a.shape, name=n, dtype="float64") for a, n in zip(arrays, "qkv")]
    m = te.placeholder(mask.shape, name="mask", dtype="float64")
    out = attention(*ph, m, 0.5, layout)
    mod = ember.build(te.create_schedule(out.op), [*ph, m, out], target="llvm", name="attention")
    o = np.full((B, Sq, H * D), np.nan)
    mod(*arrays, mask, o)
    want = reference(q, k, v, mask, 0.5).transpose(0, 2, 1, 3).reshape(B, Sq, H * D)
    np.testing.assert_allclose(o, want, rtol=1e-10, atol=1e-12)


def test_blocks_pad_the_least():
    """Query blocks evened out and key blocks chosen to pad the least: ViT's 197 positions
    ran 256 x 256 scores a head in blocks of 64 and 64; one query (a decode step) keeps its
    64-key blocks."""
    from ember.codegen_llvm.schedules.attention import _blocks

    rows, bq, bk = _blocks(12, 197, 197, 128, 64, 4)
    assert (rows, bk) == (4, 32) and -(-197 // bq) * bq == 208  # 4 blocks of 52
    rows, bq, bk = _blocks(12, 197, 197, 128, 64, 6)
    assert (bq, bk) == (66, 32)  # 3 blocks of 66: 198 rows
    assert _blocks(12, 128, 128, 128, 64, 4) == (4, 32, 64)
    assert _blocks(12, 1, 129, 128, 64, 6) == (1, 1, 64)  # 1 row: 64 keys, 4 accumulators
    assert _blocks(1, 1, 1, 128, 16, 4)[2] == 16


@pytest.mark.parametrize("rows", [4, 6])
@pytest.mark.parametrize("path", PATHS)
def test_row_tiles_at_uneven_sizes(rows, path, rng):  # noqa: ANN001
    """4- and 6-row tiles over 197 positions (ViT's: blocks evened out, keys in blocks of
    32, the last query block's rows past the end computed and not stored) and 50 queries
    over 77 keys, with BERT's padding mask, against numpy."""
    for sq, sk in [(197, 197), (50, 77)]:
        q, k = rng.standard_normal((1, 2, sq, 64)), rng.standard_normal((1, 2, sk, 64))
        v = rng.standard_normal((1, 2, sk, 64))
        q, k, v = (a.astype(np.float32) for a in (q, k, v))
        mask = np.zeros((1, 1, 1, sk), np.float32)
        mask[..., sk - 9 :] = -np.inf
        got = run(q, k, v, mask, 0.125, AttentionLayout(), rows=rows, **PATHS[path])
        np.testing.assert_allclose(got, reference(q, k, v, mask, 0.125), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "d, sk, layout",
    [
        (64, 1025, AttentionLayout()),  # GPT-2's decode step at a past of 1,024
        (24, 37, AttentionLayout(BHSD, BHSD, BHSD, BHSD, 24, 24, 24, 24)),  # 8 lanes, split
        (20, 9, AttentionLayout()),  # 4 lanes, one key block mostly past the keys
        (6, 17, AttentionLayout()),  # too narrow: the transposed key blocks
        (64, 33, AttentionLayout(k=(0, 1, 3, 2))),  # K's features strided: transposed too
    ],
)
def test_one_query_row(d, sk, layout, path, rng):  # noqa: ANN001
    """A decode step (one query row) with the scores as dot products along K's rows
    (``dot_lanes``) where K's features are contiguous and split evenly into lanes, with a
    causal mask, against numpy."""
    from ember.codegen_llvm.schedules.attention import dot_lanes

    assert (dot_lanes(1, d, layout) > 0) == (d % 4 == 0 and layout.k[3] == 3)
    q = rng.standard_normal((1, 3, 1, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, 3, sk, d)).astype(np.float32) for _ in "kv")
    mask = rng.choice([0.0, -10000.0], (1, 1, 1, sk)).astype(np.float32)
    got = run(q, k, v, mask, 1 / np.sqrt(d), layout, **PATHS[path])
    np.testing.assert_allclose(got, reference(q, k, v, mask, 1 / np.sqrt(d)), rtol=1e-4, atol=1e-5)


def test_dot_lanes():
    """Dot-product scores only for one query row over contiguous features, in the widest
    power-of-two lanes (up to the target's register) that divide them."""
    from ember.codegen_llvm.cpu_features import vector_unit
    from ember.codegen_llvm.schedules.attention import dot_lanes

    lanes = vector_unit().lanes("float32")
    assert dot_lanes(1, 64, AttentionLayout()) == lanes
    assert dot_lanes(1, 24, AttentionLayout()) == 8
    assert dot_lanes(1, 12, AttentionLayout()) == 4
    assert dot_lanes(1, 6, AttentionLayout()) == 0
    assert dot_lanes(4, 64, AttentionLayout()) == 0  # a tile of rows shares transposed keys
    assert dot_lanes(1, 64, AttentionLayout(k=(0, 2, 3, 1))) == 0


def run_cached(q, past, new, mask, scale, layout, **blocks):  # noqa: ANN001, ANN003, ANN201
    """``cached_flash_attention`` on logical operands (``past``/``new``: the K and V pairs)
    stored in ``layout``: the attention and the present K and V, in logical order."""
    from ember.codegen_llvm.schedules.attention import cached_flash_attention

    def stored(a, which):  # noqa: ANN001, ANN202
        return np.ascontiguousarray(np.transpose(a, np.argsort(getattr(layout, which))))

    arrays = [stored(q, "q")]
    for (p, n), which in zip(zip(past, new), "kv"):
        arrays += [stored(p, which), stored(n, which)]
    ph = [te.placeholder(a.shape, name=f"in{i}") for i, a in enumerate(arrays)]
    m = None if mask is None else te.placeholder(mask.shape, name="mask")
    outs = cached_flash_attention(*ph, m, scale, layout, **blocks)
    s = te.create_schedule([o.op for o in outs])
    extra = [m] if m is not None else []
    mod = ember.build(s, [*ph, *extra, *outs], target="llvm", name="cached_attention")
    got = [np.full(tuple(int(d) for d in o.shape), np.nan, np.float32) for o in outs]
    mod(*arrays, *([mask] if mask is not None else []), *got)
    return [np.transpose(g, w) for g, w in zip(got, (layout.out, layout.k, layout.v))]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "sq, past, new, d, layout",
    [
        (1, 1024, 1, 64, AttentionLayout()),  # GPT-2's decode step: dot scores
        (1, 37, 2, 6, AttentionLayout()),  # two new positions; transposed key blocks
        (1, 20, 1, 16, AttentionLayout(BHSD, BHSD, BHSD, BHSD)),  # [B, S, H, D] caches
        (5, 33, 5, 16, AttentionLayout()),  # several query rows: the caches copied first
        (1, 30, 1, 16, AttentionLayout(k=(0, 1, 3, 2))),  # keys cached transposed [B, H, D, S]
    ],
)
def test_cached_attention(sq, past, new, d, layout, path, rng):  # noqa: ANN001
    """Attention over a cache with new entries appended, and the appended caches written
    out (bit for bit the concatenation), against numpy, with a causal mask."""
    sk = past + new
    q = rng.standard_normal((2, 3, sq, d)).astype(np.float32)
    caches = [rng.standard_normal((2, 3, past, d)).astype(np.float32) for _ in "kv"]
    news = [rng.standard_normal((2, 3, new, d)).astype(np.float32) for _ in "kv"]
    mask = np.triu(np.full((sq, sk), -10000.0, np.float32), 1 + sk - sq)
    out, pk, pv = run_cached(q, caches, news, mask, 0.25, layout, **PATHS[path])
    k, v = (np.concatenate([c, n], axis=2) for c, n in zip(caches, news))
    np.testing.assert_array_equal(pk, k)
    np.testing.assert_array_equal(pv, v)
    np.testing.assert_allclose(out, reference(q, k, v, mask, 0.25), rtol=1e-4, atol=1e-5)


def test_cached_attention_writes_present_without_caching_it():
    """The decode step's kernel writes the present caches with non-temporal stores (its
    only ones), and a NaN in a new key reaches that head's output and no other."""
    from ember.codegen_llvm.schedules.attention import cached_flash_attention

    ph = [
        te.placeholder(s, name=n)
        for s, n in [((1, 2, 1, 16), "q"), ((1, 2, 40, 16), "pk"), ((1, 2, 1, 16), "nk")]
        + [((1, 2, 40, 16), "pv"), ((1, 2, 1, 16), "nv")]
    ]
    outs = cached_flash_attention(*ph, None, 0.25, AttentionLayout())
    mod = ember.build(
        te.create_schedule([o.op for o in outs]), [*ph, *outs], target="llvm", name="decode"
    )
    ir = mod.get_source()
    stores = [line for line in ir.splitlines() if "!nontemporal" in line]
    assert stores and all(line.lstrip().startswith("store <") for line in stores)
    gen = np.random.default_rng(3)
    arrays = [gen.standard_normal(tuple(int(d) for d in p.shape)).astype(np.float32) for p in ph]
    arrays[2][0, 1, 0, 5] = np.nan
    got = [np.zeros(tuple(int(d) for d in o.shape), np.float32) for o in outs]
    mod(*arrays, *got)
    assert np.isnan(got[0][0, 1]).all() and not np.isnan(got[0][0, 0]).any()
    assert np.isnan(got[1][0, 1, 40, 5]) and np.isnan(got[1]).sum() == 1


@settings(max_examples=examples(8), deadline=None)
@given(
    sq=st.integers(1, 3),
    past=st.integers(1, 40),
    new=st.integers(1, 3),
    d=st.sampled_from([4, 6, 8, 16, 20]),
    seed=st.integers(0, 2**16),
)
def test_cached_attention_at_random_sizes(sq, past, new, d, seed):  # noqa: ANN001
    """Any cache length, number of new positions, head size and query count, with a mask
    of random -inf entries (none masks a whole row), against numpy."""
    gen = np.random.default_rng(seed)
    sk = past + new
    q = gen.standard_normal((1, 2, sq, d)).astype(np.float32)
    caches = [gen.standard_normal((1, 2, past, d)).astype(np.float32) for _ in "kv"]
    news = [gen.standard_normal((1, 2, new, d)).astype(np.float32) for _ in "kv"]
    mask = np.where(gen.random((1, 1, sq, sk)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[..., -1] = 0.0
    out, pk, pv = run_cached(q, caches, news, mask, 0.5, AttentionLayout())
    k, v = (np.concatenate([c, n], axis=2) for c, n in zip(caches, news))
    np.testing.assert_array_equal(pk, k)
    np.testing.assert_array_equal(pv, v)
    np.testing.assert_allclose(out, reference(q, k, v, mask, 0.5), rtol=1e-4, atol=1e-5)
