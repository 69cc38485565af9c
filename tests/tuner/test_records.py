"""Records: JSON lines round-trip, a truncated last line, skipped targets and template
versions, task keys, and apply_history_best for tasks and direct template calls."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ember.tuner import (
    Record,
    RecordWriter,
    apply_history_best,
    best_records,
    create_task,
    read_records,
    task_key,
)
from ember.tuner.records import RecordWarning, config_cost, config_records, host_device_name
from ember.tuner.space import FallbackConfig
from tests.tuner import templates
from tests.tuner.templates import tiny_add


def _record(task, cfg, cost, error="ok", target=None, device=None, version=None):
    return Record(
        task.key,
        task.name,
        task.workload_key,
        task.template.version if version is None else version,
        str(task.target) if target is None else target,
        cfg.to_json(),
        () if error != "ok" else (cost, cost * 1.02, cost * 0.98),
        error,
        host_device_name() if device is None else device,
        "0.1.0",
    )


def _valid(task, skip=0):
    found = [c for c in map(task.config_space.get, range(len(task.config_space))) if c.is_valid()]
    return found[skip]


def test_round_trip_and_flush_per_record(tmp_path):
    task = create_task("tiny_add.llvm", args=(48,))
    path = tmp_path / "r.jsonl"
    recs = [_record(task, _valid(task, i), 1e-3 * (i + 1)) for i in range(3)]
    writer = RecordWriter(path)
    writer.write(recs[0])
    assert len(path.read_text().splitlines()) == 1  # on disk before the writer closes
    for rec in recs[1:]:
        writer.write(rec)
    writer.close()
    assert read_records(path) == recs
    line = json.loads(path.read_text().splitlines()[0])
    for field in (
        "task_key",
        "config",
        "costs",
        "error",
        "target",
        "device",
        "ember_version",
        "format",
        "timestamp",
    ):
        assert field in line


def test_truncated_last_line_is_skipped_and_appending_starts_a_new_line(tmp_path):
    task = create_task("tiny_add.llvm", args=(48,))
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write(_record(task, _valid(task, 0), 2e-3))
        w.write(_record(task, _valid(task, 1), 1e-3))
    text = path.read_text()
    path.write_text(text[: -len(text.splitlines()[-1]) // 2 - 1])  # kill mid-line
    with pytest.warns(RecordWarning, match="skipped 1 line.*unreadable"):
        assert len(read_records(path)) == 1
    with RecordWriter(path) as w:
        w.write(_record(task, _valid(task, 2), 3e-3))
    with pytest.warns(RecordWarning, match="unreadable"):
        assert [r.cost for r in read_records(path)] == [2e-3, 3e-3]


def test_other_targets_and_older_versions_are_skipped_with_one_note(tmp_path):
    task = create_task("tiny_add.llvm", args=(48,))
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write(_record(task, _valid(task), 1e-3))
        for _ in range(3):
            w.write(_record(task, _valid(task), 1e-3, target="llvm -mcpu=skylake"))
        w.write(_record(task, _valid(task), 1e-3, version=0))
    with pytest.warns(RecordWarning) as notes:
        recs = read_records(path, target="llvm", versions={"tiny_add.llvm": 1})
    assert len(recs) == 1
    texts = sorted(str(n.message) for n in notes)
    assert texts == [
        "records: skipped 1 line(s): older template version",
        "records: skipped 3 line(s): other target",
    ]


def test_task_keys_are_stable_across_processes():
    task = create_task("tiny_add.llvm", args=(48,))
    code = "from ember.tuner import task_key; print(task_key('tiny_add.llvm', (48,), 'llvm', 1))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == task.key
    assert task_key("tiny_add.llvm", (49,), "llvm", 1) != task.key
    assert task_key("tiny_add.llvm", (48,), "llvm -mcpu=skylake", 1) != task.key
    assert task_key("tiny_add.llvm", (48,), "llvm", 2) != task.key


def test_best_records_picks_the_fastest_valid_per_task():
    a = create_task("tiny_add.llvm", args=(48,))
    b = create_task("tiny_add.llvm", args=(60,))
    recs = [
        _record(a, _valid(a, 0), 3e-3),
        _record(a, _valid(a, 1), 1e-3),
        _record(a, _valid(a, 2), 0.0, error="crash"),
        _record(b, _valid(b, 3), 5e-3),
        _record(b, _valid(b, 4), 2e-3, device="another cpu"),
    ]
    best = best_records(recs)
    assert best[a.key].config == _valid(a, 1).to_json()
    assert best[b.key].config == _valid(b, 4).to_json()
    assert best_records(recs, device=host_device_name())[b.key].config == _valid(b, 3).to_json()


def test_a_config_timed_more_than_once_counts_at_its_middle_timing():
    """Config 1 won a search on one lucky timing (0.5 ms) and took 1.5 ms each time it was
    timed again; config 0 took 1 ms throughout: config 0 is the best, and the record given
    for config 1 is one of its real ones, at its middle cost."""
    a = create_task("tiny_add.llvm", args=(48,))
    recs = [_record(a, _valid(a, 0), 1e-3), _record(a, _valid(a, 1), 0.5e-3)]
    recs += [_record(a, _valid(a, k), 1e-3 if k == 0 else 1.5e-3) for _ in range(3) for k in (0, 1)]
    recs.append(_record(a, _valid(a, 1), 0.0, error="timeout"))  # a failure is not a timing
    assert best_records(recs)[a.key].config == _valid(a, 0).to_json()
    assert [r.cost for r in config_records(recs)] == [1e-3, 1.5e-3]
    assert config_records(recs)[1] in recs
    # an even count takes the lower middle: [0.5, 0.9, 1.0, 1.1] -> 0.9
    assert config_cost([1.1e-3, 0.5e-3, 1.0e-3, 0.9e-3]) == 0.9e-3
    assert best_records(recs[:2])[a.key].config == _valid(a, 1).to_json()  # timed once each


def test_apply_history_best_for_tasks_and_direct_calls(tmp_path):
    a = create_task("tiny_add.llvm", args=(48,))
    b = create_task("tiny_add.llvm", args=(60,))
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write(_record(a, _valid(a, 5), 3e-3))
        w.write(_record(a, _valid(a, 7), 1e-3))
        w.write(_record(a, _valid(a, 9), 0.5e-3, device="another cpu"))
        w.write(_record(b, _valid(b, 2), 0.0, error="timeout"))
        w.write(_record(a, _valid(a, 11), 0.1e-3, version=0))  # fastest, but stale
    with (
        pytest.warns(RecordWarning, match="1 line.*older template version"),
        apply_history_best(path),
    ):
        a.instantiate()
        assert templates.LAST["tiny_add"] == _valid(a, 7)
        tiny_add(48)  # a config of an equal space (the task is rebuilt for the call)
        assert templates.LAST["tiny_add"].choices == _valid(a, 7).choices
        b.instantiate()  # only a failed record: the fallback
        assert isinstance(templates.LAST["tiny_add"], FallbackConfig)
        tiny_add(60)
        assert isinstance(templates.LAST["tiny_add"], FallbackConfig)
    tiny_add(48)
    assert isinstance(templates.LAST["tiny_add"], FallbackConfig)
    with pytest.warns(RecordWarning), apply_history_best(path, device=None):
        a.instantiate()
        assert templates.LAST["tiny_add"] == _valid(a, 9)
