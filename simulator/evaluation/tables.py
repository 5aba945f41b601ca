"""The evaluation's tables, computed from the task outcomes alone: one row per simulation, with its improvements.

Improvement of a metric over the baseline is (baseline - value) / baseline
(docs/definitions.md): positive is better. The baseline of a run is `request`
in mode `none` on the same trace, period, load, replicate, policy, backfilling
and backfill order. Nothing here writes a file: `simulator.evaluation.report`
does, so that a report can be checked against its own results.csv.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.evaluation.plan import (
    BASELINE_ESTIMATOR,
    BASELINE_MODE,
    CORRECTED_MODE,
    REFERENCE_ORDER,
    QualityResult,
    SimulationTask,
    TaskOutcome,
)
from simulator.metrics import SCHEDULING_METRICS
from simulator.summary import RunSummary

#: Metrics whose improvement over the baseline is computed for every run (utilisation and makespan are
#: reported, not compared: they follow the trace more than the scheduler).
IMPROVED_METRICS = tuple(metric for metric in SCHEDULING_METRICS if metric not in ("utilization", "makespan"))
#: Tang et al.'s three metrics (their Figures 14-17).
PAPER_METRICS = ("avg_wait", "avg_slowdown", "weighted_wait")

#: Below this mean wait (seconds) the baseline hardly queues: ratios of its waits say nothing.
LITTLE_QUEUEING_SECONDS = 60.0

#: A run's baseline (`request` in mode `none`) shares these: the same scheduler on the same jobs.
BASELINE_KEYS = ["trace", "month", "load_factor", "replicate", "policy", "backfill", "backfill_order"]
#: The report's sections: one trace, load, policy and backfilling; rows differ by the rest.
SECTION_KEYS = ["trace", "load_factor", "policy", "backfill"]


def improvement(baseline: pd.Series | np.ndarray, value: pd.Series | np.ndarray) -> np.ndarray:
    """(baseline - value) / baseline; NaN where the baseline is 0 (nothing to improve on)."""
    base = np.asarray(baseline, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(base != 0, (base - np.asarray(value, dtype=np.float64)) / base, np.nan)


def is_baseline(runs: pd.DataFrame) -> pd.Series:
    """Which rows are baseline runs (`request` in mode `none`)."""
    return (runs["estimator"] == BASELINE_ESTIMATOR) & (runs["mode"] == BASELINE_MODE)


def _baseline_values(results: pd.DataFrame, keys: list[str], selected: pd.Series) -> np.ndarray:
    """Per row, the IMPROVED_METRICS of the baseline run (among `selected` rows) that shares `keys`."""
    baselines = results[selected & is_baseline(results)]
    table = baselines.set_index(keys)[list(IMPROVED_METRICS)]
    values: np.ndarray = table.reindex(pd.MultiIndex.from_frame(results[keys])).to_numpy()
    return values


def run_labels(results: pd.DataFrame) -> pd.Series:
    """How tables and plots name each run: its estimator, then its backfill order and its correction where
    they vary (a correction only in the mode that corrects)."""
    labels = results["estimator"].astype(str)
    if results["backfill_order"].nunique() > 1:
        other_order = results["backfill_order"] != REFERENCE_ORDER
        labels = labels.where(~other_order, labels + " (" + results["backfill_order"].astype(str) + " order)")
    if results["correction"].nunique() > 1:
        corrected = results["mode"] == CORRECTED_MODE
        labels = labels.where(~corrected, labels + " [" + results["correction"].astype(str) + "]")
    return labels


def results_table(outcomes: list[TaskOutcome]) -> pd.DataFrame:
    """One row per simulation, in task order: parameters, metrics, and improvements over the baseline.

    `improvement_*` compares a run with `request` in mode `none` under the same
    scheduler (backfill order included); where the plain queue order ran too,
    `improvement_vs_queue_*` compares it with that, Gaussier et al.'s reference
    (EASY with the users' requests). `little_queueing` marks runs whose
    baseline hardly waits: their ratios are noise.
    """
    rows = [outcome.result.to_row(outcome.task.trace) for outcome in outcomes if isinstance(outcome.result, RunSummary)]
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
    results["run"] = run_labels(results)
    return results


def quality_table(outcomes: list[TaskOutcome]) -> pd.DataFrame:
    """The offline `predict-eval` scores, one row per trace x estimator."""
    return pd.DataFrame([outcome.result.to_row() for outcome in outcomes if isinstance(outcome.result, QualityResult)])


def accuracy_quantiles(outcomes: list[TaskOutcome]) -> dict[str, dict[str, np.ndarray]]:
    """Per trace, per estimator: evenly spaced quantiles of per-job accuracy (a CDF)."""
    curves: dict[str, dict[str, np.ndarray]] = {}
    for outcome in outcomes:
        if isinstance(outcome.result, QualityResult):
            curves.setdefault(outcome.task.trace, {})[outcome.task.estimator] = np.asarray(
                outcome.result.accuracy_quantiles
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
    runs = monthly[~is_baseline(monthly)]
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
