"""The evaluation report's PNG plots, drawn with matplotlib's Agg canvas.

Figures are built with the object-oriented API on an Agg canvas, never
through pyplot: no global state, no display needed, nothing left open.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Tang et al.'s three metrics, with how the plots name them.
METRICS = {"avg_wait": "average wait", "avg_slowdown": "average slowdown", "weighted_wait": "weighted wait"}
BASELINE_LEVEL = 100.0  # a month's baseline, as Tang et al. draw it


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


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


def frontier_plot(quality: pd.DataFrame, title: str, path: Path, colors: Mapping[str, str]) -> None:
    """Mean accuracy against the fraction of underestimated jobs, one point per estimator, the frontier dashed."""
    figure = _figure(7, 5)
    ax = figure.add_subplot()
    under = quality["underestimated"].to_numpy(dtype=np.float64) * 100
    acc = quality["accuracy_mean"].to_numpy(dtype=np.float64)
    front = pareto_front(under, acc)
    ax.plot(under[front], acc[front], linestyle="--", color="#999999", zorder=1, label="frontier")
    for x, y, spec in zip(under, acc, quality["estimator"], strict=True):
        ax.scatter([x], [y], color=colors.get(spec, "#333333"), zorder=2)
        ax.annotate(spec, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("underestimated jobs (%)")
    ax.set_ylabel("mean accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    figure.savefig(path)


def accuracy_cdf_plot(curves: Mapping[str, np.ndarray], title: str, path: Path, colors: Mapping[str, str]) -> None:
    """Cumulative distribution of per-job accuracy, one line per estimator (Tang et al.'s Figure 11)."""
    figure = _figure(7, 5)
    ax = figure.add_subplot()
    for spec, quantiles in curves.items():
        ax.plot(quantiles, np.linspace(0.0, 1.0, len(quantiles)), color=colors.get(spec), label=spec)
    ax.set_xlabel("accuracy")
    ax.set_ylabel("fraction of jobs")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.savefig(path)


def _improvement_bars(ax: Axes, runs: pd.DataFrame, colors: Mapping[str, str]) -> None:
    """Grouped bars: per metric, one bar per run (its estimator's colour), improvement in percent."""
    labels = list(dict.fromkeys(runs["run"]))
    width = 0.8 / max(len(labels), 1)
    positions = np.arange(len(METRICS))
    for number, label in enumerate(labels):
        row = runs[runs["run"] == label].iloc[0]
        values = [row[f"improvement_{metric}"] * 100 for metric in METRICS]
        color = colors.get(str(row["estimator"]))
        ax.bar(positions + (number - (len(labels) - 1) / 2) * width, values, width, color=color, label=label)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(positions, list(METRICS.values()))
    ax.set_ylabel("improvement over the baseline (%)")
    ax.grid(axis="y", alpha=0.3)


def improvement_plot(runs: pd.DataFrame, title: str, path: Path, colors: Mapping[str, str]) -> None:
    """Improvement bars, one panel per mode (runs have `estimator`, `mode` and `improvement_*` columns)."""
    predicting = runs[runs["mode"] != "none"]
    modes = list(dict.fromkeys(predicting["mode"]))
    figure = _figure(5.5 * max(len(modes), 1), 4.5)
    axes = figure.subplots(1, max(len(modes), 1), squeeze=False)[0]
    for ax, mode in zip(axes, modes, strict=True):
        _improvement_bars(ax, predicting[predicting["mode"] == mode], colors)
        ax.set_title(f"mode {mode}", fontsize=10)
    if modes:
        axes[0].legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.savefig(path)


def monthly_plot(
    monthly: pd.DataFrame, averages: pd.DataFrame, title: str, path: Path, colors: Mapping[str, str]
) -> None:
    """Tang et al.'s Figures 14-17: each month's metrics with its baseline at 100, and the average improvements."""
    figure = _figure(12, 8)
    axes = figure.subplots(2, 2).ravel()
    months = sorted(monthly["month"].unique())
    positions = {month: number for number, month in enumerate(months)}
    for ax, (metric, name) in zip(axes[:3], METRICS.items(), strict=True):
        ax.axhline(BASELINE_LEVEL, color=colors.get("request", "black"), linewidth=1.5, label="baseline")
        for label, runs in monthly.groupby("run", sort=False):
            x = runs["month"].map(positions).to_numpy()
            ax.plot(
                x,
                runs[f"{metric}_vs_baseline"].to_numpy() * BASELINE_LEVEL,
                marker="o",
                markersize=3,
                color=colors.get(str(runs["estimator"].iloc[0])),
                label=str(label),
            )
        ax.set_xticks(range(len(months)), months, rotation=90, fontsize=7)
        ax.set_ylabel(f"{name} (baseline = {BASELINE_LEVEL:g})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    _improvement_bars(axes[3], averages, colors)
    axes[3].set_title("average improvement over the months", fontsize=9)
    figure.suptitle(title, fontsize=10)
    figure.savefig(path)
