"""Protobuf messages <-> the predictor's job types, for the server and the client alike.

Reading validates: a request that breaks the contract raises `InvalidRequest`
naming the field (`jobs[3].t_req must be >= 1, got -5`). The field list and
its bounds come from `kernel.jobs.JOB_FIELDS`, the one schema the job
type, the wire and the state file share.

Batches make this the hot path of the service, so both directions are built
for speed: reading asks a message for field presence only where a value is
zero, and writing calls `add` with keywords (several times faster than
building messages and copying them in).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from kernel.errors import InvalidRequest
from kernel.hostlist import expand_hostlist
from kernel.jobs import (
    JOB_FIELD_NAMES,
    JOB_FIELDS,
    LEGACY_FIELD_COUNT,
    UNSET_SUBMIT,
    FinishedJob,
    JobField,
    JobName,
    JobRequest,
    Prediction,
)
from kernel.resources import ResourceRequest
from predictor.forecasting import DEFAULT_LOWER_QUANTILE, ON_NODES, QueueState, Scheduler, StartedJob, StartForecast
from predictor.proto import pb
from predictor.service.forecasts import MAX_LISTED_NODES, check_counts
from predictor.service.live import LiveSummary
from predictor.service.views import CallCount, Description, EstimatorView, NamespaceView, ServiceStatus

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: Room in a message besides its jobs and completions: the namespace and SPEC strings, and framing.
_MESSAGE_SLACK_BYTES = 4096

#: A Job message's fields in JobRequest order, read in one call.
_job_values = operator.attrgetter(*JOB_FIELD_NAMES)
_prediction_values = operator.attrgetter(*Prediction._fields)


def _place(where: str, index: int | None) -> str:
    """Where a job sits in the request ("jobs[3]"); built only for error messages."""
    return where if index is None else f"{where}[{index}]"


def _checked_field(job: pb.Job, field: JobField, place: str) -> int:
    if not job.HasField(field.name):
        if field.name in NAME_FIELDS and any(getattr(job, name) for name in NAME_FIELDS[field.name]):
            return -1  # given by name: the namespace's id for it replaces this (`job_names`)
        if field.unset is None:
            raise InvalidRequest(f"{place}.{field.name} is required")
        return field.unset
    value = int(getattr(job, field.name))
    if value < field.minimum:
        raise InvalidRequest(f"{place}.{field.name} must be >= {field.minimum}, got {value}")
    if field.maximum is not None and value > field.maximum:
        raise InvalidRequest(f"{place}.{field.name} must be <= {field.maximum}, got {value}")
    return value


def job_request(job: pb.Job, where: str, index: int | None = None) -> JobRequest:
    """Validate a Job message; an unset submit becomes UNSET_SUBMIT (to be read as the namespace's clock).

    A well-formed job is accepted by one combined test on its values: an unset
    field reads as 0, so presence is asked only of fields whose value is 0
    and whose unset value is not 0 (t_req and procs must be >= 1, so a 0
    there is refused either way). Anything else goes through the
    field-by-field checks, which name what is wrong.
    """
    job_id, submit, user, group, t_req, procs, queue, executable, nodes, memory_mb, gpus, qos, exclusive = _job_values(
        job
    )
    if (
        job_id >= 0
        and submit > 0
        and t_req >= 1
        and procs >= 1
        and user >= -1
        and group >= -1
        and queue >= -1
        and executable >= -1
        and nodes >= 0
        and memory_mb >= 0
        and gpus >= 0
        and qos >= -1
    ):
        has = job.HasField
        if (user or has("user")) and (group or has("group")):
            if not queue and not has("queue"):
                queue = -1
            if not executable and not has("executable"):
                executable = -1
            if not qos and not has("qos"):
                qos = -1
            return JobRequest(
                job_id,
                submit,
                user,
                group,
                t_req,
                procs,
                queue,
                executable,
                nodes,
                memory_mb,
                gpus,
                qos,
                int(exclusive),
            )
    place = _place(where, index)
    return JobRequest(*(_checked_field(job, field, place) for field in JOB_FIELDS))


def job_requests(jobs: Sequence[pb.Job], where: str, limit: int) -> list[JobRequest]:
    check_batch(len(jobs), where, limit)
    return [job_request(job, where, index) for index, job in enumerate(jobs)]


def finished_jobs(completions: Sequence[pb.Completion], where: str, limit: int) -> list[FinishedJob]:
    """Validate completions: fields present and sane, non-decreasing end. Runtimes are capped at t_req."""
    check_batch(len(completions), where, limit)
    result: list[FinishedJob] = []
    previous_end = -1
    for index, completion in enumerate(completions):
        if not (completion.HasField("job") and completion.HasField("end") and completion.HasField("runtime")):
            missing = next(name for name in ("job", "end", "runtime") if not completion.HasField(name))
            raise InvalidRequest(f"{where}[{index}].{missing} is required")
        request = job_request(completion.job, f"{where}[{index}].job")
        end, runtime = completion.end, completion.runtime
        if request.submit == UNSET_SUBMIT or end < request.submit or runtime < 0 or end < previous_end:
            _explain_completion(request, end, runtime, previous_end, where, index)
        previous_end = end
        result.append(FinishedJob(request, end, min(runtime, request.t_req)))
    return result


def _explain_completion(request: JobRequest, end: int, runtime: int, previous_end: int, where: str, index: int) -> None:
    item = f"{where}[{index}]"
    if request.submit == UNSET_SUBMIT:
        raise InvalidRequest(f"{item}.job.submit is required")
    if end < request.submit:
        raise InvalidRequest(f"{item}.end ({end}) is before {item}.job.submit ({request.submit})")
    if runtime < 0:
        raise InvalidRequest(f"{item}.runtime must be >= 0, got {runtime}")
    raise InvalidRequest(
        f"{item}.end ({end}) is before {where}[{index - 1}].end ({previous_end}): completions must come in end order"
    )


def check_batch(size: int, where: str, limit: int) -> None:
    """Refuse more jobs or completions in one call than the server's --max-batch, naming the field."""
    if size > limit:
        raise InvalidRequest(f"{where} holds {size} items; at most {limit} per call")


def max_message_bytes(max_batch: int) -> int:
    """The largest message a legitimate call of `max_batch` jobs and completions makes: every field at its widest.

    A negative int64 takes the most room on the wire (ten bytes), so the
    widest Job sets every number that may be negative to -1 and every other
    to its largest value; a Sync carries a batch of each. Jobs given by name
    are not counted: a batch of them holds fewer jobs.
    """
    numbers: dict[str, Any] = {field.name: _widest(field) for field in JOB_FIELDS}
    widest = pb.Job(**numbers)
    pair = pb.SyncRequest(completions=[pb.Completion(job=widest, end=-1, runtime=-1)], submitted=[widest])
    return max_batch * pair.ByteSize() + _MESSAGE_SLACK_BYTES


def _widest(field: JobField) -> int:
    if field.minimum < 0:
        return -1
    return (1 << 63) - 1 if field.maximum is None else field.maximum


# --- writing ---------------------------------------------------------------------------------


def _compile_job_writer(fields: Sequence[JobField]) -> Callable[..., Any]:
    """`write(make, job)`: `make(<every field by keyword>)`, the fields after the first schema's only where they
    are set (most jobs ask nothing more than a size, and a field set is a field on the wire).

    Compiled from the schema once, as `dataclasses` compiles `__init__`: a
    call with literal keywords costs a third less than one that unpacks a
    dict, and a batch makes one call per job.
    """
    everything = ", ".join(f"{field.name}=job[{position}]" for position, field in enumerate(fields))
    legacy = ", ".join(f"{field.name}=job[{position}]" for position, field in enumerate(fields[:LEGACY_FIELD_COUNT]))
    resources = enumerate(fields[LEGACY_FIELD_COUNT:], start=LEGACY_FIELD_COUNT)
    any_set = " or ".join(f"job[{position}] != {field.unset}" for position, field in resources)
    source = f"def write(make, job):\n    if {any_set}:\n        return make({everything})\n    return make({legacy})\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<predictor.service.codec job writer>", "exec"), namespace)
    writer: Callable[..., Any] = namespace["write"]
    return writer


