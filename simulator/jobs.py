"""The scheduler's view of jobs.

These classes deliberately have no actual-runtime field: queue policies and
backfilling only ever see estimates. The engine keeps actual runtimes to
itself and uses them only to tell the event loop when a started job ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WaitingJob:
    """A queued job as the scheduler knows it."""

    index: int  # position in the replayed trace
    job_id: int
    submit: int
    size: int
    t_req: int
    t_est: int  # the estimate the scheduler plans with (t_sched or t_req)


@dataclass(slots=True)
class RunningJob:
    """A started job as the scheduler knows it: when it expects it to end."""

    index: int
    size: int
    start: int
    t_req: int
    expected_end: int
    corrections: int = 0  # how many times the expected end was pushed back
