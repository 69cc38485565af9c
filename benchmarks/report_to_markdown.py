"""Print an ``ember bench`` report as the markdown table the README's performance section
is regenerated from, led by a line naming the machine.

Run: ``python benchmarks/report_to_markdown.py report-1t.json report-2t.json`` (reports
written by ``ember bench --threads N --report FILE``, or baseline files: the same format);
each report gives its own columns, so one table holds both thread counts.
"""

from __future__ import annotations

import argparse
import json

from ember.perf.report import markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="JSON reports of `ember bench --report`")
    args = ap.parse_args()
    reports = []
    for path in args.reports:
        with open(path) as f:
            reports.append(json.load(f))
    print(markdown(*reports))


if __name__ == "__main__":
    main()
