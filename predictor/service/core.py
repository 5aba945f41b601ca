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

Nothing here knows gRPC: refusals are `kernel.errors.ServiceError`s, which
the adapter (`servicer`) maps to status codes.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from kernel.durations import SECONDS_PER_DAY
from kernel.errors import (
    Conflict,
    FailedPrecondition,
    InvalidRequest,
    ModelError,
    NotFound,
    ResourceExhausted,
    SpecError,
    UsageError,
)
from kernel.jobs import UNSET_SUBMIT, FinishedJob, JobName, JobRequest, Prediction, RuntimeInterval
from kernel.specs import parse_spec
from predictor.estimators.base import Estimator
from predictor.estimators.baselines import OracleEstimator
from predictor.forecasting import (
    DEFAULT_LOWER_QUANTILE,
    QueueState,
    Scheduler,
    StartForecaster,
    forecast_with_bounds,
)
from predictor.history import HistoryDiscardedError
from predictor.registry import available, make_estimator
from predictor.service import records, snapshots
from predictor.service.forecasts import ForecastAnswer, NamespaceLifetimes, check_state
from predictor.service.limits import Limits, MemoryWatch
from predictor.service.live import LiveScores, LiveSummary
from predictor.service.quoting import clip, quote
from predictor.service.state import COMPLETIONS, CompletionStore, StateError, StoredNamespace

log = logging.getLogger("tsched.service")

#: Builds the estimator a SPEC names, and says its canonical SPEC: the name it is held and recorded under.
EstimatorFactory = Callable[[str], tuple[Estimator, str]]
DeadlineCheck = Callable[[], None]

DEFAULT_NAMESPACE = "default"
#: The longest SPEC a client may send (the longest canonical SPEC, lgbm-quantile's, is about 240 characters).
MAX_SPEC_LENGTH = 512
#: No time (submit, end) may be later than this: year 5138 in Unix seconds, beyond any real clock.
LATEST_TIME = 10**11
#: Threads that train models in the background (LightGBM releases the interpreter lock while it trains).
TRAINING_THREADS = 2
#: Trainings that may wait for a thread: each holds its training data (up to max_train rows) until it runs.
QUEUED_TRAININGS = 2
#: How often (in jobs) a long batch of questions checks whether its caller's deadline has passed.
DEADLINE_CHECK_EVERY = 4096
#: After a snapshot had to wait (a model training), the events recorded before it is tried again.
SNAPSHOT_RETRY_EVENTS = 1000
#: Effects of `predict` that change later answers: predictions by such an estimator are recorded.
RECORDED_EFFECTS = frozenset({"submissions", "model"})
#: The first id a namespace gives a user or group name: far above the numbers schedulers use.
NAME_IDS_START = 1 << 40
_NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")


class Trainer(futures.ThreadPoolExecutor):
    """The training threads, with at most QUEUED_TRAININGS trainings waiting: a further one waits to be queued.

    A training carries a snapshot of its training data; with an unbounded
    queue, many namespaces due for retraining at once would hold all of theirs.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=TRAINING_THREADS, thread_name_prefix="tsched-train")
        self._slots = threading.BoundedSemaphore(TRAINING_THREADS + QUEUED_TRAININGS)
        self._runs_lock = threading.Lock()
        #: Trainings started since the server started (the metrics' training runs).
        self.runs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        self._slots.acquire()
        with self._runs_lock:
            self.runs += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return future


def registry_factory(spec: str) -> tuple[Estimator, str]:
    """The registry's estimators (`predictor.registry`), held under their own SPEC."""
    estimator = make_estimator(spec)
    return estimator, estimator.spec


def at_clock(jobs: Sequence[JobRequest], clock: int) -> list[JobRequest]:
    """`jobs` with an unset submit time set to `clock`."""
    return [job._replace(submit=clock) if job.submit == UNSET_SUBMIT else job for job in jobs]


