"""Downey's conditional lifetime model (CLM): how long a running job will live, given its age.

Downey (1997) observed that the logs of batch jobs' lifetimes are close to
uniformly distributed within a queue: the cdf is a straight line in ln t,
cdf(t) = b0 + b1 ln t between t_min = exp(-b0/b1) and t_max = exp((1-b0)/b1),
fitted by least squares with the shortest and longest 10% left out. Given a
job's age a, the lifetime is then distributed as

    Pr{L > t | L > a} = (ln t_max - ln t) / (ln t_max - ln a),

whose median is sqrt(t_max * a). `predictor.downey.RunningAges` evaluates it for many jobs at once.
His section 5.4 extends this to several stages (a cdf that is piecewise
linear in ln t) for queues whose distribution is not a straight line.

`LifetimeModel` holds either form as knots of a piecewise-linear cdf in ln t
(one stage: two knots), so one set of formulas serves both. `fit_lifetimes`
fits it; `QueueLifetimes` fits one per queue (SWF field 15) on a trailing
window of finished jobs, refitted on a schedule, so that a model used at time
`now` was fitted only on jobs that had ended by then.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from kernel.jobs import FinishedJob, JobRequest

#: Points of the empirical cdf a model is fitted to (evenly spaced in probability): the fit of a
#: straight line or a few segments to a smooth curve needs no more, and a refit stays cheap.
FIT_POINTS = 200
#: Candidate stage boundaries of a multi-stage fit: these quantiles of the fitted range.
BREAK_QUANTILES = tuple(level / 20 for level in range(1, 20))
#: Knots of an empirical model (`empirical_lifetimes`): quantiles every 2.5%.
EMPIRICAL_POINTS = 41
#: The shapes a class's model can take: Downey's uniform-log (with `stages`), or the empirical distribution.
MODELS = ("uniform-log", "empirical")
#: Whether a job's lifetime model stops at its request.
CAPS = ("none", "request")
#: What a job's class can be made of (joined with "+", e.g. `request+serial`; `none`: one class for all):
#: its queue (SWF field 15; Slurm's partition), its request, whether it is serial (one processor), its QOS,
#: and whether it asks for GPUs. Downey's classes on the Paragon were its queues' time limits with serial
#: jobs apart: `request+serial` where requests are the limits.
CLASS_FIELDS: dict[str, Callable[[JobRequest], Hashable]] = {
    "queue": attrgetter("queue"),
    "request": attrgetter("t_req"),
    "serial": lambda job: job.procs == 1,
    "qos": attrgetter("qos"),
    "gpu": lambda job: job.gpus > 0,
}


@dataclass(frozen=True)
class LifetimeModel:
    """A lifetime distribution whose cdf is piecewise linear in ln t: stage i is uniform in ln t on
    [log_knots[i], log_knots[i+1]] with probability cdf_knots[i+1] - cdf_knots[i] (Downey's stages).

    `r_squared` is the fit's coefficient of determination on the points it was fitted to.
    """

    log_knots: np.ndarray
    cdf_knots: np.ndarray
    r_squared: float = 1.0

    def __post_init__(self) -> None:
        knots, cdf = np.asarray(self.log_knots, dtype=np.float64), np.asarray(self.cdf_knots, dtype=np.float64)
        if knots.ndim != 1 or knots.shape != cdf.shape or len(knots) < 2:
            raise ValueError("a lifetime model needs two or more knots, with one cdf value each")
        if np.any(np.diff(knots) <= 0) or not np.all(np.isfinite(knots)):
            raise ValueError(f"knots must be finite and increasing, got {knots.tolist()}")
        if cdf[0] != 0 or cdf[-1] != 1 or np.any(np.diff(cdf) < 0):
            raise ValueError(f"cdf at the knots must rise from 0 to 1, got {cdf.tolist()}")
        object.__setattr__(self, "log_knots", knots)
        object.__setattr__(self, "cdf_knots", cdf)

    @classmethod
    def uniform_log(cls, intercept: float, slope: float, r_squared: float = 1.0) -> LifetimeModel:
        """Downey's one-stage model from his intercept b0 and slope b1 (cdf = b0 + b1 ln t)."""
        if not slope > 0:
            raise ValueError(f"the slope of a lifetime cdf must be positive, got {slope}")
        return cls(np.array([-intercept / slope, (1 - intercept) / slope]), np.array([0.0, 1.0]), r_squared)

    @property
    def stages(self) -> int:
        return len(self.log_knots) - 1

    @property
    def t_min(self) -> float:
        return float(np.exp(self.log_knots[0]))

    @property
    def t_max(self) -> float:
        return float(np.exp(self.log_knots[-1]))

    def cdf(self, t: np.ndarray | float) -> np.ndarray:
        """Pr{L < t}."""
        value: np.ndarray = np.interp(np.log(np.maximum(t, 1e-300)), self.log_knots, self.cdf_knots)
        return value

    def conditional_quantile(self, q: float, age: np.ndarray | float) -> np.ndarray:
        """The lifetime t with Pr{L < t | L > age} = q: for one stage t_max^q * age^(1-q), the median
        sqrt(t_max * age) (Downey's Eq. 4) once the age is past t_min."""
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile must be in [0, 1], got {q}")
        reached = self.cdf(age)
        level = reached + q * (1.0 - reached)
        lifetime: np.ndarray = np.maximum(np.exp(np.interp(level, self.cdf_knots, self.log_knots)), age)
        return lifetime

    def conditional_median(self, age: np.ndarray | float) -> np.ndarray:
        return self.conditional_quantile(0.5, age)

    def truncated(self, limit: float) -> LifetimeModel:
        """The distribution of L given L <= limit (a job is killed at its request); itself when the limit is
        beyond t_max or below t_min (nothing of the model would be left)."""
        log_limit = float(np.log(limit))
        if not self.log_knots[0] < log_limit < self.log_knots[-1]:
            return self
        inside = self.log_knots < log_limit
        knots = np.append(self.log_knots[inside], log_limit)
        cdf = np.append(self.cdf_knots[inside], self.cdf(limit))
        return LifetimeModel(knots, cdf / cdf[-1], self.r_squared)


def fit_lifetimes(lifetimes: np.ndarray, stages: int = 1, trim: float = 0.1) -> LifetimeModel | None:
    """Fit a `stages`-stage model to the empirical cdf of `lifetimes` (seconds), by least squares.

    As Downey did, the shortest and longest `trim` of the jobs are left out of the fit. One stage is
    his straight line; more stages fit a continuous piecewise-linear cdf in ln t whose boundaries
    are chosen among `BREAK_QUANTILES` of the fitted range (he chose them by eye). None when no
    valid model fits (too few distinct lifetimes, or no rising line).
    """
    if stages < 1:
        raise ValueError(f"stages must be at least 1, got {stages}")
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim}")
    logs = np.sort(np.log(np.maximum(np.asarray(lifetimes, dtype=np.float64), 1.0)))
    if len(logs) < 2 or logs[0] == logs[-1]:
        return None
    levels = np.linspace(trim, 1 - trim, FIT_POINTS)
    x = np.quantile(logs, levels)
    if x[0] == x[-1]:
        return None
    best: tuple[float, LifetimeModel] | None = None
    candidates = np.unique(np.quantile(x, BREAK_QUANTILES)) if stages > 1 else np.array([])
    for breaks in itertools.combinations(candidates.tolist(), stages - 1):
        fitted = _fit_segments(x, levels, np.asarray(breaks))
        if fitted is not None and (best is None or fitted[0] < best[0]):
            best = fitted
    return None if best is None else best[1]


