"""Candidates whose tensors take another layout than the fallback's (``conv2d_NCHWc.llvm``
with other channel blocks) are measured on inputs of their own layout and checked against
a numpy reference of that layout."""

from __future__ import annotations

import numpy as np
import pytest

from ember.tir.topi.conv_nchwc import pack_nchwc_weights
from ember.tuner import ErrorKind, LocalMeasurer, MeasureOption, create_task
from ember.tuner.tune import fallback_entity
from tests.tuner import templates  # noqa: F401  (registers blocked_scale.llvm)

# C = 12 and O = 20: channel blocks 4, 8, 12 in and 8, 16 out, none dividing both
ARGS = (1, 12, 7, 9, 20, 3, 3, 1, 1, 1, "float32")
PICK = {(4, 8), (8, 16)}


def _configs(task):
    base = fallback_entity(task)
    assert base is not None
    space, knobs = task.config_space, task.config_space.knobs
    out = []
    for ic in knobs["ic_bn"].candidates:
        for oc in knobs["oc_bn"].candidates:
            choice = dict(base.choices)
            choice["ic_bn"] = knobs["ic_bn"].candidates.index(ic)
            choice["oc_bn"] = knobs["oc_bn"].candidates.index(oc)
            cfg = space.from_choices(choice)
            if cfg.is_valid():
                out.append(cfg)
    return base, out


def test_every_channel_block_is_measured_and_checked():
    """Before measuring per layout, every config whose blocks differ from the fallback's
    failed with "argument 'X' expects shape ..."; now all run, and all are checked."""
    task = create_task("conv2d_NCHWc.llvm", args=ARGS)
    base, configs = _configs(task)
    blocks = {(c["ic_bn"].val, c["oc_bn"].val) for c in configs}
    # 5 on an AVX-512 host, 4 on an AVX2 one (its registers hold fewer blocks' tiles)
    assert len(blocks) >= 4 and (base["ic_bn"].val, base["oc_bn"].val) in blocks
    # the fallback's layout and others with each block changed (builds take the time)
    changed = [c for c in configs if c["ic_bn"].val != base["ic_bn"].val]
    changed = [c for c in changed if c["oc_bn"].val != base["oc_bn"].val]
    picked = [c for c in changed if (c["ic_bn"].val, c["oc_bn"].val) in PICK] or changed[:2]
    assert picked
    configs = [base, *picked]
    # flushed, as model tasks are measured: each timed call after the cache flush
    scale = create_task("blocked_scale.llvm", args=(24,))
    blocked = [scale.config_space.from_choices({"block": k}) for k in range(3)]
    with LocalMeasurer(MeasureOption(number=2, repeat=2, flush_cache=True)) as m:
        results = m.measure(task, configs)
        # a template without a numpy reference: the compute, unscheduled, in each layout
        assert all(r.ok for r in m.measure(scale, blocked)), m.measure(scale, blocked)
    bad = [
        (c["ic_bn"].val, c["oc_bn"].val, r.message) for c, r in zip(configs, results) if not r.ok
    ]
    assert not bad, bad
    assert all(r.error is ErrorKind.OK and len(r.costs) == 2 and r.cost > 0 for r in results)


@pytest.mark.parametrize("blocks", [(4, 8), (8, 16), (12, 16)])
def test_the_blocked_reference_is_a_convolution(rng, blocks):
    """The template's numpy reference, unblocked, is the NCHW convolution (an independent
    direct loop here), whatever the blocks; padded lanes stay zero."""
    from ember.codegen_llvm.schedules.conv2d_nchwc import nchwc_reference

    ic, oc = blocks
    N, C, H, W, O, K = 1, 12, 7, 9, 20, 3
    args = (N, C, H, W, O, K, K, 2, 1, 1, "float32")
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, K, K)).astype("float32")
    X = pack_nchwc(x, ic)
    got = nchwc_reference(X, pack_nchwc_weights(w, ic, oc), workload=args)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    OH, OW = (H + 2 - K) // 2 + 1, (W + 2 - K) // 2 + 1
    want = np.zeros((N, O, OH, OW))
    for y in range(OH):
        for z in range(OW):
            win = xp[:, :, 2 * y : 2 * y + K, 2 * z : 2 * z + K]
            want[:, :, y, z] = np.einsum("nchw,ochw->no", win, w)
    np.testing.assert_allclose(got, pack_nchwc(want, oc), rtol=1e-5, atol=1e-5)


def pack_nchwc(x, block):
    """NCHW as NCHW[block]c, zero past C."""
    N, C, H, W = x.shape
    cb = -(-C // block)
    padded = np.zeros((N, cb * block, H, W), x.dtype)
    padded[:, :C] = x
    return padded.reshape(N, cb, block, H, W).transpose(0, 1, 3, 4, 2)