_write_job = _compile_job_writer(JOB_FIELDS)


def add_jobs(field: Any, jobs: Sequence[JobRequest]) -> None:
    """Append jobs to a repeated Job field."""
    add = field.add
    for job in jobs:
        _write_job(add, job)


def job_message(job: JobRequest) -> pb.Job:
    """One Job message; a submit of UNSET_SUBMIT is left unset."""
    message: pb.Job = _write_job(pb.Job, job)
    if job.submit == UNSET_SUBMIT:
        message.ClearField("submit")
    return message


def add_completions(field: Any, finished: Sequence[FinishedJob]) -> None:
    """Append finished jobs to a repeated Completion field."""
    add = field.add
    for job in finished:
        add(job=job_message(job.request), end=job.end, runtime=job.runtime)


def add_predictions(field: Any, predictions: Sequence[Prediction]) -> None:
    """Append to a repeated Prediction field."""
    add = field.add
    for prediction in predictions:
        add(
            t_sched=prediction.t_sched,
            factor=prediction.factor,
            basis=prediction.basis,
            fallback=prediction.fallback,
        )


def prediction_from(message: pb.Prediction) -> Prediction:
    """An unset factor reads as 0.0, so presence is asked only of a zero (a batch reads thousands)."""
    t_sched, factor, basis, fallback = _prediction_values(message)
    if not factor and not message.HasField("factor"):
        factor = None
    return Prediction(t_sched, factor, basis, fallback)


