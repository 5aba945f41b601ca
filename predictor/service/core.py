"""The predictor service's domain: namespaces of history, their estimators, and durable completions.

One server holds many namespaces (one per cluster, or per simulation run).
A namespace owns its history, its clock (the latest submit or completion time
it has seen) and one estimator per SPEC used in it, all fed the same
completions. With a state file, completions are stored durably before the call
that brought them returns, and replayed into fresh estimators on start.

Nothing here knows gRPC: refusals are `predictor.errors.ServiceError`s, which
the adapter (`servicer`) maps to status codes. The request path is kept lean
for latency: SPECs are parsed once and cached, estimators are built once per
namespace, and predictions never touch SQLite.
"""

from __future__ import annotations

import bisect
import functools
import inspect
import logging
import re
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from predictor.errors import Conflict, FailedPrecondition, InvalidRequest, NotFound, SpecError
from predictor.estimators.base import Estimator
from predictor.estimators.baselines import OracleEstimator
from predictor.forecasting import DEFAULT_LOWER_QUANTILE, QueueState, Scheduler, forecast_with_bounds
from predictor.history import HistoryDiscardedError
from predictor.jobs import UNSET_SUBMIT, FinishedJob, JobRequest, Prediction
from predictor.registry import available, make_estimator
from predictor.service.forecasts import ForecastAnswer, NamespaceLifetimes, check_state, installed_start_forecaster
from predictor.service.state import CompletionStore, StoredNamespace

log = logging.getLogger("tsched.service")

EstimatorFactory = Callable[[str], Estimator]
DeadlineCheck = Callable[[], None]

DEFAULT_NAMESPACE = "default"
#: Distinct estimators one namespace may hold, so a client cannot exhaust memory with SPEC variants.
MAX_ESTIMATORS_PER_NAMESPACE = 32
#: Parsed SPECs kept for reuse; beyond this, unusual SPECs are parsed on every call.
SPEC_CACHE_SIZE = 1024
#: Threads that train models in the background (LightGBM releases the interpreter lock while it trains).
TRAINING_THREADS = 2
#: How often (in jobs) a long batch checks whether its caller's deadline has passed.
DEADLINE_CHECK_EVERY = 4096
_NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")


def no_deadline() -> None:
    """A deadline check for work too short to be worth checking mid-way."""


@dataclass(frozen=True)
class ResolvedSpec:
    """A SPEC as a client wrote it, and the canonical SPEC (all parameters spelt out) it stands for."""

    written: str
    canonical: str
    evaluation_only: bool


def _end(job: FinishedJob) -> int:
    return job.end


