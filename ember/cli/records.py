"""``ember records show|best|merge``: read and combine tuning records files.

An auto-scheduled record (:mod:`ember.tuner.auto`) shows its chosen sketch's knobs in the
table and its schedule steps below it, one per line.

``show`` prints the last ``--limit`` records, ``best`` the best valid record per task (what
:func:`ember.tuner.apply_history_best` would use), ``merge`` writes the readable lines of
several files into one, each distinct line once. Records are read by
:func:`ember.tuner.read_records`; the tables are ``rich`` ones (the ``tune`` extra).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ember.cli.common import MESSAGE_WIDTH, console, ms_text, table
from ember.errors import ScheduleError
from ember.tuner import RecordWriter, best_records, read_records
from ember.tuner.records import record_steps
from ember.tuner.result import spread_text


def add_parser(sub: Any) -> None:
    """Register ``ember records`` and its three subcommands."""
    rec = sub.add_parser("records", help="show, pick the best of, or merge records files")
    rsub = rec.add_subparsers(dest="records_command", required=True)
    show = rsub.add_parser("show", help="print records")
    show.add_argument("files", nargs="+")
    show.add_argument("--limit", type=int, default=50)
    show.set_defaults(fn=cmd_records_show)
    best = rsub.add_parser("best", help="print the best valid record per task")
    best.add_argument("files", nargs="+")
    best.set_defaults(fn=cmd_records_best)
    merge = rsub.add_parser("merge", help="merge records files into one (readable lines only)")
    merge.add_argument("output")
    merge.add_argument("files", nargs="+")
    merge.set_defaults(fn=cmd_records_merge)


def _records_table(records: list[Any], title: str) -> Any:
    out = table(title, ("template", "args", "config", "cost", "error"))
    for r in records:
        values = r.config.get("values", {})  # read_records checked it is a dict
        if record_steps(r.config) is not None:  # auto-scheduled: the chosen sketch's knobs
            prefix = f"s{r.config.get('choices', {}).get('sketch')}."
            values = {"sketch": values.get("sketch")} | {
                k: v for k, v in values.items() if k.startswith(prefix)
            }
        config = " ".join(f"{k}={v}".replace(" ", "") for k, v in values.items())
        out.add_row(r.template, _workload_args(r.workload_key), config, _cost_cell(r), _error(r))
    return out


def _workload_args(key: str) -> str:
    """The arguments of a workload key ``'["name", [args...]]'``, or ``?``."""
    try:
        data = json.loads(key)
    except ValueError:
        return "?"
    if isinstance(data, list) and len(data) > 1 and isinstance(data[1], list):
        return ",".join(map(str, data[1]))
    return "?"


def _cost_cell(r: Any) -> str:
    """The median cost, flagged when its repeats say the machine was busy."""
    if r.busy:
        return f"{ms_text(r.cost)} (busy: {spread_text(r.costs)})"
    return ms_text(r.cost)


def _error(r: Any) -> str:
    """``ok``, or the error kind with the first line of its message."""
    if r.error == "ok":
        return "ok"
    first = next((line.strip() for line in r.message.splitlines() if line.strip()), "")
    return f"{r.error}: {first[:MESSAGE_WIDTH]}" if first else r.error


def cmd_records_show(ns: argparse.Namespace) -> int:
    """``ember records show FILES``: the last ``--limit`` records as a table."""
    recs = read_records(ns.files)
    console().print(_records_table(recs[-ns.limit :], f"{len(recs)} records (last {ns.limit})"))
    _print_steps(recs[-ns.limit :])
    return 0


def _print_steps(records: list[Any]) -> None:
    """The schedule steps of each auto-scheduled record, numbered as in the table."""
    # start-up cost: the schedule machinery loads only when a file holds auto records
    from ember.tuner.auto.steps import format_steps, steps_from_json

    for n, r in enumerate(records, start=1):
        steps = record_steps(r.config)
        if steps is None:
            continue
        try:
            text = format_steps(steps_from_json(steps))
        except ScheduleError as e:  # another steps version: show what the file holds
            text = f"{e.message}\n{json.dumps(steps)}"
        print(f"steps of record {n} ({r.template} {_workload_args(r.workload_key)}):")
        print("  " + text.replace("\n", "\n  "))


def cmd_records_best(ns: argparse.Namespace) -> int:
    """``ember records best FILES``: the best valid record of each task as a table."""
    best = best_records(read_records(ns.files))
    console().print(_records_table(list(best.values()), f"best of {len(best)} task(s)"))
    _print_steps(list(best.values()))
    return 0


def cmd_records_merge(ns: argparse.Namespace) -> int:
    """``ember records merge OUT FILES``: the distinct readable records of FILES into OUT."""
    recs = read_records(ns.files)
    seen: set[str] = set()
    with RecordWriter(ns.output) as writer:
        for rec in recs:
            line = rec.to_line()
            if line not in seen:
                seen.add(line)
                writer.write(rec)
    print(f"merged {len(seen)} record(s) into {ns.output}")
    return 0
