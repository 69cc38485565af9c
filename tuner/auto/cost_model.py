"""The learned cost model: a gradient-boosted ranking of candidates before any is measured.

Sits above the features (:mod:`ember.tuner.auto.features`) and below the model-guided
search (:mod:`ember.tuner.auto.guided`). It takes measured candidates as
:class:`Sample` rows (a group — the task key —, a feature vector and a cost in seconds)
and gives scores, higher for faster candidates. As Ansor's XGBoost model does, targets
are normalised per task: a candidate's score to learn is its throughput relative to the
best of its task (``best_cost / cost``, in (0, 1]), so tasks of every size train one
model; it is learned by regression weighted towards the fast candidates (LightGBM's
``lambdarank`` on the same targets ranked held-out matmul configs worse: 0.59-0.67
against 0.79-0.82 pairwise on ``benchmarks/bench_costmodel.py``'s timings). The booster
is LightGBM (``lightgbm>=4``, the ``tune`` extra), trained with one thread and
``deterministic=True``, so the same samples give the same model text.

``fit`` trains on samples, ``update`` adds measurements and retrains on all of them
(Ansor's online update: the data are small, and a full retrain keeps the model a
function of its samples alone), ``predict`` scores feature rows, ``rank`` orders them.
``samples_from_records`` rebuilds each record's TIR from the record alone
(``create_task``, ``instantiate``, ``schedule_to_primfunc``); ``warm_start(records)``
loads ``<records>.model`` when it was trained on exactly these records (their SHA-256 is
in its header) and otherwise trains a new one from them and saves it there.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import EmberError, UserError
from ember.tuner.auto.features import FEATURE_NAMES, N_FEATURES, features_of_config
from ember.tuner.records import Record, read_records
from ember.tuner.space import ConfigEntity
from ember.tuner.task import create_task

MODEL_FORMAT = 1
_MAGIC = "ember-costmodel"
FEATURES_SHA = hashlib.sha256("\n".join(FEATURE_NAMES).encode()).hexdigest()[:16]


class CostModelError(UserError):
    """A cost model that cannot be used: no lightgbm, a stale or foreign model file."""


class MissingLightGBMError(CostModelError):
    """The cost model needs LightGBM, which is not installed."""


def _lightgbm() -> Any:
    try:
        # optional dependency: lightgbm
        import lightgbm
    except ImportError as e:
        raise MissingLightGBMError(
            "the learned cost model needs the 'lightgbm' package: pip install ember[tune]"
        ) from e
    return lightgbm


@dataclass(frozen=True)
class Sample:
    """One measured candidate: its task (``group``), features and cost in seconds
    (``inf`` for a candidate that failed: it learns a score of 0)."""

    group: str
    features: np.ndarray
    cost: float


def relative_throughput(samples: Sequence[Sample]) -> np.ndarray:
    """Each sample's ``best cost of its group / its cost``: 1 for a group's best, 0 for a
    failure, so tasks of different sizes share one scale."""
    best: dict[str, float] = {}
    for s in samples:
        if math.isfinite(s.cost) and s.cost > 0:
            best[s.group] = min(best.get(s.group, math.inf), s.cost)
    out = [best[s.group] / s.cost if math.isfinite(s.cost) and s.cost > 0 else 0.0 for s in samples]
    return np.asarray(out, dtype=np.float64)


def pairwise_accuracy(
    y_true: Sequence[float], y_pred: Sequence[float], groups: Sequence[Any] | None = None
) -> float:
    """The share of pairs (within a group, when ``groups`` is given) that ``y_pred``
    orders as ``y_true`` does, over pairs whose ``y_true`` differ; a tie in ``y_pred``
    counts half. Both are scores in the same sense (e.g. throughput and model score).
    0.5 is chance; NaN when there is no pair to judge."""
    t = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    if t.shape != p.shape or t.ndim != 1:
        raise CostModelError(f"pairwise_accuracy: shapes {t.shape} and {p.shape} differ")
    g = (
        np.zeros(len(t))
        if groups is None
        else np.unique(np.asarray(groups), return_inverse=True)[1]
    )
    dt_ = np.sign(t[:, None] - t[None, :])
    dp = np.sign(p[:, None] - p[None, :])
    judged = (dt_ > 0) & (g[:, None] == g[None, :])
    total = int(judged.sum())
    if total == 0:
        return math.nan
    agree = (dp[judged] > 0).sum() + 0.5 * (dp[judged] == 0).sum()
    return float(agree / total)


class CostModel:
    """A LightGBM model of relative throughput; see the module notes."""

    def __init__(self, seed: int = 0, rounds: int = 100):
        self.seed, self.rounds = seed, rounds
        self._samples: list[Sample] = []
        self._rebuild: Callable[[], list[Sample]] | None = None  # a loaded model's samples
        self.booster: Any = None
        self.records_sha = ""

    @property
    def samples(self) -> list[Sample]:
        """What the model was trained on; a model loaded by :func:`warm_start` rebuilds its
        samples from the records on first use (an ``update`` needs them, a ranking not)."""
        if self._rebuild is not None:
            self._samples, self._rebuild = self._rebuild(), None
        return self._samples

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, samples: Iterable[Sample]) -> CostModel:
        """Train on ``samples`` alone (earlier samples are dropped)."""
        self._samples, self._rebuild = list(samples), None
        self._train()
        return self

    def update(self, samples: Iterable[Sample]) -> CostModel:
        """Add new measurements and retrain on every sample so far."""
        self.samples.extend(samples)
        self._train()
        return self

    def _params(self, n: int) -> dict[str, Any]:
        params = {
            "objective": "regression",
            "learning_rate": 0.05,
            "num_leaves": 31,
            "min_data_in_leaf": max(2, min(20, n // 20)),
            "min_sum_hessian_in_leaf": 1e-6,
            "feature_fraction": 0.8,
            "bagging_fraction": 1.0,
            "lambda_l2": 1.0,
            "num_threads": 1,
            "deterministic": True,
            "force_row_wise": True,
            "seed": self.seed,
            "verbose": -1,
        }
        return params

    def _train(self) -> None:
        lgb = _lightgbm()
        rows = [s for s in self.samples if s.features.shape == (N_FEATURES,)]
        y = relative_throughput(rows)
        if len(rows) < 4 or np.ptp(y) == 0:  # nothing to order yet
            self.booster = None
            return
        X = np.stack([s.features for s in rows])
        # weight the fast candidates: the search only cares about the top of the order
        data = lgb.Dataset(X, y, weight=0.2 + y, free_raw_data=True)
        self.booster = lgb.train(self._params(len(rows)), data, num_boost_round=self.rounds)

    def predict(self, rows: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """Scores of feature rows, higher for faster candidates (zeros while untrained)."""
        X = np.asarray(rows, dtype=np.float64).reshape(-1, N_FEATURES)
        if self.booster is None:
            return np.zeros(len(X))
        return np.asarray(self.booster.predict(X, num_threads=1), dtype=np.float64)

    def rank(self, rows: Sequence[np.ndarray] | np.ndarray) -> list[int]:
        """Indices of ``rows``, best predicted first (ties in their given order)."""
        scores = self.predict(rows)
        return sorted(range(len(scores)), key=lambda i: -scores[i])

    def to_text(self) -> str:
        """The model as text: a JSON header line, then LightGBM's own model text."""
        header = {
            "format": MODEL_FORMAT,
            "features": FEATURES_SHA,
            "n_features": N_FEATURES,
            "objective": "regression",
            "seed": self.seed,
            "rounds": self.rounds,
            "records_sha256": self.records_sha,
        }
        body = "" if self.booster is None else self.booster.model_to_string()
        return f"{_MAGIC} {json.dumps(header, sort_keys=True)}\n{body}"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_text(), encoding="utf-8")

    @staticmethod
    def load(path: str | Path) -> CostModel:
        """The model saved at ``path``; ``CostModelError`` when it is not one, or was
        written with another feature set or format."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise CostModelError(f"cannot read cost model '{path}': {e}") from e
        head, _, body = text.partition("\n")
        magic, _, meta = head.partition(" ")
        try:
            header = json.loads(meta) if magic == _MAGIC else None
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict):
            raise CostModelError(f"'{path}' is not an Ember cost model file")
        if header.get("format") != MODEL_FORMAT or header.get("features") != FEATURES_SHA:
            raise CostModelError(
                f"cost model '{path}' was written by another version of Ember (format "
                f"{header.get('format')}, features {header.get('features')}); delete it to "
                "retrain from the records"
            )
        model = CostModel(int(header["seed"]), int(header["rounds"]))
        model.records_sha = str(header.get("records_sha256", ""))
        if body.strip():
            model.booster = _lightgbm().Booster(model_str=body)
        return model


def workload_args(workload_key: str) -> tuple[Any, ...] | None:
    """A record's workload arguments, with JSON lists as tuples again (None where one was a
    tensor, which a record cannot rebuild)."""
    body = json.loads(workload_key)[1]

    def back(v: Any) -> Any:
        if isinstance(v, list):
            if v and v[0] == "TENSOR":
                raise ValueError("tensor argument")
            return tuple(back(x) for x in v)
        return v

    try:
        return tuple(back(v) for v in body)
    except ValueError:
        return None


def samples_from_records(records: Iterable[Record]) -> list[Sample]:
    """A sample for every valid record whose task and config can be rebuilt, in record
    order; the others (failed candidates, tensor arguments, unknown templates, configs
    of another space) are left out, with one warning saying how many."""
    tasks: dict[tuple[str, str, str], Any] = {}
    out: list[Sample] = []
    skipped = 0
    for rec in records:
        if not rec.ok:
            continue
        try:
            key = (rec.template, rec.workload_key, rec.target)
            if key not in tasks:
                args = workload_args(rec.workload_key)
                tasks[key] = None if args is None else create_task(rec.template, args, rec.target)
            task = tasks[key]
            if task is None or task.template.version != rec.template_version:
                skipped += 1
                continue
            cfg = ConfigEntity.from_json(rec.config, task.config_space)
            out.append(Sample(rec.task_key, features_of_config(task, cfg), rec.cost))
        except (EmberError, ValueError, KeyError, TypeError):
            skipped += 1
    if skipped:
        warnings.warn(f"cost model: {skipped} record(s) could not be rebuilt", stacklevel=2)
    return out


def records_sha256(paths: Sequence[str | Path]) -> str:
    """The SHA-256 of the records files' bytes, in order: what a saved model was fit on."""
    h = hashlib.sha256()
    for p in paths:
        try:
            h.update(Path(p).read_bytes())
        except OSError as e:
            raise CostModelError(f"cannot read records file '{p}' for the cost model: {e}") from e
    return h.hexdigest()


def model_path(records: str | Path) -> Path:
    """Where the model of a records file is kept: ``<records>.model``."""
    return Path(str(records) + ".model")


def warm_start(
    records: str | Path, seed: int = 0, save: bool = True, others: Sequence[str | Path] = ()
) -> CostModel:
    """The model of ``records`` (and of the ``others`` files: other tasks, other shapes):
    loaded from ``<records>.model`` when that was trained on these very files, else
    trained from them (and saved there when ``save``)."""
    sources = [records, *others]
    path, sha = model_path(records), records_sha256(sources)
    if path.exists():
        try:
            model = CostModel.load(path)
        except CostModelError:
            model = None
        if model is not None and model.records_sha == sha and model.seed == seed:
            model._rebuild = lambda: samples_from_records(read_records(sources))
            return model
    model = CostModel(seed=seed).fit(samples_from_records(read_records(sources)))
    model.records_sha = sha
    if save:
        model.save(path)
    return model


__all__ = [
    "CostModel",
    "CostModelError",
    "MissingLightGBMError",
    "Sample",
    "pairwise_accuracy",
    "relative_throughput",
    "samples_from_records",
    "warm_start",
]
