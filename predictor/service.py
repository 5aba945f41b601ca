"""The gRPC predictor service: estimators behind the `tsched.v1.Predictor` contract.

One server holds many namespaces (one per cluster, or per simulation run).
A namespace owns its history, its clock (the latest submit or completion time
it has seen) and one estimator per SPEC used in it, all fed the same
completions. With a state file, completions are stored durably before the call
that brought them is acknowledged, and replayed into fresh estimators on start.

The request path is kept lean for latency: SPECs are parsed once and cached,
estimators are built once per namespace, and predictions never touch SQLite.
"""
from __future__ import annotations

import bisect
import inspect
import json
import logging
import operator
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from predictor.estimators.base import Estimator
from predictor.estimators.baselines import OracleEstimator
from predictor.jobs import FinishedJob, JobRequest, Prediction
from predictor.proto import pb, rpc
from predictor.registry import SpecError, available, make_estimator
from predictor.state import CompletionStore, StoredNamespace

log = logging.getLogger("tsched.service")

EstimatorFactory = Callable[[str], Estimator]

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Predictor"].full_name
DEFAULT_NAMESPACE = "default"
#: Jobs or completions one call may carry; larger batches are refused, naming the field.
BATCH_LIMIT = 100_000
#: Room for a full batch (a Job is ~30 bytes on the wire) with margin.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Distinct estimators one namespace may hold, so a client cannot exhaust memory with SPEC variants.
MAX_ESTIMATORS_PER_NAMESPACE = 32
#: Parsed SPECs kept for reuse; beyond this, unusual SPECs are parsed on every call.
SPEC_CACHE_SIZE = 1024
#: How long in-flight calls get to finish on SIGTERM/SIGINT.
SHUTDOWN_GRACE_SECONDS = 10.0
#: Threads that train models in the background (LightGBM releases the interpreter lock while it trains).
TRAINING_THREADS = 2
#: How often (in jobs) a long batch checks whether its caller's deadline has passed.
DEADLINE_CHECK_EVERY = 4096
_NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")


