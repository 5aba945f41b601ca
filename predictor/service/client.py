"""Client side of the predictor service: a thin typed client, and `RemoteSession` for simulators.

`RemoteSession` answers exactly like `LocalSession` over the same estimator
while the service is up. When the service is down or slow it must never stall
the scheduler: the jobs get t_req (counted in `fallbacks`) and the service is
tried again only after a back-off, so a run with the service gone costs about
what an in-process run costs.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kernel.errors import SpecError, TschedError, UsageError
from kernel.jobs import UNSET_SUBMIT, FinishedJob, JobRequest, Prediction, RuntimeInterval
from kernel.specs import parse_spec
from predictor.forecasting import QueueState, Scheduler
from predictor.proto import pb, rpc
from predictor.service.codec import (
    add_completions,
    add_jobs,
    add_names,
    forecast_request,
    job_message,
    prediction_from,
    start_forecasts_from,
    sync_request,
)
from predictor.service.forecasts import ForecastAnswer
from predictor.service.security import read_token_file

log = logging.getLogger("tsched.client")

DEFAULT_TIMEOUT_SECONDS = 5.0
#: Completions sent per call when a backlog is flushed (about 1 MB on the wire).
COMPLETIONS_PER_CALL = 20_000
#: Extra deadline a session allows per completion it carries, so that a warm-up backlog is not cut short.
SECONDS_PER_COMPLETION = 5e-5
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Reconnect quickly when a restarted server comes back (gRPC's default back-off grows to 2 minutes);
#: ping an idle connection every 30 s, so that a dead server or network is noticed (servers allow 10 s).
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5_000),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
#: Failures worth waiting out: the service is down, slow, overloaded, or cut a stream that sat idle.
#: Anything else (INTERNAL, UNKNOWN, INVALID_ARGUMENT, ...) is a bad request or a bug, and retrying repeats it.
_TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)


@dataclass(frozen=True)
class Credentials:
    """How a client proves who it is and checks the server: a bearer token, and TLS.

    Plain strings and bytes, so that an evaluation can hand them to its worker processes.
    """

    token: str | None = None
    tls: bool = False
    #: PEM of the CA that signed the server's certificate (None: the system's trusted CAs).
    tls_ca: bytes | None = None
    #: The client's certificate chain and key, for a server that requires client certificates.
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    #: The name the server's certificate must carry, when it is not the address's host name.
    tls_server_name: str | None = None

    @classmethod
    def from_files(
        cls,
        *,
        token_file: str | None = None,
        tls: bool = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_server_name: str | None = None,
    ) -> Credentials:
        """Read the files the command line names; any TLS file means TLS."""
        if (tls_cert is None) != (tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")

        def read(path: str | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(
            token=None if token_file is None else read_token_file(token_file),
            tls=tls or any(path is not None for path in (tls_ca, tls_cert, tls_server_name)),
            tls_ca=read(tls_ca),
            tls_cert=read(tls_cert),
            tls_key=read(tls_key),
            tls_server_name=tls_server_name,
        )

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call carries: the token, if any."""
        return () if self.token is None else (("authorization", f"Bearer {self.token}"),)

    def channel(self, address: str) -> grpc.Channel:
        options = list(_CHANNEL_OPTIONS)
        if not self.tls:
            return grpc.insecure_channel(address, options=options)
        if self.tls_server_name is not None:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        credentials = grpc.ssl_channel_credentials(self.tls_ca, self.tls_key, self.tls_cert)
        return grpc.secure_channel(address, credentials, options=options)


def is_transient(error: PredictorError) -> bool:
    """A failure worth retrying later; a message too large for the server is not (it is refused again)."""
    return error.code in _TRANSIENT and "larger than max" not in error.details


class PredictorError(TschedError):
    """A call the service refused or could not answer, with the server's own message."""

    def __init__(self, address: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"predictor at {address}: {code.name}: {details}")
        self.address = address
        self.code = code
        self.details = details

    def __reduce__(self) -> tuple[type[PredictorError], tuple[str, grpc.StatusCode, str]]:
        """Rebuild from the three arguments, so the error crosses process boundaries (joblib, Dask)."""
        return (type(self), (self.address, self.code, self.details))


