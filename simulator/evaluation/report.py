"""The evaluation report: tables derived from the runs, the CSV files, the plots and report.md.

Everything here is computed from the task outcomes alone, so a report can be
checked against its own results.csv. Improvement of a metric over the
baseline is (baseline - value) / baseline (docs/definitions.md): positive is
better. The baseline of a run is `request` in mode `none` on the same trace,
period, policy and backfilling.
"""

from __future__ import annotations

import os
import platform
import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel.errors import UsageError
from predictor.registry import make_estimator
from simulator.engine import SimulationConfig
from simulator.evaluation.plan import (
    BASELINE_ESTIMATOR,
    BASELINE_MODE,
    REFERENCE_ORDER,
    Backend,
    EvaluationPlan,
    QualityTask,
    SimulationTask,
    TaskOutcome,
    TraceInput,
    clock,
    months_with_jobs,
)
from simulator.metrics import SCHEDULING_METRICS

#: Metrics whose improvement over the baseline is computed for every run (utilisation and makespan are
#: reported, not compared: they follow the trace more than the scheduler).
IMPROVED_METRICS = tuple(metric for metric in SCHEDULING_METRICS if metric not in ("utilization", "makespan"))
#: Tang et al.'s three metrics (their Figures 14-17).
PAPER_METRICS = ("avg_wait", "avg_slowdown", "weighted_wait")
METRIC_TITLES = {
    "avg_wait": "wait",
    "avg_response": "response",
    "avg_slowdown": "slowdown",
    "avg_bounded_slowdown": "bounded slowdown",
    "weighted_wait": "weighted wait",
    "weighted_wait_wfp": "weighted wait (WFP score)",
    "artww": "ARTwW",
    "sldwa": "SLDwA",
}
#: Below this mean wait (seconds) the baseline hardly queues: ratios of its waits say nothing.
LITTLE_QUEUEING_SECONDS = 60.0
#: Every metric: unit, which way is better, and what it is (docs/definitions.md). The report's definitions
#: section and the data dictionary (columns.csv) are both written from it.
METRIC_DEFINITIONS: dict[str, tuple[str, str, str]] = {
    "avg_wait": ("seconds", "lower", "mean of start - submit over the jobs"),
    "avg_response": ("seconds", "lower", "mean of wait + run"),
    "avg_slowdown": ("ratio", "lower", "mean of response / max(run, 1 s)"),
    "avg_bounded_slowdown": ("ratio", "lower", "mean of max(1, response / max(run, 10 s))"),
    "weighted_wait": (
        "seconds",
        "lower",
        "Tang et al.'s Eq. 4: sum(wait x P) / sum(P), P = the job's priority score at its start under the policy "
        "used (FCFS: its wait; WFP: (wait / t_req)^3 x size; SJF: 1 / t_req)",
    ),
    "weighted_wait_wfp": ("seconds", "lower", "the same weighted with the WFP score whatever the policy"),
    "utilization": ("fraction", "higher", "sum(size x run) / (processors x (last end - first submit))"),
    "makespan": ("seconds", "lower", "last end - first submit"),
    "artww": (
        "seconds",
        "lower",
        "Streit's ARTwW: mean response weighted by the job's width, sum(size x response) / sum(size)",
    ),
    "sldwa": (
        "ratio",
        "lower",
        "Streit's SLDwA: slowdown weighted by the job's area, sum(size x run x slowdown) / sum(size x run)",
    ),
    "accuracy_mean": ("fraction", "higher", "Tang et al.'s Eq. 3 accuracy of t_sched, mean over the jobs"),
    "accuracy_median": ("fraction", "higher", "Tang et al.'s Eq. 3 accuracy of t_sched, median over the jobs"),
    "underestimated": ("fraction", "lower", "jobs whose t_sched was below their runtime"),
    "NA": ("fraction", "-", "jobs whose estimate was not adjusted (t_sched = t_req)"),
    "OE": ("fraction", "-", "jobs overestimated (t_sched above the runtime)"),
    "UE": ("fraction", "lower", "jobs underestimated by at most 30 minutes"),
    "BE": ("fraction", "lower", "jobs underestimated by more than 30 minutes"),
    "mae": ("seconds", "lower", "mean of abs(t_sched - runtime)"),
    "medae": ("seconds", "lower", "median of abs(t_sched - runtime)"),
    "lambda": (
        "ratio",
        "lower",
        "mean abs(t_sched - runtime) / mean abs(t_req - runtime): below 1 beats the requests",
    ),
}
#: The other columns of the CSV files: unit and meaning.
PARAMETER_COLUMNS: dict[str, tuple[str, str]] = {
    "trace": ("-", "the trace's label"),
    "month": ("YYYY-MM", "the calendar month simulated (empty: the whole trace)"),
    "load_factor": ("factor", "offered load multiplied by it (inter-arrival times divided by it)"),
    "replicate": ("-", "0: the trace as it is; N > 0: submissions moved by up to `jitter` seconds, seed N"),
    "jitter": ("seconds", "how far the replicate moved each submission, at most (0 for replicate 0)"),
    "estimator": ("SPEC", "the estimator that gave t_sched"),
    "policy": ("-", "queue policy"),
    "backfill": ("-", "backfilling"),
    "backfill_order": ("-", "the order backfill candidates are tried in"),
    "mode": ("-", "where the scheduler used t_sched: none, regular or selective"),
    "correction": ("-", "regular mode: what a running job past its prediction is expected to run"),
    "procs": ("processors", "machine size"),
    "jobs": ("jobs", "jobs simulated or replayed"),
    "skipped": ("jobs by reason", "trace jobs not replayed"),
    "predictor_fallbacks": ("jobs", "jobs given t_req because the service did not answer"),
    "predictor_fallback_share": ("fraction", "the same as a share of the jobs"),
    "little_queueing": ("true/false", f"the baseline's mean wait is under {LITTLE_QUEUEING_SECONDS:g} s"),
    "run": ("-", "how tables and plots name the run"),
    "us_per_prediction": ("microseconds", "prediction cost per job"),
    "months": ("months", "months simulated"),
}
#: Why one estimator's whole-trace and monthly numbers can disagree (even in sign), said where both are shown.
WHOLE_VS_MONTHLY = (
    "**Whole trace against monthly.** A whole-trace number is one ratio over every job of the trace: the "
    "months with the longest queues dominate it, and a queue built up in one month carries into the next. "
    "A monthly mean gives every month the same weight, and each month starts from an empty machine. So one "
    "bad month can make a whole-trace improvement strongly negative while the monthly mean stays near zero, "
    "or the reverse: read both, and the spread across months."
)
#: Why weighted wait swings so much more than the other metrics.
WEIGHTED_WAIT_SWINGS = (
    "Weighted wait (Tang et al.'s Eq. 4) weighs each job's wait by its priority score under the policy: under "
    "FCFS the score is the wait itself, so it is sum(wait^2) / sum(wait), and under WFP it grows with the cube "
    "of wait / t_req. A handful of jobs that wait longest therefore make most of it: one job delayed by a "
    "reservation can move it by hundreds of percent while the mean wait hardly moves. Its improvements are "
    "drawn on their own axis for that reason; read them with the spread, never alone."
)
#: A run's baseline (`request` in mode `none`) shares these: the same scheduler on the same jobs.
BASELINE_KEYS = ["trace", "month", "load_factor", "replicate", "policy", "backfill", "backfill_order"]
#: The report's sections: one trace, load, policy and backfilling; rows differ by the rest.
SECTION_KEYS = ["trace", "load_factor", "policy", "backfill"]
PACKAGES = (
    "tsched",
    "numpy",
    "pandas",
    "lightgbm",
    "joblib",
    "grpcio",
    "protobuf",
    "matplotlib",
    "dask",
    "distributed",
)


