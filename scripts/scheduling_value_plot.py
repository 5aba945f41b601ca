"""Draw docs/img/scheduling-value-*.png from a `tsched evaluate` results.csv, beside Gaussier et al.'s values.

The evaluation is the head-to-head of docs/scheduling-value.md (FCFS + EASY, queue and SJF backfill
orders, regular mode, correction `request`); this script only reads its results.csv and plots AVEbsld
and average wait per trace and configuration, with the published AVEbsld (SC'15) as black ticks.

    python scripts/scheduling_value_plot.py RESULTS.csv --out docs/img
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

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
METRICS = (("avg_bounded_slowdown", "AVEbsld (lower is better)"), ("avg_wait", "average wait, s (lower is better)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args()
    results = pd.read_csv(args.results)
    for metric, title in METRICS:
        figure, axes = plt.subplots(1, len(TRACES), figsize=(16, 4.5))
        for column, (axis, trace) in enumerate(zip(axes, TRACES, strict=True)):
            rows = results[results["trace"] == trace]
            for position, (estimator, order, label) in enumerate(CONFIGURATIONS):
                row = rows[(rows["estimator"] == estimator) & (rows["backfill_order"] == order)]
                color = estimator_color(estimator)
                axis.bar(
                    position,
                    float(row[metric].iloc[0]),
                    color=color,
                    hatch="//" if order == "sjf" else None,
                    edgecolor="white",
                    label=label,
                )
                published = PUBLISHED.get((estimator, order))
                if metric == "avg_bounded_slowdown" and published is not None:
                    axis.plot(
                        [position - 0.4, position + 0.4],
                        [published[column]] * 2,
                        color="black",
                        linewidth=2,
                        label="Gaussier et al. (SC'15)" if position == 0 else None,
                    )
            axis.set_title(trace.removesuffix("-cln"))
            axis.set_xticks([])
            axis.set_ylabel(title if column == 0 else "")
        handles, labels = axes[0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="lower center", ncol=5, fontsize=9, frameon=False)
        figure.tight_layout(rect=(0, 0.14, 1, 1))
        path = args.out / f"scheduling-value-{metric}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        print(path)


if __name__ == "__main__":
    main()
