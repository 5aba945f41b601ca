"""The gRPC adapter: the `tsched.v1.Predictor` contract over `PredictorCore`.

Each RPC decodes its request (`codec`), calls the core, and encodes the
answer. Refusals are raised as `kernel.errors.ServiceError`s by the codec
and the core; one decorator per call shape maps them to status codes, logs
them, and turns anything else into INTERNAL while the server keeps serving.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from kernel.errors import (
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)
from kernel.jobs import UNSET_SUBMIT, JobName
from predictor.proto import pb, rpc
from predictor.service import codec
from predictor.service.core import Answer, PredictorCore
from predictor.service.namespaces import DEFAULT_NAMESPACE, DeadlineCheck
from predictor.service.quoting import RefusalLog, clip
from predictor.service.training import waiting_at_most
from predictor.service.views import CallCount, ServiceStatus

if TYPE_CHECKING:
    from predictor.service.metrics import CallMetrics

log = logging.getLogger("tsched.service")
refusals = RefusalLog(log)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Predictor"].full_name
#: The share of its remaining time a call may spend waiting for a training: the refusal must reach the
#: client before its deadline does.
DEADLINE_SHARE = 0.8

#: Status codes of the domain's refusals; any other ServiceError is a bad request.
STATUS_CODES: dict[type[ServiceError], grpc.StatusCode] = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Conflict: grpc.StatusCode.ABORTED,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}

Request = TypeVar("Request")
Response = TypeVar("Response")


def status_code(error: ServiceError) -> grpc.StatusCode:
    for kind in type(error).__mro__:
        code = STATUS_CODES.get(kind)
        if code is not None:
            return code
    return grpc.StatusCode.INVALID_ARGUMENT


def abort(context: grpc.ServicerContext, method: str, error: Exception) -> None:
    """End the call with the status `error` stands for; a bug is logged with its traceback as INTERNAL.

    Messages are clipped and refusals logged at a bounded rate: both may carry what a client sent.
    """
    if isinstance(error, ServiceError):
        code = status_code(error)
        details = clip(str(error))
        level = logging.WARNING if code == grpc.StatusCode.INVALID_ARGUMENT else logging.INFO
        refusals.log(level, "%s refused: %s: %s", method, code.name, details)
        context.abort(code, details)
    refusals.log(logging.ERROR, "%s failed: %s", method, clip(repr(error)), exc_info=True)
    context.abort(grpc.StatusCode.INTERNAL, clip(f"internal error in {method}: {type(error).__name__}: {error}"))


def unary(
    method: Callable[[Any, Request, grpc.ServicerContext], Response],
) -> Callable[[Any, Request, grpc.ServicerContext], Response]:
    """A unary RPC whose refusals become status codes."""

    @functools.wraps(method)
    def handler(self: Any, request: Request, context: grpc.ServicerContext) -> Response:
        try:
            with waiting_at_most(self.wait_for(context)):
                return method(self, request, context)
        except Exception as error:
            abort(context, method.__name__, error)
            raise  # unreachable: abort raises

    return handler


def streaming(
    method: Callable[[Any, Iterator[Request], grpc.ServicerContext], Iterator[Response]],
) -> Callable[[Any, Iterator[Request], grpc.ServicerContext], Iterator[Response]]:
    """A bidirectional stream: the first refusal ends it with its status; a client that leaves ends it quietly."""

    @functools.wraps(method)
    def handler(self: Any, requests: Iterator[Request], context: grpc.ServicerContext) -> Iterator[Response]:
        try:
            yield from method(self, requests, context)
        except grpc.RpcError:  # raised by `requests`: the client cancelled the stream or went away
            log.info("%s ended by the client", method.__name__)
        except Exception as error:
            abort(context, method.__name__, error)

    return handler


def deadline_of(context: grpc.ServicerContext) -> DeadlineCheck:
    """A check that raises DeadlineExceeded once the caller's deadline has passed."""

    def check() -> None:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise DeadlineExceeded("deadline exceeded before the call completed")

    return check


