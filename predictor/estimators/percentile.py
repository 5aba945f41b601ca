"""Tang et al.'s percentile adjuster (JPDC 2013): t_sched = t_req x A.

A is the q-th percentile (numpy's linear interpolation) of R = t_act / t_req
(capped at 1) over the same key's jobs that finished in [s - window, s], floored
at `floor`; with fewer than `min_jobs` such jobs the request stands. The
defaults are the paper's recommended scheme: triple key, one month, 85th
percentile, floor 0.5, at least 10 jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

from sortedcontainers import SortedList

from kernel.durations import parse_duration
from kernel.jobs import (
    INTERVAL_PROBABILITIES,
    FinishedJob,
    JobRequest,
    Prediction,
    RuntimeInterval,
    clamp_estimate,
)
from predictor.estimators.base import WithInterval, parameter
from predictor.estimators.history_based import HistoryEstimator
from predictor.history import KeyedHistory, interpolated_percentile, key_function

KEYS = ("user", "group", "user+group", "user+group+request")
WINDOWS = ("30d", "60d", "90d", "180d", "365d", "all")


def adjusted_estimate(t_req: int, factor: float, floor: float) -> tuple[int, float]:
    """t_sched and the factor actually applied: A floored at `floor`, estimate clamped."""
    applied = factor if factor >= floor else floor
    return clamp_estimate(t_req * applied, t_req), applied


@dataclass(kw_only=True, eq=False, repr=False)
class PercentileEstimator(HistoryEstimator[float]):
    """Tang et al.'s adjuster: t_sched = t_req x A, A the q-th percentile of R = t_act / t_req over similar jobs.

    Similar jobs share the key and finished in the window before the
    submission; with fewer than `min_jobs` of them the request stands.
    """

    name: ClassVar[str] = "percentile"

    key: str = parameter("user+group+request", "which jobs are similar", choices=KEYS)
    window: str = parameter("30d", "how far back similar jobs count (by end time)", choices=WINDOWS)
    q: float = parameter(85.0, "the percentile of their R taken as A", low=50, high=100)
    floor: float = parameter(0.5, "the least A applied (0: none)", low=0, high=1)
    min_jobs: int = parameter(10, "the fewest similar jobs to adjust from", low=1, high=1_000_000)

    def _initialise(self) -> None:
        self._window = parse_duration(self.window, "window", unbounded="all")
        self._history: KeyedHistory[float] = KeyedHistory(key_function(self.key, KEYS), SortedList)

    def _value(self, job: FinishedJob) -> float:
        return job.ratio

    def eligible_ratios(self, job: JobRequest) -> Sequence[float]:
        """The sorted R values of `job`'s eligible history, valid until the next call.

        Shared by `predict` and the offline grid, which reads several
        percentiles from one window.
        """
        _, ratios = self._history.window(job, self._window)
        return () if ratios is None else cast(SortedList, ratios)

    def predict(self, job: JobRequest) -> Prediction:
        ratios = self.eligible_ratios(job)
        basis = len(ratios)
        if basis < self.min_jobs:
            return Prediction(t_sched=job.t_req, factor=None, basis=basis, fallback=True)
        t_sched, factor = adjusted_estimate(job.t_req, interpolated_percentile(ratios, self.q), self.floor)
        return Prediction(t_sched=t_sched, factor=factor, basis=basis, fallback=False)

    def predict_with_interval(self, job: JobRequest) -> WithInterval:
        """The prediction, with quantiles of t_req x R over the same eligible history and the share of it that
        ran past t_sched."""
        prediction = self.predict(job)
        if prediction.fallback:
            return prediction, None
        ratios = self.eligible_ratios(job)  # the window `predict` has just moved to this submission
        quantiles = tuple(
            (probability, clamp_estimate(job.t_req * interpolated_percentile(ratios, probability * 100), job.t_req))
            for probability in INTERVAL_PROBABILITIES
        )
        longer = len(ratios) - cast(SortedList, ratios).bisect_right(prediction.t_sched / job.t_req)
        return prediction, RuntimeInterval(quantiles, longer / len(ratios))
