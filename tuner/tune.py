"""``tune(task, ...)``: search a task's config space, measure candidates, write records.

The top of the tuner: makes the Optuna study (in memory, in a journal file beside the
records, or at a storage URL such as ``postgresql://...``), seeds it with the
template's fallback config and any transferred configs, runs the search
(:mod:`ember.tuner.search`) with a measurer (:mod:`ember.tuner.measure`, or any object
with ``measure(task, configs)``), and appends one record per measured candidate
(:mod:`ember.tuner.records`). ``resume=True`` continues a study: its measured trials
count towards ``n_trials`` and a trial left running by a killed run is failed, so a
SIGKILLed run loses at most the candidates in flight.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, EmberError
from ember.tuner.auto.cost_model import CostModel, warm_start
from ember.tuner.auto.guided import ModelGuidedSearch
from ember.tuner.encode import SpaceEncoding
from ember.tuner.measure import LocalMeasurer, MeasureOption
from ember.tuner.records import Record, RecordWriter, config_cost, task_record
from ember.tuner.result import Measurer
from ember.tuner.retime import Retimed, by_turns
from ember.tuner.search import (
    SAMPLERS,
    Search,
    SearchOptions,
    SearchState,
    TrialRecord,
    make_sampler,
)
from ember.tuner.space import ConfigEntity
from ember.tuner.transfer import transfer_configs

_log = logging.getLogger("ember.tuner")


@dataclass
class TuneResult:
    """What a tuning run found. ``trials``: every measured candidate, in order, each with
    the best cost so far (the convergence curve)."""

    task: Any
    best_config: ConfigEntity | None
    best_cost: float
    trials: list[TrialRecord]
    rejected: int
    duplicates: int
    stopped: str
    study: Any
    retimed: Retimed | None = None
    """The fallback's cost and the returned config's, each counted as the records count
    it (:func:`config_cost`) once the search's picks were timed again beside the
    fallback by turns; None: not re-timed."""

    @property
    def kept_fallback(self) -> bool:
        """Timed again, no pick beat the fallback: the fallback stands."""
        return self.retimed is not None and self.best_config == fallback_entity(self.task)

    @property
    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.trials:
            if not t.result.ok:
                counts[t.result.error.value] = counts.get(t.result.error.value, 0) + 1
        return counts


def fallback_entity(task: Any) -> ConfigEntity | None:
    """The template's defaults as a config of its space, fixed knobs at their values: the
    kernel the task's place in a model runs untuned (None where a default lies outside the
    knob's candidates, or breaks a constraint)."""
    return task.config_space.default_entity()  # type: ignore[no-any-return]


def open_storage(storage: Any, records: str | Path | None) -> Any:
    """An Optuna storage: None -> a journal file beside ``records`` (in memory without
    records); a URL (``postgresql://``, ``sqlite://``) opens a database storage; a path that is
    not a URL names a journal file; a storage object is used as is."""
    if storage is None:
        if records is None:
            return None
        storage = str(records) + ".journal"
    if not isinstance(storage, (str, Path)):
        return storage
    text = str(storage)
    try:
        if "://" in text:
            return _database_storage(text)
        return _journal(text)
    except Exception as e:  # a missing driver, a refused connection, an unwritable file
        raise ArgumentError(f"cannot open the Optuna storage '{text}': {e}") from e


# One storage per journal file and process: a JournalStorage replays the whole file when
# it opens and only the new lines afterwards, and ``tune_tasks`` opens its task's study
# once a round. A model-guided search tells Optuna every unmeasured candidate (pruned),
# so the journal grows by about a hundred lines a measurement: reopened each round, the
# BERT encoder's tuning spent most of its budget replaying it (428 candidates measured
# in 35 minutes, the main process busy in ``_sync_with_backend``).
_JOURNALS: dict[str, tuple[tuple[int, int], Any]] = {}
_JOURNALS_LOCK = threading.Lock()


