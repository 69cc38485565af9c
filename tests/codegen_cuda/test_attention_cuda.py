"""The GPU's fused attention kernel (one thread per query row, online softmax) against numpy.

Emulated (races checked) on odd sizes: query and key counts that fill no block, head
dims that are no multiple of anything, the multi-head layouts the graph pass folds in,
padding, causal and per-score masks with -inf, a fully masked row (NaN, as the unfused
softmax gives) and a decode step of one query row. NVRTC builds the BERT-sized kernel
for sm_80 and sm_90 without spills. In a graph, the CUDA target fuses the chain into one
kernel whose output matches onnxruntime's unfused graph, and whose memory plan holds no
score matrix; heads too wide for the registers take the unfused compute.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.codegen_cuda.schedules.attention import MAX_HEAD_DIM, flash_attention_cuda
from ember.tir.topi.attention import AttentionLayout
from tests.codegen_llvm.schedules.test_attention import BHSD, reference, run_stored
from tests.nightly import examples

ARCH = "cuda -arch=sm_80"


def emulate(q, k, v, mask, scale, layout, arch=ARCH):  # noqa: ANN001, ANN201
    """The kernel on logical operands stored in ``layout``, emulated; the output in logical
    order, and the module."""
    call = lambda mod, *arrays: mod.emulate(*arrays)  # noqa: E731
    return run_stored(flash_attention_cuda, arch, call, q, k, v, mask, scale, layout)


def _mask(kind, rng, B, H, Sq, Sk):  # noqa: ANN001, ANN202
    if kind == "pad":  # BERT's padding mask, [B, 1, 1, Sk]: -inf past each sequence's end
        mask = np.zeros((B, 1, 1, Sk), np.float32)
        mask[0, ..., Sk // 2 :] = -np.inf
        return mask
    if kind == "causal":  # [Sq, Sk], -10000 above the diagonal, as GPT-2's exporters add
        return np.triu(np.full((Sq, Sk), -10000.0, np.float32), 1 + Sk - Sq)
    if kind == "full":  # one value per score, some -inf, row 3 of head 0 all -inf
        mask = rng.standard_normal((B, H, Sq, Sk)).astype(np.float32)
        mask[rng.random(mask.shape) < 0.3] = -np.inf
        mask[0, 0, 3, :] = -np.inf
        return mask
    return None


def _operands(rng, B, H, Sq, Sk, D, Dv, big=False):  # noqa: ANN001, ANN202
    q, k = rng.standard_normal((B, H, Sq, D)), rng.standard_normal((B, H, Sk, D))
    if big:  # scores near 100: exp overflows float32 unless the running max is subtracted
        q = q * 10.0
    v = rng.standard_normal((B, H, Sk, Dv))
    return tuple(a.astype(np.float32) for a in (q, k, v))


CASES = [  # B, H, Sq, Sk, D, Dv, mask kind, layout
    (2, 3, 7, 33, 24, 24, "pad", AttentionLayout(BHSD, BHSD, BHSD, BHSD, 24, 24, 24, 24)),
    (1, 2, 1, 45, 16, 12, "causal", AttentionLayout(BHSD, (0, 2, 3, 1), BHSD)),
    (1, 1, 1, 1, 8, 8, None, AttentionLayout()),
    (1, 2, 37, 70, 8, 8, "full", AttentionLayout()),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])) + f"-{c[6]}")
def test_matches_numpy(case, rng):  # noqa: ANN001
    B, H, Sq, Sk, D, Dv, kind, layout = case
    q, k, v = _operands(rng, B, H, Sq, Sk, D, Dv)
    mask = _mask(kind, rng, B, H, Sq, Sk)
    scale = 1.0 / np.sqrt(D)
    got, _ = emulate(q, k, v, mask, scale, layout)
    want = reference(q, k, v, mask, scale)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # only the masked row
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_large_scores_do_not_overflow(rng):  # noqa: ANN001
    q, k, v = _operands(rng, 1, 1, 5, 40, 16, 16, big=True)
    got, _ = emulate(q, k, v, None, 1.0, AttentionLayout())
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, reference(q, k, v, None, 1.0), rtol=1e-4, atol=1e-5)


@settings(max_examples=examples(4), deadline=None)
@given(
    sq=st.integers(1, 70), sk=st.integers(1, 70), d=st.integers(1, 20), dv=st.integers(1, 20),
    masked=st.booleans(), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_random_sizes_match_numpy(sq, sk, d, dv, masked, seed):  # noqa: ANN001
    """Any query and key count and head dims: every block and chunk edge."""
    rng = np.random.default_rng(seed)
    q, k, v = _operands(rng, 1, 2, sq, sk, d, dv)
    mask = rng.standard_normal((1, 1, sq, sk)).astype(np.float32) if masked else None
    got, _ = emulate(q, k, v, mask, 0.5, AttentionLayout())
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.5), rtol=1e-4, atol=1e-5)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_bert_sized_kernel_compiles_without_spills(arch):  # noqa: ANN001
    """12 heads of 64 at sequence 128: Q and the accumulator stay in registers, and the
    key and value blocks in 32 KiB of static shared memory."""
    shape = (1, 12, 128, 64)
    q, k, v = (te.placeholder(shape, name=n) for n in "qkv")
    out = flash_attention_cuda(q, k, v, None, 0.125, AttentionLayout())
    mod = ember.build(te.create_schedule(out.op), [q, k, v, out], target=f"cuda -arch={arch}")
    (usage,) = mod.resource_usage().values()
    assert usage.spill_bytes == 0 and usage.local_bytes == 0
    assert usage.shared_bytes <= 48 * 1024 and usage.max_threads == 64


# ---- in a graph ----------------------------------------------------------------------------


def _ort_unfused(model, inputs):  # noqa: ANN001, ANN202
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


@pytest.mark.parametrize("head_dim", [8, MAX_HEAD_DIM + 8])
def test_graph_fuses_and_matches_onnxruntime(head_dim, monkeypatch):  # noqa: ANN001
    """The BERT-style block on ``cuda``: one fused attention kernel for heads the registers
    hold, the unfused stages (scores, softmax, product) for wider ones; both right."""
    from ember.frontend.testing.attention_block import attention_block

    model, inputs = attention_block(np.random.default_rng(0), 2, 19, 2, head_dim)
    lib = ember.compile(model, target=ARCH)
    ops = [n.op for n in lib.graph.nodes]
    assert ops.count("attention") == 1 and "softmax" not in ops
    (step,) = [step for step in lib.steps if step.kernel.op == "attention"]
    fused = "k_block" in step.kernel.module.get_source()  # the key block in shared memory
    assert fused == (head_dim <= MAX_HEAD_DIM)
    monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    (got,) = lib.run(inputs)
    np.testing.assert_allclose(got, _ort_unfused(model, inputs), rtol=1e-4, atol=1e-5)


def test_the_fused_plan_holds_no_score_matrix():
    """At sequence 512 the plan holds the projections' outputs, never a [B, H, S, S]
    score matrix (which alone would take 2 MiB here)."""
    from ember.frontend.testing.attention_block import attention_block

    B, S, H = 1, 512, 2
    model, _ = attention_block(np.random.default_rng(0), B, S, H, 8)
    lib = ember.compile(model, target=ARCH)
    assert 0 < lib.workspace_bytes < B * H * S * S * 4 // 2


@pytest.mark.gpu
@pytest.mark.parametrize("sq,sk", [(300, 300), (1, 1000)])
def test_on_the_device(sq, sk, rng):  # noqa: ANN001
    """12 heads of 64 on the GPU (its own architecture), a padding mask: a BERT block's
    shape with odd lengths, and a decode step's single query row."""
    B, H, D = 1, 12, 64
    q, k, v = _operands(rng, B, H, sq, sk, D, D)
    mask = np.zeros((B, 1, 1, sk), np.float32)
    mask[..., sk - sk // 10 :] = -10000.0
    ph = [te.placeholder(a.shape, name=n) for a, n in zip((q, k, v, mask), ("q", "k", "v", "m"))]
    out = flash_attention_cuda(*ph[:3], ph[3], 0.125, AttentionLayout())
    mod = ember.build(te.create_schedule(out.op), [*ph, out], target="cuda")
    got = np.full((B, H, sq, D), np.nan, np.float32)
    mod(q, k, v, mask, got)
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.125), rtol=1e-4, atol=1e-5)


def test_more_heads_than_a_grid_row_takes_the_unfused_compute():
    """Batch times heads is the grid's y (at most 65,535): beyond it the strategy leaves the
    node to the unfused compute instead of a kernel that would not lower."""
    from ember.codegen_cuda.strategy import compute_for

    attrs = {"scale": 0.5, **AttentionLayout().attrs()}
    for heads, fused in ((2, True), (70_000, False)):
        qkv = [te.placeholder((heads, 1, 3, 8), name=n) for n in "qkv"]
        got = compute_for("attention", qkv, attrs, "sm_80")
        assert (got is not None) == fused
