"""The evaluation report: report.md, the CSV files beside it (with their data dictionary) and its plots.

Every number is read from the tables of `simulator.evaluation.tables`, which
are computed from the task outcomes alone, so a report can be checked
against its own results.csv. The whole-trace and the monthly protocol each
write their own summary, section and files (`WholeTraceView`, `MonthlyView`).
"""

from __future__ import annotations

import os
import platform
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel.errors import UsageError
from simulator.engine import SimulationConfig
from simulator.estimators import make_estimator
from simulator.evaluation.columns import METRIC_DEFINITIONS, data_dictionary
from simulator.evaluation.plan import (
    BASELINE_ESTIMATOR,
    BASELINE_MODE,
    Backend,
    EvaluationPlan,
    TaskOutcome,
    TraceInput,
    clock,
    months_with_jobs,
)
from simulator.evaluation.tables import (
    LITTLE_QUEUEING_SECONDS,
    PAPER_METRICS,
    SECTION_KEYS,
    accuracy_quantiles,
    is_baseline,
    monthly_averages,
    monthly_table,
    quality_table,
    replicate_means,
    results_table,
    timings_table,
)
from simulator.workloads.trace import Trace

#: How the report names each metric.
METRIC_TITLES = {
    "avg_wait": "wait",
    "avg_response": "response",
    "avg_slowdown": "slowdown",
    "avg_bounded_slowdown": "bounded slowdown",
    "weighted_wait": "weighted wait",
    "weighted_wait_wfp": "weighted wait (WFP score)",
    "artww": "ARTwW",
    "sldwa": "SLDwA",
    "awrt": "AWRT",
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
    """Per trace, load, policy and backfilling: every run's metrics and improvements, and their plot."""
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
        title, stem = _section_names(trace, load_factor, policy, backfill)
        lines += _scheduling_table(table, title, stem, out, colors)
    return lines


#: The improvements the whole-trace tables show, and how each column of theirs is printed.
SCHEDULING_IMPROVEMENTS = ("avg_wait", "avg_slowdown", "avg_bounded_slowdown", "weighted_wait", "artww", "awrt")
SCHEDULING_FORMATS = {
    "wait": ".1f",
    "slowdown": ".2f",
    "bounded slowdown": ".2f",
    "weighted wait": ".1f",
    "ARTwW": ".1f",
    "SLDwA": ".2f",
    "AWRT": ".1f",
    "longest wait": ".0f",
    "p95 wait, widest tenth": ".0f",
    "utilization": ".3f",
    "accuracy": ".3f",
}


def _scheduling_table(table: pd.DataFrame, title: str, stem: str, out: Path, colors: dict[str, str]) -> list[str]:
    """One section of the whole-trace runs: its table (waits in minutes) and its improvement plot."""
    from simulator.evaluation.plots import improvement_plot

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
            "AWRT": table["awrt"] / 60,
            "longest wait": table["max_wait"] / 60,
            "p95 wait, widest tenth": table["p95_wait_widest"] / 60,
            "utilization": table["utilization"],
            "accuracy": table["prediction_accuracy_mean"],
            **{
                f"impr. {METRIC_TITLES[m]}": _percent_spread(table[f"improvement_{m}"], table[f"sd_improvement_{m}"])
                for m in SCHEDULING_IMPROVEMENTS
            },
        }
    )
    name = f"improvement-{stem}.png"
    improvement_plot(table, f"{title}: improvement over the baseline", out / name, colors)
    return [
        f"### {title} backfilling",
        "",
        *_queueing_note(table),
        markdown_table(shown, SCHEDULING_FORMATS),
        "",
        f"![improvement over the baseline]({name})",
        "",
    ]


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
    waits = table.loc[is_baseline(table), "avg_wait"]
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


def _summary(runs: pd.DataFrame, spread: Callable[[pd.Series, str], str], order: SummaryOrder) -> list[str]:
    """A paragraph per trace saying which run wins each of Tang's metrics, by how much, and (`spread`: what
    the protocol adds of the best run on a metric) how often across months: what the tables show, in words.
    The metrics come in `order`, the ones whose improvements hold across months or replicates first."""
    lines = ["## Summary", "", order.said, ""]
    predicting = runs[~is_baseline(runs)]
    for trace, table in predicting.groupby("trace", sort=False):
        sentences = []
        for metric in order.metrics:
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
            sentence += spread(best, metric) + f"; {beating} of {len(ranked)} runs beat the baseline"
            sentences.append(sentence)
        lines += [f"**{trace}.** " + ". ".join(sentences) + ".", ""]
    return lines


