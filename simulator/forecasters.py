"""Queue-time forecasters for `tsched wait-eval`, built from SPECs.

A forecaster SPEC is `NAME` or `NAME:key=value,...`:

- `downey-a`, `downey-b`, `downey` (combined): Downey's predictors over his
  conditional lifetime model, one model per queue (`predictor.downey`);
  parameters `window` (trailing window of finished jobs, default 120d, or
  `all`), `refit` (how often the models are refitted, default 1d), `stages`
  (1, or more for his section 5.4's multi-stage model), `by` (`queue`, or
  `none` for one class).
- `forward`: the scheduler's own policy and backfilling run forward
  (`simulator.forecast`) with each job's runtime estimate; parameters
  `overrun` (`downey`: a running job past its estimate lives the median of
  Downey's conditional lifetime; `request`: until its request) and
  `estimator`, any estimator SPEC (default `request`, which is what
  `squeue --start` reports); `draws` (1-32; default none): the median start of
  that many runs with each estimate times an error the estimator made on the
  last `ERROR_WINDOW` finished jobs (`predictor.forecasting.error_draws`,
  ForecastStart's `draws`).

An estimator SPEC has commas of its own, so `estimator=` comes last and takes
the rest of the forecaster SPEC verbatim:
`forward:overrun=request,estimator=lgbm-quantile:alpha=0.5,target_under=0`.

Every forecaster is causal: it learns each finished job at its end (in end
order), its estimator predicts each job once, at its submission, and a forecast
at `now` sees only the scheduler's state then. The oracle estimator is the one
exception, for evaluation: it is handed the jobs' actual runtimes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from typing import Protocol

from kernel.durations import parse_duration, required_duration
from kernel.errors import SpecError
from kernel.jobs import FinishedJob, JobRequest
from kernel.specs import key_values
from predictor.downey import downey_wait
from predictor.estimators.baselines import OracleEstimator
from predictor.forecasting import (
    MAX_DRAWS,
    QueueState,
    Scheduler,
    error_draws,
    error_ratio,
    running_ends,
    sampled_starts,
)
from predictor.lifetimes import QueueLifetimes
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.forecast import forecast_starts_of

#: Forecaster name -> Downey predictor.
DOWNEY = {"downey-a": "a", "downey-b": "b", "downey": "combined"}
FORECASTERS = (*DOWNEY, "forward")
OVERRUNS = ("downey", "request")
_DOWNEY_PARAMETERS = ("window", "refit", "stages", "by", "cap", "model")
_FORWARD_PARAMETERS = ("overrun", "draws", "estimator")
#: The finished jobs whose errors a sampled forecast draws from: the service's live window (`Limits.live_window`).
ERROR_WINDOW = 1000


class Forecaster(Protocol):
    """What `wait-eval` asks of a forecaster: learn as time passes, then forecast starts."""

    spec: str

    def learn(self, now: int, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> None:
        """At `now`: the jobs that ended at `now` (in end order), then the jobs submitted at `now`."""

    def forecast(self, state: QueueState, positions: Collection[int]) -> dict[int, int]:
        """Starts of the waiting jobs at `positions` of `state.waiting`; one it cannot answer for is left out."""


class DowneyForecaster:
    """One of Downey's predictors over per-queue conditional lifetime models fitted on a trailing window."""

    def __init__(self, spec: str, predictor: str, lifetimes: QueueLifetimes) -> None:
        self.spec = spec
        self.predictor = predictor
        self.lifetimes = lifetimes

    def learn(self, now: int, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> None:
        for job in finished:
            self.lifetimes.observe(job)

    def forecast(self, state: QueueState, positions: Collection[int]) -> dict[int, int]:
        self.lifetimes.refresh(state.now)
        answers = {}
        for position in positions:
            wait = downey_wait(state, position, self.lifetimes.model, self.predictor)
            if wait is not None:
                answers[position] = state.now + round(wait)
        return answers


class ForwardForecaster:
    """The scheduler run forward with each job's runtime estimate, made at its submission."""

    def __init__(
        self,
        spec: str,
        scheduler: Scheduler,
        session: LocalSession,
        lifetimes: QueueLifetimes | None,
        draws: int = 0,
    ) -> None:
        self.spec = spec
        self.scheduler = scheduler
        self.session = session
        self.lifetimes = lifetimes
        self.draws = draws
        self._estimates: dict[int, int] = {}
        #: actual runtime / estimate of the last finished jobs, as the service's live scores keep them
        self._errors: deque[float] = deque(maxlen=ERROR_WINDOW)

    def learn(self, now: int, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> None:
        if self.lifetimes is not None:
            for ended in finished:
                self.lifetimes.observe(ended)
        estimates = self._estimates
        for ended in finished:
            estimate = estimates.pop(ended.request.job_id, None)
            if estimate is not None and self.draws:  # only a sampled forecast draws errors
                self._errors.append(error_ratio(ended.runtime, estimate))
        for job, prediction in zip(submitted, self.session.sync(finished, submitted), strict=True):
            estimates[job.job_id] = prediction.t_sched

    def forecast(self, state: QueueState, positions: Collection[int]) -> dict[int, int]:
        estimates = self._estimates
        lookup = None
        if self.lifetimes is not None:
            self.lifetimes.refresh(state.now)
            lookup = self.lifetimes.model
        running_estimates = [estimates[started.job.job_id] for started in state.running]
        ends = running_ends(state, running_estimates, lookup)
        runtimes = [estimates[job.job_id] for job in state.waiting]
        if not self.draws:
            return forecast_starts_of(state, self.scheduler, ends, runtimes, positions)
        asked = sorted(positions)
        running = (ends, running_estimates)
        runs = [
            [found[position] for position in asked]
            for found in (
                forecast_starts_of(state, self.scheduler, drawn_ends, drawn_runtimes, asked)
                for drawn_ends, drawn_runtimes in error_draws(state, running, runtimes, self._errors, self.draws)
            )
        ]
        return dict(zip(asked, sampled_starts(runs, (0.5,))[0], strict=True)) if asked else {}


def split_forecaster_spec(spec: str) -> tuple[str, dict[str, str]]:
    """NAME and its raw parameters; `estimator=` takes the rest of the SPEC, commas included."""
    text = spec.strip()
    if not text:
        raise SpecError("empty forecaster spec")
    name, _, rest = text.partition(":")
    items = rest.split(",") if rest.strip() else []
    nested = next((i for i, item in enumerate(items) if item.strip().startswith("estimator=")), len(items))
    params: dict[str, str] = {}
    if nested < len(items):
        params["estimator"] = ",".join(items[nested:]).partition("=")[2].strip()
    params |= key_values(items[:nested], f"forecaster spec {spec!r}")
    if params.get("estimator") == "":
        raise SpecError(f"forecaster spec {spec!r}: estimator= needs an estimator SPEC")
    return name.strip(), params


def make_forecaster(spec: str, scheduler: Scheduler, truth: dict[int, int] | None = None) -> Forecaster:
    """The forecaster a SPEC names, its parameters checked; `truth` (job id -> actual runtime) only for the
    oracle estimator, in evaluation."""
    name, params = split_forecaster_spec(spec)
    if name not in FORECASTERS:
        raise SpecError(f"unknown forecaster {name!r} in spec {spec!r}; known: {', '.join(FORECASTERS)}")
    allowed = _FORWARD_PARAMETERS if name == "forward" else _DOWNEY_PARAMETERS
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise SpecError(f"forecaster {name!r} has no parameter {unknown[0]!r} (parameters: {', '.join(allowed)})")
    try:
        if name == "forward":
            return _forward(spec, params, scheduler, truth)
        return DowneyForecaster(spec, DOWNEY[name], _lifetimes(params))
    except ValueError as error:
        raise SpecError(f"forecaster spec {spec!r}: {error}") from None


def _lifetimes(params: dict[str, str]) -> QueueLifetimes:
    stages = params.get("stages", "1")
    if not stages.isdigit() or int(stages) < 1:
        raise ValueError(f"stages must be a whole number from 1, got {stages!r}")
    by = params.get("by", "queue")
    return QueueLifetimes(
        window=parse_duration(params.get("window", "120d"), "window", unbounded="all"),
        refit=required_duration(params.get("refit", "1d"), "refit"),
        stages=int(stages),
        by=by,
        cap=params.get("cap", "none"),
        model_kind=params.get("model", "uniform-log"),
    )


def _draws(text: str | None) -> int:
    """A sampled forecast's runs (0: none, a point forecast)."""
    if text is None:
        return 0
    if not text.isdigit() or not 1 <= int(text) <= MAX_DRAWS:
        raise ValueError(f"draws must be a whole number from 1 to {MAX_DRAWS}, got {text!r}")
    return int(text)


def _forward(spec: str, params: dict[str, str], scheduler: Scheduler, truth: dict[int, int] | None) -> Forecaster:
    overrun = params.get("overrun", "downey")
    if overrun not in OVERRUNS:
        raise ValueError(f"overrun must be one of {', '.join(OVERRUNS)}; got {overrun!r}")
    try:
        estimator = make_estimator(params.get("estimator", "request"))
    except SpecError as error:
        raise ValueError(f"{error} (estimator= comes last: the rest of the SPEC is the estimator's)") from None
    if isinstance(estimator, OracleEstimator):
        if truth is None:
            raise ValueError("the oracle needs the jobs' actual runtimes, which only an evaluation has")
        estimator.bind_truth(truth)
    lifetimes = QueueLifetimes() if overrun == "downey" else None
    return ForwardForecaster(spec, scheduler, LocalSession(estimator), lifetimes, _draws(params.get("draws")))