class ServiceError(Exception):
    """A request the service refuses; the message names the offending field."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ResolvedSpec:
    """A SPEC as a client wrote it, and the canonical SPEC (all parameters spelt out) it stands for."""

    written: str
    canonical: str
    evaluation_only: bool


# --- request validation: proto messages -> the predictor's job types ---------------------------

def _place(where: str, index: int | None) -> str:
    """Where a job sits in the request ("jobs[3]"); built only for error messages."""
    return where if index is None else f"{where}[{index}]"


def _required(job: pb.Job, name: str, where: str, index: int | None, minimum: int) -> int:
    if not job.HasField(name):
        raise ServiceError(f"{_place(where, index)}.{name} is required")
    value = getattr(job, name)
    if value < minimum:
        raise ServiceError(f"{_place(where, index)}.{name} must be >= {minimum}, got {value}")
    return value


def _optional(job: pb.Job, name: str, where: str, index: int | None, minimum: int, unset: int) -> int:
    if not job.HasField(name):
        return unset
    value = getattr(job, name)
    if value < minimum:
        raise ServiceError(f"{_place(where, index)}.{name} must be >= {minimum}, got {value}")
    return value


#: The submit time of a job that left it unset: it is predicted at the namespace's clock.
UNSET_SUBMIT = -1
#: A Job message's fields in JobRequest order, read in one call.
_job_fields = operator.attrgetter(*JobRequest._fields)


def job_request(job: pb.Job, where: str, index: int | None = None) -> JobRequest:
    """Validate a Job message; an unset submit becomes UNSET_SUBMIT (to be read as the clock).

    Batches make this the hot path, so a well-formed job is accepted by one
    combined test on its values: an unset field reads as 0, so presence is
    asked only of fields whose value is 0 (t_req and procs must be >= 1, so a
    0 there is refused either way). Anything else goes through the
    field-by-field checks, which name what is wrong.
    """
    job_id, submit, user, group, t_req, procs, queue, executable = _job_fields(job)
    if (job_id >= 0 and submit > 0 and t_req >= 1 and procs >= 1 and user >= -1 and group >= -1
            and queue >= -1 and executable >= -1):
        has = job.HasField
        if (user or has("user")) and (group or has("group")):
            if not queue and not has("queue"):
                queue = -1
            if not executable and not has("executable"):
                executable = -1
            return JobRequest(job_id, submit, user, group, t_req, procs, queue, executable)
    return _checked_job_request(job, where, index)


def _checked_job_request(job: pb.Job, where: str, index: int | None) -> JobRequest:
    if job.job_id < 0:
        raise ServiceError(f"{_place(where, index)}.job_id must be >= 0, got {job.job_id}")
    return JobRequest(
        job.job_id, _optional(job, "submit", where, index, 0, UNSET_SUBMIT),
        _required(job, "user", where, index, -1), _required(job, "group", where, index, -1),
        _required(job, "t_req", where, index, 1), _required(job, "procs", where, index, 1),
        _optional(job, "queue", where, index, -1, -1), _optional(job, "executable", where, index, -1, -1),
    )


def job_requests(jobs: Sequence[pb.Job], where: str) -> list[JobRequest]:
    _check_batch(len(jobs), where)
    return [job_request(job, where, index) for index, job in enumerate(jobs)]


def finished_jobs(completions: Sequence[pb.Completion], where: str) -> list[FinishedJob]:
    """Validate completions: fields present and sane, non-decreasing end. Runtimes are capped at t_req."""
    _check_batch(len(completions), where)
    result: list[FinishedJob] = []
    previous_end = -1
    for index, completion in enumerate(completions):
        if not (completion.HasField("job") and completion.HasField("end") and completion.HasField("runtime")):
            missing = next(name for name in ("job", "end", "runtime") if not completion.HasField(name))
            raise ServiceError(f"{where}[{index}].{missing} is required")
        request = job_request(completion.job, f"{where}[{index}].job")
        end, runtime = completion.end, completion.runtime
        if request.submit == UNSET_SUBMIT or end < request.submit or runtime < 0 or end < previous_end:
            _explain_completion(request, end, runtime, previous_end, where, index)
        previous_end = end
        result.append(FinishedJob(request, end, min(runtime, request.t_req)))
    return result


def _explain_completion(request: JobRequest, end: int, runtime: int, previous_end: int, where: str,
                        index: int) -> None:
    item = f"{where}[{index}]"
    if request.submit == UNSET_SUBMIT:
        raise ServiceError(f"{item}.job.submit is required")
    if end < request.submit:
        raise ServiceError(f"{item}.end ({end}) is before {item}.job.submit ({request.submit})")
    if runtime < 0:
        raise ServiceError(f"{item}.runtime must be >= 0, got {runtime}")
    raise ServiceError(f"{item}.end ({end}) is before {where}[{index - 1}].end ({previous_end}): "
                       "completions must come in end order")


def _check_batch(size: int, where: str) -> None:
    if size > BATCH_LIMIT:
        raise ServiceError(f"{where} holds {size} items; at most {BATCH_LIMIT} per call")


def actual_runtimes(jobs: Sequence[pb.Job], where: str, indexed: bool = True) -> dict[int, int]:
    """The oracle's truth for these jobs, from the evaluation-only field."""
    truth: dict[int, int] = {}
    for index, job in enumerate(jobs):
        if not job.HasField("actual_runtime"):
            raise ServiceError(f"{_place(where, index if indexed else None)}.actual_runtime is required by the oracle")
        truth[job.job_id] = job.actual_runtime
    return truth


def _end(job: FinishedJob) -> int:
    return job.end


# --- namespaces ------------------------------------------------------------------------------

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
            raise ServiceError(f"namespace {self.name!r} was reset during the call; retry it",
                               grpc.StatusCode.ABORTED)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()

    def estimator(self, spec: ResolvedSpec) -> Estimator:
        """The namespace's estimator for `spec`, built on first use and taught the history so far."""
        estimator = self.estimators.get(spec.canonical)
        if estimator is None:
            if len(self.estimators) >= MAX_ESTIMATORS_PER_NAMESPACE:
                raise ServiceError(f"estimator: namespace {self.name!r} already holds "
                                   f"{MAX_ESTIMATORS_PER_NAMESPACE} estimators; reset it or reuse a SPEC")
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
            held = set(self.history[bisect.bisect_left(self.history, batch[0].end, key=_end):])
            fresh = [job for job in batch if job not in held]
            if fresh and fresh[0].end < latest:
                index = batch.index(fresh[0])
                raise ServiceError(f"{where}[{index}].end ({fresh[0].end}) is before the latest completion "
                                   f"namespace {self.name!r} holds ({latest}): completions must come in end order")
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

    def predict(self, estimator: Estimator, requests: Sequence[JobRequest], truth: dict[int, int] | None,
                check_deadline: Callable[[], None]) -> list[Prediction]:
        """Predict `requests` against the current history; an unset submit is the clock, a later one moves it.

        One `predict_many` call per chunk lets an estimator batch its work (one
        booster call for many jobs), and the caller's deadline is checked between chunks.
        """
        if isinstance(estimator, OracleEstimator):
            estimator.bind_truth(truth or {})
        clock = self.clock
        if any(request.submit == UNSET_SUBMIT for request in requests):
            requests = [request._replace(submit=clock) if request.submit == UNSET_SUBMIT else request
                        for request in requests]
        latest = max(clock, max((request.submit for request in requests), default=clock))
        predictions: list[Prediction] = []
        for start in range(0, len(requests), DEADLINE_CHECK_EVERY):
            if start:
                check_deadline()
            predictions += estimator.predict_many(requests[start:start + DEADLINE_CHECK_EVERY])
        self.clock = latest
        return predictions


