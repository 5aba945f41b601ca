"""The two views of a job an estimator may see.

`JobRequest` is what a scheduler knows when a job is submitted: it has no
runtime field, so nothing that predicts from it can read the job's future.
`FinishedJob` is what the estimator learns once the job has ended.

They are named tuples: immutable, with no room for an attribute added later,
and several times cheaper to build than frozen dataclasses, which matters
because a service batch or a simulation builds one per job.
"""
from __future__ import annotations

from typing import NamedTuple


class JobRequest(NamedTuple):
    """A job as submitted: everything known before it runs (integer ids, seconds)."""

    job_id: int
    submit: int
    user: int
    group: int
    t_req: int
    procs: int
    queue: int = -1
    executable: int = -1


class FinishedJob(NamedTuple):
    """A job that has ended: its request plus when it ended and how long it ran.

    `runtime` is t_act, already capped at t_req.
    """

    request: JobRequest
    end: int
    runtime: int

    @property
    def ratio(self) -> float:
        """R = t_act / t_req, capped at 1 (Tang et al. Eq. 1)."""
        return min(1.0, self.runtime / self.request.t_req)


class Prediction(NamedTuple):
    """An estimate t_sched with its explanation.

    `factor` is Tang's A where the estimator has one; `basis` is how many
    history jobs the estimate rests on; `fallback` is true when the estimator
    had too little history and answered t_req.
    """

    t_sched: int
    factor: float | None
    basis: int
    fallback: bool


def clamp_estimate(value: float, t_req: int) -> int:
    """Every estimate is capped at t_req and floored at 1 s (paper-decisions.md)."""
    if value != value:  # NaN
        return t_req
    return int(max(1, min(t_req, round(value))))
