"""A Slurm queue as `squeue` shows it: the state a forecast starts from (`tsched forecast --squeue`).

A site asks "when will each pending job start?" of a running Slurm with the
command `SQUEUE_COMMAND` (times as Unix seconds through `SLURM_TIME_FORMAT=%s`,
every array task on its own line, the pending jobs in Slurm's priority order):

- a RUNNING line is a running job, started at its StartTime; a PENDING line
  a waiting one, in the order squeue printed them;
- each job's totals are read from its TRES (`tres-alloc`: for a pending job
  what it asked for, for a running one what it was given): CPUs, the fewest
  nodes, memory and GPUs in all, exclusive when OverSubscribe says NO; it asks
  the cluster what they say (`ResourceRequest.from_totals`), in its
  partitions, as the service rebuilds a job sent to it;
- users, accounts, partitions and QOS travel by name (`QueueState.names`), so
  the service asks the namespace's estimator about the users it learnt from
  jobcomp or sacct; UserID and GroupID are the numbers behind them;
- a job without a time limit (UNLIMITED) is given its partition's MaxTime;
- a pending job waiting for anything but its priority or resources
  (`FORECAST_REASONS`: held, over a limit, for another job, a begin time, a
  reservation, its array's task limit) is left out and reported with Slurm's
  reason: tsched's scheduler does not model why;
- a running job stays on the nodes squeue's NodeList names (no more than
  its CPUs); the running jobs are placed again in the order they started.

A line squeue could not have printed is refused naming the source, the line
and the field; nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel.durations import slurm_duration
from kernel.errors import UsageError
from kernel.hostlist import expand_hostlist
from kernel.jobs import JobName, JobRequest
from kernel.resources import ResourceRequest
from predictor.forecasting import QueueState, StartedJob
from simulator.cluster import Cluster
from simulator.workloads.tres import parse_tres, tres_gpus

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
    "NodeList",
    "Reason",
)
#: The reasons a pending job waits that tsched's scheduler models: Slurm's priority order and its resources. A
#: job pending for any other (held, over a limit, waiting for another job, a begin time, a reservation, licenses,
#: its array's task limit, nodes down) is left out of the forecast, the others not waiting for it, and reported.
FORECAST_REASONS = frozenset({"None", "Priority", "Resources"})
#: The command whose output `read_squeue` reads.
SQUEUE_COMMAND = (
    "SLURM_TIME_FORMAT=%s squeue --noheader --array --states=PENDING,RUNNING --sort=-p,i "
    f"--Format='{','.join(f'{field}:|' for field in SQUEUE_FIELDS[:-1])},{SQUEUE_FIELDS[-1]}'"
)


@dataclass(frozen=True)
class SlurmQueue:
    """What `squeue` showed: the state to forecast from; each waiting job as squeue names it (`9_2`: task 2 of
    array 9, whose tasks share the job id) and the start Slurm's backfill scheduler planned for it, where it
    planned one (what `squeue --start` prints), in the state's order; the pending jobs left out, by name, with
    Slurm's reason."""

    state: QueueState
    labels: list[str]
    planned: list[int | None]
    left_out: dict[str, str]


@dataclass(frozen=True)
class _Line:
    """One job of the output."""

    job: JobRequest
    label: str
    start: int | None  # running: when it started; waiting: Slurm's planned start, if any
    request: ResourceRequest
    names: list[tuple[str, str]]


def read_squeue(text: str, source: str, now: int, cluster: Cluster) -> SlurmQueue:
    """The queue `text` (`SQUEUE_COMMAND`'s output, read from `source`) shows at `now`, on `cluster`.

    Each job asks what its totals say (`ResourceRequest.from_totals`), as the service rebuilds a job sent to it:
    a forecast in-process and one through the service see the same requests.
    """
    left_out: dict[str, str] = {}
    running: list[_Line] = []
    waiting: list[_Line] = []
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
        if field("State", _state) == "PENDING" and row["Reason"] not in FORECAST_REASONS:
            left_out[_label(row, field)] = row["Reason"]
            continue
        (running if row["State"] == "RUNNING" else waiting).append(_line(row, field, cluster))
    running.sort(key=lambda item: (item.start, item.job.job_id))  # placed again in the order Slurm placed them
    jobs = running + waiting
    names: list[JobName] = [(index, kind, name) for index, item in enumerate(jobs) for kind, name in item.names]
    state = QueueState(
        now,
        cluster.procs,
        [StartedJob(item.job, item.start or 0) for item in running],
        [item.job for item in waiting],
        [item.request for item in jobs],
        names,
    )
    return SlurmQueue(state, [item.label for item in waiting], [item.start for item in waiting], left_out)


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


def _label(row: dict[str, str], field: Callable[[str, Callable[[str], Any]], Any]) -> str:
    """The job as squeue names it: its id, or `ID_TASK` for an array's task."""
    job_id = field("JobID", _count)
    task = row["ArrayTaskID"]
    return f"{job_id}_{task}" if task not in ("", "N/A") else str(job_id)


def _line(row: dict[str, str], field: Callable[[str, Callable[[str], Any]], Any], cluster: Cluster) -> _Line:
    """The job of one line: as submitted (its totals from its TRES), what it asks of the cluster, its names."""
    partition, qos = row["Partition"], row["QOS"]
    limit = field("TimeLimit", slurm_duration)
    if limit is None:
        limit = field("Partition", lambda names: _max_time(cluster, names))
    tres = {} if row["tres-alloc"] in ("", "N/A") else field("tres-alloc", parse_tres)  # N/A: its CPUs alone
    job = JobRequest(
        job_id=field("JobID", _count),
        submit=field("SubmitTime", _unix),
        user=field("UserID", int),
        group=field("GroupID", int),
        t_req=limit,
        procs=field("NumCPUs", _count),
        nodes=tres.get("node", 0),  # a pending job's fewest nodes (NumNodes is the count Slurm plans for it)
        memory_mb=tres.get("mem", 0),
        gpus=tres_gpus(tres)[0],
        exclusive=int(row["OverSubscribe"] == "NO"),
    )
    running = row["State"] == "RUNNING"
    nodelist = field("NodeList", lambda text: expand_hostlist(text, job.procs)) if running else ()
    request = field(
        "NodeList",
        lambda _: ResourceRequest.from_totals(
            job.procs, job.nodes, job.memory_mb, job.gpus, bool(job.exclusive), partition, qos, nodelist
        ),
    )
    names = [
        (kind, name)
        for kind, name in (("user", row["UserName"]), ("group", row["Account"]), ("queue", partition), ("qos", qos))
        if name and name != "(null)"
    ]
    start = field("StartTime", _unix) if running else (int(row["StartTime"]) if row["StartTime"].isdigit() else None)
    return _Line(job, _label(row, field), start, request, names)


def _state(text: str) -> str:
    if text not in ("RUNNING", "PENDING"):
        raise ValueError("not RUNNING or PENDING (squeue --states=PENDING,RUNNING)")
    return text


def _max_time(cluster: Cluster, names: str) -> int:
    """The longest MaxTime of the job's partitions, in seconds: what an UNLIMITED job may run."""
    limits = []
    for name in names.split(","):
        if name not in cluster.partition_names:
            raise ValueError(f"{name!r} is not a partition of the cluster ({', '.join(cluster.partition_names)})")
        limits.append(cluster.partition(name).max_time)
    if None in limits:
        raise ValueError("the job has no time limit, and neither has its partition: no end to forecast")
    return max(limit for limit in limits if limit is not None)
