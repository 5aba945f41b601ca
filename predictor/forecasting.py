"""Queue-time forecasts: a scheduler's state at an instant, and forecast starts with their bounds.

A forecast answers "when will each waiting job start?" from what a scheduler
knows at `now`: the machine size, the running jobs (each as submitted, and
when it started) and the waiting jobs in the scheduler's priority order. No
job's runtime is part of it: runtimes enter only as estimates.

The forward simulation that turns a state and runtime estimates into start
times runs the simulator's own queue policies and backfilling
(`simulator.forecast.forecast_starts`). `predictor` never imports the
simulator, so that function reaches the service through the `StartForecaster`
port defined here: the `tsched` entry point, which composes both packages,
installs it. This module holds the part both the service and `tsched
wait-eval` share: how estimates become expected ends of running jobs, the
three runs behind a forecast with bounds, and the scenarios of a sampled
forecast, each estimate times one of the estimator's errors (docs/queue-time.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from kernel.jobs import JobName, JobRequest
from kernel.resources import ResourceRequest
from predictor.lifetimes import LifetimeModel

#: The Downey-model quantile of each job's lifetime the lower bound assumes; in a sampled forecast, the runs'
#: quantile of the lower bound (and 1 - it of the upper).
DEFAULT_LOWER_QUANTILE = 0.1
#: The most forward runs a sampled forecast makes (each costs what one of a point forecast's three costs).
MAX_DRAWS = 32


class StartedJob(NamedTuple):
    """A running job: as it was submitted, and when it started."""

    job: JobRequest
    start: int


@dataclass(frozen=True)
class QueueState:
    """What a scheduler knows at `now`: its machine, the running jobs, and the waiting jobs in priority order.

    `requests` says what each job asked of a cluster (the running jobs', then the waiting jobs', in order), for a
    forecast on a cluster's nodes; empty, every job asks for its processors only. `names` are the users, groups,
    partitions and QOS given by name (`kernel.jobs.JobName`, by the job's place in that same order): the
    service maps them to the namespace's ids, as for a prediction.
    """

    now: int
    procs: int
    running: Sequence[StartedJob]
    waiting: Sequence[JobRequest]
    requests: Sequence[ResourceRequest] = ()
    names: Sequence[JobName] = ()

    @property
    def free(self) -> int:
        return self.procs - sum(started.job.procs for started in self.running)


#: The backfilling that forecasts on a cluster's nodes (`simulator.clusterforecast`, a server started with a
#: cluster): tsched's Slurm scheduler, from each job's resources.
ON_NODES = "slurm"


@dataclass(frozen=True)
class Scheduler:
    """How the forecast scheduler chooses jobs: queue policy, backfilling and backfill order, by name
    (`simulator.policies.POLICIES`, `simulator.backfill.BACKFILLS`, `BACKFILL_ORDERS`). It plans with
    the users' requests, as the schedulers it stands for do."""

    policy: str = "fcfs"
    backfill: str = "easy"
    backfill_order: str = "queue"


class StartForecaster(Protocol):
    """The forward simulation a forecast runs (`simulator.forecast.FORWARD_SIMULATION`)."""

    def check(self, scheduler: Scheduler, state: QueueState) -> None:
        """Raise ValueError, naming the field (policy, backfill, backfill_order, a job's), for a scheduler it cannot
        run or a state it cannot run it from."""

    def starts(
        self,
        state: QueueState,
        scheduler: Scheduler,
        running_ends: Sequence[int],
        waiting_runtimes: Sequence[int],
        check: Callable[[], None] | None = None,
    ) -> list[int]:
        """Run `scheduler` forward from `state`: running job i ends at `running_ends[i]` (> now), waiting job j
        runs `waiting_runtimes[j]` seconds once started; each waiting job's start, in `state.waiting` order.
        `check` is called every so many scheduling passes: it raises to stop a run nobody waits for."""


#: The lifetime model of a job's class, when there is one.
LifetimeLookup = Callable[[JobRequest], LifetimeModel | None]


def running_ends(state: QueueState, estimates: Sequence[int], lifetimes: LifetimeLookup | None) -> list[int]:
    """When each running job is expected to end, from its runtime estimate.

    A job still within its estimate ends at start + estimate. One that has
    outlived it is past what the estimate knows: it ends at its start plus the
    median of Downey's conditional lifetime given its age (capped at its
    request, when a job is killed), or at its request without a model.
    Every end is after `now`: the job is running.
    """
    now = state.now
    ends = []
    for started, estimate in zip(state.running, estimates, strict=True):
        start, t_req = started.start, started.job.t_req
        end = start + estimate
        if end <= now:
            model = lifetimes(started.job) if lifetimes is not None else None
            end = start + t_req if model is None else start + min(t_req, _ceil(model.conditional_median(now - start)))
        ends.append(max(end, now + 1))
    return ends


class StartForecast(NamedTuple):
    """A waiting job's forecast start, and the bounds around it (times, seconds)."""

    job_id: int
    start: int
    lower: int
    upper: int


def forecast_with_bounds(
    forecaster: StartForecaster,
    state: QueueState,
    scheduler: Scheduler,
    estimates: tuple[Sequence[int], Sequence[int]],
    lifetimes: LifetimeLookup | None,
    lower_quantile: float = DEFAULT_LOWER_QUANTILE,
    check: Callable[[], None] | None = None,
) -> list[StartForecast]:
    """Each waiting job's start from three forward runs of the same scheduler (docs/queue-time.md).

    - start: every job runs its estimate (`estimates` = (running, waiting));
    - upper: every job runs to its request, what `squeue --start` assumes;
    - lower: every job runs the `lower_quantile` of Downey's conditional lifetime for its class and
      age, where that is shorter than its estimate (without a model, the estimate).

    The bounds enclose the start: lower = min(lower run, start), upper = max(upper run, start).
    `check` is the forward runs' (`StartForecaster.starts`).
    """
    running_estimates, waiting_estimates = estimates
    point_ends = running_ends(state, running_estimates, lifetimes)
    starts = forecaster.starts(state, scheduler, point_ends, waiting_estimates, check)
    request_ends = [max(started.start + started.job.t_req, state.now + 1) for started in state.running]
    latest = forecaster.starts(state, scheduler, request_ends, [job.t_req for job in state.waiting], check)
    short_ends, short_runtimes = _short_scenario(state, point_ends, waiting_estimates, lifetimes, lower_quantile)
    earliest = forecaster.starts(state, scheduler, short_ends, short_runtimes, check)
    return [
        StartForecast(job.job_id, start, min(low, start), max(high, start))
        for job, start, low, high in zip(state.waiting, starts, earliest, latest, strict=True)
    ]


def sampled_forecasts(
    forecaster: StartForecaster,
    state: QueueState,
    scheduler: Scheduler,
    estimates: tuple[Sequence[int], Sequence[int]],
    lifetimes: LifetimeLookup | None,
    errors: tuple[Sequence[float], int],
    quantile: float = DEFAULT_LOWER_QUANTILE,
    check: Callable[[], None] | None = None,
) -> list[StartForecast]:
    """Each waiting job's start as the median of forward runs of the same scheduler, one per scenario of
    `error_draws` (`errors`: the estimator's error ratios and how many runs), with bounds at the runs' `quantile`
    and 1 - `quantile` (docs/queue-time.md). Without a ratio every run is the point forecast's (the service answers
    `forecast_with_bounds` then)."""
    if not 0 < quantile < 0.5:
        raise ValueError(f"the bounds' quantile must be in (0, 0.5), got {quantile}")
    ratios, draws = errors
    running_estimates, waiting_estimates = estimates
    point_ends = running_ends(state, running_estimates, lifetimes)
    runs = [
        forecaster.starts(state, scheduler, ends, runtimes, check)
        for ends, runtimes in error_draws(state, (point_ends, running_estimates), waiting_estimates, ratios, draws)
    ]
    lower, start, upper = sampled_starts(runs, (quantile, 0.5, 1 - quantile))
    return [
        StartForecast(job.job_id, middle, low, high)
        for job, low, middle, high in zip(state.waiting, lower, start, upper, strict=True)
    ]


def error_draws(
    state: QueueState,
    running: tuple[Sequence[int], Sequence[int]],
    waiting_estimates: Sequence[int],
    ratios: Sequence[float],
    draws: int,
) -> Iterator[tuple[list[int], list[int]]]:
    """`draws` scenarios (the running jobs' ends, the waiting jobs' runtimes) in which every job runs its estimate
    times an error drawn from `ratios` (actual runtime / estimate, on the estimator's finished jobs), none beyond
    its request (where it is killed). A running job draws among the errors that outlive its age, and keeps its
    point end (`running`: the point ends, then the estimates) if none does. Without a ratio, every scenario is
    the point one.

    Why: one forward run puts each job ahead at one end, but a job's runtime scatters around its estimate as
    widely as the estimator errs, and which of the jobs ahead end early decides where a queue position leads.
    The median over that spread places and ranks the waiting jobs better than the one guess where the
    estimator errs much (docs/queue-time.md and docs/cluster.md measure it), and the estimator still says which
    jobs are long. Seeded by `state.now`: one question, one answer.
    """
    if not 1 <= draws <= MAX_DRAWS:
        raise ValueError(f"draws must be in [1, {MAX_DRAWS}], got {draws}")
    point_ends, running_estimates = running
    errors = np.sort(np.asarray(ratios, dtype=np.float64))
    if not len(errors):
        for _ in range(draws):
            yield list(point_ends), list(waiting_estimates)
        return
    starts = np.array([started.start for started in state.running], dtype=np.int64)
    limits = np.array([started.job.t_req for started in state.running], dtype=np.int64)
    guesses = np.maximum(np.asarray(running_estimates, dtype=np.float64), 1.0)
    # the errors that outlive each running job's age: those above age / estimate, from `first` on
    first = np.searchsorted(errors, (state.now - starts) / guesses, side="right")
    alive = first < len(errors)
    estimates = np.maximum(np.asarray(waiting_estimates, dtype=np.float64), 1.0)
    requests = np.array([job.t_req for job in state.waiting], dtype=np.int64)
    generator = np.random.default_rng(state.now)
    for _ in range(draws):
        picked = np.minimum(
            first + (generator.random(len(first)) * (len(errors) - first)).astype(np.int64), len(errors) - 1
        )
        lived = np.minimum(np.ceil(guesses * errors[picked]), limits)
        ends = np.where(alive, np.maximum(starts + lived, state.now + 1), np.asarray(point_ends, dtype=np.int64))
        drawn = errors[(generator.random(len(estimates)) * len(errors)).astype(np.int64)]
        runtimes = np.clip(np.ceil(estimates * drawn), 1, requests)
        yield [int(end) for end in ends], [int(runtime) for runtime in runtimes]


def error_ratio(runtime: int, estimate: int) -> float:
    """A finished job's runtime over the estimate it was given at its submission: one of its estimator's errors, as
    `error_draws` draws them."""
    return max(runtime, 1) / max(estimate, 1)


def sampled_starts(runs: Sequence[Sequence[int]], levels: Sequence[float]) -> list[list[int]]:
    """Per level, each job's start at that quantile of the runs' starts: a start some run made, not one
    interpolated between two (the inverted cdf; at 0.5 with an even number of runs, the lower median)."""
    values = np.quantile(np.array(runs, dtype=np.int64), levels, axis=0, method="inverted_cdf")
    return [[int(value) for value in row] for row in values]


def _short_scenario(
    state: QueueState,
    point_ends: Sequence[int],
    waiting_estimates: Sequence[int],
    lifetimes: LifetimeLookup | None,
    quantile: float,
) -> tuple[list[int], list[int]]:
    """Ends of the running jobs and runtimes of the waiting ones if each lived only its lifetime quantile."""
    if not 0 < quantile < 1:
        raise ValueError(f"the lower bound's quantile must be in (0, 1), got {quantile}")
    now = state.now
    ends = list(point_ends)
    runtimes = list(waiting_estimates)
    if lifetimes is None:
        return ends, runtimes
    running_short = _quantiles(
        [lifetimes(started.job) for started in state.running], [now - s for _, s in state.running], quantile
    )
    for position, (started, lived) in enumerate(zip(state.running, running_short, strict=True)):
        if lived is not None:
            ends[position] = max(now + 1, min(ends[position], started.start + lived))
    waiting_short = _quantiles([lifetimes(job) for job in state.waiting], [0] * len(state.waiting), quantile)
    for position, lived in enumerate(waiting_short):
        if lived is not None:
            runtimes[position] = max(1, min(runtimes[position], lived))
    return ends, runtimes


def _quantiles(models: Sequence[LifetimeModel | None], ages: Sequence[int], quantile: float) -> list[int | None]:
    """Each job's conditional lifetime quantile at its age (seconds, rounded up), None without a model.

    Jobs share their class's model object: one vectorised call per model, not one per job (a forecast's
    queue holds up to thousands of jobs and only a few classes).
    """
    members: dict[int, tuple[LifetimeModel, list[int]]] = {}
    for position, model in enumerate(models):
        if model is not None:
            members.setdefault(id(model), (model, []))[1].append(position)
    lived: list[int | None] = [None] * len(models)
    for model, positions in members.values():
        values = np.ceil(model.conditional_quantile(quantile, np.array([ages[i] for i in positions], dtype=np.float64)))
        for position, value in zip(positions, values.tolist(), strict=True):
            lived[position] = int(value)
    return lived


def _ceil(seconds: np.ndarray | float) -> int:
    return int(np.ceil(float(seconds)))