# --- the servicer ----------------------------------------------------------------------------

def _add_predictions(field: Any, predictions: Sequence[Prediction]) -> None:
    """Append to a repeated Prediction field (`add` is several times faster than building messages)."""
    add = field.add
    for prediction in predictions:
        add(t_sched=prediction.t_sched, factor=prediction.factor, basis=prediction.basis,
            fallback=prediction.fallback)


def _deadline_checker(context: grpc.ServicerContext) -> Callable[[], None]:
    def check() -> None:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise ServiceError("deadline exceeded before the call completed", grpc.StatusCode.DEADLINE_EXCEEDED)
    return check


class PredictorServicer(rpc.PredictorServicer):
    """Namespaces, estimators and persistence behind the generated gRPC interface."""

    def __init__(self, default_specs: Sequence[str], estimator_factory: EstimatorFactory = make_estimator,
                 allow_oracle: bool = False, store: CompletionStore | None = None) -> None:
        self._factory = estimator_factory
        self._allow_oracle = allow_oracle
        self._store = store
        self._specs: dict[str, ResolvedSpec] = {}
        self._namespaces: dict[str, Namespace] = {}
        self._namespaces_lock = threading.Lock()
        self.trainer = futures.ThreadPoolExecutor(max_workers=TRAINING_THREADS, thread_name_prefix="tsched-train")
        if not default_specs:
            raise ValueError("the server needs at least one default estimator SPEC")
        self.defaults = [self._resolve(spec, "default estimator") for spec in default_specs]
        self._specs[""] = self.defaults[0]
        if store is not None:
            for name, stored in store.load().items():
                self._restore(name, stored)

    # Each RPC validates, does its work under the namespace lock, and maps refusals to status codes.

    def Predict(self, request: pb.PredictRequest, context: grpc.ServicerContext) -> pb.PredictResponse:
        try:
            spec = self._spec(request.estimator)
            namespace = self._namespace(request.namespace)
            if not request.HasField("job"):
                raise ServiceError("job is required")
            job = job_request(request.job, "job")
            truth = actual_runtimes((request.job,), "job", indexed=False) if spec.evaluation_only else None
            _deadline_checker(context)()
            with namespace:
                estimator = namespace.estimator(spec)
                submit = namespace.clock if job.submit == UNSET_SUBMIT else job.submit
                prediction = namespace.predict(estimator, (job,), truth, _no_deadline_check)[0]
            return pb.PredictResponse(
                prediction=pb.Prediction(t_sched=prediction.t_sched, factor=prediction.factor,
                                         basis=prediction.basis, fallback=prediction.fallback),
                estimator=spec.canonical, submit=submit, namespace=namespace.name)
        except Exception as error:  # noqa: BLE001 - every failure becomes a status, the server keeps serving
            self._abort(context, "Predict", error)

    def PredictBatch(self, request: pb.PredictBatchRequest, context: grpc.ServicerContext) -> pb.PredictBatchResponse:
        try:
            spec = self._spec(request.estimator)
            namespace = self._namespace(request.namespace)
            jobs = job_requests(request.jobs, "jobs")
            truth = actual_runtimes(request.jobs, "jobs") if spec.evaluation_only else None
            check = _deadline_checker(context)
            check()
            with namespace:
                predictions = namespace.predict(namespace.estimator(spec), jobs, truth, check)
            check()
            response = pb.PredictBatchResponse(estimator=spec.canonical)
            _add_predictions(response.predictions, predictions)
            return response
        except Exception as error:  # noqa: BLE001
            self._abort(context, "PredictBatch", error)

    def ObserveCompletions(self, request: pb.ObserveCompletionsRequest,
                           context: grpc.ServicerContext) -> pb.ObserveCompletionsResponse:
        try:
            namespace = self._namespace(request.namespace)
            batch = finished_jobs(request.completions, "completions")
            _deadline_checker(context)()
            with namespace:
                accepted, duplicates = namespace.learn(batch, self._store, "completions")
            return pb.ObserveCompletionsResponse(accepted=accepted, duplicates=duplicates)
        except Exception as error:  # noqa: BLE001
            self._abort(context, "ObserveCompletions", error)

    def Sync(self, request: pb.SyncRequest, context: grpc.ServicerContext) -> pb.SyncResponse:
        try:
            return self._sync(request, context)
        except Exception as error:  # noqa: BLE001
            self._abort(context, "Sync", error)

    def SyncStream(self, requests: Iterator[pb.SyncRequest],
                   context: grpc.ServicerContext) -> Iterator[pb.SyncResponse]:
        """Each request handled as `Sync`, answered in order; the first refusal ends the stream."""
        try:
            for request in requests:
                yield self._sync(request, context)
        except grpc.RpcError:  # raised by `requests`: the client cancelled the stream or went away
            log.info("SyncStream ended by the client")
        except Exception as error:  # noqa: BLE001
            self._abort(context, "SyncStream", error)

    def _sync(self, request: pb.SyncRequest, context: grpc.ServicerContext) -> pb.SyncResponse:
        spec = self._spec(request.estimator)
        namespace = self._namespace(request.namespace)
        # Everything is validated before anything is learned: a refused call changes nothing.
        batch = finished_jobs(request.completions, "completions")
        jobs = job_requests(request.submitted, "submitted")
        truth = actual_runtimes(request.submitted, "submitted") if spec.evaluation_only else None
        check = _deadline_checker(context)
        check()
        with namespace:
            estimator = namespace.estimator(spec)
            accepted, duplicates = namespace.learn(batch, self._store, "completions")
            predictions = namespace.predict(estimator, jobs, truth, check)
        response = pb.SyncResponse(estimator=spec.canonical, accepted=accepted, duplicates=duplicates)
        _add_predictions(response.predictions, predictions)
        return response

    def ListEstimators(self, request: pb.ListEstimatorsRequest,
                       context: grpc.ServicerContext) -> pb.ListEstimatorsResponse:
        try:
            name = request.namespace or DEFAULT_NAMESPACE
            response = pb.ListEstimatorsResponse(
                estimators=[self._describe(cls) for _, cls in sorted(available().items())],
                default_specs=[spec.canonical for spec in self.defaults])
            namespace = self._namespaces.get(name)
            if namespace is not None:
                with namespace:
                    response.namespace_exists = True
                    response.namespace_specs.extend(namespace.estimators)
                    response.completions = len(namespace.history)
                    response.clock = namespace.clock
            return response
        except Exception as error:  # noqa: BLE001
            self._abort(context, "ListEstimators", error)

    def ResetNamespace(self, request: pb.ResetNamespaceRequest,
                       context: grpc.ServicerContext) -> pb.ResetNamespaceResponse:
        try:
            name = request.namespace or DEFAULT_NAMESPACE
            with self._namespaces_lock:
                namespace = self._namespaces.get(name)
                if namespace is None:
                    raise ServiceError(f"namespace {name!r} does not exist", grpc.StatusCode.NOT_FOUND)
                with namespace:
                    if self._store is not None:
                        self._store.forget(name)
                    forgotten = len(namespace.history)
                    # Calls waiting on the old object are refused (ABORTED); new calls get a fresh one.
                    namespace.retired = True
                    del self._namespaces[name]
            log.info("namespace %r reset (%d completions forgotten)", name, forgotten)
            return pb.ResetNamespaceResponse(forgotten=forgotten)
        except Exception as error:  # noqa: BLE001
            self._abort(context, "ResetNamespace", error)

    # --- helpers ---

    def _spec(self, written: str) -> ResolvedSpec:
        spec = self._specs.get(written)
        return spec if spec is not None else self._resolve(written, "estimator")

    def _resolve(self, written: str, where: str) -> ResolvedSpec:
        """Parse and validate a SPEC once; refuse evaluation-only estimators unless allowed."""
        try:
            probe = self._factory(written)
        except SpecError as error:
            raise ServiceError(f"{where}: {error}") from None
        if probe.evaluation_only and not self._allow_oracle:
            raise ServiceError(f"{where}: {probe.name!r} is for evaluation only and this server does not allow it "
                               "(start it with the oracle allowed)")
        spec = ResolvedSpec(written, probe.spec, probe.evaluation_only)
        if len(self._specs) < SPEC_CACHE_SIZE:
            self._specs[written] = spec
        return spec

    def _namespace(self, written: str) -> Namespace:
        namespace = self._namespaces.get(written or DEFAULT_NAMESPACE)
        if namespace is not None:
            return namespace
        name = written or DEFAULT_NAMESPACE
        if not _NAMESPACE_PATTERN.fullmatch(name):
            raise ServiceError(f"namespace {name!r} is not 1-128 characters of letters, digits and ._:/@+-")
        with self._namespaces_lock:
            namespace = self._namespaces.get(name)
            if namespace is None:
                namespace = self._namespaces[name] = self._new_namespace(name)
        return namespace

    def _new_namespace(self, name: str, stored: StoredNamespace | None = None) -> Namespace:
        """A namespace with the default estimators, taught `stored` history if any."""
        namespace = Namespace(name, self._factory, self.trainer)
        if stored is not None:
            namespace.history, namespace.clock = stored.completions, stored.clock
        for spec in self.defaults:
            namespace.estimator(spec)
        return namespace

    def _restore(self, name: str, stored: StoredNamespace) -> None:
        self._namespaces[name] = self._new_namespace(name, stored)
        log.info("namespace %r restored: %d completions, clock %d", name, len(stored.completions), stored.clock)

    def _describe(self, cls: type[Estimator]) -> pb.EstimatorInfo:
        parameters = inspect.signature(cls.__init__).parameters
        docstring = inspect.getdoc(cls) or ""
        return pb.EstimatorInfo(
            name=cls.name,
            parameters=[pb.EstimatorParameter(name=name, default=str(parameters[name].default))
                        for name in cls.param_names()],
            evaluation_only=cls.evaluation_only,
            allowed=self._allow_oracle or not cls.evaluation_only,
            description=docstring.partition("\n")[0])

    @staticmethod
    def _abort(context: grpc.ServicerContext, method: str, error: Exception) -> None:
        if isinstance(error, ServiceError):
            level = logging.WARNING if error.code == grpc.StatusCode.INVALID_ARGUMENT else logging.INFO
            log.log(level, "%s refused: %s: %s", method, error.code.name, error)
            context.abort(error.code, str(error))
        log.exception("%s failed", method)
        context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}: {type(error).__name__}: {error}")


