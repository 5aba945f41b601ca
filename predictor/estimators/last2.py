"""Tsafrir, Etsion & Feitelson (2007): the mean runtime of the user's last two finished jobs."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar

from kernel.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate
from predictor.estimators.history_based import HistoryEstimator
from predictor.history import KeyedHistory

#: How many of the user's latest jobs the estimate averages.
RECENT_JOBS = 2


@dataclass(kw_only=True, eq=False, repr=False)
class LastTwoEstimator(HistoryEstimator[int]):
    """Mean t_act of the same user's two most recently finished jobs, capped at t_req.

    "Most recently finished" is by end time at or before the submission; jobs
    that ended at the same second keep the order they were observed in.
    """

    name: ClassVar[str] = "last2"

    def _initialise(self) -> None:
        self._history: KeyedHistory[int] = KeyedHistory(attrgetter("user"))

    def _value(self, job: FinishedJob) -> int:
        return job.runtime

    def predict(self, job: JobRequest) -> Prediction:
        series = self._history.series(job)
        recent = [] if series is None else series.latest(job.submit, RECENT_JOBS)
        if len(recent) < RECENT_JOBS:
            return Prediction(t_sched=job.t_req, factor=None, basis=len(recent), fallback=True)
        t_sched = clamp_estimate(sum(recent) / RECENT_JOBS, job.t_req)
        return Prediction(t_sched=t_sched, factor=None, basis=RECENT_JOBS, fallback=False)