@dataclass
class Namespace:
    """One scheduler's (or one simulation's) history, clock and estimators.

    Use it as a context manager (`with namespace:`) for every read or change:
    that takes its lock, and refuses a namespace that was reset meanwhile.
    """

    name: str
    factory: EstimatorFactory
    #: Where estimators that train models train them, off the request path.
    trainer: futures.Executor | None = None
    history: list[FinishedJob] = field(default_factory=list)
    clock: int = 0
    estimators: dict[str, Estimator] = field(default_factory=dict)
    retired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Namespace:
        self.lock.acquire()
        if self.retired:
            self.lock.release()
            raise Conflict(f"namespace {self.name!r} was reset during the call; retry it")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()

    def estimator(self, spec: ResolvedSpec) -> Estimator:
        """The namespace's estimator for `spec`, built on first use and taught the history so far."""
        estimator = self.estimators.get(spec.canonical)
        if estimator is None:
            if len(self.estimators) >= MAX_ESTIMATORS_PER_NAMESPACE:
                raise InvalidRequest(
                    f"estimator: namespace {self.name!r} already holds "
                    f"{MAX_ESTIMATORS_PER_NAMESPACE} estimators; reset it or reuse a SPEC"
                )
            estimator = self.factory(spec.written)
            estimator.train_on(self.trainer)
            observe = estimator.observe
            for job in self.history:
                observe(job)
            self.estimators[spec.canonical] = estimator
        return estimator

    def learn(self, batch: list[FinishedJob], store: CompletionStore | None, where: str) -> tuple[int, int]:
        """Store, then learn, the completions not already held; return (accepted, duplicates).

        A client that resends after a lost reply sends completions the
        namespace already holds; they are recognised (same job, same end) and
        skipped rather than learned twice.
        """
        if not batch:
            return 0, 0
        latest = self.history[-1].end if self.history else None
        fresh = batch
        if latest is not None and batch[0].end <= latest:
            held = set(self.history[bisect.bisect_left(self.history, batch[0].end, key=_end) :])
            fresh = [job for job in batch if job not in held]
            if fresh and fresh[0].end < latest:
                index = batch.index(fresh[0])
                raise InvalidRequest(
                    f"{where}[{index}].end ({fresh[0].end}) is before the latest completion "
                    f"namespace {self.name!r} holds ({latest}): completions must come in end order"
                )
        if fresh:
            clock = max(self.clock, fresh[-1].end)
            if store is not None:
                store.append(self.name, fresh, clock)
            self.clock = clock
            for estimator in self.estimators.values():
                observe = estimator.observe
                for job in fresh:
                    observe(job)
            self.history.extend(fresh)
        return len(fresh), len(batch) - len(fresh)

    def predict(
        self,
        estimator: Estimator,
        requests: Sequence[JobRequest],
        truth: dict[int, int] | None,
        check_deadline: DeadlineCheck,
    ) -> list[Prediction]:
        """Predict `requests` against the current history; an unset submit is the clock, a later one moves it.

        One `predict_many` call per chunk lets an estimator batch its work (one
        booster call for many jobs), and the caller's deadline is checked between chunks.
        """
        if isinstance(estimator, OracleEstimator):
            estimator.bind_truth(truth or {})
        clock = self.clock
        if any(request.submit == UNSET_SUBMIT for request in requests):
            requests = [
                request._replace(submit=clock) if request.submit == UNSET_SUBMIT else request for request in requests
            ]
        latest = max(clock, max((request.submit for request in requests), default=clock))
        predictions: list[Prediction] = []
        for start in range(0, len(requests), DEADLINE_CHECK_EVERY):
            if start:
                check_deadline()
            try:
                predictions += estimator.predict_many(requests[start : start + DEADLINE_CHECK_EVERY])
            except HistoryDiscardedError as error:
                raise FailedPrecondition(str(error)) from None
        self.clock = latest
        return predictions


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