@dataclass(frozen=True)
class ServedPrediction:
    """One answer of `Predict`, with which estimator gave it and for which submit time."""

    prediction: Prediction
    estimator: str
    submit: int
    namespace: str
    #: Where the estimator has a distribution of the runtime: its quantiles and P(runtime > t_sched).
    interval: RuntimeInterval | None = None


class PredictorClient:
    """Blocking calls to one predictor service, each with a deadline."""

    def __init__(
        self, address: str, timeout: float = DEFAULT_TIMEOUT_SECONDS, credentials: Credentials | None = None
    ) -> None:
        self.address = address
        self.timeout = timeout
        credentials = credentials or Credentials()
        self._metadata = credentials.metadata
        self._channel = credentials.channel(address)
        self._stub = rpc.PredictorStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def predict(
        self,
        *,
        user: int | str,
        group: int | str,
        t_req: int,
        procs: int,
        submit: int | None = None,
        job_id: int = 0,
        queue: int = -1,
        executable: int = -1,
        account: str | None = None,
        namespace: str = "",
        estimator: str = "",
        timeout: float | None = None,
    ) -> ServedPrediction:
        """Predict one job; without `submit`, at the namespace's clock. The user and group are numbers or
        names; an `account` stands for the group (give the group as -1 then)."""
        if account is not None and group != -1:
            raise UsageError(f"the group ({group}) and the account ({account}) are both given; give one")
        job = JobRequest(
            job_id,
            UNSET_SUBMIT if submit is None else submit,
            user if isinstance(user, int) else -1,
            group if isinstance(group, int) else -1,
            t_req,
            procs,
            queue,
            executable,
        )
        message = add_names(
            job_message(job),
            user if isinstance(user, str) else None,
            group if isinstance(group, str) else None,
            account,
        )
        return self._predict(message, namespace, estimator, timeout)

    def predict_job(
        self, job: JobRequest, *, namespace: str = "", estimator: str = "", timeout: float | None = None
    ) -> ServedPrediction:
        """Predict one job (a submit of UNSET_SUBMIT: at the namespace's clock)."""
        return self._predict(job_message(job), namespace, estimator, timeout)

    def _predict(self, job: pb.Job, namespace: str, estimator: str, timeout: float | None) -> ServedPrediction:
        request = pb.PredictRequest(namespace=namespace, estimator=estimator, job=job)
        response = self._call(self._stub.Predict, request, timeout)
        interval = None
        if response.HasField("p_underestimate"):
            quantiles = tuple((quantile.probability, quantile.runtime) for quantile in response.quantiles)
            interval = RuntimeInterval(quantiles, response.p_underestimate)
        return ServedPrediction(
            prediction_from(response.prediction), response.estimator, response.submit, response.namespace, interval
        )

    def predict_batch(
        self, jobs: Sequence[JobRequest], *, namespace: str = "", estimator: str = "", timeout: float | None = None
    ) -> list[Prediction]:
        request = pb.PredictBatchRequest(namespace=namespace, estimator=estimator)
        add_jobs(request.jobs, jobs)
        return [prediction_from(p) for p in self._call(self._stub.PredictBatch, request, timeout).predictions]

    def observe(self, finished: Sequence[FinishedJob], *, namespace: str = "", timeout: float | None = None) -> int:
        """Report finished jobs (in end order); return how many were new to the namespace."""
        request = pb.ObserveCompletionsRequest(namespace=namespace)
        add_completions(request.completions, finished)
        response: pb.ObserveCompletionsResponse = self._call(self._stub.ObserveCompletions, request, timeout)
        return response.accepted

    def sync(
        self,
        finished: Sequence[FinishedJob],
        submitted: Sequence[JobRequest],
        *,
        namespace: str = "",
        estimator: str = "",
        truth: Mapping[int, int] | None = None,
        timeout: float | None = None,
    ) -> list[Prediction]:
        """Report `finished`, then predict `submitted`, in one round trip."""
        request = sync_request(finished, submitted, namespace, estimator, truth)
        return [prediction_from(p) for p in self._call(self._stub.Sync, request, timeout).predictions]

    def sync_stream(self) -> SyncStream:
        """Open a `SyncStream`: the same exchange as `sync`, at about half the cost per round trip."""
        return SyncStream(self._stub.SyncStream, self.address, self._metadata)

    def list_estimators(self, namespace: str = "", timeout: float | None = None) -> dict[str, Any]:
        """The server's estimators and defaults, and what `namespace` holds, as plain data."""
        response = self._call(self._stub.ListEstimators, pb.ListEstimatorsRequest(namespace=namespace), timeout)
        return {
            "estimators": [
                {
                    "name": info.name,
                    "description": info.description,
                    "parameters": {p.name: p.default for p in info.parameters},
                    "evaluation_only": info.evaluation_only,
                    "allowed": info.allowed,
                    "trained_model": info.trained_model,
                }
                for info in response.estimators
            ],
            "default_specs": list(response.default_specs),
            "namespace_exists": response.namespace_exists,
            "namespace_specs": list(response.namespace_specs),
            "completions": response.completions,
            "clock": response.clock,
        }

    def status(self, namespace: str = "", timeout: float | None = None) -> dict[str, Any]:
        """How `namespace` and the server are doing (`Status`), as plain data: every field, zeros included."""
        response = self._call(self._stub.Status, pb.StatusRequest(namespace=namespace), timeout)
        return _plain(response)

    def reset_namespace(self, namespace: str = "", timeout: float | None = None, *, missing_ok: bool = False) -> int:
        """Forget a namespace's history; return how many completions it held (NOT_FOUND unless `missing_ok`)."""
        request = pb.ResetNamespaceRequest(namespace=namespace, missing_ok=missing_ok)
        response: pb.ResetNamespaceResponse = self._call(self._stub.ResetNamespace, request, timeout)
        return response.forgotten

    def list_namespaces(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """The namespaces the server holds that this client's token may use: name, completions, clock, estimators."""
        response: pb.ListNamespacesResponse = self._call(self._stub.ListNamespaces, pb.ListNamespacesRequest(), timeout)
        return [
            {
                "name": info.name,
                "completions": info.completions,
                "clock": info.clock,
                "estimators": list(info.estimators),
            }
            for info in response.namespaces
        ]

    def observe_all(self, finished: Sequence[FinishedJob], *, namespace: str = "") -> tuple[int, int]:
        """Report any number of finished jobs (in end order), in calls of COMPLETIONS_PER_CALL; return
        (new to the namespace, already held): feeding the same jobs twice learns nothing twice."""
        accepted = 0
        for start in range(0, len(finished), COMPLETIONS_PER_CALL):
            chunk = finished[start : start + COMPLETIONS_PER_CALL]
            accepted += self.observe(
                chunk, namespace=namespace, timeout=self.timeout + len(chunk) * SECONDS_PER_COMPLETION
            )
        return accepted, len(finished) - accepted

    def served_estimator(self, spec: str) -> dict[str, Any]:
        """What the server lists for the estimator `spec` names (a built-in or a trained model).

        The server is the judge of which names it serves: a model name is
        unknown to this process's registry. Raises SpecError naming what it serves.
        """
        name = parse_spec(spec)[0]
        listed = self.list_estimators()["estimators"]
        for info in listed:
            if info["name"] == name:
                found: dict[str, Any] = info
                return found
        served = ", ".join(info["name"] for info in listed)
        raise SpecError(f"unknown estimator {name!r}: the predictor service at {self.address} serves {served}")

    def forecast_start(
        self,
        state: QueueState,
        scheduler: Scheduler | None = None,
        *,
        namespace: str = "",
        estimator: str = "",
        lower_quantile: float | None = None,
        timeout: float | None = None,
    ) -> ForecastAnswer:
        """When each waiting job of `state` will start, with bounds, under `scheduler` (default: FCFS + EASY)."""
        request = forecast_request(state, scheduler or Scheduler(), namespace, estimator, lower_quantile)
        response: pb.ForecastStartResponse = self._call(self._stub.ForecastStart, request, timeout)
        return ForecastAnswer(
            start_forecasts_from(response.forecasts), response.estimator, response.namespace, response.now
        )

    def health(self, service: str = "", timeout: float | None = None) -> str:
        """The grpc.health.v1 status name (SERVING, NOT_SERVING, ...)."""
        response = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PredictorClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise PredictorError(self.address, error.code(), error.details() or "") from None


class SyncStream:
    """One open `SyncStream` call: `exchange` sends a SyncRequest and waits for its answer.

    A stream has one deadline for its whole life, so each exchange gets its
    own from a watchdog thread that cancels the stream when an answer is
    late: the caller then gets DEADLINE_EXCEEDED, as from a unary call, and
    opens a new stream for its next attempt.
    """

    def __init__(self, method: Any, address: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.address = address
        self._outbox: queue.SimpleQueue[pb.SyncRequest | None] = queue.SimpleQueue()
        self._responses = method(iter(self._outbox.get, None), metadata=metadata)
        self._deadline: float | None = None
        self._timed_out = False
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None

    def exchange(self, request: pb.SyncRequest, timeout: float) -> pb.SyncResponse:
        if self._closed.is_set():
            raise PredictorError(self.address, grpc.StatusCode.CANCELLED, "the sync stream is closed")
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch, args=(timeout,), name="tsched-sync-watchdog", daemon=True
            )
            self._watchdog.start()
        self._deadline = time.monotonic() + timeout
        self._outbox.put(request)
        try:
            response: pb.SyncResponse = next(self._responses)
            return response
        except grpc.RpcError as error:
            self.close()
            code = grpc.StatusCode.DEADLINE_EXCEEDED if self._timed_out else error.code()
            raise PredictorError(
                self.address, code, "no answer within the deadline" if self._timed_out else error.details() or ""
            ) from None
        except StopIteration:
            self.close()
            raise PredictorError(
                self.address, grpc.StatusCode.UNAVAILABLE, "the server ended the sync stream"
            ) from None
        finally:
            self._deadline = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """End the stream (the server finishes it cleanly) and stop the watchdog."""
        if not self._closed.is_set():
            self._closed.set()
            self._outbox.put(None)

    def _watch(self, timeout: float) -> None:
        interval = min(0.1, timeout / 4)
        while not self._closed.wait(interval):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                self._timed_out = True
                self._responses.cancel()
                return


def _plain(message: Any) -> dict[str, Any]:
    """A message as a dict of its fields (numbers stay numbers; repeated messages become lists of dicts)."""
    plain: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None:
            plain[field.name] = [_plain(item) for item in value]
        else:
            plain[field.name] = list(value) if field.is_repeated else value
    return plain


def predict_once(
    address: str,
    namespace: str,
    spec: str,
    user: int | str,
    group: int | str,
    request: int,
    procs: int,
    submit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    credentials: Credentials | None = None,
    account: str | None = None,
) -> dict[str, Any]:
    """One prediction as plain data (what `tsched predict` prints); PredictorError carries the server's message."""
    with PredictorClient(address, timeout, credentials) as client:
        served = client.predict(
            user=user,
            group=group,
            t_req=request,
            procs=procs,
            submit=submit,
            account=account,
            namespace=namespace,
            estimator=spec,
        )
    return {
        "t_sched": served.prediction.t_sched,
        "factor": served.prediction.factor,
        "estimator": served.estimator,
        "basis": served.prediction.basis,
        "fallback": served.prediction.fallback,
        "submit": served.submit,
        "namespace": served.namespace,
        "quantiles": None
        if served.interval is None
        else {f"{p:g}": runtime for p, runtime in served.interval.quantiles},
        "p_underestimate": None if served.interval is None else served.interval.p_underestimate,
    }


class RemoteSession:
    """A `PredictionSession` served by the predictor service over a `SyncStream`.

    Completions are held until the next call that has submissions to predict
    (or until `close`): the service learns them before it predicts anything
    submitted later, so answers equal `LocalSession`'s, with one round trip per
    instant that has arrivals, on one stream kept open for the session. `reset=True` starts from an empty namespace (a
    simulation run); a live scheduler keeps its namespace's history.

    On a transient failure the submitted jobs get t_req and count in
    `fallbacks`; unsent completions are kept and sent on the next attempt (the
    service drops ones it already acknowledged). Attempts wait `retry_after`
    seconds, doubling up to `max_retry_after` while failures go on.
    """

    def __init__(
        self,
        address: str,
        namespace: str,
        spec: str = "",
        *,
        reset: bool,
        timeout: float = 1.0,
        retry_after: float = 0.5,
        max_retry_after: float = 30.0,
        truth: Mapping[int, int] | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.client = PredictorClient(address, timeout, credentials)
        self.namespace = namespace
        self.spec = spec
        self.truth = truth
        self.fallbacks = 0
        self._pending: list[FinishedJob] = []
        self._needs_reset = reset
        self._retry_after = retry_after
        self._first_retry_after = retry_after
        self._max_retry_after = max_retry_after
        self._next_attempt = 0.0
        self._stream: SyncStream | None = None

    def sync(self, finished: Sequence[FinishedJob], submitted: Sequence[JobRequest]) -> list[Prediction]:
        self._pending.extend(finished)
        if not submitted:
            if len(self._pending) >= COMPLETIONS_PER_CALL and self._may_attempt():
                self._send(submitted)
            return []
        predictions = self._send(submitted) if self._may_attempt() else None
        if predictions is None:
            self.fallbacks += len(submitted)
            return [Prediction(t_sched=job.t_req, factor=None, basis=0, fallback=True) for job in submitted]
        return predictions

    def close(self) -> None:
        """Send the completions still held (so the namespace is complete), then close the channel."""
        if self._pending and self._send(()) is None:
            log.warning(
                "predictor at %s unreachable: %d completions for namespace %r were not delivered",
                self.client.address,
                len(self._pending),
                self.namespace,
            )
        if self._stream is not None:
            self._stream.close()
        self.client.close()

    def _timeout_for(self, completions: int) -> float:
        return self.client.timeout + completions * SECONDS_PER_COMPLETION

    def _may_attempt(self) -> bool:
        return time.monotonic() >= self._next_attempt

    def _send(self, submitted: Sequence[JobRequest]) -> list[Prediction] | None:
        """Deliver the held completions (in chunks), then predict `submitted`; None on a transient failure."""
        client = self.client
        try:
            if self._needs_reset:
                client.reset_namespace(self.namespace, missing_ok=True)
                self._needs_reset = False
            while len(self._pending) > COMPLETIONS_PER_CALL:
                client.observe(
                    self._pending[:COMPLETIONS_PER_CALL],
                    namespace=self.namespace,
                    timeout=self._timeout_for(COMPLETIONS_PER_CALL),
                )
                del self._pending[:COMPLETIONS_PER_CALL]
            request = sync_request(self._pending, submitted, self.namespace, self.spec, self.truth)
            response = self._exchange(request, self._timeout_for(len(self._pending)))
            predictions = [prediction_from(p) for p in response.predictions]
        except PredictorError as error:
            if self._stream is not None and self._stream.closed:
                self._stream = None  # the next attempt opens a new stream
            if not is_transient(error):
                raise
            self._next_attempt = time.monotonic() + self._retry_after
            log.warning(
                "%s; %d held completion(s) kept, %d submitted job(s) get t_req; next attempt in %.1f s",
                error,
                len(self._pending),
                len(submitted),
                self._retry_after,
            )
            self._retry_after = min(2 * self._retry_after, self._max_retry_after)
            return None
        self._pending.clear()
        self._retry_after = self._first_retry_after
        return predictions

    def _exchange(self, request: pb.SyncRequest, timeout: float) -> pb.SyncResponse:
        """One exchange on the session's stream; a stream already used that was ended is reopened once.

        A server cuts a stream that sits idle (a quiet cluster) or restarts:
        the request was then never read, so sending it again on a new stream
        is safe (completions already held are recognised).
        """
        reused = self._stream is not None
        if self._stream is None:
            self._stream = self.client.sync_stream()
        try:
            return self._stream.exchange(request, timeout)
        except PredictorError as error:
            if not reused or error.code not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE):
                raise
            log.info("%s: the stream was ended; reopening it", error)
            self._stream = self.client.sync_stream()
            return self._stream.exchange(request, timeout)
