"""A benchmark run as a JSON report, and the report as text: the console table, and the
markdown table the README's performance section is regenerated from
(``benchmarks/report_to_markdown.py``).

A report names the machine (CPU model from ``/proc/cpuinfo``, cores, the cores this
process may use, the load average when the run began, the thread settings in the
environment), the versions of both runtimes, the date, and the run's settings; then, per
model, both latencies, the median ratio and its range over rounds (see
:mod:`ember.perf.timing`). ``ember bench --baseline`` reads the same format
(:mod:`ember.perf.gate`).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from ember.target import host_cpu_model
from ember.version import __version__

SCHEMA = 1
THREAD_ENV = (  # EMBER_NUM_THREADS is left out: `ember bench --threads` sets it
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOMP_SPINCOUNT",
    "OMP_WAIT_POLICY",
)


def machine() -> dict[str, Any]:
    """The machine a run is on, as far as it changes the figures."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    return {
        "cpu": host_cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "load_average": load,
        "os": platform.platform(),
        "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }


def versions() -> dict[str, str]:
    """Versions of Ember, both runtimes and what they stand on."""
    out = {"ember": __version__, "python": sys.version.split()[0]}
    for package in ("onnxruntime", "onnx", "numpy", "llvmlite"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def build(timings: Iterable[Any], settings: dict[str, Any]) -> dict[str, Any]:
    """A report of ``timings`` (:class:`ember.perf.timing.ModelTiming`) taken with
    ``settings`` (threads, quick, rounds, mode, ...)."""
    models = {t.name: t.as_dict() for t in timings}
    ratios = [m["ratio"] for m in models.values()]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "schema": SCHEMA,
        "date": now.isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        **settings,
        "geomean_ratio": geomean,
        "models": models,
    }


def write(report: dict[str, Any], path: str | Path) -> None:
    """Write ``report`` as indented JSON (creating the folder)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def row(name: str, entry: dict[str, Any]) -> str:
    """A model's line of the console table (header: :func:`header`)."""
    spread = f"{entry['ratio_min']:.2f}-{entry['ratio_max']:.2f}"
    retaken = entry.get("retaken", 0)
    note = f"  ({retaken} round(s) retaken: the host was slowing a CPU)" if retaken else ""
    return (
        f"{name:16s}{entry['compile_s']:10.1f}{entry['ember_ms']:12.3f}{entry['ort_ms']:12.3f}"
        f"{entry['ratio']:11.2f}{spread:>12s}{note}"
    )


def header(threads: int) -> str:
    """The console table's header line."""
    return (
        f"{'model':16s}{'compile s':>10s}{f'ember {threads}t ms':>12s}{f'ort {threads}t ms':>12s}"
        f"{'ort/ember':>11s}{'range':>12s}"
    )


def markdown(*reports: dict[str, Any]) -> str:
    """Reports as the README's table: a line naming the machine (the first report's), then
    one row per model with, for each report (one per thread count, say), Ember's latency
    and the ratio with its range over rounds."""
    first = reports[0]
    m, v = first["machine"], first["versions"]
    size = "small inputs (--quick)" if first.get("quick") else "full-size inputs"
    threads = " and ".join(str(r["threads"]) for r in reports)
    lines = [
        f"{m['cpu']}, {m['cores']} cores, {threads} thread(s), {size}; Ember {v['ember']}, "
        f"onnxruntime {v['onnxruntime']}; {first.get('rounds', '?')} rounds, "
        f"{first.get('mode', '?')} mode, load average {m.get('load_average')} at the start; "
        f"{first['date'][:10]}. Ratio: onnxruntime time / Ember time (above 1, Ember is faster).",
        "",
    ]
    head, rule = ["model"], ["---"]
    for r in reports:
        t = r["threads"]
        head += [f"Ember {t}t ms", f"onnxruntime {t}t ms", f"ratio {t}t (range)"]
        rule += ["---:", "---:", "---:"]
    lines += ["| " + " | ".join(head) + " |", "| " + " | ".join(rule) + " |"]
    names = list(dict.fromkeys(n for r in reports for n in r["models"]))
    for name in names:
        cells = [name]
        for r in reports:
            e = r["models"].get(name)
            if e is None:
                cells += ["-", "-", "-"]
                continue
            spread = f"{e['ratio_min']:.2f}-{e['ratio_max']:.2f}"
            cells += [f"{e['ember_ms']:.3f}", f"{e['ort_ms']:.3f}", f"{e['ratio']:.2f}× ({spread})"]
        lines.append("| " + " | ".join(cells) + " |")
    means = ["geometric mean"]
    for r in reports:
        means += ["", "", f"{r['geomean_ratio']:.2f}×" if r.get("geomean_ratio") else "-"]
    lines.append("| " + " | ".join(means) + " |")
    return "\n".join(lines)
