"""Mean + k sigma of similar recent runtimes (after Mu'alem & Feitelson 2001).

Over the same key's jobs that finished in [s - window, s]: mean t_act plus k
population standard deviations, capped at t_req; fewer than two jobs: t_req.
"""

from __future__ import annotations

import math
from typing import cast

from predictor.durations import parse_duration
from predictor.estimators.base import Estimator
from predictor.history import KeyedHistory, key_function
from predictor.jobs import FinishedJob, JobRequest, Prediction, clamp_estimate

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


class MeanStdEstimator(Estimator):
    """mean + k sigma of t_act over the same key's jobs in a trailing window."""

    name = "mean-std"
    predict_effects = frozenset({"history"})

    def __init__(self, *, key: str = "user", window: str = "7d", k: float = 1.5) -> None:
        history_key = key_function(key, KEYS)
        self._window = parse_duration(window, "window", unbounded="all")
        if not k >= 0:
            raise ValueError(f"k must be a number of standard deviations >= 0; got {k}")
        self.key = key
        self.window = window
        self.k = k
        self._history: KeyedHistory[int] = KeyedHistory(history_key, RunningMoments)

    def reset(self) -> None:
        self._history.clear()

    def observe(self, job: FinishedJob) -> None:
        self._history.add(job, job.runtime)

    def predict(self, job: JobRequest) -> Prediction:
        basis, moments = self._history.window(job, self._window)
        if basis < MIN_JOBS:
            return Prediction(t_sched=job.t_req, factor=None, basis=basis, fallback=True)
        moments = cast(RunningMoments, moments)
        t_sched = clamp_estimate(moments.mean_plus_deviations(self.k), job.t_req)
        return Prediction(t_sched=t_sched, factor=None, basis=basis, fallback=False)