def empirical_lifetimes(lifetimes: np.ndarray, points: int = EMPIRICAL_POINTS) -> LifetimeModel | None:
    """The empirical distribution itself, as knots at `points` evenly spaced quantiles of ln t: no
    assumption about its shape. It measures how much a better-fitting model could add to Downey's."""
    logs = np.log(np.maximum(np.asarray(lifetimes, dtype=np.float64), 1.0))
    if len(logs) < 2:
        return None
    levels = np.linspace(0.0, 1.0, points)
    knots = np.quantile(logs, levels)
    distinct = np.concatenate([[True], np.diff(knots) > 0])
    if distinct.sum() < 2:
        return None
    knots, levels = knots[distinct], levels[distinct]
    levels[-1] = 1.0
    return LifetimeModel(knots, levels)


def _fit_segments(x: np.ndarray, y: np.ndarray, breaks: np.ndarray) -> tuple[float, LifetimeModel] | None:
    """Least squares of y on a continuous piecewise-linear function of x with kinks at `breaks`.

    Returns (squared error, model), or None when a segment does not rise or the lines do not reach 0
    and 1 outside the kinks (the fit is not a distribution).
    """

    def line(points: np.ndarray) -> np.ndarray:
        kinks = np.maximum(points[:, None] - breaks[None, :], 0.0)
        fitted: np.ndarray = coefficients[0] + coefficients[1] * points + kinks @ coefficients[2:]
        return fitted

    basis = np.column_stack([np.ones_like(x), x, np.maximum(x[:, None] - breaks[None, :], 0.0)])
    coefficients, *_ = np.linalg.lstsq(basis, y, rcond=None)
    slopes = coefficients[1] + np.concatenate([[0.0], np.cumsum(coefficients[2:])])
    if np.any(slopes <= 0):
        return None
    last = breaks[-1] if len(breaks) else x[0]
    knots = np.concatenate(
        [[-coefficients[0] / slopes[0]], breaks, [last + (1 - line(np.array([last]))[0]) / slopes[-1]]]
    )
    cdf = np.concatenate([[0.0], line(breaks), [1.0]])
    if np.any(np.diff(knots) <= 0) or np.any(np.diff(cdf) <= 0):
        return None
    residual = y - basis @ coefficients
    error = float(residual @ residual)
    total = float(((y - y.mean()) ** 2).sum())
    return error, LifetimeModel(knots, cdf, 1.0 - error / total if total > 0 else 1.0)