def forecast_check(context: grpc.ServicerContext, cpu_seconds: float) -> DeadlineCheck:
    """The check a forecast's forward runs call: it stops one whose caller has gone (cancelled, disconnected),
    whose deadline has passed, or that has used its CPU time (`--forecast-cpu-seconds`)."""
    deadline = deadline_of(context)
    started = time.thread_time()

    def check() -> None:
        if not context.is_active():
            raise DeadlineExceeded("the caller went away: the forecast was stopped")
        deadline()
        if time.thread_time() - started > cpu_seconds:
            raise ResourceExhausted(
                f"the forecast took more than this server's {cpu_seconds:g} CPU seconds "
                "(--forecast-cpu-seconds): ask about fewer jobs"
            )

    return check


AnswerMessage = TypeVar("AnswerMessage", pb.PredictBatchResponse, pb.SyncResponse)


def _with_predictions(response: AnswerMessage, answer: Answer) -> AnswerMessage:
    codec.add_predictions(response.predictions, answer.predictions)
    return response


def _completion_names(completions: Sequence[pb.Completion], where: str) -> list[JobName]:
    return codec.job_names([completion.job for completion in completions], where, inner=".job")


class PredictorServicer(rpc.PredictorServicer):
    """The generated gRPC interface, served by a `PredictorCore`."""

    def __init__(self, core: PredictorCore, calls: CallMetrics | None = None) -> None:
        self.core = core
        self.calls = calls
        self.max_batch = core.limits.max_batch
        self.max_wait = core.limits.max_wait

    def wait_for(self, context: grpc.ServicerContext) -> float:
        """How long the call may wait for a training: --max-wait, or less to be refused within its deadline."""
        remaining = context.time_remaining()
        return self.max_wait if remaining is None else min(self.max_wait, DEADLINE_SHARE * remaining)

    @unary
    def Predict(self, request: pb.PredictRequest, context: grpc.ServicerContext) -> pb.PredictResponse:
        self.core.spec(request.estimator)  # a bad SPEC is refused before the job is read, in every RPC
        if not request.HasField("job"):
            raise InvalidRequest("job is required")
        job = codec.job_request(request.job, "job")
        names = codec.job_names((request.job,), "job", indexed=False)
        answer = self.core.predict(
            request.namespace,
            request.estimator,
            [job],
            deadline_of(context),
            where="job",
            indexed=False,
            names=names,
            intervals=True,
        )
        prediction = answer.predictions[0]
        interval = answer.intervals[0]
        response = pb.PredictResponse(
            prediction=pb.Prediction(
                t_sched=prediction.t_sched,
                factor=prediction.factor,
                basis=prediction.basis,
                fallback=prediction.fallback,
            ),
            estimator=answer.estimator,
            submit=answer.clock if job.submit == UNSET_SUBMIT else job.submit,
            namespace=answer.namespace,
        )
        if interval is not None:
            response.quantiles.extend(
                pb.Quantile(probability=probability, runtime=runtime) for probability, runtime in interval.quantiles
            )
            response.p_underestimate = interval.p_underestimate
        return response

    @unary
    def PredictBatch(self, request: pb.PredictBatchRequest, context: grpc.ServicerContext) -> pb.PredictBatchResponse:
        self.core.spec(request.estimator)
        jobs = codec.job_requests(request.jobs, "jobs", self.max_batch)
        check = deadline_of(context)
        names = codec.job_names(request.jobs, "jobs")
        answer = self.core.predict(request.namespace, request.estimator, jobs, check, names=names)
        check()
        return _with_predictions(pb.PredictBatchResponse(estimator=answer.estimator), answer)

    @unary
    def ObserveCompletions(
        self, request: pb.ObserveCompletionsRequest, context: grpc.ServicerContext
    ) -> pb.ObserveCompletionsResponse:
        batch = codec.finished_jobs(request.completions, "completions", self.max_batch)
        names = _completion_names(request.completions, "completions")
        accepted, duplicates = self.core.observe(request.namespace, batch, deadline_of(context), names)
        return pb.ObserveCompletionsResponse(accepted=accepted, duplicates=duplicates)

    @unary
    def Sync(self, request: pb.SyncRequest, context: grpc.ServicerContext) -> pb.SyncResponse:
        return self._sync(request, context)

    @streaming
    def SyncStream(
        self, requests: Iterator[pb.SyncRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.SyncResponse]:
        """Each request handled as `Sync`, answered in order; the first refusal ends the stream."""
        for request in requests:
            with waiting_at_most(self.wait_for(context)):
                response = self._sync(request, context)
            yield response

    def _sync(self, request: pb.SyncRequest, context: grpc.ServicerContext) -> pb.SyncResponse:
        self.core.spec(request.estimator)
        # Everything is validated before anything is learned: a refused call changes nothing.
        batch = codec.finished_jobs(request.completions, "completions", self.max_batch)
        jobs = codec.job_requests(request.submitted, "submitted", self.max_batch)
        completion_names = _completion_names(request.completions, "completions")
        names = codec.job_names(request.submitted, "submitted")
        answer = self.core.sync(
            request.namespace, request.estimator, batch, jobs, deadline_of(context), completion_names, names
        )
        response = pb.SyncResponse(estimator=answer.estimator, accepted=answer.accepted, duplicates=answer.duplicates)
        return _with_predictions(response, answer)

    @unary
    def ListEstimators(
        self, request: pb.ListEstimatorsRequest, context: grpc.ServicerContext
    ) -> pb.ListEstimatorsResponse:
        return codec.description_message(self.core.describe(request.namespace))

    @unary
    def ResetNamespace(
        self, request: pb.ResetNamespaceRequest, context: grpc.ServicerContext
    ) -> pb.ResetNamespaceResponse:
        return pb.ResetNamespaceResponse(forgotten=self.core.reset(request.namespace, request.missing_ok))

    @unary
    def ListNamespaces(
        self, request: pb.ListNamespacesRequest, context: grpc.ServicerContext
    ) -> pb.ListNamespacesResponse:
        return pb.ListNamespacesResponse(namespaces=[codec.namespace_info(view) for view in self.core.namespaces()])

    @unary
    def ForecastStart(
        self, request: pb.ForecastStartRequest, context: grpc.ServicerContext
    ) -> pb.ForecastStartResponse:
        self.core.spec(request.estimator)
        asked = codec.forecast_question(request)
        check = forecast_check(context, self.core.limits.forecast_cpu_seconds)
        answer = self.core.forecast_start(
            request.namespace, request.estimator, asked.state, asked.scheduler, asked.lower_quantile, check, asked.draws
        )
        response = pb.ForecastStartResponse(estimator=answer.estimator, namespace=answer.namespace, now=answer.now)
        codec.add_start_forecasts(response.forecasts, answer.forecasts)
        return response

    @unary
    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusResponse:
        return codec.status_message(self.status(request.namespace))

    def status(self, namespace: str) -> ServiceStatus:
        """The namespace's status (zeros where it does not exist), the server's size and its calls."""
        held = self.core.status(namespace)
        counts = [] if self.calls is None else self.calls.counts()
        return ServiceStatus(
            namespace=namespace or DEFAULT_NAMESPACE,
            namespace_exists=held is not None,
            completions=0 if held is None else held.completions,
            clock=0 if held is None else held.clock,
            predictions=0 if held is None else held.predictions,
            fallbacks=0 if held is None else held.fallbacks,
            estimators=() if held is None else held.estimators,
            namespaces=self.core.namespace_count,
            training_runs=self.core.trainer.runs,
            calls=tuple(CallCount(rpc, code, count) for rpc, code, count in counts),
        )