def with_ids(jobs: Sequence[JobRequest], names: Sequence[JobName], ids: dict[tuple[str, str], int]) -> list[JobRequest]:
    """`jobs` with the user and group they gave by name set to the namespace's ids for them."""
    jobs = list(jobs)
    for index, kind, name in names:
        jobs[index] = jobs[index]._replace(**{kind: ids[(kind, name)]})
    return jobs


def finished_with_ids(
    batch: Sequence[FinishedJob], names: Sequence[JobName], ids: dict[tuple[str, str], int]
) -> list[FinishedJob]:
    """Completions with their jobs' names set to ids, as `with_ids`."""
    if not names:
        return list(batch)
    requests = with_ids([job.request for job in batch], names, ids)
    return [job._replace(request=request) for job, request in zip(batch, requests, strict=True)]


def no_deadline() -> None:
    """A deadline check for work that must not stop half-way (recorded predictions) or is too short to check."""


@dataclass(frozen=True)
class ResolvedSpec:
    """A SPEC as a client wrote it, the canonical SPEC it stands for, and what its predictions do."""

    written: str
    canonical: str
    evaluation_only: bool
    #: Its predictions change its later answers, so they are recorded as submissions.
    records: bool
    #: Its predictions change its state at all, so recorded submissions are replayed into it.
    replays: bool


def _days(seconds: int) -> str:
    return f"{seconds / SECONDS_PER_DAY:g} days"


