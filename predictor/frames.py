"""A trace's job table (a pandas DataFrame) as the predictor's job types.

The columns are the `JobRequest` fields (`kernel.jobs.JOB_FIELDS`) plus
`t_act` (the runtime, capped at t_req) and `end` (when the job ended in the
trace); the resource fields (`nodes`, `memory_mb`, `gpus`, `qos`,
`exclusive`) are read where a log has them (sacct, PBS) and unset where it
does not (SWF). Offline replay, training and the simulator read traces through these
conversions, so a trace is turned into jobs in one way only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pandas as pd

from kernel.errors import TraceError
from kernel.jobs import JOB_FIELDS, LEGACY_FIELD_COUNT, REQUIRED_FIELD_NAMES, FinishedJob, JobRequest


class TraceHeader(Protocol):
    @property
    def unix_start_time(self) -> int | None:
        """The trace's second 0 as a Unix time, when known."""


class TraceLike(Protocol):
    """What the predictor needs of a parsed trace (`simulator.workloads.trace.Trace` fits): `predictor` reads
    trace files through whoever supplies them, and never imports the simulator."""

    @property
    def path(self) -> str: ...

    @property
    def jobs(self) -> pd.DataFrame:
        """One row per replayable job, with at least `REQUIRED_COLUMNS`."""

    @property
    def header(self) -> TraceHeader: ...


#: JobRequest's fields, in constructor order, are read from the columns of the same name: these always.
REQUEST_COLUMNS = REQUIRED_FIELD_NAMES
#: The resource fields after them, with the value each takes in a table without the column.
RESOURCE_COLUMNS = {field.name: field.unset for field in JOB_FIELDS[LEGACY_FIELD_COUNT:]}
#: What a finished job adds: its runtime (capped at t_req) and when it ended.
REQUIRED_COLUMNS = (*REQUEST_COLUMNS, "t_act", "end")


def _check_columns(df: pd.DataFrame, required: Sequence[str] = REQUIRED_COLUMNS) -> None:
    missing = [column for column in required if column not in df.columns]
    if missing:
        raise TraceError(f"job table lacks column(s) {', '.join(missing)}")
    not_integer = [column for column in required if df[column].dtype.kind not in "iu"]
    if not_integer:
        raise TraceError(f"job table column(s) {', '.join(not_integer)} must hold integers")


def in_submission_order(df: pd.DataFrame) -> pd.DataFrame:
    """The job table checked and sorted by (submit, job id): the order jobs are predicted in."""
    _check_columns(df)
    return df.sort_values(["submit", "job_id"], kind="stable")


def _requests(df: pd.DataFrame) -> list[JobRequest]:
    columns = [df[name].to_numpy().tolist() for name in REQUEST_COLUMNS]
    if any(name in df.columns for name in RESOURCE_COLUMNS):
        _check_columns(df, [name for name in RESOURCE_COLUMNS if name in df.columns])
        columns += [
            df[name].to_numpy().tolist() if name in df.columns else [unset] * len(df)
            for name, unset in RESOURCE_COLUMNS.items()
        ]
    return [JobRequest(*row) for row in zip(*columns, strict=True)]


def finished_in_end_order(requests: Sequence[JobRequest], df: pd.DataFrame) -> list[FinishedJob]:
    """`requests` (the rows of `df`, in order) as finished jobs, in the order an estimator must observe them."""
    jobs = [
        FinishedJob(request, end, runtime)
        for request, end, runtime in zip(
            requests, df["end"].to_numpy().tolist(), df["t_act"].to_numpy().tolist(), strict=True
        )
    ]
    jobs.sort(key=lambda job: (job.end, job.request.submit, job.request.job_id))
    return jobs


def jobs_to_requests(df: pd.DataFrame) -> list[JobRequest]:
    """The submit-time view of every job of a trace, in the frame's row order."""
    _check_columns(df, REQUEST_COLUMNS)
    return _requests(df)


def finished_from_frame(df: pd.DataFrame) -> list[FinishedJob]:
    """Every job of a trace as finished (end = trace end, runtime = t_act), in end order."""
    _check_columns(df)
    return finished_in_end_order(_requests(df), df)