def class_key(by: str) -> Callable[[JobRequest], Hashable]:
    """The function that gives a job's class under `by` (`none`, or CLASS_FIELDS joined with "+")."""
    if by == "none":
        return lambda job: None
    names = by.split("+")
    unknown = [name for name in names if name not in CLASS_FIELDS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"by must be none or distinct fields of {', '.join(CLASS_FIELDS)} joined with +; got {by!r}")
    fields = [CLASS_FIELDS[name] for name in names]
    return lambda job: tuple(field(job) for field in fields)


@dataclass
class QueueLifetimes:
    """One `LifetimeModel` per class, fitted on the jobs that finished in a trailing window (causal).

    `observe` finished jobs in end order; `refresh(now)` refits when `refit` seconds have passed
    since the last fit (Downey found that parameters a few months old predict nearly as well as
    fresh ones). A class with fewer than `min_jobs` jobs in the window is modelled by the fit over
    all classes; with fewer than that in all, there is no model.
    """

    window: int | None = 120 * 86_400
    refit: int = 86_400
    stages: int = 1
    by: str = "queue"
    min_jobs: int = 50
    trim: float = 0.1
    cap: str = "none"
    model_kind: str = "uniform-log"
    _finished: deque[tuple[int, Hashable, int]] = field(default_factory=deque, init=False, repr=False)
    _models: dict[Hashable, LifetimeModel] = field(default_factory=dict, init=False, repr=False)
    _pooled: LifetimeModel | None = field(default=None, init=False, repr=False)
    _fitted_at: int | None = field(default=None, init=False, repr=False)
    _latest_end: int | None = field(default=None, init=False, repr=False)
    _class_of: Callable[[JobRequest], Hashable] = field(init=False, repr=False)
    _truncated: dict[tuple[Hashable, int], LifetimeModel] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._class_of = class_key(self.by)
        if self.model_kind not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {self.model_kind!r}")
        if self.cap not in CAPS:
            raise ValueError(f"cap must be one of {', '.join(CAPS)}; got {self.cap!r}")
        if self.window is not None and self.window <= 0:
            raise ValueError(f"window must be positive, got {self.window}")
        if self.refit <= 0:
            raise ValueError(f"refit must be positive, got {self.refit}")
        if self.min_jobs < 2:
            raise ValueError(f"min_jobs must be at least 2, got {self.min_jobs}")
        fit_lifetimes(np.array([1.0, 2.0]), self.stages, self.trim)  # validates stages and trim

    def observe(self, job: FinishedJob) -> None:
        """Learn a finished job (in end order)."""
        if self._latest_end is not None and job.end < self._latest_end:
            raise ValueError(
                f"job {job.request.job_id} ended at {job.end}, before {self._latest_end}: observe in end order"
            )
        self._latest_end = job.end
        self._finished.append((job.end, self._class_of(job.request), job.runtime))

    def refresh(self, now: int) -> None:
        """Refit on the window ending at `now` if the last fit is `refit` seconds old (or there is none)."""
        if self._fitted_at is not None and now - self._fitted_at < self.refit:
            return
        finished = self._finished
        if self.window is not None:
            while finished and finished[0][0] < now - self.window:
                finished.popleft()
        runtimes: dict[Hashable, list[int]] = {}
        for _, key, runtime in finished:
            runtimes.setdefault(key, []).append(runtime)
        fitted = {key: self._fit(values) for key, values in runtimes.items() if len(values) >= self.min_jobs}
        self._models = {key: model for key, model in fitted.items() if model is not None}
        everything = [runtime for _, _, runtime in finished]
        self._pooled = self._fit(everything) if len(everything) >= self.min_jobs else None
        self._fitted_at = now
        self._truncated.clear()

    def frozen(self) -> Callable[[JobRequest], LifetimeModel | None]:
        """`model` as of now, unchanged by later refits: for use while others may refresh this object."""
        models, pooled, class_of, cap = self._models, self._pooled, self._class_of, self.cap

        def model(job: JobRequest) -> LifetimeModel | None:
            found = models.get(class_of(job), pooled)
            return found if found is None or cap == "none" else found.truncated(job.t_req)

        return model

    def _fit(self, lifetimes: list[int]) -> LifetimeModel | None:
        if self.model_kind == "empirical":
            return empirical_lifetimes(np.asarray(lifetimes))
        return fit_lifetimes(np.asarray(lifetimes), self.stages, self.trim)

    def model(self, job: JobRequest) -> LifetimeModel | None:
        """The model of the job's class as of the last refresh (the pooled one for a small class)."""
        key = self._class_of(job)
        model = self._models.get(key, self._pooled)
        if self.cap == "none" or model is None:
            return model
        truncated = self._truncated.get((key, job.t_req))
        if truncated is None:
            truncated = self._truncated[key, job.t_req] = model.truncated(job.t_req)
        return truncated