def sync_request(
    finished: Sequence[FinishedJob],
    submitted: Sequence[JobRequest],
    namespace: str,
    estimator: str,
) -> pb.SyncRequest:
    request = pb.SyncRequest(namespace=namespace, estimator=estimator)
    add_completions(request.completions, finished)
    add_jobs(request.submitted, submitted)
    return request


#: Names a Job may give instead of a number: (field of the number, name fields standing for it).
NAME_FIELDS: dict[str, tuple[str, ...]] = {
    "user": ("user_name",),
    "group": ("group_name", "account"),
    "queue": ("partition",),
    "qos": ("qos_name",),
    "executable": ("job_name",),
}
#: The longest name accepted (user and account names are short; this bounds what a namespace stores).
MAX_NAME_LENGTH = 128


def acceptable_name(name: str) -> bool:
    """Whether the service takes `name` for a user, account, partition, QOS or job name."""
    return len(name) <= MAX_NAME_LENGTH and name.isprintable() and bool(name.strip())


def job_names(jobs: Sequence[pb.Job], where: str, indexed: bool = True, inner: str = "") -> list[JobName]:
    """The names jobs give for their user, group, partition, QOS and application, checked: one of number or name
    per field, not empty.

    `inner` is the job's place inside an item (".job" of a completion), for messages.
    """
    names: list[JobName] = []
    for index, job in enumerate(jobs):
        if not (job.user_name or job.group_name or job.account or job.partition or job.qos_name or job.job_name):
            continue
        place = _place(where, index if indexed else None) + inner
        for number, spellings in NAME_FIELDS.items():
            given = [spelling for spelling in spellings if getattr(job, spelling)]
            if job.HasField(number):
                given.insert(0, number)
            if len(given) > 1:
                raise InvalidRequest(f"{place}: {' and '.join(given)} are both set; give one")
            if given and given[0] != number:
                name: str = getattr(job, given[0])
                if not acceptable_name(name):
                    raise InvalidRequest(
                        f"{place}.{given[0]} must be 1-{MAX_NAME_LENGTH} printable characters, not all blank; "
                        f"got {len(name)} characters"
                    )
                names.append((index, number, name))
    return names


