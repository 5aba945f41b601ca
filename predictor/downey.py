"""Downey's queue-time predictors (Downey 1997, section 4): from the ages of the running jobs alone.

Given p running jobs with ages a_i and sizes n_i, and a job that needs n' more
processors than are free, each running job's completion within x seconds has
probability P_i(x) = Pr{L_i < a_i + x | L_i > a_i} under its class's
conditional lifetime model (`predictor.lifetimes`). Then:

- Predictor A (median): the wait is taken as the time until one of the
  "benefactors" (jobs with n_i >= n', each of which frees enough processors on
  its own) ends; its median solves prod_i (1 - P_i(x)) = 1/2 over them. No
  benefactor: no prediction.
- Predictor B (mean): processors are treated as released continuously,
  F(x) = sum_i n_i P_i(x), and the wait solves F(x) = n'. Fewer running
  processors than n': no prediction.
- Combined: A when n' < 32, B otherwise (Downey's threshold); B too when A has
  no benefactor.

Downey asked when a job reached the head of an FCFS queue and could not start.
Asked earlier (at submission), the jobs ahead of it in the queue are counted in
n' (n' = their sizes plus its own, minus the free processors): the natural
extension he suggests for predictor B (section 7.1), applied to all three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from predictor.forecasting import LifetimeLookup, QueueState
from predictor.lifetimes import LifetimeModel

#: Downey's switch from predictor A to B: A when fewer than this many processors are needed.
COMBINED_THRESHOLD = 32
#: Predictors and their names in a forecaster SPEC.
PREDICTORS = ("a", "b", "combined")
#: Bisection steps when solving for the wait: the bracket (at most the longest t_max) shrinks below a second.
_BISECTION_STEPS = 48


@dataclass(frozen=True)
class RunningAges:
    """The running jobs as Downey's predictors see them: ages, sizes, and the stages of each one's model.

    Each job's model is stored as segments in ln t (lower, upper, weight), padded with weightless
    segments to a common count, so that completion probabilities are one vectorised expression.
    """

    ages: np.ndarray
    sizes: np.ndarray
    lower: np.ndarray  # jobs x segments
    upper: np.ndarray
    weights: np.ndarray

    @classmethod
    def of(cls, ages: np.ndarray, sizes: np.ndarray, models: list[LifetimeModel]) -> RunningAges:
        segments = max((model.stages for model in models), default=1)
        count = len(models)
        lower, upper, weights = np.zeros((count, segments)), np.ones((count, segments)), np.zeros((count, segments))
        for row, model in enumerate(models):
            stages = model.stages
            lower[row, :stages] = model.log_knots[:-1]
            upper[row, :stages] = model.log_knots[1:]
            weights[row, :stages] = np.diff(model.cdf_knots)
        return cls(np.asarray(ages, dtype=np.float64), np.asarray(sizes, dtype=np.int64), lower, upper, weights)

    def _cdf(self, t: np.ndarray) -> np.ndarray:
        log_t = np.log(np.maximum(t, 1e-300))[:, None]
        reached: np.ndarray = (self.weights * np.clip((log_t - self.lower) / (self.upper - self.lower), 0, 1)).sum(
            axis=1
        )
        return reached

    def completion(self, x: float, members: np.ndarray | None = None) -> np.ndarray:
        """P_i(x): the probability that each job (of `members`, or all) ends within x seconds from now."""
        ages = self.ages if members is None else self.ages[members]
        view = self if members is None else self._subset(members)
        reached = view._cdf(ages)
        left = 1.0 - reached
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(left > 0, (view._cdf(ages + x) - reached) / left, 1.0)

    def _subset(self, members: np.ndarray) -> RunningAges:
        return RunningAges(
            self.ages[members], self.sizes[members], self.lower[members], self.upper[members], self.weights[members]
        )

    def horizon(self, members: np.ndarray | None = None) -> float:
        """Seconds until the latest of these jobs has certainly ended (its model's t_max)."""
        view = self if members is None else self._subset(members)
        if len(view.ages) == 0:
            return 0.0
        last = np.max(np.where(view.weights > 0, view.upper, -np.inf), axis=1)
        return float(np.max(np.maximum(np.exp(last) - view.ages, 0.0)))


def predictor_a(running: RunningAges, need: int) -> float | None:
    """Downey's predictor A: the median time until one of the benefactors (n_i >= need) ends."""
    if need <= 0:
        return 0.0
    benefactors = np.flatnonzero(running.sizes >= need)
    if len(benefactors) == 0:
        return None

    def still_short(x: float) -> float:
        return float(np.prod(1.0 - running.completion(x, benefactors)))

    return _solve_decreasing(still_short, 0.5, running.horizon(benefactors))


def predictor_b(running: RunningAges, need: int) -> float | None:
    """Downey's predictor B: when the processors released continuously (n_i P_i(x)) reach `need`."""
    if need <= 0:
        return 0.0
    if int(running.sizes.sum()) < need:
        return None
    sizes = running.sizes.astype(np.float64)

    def still_short(x: float) -> float:
        return need - float(sizes @ running.completion(x))

    return _solve_decreasing(still_short, 0.0, running.horizon())


def combined(running: RunningAges, need: int, threshold: int = COMBINED_THRESHOLD) -> float | None:
    """Downey's combined predictor: A below `threshold` processors needed, B above (and where A cannot answer)."""
    answer = predictor_a(running, need) if need < threshold else None
    return predictor_b(running, need) if answer is None else answer


def _solve_decreasing(function: Callable[[float], float], target: float, high: float) -> float:
    """The x in [0, high] where a non-increasing `function` falls to `target`, by bisection."""
    if function(0.0) <= target:
        return 0.0
    low = 0.0
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if function(middle) > target:
            low = middle
        else:
            high = middle
        if high - low < 0.5:
            break
    return high


def downey_wait(
    state: QueueState, position: int, lifetimes: LifetimeLookup, predictor: str = "combined"
) -> float | None:
    """Seconds from `state.now` until the waiting job at `position` starts, by one of Downey's predictors.

    n' counts the job and those ahead of it in `state.waiting`, minus the free processors.
    None when the predictor cannot answer, or a running job's class has no model yet.
    """
    if predictor not in PREDICTORS:
        raise ValueError(f"unknown Downey predictor {predictor!r}; choose one of {', '.join(PREDICTORS)}")
    need = sum(job.procs for job in state.waiting[: position + 1]) - state.free
    if need <= 0:
        return 0.0
    models = [lifetimes(started.job) for started in state.running]
    if any(model is None for model in models):
        return None
    running = RunningAges.of(
        np.array([state.now - started.start for started in state.running], dtype=np.float64),
        np.array([started.job.procs for started in state.running], dtype=np.int64),
        [model for model in models if model is not None],
    )
    if predictor == "a":
        return predictor_a(running, need)
    if predictor == "b":
        return predictor_b(running, need)
    return combined(running, need)
