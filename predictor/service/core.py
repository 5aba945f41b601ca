"""The predictor service's domain: namespaces of recorded events, their estimators, and their bounds.

One server holds many namespaces (one per cluster, or per simulation run).
A namespace records two kinds of events, and every estimator in it is fed
them in order, exactly as an in-process session would be:

- completions (`ObserveCompletions`, `Sync`): learned by every estimator;
- submissions (`Sync`'s submitted jobs): predicted by the estimator asked
  for, which may count them in flight (the lgbm estimator does).

Its clock is the latest completion end or submit time recorded. A question
(`Predict`, `PredictBatch`) is answered from the namespace as it is and
changes nothing lasting: not the clock, not what is recorded. The one
exception is an estimator whose predictions change its later answers
(declared effects "submissions" or "model": it counts the job in flight, or
retrains when the submit time passes its retraining point): its questions are
recorded as submissions, so that a restart replays them too.

With a state file every event is stored before the call that brought it is
answered, and a namespace is rebuilt on start from its latest snapshot and
the events after it, so a restart answers exactly as before it.

Bounds (`Limits`): namespaces, history per namespace (the oldest completions
beyond the history window or count are dropped, on disk at the next
snapshot), estimators per namespace, cached SPEC spellings, the largest values
a client's SPEC may ask for, how far ahead of the clock a time may be, and
memory (state stops growing near the ceiling). A call refused by a bound
changes nothing.

The rooms: `namespaces` (each namespace's state, its checks, learning and
predicting), `specs` (SPEC resolution, its cache and the estimator caps),
`recording` (the state file's write-ahead, snapshots, the replay on start),
`training` (the model-training threads), `views` (what the service tells).
Nothing here knows gRPC: refusals are `kernel.errors.ServiceError`s, which
the adapter (`servicer`) maps to status codes. Evaluation-only estimators (the
oracle) are never served: the actual runtimes they need never reach a server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernel.errors import FailedPrecondition, InvalidRequest
from kernel.jobs import FinishedJob, JobName, JobRequest, Prediction, RuntimeInterval
from predictor.estimators.base import Estimator
from predictor.forecasting import (
    DEFAULT_LOWER_QUANTILE,
    MAX_DRAWS,
    QueueState,
    Scheduler,
    StartForecaster,
    forecast_with_bounds,
    sampled_forecasts,
)
from predictor.service.forecasts import ForecastAnswer, NamespaceLifetimes, check_state
from predictor.service.limits import Limits, MemoryWatch
from predictor.service.namespaces import (
    DeadlineCheck,
    NamespaceTable,
    at_clock,
    finished_with_ids,
    no_deadline,
    with_ids,
)
from predictor.service.quoting import quote
from predictor.service.recording import Recorder
from predictor.service.specs import EstimatorFactory, ResolvedSpec, SpecBook, built_in_views, registry_factory
from predictor.service.state import CompletionStore
from predictor.service.training import Trainer
from predictor.service.views import Description, EstimatorView, NamespaceStatus, NamespaceView

log = logging.getLogger("tsched.service")


@dataclass(frozen=True)
class Answer:
    """Predictions and what produced them: the canonical SPEC, the namespace, and what a sync learned."""

    predictions: list[Prediction]
    estimator: str
    namespace: str
    #: The namespace's clock when the jobs were predicted: the submit time of a job that left it unset.
    clock: int
    accepted: int = 0
    duplicates: int = 0
    #: Per prediction, the estimator's runtime interval (None without one); empty unless asked for.
    intervals: list[RuntimeInterval | None] = field(default_factory=list)


class PredictorCore:
    """Namespaces, estimators, bounds and persistence: everything the service does, without the transport.

    Calls come from the server's worker threads; each namespace has its own
    lock, and creating or dropping a namespace takes the table's.
    """

    def __init__(
        self,
        default_specs: Sequence[str],
        estimator_factory: EstimatorFactory = registry_factory,
        store: CompletionStore | None = None,
        limits: Limits | None = None,
        models: Sequence[EstimatorView] = (),
        *,
        start_forecaster: StartForecaster | None = None,
    ) -> None:
        """`models`: the trained models `estimator_factory` serves, as `ListEstimators` describes them;
        `start_forecaster`: the forward simulation behind `forecast_start` (None: forecasts are refused)."""
        self.limits = limits or Limits()
        self.models = tuple(models)
        self.memory = MemoryWatch(self.limits.memory_limit_bytes)
        self.trainer = Trainer()
        self.specs = SpecBook(estimator_factory, self.limits, default_specs)
        self.table = NamespaceTable(self.limits, self.memory, self._build, self.specs.defaults)
        self.recorder = Recorder(store, self.limits, self.memory, self.trainer)
        self._start_forecaster = start_forecaster
        for name, stored in self.recorder.stored().items():
            held = self.table.new(name)
            self.recorder.restore(held, stored, self._recorded_spec)
            self.table.add_defaults(held)
            self.table.adopt(held)
            log.info("namespace %s restored: %d completions, clock %d", quote(name), len(held.history), held.clock)

    @property
    def defaults(self) -> list[ResolvedSpec]:
        return self.specs.defaults

    @property
    def serving(self) -> bool:
        """False while the state file cannot be written (writes are answered UNAVAILABLE)."""
        return self.recorder.healthy

    def on_health_change(self, listener: Callable[[bool], None]) -> None:
        self.recorder.on_health_change(listener)

    def spec(self, written: str) -> ResolvedSpec:
        """The SPEC a client wrote, resolved (once per spelling)."""
        return self.specs.spec(written)

    # --- the operations ---

    def predict(
        self,
        namespace: str,
        spec: str,
        jobs: Sequence[JobRequest],
        check_deadline: DeadlineCheck = no_deadline,
        where: str = "jobs",
        indexed: bool = True,
        names: Sequence[JobName] = (),
        intervals: bool = False,
        scored: bool = True,
    ) -> Answer:
        """Answer questions about `jobs` from the namespace's history; nothing is learned, the clock stays.

        An estimator whose predictions change its later answers records them
        as submissions (see the module's documentation), with the names they
        gave first; otherwise a name new to the namespace is answered for
        without being kept. With `intervals`, each answer comes with the
        estimator's runtime interval, if it has one. Unless `scored` is false (a forecast's questions, which are
        no submissions), the answers wait for their jobs' completions in the live scores.
        """
        resolved = self.specs.spec(spec)
        with self.table.found(namespace, create=resolved.records) as held, held:
            check_deadline()
            clock = held.clock
            ids, new_names = held.identify(names)
            asked = at_clock(with_ids(jobs, names, ids), clock)
            held.check_submits(asked, where, clock, indexed)
            estimator = held.estimator(resolved)
            if resolved.records:
                self.recorder.record(held, [], asked, resolved, moves_clock=False, new_names=new_names)
                predictions, shown = held.predict(estimator, asked, no_deadline, intervals)
                self.recorder.maybe_snapshot(held)
            else:
                predictions, shown = held.predict(estimator, asked, check_deadline, intervals)
            if scored:
                self.recorder.remember(held, resolved, asked, predictions)
        return Answer(predictions, resolved.canonical, held.name, clock, intervals=shown)

    def observe(
        self,
        namespace: str,
        batch: list[FinishedJob],
        check_deadline: DeadlineCheck,
        names: Sequence[JobName] = (),
    ) -> tuple[int, int]:
        """Record and learn completions (`names`: the users and groups their jobs gave by name); return
        (accepted, duplicates)."""
        with self.table.found(namespace, create=bool(batch)) as held, held:
            check_deadline()
            ids, new_names = held.identify(names)
            batch = finished_with_ids(batch, names, ids)
            recorded = self.recorder.record(held, batch, [], None, moves_clock=True, new_names=new_names)
            self.recorder.maybe_snapshot(held)
        return recorded.accepted, recorded.duplicates

    def sync(
        self,
        namespace: str,
        spec: str,
        batch: list[FinishedJob],
        jobs: Sequence[JobRequest],
        check_deadline: DeadlineCheck,
        completion_names: Sequence[JobName] = (),
        names: Sequence[JobName] = (),
    ) -> Answer:
        """Record and learn `batch`, then record and predict the submitted `jobs`, under one hold of the lock.

        `completion_names` and `names`: the users and groups the completions' and the jobs' gave by name.
        """
        resolved = self.specs.spec(spec)
        with self.table.found(namespace, create=bool(batch or jobs)) as held, held:
            check_deadline()
            ids, new_names = held.identify([*completion_names, *names])
            batch = finished_with_ids(batch, completion_names, ids)
            jobs = with_ids(jobs, names, ids)
            estimator = held.estimator(resolved) if jobs else None
            recorded = self.recorder.record(held, batch, jobs, resolved, moves_clock=True, new_names=new_names)
            submitted = recorded.submitted
            predictions = [] if estimator is None else held.predict(estimator, submitted, no_deadline)[0]
            self.recorder.remember(held, resolved, submitted, predictions)
            self.recorder.maybe_snapshot(held)
        return Answer(
            predictions, resolved.canonical, held.name, recorded.clock, recorded.accepted, recorded.duplicates
        )

    def forecast_start(
        self,
        namespace: str,
        spec: str,
        state: QueueState,
        scheduler: Scheduler,
        lower_quantile: float = DEFAULT_LOWER_QUANTILE,
        check_deadline: DeadlineCheck = no_deadline,
        draws: int = 0,
    ) -> ForecastAnswer:
        """Each waiting job's forecast start and bounds: the scheduler run forward from `state`, each job running
        for the t_sched the namespace's estimator gives it at `state.now`, or, with `draws`, the median of that
        many runs with each t_sched multiplied by an error the estimator made on the namespace's completions
        (its live scores; docs/queue-time.md). Learns nothing."""
        forecaster = self._start_forecaster
        if forecaster is None:
            raise FailedPrecondition("this server cannot forecast: it was started without the forward simulation")
        if not 0 <= draws <= MAX_DRAWS:
            raise InvalidRequest(f"draws must be in [0, {MAX_DRAWS}] (0: no sampling), got {draws}")
        highest = 0.5 if draws else 1
        if not 0 < lower_quantile < highest:
            raise InvalidRequest(
                f"lower_quantile must be in (0, {highest}){' with draws' if draws else ''}, got {lower_quantile}"
            )
        check_state(state)
        try:
            forecaster.check(scheduler, state)
        except ValueError as error:
            raise InvalidRequest(str(error)) from None
        asked = [job._replace(submit=state.now) for job in (*(s.job for s in state.running), *state.waiting)]
        answer = self.predict(namespace, spec, asked, check_deadline, names=state.names, scored=False)
        held = self.table.get(namespace)  # a question never creates a namespace: without one, no lifetimes
        lifetimes, ratios = None, []
        if held is not None:
            with held:
                lifetimes = self._forecast_lifetimes.lookup(held, held.name, held.history, state.now)
                ratios = held.live.ratios(answer.estimator) if draws else []
        check_deadline()
        estimates = [prediction.t_sched for prediction in answer.predictions]
        running = len(state.running)
        split = (estimates[:running], estimates[running:])
        if draws and ratios:  # without an error to draw, the runs would all be the point forecast
            forecasts = sampled_forecasts(
                forecaster, state, scheduler, split, lifetimes, (ratios, draws), lower_quantile, check_deadline
            )
        else:
            forecasts = forecast_with_bounds(
                forecaster, state, scheduler, split, lifetimes, lower_quantile, check_deadline
            )
        check_deadline()
        return ForecastAnswer(forecasts, answer.estimator, answer.namespace, state.now)

    @functools.cached_property
    def _forecast_lifetimes(self) -> NamespaceLifetimes:
        return NamespaceLifetimes()

    # --- what it tells ---

    def describe(self, namespace: str) -> Description:
        """The estimators the server can build, its defaults, and what `namespace` holds (if it exists)."""
        estimators = (*built_in_views(), *self.models)
        defaults = tuple(spec.canonical for spec in self.specs.defaults)
        held = self.table.get(namespace)
        if held is None:
            return Description(estimators, defaults)
        with held:
            return Description(estimators, defaults, True, tuple(held.estimators), len(held.history), held.clock)

    def namespaces(self) -> list[NamespaceView]:
        """Every namespace held, by name: its size, clock and estimators (`tsched namespaces list`)."""
        return self.table.views()

    def status(self, namespace: str) -> NamespaceStatus | None:
        """What `namespace` holds and how its estimators did on its latest completions (None if it does not exist)."""
        held = self.table.get(namespace)
        if held is None:
            return None
        with held:
            return held.status()

    @property
    def namespace_count(self) -> int:
        return len(self.table)

    def overview(self) -> list[NamespaceStatus]:
        """The status of the `metrics_namespaces` namespaces with the most history."""
        statuses = (self.status(held.name) for held in self.table.largest(self.limits.metrics_namespaces))
        return [status for status in statuses if status is not None]

    def reset(self, namespace: str, missing_ok: bool = False) -> int:
        """Forget a namespace (stored history included); return how many completions it held.

        `missing_ok`: a namespace that does not exist held 0 (a simulation
        clearing its namespace before it starts), else it is NotFound.
        """
        return self.table.drop(namespace, missing_ok, self.recorder.forget)

    def close(self) -> None:
        """Stop the training threads and close the state file."""
        self.trainer.shutdown(wait=False, cancel_futures=True)
        self.recorder.close()

    # --- estimators ---

    def _build(self, canonical: str) -> Estimator:
        """A fresh estimator for a canonical SPEC, training on the server's training threads."""
        estimator = self.specs.build(canonical)
        estimator.train_on(self.trainer)
        return estimator

    def _recorded_spec(self, canonical: str) -> ResolvedSpec:
        """The estimator recorded submissions name, as a restart resolves it (not held to a client's caps)."""
        return self.specs.resolve(canonical, "recorded estimator", client=False)
