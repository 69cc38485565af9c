"""A benchmark report as a PNG bar chart: one bar per model, its height the median ratio
(onnxruntime time / Ember time), an error bar over the rounds' range, a line at 1.0 where
the runtimes tie, and the baseline's ratio as a mark where one was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ember.errors import UserError


def draw(report: dict[str, Any], path: str | Path, baseline: dict[str, Any] | None = None) -> None:
    """Write the chart of ``report`` to ``path`` (PNG)."""
    try:
        # optional dependency: matplotlib (the `bench` extra), drawn off-screen (Agg)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise UserError("--chart needs matplotlib: pip install ember[bench]") from e

    names = list(report["models"])
    entries = [report["models"][n] for n in names]
    ratios = [e["ratio"] for e in entries]
    below = [r - e["ratio_min"] for r, e in zip(ratios, entries)]
    above = [e["ratio_max"] - r for r, e in zip(ratios, entries)]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 + 0.9 * len(names)), 4.0))
    colors = ["tab:green" if r >= 1.0 else "tab:red" for r in ratios]
    xs = list(range(len(names)))
    ax.bar(xs, ratios, yerr=[below, above], capsize=4, color=colors, alpha=0.8)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    if baseline is not None:
        marks = [
            (x, baseline["models"][n]["ratio"])
            for x, n in zip(xs, names)
            if n in baseline["models"]
        ]
        if marks:
            at, level = [x for x, _ in marks], [y for _, y in marks]
            ax.scatter(at, level, marker="_", s=400, color="tab:blue", label="baseline")
            ax.legend(loc="best")
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("onnxruntime time / Ember time")
    m = report["machine"]
    ax.set_title(f"{m['cpu']}, {report['threads']} thread(s): above 1, Ember is faster", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
