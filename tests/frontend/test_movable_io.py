"""Large inputs and outputs read and written where the caller has them (no copies in or out).

A decode step with a KV cache takes and returns tens of megabytes; the executor points its
kernels at the caller's input arrays and at new output arrays instead of copying them
through its own buffers. The reference is numpy; every check runs several times with new
data, since a kernel left pointing at the last run's arrays would still pass once.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError
from ember.graph.workspace import MOVABLE_BYTES
from tests.concurrency import in_threads
from tests.frontend.onnx_models import helper, make_model

PAST = (1, 4, 129, 64)  # 132 KB of float32: above MOVABLE_BYTES
NEW = (1, 4, 1, 64)


def _kv_model():
    """present = Concat(past, new) (an output also read by later kernels), y from it."""
    rng = np.random.default_rng(3)
    inputs = {
        "past": rng.standard_normal(PAST).astype("float32"),
        "new": rng.standard_normal(NEW).astype("float32"),
    }
    nodes = [
        helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
        helper.make_node("Mul", ["present", "present"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["y"], keepdims=0),
    ]
    return make_model(nodes, inputs, ["present", "y"])


def _reference(past: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    present = np.concatenate([past, new], axis=2)
    return present, np.sum(present.astype(np.float64) ** 2)


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "past": rng.standard_normal(PAST).astype("float32"),
        "new": rng.standard_normal(NEW).astype("float32"),
    }


def _check(got: list[np.ndarray], feed: dict[str, np.ndarray]) -> None:
    present, y = _reference(np.asarray(feed["past"]), np.asarray(feed["new"]))
    np.testing.assert_array_equal(got[0], present)
    np.testing.assert_allclose(got[1], y, rtol=1e-4)


@pytest.fixture(scope="module")
def lib():
    return ember.compile(_kv_model())


def test_large_input_and_output_move_and_results_match_numpy(lib) -> None:
    with lib._workspace() as ws:  # the path under test is the one taken
        assert set(ws._in_slots) == {"past"} and set(ws._out_slots) == {"present"}
        assert np.prod(PAST) * 4 >= MOVABLE_BYTES > np.prod(NEW) * 4
    outs = []
    for seed in range(3):
        feed = _inputs(seed)
        got = lib.run(feed)
        _check(got, feed)
        assert got[0].flags.owndata or got[0].base is not None  # an array, not a view of ours
        outs.append(([g.copy() for g in got], got))
    # each run wrote new arrays: the earlier outputs still hold their own results
    for kept, got in outs:
        np.testing.assert_array_equal(got[0], kept[0])
    assert outs[0][1][0] is not outs[1][1][0]


def test_caller_writes_to_inputs_and_outputs_do_not_reach_the_next_run(lib) -> None:
    feed = _inputs(7)
    first = lib.run(feed)
    first[0][...] = np.nan  # the caller owns its outputs
    feed["past"][...] = 1.0  # and its inputs, after the run
    second = lib.run(_inputs(8))
    _check(second, _inputs(8))
    again = lib.run(_inputs(7))
    _check(again, _inputs(7))


def _unaligned(a: np.ndarray) -> np.ndarray:
    raw = bytearray(a.nbytes + 1)
    out = np.frombuffer(raw, dtype=a.dtype, offset=1, count=a.size).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize(
    "layout",
    [np.asfortranarray, lambda a: np.repeat(a, 2, axis=3)[..., ::2], _unaligned, _read_only],
    ids=["fortran", "strided", "unaligned", "read-only"],
)
def test_inputs_of_any_layout_give_the_same_results(lib, layout) -> None:
    for seed in (11, 12):
        feed = _inputs(seed)
        odd = {"past": layout(feed["past"]), "new": feed["new"]}
        _check(lib.run(odd), feed)
        _check(lib.run(_inputs(seed + 10)), _inputs(seed + 10))  # then in place again


def test_profile_after_a_moved_run_reads_its_own_copy(lib) -> None:
    feed = _inputs(21)
    _check(lib.run(feed), feed)
    prof = lib.profile(_inputs(22), number=2)
    assert prof.total > 0
    _check(lib.run(_inputs(23)), _inputs(23))


def test_concurrent_runs_each_get_their_own_results(lib) -> None:
    def worker(seed: int) -> None:
        for k in range(4):
            feed = _inputs(100 * seed + k)
            _check(lib.run(feed), feed)

    in_threads(worker, 4)


def test_a_large_index_input_is_still_checked() -> None:
    """A gather's indices are checked from Python before its kernel: they stay copied."""
    rng = np.random.default_rng(5)
    data = rng.standard_normal((50, 8)).astype("float32")
    idx = rng.integers(0, 50, size=(MOVABLE_BYTES // 8 + 10,)).astype("int64")
    model = make_model(
        [helper.make_node("Gather", ["data", "idx"], ["out"], axis=0)],
        {"data": data, "idx": idx},
        ["out"],
    )
    lib = ember.compile(model)
    with lib._workspace() as ws:
        assert "idx" not in ws._in_slots
    np.testing.assert_array_equal(lib.run({"data": data, "idx": idx})[0], data[idx])
    bad = idx.copy()
    bad[-1] = 50
    with pytest.raises(ArgumentError, match="out of range|index"):
        lib.run({"data": data, "idx": bad})
    np.testing.assert_array_equal(lib.run({"data": data, "idx": idx})[0], data[idx])


def test_a_reshaped_index_input_is_still_checked() -> None:
    """Indices reshaped before the gather (the reshape a view of the input) are checked
    from the buffer the gather reads."""
    rng = np.random.default_rng(6)
    data = rng.standard_normal((50, 8)).astype("float32")
    idx = rng.integers(0, 50, size=(MOVABLE_BYTES // 8 + 10,)).astype("int64")
    shape = np.array([-1, 2], dtype=np.int64)
    model = make_model(
        [
            helper.make_node("Reshape", ["idx", "shape"], ["pairs"]),
            helper.make_node("Gather", ["data", "pairs"], ["out"], axis=0),
        ],
        {"data": data, "idx": idx},
        ["out"],
        {"shape": shape},
    )
    lib = ember.compile(model)
    for k in range(3):
        fresh = np.roll(idx, k)
        np.testing.assert_array_equal(
            lib.run({"data": data, "idx": fresh})[0], data[fresh.reshape(-1, 2)]
        )
    bad = idx.copy()
    bad[-1] = 50
    with pytest.raises(ArgumentError, match="out of range|index"):
        lib.run({"data": data, "idx": bad})


def test_an_output_kept_in_part_is_not_written_by_later_runs(lib) -> None:
    """A moved output's memory is reused only once nothing of the caller's reads it."""
    first = lib.run(_inputs(11))
    piece = first[0][0, 1]  # a view into the first run's present
    want = piece.copy()
    del first
    for seed in (12, 13):
        _check(lib.run(_inputs(seed)), _inputs(seed))
    np.testing.assert_array_equal(piece, want)
    with lib._workspace() as ws:
        before = ws._recycler.waiting()
    del piece
    with lib._workspace() as ws:
        assert ws._recycler.waiting() >= before


def test_an_idle_workspace_points_only_at_its_own_memory(lib) -> None:
    """After a run, the kernels' tables name the caller's input and the output handed out;
    the pool takes the workspace back pointing at its own buffers, so a program run on it
    without a load (a profile's kernels, a private caller) can never touch the caller's
    arrays or an output block freed since."""
    for seed in range(6):  # more dropped outputs than the recycler keeps
        feed = _inputs(seed)
        _check(lib.run(feed), feed)
    with lib._workspace() as ws:
        for slots in (ws._in_slots, ws._out_slots):
            for name, table in slots.items():
                own = ws.env[name].ctypes.data
                assert table and all(t[position] == own for t, position in table)
        ws.load(lib._check_inputs(_inputs(7)))  # a copy into its own input buffer
        lib._call_steps(ws)
        want, _ = _reference(_inputs(7)["past"], _inputs(7)["new"])
        np.testing.assert_array_equal(ws.env["present"], want)
