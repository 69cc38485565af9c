"""Tuning records: one JSON line per measured candidate, appended and flushed as it lands.

Written by ``tune`` (:mod:`ember.tuner.tune`), read by ``apply_history_best``
(:mod:`ember.tuner.dispatch`), transfer seeding and ``ember records``. A line holds the
task key (:func:`ember.tuner.task.task_key`: a hash of template name, arguments,
target and template version), the template name, workload key and arguments, the
config (:meth:`ConfigEntity.to_json`), the costs in seconds (one per repeat, empty on
error), the error kind, target, device name, Ember version, format version and a
timestamp. Lines are self-contained, so files can be concatenated (``merge``), and a
line cut short by a killed run is skipped when read.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from ember.errors import ArgumentError
from ember.target import Target, host_cpu_model
from ember.tuner.result import busy
from ember.version import __version__

FORMAT_VERSION = 1


class RecordWarning(UserWarning):
    """Lines of a records file that were skipped (truncated, another target, stale)."""


@dataclass(frozen=True)
class Record:
    """One measured config as stored in a records file: enough to replay or transfer it."""

    task_key: str
    template: str
    workload_key: str
    template_version: int
    target: str
    config: dict[str, Any]
    costs: tuple[float, ...]
    error: str
    device: str
    ember_version: str
    message: str = ""
    timestamp: float = field(default_factory=time.time)
    format: int = FORMAT_VERSION

    @property
    def ok(self) -> bool:
        return self.error == "ok" and bool(self.costs)

    @property
    def cost(self) -> float:
        return statistics.median(self.costs) if self.ok else math.inf

    @property
    def busy(self) -> bool:
        """The repeats spread so wide the machine was busy (:func:`ember.tuner.result.busy`)."""
        return busy(self.costs)

    def to_line(self) -> str:
        data = asdict(self)
        data["costs"] = list(self.costs)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Record:
        """The record of one parsed line; ``TypeError`` or ``ValueError`` when a field is
        missing or of the wrong type. This is the one reading rule: every reader (``tune``'s
        resume and transfer, ``apply_history_best``, ``ember records show|best|merge``)
        skips such a line, so none of them meets a ``"config": null`` later."""
        if not isinstance(data, dict):
            raise TypeError(f"a record is a JSON object, got {type(data).__name__}")
        known = {k: data[k] for k in Record.__dataclass_fields__ if k in data}
        for name, kinds in _FIELD_TYPES.items():
            if name in known and not _is(known[name], kinds):
                raise TypeError(f"record field '{name}' is {known[name]!r}")
        config = known.get("config")
        for part in ("values", "choices"):
            if isinstance(config, dict) and not isinstance(config.get(part, {}), dict):
                raise TypeError(f"record config's '{part}' is {config[part]!r}")
        if not isinstance(known.get("costs", ()), (list, tuple)):
            raise TypeError(f"record field 'costs' is {known['costs']!r}")
        known["costs"] = tuple(_cost(c) for c in known.get("costs", ()))
        return Record(**known)


# the JSON types of a record's fields (bool is an int to Python: refused where a number is due)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "task_key": (str,),
    "template": (str,),
    "workload_key": (str,),
    "template_version": (int,),
    "target": (str,),
    "config": (dict,),
    "error": (str,),
    "device": (str,),
    "ember_version": (str,),
    "message": (str,),
    "timestamp": (int, float),
    "format": (int,),
}


def task_record(
    task: Any, config: Any, costs: Iterable[float], error: str, device: str, message: str = ""
) -> Record:
    """The record of one measurement of ``config`` (a config entity) of ``task``."""
    return Record(
        task.key,
        task.name,
        task.workload_key,
        task.template.version,
        str(task.target),
        config.to_json(),
        tuple(costs),
        error,
        device,
        ember_version(),
        message,
    )


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


def _cost(value: Any) -> float:
    if not _is(value, (int, float)):
        raise TypeError(f"record cost {value!r} is not a number")
    if math.isnan(value) or value < 0:  # json reads NaN; neither would order the best
        raise ValueError(f"record cost {value!r} is not a duration")
    return float(value)


def host_device_name() -> str:
    """The CPU model the OS reports, the device name of CPU records."""
    return host_cpu_model()


def ember_version() -> str:
    """Ember's version, written into records so old results can be told apart."""
    return __version__


