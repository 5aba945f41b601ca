"""Tsafrir, Etsion & Feitelson (2007): the mean runtime of the user's last two finished jobs."""
from __future__ import annotations

from predictor.estimators.base import Estimator
from predictor.history import EndSeries
from predictor.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate

#: How many of the user's latest jobs the estimate averages.
RECENT_JOBS = 2


class LastTwoEstimator(Estimator):
    """Mean t_act of the same user's two most recently finished jobs, capped at t_req.

    "Most recently finished" is by end time at or before the submission; jobs
    that ended at the same second keep the order they were observed in.
    """

    name = "last2"

    def __init__(self) -> None:
        self._history: dict[int, EndSeries[int]] = {}

    def reset(self) -> None:
        self._history = {}

    def observe(self, job: FinishedJob) -> None:
        user = job.request.user
        series = self._history.get(user)
        if series is None:
            series = self._history[user] = EndSeries()
        series.insert(job.end, job.runtime)

    def predict(self, job: JobRequest) -> Prediction:
        series = self._history.get(job.user)
        recent = [] if series is None else series.latest(job.submit, RECENT_JOBS)
        if len(recent) < RECENT_JOBS:
            return Prediction(t_sched=job.t_req, factor=None, basis=len(recent), fallback=True)
        t_sched = clamp_estimate(sum(recent) / RECENT_JOBS, job.t_req)
        return Prediction(t_sched=t_sched, factor=None, basis=RECENT_JOBS, fallback=False)