@dataclass(frozen=True)
class SummaryOrder:
    """The order the summary gives Tang's metrics in, and the sentence that says why."""

    metrics: tuple[str, ...]
    said: str

    @classmethod
    def by(cls, agreement: dict[str, float], over: str, measure: str) -> SummaryOrder:
        """Most consistent first: `agreement` is, per metric, the share of runs (or months) whose improvement
        keeps its sign `over` the months or replicates, as `measure` says (NaN: the metric was never measured)."""
        known = {metric: 0.0 if pd.isna(share) else share for metric, share in agreement.items()}
        metrics = tuple(sorted(known, key=lambda metric: (-known[metric], PAPER_METRICS.index(metric))))
        shares = ", ".join(f"{METRIC_TITLES[metric]} {known[metric]:.0%}" for metric in metrics)
        return cls(
            metrics, f"The metrics in the order their improvements hold {over}, by the share of {measure}: {shares}."
        )


#: With one draw per run there is no spread to order by: weighted wait, which a handful of waits make, comes last.
ONE_DRAW_ORDER = SummaryOrder(
    ("avg_wait", "avg_slowdown", "weighted_wait"),
    "One simulation per run: no spread shows which differences are noise, and weighted wait, which a handful of "
    "long waits make (see the definitions), comes last. Run `--replicates 3` or more (or `--monthly`) to see "
    "how much each improvement swings.",
)


def _replicate_spread(best: pd.Series, metric: str) -> str:
    """The standard deviation of a mean improvement over its replicates, in words (nothing for one replicate)."""
    deviation = best[f"sd_improvement_{metric}"]
    return "" if pd.isna(deviation) else f" (standard deviation {_percent(float(deviation))} over the replicates)"


def _monthly_spread(best: pd.Series, metric: str) -> str:
    """A monthly mean's interquartile range over the months, and the months it beat the baseline, in words."""
    return (
        f" on average over the months (interquartile range {_percent(float(best[f'iqr_low_{metric}']))} "
        f"to {_percent(float(best[f'iqr_high_{metric}']))}; better than the baseline in "
        f"{int(best[f'months_better_{metric}'])} of {int(best['months'])} months)"
    )


def _selective_finding(averages: pd.DataFrame, modes: tuple[str, ...]) -> list[str]:
    """How often selective mode beat regular mode: the question Tang et al.'s Figures 14-17 answer."""
    if not {"regular", "selective"} <= set(modes):
        return []
    improvements = [f"improvement_{m}" for m in PAPER_METRICS]
    pivot = averages.pivot_table(index="run", columns="mode", values=improvements, sort=False).reindex(
        columns=pd.MultiIndex.from_product([improvements, ["regular", "selective"]])
    )  # a metric no run has (dynP's weighted wait) is a column of NaN, compared nowhere
    compared = better = 0
    for metric in PAPER_METRICS:
        regular = pivot[(f"improvement_{metric}", "regular")]
        selective = pivot[(f"improvement_{metric}", "selective")]
        both = regular.notna() & selective.notna()
        compared += int(both.sum())
        better += int((selective[both] > regular[both]).sum())
    return [f"Selective mode beat regular mode in {better} of {compared} estimator x metric comparisons.", ""]


class PeriodView(ABC):
    """What the report says of its simulations under one protocol: its summary, its section, its own files."""

    #: How the reproduce section names the periods simulated.
    periods: str
    #: The protocol's own CSV files, and the lines that describe them in the files section.
    tables: dict[str, pd.DataFrame]
    files: list[str]

    @abstractmethod
    def summary(self) -> list[str]:
        """Which run wins each of Tang's metrics, per trace, in words."""

    @abstractmethod
    def section(self, out: Path, modes: tuple[str, ...], colors: dict[str, str]) -> list[str]:
        """The tables and plots of the scheduling runs, their PNGs written into `out`."""


class WholeTraceView(PeriodView):
    """Each trace simulated whole: a row is a run's mean over its replicates."""

    periods = "the whole trace"

    def __init__(self, results: pd.DataFrame) -> None:
        self.results = results
        self.tables = {}
        self.files = []

    def summary(self) -> list[str]:
        runs = self.results[self.results["month"] == ""]
        means = replicate_means(runs)
        if runs["replicate"].nunique() < 2:
            return _summary(means, _replicate_spread, ONE_DRAW_ORDER)
        predicting = means[~is_baseline(means)]
        agreement = {  # runs whose mean improvement is larger than its spread over the replicates
            metric: float((predicting[f"improvement_{metric}"].abs() > predicting[f"sd_improvement_{metric}"]).mean())
            for metric in PAPER_METRICS
        }
        order = SummaryOrder.by(
            agreement, "over the replicates", "runs whose mean improvement is larger than its standard deviation"
        )
        return _summary(means, _replicate_spread, order)

    def section(self, out: Path, modes: tuple[str, ...], colors: dict[str, str]) -> list[str]:
        return _scheduling_section(self.results, out, colors)


