"""Draw docs/img/scheduling-value-*.png from a `tsched evaluate` results.csv, beside Gaussier et al.'s values.

The evaluation is the head-to-head of docs/scheduling-value.md (FCFS + EASY, queue and SJF backfill
orders, regular mode, correction `request`); this script only reads its results.csv and plots AVEbsld
and average wait per trace and configuration, with the published AVEbsld (SC'15) as black ticks.

    python scripts/scheduling_value_plot.py RESULTS.csv --out docs/img
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes

from simulator.evaluation.plots import estimator_color

TRACES = ("KTH-SP2-1996-2.1-cln", "CTC-SP2-1996-3.1-cln", "SDSC-SP2-1998-4.2-cln", "SDSC-BLUE-2000-4.2-cln")
#: (estimator, backfill order, label), in the order drawn.
CONFIGURATIONS = (
    ("request", "queue", "EASY, requests"),
    ("oracle", "queue", "EASY, clairvoyant"),
    ("request", "sjf", "EASY-SJBF, requests"),
    ("percentile:q=85", "sjf", "EASY++ adjuster"),
    ("lgbm-quantile", "sjf", "EASY++ lgbm-quantile"),
    ("last2", "sjf", "EASY++ last2"),
    ("lgbm-sched", "sjf", "EASY++ lgbm-sched"),
    ("oracle", "sjf", "EASY++ clairvoyant"),
)
#: Gaussier et al. (SC'15), AVEbsld per trace, for the configurations they report.
PUBLISHED = {
    ("request", "queue"): (92.58, 49.57, 87.87, 36.52),
    ("oracle", "queue"): (71.72, 37.17, 70.48, 30.62),
    ("request", "sjf"): (69.41, 30.04, 84.89, 19.83),
    ("last2", "sjf"): (62.86, 26.53, 65.06, 16.83),
    ("oracle", "sjf"): (49.85, 17.57, 56.84, 13.18),
}
#: How a bar shows its backfill order: EASY-SJBF hatched.
ORDER_HATCHES = {"queue": None, "sjf": "//"}


@dataclass(frozen=True)
class Metric:
    """A results.csv column drawn, its axis title, and the published values marked beside its bars."""

    column: str
    title: str
    published: Mapping[tuple[str, str], tuple[float, ...]]


METRICS = (
    Metric("avg_bounded_slowdown", "AVEbsld (lower is better)", PUBLISHED),
    Metric("avg_wait", "average wait, s (lower is better)", {}),
)


def draw(axis: Axes, rows: pd.DataFrame, metric: Metric, column: int) -> None:
    """One trace's bars (`column`: its place in `TRACES`), with the published value of each over it."""
    for position, (estimator, order, label) in enumerate(CONFIGURATIONS):
        row = rows[(rows["estimator"] == estimator) & (rows["backfill_order"] == order)]
        axis.bar(
            position,
            float(row[metric.column].iloc[0]),
            color=estimator_color(estimator),
            hatch=ORDER_HATCHES[order],
            edgecolor="white",
            label=label,
        )
        published = metric.published.get((estimator, order))
        if published is not None:
            axis.plot(
                [position - 0.4, position + 0.4],
                [published[column]] * 2,
                color="black",
                linewidth=2,
                label="Gaussier et al. (SC'15)" if position == 0 else None,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args()
    results = pd.read_csv(args.results)
    for metric in METRICS:
        figure, axes = plt.subplots(1, len(TRACES), figsize=(16, 4.5))
        for column, (axis, trace) in enumerate(zip(axes, TRACES, strict=True)):
            draw(axis, results[results["trace"] == trace], metric, column)
            axis.set_title(trace.removesuffix("-cln"))
            axis.set_xticks([])
            axis.set_ylabel(metric.title if column == 0 else "")
        handles, labels = axes[0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="lower center", ncol=5, fontsize=9, frameon=False)
        figure.tight_layout(rect=(0, 0.14, 1, 1))
        path = args.out / f"scheduling-value-{metric.column}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        print(path)


if __name__ == "__main__":
    main()