def _journal(path: str) -> Any:
    """The storage of journal ``path`` this process already opened, else a new one; a
    file deleted or replaced since (another inode) is opened afresh."""
    # optional dependency: optuna (the lock subclasses one of its classes)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from ember.tuner.journal_lock import OwnedJournalLock

    key = os.path.realpath(path)
    with _JOURNALS_LOCK:
        known = _JOURNALS.get(key)
        if known is not None and _file_id(key) == known[0]:
            return known[1]
        # Optuna's default lock makes a resumed run wait 30 s for a SIGKILLed one's
        storage = JournalStorage(JournalFileBackend(path, lock_obj=OwnedJournalLock(path)))
        file_id = _file_id(key)
        if file_id is not None:
            _JOURNALS[key] = (file_id, storage)
        return storage


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


HEARTBEAT_INTERVAL = 10  # seconds between a running trial's heartbeats
GRACE_PERIOD = 60  # a trial silent this long belongs to a dead worker: failed, retried


def _database_storage(url: str) -> Any:
    """A database storage for many runners tuning one study: heartbeats mark the trials a
    live worker is measuring; one silent past the grace period (its worker was killed) is
    failed and asked again once by the next worker that looks."""
    # optional dependency: optuna
    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                return RDBStorage(
                    url,
                    heartbeat_interval=HEARTBEAT_INTERVAL,
                    grace_period=GRACE_PERIOD,
                    heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
                )
        except Exception:
            # Runners started together race to create the schema of an empty database;
            # the loser finds it made on the next try.
            if attempt == 2:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def create_study(
    task: Any, storage: Any, sampler: Any, study_name: str | None, resume: bool
) -> tuple[Any, bool]:
    """The study, and whether it is fresh. Without ``resume`` a study of the same name in a
    journal file is replaced (the records file keeps its lines); a study in a database is
    always joined, since other runners may be tuning it now."""
    # optional dependency: optuna
    import optuna
    from optuna.storages import RDBStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = study_name or f"ember-{task.key}"
    exists = storage is not None and name in optuna.get_all_study_names(storage)
    resume = resume or isinstance(storage, RDBStorage)
    if exists and not resume:
        _log.info("replacing the existing study '%s' (pass resume=True to continue it)", name)
        optuna.delete_study(study_name=name, storage=storage)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=sampler,
        direction="minimize",
        load_if_exists=resume,
    )
    study.set_user_attr("task_key", task.key)
    return study, not (exists and resume)


def _check(n_trials: int, sampler: str, early_stopping: int | None) -> None:
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ArgumentError(f"tune: n_trials must be a positive int, got {n_trials!r}")
    if sampler not in SAMPLERS:
        raise ArgumentError(f"tune: unknown sampler {sampler!r}; expected one of {SAMPLERS}")
    if early_stopping is not None and (
        isinstance(early_stopping, bool)
        or not isinstance(early_stopping, int)
        or early_stopping < 1
    ):
        raise ArgumentError(f"tune: early_stopping must be a positive int, got {early_stopping!r}")


