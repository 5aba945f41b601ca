"""The evaluation report's PNG plots, drawn with matplotlib's Agg canvas.

Figures are built with the object-oriented API on an Agg canvas, never
through pyplot: no global state, no display needed, nothing left open.
Every panel says which way is better; every line and bar is in a legend;
weighted wait, which swings far more than the rest, has its own axis; each
function returns its figure, so that tests can read what it shows.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Tang et al.'s three metrics, with how the plots name them.
METRICS = {"avg_wait": "average wait", "avg_slowdown": "average slowdown", "weighted_wait": "weighted wait"}
#: Weighted wait swings far more than the others (a few long waits dominate it): it gets its own axis.
OWN_AXIS = ("weighted_wait",)
BASELINE_LEVEL = 100.0  # a month's baseline, as Tang et al. draw it
LOWER_IS_BETTER = "lower is better"
HIGHER_IS_BETTER = "higher is better"
#: Fonts readable at the default size of the PNGs.
LABEL_SIZE = 9
LEGEND_SIZE = 8
#: An estimator absent from the colour mapping (never in a report: every run's estimator has one).
UNKNOWN_COLOR = "#333333"
#: Each built-in estimator's colour, in every plot of every report: colours follow the estimator, not its
#: position in a run's list, so that two reports read alike.
ESTIMATOR_COLORS = {
    "request": "#444444",
    "percentile": "#1f77b4",
    "last2": "#ff7f0e",
    "mean-std": "#2ca02c",
    "lgbm-quantile": "#d62728",
    "lgbm-sched": "#bf5b17",
    "oracle": "#9467bd",
}
#: Colours for other SPECs (parameters spelt out, trained models), chosen by a checksum of the SPEC: stable too.
OTHER_COLORS = (
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#393b79",
    "#637939",
)


#: A SPEC's own colour is one of the palette's first eight, as before it grew: reports keep their colours.
FIRST_CHOICES = 8


def estimator_color(spec: str) -> str:
    """The colour of an estimator SPEC: its estimator's when written as the bare name, else one of its own."""
    return ESTIMATOR_COLORS.get(spec) or OTHER_COLORS[zlib.crc32(spec.encode()) % FIRST_CHOICES]


def estimator_colors(specs: Iterable[str]) -> dict[str, str]:
    """A distinct colour for every estimator SPEC of one report, used by all its plots: a built-in named bare
    keeps its own; any other takes its `estimator_color`, or when another SPEC holds that one already
    (percentile:q=85 and q=70 shared one), the next free colour after it. Past the palette's size colours repeat."""
    wanted = set(specs)
    chosen = {spec: ESTIMATOR_COLORS[spec] for spec in wanted if spec in ESTIMATOR_COLORS}
    for spec in sorted(wanted - set(chosen)):
        start = OTHER_COLORS.index(estimator_color(spec))
        free = [
            color
            for step in range(len(OTHER_COLORS))
            if (color := OTHER_COLORS[(start + step) % len(OTHER_COLORS)]) not in chosen.values()
        ]
        chosen[spec] = free[0] if free else OTHER_COLORS[start]
    return chosen


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _title(ax: Axes, text: str, direction: str) -> None:
    """A panel's title with which way is better, so that no panel can be read upside down."""
    ax.set_title(f"{text}\n({direction})", fontsize=LABEL_SIZE)