def add_names(
    message: pb.Job,
    *,
    user: str | None = None,
    group: str | None = None,
    account: str | None = None,
    partition: str | None = None,
    qos: str | None = None,
    job_name: str | None = None,
) -> pb.Job:
    """`message` with the fields given here by name (the numbers they stand for cleared)."""
    if user is not None:
        message.ClearField("user")
        message.user_name = user
    if group is not None or account is not None:
        message.ClearField("group")
        message.group_name = group or ""
        message.account = account or ""
    if partition is not None:
        message.ClearField("queue")
        message.partition = partition
    if qos is not None:
        message.ClearField("qos")
        message.qos_name = qos
    if job_name is not None:
        message.ClearField("executable")
        message.job_name = job_name
    return message


# --- queue-time forecasts ------------------------------------------------------------------------


class ForecastQuestion(NamedTuple):
    """What a ForecastStart request asks: the scheduler's state, its scheduler, the bounds' quantile, and the runs
    of a sampled forecast (0: none, the point forecast)."""

    state: QueueState
    scheduler: Scheduler
    lower_quantile: float
    draws: int


def forecast_question(request: pb.ForecastStartRequest) -> ForecastQuestion:
    """A ForecastStart request as the question it asks (`ForecastQuestion`).

    Checks each message (presence, bounds, batch sizes); `predictor.service.forecasts.check_state`
    checks how the fields relate (starts before now, jobs within the machine).
    """
    for name in ("now", "machine_procs"):
        if not request.HasField(name):
            raise InvalidRequest(f"{name} is required")
    check_counts(len(request.running), len(request.waiting))  # before decoding them
    running = []
    for index, message in enumerate(request.running):
        place = f"running[{index}]"
        if not message.HasField("job"):
            raise InvalidRequest(f"{place}.job is required")
        if not message.HasField("start"):
            raise InvalidRequest(f"{place}.start is required")
        running.append(StartedJob(job_request(message.job, f"{place}.job"), message.start))
    waiting = [job_request(job, "waiting", index) for index, job in enumerate(request.waiting)]
    defaults = Scheduler()
    scheduler = Scheduler(
        request.policy or defaults.policy,
        request.backfill or defaults.backfill,
        request.backfill_order or defaults.backfill_order,
    )
    requests = _cluster_requests(request) if scheduler.backfill == ON_NODES else ()
    names = job_names([message.job for message in request.running], "running", inner=".job")
    names += [(len(running) + index, field, name) for index, field, name in job_names(request.waiting, "waiting")]
    state = QueueState(request.now, request.machine_procs, running, waiting, requests, names)
    quantile = request.lower_quantile if request.HasField("lower_quantile") else DEFAULT_LOWER_QUANTILE
    return ForecastQuestion(state, scheduler, quantile, request.draws)


def _cluster_requests(request: pb.ForecastStartRequest) -> list[ResourceRequest]:
    """What each job (running, then waiting) asked of the cluster, from its totals, partition and QOS by name; a
    running job on the nodes its node list names."""
    places = [
        (f"running[{index}]", f"running[{index}].job", message.job, message.node_list)
        for index, message in enumerate(request.running)
    ]
    places += [(f"waiting[{index}]", f"waiting[{index}]", job, "") for index, job in enumerate(request.waiting)]
    budget = MAX_LISTED_NODES
    requests = []
    for place, field, job, node_list in places:
        if job.HasField("queue") and job.queue != -1:
            raise InvalidRequest(f"{field}.queue: with backfill 'slurm' a job names its partition (partition)")
        nodelist = _listed(node_list, min(job.procs, budget), f"{place}.node_list")
        budget -= len(nodelist)
        try:
            requests.append(
                ResourceRequest.from_totals(
                    job.procs, job.nodes, job.memory_mb, job.gpus, job.exclusive, job.partition, job.qos_name, nodelist
                )
            )
        except ValueError as error:
            raise InvalidRequest(f"{field}: {error}") from None
    return requests


def _listed(node_list: str, limit: int, field: str) -> list[str]:
    """The nodes a running job's node list names: no more than its CPUs, nor than a request's node lists may
    name together (`MAX_LISTED_NODES`), counted before they are expanded."""
    if not node_list:
        return []
    try:
        return expand_hostlist(node_list, limit)
    except ValueError as error:
        raise InvalidRequest(
            f"{field}: {error} (a job runs on no more nodes than CPUs, and a request's node lists name at most "
            f"{MAX_LISTED_NODES} in all)"
        ) from None