def _no_deadline_check() -> None:
    """A single prediction is too short to be worth checking mid-way."""


# --- running the server ----------------------------------------------------------------------

class PredictorServer:
    """A started server: its port, and a graceful stop that also closes the state file."""

    def __init__(self, server: grpc.Server, port: int, health_servicer: health.HealthServicer,
                 store: CompletionStore | None, trainer: futures.Executor) -> None:
        self.server = server
        self.port = port
        self._health = health_servicer
        self._store = store
        self._trainer = trainer

    def stop(self, grace: float | None = SHUTDOWN_GRACE_SECONDS) -> threading.Event:
        """Refuse new calls, let in-flight ones finish within `grace`, then close the state file.

        Returns an event set once everything is closed.
        """
        self._health.enter_graceful_shutdown()
        stopped = self.server.stop(grace)
        closed = threading.Event()

        def close_when_stopped() -> None:
            stopped.wait()
            self._trainer.shutdown(wait=False, cancel_futures=True)
            if self._store is not None:
                self._store.close()
            log.info("predictor service stopped (port %d)", self.port)
            closed.set()

        threading.Thread(target=close_when_stopped, name="tsched-server-close", daemon=True).start()
        return closed

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)


def start_server(listen: str = "127.0.0.1:0", state: str | None = None,
                 default_estimators: Sequence[str] | None = None, allow_oracle: bool = False,
                 estimator_factory: EstimatorFactory = make_estimator,
                 max_workers: int = 8) -> tuple[PredictorServer, int]:
    """Start serving on `listen` (port 0: a free port) without blocking; return the server and its port.

    `default_estimators` (default: the paper's percentile adjuster) are built
    in every namespace; the first answers requests that name no estimator.
    `estimator_factory` turns a SPEC into an estimator: the hook through which
    estimators that need loaded models (`--models DIR`) are supplied.
    Raises ValueError for a bad SPEC or address, StateError for an unusable
    state file, OSError when the address cannot be bound.
    """
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT with a port from 0 to 65535")
    specs = list(default_estimators) if default_estimators else ["percentile"]
    store = CompletionStore(state) if state is not None else None
    try:
        servicer = PredictorServicer(specs, estimator_factory, allow_oracle, store)
    except ServiceError as error:
        if store is not None:
            store.close()
        raise ValueError(str(error)) from None
    # Without so_reuseport=0 a second server could bind the same port and silently take half the calls.
    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
               ("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tsched-rpc"),
                         options=options)
    rpc.add_PredictorServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError:
        port = 0
    if port == 0:
        if store is not None:
            store.close()
        raise OSError(f"cannot listen on {listen!r}: the address is in use or is not this machine's")
    server.start()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info("predictor service listening on %s (port %d); estimators %s; state %s; oracle %s",
             listen, port, ", ".join(spec.canonical for spec in servicer.defaults), state or "none (in memory)",
             "allowed" if allow_oracle else "refused")
    return PredictorServer(server, port, health_servicer, store, servicer.trainer), port