@dataclass(eq=False)
class Namespace:
    """One scheduler's (or one simulation's) history, clock and estimators.

    Use it as a context manager (`with namespace:`) for every read or change:
    that takes its lock, and refuses a namespace that was reset meanwhile.
    A `transient` namespace answers a question about a namespace that does
    not exist, and is dropped after it: a question never creates one.
    """

    name: str
    build: Callable[[str], Estimator]
    limits: Limits
    memory: MemoryWatch
    transient: bool = False
    history: records.History = field(default_factory=records.History)
    clock: int = 0
    estimators: dict[str, Estimator] = field(default_factory=dict)
    #: The ids of the user and group names it was given: {(field, name): id}, ids from NAME_IDS_START.
    names: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Events recorded since the last snapshot, and the sequence number of the latest in the state file.
    since_snapshot: int = 0
    last_seq: int = 0
    retired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Predictions answered, and how many of them were t_req for lack of history, since the server started.
    predictions: int = 0
    fallbacks: int = 0

    def __post_init__(self) -> None:
        self.live = LiveScores(self.limits.live_window, self.limits.live_pending)

    def __enter__(self) -> Namespace:
        self.lock.acquire()
        if self.retired:
            self.lock.release()
            raise Conflict(f"namespace {quote(self.name)} was reset during the call; retry it")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()

    def estimator(self, spec: ResolvedSpec) -> Estimator:
        """The namespace's estimator for `spec`, built on first use and taught the history so far."""
        estimator = self.estimators.get(spec.canonical)
        if estimator is None:
            if not self.transient:
                if len(self.estimators) >= self.limits.max_estimators:
                    raise ResourceExhausted(
                        f"estimator: namespace {quote(self.name)} already holds {self.limits.max_estimators} "
                        "estimators (--max-estimators); reuse one of its SPECs or reset it"
                    )
                self.memory.check_growth(f"estimator: a new estimator in namespace {quote(self.name)}")
            estimator = self.build(spec.canonical)
            observe = estimator.observe
            for job in self.history:
                observe(job)
            self.estimators[spec.canonical] = estimator
        return estimator

    def identify(self, names: Iterable[JobName]) -> tuple[dict[tuple[str, str], int], list[tuple[str, str, int]]]:
        """The id of every name: the namespace's, else a new one, returned apart as (field, name, id) to be
        stored before the namespace keeps it (a refused call assigns nothing)."""
        ids: dict[tuple[str, str], int] = {}
        new: list[tuple[str, str, int]] = []
        for _, kind, name in names:
            key = (kind, name)
            if key not in ids:
                known = self.names.get(key)
                if known is None:
                    known = NAME_IDS_START + len(self.names) + len(new)
                    new.append((kind, name, known))
                ids[key] = known
        return ids, new

    # --- checks ---

    def check_ends(self, batch: Sequence[FinishedJob], where: str) -> None:
        """Each end no later than LATEST_TIME and at most the time step ahead of the clock (or the previous end)."""
        step = self.limits.max_time_step_seconds
        latest = self.clock
        for index, job in enumerate(batch):
            self._check_time(job.end, latest, step, f"{where}[{index}].end")
            latest = max(latest, job.end)

    def check_submits(self, jobs: Sequence[JobRequest], where: str, clock: int, indexed: bool = True) -> None:
        step = self.limits.max_time_step_seconds
        for index, job in enumerate(jobs):
            self._check_time(job.submit, clock, step, f"{where}[{index}].submit" if indexed else f"{where}.submit")

    def _check_time(self, time: int, clock: int, step: int, place: str) -> None:
        if time > LATEST_TIME:
            raise InvalidRequest(f"{place} ({time}) is after {LATEST_TIME} (year 5138 in Unix seconds): not a time")
        if clock > 0 and time - clock > step:
            raise InvalidRequest(
                f"{place} ({time}) is more than {_days(step)} ahead of namespace {quote(self.name)}'s clock ({clock}): "
                "a time that far ahead would hold the namespace up (completions come in end order); "
                "this server's --max-time-step"
            )

    def fresh(self, batch: Sequence[FinishedJob], where: str) -> list[FinishedJob]:
        """The completions of `batch` not already held, refusing one that ends before the latest held.

        A client that resends after a lost reply sends completions the
        namespace already holds; they are recognised (same job, same end) and
        skipped rather than learned twice.
        """
        latest = self.history.latest_end
        if not batch or latest is None or batch[0].end > latest:
            return list(batch)
        held = set(self.history.since(batch[0].end))
        fresh = [job for job in batch if job not in held]
        if fresh and fresh[0].end < latest:
            index = batch.index(fresh[0])
            raise InvalidRequest(
                f"{where}[{index}].end ({fresh[0].end}) is before the latest completion namespace "
                f"{quote(self.name)} holds ({latest}): completions must come in end order"
            )
        return fresh

    # --- changes ---

    def learn(self, completions: Sequence[FinishedJob]) -> None:
        """Teach every estimator `completions` (already recorded), and drop history beyond the bounds."""
        if not completions:
            return
        for estimator in self.estimators.values():
            observe = estimator.observe
            for job in completions:
                observe(job)
        self.history.extend(completions)
        self.live.completed(completions)
        self.history.evict(completions[-1].end - self.limits.history_window_seconds, self.limits.max_history)

    def predict(
        self,
        estimator: Estimator,
        jobs: Sequence[JobRequest],
        truth: dict[int, int] | None,
        check_deadline: DeadlineCheck,
        intervals: bool = False,
    ) -> tuple[list[Prediction], list[RuntimeInterval | None]]:
        """Predict `jobs` (their submit times set); one `predict_many` per chunk, the deadline checked between.

        With `intervals`, each prediction's interval from the same call (else no intervals).
        """
        if isinstance(estimator, OracleEstimator):
            estimator.bind_truth(truth or {})
        predictions: list[Prediction] = []
        shown: list[RuntimeInterval | None] = []
        for start in range(0, len(jobs), DEADLINE_CHECK_EVERY):
            if start:
                check_deadline()
            chunk = jobs[start : start + DEADLINE_CHECK_EVERY]
            try:
                if intervals:
                    for prediction, interval in estimator.predict_many(chunk, intervals=True):
                        predictions.append(prediction)
                        shown.append(interval)
                else:
                    predictions += estimator.predict_many(chunk)
            except HistoryDiscardedError as error:
                raise FailedPrecondition(str(error)) from None
        return predictions, shown


