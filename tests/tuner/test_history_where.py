"""``apply_history_best`` answering with ``where``: the fastest record among those measured
with given knob values, for a caller that can run only such configs (the graph's blocked
convolutions, ``codegen_llvm/conv_layout.py``)."""

from __future__ import annotations

from ember.tuner import FallbackConfig, Record, RecordWriter, apply_history_best, create_task
from ember.tuner.active_records import (
    answers_unchanged,
    best_config_for_call,
    measured_for_call,
    tracking_consults,
)
from ember.tuner.records import host_device_name
from ember.tuner.template import config_for_direct_call
from tests.tuner import templates  # noqa: F401  (registers tiny_add.llvm)

NAME, ARGS = "tiny_add.llvm", (64,)


def _write(path, rows) -> dict:  # noqa: ANN001
    """Records of ``tiny_add.llvm`` for ``(vec, unroll, ms, error)`` rows; configs by row."""
    task = create_task(NAME, ARGS, "llvm")
    knobs = task.config_space.knobs
    out = {}
    with RecordWriter(path) as wr:
        for vec, unroll, ms, error in rows:
            choices = {n: k.default_index for n, k in knobs.items()}
            choices["vec"] = [1, 2, 4, 8].index(vec)
            choices["unroll"] = [True, False].index(unroll)
            cfg = out[vec, unroll] = task.config_space.from_choices(choices)
            costs = (ms * 1e-3,) * 3 if error == "ok" else ()
            wr.write(
                Record(task.key, NAME, task.workload_key, task.template.version, "llvm",
                       cfg.to_json(), costs, error, host_device_name(), "0")
            )  # fmt: skip
    return out


def test_where_picks_the_fastest_record_with_those_knob_values(tmp_path):
    log = tmp_path / "r.jsonl"
    rows = [(8, True, 1.0, "ok"), (2, False, 3.0, "ok"), (2, True, 2.0, "ok")]
    rows += [(4, False, 0.1, "runtime")]  # failed: never an answer
    cfg = {k: c.to_json() for k, c in _write(log, rows).items()}
    with apply_history_best(log):
        assert config_for_direct_call(NAME, ARGS).to_json() == cfg[8, True]
        assert config_for_direct_call(NAME, ARGS, (("vec", 2),)).to_json() == cfg[2, True]
        got = best_config_for_call(NAME, ARGS, (("vec", 2), ("unroll", False)))
        assert got is not None and got.to_json() == cfg[2, False]
        found = measured_for_call(NAME, ARGS, (("vec", 2),))
        assert found is not None and (found[0].to_json(), found[1]) == (cfg[2, True], 2e-3)
        assert measured_for_call(NAME, ARGS, (("vec", 4),)) is None
        assert isinstance(config_for_direct_call(NAME, ARGS, (("vec", 4),)), FallbackConfig)
        assert isinstance(config_for_direct_call(NAME, (32,), (("vec", 2),)), FallbackConfig)
    assert isinstance(config_for_direct_call(NAME, ARGS, (("vec", 2),)), FallbackConfig)


def test_a_where_answer_is_tracked_and_fingerprinted(tmp_path):
    """A kernel built from a non-best record is rebuilt when that record changes: the
    consult notes the where question, and the fingerprint (the disk cache's key) covers
    every valid record, not only each task's best."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(a, [(8, True, 1.0, "ok"), (2, True, 2.0, "ok")])
    _write(b, [(8, True, 1.0, "ok"), (2, True, 2.0, "ok"), (2, False, 1.5, "ok")])
    with apply_history_best(a) as ha, tracking_consults() as asked:
        best_config_for_call(NAME, ARGS, (("vec", 2),))
        assert answers_unchanged(asked)
    assert asked[0][0] == ("call", NAME, ARGS, (("vec", 2),))
    with apply_history_best(b) as hb:
        assert not answers_unchanged(asked)  # another record answers
    same_best = [(r.task_key, r.config) for r in ha.best.values()]
    assert same_best == [(r.task_key, r.config) for r in hb.best.values()]
    assert ha.fingerprint != hb.fingerprint