class MonthlyView(PeriodView):
    """Tang et al.'s protocol: each calendar month against its own baseline, then averaged over the months."""

    periods = "each calendar month"

    def __init__(self, results: pd.DataFrame) -> None:
        self.monthly = monthly_table(results)
        self.averages = monthly_averages(self.monthly)
        self.tables = {"monthly.csv": self.monthly}
        self.files = [
            "- `monthly.csv`: one row per month x run: the metric, that month's baseline, their ratio and the "
            "improvement."
        ]

    def summary(self) -> list[str]:
        agreement = {}  # months on the side of their run's mean improvement
        for metric in PAPER_METRICS:
            better = self.averages[f"months_better_{metric}"] / self.averages["months"]
            positive = self.averages[f"improvement_{metric}"] > 0
            agreement[metric] = float(better.where(positive, 1 - better).mean())
        order = SummaryOrder.by(agreement, "over the months", "months on the side of their run's mean improvement")
        return _summary(self.averages, _monthly_spread, order)

    def section(self, out: Path, modes: tuple[str, ...], colors: dict[str, str]) -> list[str]:
        return _monthly_section(self.monthly, self.averages, out, modes, colors)


def write_report(out: Path, inputs: ReportInputs) -> Path:
    """Write report.md, the CSV files and the plots into `out` (claimed by `claim_report_folder`), and the
    manifest of what was written; return report.md's path."""
    from simulator.evaluation.plots import estimator_colors

    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    colors = estimator_colors(inputs.plan.quality_estimators)
    results = results_table(inputs.outcomes)
    quality = quality_table(inputs.outcomes)
    timings = timings_table(inputs.outcomes)
    view: PeriodView = MonthlyView(results) if inputs.plan.monthly else WholeTraceView(results)
    tables = {"results.csv": results, "quality.csv": quality, **view.tables}
    for name, table in {**tables, "timings.csv": timings}.items():
        table.to_csv(out / name, index=False)
    data_dictionary(tables).to_csv(out / "columns.csv", index=False)
    lines = [
        *_headline(inputs, results, len(quality), timings),
        *view.summary(),
        *_definitions_section(),
        *_quality_section(quality, accuracy_quantiles(inputs.outcomes), out, colors),
        *view.section(out, inputs.plan.modes, colors),
        *_reproduce_section(inputs, view.periods),
        *_files_section(view.files, timings),
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    written = sorted(path.name for path in set(out.iterdir()) - before)
    (out / REPORT_MANIFEST).write_text("".join(f"{name}\n" for name in written))
    return report


def _headline(inputs: ReportInputs, results: pd.DataFrame, quality_replays: int, timings: pd.DataFrame) -> list[str]:
    """What ran, where and for how long; a warning when predictions fell back to the requests."""
    simulations = int((timings["kind"] == "simulation").sum())
    lines = [
        "# tsched evaluation report",
        "",
        f"{simulations} simulations and {quality_replays} offline prediction-quality replays on "
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
    return lines


def _files_section(protocol_files: list[str], timings: pd.DataFrame) -> list[str]:
    """What each file of the report folder holds, and the slowest tasks."""
    slowest = timings.sort_values("seconds", ascending=False, kind="stable").head(5)
    return [
        "## Files",
        "",
        "- `results.csv`: one row per simulation: every parameter, every metric, the estimates' quality "
        "(`prediction_*`) and the improvements over the baseline (`improvement_*`).",
        "- `quality.csv`: the offline prediction quality, one row per trace x estimator.",
        *protocol_files,
        "- `columns.csv`: the data dictionary: every column of the files above, its unit, which way is "
        "better, and what it is.",
        "- `timings.csv`: seconds per task (not part of the results: they vary from run to run).",
        "",
        "Slowest tasks:",
        "",
        markdown_table(slowest, {"seconds": ".2f"}),
        "",
    ]


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


def _processors(trace: Trace, procs: int | None) -> str:
    """The machine's size a trace was simulated on, and where it came from when that was a guess."""
    size = trace.machine_size(procs)
    return f"{size.procs} (a guess: {size.source})" if size.guessed else str(size.procs)


def _reproduce_section(inputs: ReportInputs, periods: str) -> list[str]:
    """The command that repeats the evaluation, the versions, and every trace and estimator in full."""
    plan = inputs.plan
    default_correction = SimulationConfig.__dataclass_fields__["correction"].default
    traces = pd.DataFrame(
        [
            {
                "trace": entry.label,
                "source": entry.provenance,
                "jobs": len(entry.trace.jobs),
                "skipped": "; ".join(f"{reason}: {count}" for reason, count in entry.trace.skipped.items()) or "none",
                "zone": entry.trace.header.time_zone_string or "-",
                "processors": _processors(entry.trace, plan.procs),
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
        f"periods: {periods}.",
        "- Seeds: a generated workload's seed is in its source below; an estimator's seed, if it has one, is "
        "among its full parameters below.",
        "",
        markdown_table(traces, {}),
        "",
        markdown_table(estimators, {}),
        "",
    ]