class PredictorCore:
    """Namespaces, estimators and persistence: everything the service does, without the transport.

    Calls come from the server's worker threads; each namespace has its own
    lock, and creating or dropping a namespace takes the core's.
    """

    def __init__(
        self,
        default_specs: Sequence[str],
        estimator_factory: EstimatorFactory = make_estimator,
        allow_oracle: bool = False,
        store: CompletionStore | None = None,
    ) -> None:
        self._factory = estimator_factory
        self._allow_oracle = allow_oracle
        self._store = store
        self._specs: dict[str, ResolvedSpec] = {}
        self._namespaces: dict[str, Namespace] = {}
        self._namespaces_lock = threading.Lock()
        self.trainer = futures.ThreadPoolExecutor(max_workers=TRAINING_THREADS, thread_name_prefix="tsched-train")
        if not default_specs:
            raise InvalidRequest("the server needs at least one default estimator SPEC")
        self.defaults = [self._resolve(spec, "default estimator") for spec in default_specs]
        self._specs[""] = self.defaults[0]
        if store is not None:
            for name, stored in store.load().items():
                self._namespaces[name] = self._new_namespace(name, stored)
                log.info("namespace %r restored: %d completions, clock %d", name, len(stored.completions), stored.clock)

    @property
    def allow_oracle(self) -> bool:
        return self._allow_oracle

    # --- the operations ---

    def predict(
        self,
        namespace: str,
        spec: str,
        jobs: Sequence[JobRequest],
        truth: dict[int, int] | None,
        check_deadline: DeadlineCheck = no_deadline,
    ) -> Answer:
        """Predict `jobs` against the namespace's history (nothing is learned)."""
        resolved = self.spec(spec)
        held = self.namespace(namespace)
        check_deadline()
        with held:
            clock = held.clock
            predictions = held.predict(held.estimator(resolved), jobs, truth, check_deadline)
        return Answer(predictions, resolved.canonical, held.name, clock)

    def observe(self, namespace: str, batch: list[FinishedJob], check_deadline: DeadlineCheck) -> tuple[int, int]:
        """Store and learn completions; return (accepted, duplicates)."""
        held = self.namespace(namespace)
        check_deadline()
        with held:
            return held.learn(batch, self._store, "completions")

    def sync(
        self,
        namespace: str,
        spec: str,
        batch: list[FinishedJob],
        jobs: Sequence[JobRequest],
        truth: dict[int, int] | None,
        check_deadline: DeadlineCheck,
    ) -> Answer:
        """Learn `batch`, then predict `jobs`, under one hold of the namespace's lock."""
        resolved = self.spec(spec)
        held = self.namespace(namespace)
        check_deadline()
        with held:
            estimator = held.estimator(resolved)
            accepted, duplicates = held.learn(batch, self._store, "completions")
            clock = held.clock
            predictions = held.predict(estimator, jobs, truth, check_deadline)
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
        forecaster = installed_start_forecaster()
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
            "estimators": [self._describe(cls) for _, cls in sorted(available().items())],
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

    def reset(self, namespace: str) -> int:
        """Forget a namespace (stored history included); return how many completions it held."""
        name = namespace or DEFAULT_NAMESPACE
        with self._namespaces_lock:
            held = self._namespaces.get(name)
            if held is None:
                raise NotFound(f"namespace {name!r} does not exist")
            with held:
                if self._store is not None:
                    self._store.forget(name)
                forgotten = len(held.history)
                # Calls waiting on the old object are refused (Conflict); new calls get a fresh one.
                held.retired = True
                del self._namespaces[name]
        log.info("namespace %r reset (%d completions forgotten)", name, forgotten)
        return forgotten

    def close(self) -> None:
        """Stop the training threads and close the state file."""
        self.trainer.shutdown(wait=False, cancel_futures=True)
        if self._store is not None:
            self._store.close()

    # --- helpers ---

    def spec(self, written: str) -> ResolvedSpec:
        spec = self._specs.get(written)
        return spec if spec is not None else self._resolve(written, "estimator")

    def _resolve(self, written: str, where: str) -> ResolvedSpec:
        """Parse and validate a SPEC once; refuse evaluation-only estimators unless allowed."""
        try:
            probe = self._factory(written)
        except SpecError as error:
            raise InvalidRequest(f"{where}: {error}") from None
        if probe.evaluation_only and not self._allow_oracle:
            raise InvalidRequest(
                f"{where}: {probe.name!r} is for evaluation only and this server does not allow it "
                "(start it with the oracle allowed)"
            )
        spec = ResolvedSpec(written, probe.spec, probe.evaluation_only)
        if len(self._specs) < SPEC_CACHE_SIZE:
            self._specs[written] = spec
        return spec

    def namespace(self, written: str) -> Namespace:
        """The namespace called `written` ("" is the default), created on first use."""
        name = written or DEFAULT_NAMESPACE
        held = self._namespaces.get(name)
        if held is not None:
            return held
        if not _NAMESPACE_PATTERN.fullmatch(name):
            raise InvalidRequest(f"namespace {name!r} is not 1-128 characters of letters, digits and ._:/@+-")
        with self._namespaces_lock:
            held = self._namespaces.get(name)
            if held is None:
                held = self._namespaces[name] = self._new_namespace(name)
        return held

    def _new_namespace(self, name: str, stored: StoredNamespace | None = None) -> Namespace:
        """A namespace with the default estimators, taught `stored` history if any."""
        held = Namespace(name, self._factory, self.trainer)
        if stored is not None:
            held.history, held.clock = stored.completions, stored.clock
        for spec in self.defaults:
            held.estimator(spec)
        return held

    def _describe(self, cls: type[Estimator]) -> dict[str, Any]:
        parameters = inspect.signature(cls.__init__).parameters
        docstring = inspect.getdoc(cls) or ""
        return {
            "name": cls.name,
            "parameters": {name: str(parameters[name].default) for name in cls.param_names()},
            "evaluation_only": cls.evaluation_only,
            "allowed": self._allow_oracle or not cls.evaluation_only,
            "description": docstring.partition("\n")[0],
        }
