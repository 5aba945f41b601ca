"""The report's data dictionary: every column of its CSV files, with its unit, which way is better, and what it is.

`METRIC_DEFINITIONS` is the one list of the metrics' definitions: the
report's definitions section and columns.csv are both written from it, and a
column without an entry is refused rather than left unexplained.
"""

from __future__ import annotations

import pandas as pd

from simulator.evaluation.tables import LITTLE_QUEUEING_SECONDS

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
    "awrt": (
        "seconds",
        "lower",
        "area-weighted response time (Goponenko et al., SBAC-PAD 2022): sum(size x run x response) / sum(size x run)",
    ),
    "max_wait": ("seconds", "lower", "the longest wait of any job"),
    "p95_wait_widest": (
        "seconds",
        "lower",
        "95th percentile of the waits of the widest tenth of the jobs (every job at least as wide as the "
        "ceil(n / 10)-th widest)",
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
    "max_reservation_delay": (
        "seconds",
        "EASY: how far backfilled jobs may push the head job past its first reservation before candidates are "
        "judged with their requests (empty: no bound)",
    ),
    "procs": ("processors", "machine size"),
    "jobs": ("jobs", "jobs simulated or replayed"),
    "skipped": ("jobs by reason", "trace jobs not replayed"),
    "node_failures": (
        "runs",
        "runs ended by a node going down, each of a requeued job's counted (`--node-events`, the slurm scheduler)",
    ),
    "predictor_fallbacks": ("jobs", "jobs given t_req because the service did not answer"),
    "predictor_fallback_share": ("fraction", "the same as a share of the jobs"),
    "little_queueing": ("true/false", f"the baseline's mean wait is under {LITTLE_QUEUEING_SECONDS:g} s"),
    "run": ("-", "how tables and plots name the run"),
    "us_per_prediction": ("microseconds", "prediction cost per job"),
    "fallback": ("fraction", "jobs given their request for want of history (1: the estimator never predicted)"),
    "months": ("months", "months simulated"),
}

#: Columns derived from a metric M: prefix, unit (None: M's), which way is better, meaning.
_DERIVED_COLUMNS: tuple[tuple[str, str | None, str, str], ...] = (
    ("improvement_vs_queue_", "fraction", "higher", "improvement of {} over the baseline in the plain queue order"),
    ("improvement_", "fraction", "higher", "improvement of {} over the baseline: (baseline - value) / baseline"),
    ("months_better_", "months", "higher", "months in which the run beat that month's baseline on {}"),
    ("iqr_low_", "fraction", "higher", "first quartile over the months of the improvement of {}"),
    ("iqr_high_", "fraction", "higher", "third quartile over the months of the improvement of {}"),
    ("baseline_", None, "-", "that month's baseline value of {}"),
)


#: dynP's summary (JSON `dynp`, flattened into columns): its totals,
DYNP_COLUMNS: dict[str, tuple[str, str]] = {
    "dynp_decisions": ("decisions", "dynP: scheduling decisions (Streit's tries of switches)"),
    "dynp_kept": ("decisions", "dynP: decisions that kept the current policy"),
    "dynp_mean_backlog": ("jobs", "dynP: mean number of waiting jobs at a decision (Streit's Table 5)"),
}
#: and its counts, a column per policy or case: the prefix, then the policy or the case.
DYNP_COUNTS: dict[str, tuple[str, str]] = {
    "dynp_switches_": ("decisions", "dynP: switches to {}"),
    "dynp_jobs_started_": ("jobs", "dynP: jobs started while the policy was {}"),
    "dynp_cases_": ("decisions", "dynP: decisions in Table 1's case {}"),
}


def describe_column(column: str) -> tuple[str, str, str]:
    """(unit, which way is better, meaning) of a CSV column of the report."""
    for named in (PARAMETER_COLUMNS, DYNP_COLUMNS):
        if column in named:
            unit, meaning = named[column]
            return unit, "-", meaning
    for prefix, (unit, meaning) in DYNP_COUNTS.items():
        if column.startswith(prefix):
            return unit, "-", meaning.format(column.removeprefix(prefix))
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
    raise KeyError(f"column {column!r} has no entry in the data dictionary (simulator.evaluation.columns)")


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
