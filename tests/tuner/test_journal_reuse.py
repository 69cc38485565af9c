"""A journal storage is opened once per file and process (``tuner/tune.py``): reopened
every round, replaying a model-guided search's journal took most of a tuning budget."""

from __future__ import annotations

import optuna

from ember.tuner.tune import open_storage


def test_the_same_journal_is_one_storage_and_a_new_file_is_another(tmp_path):
    records = tmp_path / "r.jsonl"
    first = open_storage(None, records)
    assert open_storage(None, records) is first
    assert open_storage(str(records) + ".journal", None) is first  # the same file named
    study = optuna.create_study(storage=first, study_name="s")
    study.tell(study.ask(), 1.0)

    (tmp_path / "r.jsonl.journal").unlink()  # deleted: the next opening starts afresh
    again = open_storage(None, records)
    assert again is not first
    assert optuna.get_all_study_names(again) == []
    assert open_storage(None, tmp_path / "other.jsonl") is not again


def test_a_reused_storage_sees_what_another_writer_appended(tmp_path):
    """Another runner (an RPC worker, a second process) appends to the file: the storage
    this process keeps reads the new lines when it is next asked."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = str(tmp_path / "r.jsonl.journal")
    mine = open_storage(path, None)
    study = optuna.create_study(storage=mine, study_name="s")
    study.tell(study.ask(), 2.0)
    other = JournalStorage(JournalFileBackend(path))  # as a separate process opens it
    theirs = optuna.load_study(study_name="s", storage=other)
    theirs.tell(theirs.ask(), 1.0)
    seen = optuna.load_study(study_name="s", storage=open_storage(path, None))
    assert [t.value for t in seen.trials] == [2.0, 1.0]