def tune(
    task: Any,
    n_trials: int = 200,
    records: str | Path | None = None,
    sampler: str = "tpe",
    seed: int | None = 0,
    timeout: float | None = None,
    storage: Any = None,
    measure: Any = None,
    early_stopping: int | None = None,
    resume: bool = False,
    study_name: str | None = None,
    transfer: Sequence[str | Path] | Iterable[Record] | None = None,
    on_trial: Callable[[SearchState, TrialRecord | None], None] | None = None,
    cost_model: CostModel | str | Path | bool | None = None,
    retime_rounds: int = 3,
) -> TuneResult:
    """Tune ``task``; ``n_trials`` counts measured candidates (configs turned down before
    a build, and repeats of a config already measured, do not count).

    ``measure``: a :class:`~ember.tuner.measure.MeasureOption` (default ``MeasureOption()``:
    isolated worker processes) or any measurer object. ``transfer``: records (paths) of
    the same template at other shapes whose best configs are tried first.
    ``cost_model``: rank candidates with the learned cost model and measure only its top
    ones and a few explorers (:mod:`ember.tuner.auto.guided`): a
    :class:`~ember.tuner.auto.cost_model.CostModel`, a records path to warm-start one
    from, or True (warm-started from ``records`` and the ``transfer`` files that exist).
    ``retime_rounds``: after the search, the pick and the fallback are timed again by
    turns this many rounds (:mod:`ember.tuner.retime`; 0: not), and each timing is
    recorded. A search keeps its luckiest timing, so a pick no faster than the fallback
    can win it. Counted by their middle timings (:func:`config_cost`), the cheapest
    config is returned (up to :data:`MAX_RETIMED_PICKS` picks are timed again in turn),
    and ``apply_history_best`` picks the same from the records. TVM's tuners return the
    search's best as measured.
    """
    _check(n_trials, sampler, early_stopping)
    if isinstance(retime_rounds, bool) or not isinstance(retime_rounds, int) or retime_rounds < 0:
        raise ArgumentError(f"tune: retime_rounds must be an int >= 0, got {retime_rounds!r}")
    if cost_model not in (None, False) and sampler == "grid":
        raise ArgumentError("tune: cost_model ranks a sampler's proposals; a grid measures all")
    measurer, owned = _measurer(measure)
    writer = RecordWriter(records) if records is not None else None
    try:
        search = _make_search(
            task,
            n_trials,
            sampler,
            seed,
            timeout,
            storage,
            records,
            measurer,
            early_stopping,
            resume,
            study_name,
            transfer,
            cost_model,
        )
        write = _record_writer(task, measurer, writer)
        search.on_trial = _recorder(write, on_trial)
        state = search.run()
        best_config, best_cost, retimed = _settle(measurer, task, state, retime_rounds, write)
    finally:
        if writer is not None:
            writer.close()
        if owned:
            measurer.close()
    return TuneResult(
        task,
        best_config,
        best_cost,
        state.trials,
        state.rejected,
        state.duplicates,
        state.stopped,
        search.study,
        retimed,
    )


MAX_RETIMED_PICKS = 3
"""How many picks in turn ``tune`` times again beside the fallback before it settles."""


def _settle(
    measurer: Measurer,
    task: Any,
    state: SearchState,
    rounds: int,
    record: Callable[[TrialRecord], None],
) -> tuple[ConfigEntity | None, float, Retimed | None]:
    """The config to return, its cost and the re-timing behind it. Each config costs what
    the records make of its timings (:func:`config_cost`); while the cheapest is one not
    yet timed again, it and the fallback are timed by turns ``rounds`` times, and every
    timing is recorded, so that ``apply_history_best`` picks what this returns. A config
    that fails when timed again is out. Without rounds, without a measured fallback, or
    where the measurer itself fails (an RPC server gone), the search's best stands."""
    fallback = fallback_entity(task)
    timings: dict[ConfigEntity, list[float]] = {}  # first seen first: ties go to the fallback
    for t in state.trials:
        if t.result.ok:
            timings.setdefault(t.config, []).append(t.result.cost)
    if rounds == 0 or fallback is None or fallback not in timings:
        return state.best_config, state.best_cost, None

    def cost(cfg: ConfigEntity) -> float:
        return config_cost(timings[cfg])

    timed_again = {fallback}
    for _ in range(MAX_RETIMED_PICKS):
        pick = min(timings, key=cost)
        if pick in timed_again:
            break
        timed_again.add(pick)
        try:
            per_round = by_turns(measurer, task, [fallback, pick], rounds)
        except EmberError as e:  # a server gone: the search's result still stands
            _log.warning(
                "%s: re-timing the pick failed (%s); keeping the search's best", task.key, e
            )
            return state.best_config, state.best_cost, None
        for results in per_round:
            for cfg, res in zip((fallback, pick), results):
                record(TrialRecord(-1, cfg, res, state.best_cost))
                if not res.ok:
                    timings.pop(cfg, None)
                elif cfg in timings:
                    timings[cfg].append(res.cost)
        if fallback not in timings:  # the fallback itself failed: nothing to stand on
            return state.best_config, state.best_cost, None
    if timed_again == {fallback}:  # the search's best is the fallback: nothing re-timed
        return state.best_config, state.best_cost, None
    best = min(timings, key=cost)
    if best not in timed_again:
        _log.info("%s: %s still untimed after %d picks", task.key, best, MAX_RETIMED_PICKS)
    return best, cost(best), Retimed(cost(fallback), cost(best), rounds)


