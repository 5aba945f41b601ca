"""The calls of the predictor service, typed: `PredictorClient`, one blocking method per RPC.

Answers come back as the job types (`kernel.jobs`) and the service's views
(`predictor.service.views`); a refusal is a `PredictorError` carrying the
server's message. The connection (credentials, channel, deadlines) is
`predictor.service.connection`'s; the simulator's session over the service
is `predictor.service.remote.RemoteSession`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from grpc_health.v1 import health_pb2, health_pb2_grpc

from kernel.errors import SpecError, UsageError
from kernel.jobs import UNSET_SUBMIT, FinishedJob, JobRequest, Prediction, RuntimeInterval
from kernel.specs import parse_spec
from predictor.forecasting import QueueState, Scheduler
from predictor.proto import pb, rpc
from predictor.service.codec import (
    add_completions,
    add_jobs,
    add_names,
    description_from,
    forecast_request,
    job_message,
    namespace_views,
    prediction_from,
    start_forecasts_from,
    status_from,
    sync_request,
)
from predictor.service.connection import (
    DEFAULT_TIMEOUT_SECONDS,
    Connection,
    Credentials,
    PredictorError,
    SyncStream,
    is_transient,
)
from predictor.service.forecasts import ForecastAnswer
from predictor.service.views import Description, EstimatorView, NamespaceView, ServiceStatus

__all__ = [
    "COMPLETIONS_PER_CALL",
    "DEFAULT_TIMEOUT_SECONDS",
    "SECONDS_PER_COMPLETION",
    "Credentials",
    "PredictorClient",
    "PredictorError",
    "ServedPrediction",
    "SiteNames",
    "SyncStream",
    "is_transient",
    "predict_once",
]

#: Completions sent per call when a backlog is flushed (about 1 MB on the wire).
COMPLETIONS_PER_CALL = 20_000
#: Extra deadline a call allows per completion it carries, so that a warm-up backlog is not cut short.
SECONDS_PER_COMPLETION = 5e-5


class SiteNames(NamedTuple):
    """A job's user, account, partition, QOS and name by name, as the batch system knows them; None: the job's
    number stands.

    A site's jobs are keyed by these names whatever path they arrive by (a log,
    job_submit.lua, the jobcomp follower, `tsched predict --user NAME --account NAME`),
    so its history and its live questions meet (docs/deployment.md).
    """

    user: str | None
    account: str | None
    partition: str | None = None
    qos: str | None = None
    job_name: str | None = None


class JobResources(NamedTuple):
    """What a job asks beyond its processors, as `Job`'s resource fields (0: not said), the QOS as a number or
    a name."""

    nodes: int = 0
    memory_mb: int = 0
    gpus: int = 0
    qos: int | str = -1
    exclusive: bool = False


NO_RESOURCES = JobResources()


def _number(value: int | str) -> int:
    """A field's number; -1 when it is given by name (the namespace's id for the name replaces it)."""
    return value if isinstance(value, int) else -1


def _name(value: int | str) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ServedPrediction:
    """One answer of `Predict`, with which estimator gave it and for which submit time."""

    prediction: Prediction
    estimator: str
    submit: int
    namespace: str
    #: Where the estimator has a distribution of the runtime: its quantiles and P(runtime > t_sched).
    interval: RuntimeInterval | None = None

    def plain(self) -> dict[str, Any]:
        """The answer as JSON-ready data (what `tsched predict --json` prints): quantiles by probability."""
        interval = self.interval
        return {
            "t_sched": self.prediction.t_sched,
            "factor": self.prediction.factor,
            "estimator": self.estimator,
            "basis": self.prediction.basis,
            "fallback": self.prediction.fallback,
            "submit": self.submit,
            "namespace": self.namespace,
            "quantiles": None if interval is None else {f"{p:g}": runtime for p, runtime in interval.quantiles},
            "p_underestimate": None if interval is None else interval.p_underestimate,
        }


class PredictorClient:
    """Blocking calls to one predictor service, each with a deadline."""

    def __init__(
        self, address: str, timeout: float = DEFAULT_TIMEOUT_SECONDS, credentials: Credentials | None = None
    ) -> None:
        self._connection = Connection(address, timeout, credentials)
        self._call = self._connection.call
        self._stub = rpc.PredictorStub(self._connection.channel)
        self._health = health_pb2_grpc.HealthStub(self._connection.channel)

    @property
    def address(self) -> str:
        return self._connection.address

    @property
    def timeout(self) -> float:
        """The deadline of a call that names none."""
        return self._connection.timeout

    def predict(
        self,
        *,
        user: int | str,
        group: int | str,
        t_req: int,
        procs: int,
        submit: int | None = None,
        job_id: int = 0,
        queue: int | str = -1,
        executable: int | str = -1,
        account: str | None = None,
        resources: JobResources = NO_RESOURCES,
        namespace: str = "",
        estimator: str = "",
        timeout: float | None = None,
    ) -> ServedPrediction:
        """Predict one job; without `submit`, at the namespace's clock. The user, group, queue (partition), QOS
        and executable (the job's name) are numbers or names; an `account` stands for the group (give the group
        as -1 then)."""
        if account is not None and group != -1:
            raise UsageError(f"the group ({group}) and the account ({account}) are both given; give one")
        job = JobRequest(
            job_id,
            UNSET_SUBMIT if submit is None else submit,
            _number(user),
            _number(group),
            t_req,
            procs,
            _number(queue),
            _number(executable),
            resources.nodes,
            resources.memory_mb,
            resources.gpus,
            _number(resources.qos),
            int(resources.exclusive),
        )
        message = add_names(
            job_message(job),
            user=_name(user),
            group=_name(group),
            account=account,
            partition=_name(queue),
            qos=_name(resources.qos),
            job_name=_name(executable),
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

    def observe(
        self,
        finished: Sequence[FinishedJob],
        *,
        names: Sequence[SiteNames] | None = None,
        namespace: str = "",
        timeout: float | None = None,
    ) -> int:
        """Report finished jobs (in end order), each by the user and account `names` gives it (one per job) or by
        its numbers; return how many were new to the namespace."""
        request = pb.ObserveCompletionsRequest(namespace=namespace)
        add_completions(request.completions, finished)
        if names is not None:
            if len(names) != len(finished):
                raise UsageError(f"{len(names)} names for {len(finished)} completions")
            for completion, site in zip(request.completions, names, strict=True):
                add_names(completion.job, **site._asdict())
        response: pb.ObserveCompletionsResponse = self._call(self._stub.ObserveCompletions, request, timeout)
        return response.accepted

    def sync(
        self,
        finished: Sequence[FinishedJob],
        submitted: Sequence[JobRequest],
        *,
        namespace: str = "",
        estimator: str = "",
        timeout: float | None = None,
    ) -> list[Prediction]:
        """Report `finished`, then predict `submitted`, in one round trip."""
        request = sync_request(finished, submitted, namespace, estimator)
        return [prediction_from(p) for p in self._call(self._stub.Sync, request, timeout).predictions]

    def sync_stream(self) -> SyncStream:
        """Open a `SyncStream`: the same exchange as `sync`, at about half the cost per round trip."""
        return SyncStream(self._stub.SyncStream, self.address, self._connection.metadata)

    def list_estimators(self, namespace: str = "", timeout: float | None = None) -> Description:
        """The server's estimators and defaults, and what `namespace` holds."""
        request = pb.ListEstimatorsRequest(namespace=namespace)
        return description_from(self._call(self._stub.ListEstimators, request, timeout))

    def served_estimator(self, spec: str) -> EstimatorView:
        """What the server lists for the estimator `spec` names (a built-in or a trained model).

        The server is the judge of which names it serves: a model name is
        unknown to this process's registry. Raises SpecError naming what it serves.
        """
        name = parse_spec(spec)[0]
        listed = self.list_estimators().estimators
        for view in listed:
            if view.name == name:
                return view
        served = ", ".join(view.name for view in listed)
        raise SpecError(f"unknown estimator {name!r}: the predictor service at {self.address} serves {served}")

    def status(self, namespace: str = "", timeout: float | None = None) -> ServiceStatus:
        """How `namespace` and the server are doing (`Status`)."""
        return status_from(self._call(self._stub.Status, pb.StatusRequest(namespace=namespace), timeout))

    def reset_namespace(self, namespace: str = "", timeout: float | None = None, *, missing_ok: bool = False) -> int:
        """Forget a namespace's history; return how many completions it held (NOT_FOUND unless `missing_ok`)."""
        request = pb.ResetNamespaceRequest(namespace=namespace, missing_ok=missing_ok)
        response: pb.ResetNamespaceResponse = self._call(self._stub.ResetNamespace, request, timeout)
        return response.forgotten

    def list_namespaces(self, timeout: float | None = None) -> list[NamespaceView]:
        """The namespaces the server holds that this client's token may use: name, completions, clock, estimators."""
        return namespace_views(self._call(self._stub.ListNamespaces, pb.ListNamespacesRequest(), timeout))

    def forecast_start(
        self,
        state: QueueState,
        scheduler: Scheduler | None = None,
        *,
        namespace: str = "",
        estimator: str = "",
        lower_quantile: float | None = None,
        draws: int | None = None,
        timeout: float | None = None,
    ) -> ForecastAnswer:
        """When each waiting job of `state` will start, with bounds, under `scheduler` (default: FCFS + EASY);
        with `draws`, the median of that many runs, each estimate times one of the estimator's errors
        (`sampled_forecasts`)."""
        request = forecast_request(state, scheduler or Scheduler(), namespace, estimator, lower_quantile, draws)
        response: pb.ForecastStartResponse = self._call(self._stub.ForecastStart, request, timeout)
        return ForecastAnswer(
            start_forecasts_from(response.forecasts), response.estimator, response.namespace, response.now
        )

    def health(self, service: str = "", timeout: float | None = None) -> str:
        """The grpc.health.v1 status name (SERVING, NOT_SERVING, ...)."""
        response = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PredictorClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
    queue: int | str = -1,
    resources: JobResources = NO_RESOURCES,
    executable: int | str = -1,
) -> ServedPrediction:
    """One prediction on a connection of its own (`tsched predict`); PredictorError carries the server's message."""
    with PredictorClient(address, timeout, credentials) as client:
        return client.predict(
            user=user,
            group=group,
            t_req=request,
            procs=procs,
            submit=submit,
            account=account,
            queue=queue,
            executable=executable,
            resources=resources,
            namespace=namespace,
            estimator=spec,
        )