@dataclass(frozen=True)
class NamespaceStatus:
    """A namespace at a glance: its history, clock, answers and live scores (metrics, `tsched status`)."""

    name: str
    completions: int
    clock: int
    predictions: int
    fallbacks: int
    pending: int
    estimators: list[LiveSummary]


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
    lock, and creating or dropping a namespace takes the core's.
    """

    def __init__(
        self,
        default_specs: Sequence[str],
        estimator_factory: EstimatorFactory = registry_factory,
        allow_oracle: bool = False,
        store: CompletionStore | None = None,
        limits: Limits | None = None,
        models: Sequence[dict[str, Any]] = (),
        *,
        start_forecaster: StartForecaster | None = None,
    ) -> None:
        """`models`: the trained models `estimator_factory` serves, as `ListEstimators` describes them;
        `start_forecaster`: the forward simulation behind `forecast_start` (None: forecasts are refused)."""
        self.limits = limits or Limits()
        self.models = list(models)
        self.memory = MemoryWatch(self.limits.memory_limit_bytes)
        self._factory = estimator_factory
        self._start_forecaster = start_forecaster
        self._allow_oracle = allow_oracle
        self._store = store
        self._caps = _parse_caps(self.limits.estimator_limit)
        self._specs: dict[str, ResolvedSpec] = {}
        self._specs_lock = threading.Lock()
        self._namespaces: dict[str, Namespace] = {}
        self._namespaces_lock = threading.Lock()
        self.trainer = Trainer()
        if not default_specs:
            raise InvalidRequest("the server needs at least one default estimator SPEC")
        self.defaults = [self._resolve(spec, "default estimator", client=False) for spec in default_specs]
        if store is not None:
            for name, stored in store.load().items():
                self._namespaces[name] = self._restore(name, stored)

    @property
    def allow_oracle(self) -> bool:
        return self._allow_oracle

    @property
    def serving(self) -> bool:
        """False while the state file cannot be written (writes are answered UNAVAILABLE)."""
        return self._store is None or self._store.healthy

    def on_health_change(self, listener: Callable[[bool], None]) -> None:
        if self._store is not None:
            self._store.on_health_change(listener)

    # --- the operations ---

    def predict(
        self,
        namespace: str,
        spec: str,
        jobs: Sequence[JobRequest],
        truth: dict[int, int] | None,
        check_deadline: DeadlineCheck = no_deadline,
        where: str = "jobs",
        indexed: bool = True,
        names: Sequence[JobName] = (),
        intervals: bool = False,
    ) -> Answer:
        """Answer questions about `jobs` from the namespace's history; nothing is learned, the clock stays.

        An estimator whose predictions change its later answers records them
        as submissions (see the module's documentation), with the names they
        gave first; otherwise a name new to the namespace is answered for
        without being kept. With `intervals`, each answer comes with the
        estimator's runtime interval, if it has one.
        """
        resolved = self.spec(spec)
        held = self.namespace(namespace, create=resolved.records)
        check_deadline()
        with held:
            clock = held.clock
            ids, new_names = held.identify(names)
            asked = at_clock(with_ids(jobs, names, ids), clock)
            held.check_submits(asked, where, clock, indexed)
            estimator = held.estimator(resolved)
            if resolved.records:
                self._record(held, [], asked, resolved, moves_clock=False, new_names=new_names)
                predictions, shown = held.predict(estimator, asked, truth, no_deadline, intervals)
                self._maybe_snapshot(held)
            else:
                predictions, shown = held.predict(estimator, asked, truth, check_deadline, intervals)
            self._remember(held, resolved, asked, predictions)
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
        held = self.namespace(namespace, create=bool(batch))
        check_deadline()
        with held:
            ids, new_names = held.identify(names)
            batch = finished_with_ids(batch, names, ids)
            accepted, duplicates, _, _ = self._record(held, batch, [], None, moves_clock=True, new_names=new_names)
            self._maybe_snapshot(held)
        return accepted, duplicates

    def sync(
        self,
        namespace: str,
        spec: str,
        batch: list[FinishedJob],
        jobs: Sequence[JobRequest],
        truth: dict[int, int] | None,
        check_deadline: DeadlineCheck,
        completion_names: Sequence[JobName] = (),
        names: Sequence[JobName] = (),
    ) -> Answer:
        """Record and learn `batch`, then record and predict the submitted `jobs`, under one hold of the lock.

        `completion_names` and `names`: the users and groups the completions' and the jobs' gave by name.
        """
        resolved = self.spec(spec)
        held = self.namespace(namespace, create=bool(batch or jobs))
        check_deadline()
        with held:
            ids, new_names = held.identify([*completion_names, *names])
            batch = finished_with_ids(batch, completion_names, ids)
            jobs = with_ids(jobs, names, ids)
            estimator = held.estimator(resolved) if jobs else None
            accepted, duplicates, submitted, clock = self._record(
                held, batch, jobs, resolved, moves_clock=True, new_names=new_names
            )
            predictions = [] if estimator is None else held.predict(estimator, submitted, truth, no_deadline)[0]
            self._remember(held, resolved, submitted, predictions)
            self._maybe_snapshot(held)
        return Answer(predictions, resolved.canonical, held.name, clock, accepted, duplicates)

    def forecast_start(
        self,
        namespace: str,
        spec: str,
        state: QueueState,
        scheduler: Scheduler,
        lower_quantile: float = DEFAULT_LOWER_QUANTILE,
        truth: dict[int, int] | None = None,
        check_deadline: DeadlineCheck = no_deadline,
    ) -> ForecastAnswer:
        """Each waiting job's forecast start and bounds: the scheduler run forward from `state`, each job running
        for the t_sched the namespace's estimator gives it at `state.now` (docs/queue-time.md). Learns nothing."""
        forecaster = self._start_forecaster
        if forecaster is None:
            raise FailedPrecondition("this server cannot forecast: it was started without the forward simulation")
        try:
            forecaster.check(scheduler)
        except ValueError as error:
            raise InvalidRequest(str(error)) from None
        if not 0 < lower_quantile < 1:
            raise InvalidRequest(f"lower_quantile must be in (0, 1), got {lower_quantile}")
        check_state(state)
        asked = [job._replace(submit=state.now) for job in (*(s.job for s in state.running), *state.waiting)]
        answer = self.predict(namespace, spec, asked, truth, check_deadline)
        held = self.namespace(namespace)
        with held:
            lifetimes = self._forecast_lifetimes.lookup(held, held.name, held.history, state.now)
        check_deadline()
        estimates = [prediction.t_sched for prediction in answer.predictions]
        running = len(state.running)
        forecasts = forecast_with_bounds(
            forecaster, state, scheduler, (estimates[:running], estimates[running:]), lifetimes, lower_quantile
        )
        check_deadline()
        return ForecastAnswer(forecasts, answer.estimator, answer.namespace, state.now)

    @functools.cached_property
    def _forecast_lifetimes(self) -> NamespaceLifetimes:
        return NamespaceLifetimes()

    def describe(self, namespace: str) -> dict[str, Any]:
        """The estimators the server can build, its defaults, and what `namespace` holds (if it exists)."""
        name = namespace or DEFAULT_NAMESPACE
        description: dict[str, Any] = {
            "estimators": [self._describe(cls) for _, cls in sorted(available().items())] + self.models,
            "default_specs": [spec.canonical for spec in self.defaults],
            "namespace_exists": False,
            "namespace_specs": [],
            "completions": 0,
            "clock": 0,
        }
        held = self._namespaces.get(name)
        if held is not None:
            with held:
                description.update(
                    namespace_exists=True,
                    namespace_specs=list(held.estimators),
                    completions=len(held.history),
                    clock=held.clock,
                )
        return description

    def namespaces(self) -> list[dict[str, Any]]:
        """Every namespace held, by name: its size, clock and estimators (`tsched namespaces list`)."""
        with self._namespaces_lock:
            held = sorted(self._namespaces.items())
        listing = []
        for name, namespace in held:
            try:
                namespace.__enter__()
            except Conflict:  # reset since it was listed
                continue
            try:
                listing.append(
                    {
                        "name": name,
                        "completions": len(namespace.history),
                        "clock": namespace.clock,
                        "estimators": list(namespace.estimators),
                    }
                )
            finally:
                namespace.__exit__()
        return listing

    def status(self, namespace: str) -> NamespaceStatus | None:
        """What `namespace` holds and how its estimators did on its latest completions (None if it does not exist)."""
        held = self._namespaces.get(namespace or DEFAULT_NAMESPACE)
        if held is None:
            return None
        with held:
            return NamespaceStatus(
                held.name,
                len(held.history),
                held.clock,
                held.predictions,
                held.fallbacks,
                held.live.pending,
                held.live.summaries(),
            )

    @property
    def namespace_count(self) -> int:
        return len(self._namespaces)

    def overview(self) -> list[NamespaceStatus]:
        """The status of the `metrics_namespaces` namespaces with the most history."""
        largest = sorted(self._namespaces.values(), key=lambda namespace: len(namespace.history), reverse=True)
        statuses = (self.status(namespace.name) for namespace in largest[: self.limits.metrics_namespaces])
        return [status for status in statuses if status is not None]

    def reset(self, namespace: str, missing_ok: bool = False) -> int:
        """Forget a namespace (stored history included); return how many completions it held.

        `missing_ok`: a namespace that does not exist held 0 (a simulation
        clearing its namespace before it starts), else it is NotFound.
        """
        name = namespace or DEFAULT_NAMESPACE
        with self._namespaces_lock:
            held = self._namespaces.get(name)
            if held is None:
                if missing_ok:
                    return 0
                raise NotFound(f"namespace {quote(name)} does not exist")
            with held:
                if self._store is not None:
                    self._store.forget(name)
                forgotten = len(held.history)
                # Calls waiting on the old object are refused (Conflict); new calls get a fresh one.
                held.retired = True
                del self._namespaces[name]
        log.info("namespace %s reset (%d completions forgotten)", quote(name), forgotten)
        return forgotten

    def close(self) -> None:
        """Stop the training threads and close the state file."""
        self.trainer.shutdown(wait=False, cancel_futures=True)
        if self._store is not None:
            self._store.close()

    # --- recording ---

    def _remember(
        self, held: Namespace, spec: ResolvedSpec, jobs: Sequence[JobRequest], predictions: Sequence[Prediction]
    ) -> None:
        """Count the answers and keep them for the live scores (not for a transient namespace, nor near the
        memory ceiling: scoring must never refuse a prediction)."""
        if held.transient or not predictions:
            return
        held.predictions += len(predictions)
        held.fallbacks += sum(prediction.fallback for prediction in predictions)
        try:
            self.memory.check_growth(f"live scores of namespace {quote(held.name)}")
        except ResourceExhausted:
            return
        held.live.predicted(spec.canonical, jobs, predictions)

    def _record(
        self,
        held: Namespace,
        batch: Sequence[FinishedJob],
        jobs: Sequence[JobRequest],
        spec: ResolvedSpec | None,
        moves_clock: bool,
        new_names: Sequence[tuple[str, str, int]] = (),
    ) -> tuple[int, int, list[JobRequest], int]:
        """Check, store, then learn a call's completions and submissions.

        Returns (completions accepted, duplicates, the submissions with their
        submit times set, the clock). Everything is checked before anything
        is stored, and stored before anything is learned: a refused call
        changes nothing.
        """
        held.check_ends(batch, "completions")
        fresh = held.fresh(batch, "completions")
        clock = max(held.clock, fresh[-1].end) if fresh else held.clock
        submitted = at_clock(jobs, clock)
        if moves_clock:
            held.check_submits(submitted, "submitted", clock)
            clock = max(clock, max((job.submit for job in submitted), default=clock))
        if not fresh and not submitted:
            return 0, len(batch), submitted, clock
        assert not held.transient  # only calls that record create (or find) a lasting namespace
        self.memory.check_growth(f"namespace {quote(held.name)}")
        if self._store is not None:
            held.last_seq = self._store.record(
                held.name,
                clock,
                fresh,
                submitted,
                None if spec is None or not submitted else spec.canonical,
                new_names,
            )
        held.names.update(((kind, name), number) for kind, name, number in new_names)
        held.learn(fresh)
        held.clock = clock
        held.since_snapshot += len(fresh) + len(submitted)
        return len(fresh), len(batch) - len(fresh), submitted, clock

    def _maybe_snapshot(self, held: Namespace) -> None:
        """Save the namespace (under its lock) once it has recorded `snapshot_every` events since the last save."""
        if self._store is None or held.since_snapshot < self.limits.snapshot_every:
            return
        image = snapshots.NamespaceImage(records.pack(held.history.rows), held.clock, dict(held.estimators))
        try:
            blob = snapshots.dump(image)
        except snapshots.SnapshotDeferredError:
            held.since_snapshot = self.limits.snapshot_every - SNAPSHOT_RETRY_EVENTS
            return
        self._store.save_snapshot(held.name, held.last_seq, blob)
        held.since_snapshot = 0
        log.info("namespace %s saved: %d completions, %d bytes", quote(held.name), len(held.history), len(blob))

    def _restore(self, name: str, stored: StoredNamespace) -> Namespace:
        """A namespace as the state file holds it: its snapshot, then the events after it, replayed in order."""
        held = self._new_namespace(name)
        if stored.snapshot is not None:
            try:
                image = snapshots.load(stored.snapshot, self.trainer)
            except snapshots.SnapshotRefusedError as error:
                raise StateError(f"namespace {quote(name)} in the state file: {error}") from None
            held.history = records.History(records.unpack(image.history, records.COMPLETION_WIDTH))
            held.estimators = image.estimators
        skipped: set[str] = set()
        for event in stored.events:
            if event.kind == COMPLETIONS:
                held.learn(event.completions)
            elif event.spec is not None:
                self._replay_submissions(held, event.spec, event.submissions, skipped)
            held.last_seq = event.seq
        held.since_snapshot = len(stored.events)
        held.clock = stored.clock
        held.names = stored.names
        for spec in self.defaults:
            held.estimator(spec)
        log.info("namespace %s restored: %d completions, clock %d", quote(name), len(held.history), held.clock)
        return held

    def _replay_submissions(self, held: Namespace, spec: str, jobs: list[JobRequest], skipped: set[str]) -> None:
        """Predict recorded submissions again, as they were: errors included (a refusal refused again)."""
        try:
            resolved = self._resolve(spec, "recorded estimator", client=False)
        except InvalidRequest as error:  # a model folder no longer served, the oracle no longer allowed
            if spec not in skipped:
                skipped.add(spec)
                log.warning("namespace %s: recorded submissions of %s not replayed: %s", quote(held.name), spec, error)
            return
        if not resolved.replays:
            return
        try:
            held.estimator(resolved).predict_many(jobs)
        except HistoryDiscardedError:
            pass
        except Exception as error:  # an estimator's bug recurs here as it occurred; the server must still start
            log.warning("namespace %s: replaying submissions to %s: %s", quote(held.name), spec, clip(repr(error)))

    # --- SPECs ---

    def spec(self, written: str) -> ResolvedSpec:
        """The SPEC a client wrote, parsed and checked once per spelling (`max_specs` spellings kept)."""
        if not written:
            return self.defaults[0]
        cached = self._specs.get(written)
        if cached is not None:
            return cached
        if len(written) > MAX_SPEC_LENGTH:
            raise InvalidRequest(f"estimator: a SPEC has at most {MAX_SPEC_LENGTH} characters; got {len(written):,}")
        resolved = self._resolve(written, "estimator", client=True)
        with self._specs_lock:
            while len(self._specs) >= self.limits.max_specs:
                del self._specs[next(iter(self._specs))]
            self._specs[written] = resolved
        return resolved

    def _resolve(self, written: str, where: str, client: bool) -> ResolvedSpec:
        """Parse and validate a SPEC; refuse evaluation-only estimators unless allowed, and a client's SPEC
        asking for more than this server's estimator limits."""
        try:
            probe, canonical = self._factory(written)
        except (SpecError, ModelError) as error:  # their messages show the SPEC whole: show the start of it
            raise InvalidRequest(f"{where}: {str(error).replace(repr(written), quote(written, 100))}") from None
        if probe.evaluation_only and not self._allow_oracle:
            raise InvalidRequest(
                f"{where}: {probe.name!r} is for evaluation only and this server does not allow it "
                "(start it with the oracle allowed)"
            )
        if client:
            self._check_caps(written, probe, where)
        effects = probe.predict_effects
        return ResolvedSpec(written, canonical, probe.evaluation_only, bool(effects & RECORDED_EFFECTS), bool(effects))

    def _check_caps(self, written: str, probe: Estimator, where: str) -> None:
        caps = self._caps.get(probe.name)
        if not caps:
            return
        params = probe.get_params()
        unknown = sorted(key for key in caps if not isinstance(params.get(key), int | float))
        if unknown:
            log.error("--estimator-limit names %s, which %s has no number for", ", ".join(unknown), probe.name)
            raise InvalidRequest(f"{where}: this server's --estimator-limit for {probe.name} is misconfigured")
        for key in parse_spec(written)[1]:
            if key in caps and params[key] > caps[key]:
                raise InvalidRequest(
                    f"{where}: {key}={params[key]} is above this server's limit for {probe.name} ({caps[key]:g}); "
                    "see --estimator-limit"
                )

    # --- namespaces ---

    def namespace(self, written: str, create: bool = True) -> Namespace:
        """The namespace called `written` ("" is the default); created when `create`, else transient if absent."""
        name = written or DEFAULT_NAMESPACE
        held = self._namespaces.get(name)
        if held is not None:
            return held
        if not _NAMESPACE_PATTERN.fullmatch(name):
            raise InvalidRequest(f"namespace {quote(name)} is not 1-128 characters of letters, digits and ._:/@+-")
        if not create:
            return self._new_namespace(name, transient=True)
        with self._namespaces_lock:
            held = self._namespaces.get(name)
            if held is None:
                if len(self._namespaces) >= self.limits.max_namespaces:
                    raise ResourceExhausted(
                        f"namespace {quote(name)}: this server holds its limit of {self.limits.max_namespaces} "
                        "namespaces (--max-namespaces); reset unused ones"
                    )
                self.memory.check_growth(f"namespace {quote(name)}")
                held = self._new_namespace(name)
                for spec in self.defaults:
                    held.estimator(spec)
                self._namespaces[name] = held
        return held

    def _new_namespace(self, name: str, transient: bool = False) -> Namespace:
        return Namespace(name, self._build, self.limits, self.memory, transient)

    def _build(self, canonical: str) -> Estimator:
        """A fresh estimator for a canonical SPEC, training on the server's training threads."""
        estimator, _ = self._factory(canonical)
        estimator.train_on(self.trainer)
        return estimator

    def _describe(self, cls: type[Estimator]) -> dict[str, Any]:
        parameters = inspect.signature(cls.__init__).parameters
        docstring = inspect.getdoc(cls) or ""
        return {
            "name": cls.name,
            "parameters": {name: str(parameters[name].default) for name in cls.param_names()},
            "evaluation_only": cls.evaluation_only,
            "allowed": self._allow_oracle or not cls.evaluation_only,
            "description": docstring.partition("\n")[0],
            "trained_model": False,
        }


def _parse_caps(texts: Iterable[str]) -> dict[str, dict[str, float]]:
    """`--estimator-limit` values (`NAME:param=max,...`) as {name: {param: max}}.

    The parameter names are checked when the estimator is first asked for, so
    that starting a server does not import every estimator (LightGBM's import
    alone takes half a second).
    """
    caps: dict[str, dict[str, float]] = {}
    for text in texts:
        try:
            name, params = parse_spec(text)
            caps.setdefault(name, {}).update({key: float(value) for key, value in params.items()})
        except (SpecError, ValueError):
            raise UsageError(f"--estimator-limit {text!r}: expected NAME:param=number,...") from None
        if not params:
            raise UsageError(f"--estimator-limit {text!r}: names no parameter")
    return caps