def _measurer(measure: Any) -> tuple[Measurer, bool]:
    if measure is None or isinstance(measure, MeasureOption):
        return LocalMeasurer(measure or MeasureOption()), True
    if not callable(getattr(measure, "measure", None)):
        raise ArgumentError(
            f"tune: measure must be a MeasureOption or a measurer, got {type(measure).__name__}"
        )
    return measure, False


def _make_search(
    task: Any,
    n_trials: int,
    sampler: str,
    seed: int | None,
    timeout: float | None,
    storage: Any,
    records: Any,
    measurer: Measurer,
    early_stopping: int | None,
    resume: bool,
    study_name: str | None,
    transfer: Any,
    cost_model: Any = None,
) -> Search:
    sampler_obj = make_sampler(sampler, seed, SpaceEncoding(task.config_space))
    study, fresh = create_study(
        task, open_storage(storage, records), sampler_obj, study_name, resume
    )
    jobs = int(getattr(measurer, "jobs", 1) or 1)
    options = SearchOptions(n_trials, jobs, early_stopping, timeout)
    if cost_model is None or cost_model is False:
        search = Search(task, study, measurer, options)
    else:
        model = make_cost_model(cost_model, records, seed, transfer)
        search = ModelGuidedSearch(task, study, measurer, options, model=model, seed=seed)
    if fresh:
        seeds = [c for c in [fallback_entity(task)] if c is not None]
        if transfer is not None:
            seeds += [c for c in transfer_configs(task, transfer) if c not in seeds]
        search.enqueue(seeds)
    else:
        search.restore()
    return search


def make_cost_model(value: Any, records: Any, seed: int | None, transfer: Any) -> CostModel:
    """The model ``tune(cost_model=value)`` asks for (see :func:`tune`); a model shared by
    several tasks (``tune_tasks``) is made once with it and passed to each."""
    if isinstance(value, CostModel):
        return value
    if isinstance(value, (str, Path)):
        return warm_start(value, seed=seed or 0)
    if value is not True:
        raise ArgumentError(
            f"tune: cost_model must be a CostModel, a records path or a bool, got {value!r}"
        )
    paths = [] if transfer is None else [t for t in transfer if isinstance(t, (str, Path))]
    sources = [p for p in [records, *paths] if p is not None and Path(p).exists()]
    if not sources:
        return CostModel(seed=seed or 0)
    save = sources[0] == records  # a model is kept beside the records it tunes into
    return warm_start(sources[0], seed=seed or 0, save=save, others=sources[1:])


def _record_writer(
    task: Any, measurer: Measurer, writer: RecordWriter | None
) -> Callable[[TrialRecord], None]:
    """Writes one record per measured trial (nothing without a writer)."""
    device = str(getattr(measurer, "device_name", "unknown"))

    def write(trial: TrialRecord) -> None:
        if writer is not None:
            r = trial.result
            writer.write(task_record(task, trial.config, r.costs, r.error.value, device, r.message))

    return write


def _recorder(
    write: Callable[[TrialRecord], None],
    user: Callable[[SearchState, TrialRecord | None], None] | None,
) -> Callable[[SearchState, TrialRecord | None], None]:
    def on_trial(state: SearchState, trial: TrialRecord | None) -> None:
        if trial is not None:
            write(trial)
        if user is not None:
            user(state, trial)

    return on_trial


def best_cost_text(cost: float) -> str:
    """A cost in seconds as the tuner's progress output shows it (milliseconds, or ``-``)."""
    return "-" if math.isinf(cost) else f"{cost * 1e3:.4f} ms"


__all__ = ["TuneResult", "fallback_entity", "tune"]