def pareto_front(underestimated: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both counts (less underestimation, more accuracy)."""
    order = np.lexsort((-accuracy, underestimated))
    front = []
    best = -np.inf
    for index in order:
        if accuracy[index] > best:
            front.append(index)
            best = accuracy[index]
    return np.asarray(front, dtype=np.int64)


def frontier_plot(quality: pd.DataFrame, title: str, path: Path, colors: Mapping[str, str]) -> Figure:
    """Mean accuracy against the fraction of underestimated jobs, one point per estimator (named in the legend,
    not beside the point, where names overlapped), and the Pareto frontier."""
    figure = _figure(7, 5)
    ax = figure.add_subplot()
    under = quality["underestimated"].to_numpy(dtype=np.float64) * 100
    acc = quality["accuracy_mean"].to_numpy(dtype=np.float64)
    front = pareto_front(under, acc)
    ax.plot(
        under[front],
        acc[front],
        linestyle="--",
        color="#999999",
        zorder=1,
        label="Pareto frontier (no estimator beats these on both counts)",
    )
    for x, y, spec in zip(under, acc, quality["estimator"], strict=True):
        ax.scatter([x], [y], color=colors.get(spec, UNKNOWN_COLOR), zorder=2, s=40, label=spec)
    ax.set_xlabel("underestimated jobs (%): lower is better", fontsize=LABEL_SIZE)
    ax.set_ylabel("mean accuracy: higher is better", fontsize=LABEL_SIZE)
    _title(ax, title, "best: up and to the left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=LEGEND_SIZE)
    figure.savefig(path)
    return figure


def accuracy_cdf_plot(curves: Mapping[str, np.ndarray], title: str, path: Path, colors: Mapping[str, str]) -> Figure:
    """Cumulative distribution of per-job accuracy, one line per estimator (Tang et al.'s Figure 11)."""
    figure = _figure(7, 5)
    ax = figure.add_subplot()
    for spec, quantiles in curves.items():
        ax.plot(quantiles, np.linspace(0.0, 1.0, len(quantiles)), color=colors.get(spec, UNKNOWN_COLOR), label=spec)
    ax.set_xlabel("accuracy", fontsize=LABEL_SIZE)
    ax.set_ylabel("fraction of jobs", fontsize=LABEL_SIZE)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    _title(ax, title, "a curve further right or lower is better: more jobs accurately estimated")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=LEGEND_SIZE)
    figure.savefig(path)
    return figure


def _improvement_bars(ax: Axes, runs: pd.DataFrame, colors: Mapping[str, str], metrics: Sequence[str]) -> None:
    """Grouped bars: per metric of `metrics`, one bar per run (its estimator's colour), improvement in percent."""
    labels = list(dict.fromkeys(runs["run"]))
    width = 0.8 / max(len(labels), 1)
    positions = np.arange(len(metrics))
    for number, label in enumerate(labels):
        row = runs[runs["run"] == label].iloc[0]
        values = [row[f"improvement_{metric}"] * 100 for metric in metrics]
        color = colors.get(str(row["estimator"]), UNKNOWN_COLOR)
        ax.bar(positions + (number - (len(labels) - 1) / 2) * width, values, width, color=color, label=label)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(positions, [METRICS[metric] for metric in metrics], fontsize=LABEL_SIZE)
    ax.set_ylabel("improvement over the baseline (%)", fontsize=LABEL_SIZE)
    ax.grid(axis="y", alpha=0.3)


def _bar_panels(axes: Sequence[Axes], runs: pd.DataFrame, colors: Mapping[str, str], title: str) -> None:
    """Wait and slowdown bars on one axis, weighted wait on its own: its swings would squash the others."""
    shared = [metric for metric in METRICS if metric not in OWN_AXIS]
    _improvement_bars(axes[0], runs, colors, shared)
    _improvement_bars(axes[1], runs, colors, OWN_AXIS)
    _title(axes[0], title, HIGHER_IS_BETTER)
    _title(axes[1], f"{title}: weighted wait (its own scale)", HIGHER_IS_BETTER)


def _legend_below(figure: Figure, axes: Sequence[Axes]) -> None:
    """One legend for the figure, holding every line and bar once."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        figure.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncols=min(len(handles), 4),
            fontsize=LEGEND_SIZE,
        )


def improvement_plot(runs: pd.DataFrame, title: str, path: Path, colors: Mapping[str, str]) -> Figure:
    """Improvement bars, one row of panels per mode (runs have `estimator`, `mode` and `improvement_*` columns)."""
    predicting = runs[runs["mode"] != "none"]
    modes = list(dict.fromkeys(predicting["mode"])) or ["none"]
    figure = _figure(10, 3.6 * len(modes) + 0.8)
    grid = figure.subplots(len(modes), 2, squeeze=False, width_ratios=[2, 1])
    for axes, mode in zip(grid, modes, strict=True):
        _bar_panels(axes, predicting[predicting["mode"] == mode], colors, f"mode {mode}")
    _legend_below(figure, list(grid.ravel()))
    figure.suptitle(title, fontsize=10)
    figure.savefig(path)
    return figure


def monthly_plot(
    monthly: pd.DataFrame, averages: pd.DataFrame, title: str, path: Path, colors: Mapping[str, str]
) -> Figure:
    """Tang et al.'s Figures 14-17: each month's metrics with its baseline at 100, and the average improvements."""
    figure = _figure(14, 9)
    axes = figure.subplots(2, 3).ravel()
    months = sorted(monthly["month"].unique())
    positions = {month: number for number, month in enumerate(months)}
    for ax, (metric, name) in zip(axes[:3], METRICS.items(), strict=True):
        ax.axhline(
            BASELINE_LEVEL,
            color=colors.get("request", "black"),
            linewidth=1.5,
            linestyle=":",
            label=f"baseline (request, mode none) = {BASELINE_LEVEL:g}",
        )
        for label, runs in monthly.groupby("run", sort=False):
            x = runs["month"].map(positions).to_numpy()
            ax.plot(
                x,
                runs[f"{metric}_vs_baseline"].to_numpy() * BASELINE_LEVEL,
                marker="o",
                markersize=3,
                color=colors.get(str(runs["estimator"].iloc[0]), UNKNOWN_COLOR),
                label=str(label),
            )
        step = max(1, len(months) // 12)  # at most about 12 month labels: more overlap
        ax.set_xticks(range(0, len(months), step), months[::step], rotation=45, ha="right", fontsize=LABEL_SIZE - 1)
        ax.set_ylabel(f"{name} (baseline = {BASELINE_LEVEL:g})", fontsize=LABEL_SIZE)
        _title(ax, f"{name}, each month against its baseline", LOWER_IS_BETTER)
        ax.grid(alpha=0.3)
    _bar_panels(axes[3:5], averages, colors, "average improvement over the months")
    axes[5].set_axis_off()
    _legend_below(figure, list(axes[:5]))
    figure.suptitle(title, fontsize=10)
    figure.savefig(path)
    return figure
