"""A Slurm queue as `squeue` shows it: the state a forecast starts from (`tsched forecast --squeue`).

A site asks "when will each pending job start?" of a running Slurm with the
command `SQUEUE_COMMAND` (times as Unix seconds through `SLURM_TIME_FORMAT=%s`,
every array task on its own line, the pending jobs in Slurm's priority order):

- a RUNNING line is a running job, started at its StartTime; a PENDING line
  a waiting one, in the order squeue printed them;
- what each job asked of the cluster is read from its TRES (`tres-alloc`: for
  a pending job what it asked for, for a running one what it was given) as
  sacct's ReqTRES is read (`simulator.workloads.tres.sacct_request`: nodes,
  CPUs, memory per node or per CPU, GPUs per node or per job), with its
  partition and QOS, exclusive when OverSubscribe says NO;
- users, accounts, partitions and QOS travel by name (`QueueState.names`), so
  the service asks the namespace's estimator about the users it learnt from
  jobcomp or sacct; UserID and GroupID are the numbers behind them;
- a job without a time limit (UNLIMITED) is given its partition's MaxTime;
- a pending job held, over a partition's or an association's limits, or
  waiting for another job or a begin time (`NOT_FORECAST`) is left out and
  reported with Slurm's reason: tsched's scheduler does not model why.

A line squeue could not have printed is refused naming the source, the line
and the field; nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kernel.durations import slurm_duration
from kernel.errors import UsageError
from kernel.jobs import JobName, JobRequest
from kernel.resources import ResourceRequest
from predictor.forecasting import QueueState, StartedJob
from simulator.cluster import Cluster
from simulator.workloads.tres import parse_tres, sacct_request, tres_gpus

#: The columns, in order (`squeue --Format` names).
SQUEUE_FIELDS = (
    "JobID",
    "ArrayTaskID",
    "State",
    "Partition",
    "QOS",
    "UserName",
    "UserID",
    "Account",
    "GroupID",
    "SubmitTime",
    "StartTime",
    "TimeLimit",
    "NumCPUs",
    "NumNodes",
    "tres-alloc",
    "OverSubscribe",
    "Reason",
)
#: Why a pending job waits, when it is a reason tsched's scheduler does not model: held jobs, jobs over a
#: partition's limits, and jobs waiting for other jobs or for a begin time. They are left out of the forecast
#: (the others do not wait for them) and reported.
NOT_FORECAST = ("JobHeld", "Partition", "Dependency", "BeginTime", "AssocGrp", "AssocMax", "QOSGrp", "QOSMax")
#: The command whose output `read_squeue` reads.
SQUEUE_COMMAND = (
    "SLURM_TIME_FORMAT=%s squeue --noheader --array --states=PENDING,RUNNING --sort=-p,i "
    f"--Format='{','.join(f'{field}:|' for field in SQUEUE_FIELDS[:-1])},{SQUEUE_FIELDS[-1]}'"
)


@dataclass(frozen=True)
class SlurmQueue:
    """What `squeue` showed: the state to forecast from, the pending jobs left out of it (by job id, with Slurm's
    reason) and the start Slurm's backfill scheduler planned for each waiting job, where it planned one (what
    `squeue --start` prints), in the state's order."""

    state: QueueState
    left_out: dict[int, str]
    planned: list[int | None]


def read_squeue(text: str, source: str, now: int, cluster: Cluster) -> SlurmQueue:
    """The queue `text` (`SQUEUE_COMMAND`'s output, read from `source`) shows at `now`, on `cluster`."""
    left_out: dict[int, str] = {}
    planned: list[int | None] = []
    running: list[StartedJob] = []
    waiting: list[JobRequest] = []
    placed: list[tuple[ResourceRequest, list[tuple[str, str]]]] = []
    pending: list[tuple[ResourceRequest, list[tuple[str, str]]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(SQUEUE_FIELDS):
            raise UsageError(
                f"{source}, line {number}: {len(values)} fields, not the {len(SQUEUE_FIELDS)} of the command "
                f"`{SQUEUE_COMMAND}`"
            )
        row = dict(zip(SQUEUE_FIELDS, (value.strip() for value in values), strict=True))
        field = _field_reader(source, number, row)
        if row["State"] == "PENDING" and row["Reason"].startswith(NOT_FORECAST):
            left_out[field("JobID", _count)] = row["Reason"]
            continue
        job, request, names, start = _job(row, field, cluster)
        if row["State"] == "RUNNING":
            running.append(StartedJob(job, start if start is not None else now))
            placed.append((request, names))
        else:
            waiting.append(job)
            pending.append((request, names))
            planned.append(int(row["StartTime"]) if row["StartTime"].isdigit() else None)
    jobs = placed + pending
    named: list[JobName] = [(index, kind, name) for index, (_, names) in enumerate(jobs) for kind, name in names]
    state = QueueState(now, cluster.procs, running, waiting, [request for request, _ in jobs], named)
    return SlurmQueue(state, left_out, planned)


def _field_reader(source: str, line: int, row: dict[str, str]) -> Callable[[str, Callable[[str], Any]], Any]:
    """Reads one field of the row with `parse`, and refuses it naming the source, line and field."""

    def field(name: str, parse: Callable[[str], Any]) -> Any:
        try:
            return parse(row[name])
        except ValueError as error:
            raise UsageError(f"{source}, line {line}: {name} {row[name]!r}: {error}") from None

    return field


def _unix(text: str) -> int:
    if not text.isdigit():
        raise ValueError("not Unix seconds (run squeue with SLURM_TIME_FORMAT=%s)")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError("not a positive whole number")
    return int(text)


def _job(
    row: dict[str, str], field: Callable[[str, Callable[[str], Any]], Any], cluster: Cluster
) -> tuple[JobRequest, ResourceRequest, list[tuple[str, str]], int | None]:
    """The job of one line: as submitted, what it asked of the cluster, its names, and its start if running."""
    state = field("State", _state)
    partition, qos = row["Partition"], row["QOS"]
    limit = field("TimeLimit", slurm_duration)
    if limit is None:
        limit = field("Partition", lambda name: _max_time(cluster, name))
    tres = field("tres-alloc", parse_tres)
    asked = field("tres-alloc", lambda text: sacct_request(text, partition=partition, qos=qos))
    request = replace(asked, exclusive=row["OverSubscribe"] == "NO")
    job = JobRequest(
        job_id=field("JobID", _count),
        submit=field("SubmitTime", _unix),
        user=field("UserID", int),
        group=field("GroupID", int),
        t_req=limit,
        procs=field("NumCPUs", _count),
        nodes=field("NumNodes", _count),
        memory_mb=tres.get("mem", 0),
        gpus=tres_gpus(tres)[0],
        exclusive=int(request.exclusive),
    )
    names = [
        (kind, name)
        for kind, name in (("user", row["UserName"]), ("group", row["Account"]), ("queue", partition), ("qos", qos))
        if name and name != "(null)"
    ]
    start = field("StartTime", _unix) if state == "RUNNING" else None
    return job, request, names, start


def _state(text: str) -> str:
    if text not in ("RUNNING", "PENDING"):
        raise ValueError("not RUNNING or PENDING (squeue --states=PENDING,RUNNING)")
    return text


def _max_time(cluster: Cluster, name: str) -> int:
    """The partition's MaxTime in seconds: what an UNLIMITED job may run."""
    if name not in cluster.partition_names:
        raise ValueError(f"not a partition of the cluster ({', '.join(cluster.partition_names)})")
    limit = cluster.partition(name).max_time
    if limit is None:
        raise ValueError("the job has no time limit, and neither has its partition: no end to forecast")
    return int(limit)