def serve(listen: str = "127.0.0.1:50051", state: str | None = None,
          default_estimators: list[str] | None = None, models_dir: str | None = None,
          allow_oracle: bool = False,
          load_models: Callable[[str], EstimatorFactory] | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully. Call from the main thread.

    `models_dir` is handed to `load_models`, which returns the estimator
    factory that knows the models in it (supplied by whoever owns the models).
    """
    factory = make_estimator
    if models_dir is not None:
        if load_models is None:
            raise ValueError(f"models directory {models_dir!r} given, but no model loader to read it")
        factory = load_models(models_dir)
    server, _ = start_server(listen, state, default_estimators, allow_oracle, factory)
    received: list[int] = []
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.wait(0.5):
            pass
        log.info("received %s: stopping (in-flight calls get %.0f s)",
                 signal.Signals(received[0]).name, SHUTDOWN_GRACE_SECONDS)
        server.stop(SHUTDOWN_GRACE_SECONDS).wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: How a server child process is started: `serve()` with logging to stderr, arguments as JSON.
_CHILD_PROGRAM = (
    "import json, logging, sys\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stderr, format='%(asctime)s %(levelname)s %(message)s')\n"
    "from predictor.service import serve\n"
    "serve(**json.loads(sys.argv[1]))\n"
)
_PORT_IN_LOG = re.compile(r"\(port (\d+)\)")


class ServerProcess:
    """`serve()` in a child process, on a free loopback port by default.

    This is how to run the service next to a simulator in the same program:
    in a thread of the same process it would compete with the simulator for
    the interpreter lock, and every round trip would be slower. It also lets
    tests kill the server outright. The child's log is collected in `log`.
    """

    def __init__(self, listen: str = "127.0.0.1:0", state: str | None = None,
                 default_estimators: Sequence[str] | None = None, allow_oracle: bool = False,
                 startup_timeout: float = 60.0) -> None:
        arguments = {"listen": listen, "state": None if state is None else str(state),
                     "default_estimators": None if default_estimators is None else list(default_estimators),
                     "allow_oracle": allow_oracle}
        self.process = subprocess.Popen([sys.executable, "-c", _CHILD_PROGRAM, json.dumps(arguments)],
                                        stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        ports: queue.Queue[int | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_log, args=(ports,), name="tsched-server-log",
                                        daemon=True)
        self._reader.start()
        try:
            port = ports.get(timeout=startup_timeout)
        except queue.Empty:
            port = None
        if port is None:
            self.process.kill()
            self.process.wait()
            self._reader.join(5)
            raise RuntimeError("the predictor service did not start:\n" + "".join(self.log))
        self.port = port
        host = listen.rpartition(":")[0]
        self.address = f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, signum: int = signal.SIGTERM, timeout: float = SHUTDOWN_GRACE_SECONDS + 5) -> int:
        """Send `signum` (SIGTERM: graceful), wait for the exit, return the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def _read_log(self, ports: queue.Queue[int | None]) -> None:
        assert self.process.stderr is not None
        announced = False
        for line in self.process.stderr:
            self.log.append(line)
            found = None if announced else _PORT_IN_LOG.search(line)
            if found:
                announced = True
                ports.put(int(found.group(1)))
        if not announced:
            ports.put(None)
