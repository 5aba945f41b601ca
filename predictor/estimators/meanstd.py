"""Mean + k sigma of similar recent runtimes (after Mu'alem & Feitelson 2001).

Over the same key's jobs that finished in [s - window, s]: mean t_act plus k
population standard deviations, capped at t_req; fewer than two jobs: t_req.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, cast

from kernel.durations import parse_duration
from kernel.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate
from predictor.estimators.base import parameter
from predictor.estimators.history_based import HistoryEstimator
from predictor.history import KeyedHistory, key_function

KEYS = ("user", "group", "user+group", "user+executable", "user+executable+procs")
#: Below this many jobs the standard deviation says nothing.
MIN_JOBS = 2


class RunningMoments:
    """Count, sum and sum of squares of integer runtimes in a window.

    Integer sums stay exact however many jobs enter and leave, so the
    variance (n * sum_sq - sum^2) / n^2 never drifts or cancels catastrophically.
    """

    __slots__ = ("count", "total", "total_squares")

    def __init__(self) -> None:
        self.clear()

    def add(self, value: int) -> None:
        self.count += 1
        self.total += value
        self.total_squares += value * value

    def remove(self, value: int) -> None:
        self.count -= 1
        self.total -= value
        self.total_squares -= value * value

    def clear(self) -> None:
        self.count = 0
        self.total = 0
        self.total_squares = 0

    def mean_plus_deviations(self, k: float) -> float:
        """mean + k * population standard deviation (ddof=0)."""
        count = self.count
        spread = count * self.total_squares - self.total * self.total
        return self.total / count + k * math.sqrt(spread) / count


def _window_duration(text: str) -> int | None:
    return parse_duration(text, "window", unbounded="all")


@dataclass(kw_only=True, eq=False, repr=False)
class MeanStdEstimator(HistoryEstimator[int]):
    """mean + k sigma of t_act over the same key's jobs in a trailing window."""

    name: ClassVar[str] = "mean-std"

    key: str = parameter("user", "which jobs are similar", choices=KEYS)
    window: str = parameter("7d", "how far back similar jobs count (a duration, or all)", check=_window_duration)
    k: float = parameter(1.5, "standard deviations above the mean", low=0, high=100)

    def _initialise(self) -> None:
        self._window = _window_duration(self.window)
        self._history: KeyedHistory[int] = KeyedHistory(key_function(self.key, KEYS), RunningMoments)

    def _value(self, job: FinishedJob) -> int:
        return job.runtime

    def predict(self, job: JobRequest) -> Prediction:
        basis, moments = self._history.window(job, self._window)
        if basis < MIN_JOBS:
            return Prediction(t_sched=job.t_req, factor=None, basis=basis, fallback=True)
        moments = cast(RunningMoments, moments)
        t_sched = clamp_estimate(moments.mean_plus_deviations(self.k), job.t_req)
        return Prediction(t_sched=t_sched, factor=None, basis=basis, fallback=False)