class RecordWriter:
    """Appends records to a file, one flushed line each (a killed run loses nothing
    that was measured before the line was written)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            raise ArgumentError(f"cannot open records file '{path}' for appending: {e}") from e
        if self._file.tell() > 0:
            self._end_partial_line()

    def _end_partial_line(self) -> None:
        """Start on a fresh line when the file ends in a line cut short."""
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                self._file.write("\n")

    def write(self, record: Record) -> None:
        self._file.write(record.to_line() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from enumerate(f, start=1)
    except OSError as e:
        raise ArgumentError(f"cannot read records file '{path}': {e}") from e


def read_records(
    paths: str | Path | Iterable[str | Path],
    target: str | Target | None = None,
    versions: Mapping[str, int] | Callable[[str], int | None] | None = None,
) -> list[Record]:
    """Every readable record of ``paths``, in file order.

    A line that does not parse (a truncated last line) is skipped; with ``target``,
    records of other targets are skipped, and with ``versions`` (template name ->
    current version, a mapping or a function giving None for unknown templates)
    records of other template versions. Each kind of skip gives one
    :class:`RecordWarning` with a count.
    """
    current = versions.get if isinstance(versions, Mapping) else versions
    if isinstance(paths, (str, Path)):
        paths = [paths]
    want = None if target is None else str(Target.parse(target))
    out: list[Record] = []
    skipped = {"unreadable": 0, "other target": 0, "older template version": 0}
    for path in paths:
        for _, line in _lines(Path(path)):
            if not line.strip():
                continue
            try:
                rec = Record.from_dict(json.loads(line))
                Target.parse(rec.target)  # apply_history_best parses it: check it here
            except (ValueError, TypeError, KeyError, ArgumentError):
                skipped["unreadable"] += 1
                continue
            if want is not None and rec.target != want:
                skipped["other target"] += 1
            elif current is not None and current(rec.template) not in (None, rec.template_version):
                skipped["older template version"] += 1
            else:
                out.append(rec)
    for why, count in skipped.items():
        if count:
            warnings.warn(f"records: skipped {count} line(s): {why}", RecordWarning, stacklevel=2)
    return out


def config_cost(costs: Iterable[float]) -> float:
    """A config's cost from its records' costs: the lower middle one. A config timed once
    costs what it measured; one timed again (re-timed by turns after a search,
    :func:`ember.tuner.tune.tune`, or measured in two runs whose files were merged) costs
    its middle timing, not its luckiest, which a search's pick would otherwise keep."""
    return statistics.median_low(costs)


def config_records(records: Iterable[Record], device: str | None = None) -> list[Record]:
    """One valid record per (task key, config), in first-seen order: where a config has
    several, the one at :func:`config_cost` of their costs."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for rec in records:
        if rec.ok and (device is None or rec.device == device):
            key = (rec.task_key, json.dumps(rec.config, sort_keys=True, default=repr))
            groups.setdefault(key, []).append(rec)
    out = []
    for group in groups.values():
        middle = config_cost(r.cost for r in group)
        out.append(next(r for r in group if r.cost == middle))
    return out


def best_records(records: Iterable[Record], device: str | None = None) -> dict[str, Record]:
    """The fastest valid config per task key (of ``device`` only, when given), a config
    measured more than once counted by :func:`config_cost`: the record at that cost.
    Where TVM's ``ApplyHistoryBest`` keeps a config's fastest record, this keeps its
    middle one, so that a pick timed again and found slower loses to its fallback."""
    best: dict[str, Record] = {}
    for rec in config_records(records, device):
        old = best.get(rec.task_key)
        if old is None or rec.cost < old.cost:
            best[rec.task_key] = rec
    return best


def record_steps(config: dict[str, Any]) -> dict[str, Any] | None:
    """The schedule steps an auto-scheduled record's config stores (``ember.tuner.auto``),
    or None for a template's record."""
    steps = config.get("steps") if isinstance(config, dict) else None
    return steps if isinstance(steps, dict) else None


def move_records(log: str | Path, task_keys: set[str]) -> int:
    """Move the lines of ``task_keys`` from ``log`` to ``<log>.dropped`` (appended, so
    they stay for a later look); returns how many moved. Other lines stay as they were."""
    path = Path(log)
    keep: list[str] = []
    drop: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        try:
            key = json.loads(line).get("task_key")
        except (ValueError, AttributeError):
            key = None
        (drop if key in task_keys else keep).append(line)
    if drop:
        with open(str(path) + ".dropped", "a", encoding="utf-8") as f:
            f.writelines(drop)
        path.write_text("".join(keep), encoding="utf-8")
    return len(drop)