def forecast_request(
    state: QueueState,
    scheduler: Scheduler,
    namespace: str,
    estimator: str,
    lower_quantile: float | None = None,
    draws: int | None = None,
) -> pb.ForecastStartRequest:
    request = pb.ForecastStartRequest(
        namespace=namespace,
        estimator=estimator,
        now=state.now,
        machine_procs=state.procs,
        policy=scheduler.policy,
        backfill=scheduler.backfill,
        backfill_order=scheduler.backfill_order,
        lower_quantile=lower_quantile,
        draws=draws,
    )
    lists = [",".join(asked.nodelist) for asked in state.requests[: len(state.running)]] or [""] * len(state.running)
    for started, node_list in zip(state.running, lists, strict=True):
        request.running.add(job=job_message(started.job), start=started.start, node_list=node_list)
    add_jobs(request.waiting, state.waiting)
    messages = [*(running.job for running in request.running), *request.waiting]
    for index, field, name in state.names:
        add_names(messages[index], **{_NAME_ARGUMENTS[field]: name})
    return request


#: `add_names`'s argument for each field a `JobName` names.
_NAME_ARGUMENTS = {"user": "user", "group": "group", "queue": "partition", "qos": "qos", "executable": "job_name"}


def add_start_forecasts(field: Any, forecasts: Sequence[StartForecast]) -> None:
    add = field.add
    for forecast in forecasts:
        add(job_id=forecast.job_id, start=forecast.start, lower=forecast.lower, upper=forecast.upper)


def start_forecasts_from(messages: Sequence[pb.StartForecast]) -> list[StartForecast]:
    return [StartForecast(m.job_id, m.start, m.lower, m.upper) for m in messages]


# --- what the service tells ----------------------------------------------------------------------
#
# A view's fields are its message's, name for name: a view becomes a message through its fields
# (`dataclasses.asdict`, nested views as nested messages) and a message a view by copying them back.

View = TypeVar("View", bound="DataclassInstance")


def message_view(view_type: type[View], message: Any, **given: Any) -> View:
    """The view of `message`; `given`: the fields that are more than a copy (nested views, maps)."""
    copied = {
        item.name: _copied(getattr(message, item.name))
        for item in dataclasses.fields(view_type)
        if item.name not in given
    }
    return view_type(**copied, **given)


def _copied(value: Any) -> Any:
    """A scalar as it is; a repeated field as a tuple."""
    return value if isinstance(value, int | float | str | bool) else tuple(value)


def description_message(description: Description) -> pb.ListEstimatorsResponse:
    fields = dataclasses.asdict(description)
    for info in fields["estimators"]:
        info["parameters"] = [{"name": name, "default": value} for name, value in info["parameters"].items()]
    return pb.ListEstimatorsResponse(**fields)


def description_from(message: pb.ListEstimatorsResponse) -> Description:
    estimators = tuple(
        message_view(EstimatorView, info, parameters={item.name: item.default for item in info.parameters})
        for info in message.estimators
    )
    return message_view(Description, message, estimators=estimators)


def namespace_info(view: NamespaceView) -> pb.NamespaceInfo:
    return pb.NamespaceInfo(**dataclasses.asdict(view))


def namespace_views(message: pb.ListNamespacesResponse) -> list[NamespaceView]:
    return [message_view(NamespaceView, info) for info in message.namespaces]


def status_message(status: ServiceStatus) -> pb.StatusResponse:
    """The Status answer; LiveSummary's fields are EstimatorStatus's, name for name."""
    return pb.StatusResponse(**dataclasses.asdict(status))


def status_from(message: pb.StatusResponse) -> ServiceStatus:
    return message_view(
        ServiceStatus,
        message,
        estimators=tuple(
            message_view(LiveSummary, row, replay_scores=dict(row.replay_scores)) for row in message.estimators
        ),
        calls=tuple(message_view(CallCount, call) for call in message.calls),
    )