@dataclass
class ReportInputs:
    """What the harness hands over: the inputs, the plan, where it ran, and every task's outcome in order."""

    traces: list[TraceInput]
    plan: EvaluationPlan
    backend: Backend
    outcomes: list[TaskOutcome]
    seconds: float
    command: str


# --- tables ----------------------------------------------------------------------------------


def improvement(baseline: pd.Series | np.ndarray, value: pd.Series | np.ndarray) -> np.ndarray:
    """(baseline - value) / baseline; NaN where the baseline is 0 (nothing to improve on)."""
    base = np.asarray(baseline, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(base != 0, (base - np.asarray(value, dtype=np.float64)) / base, np.nan)


def _baseline_values(results: pd.DataFrame, keys: list[str], selected: pd.Series) -> np.ndarray:
    """Per row, the IMPROVED_METRICS of the baseline run (among `selected` rows) that shares `keys`."""
    baselines = results[selected & (results["estimator"] == BASELINE_ESTIMATOR) & (results["mode"] == BASELINE_MODE)]
    table = baselines.set_index(keys)[list(IMPROVED_METRICS)]
    values: np.ndarray = table.reindex(pd.MultiIndex.from_frame(results[keys])).to_numpy()
    return values


def run_label(row: pd.Series, orders: int, corrections: int) -> str:
    """How tables and plots name a run: its estimator, then its backfill order and correction where they vary."""
    label = str(row["estimator"])
    if orders > 1 and row["backfill_order"] != "queue":
        label += f" ({row['backfill_order']} order)"
    if corrections > 1 and row["mode"] == "regular":
        label += f" [{row['correction']}]"
    return label


def results_table(outcomes: list[TaskOutcome]) -> pd.DataFrame:
    """One row per simulation, in task order: parameters, metrics, and improvements over the baseline.

    `improvement_*` compares a run with `request` in mode `none` under the same
    scheduler (backfill order included); where the plain queue order ran too,
    `improvement_vs_queue_*` compares it with that, Gaussier et al.'s reference
    (EASY with the users' requests). `little_queueing` marks runs whose
    baseline hardly waits: their ratios are noise.
    """
    rows = [outcome.result for outcome in outcomes if isinstance(outcome.task, SimulationTask)]
    results = pd.DataFrame(rows)
    everything = pd.Series(True, index=results.index)
    same = _baseline_values(results, BASELINE_KEYS, everything)
    queue_keys = [key for key in BASELINE_KEYS if key != "backfill_order"]
    queue = _baseline_values(results, queue_keys, results["backfill_order"] == REFERENCE_ORDER)
    for column, metric in enumerate(IMPROVED_METRICS):
        results[f"improvement_{metric}"] = improvement(same[:, column], results[metric])
    if (results["backfill_order"] != REFERENCE_ORDER).any() and not np.isnan(queue).all():
        for column, metric in enumerate(IMPROVED_METRICS):
            results[f"improvement_vs_queue_{metric}"] = improvement(queue[:, column], results[metric])
    baseline_wait = same[:, IMPROVED_METRICS.index("avg_wait")]
    results["little_queueing"] = baseline_wait < LITTLE_QUEUEING_SECONDS
    orders, corrections = results["backfill_order"].nunique(), results["correction"].nunique()
    results["run"] = [run_label(row, orders, corrections) for _, row in results.iterrows()]
    return results


def quality_table(outcomes: list[TaskOutcome]) -> pd.DataFrame:
    """The offline `predict-eval` scores, one row per trace x estimator."""
    rows = [
        {key: value for key, value in outcome.result.items() if key != "accuracy_quantiles"}
        for outcome in outcomes
        if isinstance(outcome.task, QualityTask)
    ]
    return pd.DataFrame(rows)


def accuracy_quantiles(outcomes: list[TaskOutcome]) -> dict[str, dict[str, np.ndarray]]:
    """Per trace, per estimator: evenly spaced quantiles of per-job accuracy (a CDF)."""
    curves: dict[str, dict[str, np.ndarray]] = {}
    for outcome in outcomes:
        if isinstance(outcome.task, QualityTask):
            curves.setdefault(outcome.task.trace, {})[outcome.task.estimator] = np.asarray(
                outcome.result["accuracy_quantiles"]
            )
    return curves


def monthly_table(results: pd.DataFrame) -> pd.DataFrame:
    """Tang's monthly view: each month's metrics beside that month's baseline, as a ratio and an improvement."""
    months = results[results["month"] != ""]
    table = months[[*SECTION_KEYS, "month", "backfill_order", "run", "estimator", "mode", "correction", "jobs"]].copy()
    reference = _baseline_values(months, BASELINE_KEYS, pd.Series(True, index=months.index))
    for metric in PAPER_METRICS:
        column = IMPROVED_METRICS.index(metric)
        table[metric] = months[metric]
        table[f"baseline_{metric}"] = reference[:, column]
        with np.errstate(divide="ignore", invalid="ignore"):
            table[f"{metric}_vs_baseline"] = np.where(
                reference[:, column] != 0, months[metric] / reference[:, column], np.nan
            )
        table[f"improvement_{metric}"] = months[f"improvement_{metric}"]
    table["prediction_accuracy_mean"] = months["prediction_accuracy_mean"]
    table["prediction_underestimated"] = months["prediction_underestimated"]
    return table.reset_index(drop=True)


def monthly_averages(monthly: pd.DataFrame) -> pd.DataFrame:
    """Average improvement over the months per trace x policy x backfilling x estimator x mode, with its
    spread (the interquartile range over the months: a mean alone hides how much months disagree).

    A month whose baseline metric is 0 has no improvement to average: it is
    left out of that metric's mean, and `months` counts the months simulated.
    """
    runs = monthly[~((monthly["estimator"] == BASELINE_ESTIMATOR) & (monthly["mode"] == BASELINE_MODE))]
    keys = [*SECTION_KEYS, "run", "estimator", "mode"]
    grouped = runs.groupby(keys, sort=False)
    averages = grouped.size().rename("months").to_frame()
    for metric in PAPER_METRICS:
        column = grouped[f"improvement_{metric}"]
        averages[f"improvement_{metric}"] = column.mean()
        averages[f"iqr_low_{metric}"] = column.quantile(0.25)
        averages[f"iqr_high_{metric}"] = column.quantile(0.75)
        averages[f"months_better_{metric}"] = column.agg(lambda values: int((values > 0).sum()))
    averages["prediction_accuracy_mean"] = grouped["prediction_accuracy_mean"].mean()
    return averages.reset_index()


def timings_table(outcomes: list[TaskOutcome]) -> pd.DataFrame:
    rows = []
    for outcome in outcomes:
        task = outcome.task
        row = {"task": task.index, "kind": "quality", "trace": task.trace, "month": "", "estimator": task.estimator}
        row |= {"policy": "", "backfill": "", "mode": "", "seconds": round(outcome.seconds, 3)}
        if isinstance(task, SimulationTask):
            row |= {"kind": "simulation", "month": task.month or "", "policy": task.policy}
            row |= {"backfill": task.backfill, "mode": task.mode}
        rows.append(row)
    return pd.DataFrame(rows)


#: Columns derived from a metric M: prefix, unit (None: M's), which way is better, meaning.
_DERIVED_COLUMNS: tuple[tuple[str, str | None, str, str], ...] = (
    ("improvement_vs_queue_", "fraction", "higher", "improvement of {} over the baseline in the plain queue order"),
    ("improvement_", "fraction", "higher", "improvement of {} over the baseline: (baseline - value) / baseline"),
    ("months_better_", "months", "higher", "months in which the run beat that month's baseline on {}"),
    ("iqr_low_", "fraction", "higher", "first quartile over the months of the improvement of {}"),
    ("iqr_high_", "fraction", "higher", "third quartile over the months of the improvement of {}"),
    ("baseline_", None, "-", "that month's baseline value of {}"),
)


#: dynP's counts (JSON `dynp`, flattened): a name, or a prefix ending in "_" followed by a policy or a case.
DYNP_COLUMNS: dict[str, tuple[str, str]] = {
    "dynp_decisions": ("decisions", "dynP: scheduling decisions (Streit's tries of switches)"),
    "dynp_kept": ("decisions", "dynP: decisions that kept the current policy"),
    "dynp_mean_backlog": ("jobs", "dynP: mean number of waiting jobs at a decision (Streit's Table 5)"),
    "dynp_switches_": ("decisions", "dynP: switches to {}"),
    "dynp_jobs_started_": ("jobs", "dynP: jobs started while the policy was {}"),
    "dynp_cases_": ("decisions", "dynP: decisions in Table 1's case {}"),
}


def describe_column(column: str) -> tuple[str, str, str]:
    """(unit, which way is better, meaning) of a CSV column of the report."""
    if column in PARAMETER_COLUMNS:
        unit, meaning = PARAMETER_COLUMNS[column]
        return unit, "-", meaning
    for name, (unit, meaning) in DYNP_COLUMNS.items():
        if column == name or (name.endswith("_") and column.startswith(name)):
            return unit, "-", meaning.format(column.removeprefix(name))
    for prefix, derived_unit, better, meaning in _DERIVED_COLUMNS:
        metric = column.removeprefix(prefix)
        if column.startswith(prefix) and metric in METRIC_DEFINITIONS:
            return derived_unit or METRIC_DEFINITIONS[metric][0], better, meaning.format(metric)
    if column.endswith("_vs_baseline"):
        return "ratio", "lower", f"{column.removesuffix('_vs_baseline')} / that month's baseline value"
    metric = column.removeprefix("prediction_")
    if metric in METRIC_DEFINITIONS:
        unit, better, meaning = METRIC_DEFINITIONS[metric]
        return unit, better, ("of the t_sched the simulation was given: " if metric != column else "") + meaning
    raise KeyError(f"column {column!r} has no entry in the data dictionary (report.METRIC_DEFINITIONS)")


def data_dictionary(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every column of every CSV file the report writes: its unit, which way is better, and what it is."""
    rows = [
        dict(
            zip(("file", "column", "unit", "better", "meaning"), (name, column, *describe_column(column)), strict=True)
        )
        for name, table in tables.items()
        for column in table.columns
    ]
    return pd.DataFrame(rows)


# --- markdown --------------------------------------------------------------------------------


def markdown_table(frame: pd.DataFrame, formats: dict[str, str]) -> str:
    """A GitHub table; `formats` maps a column to a format spec (NaN prints as a dash)."""

    def cell(column: str, value: Any) -> str:
        if isinstance(value, float) and np.isnan(value):
            return "-"
        spec = formats.get(column)
        return format(value, spec) if spec else str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += [
        "| " + " | ".join(cell(column, value) for column, value in zip(frame.columns, record, strict=True)) + " |"
        for record in frame.itertuples(index=False)
    ]
    return "\n".join(lines)


def _percent(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:+.1%}"


def _versions() -> str:
    found = []
    for package in PACKAGES:
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    return f"Python {platform.python_version()} ({platform.platform()}); " + ", ".join(found)


def slug(text: object) -> str:
    """A file-name-safe version of a label (a table key, whatever pandas types it as)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-")


def _quality_section(
    quality: pd.DataFrame, curves: dict[str, dict[str, np.ndarray]], out: Path, colors: dict[str, str]
) -> list[str]:
    from simulator.evaluation.plots import accuracy_cdf_plot, frontier_plot

    lines = [
        "## Prediction quality (offline replay in submission order, as `tsched predict-eval`)",
        "",
        "Each estimator learns a job's runtime once the job has ended in the trace. Accuracy is Tang et al.'s "
        "Eq. 3; NA/OE/UE/BE are the fractions of jobs not adjusted, overestimated, underestimated by at most "
        "30 minutes, and by more; lambda is mean |t_sched - t_act| / mean |t_req - t_act|.",
        "",
    ]
    for trace, table in quality.groupby("trace", sort=False):
        # every score predict-eval gives, in its order, but the median absolute error
        shown = table.drop(columns=["trace", "jobs", "medae"]).rename(
            columns={
                "accuracy_mean": "accuracy mean",
                "accuracy_median": "accuracy median",
                "mae": "MAE (s)",
                "us_per_prediction": "us/prediction",
            }
        )
        percent = dict.fromkeys(("underestimated", "NA", "OE", "UE", "BE"), ".1%")
        lines += [
            f"### {trace} ({int(table['jobs'].iloc[0])} jobs)",
            "",
            markdown_table(
                shown,
                {
                    "accuracy mean": ".3f",
                    "accuracy median": ".3f",
                    "MAE (s)": ".0f",
                    "lambda": ".3f",
                    "us/prediction": ".1f",
                    **percent,
                },
            ),
            "",
        ]
        frontier = f"frontier-{slug(trace)}.png"
        cdf = f"accuracy-cdf-{slug(trace)}.png"
        frontier_plot(table, f"{trace}: accuracy against underestimation", out / frontier, colors)
        accuracy_cdf_plot(curves[str(trace)], f"{trace}: CDF of accuracy (Tang et al. Fig. 11)", out / cdf, colors)
        lines += [f"![accuracy and underestimation]({frontier}) ![CDF of accuracy]({cdf})", ""]
    return lines


def _scheduling_section(results: pd.DataFrame, out: Path, colors: dict[str, str]) -> list[str]:
    from simulator.evaluation.plots import improvement_plot

    lines = [
        "## Scheduling (whole trace)",
        "",
        "Improvement = (baseline - value) / baseline, positive is better; the baseline is `request` in mode "
        "`none` (the users' requests, as submitted) with the same policy, backfilling and backfill order. "
        "Waits and ARTwW (Streit's response time weighted by width) in minutes; SLDwA is Streit's slowdown "
        "weighted by area.",
        "",
    ]
    whole = results[results["month"] == ""]
    replicates = whole["replicate"].nunique()
    if replicates > 1:
        lines += [
            f"Every row is the mean over {replicates} replicates (replicate 0 is the trace itself; the others move "
            f"every submission by up to {whole['jitter'].max()} s). Improvements are paired (each replicate against "
            "its own baseline) and shown as mean ± standard deviation over the replicates: a backfilling schedule "
            "is chaotic, and two runs whose difference is within the spread are not told apart.",
            "",
        ]
    for (trace, load_factor, policy, backfill), table in replicate_means(whole).groupby(SECTION_KEYS, sort=False):
        shown = pd.DataFrame(
            {
                "run": table["run"],
                "mode": table["mode"],
                "wait": table["avg_wait"] / 60,
                "slowdown": table["avg_slowdown"],
                "bounded slowdown": table["avg_bounded_slowdown"],
                "weighted wait": table["weighted_wait"] / 60,
                "ARTwW": table["artww"] / 60,
                "SLDwA": table["sldwa"],
                "utilization": table["utilization"],
                "accuracy": table["prediction_accuracy_mean"],
                **{
                    f"impr. {METRIC_TITLES[m]}": _percent_spread(
                        table[f"improvement_{m}"], table[f"sd_improvement_{m}"]
                    )
                    for m in ("avg_wait", "avg_slowdown", "avg_bounded_slowdown", "weighted_wait", "artww")
                },
            }
        )
        title, stem = _section_names(trace, load_factor, policy, backfill)
        name = f"improvement-{stem}.png"
        improvement_plot(table, f"{title}: improvement over the baseline", out / name, colors)
        lines += [f"### {title} backfilling", "", *_queueing_note(table)]
        lines += [
            markdown_table(
                shown,
                {
                    "wait": ".1f",
                    "slowdown": ".2f",
                    "bounded slowdown": ".2f",
                    "weighted wait": ".1f",
                    "ARTwW": ".1f",
                    "SLDwA": ".2f",
                    "utilization": ".3f",
                    "accuracy": ".3f",
                },
            ),
            "",
            f"![improvement over the baseline]({name})",
            "",
        ]
    return lines


def replicate_means(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run of each section: the mean over its replicates of every number, the first of every label,
    and `sd_improvement_*`, the improvements' standard deviation over the replicates (NaN for one replicate)."""
    keys = [*SECTION_KEYS, "run", "mode"]
    grouped = runs.groupby(keys, sort=False)
    numbers = [c for c in runs.columns if c not in keys and pd.api.types.is_numeric_dtype(runs[c])]
    table = grouped.first()
    table[numbers] = grouped[numbers].mean()
    table["little_queueing"] = grouped["little_queueing"].any()
    for metric in IMPROVED_METRICS:
        table[f"sd_improvement_{metric}"] = grouped[f"improvement_{metric}"].std()
    return table.reset_index()


def _percent_spread(means: pd.Series, spreads: pd.Series) -> list[str]:
    """Improvements as percentages, with ± their spread over replicates where there is one."""
    return [
        _percent(mean) + (f" ± {100 * spread:.1f}" if np.isfinite(spread) and np.isfinite(mean) else "")
        for mean, spread in zip(means, spreads, strict=True)
    ]


def _section_names(trace: object, load_factor: object, policy: object, backfill: object) -> tuple[str, str]:
    """A section's title and its plots' file-name stem."""
    load = float(str(load_factor))
    title = f"{trace}{'' if load == 1 else f', load x{load:g}'}, {policy} + {backfill}"
    return title, slug(f"{trace}{'' if load == 1 else f'-load{load:g}'}-{policy}-{backfill}")


def _queueing_note(table: pd.DataFrame) -> list[str]:
    """A warning where the baseline hardly queues: improvements of a near-zero wait are ratios of noise."""
    if not table["little_queueing"].any():
        return []
    waits = table.loc[(table["estimator"] == BASELINE_ESTIMATOR) & (table["mode"] == BASELINE_MODE), "avg_wait"]
    return [
        f"**Little queueing:** the baseline's mean wait is {waits.max():.0f} s "
        f"(under {LITTLE_QUEUEING_SECONDS:.0f} s): there is almost nothing for better estimates to improve, "
        "and the improvements below are ratios of near-zero waits, not findings.",
        "",
    ]


def _monthly_section(
    monthly: pd.DataFrame, averages: pd.DataFrame, out: Path, modes: tuple[str, ...], colors: dict[str, str]
) -> list[str]:
    from simulator.evaluation.plots import improvement_plot, monthly_plot

    lines = [
        "## Monthly evaluation (Tang et al. section 6)",
        "",
        "Each calendar month is simulated on its own from an empty machine, the predictor warmed up with the "
        "jobs that ended before the month. Each month's metrics are divided by that month's baseline "
        "(`request`, mode `none`); the tables give the average improvement over the months, in square brackets "
        "its interquartile range over the months (half the months fall within it: a wide range is noise, not "
        "a finding), and in parentheses the number of months the run beat the baseline.",
        "",
        WHOLE_VS_MONTHLY,
        "",
    ]
    for (trace, load_factor, policy, backfill), table in averages.groupby(SECTION_KEYS, sort=False):
        rows = []
        for label, runs in table.groupby("run", sort=False):
            row: dict[str, Any] = {"run": label, "months": int(runs["months"].max())}
            for mode in modes:
                run = runs[runs["mode"] == mode]
                for metric in PAPER_METRICS:
                    row[f"{mode} {METRIC_TITLES[metric]}"] = _monthly_cell(run, metric)
            rows.append(row)
        title, stem = _section_names(trace, load_factor, policy, backfill)
        lines += [f"### {title} backfilling", "", markdown_table(pd.DataFrame(rows), {}), ""]
        lines += _selective_finding(table, modes)
        section = monthly[
            (monthly["trace"] == trace)
            & (monthly["load_factor"] == load_factor)
            & (monthly["policy"] == policy)
            & (monthly["backfill"] == backfill)
        ]
        images = []
        for mode in modes:
            name = f"monthly-{stem}-{mode}.png"
            monthly_plot(
                section[section["mode"] == mode],
                table[table["mode"] == mode],
                f"{title}, mode {mode}: each month against its baseline",
                out / name,
                colors,
            )
            images.append(f"![monthly, {mode}]({name})")
        bars = f"improvement-{stem}.png"
        improvement_plot(table, f"{title}: average monthly improvement", out / bars, colors)
        lines += [" ".join(images), "", f"![average monthly improvement]({bars})", ""]
    return lines


def _monthly_cell(run: pd.DataFrame, metric: str) -> str:
    """A monthly mean, its interquartile range over the months, and the months it beat the baseline."""
    if not len(run):
        return "-"
    first = run.iloc[0]
    spread = f"{_percent(float(first[f'iqr_low_{metric}']))} to {_percent(float(first[f'iqr_high_{metric}']))}"
    return f"{_percent(float(first[f'improvement_{metric}']))} [{spread}] ({int(first[f'months_better_{metric}'])})"


def _definitions_section() -> list[str]:
    """Every metric with its unit and which way is better: a reader needs no other document."""
    table = pd.DataFrame(
        [
            {"metric": f"`{name}`", "unit": unit, "better": better, "definition": meaning}
            for name, (unit, better, meaning) in METRIC_DEFINITIONS.items()
        ]
    )
    return [
        "## Definitions",
        "",
        "Improvement of a metric = (baseline - value) / baseline: positive is better, whatever the metric's "
        "direction. The baseline is `request` in mode `none` (the users' requests, as submitted) under the same "
        "scheduler. Every column of the CSV files is described, with its unit, in `columns.csv`.",
        "",
        markdown_table(table, {}),
        "",
        WEIGHTED_WAIT_SWINGS,
        "",
    ]


def _summary(runs: pd.DataFrame, monthly: bool) -> list[str]:
    """A paragraph per trace saying which run wins each of Tang's metrics, by how much, and how often across
    months: what the tables show, in words."""
    lines = ["## Summary", ""]
    predicting = runs[~((runs["estimator"] == BASELINE_ESTIMATOR) & (runs["mode"] == BASELINE_MODE))]
    for trace, table in predicting.groupby("trace", sort=False):
        sentences = []
        for metric in PAPER_METRICS:
            column = f"improvement_{metric}"
            ranked = table.dropna(subset=[column])
            if ranked.empty:
                continue
            best = ranked.iloc[int(np.argmax(ranked[column].to_numpy()))]
            beating = int((ranked[column] > 0).sum())
            where = f"{best['policy']} + {best['backfill']}"
            verdict = "best is" if best[column] > 0 else "no run beat the baseline; the closest is"
            sentence = (
                f"{METRIC_TITLES[metric]}: {verdict} {best['run']} in mode {best['mode']} ({where}), "
                f"{_percent(float(best[column]))}"
            )
            if monthly:
                sentence += (
                    f" on average over the months (interquartile range {_percent(float(best[f'iqr_low_{metric}']))} "
                    f"to {_percent(float(best[f'iqr_high_{metric}']))}; better than the baseline in "
                    f"{int(best[f'months_better_{metric}'])} of {int(best['months'])} months)"
                )
            sentence += f"; {beating} of {len(ranked)} runs beat the baseline"
            sentences.append(sentence)
        lines += [f"**{trace}.** " + ". ".join(sentences) + ".", ""]
    return lines


def _selective_finding(averages: pd.DataFrame, modes: tuple[str, ...]) -> list[str]:
    """How often selective mode beat regular mode: the question Tang et al.'s Figures 14-17 answer."""
    if not {"regular", "selective"} <= set(modes):
        return []
    pivot = averages.pivot_table(
        index="run", columns="mode", values=[f"improvement_{m}" for m in PAPER_METRICS], sort=False
    )
    compared = better = 0
    for metric in PAPER_METRICS:
        regular = pivot[(f"improvement_{metric}", "regular")]
        selective = pivot[(f"improvement_{metric}", "selective")]
        both = regular.notna() & selective.notna()
        compared += int(both.sum())
        better += int((selective[both] > regular[both]).sum())
    return [f"Selective mode beat regular mode in {better} of {compared} estimator x metric comparisons.", ""]


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
OTHER_COLORS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a")


def estimator_color(spec: str) -> str:
    """The colour of an estimator SPEC: its estimator's when written as the bare name, else one of its own."""
    return ESTIMATOR_COLORS.get(spec) or OTHER_COLORS[zlib.crc32(spec.encode()) % len(OTHER_COLORS)]


def estimator_colors(plan: EvaluationPlan) -> dict[str, str]:
    """The colour of every estimator a plan runs (`estimator_color`)."""
    return {spec: estimator_color(spec) for spec in plan.quality_estimators}


#: The list of files a report wrote, in its folder: what `--force` may remove, and nothing else.
REPORT_MANIFEST = ".tsched-report"


def claim_report_folder(out: Path, force: bool) -> None:
    """Make sure `out` can take a report before any work starts.

    A missing or empty folder is fine. A folder holding a previous report is
    refused unless `force`, and then only that report's files (listed in its
    manifest) are removed: a user's other files are never touched.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file, not a folder for the report")
    if out.is_dir() and any(out.iterdir()):
        manifest = out / REPORT_MANIFEST
        if not force:
            what = "a previous report" if manifest.is_file() else "files"
            raise UsageError(f"--out {out}: the folder holds {what}; choose another, or --force to replace a report")
        if manifest.is_file():
            for name in manifest.read_text().splitlines():
                (out / name).unlink(missing_ok=True)
            manifest.unlink()
    out.mkdir(parents=True, exist_ok=True)
    if not os.access(out, os.W_OK):
        raise UsageError(f"--out {out}: the folder is not writable")


def write_report(out: Path, inputs: ReportInputs) -> Path:
    """Write report.md, the CSV files and the plots into `out` (claimed by `claim_report_folder`), and the
    manifest of what was written; return report.md's path."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    plan = inputs.plan
    colors = estimator_colors(plan)
    results = results_table(inputs.outcomes)
    quality = quality_table(inputs.outcomes)
    results.to_csv(out / "results.csv", index=False)
    quality.to_csv(out / "quality.csv", index=False)
    timings = timings_table(inputs.outcomes)
    timings.to_csv(out / "timings.csv", index=False)
    simulations = int((timings["kind"] == "simulation").sum())

    lines = [
        "# tsched evaluation report",
        "",
        f"{simulations} simulations and {len(quality)} offline prediction-quality replays on "
        f"{len(inputs.traces)} trace(s), {inputs.backend.describe()}; {clock(inputs.seconds)} wall time, "
        f"finished {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    fallbacks = int(results["predictor_fallbacks"].sum())
    if fallbacks:
        worst = float(results["predictor_fallback_share"].max())
        lines += [
            f"**Warning:** {fallbacks} predictions fell back to t_req because the predictor service did not "
            f"answer in time (at most {worst:.2%} of a run's jobs); those runs are not exactly what the estimator "
            "would have done (columns `predictor_fallbacks` and `predictor_fallback_share` of results.csv). "
            "Run again with `--in-process` to avoid it.",
            "",
        ]
    tables = {"results.csv": results, "quality.csv": quality}
    if plan.monthly:
        monthly = monthly_table(results)
        averages = monthly_averages(monthly)
        monthly.to_csv(out / "monthly.csv", index=False)
        tables["monthly.csv"] = monthly
        lines += _summary(averages, monthly=True)
    else:
        lines += _summary(replicate_means(results[results["month"] == ""]), monthly=False)
    data_dictionary(tables).to_csv(out / "columns.csv", index=False)
    lines += _definitions_section()
    lines += _quality_section(quality, accuracy_quantiles(inputs.outcomes), out, colors)
    if plan.monthly:
        lines += _monthly_section(monthly, averages, out, plan.modes, colors)
    else:
        lines += _scheduling_section(results, out, colors)
    lines += _reproduce_section(inputs)
    slowest = timings.sort_values("seconds", ascending=False, kind="stable").head(5)
    lines += [
        "## Files",
        "",
        "- `results.csv`: one row per simulation: every parameter, every metric, the estimates' quality "
        "(`prediction_*`) and the improvements over the baseline (`improvement_*`).",
        "- `quality.csv`: the offline prediction quality, one row per trace x estimator.",
        *(
            [
                "- `monthly.csv`: one row per month x run: the metric, that month's baseline, their ratio and "
                "the improvement."
            ]
            if plan.monthly
            else []
        ),
        "- `columns.csv`: the data dictionary: every column of the files above, its unit, which way is "
        "better, and what it is.",
        "- `timings.csv`: seconds per task (not part of the results: they vary from run to run).",
        "",
        "Slowest tasks:",
        "",
        markdown_table(slowest, {"seconds": ".2f"}),
        "",
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    written = sorted(path.name for path in set(out.iterdir()) - before)
    (out / REPORT_MANIFEST).write_text("".join(f"{name}\n" for name in written))
    return report


def _reproduce_section(inputs: ReportInputs) -> list[str]:
    plan = inputs.plan
    default_correction = SimulationConfig.__dataclass_fields__["correction"].default
    traces = pd.DataFrame(
        [
            {
                "trace": entry.label,
                "source": entry.provenance,
                "jobs": len(entry.trace.jobs),
                "skipped": "; ".join(f"{reason}: {count}" for reason, count in entry.trace.skipped.items()) or "none",
                "processors": entry.trace.machine_procs(plan.procs),
                "months": len(months_with_jobs(entry.trace)),
            }
            for entry in inputs.traces
        ]
    )
    estimators = pd.DataFrame(
        [{"SPEC": spec, "with every parameter": f"`{make_estimator(spec).spec}`"} for spec in plan.quality_estimators]
    )
    return [
        "## Reproduce",
        "",
        "```",
        inputs.command,
        "```",
        "",
        f"- Versions: {_versions()}.",
        f"- Policies: {', '.join(plan.policies)}; backfilling: {', '.join(plan.backfills)}; modes: "
        f"{', '.join(plan.modes)} (plus the baseline, `{BASELINE_ESTIMATOR}` in mode `{BASELINE_MODE}`; "
        f"`{BASELINE_ESTIMATOR}` is not run in the other modes, where it would be the baseline again); "
        f"running-job correction: {default_correction}; "
        f"periods: {'each calendar month' if plan.monthly else 'the whole trace'}.",
        "- Seeds: a generated workload's seed is in its source below; an estimator's seed, if it has one, is "
        "among its full parameters below.",
        "",
        markdown_table(traces, {}),
        "",
        markdown_table(estimators, {}),
        "",
    ]
