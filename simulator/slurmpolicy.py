"""What a site's accounting adds to the `slurm` scheduler: priority/multifactor's order and the limits that hold jobs.

`site_policy` builds, for the jobs of a replay, the queue policy (`BasicPriority` for
priority/basic, `simulator.priority.Multifactor` for priority/multifactor, as
slurm.conf's PriorityType says) and the `SlurmGate` the scheduler's passes
ask (`simulator.slurmsched.SlurmBackfill`): whether a limit holds a job
(`simulator.limits`), and what to tell priority and limits when jobs start and
end. Jobs belong to the associations of the site's `sacctmgr show assoc` dump
(`simulator.clusterconf.sacctmgr`), matched by user and account names (a
sacct trace's User and Account); a pair the dump lacks is added with one
share, as is every account and user of the trace when no dump is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import pandas as pd

from kernel.resources import ResourceRequest
from simulator.cluster import Cluster
from simulator.clusterconf.sacctmgr import Accounts, Qos, equal_shares
from simulator.jobs import WaitingJob
from simulator.limits import LimitedJob, Limits
from simulator.nodes import Demand
from simulator.policies import FCFS, QueuePolicy
from simulator.priority import Multifactor, PriorityJob

MULTIFACTOR = "priority/multifactor"
#: The QOS of a job that names none (Slurm's default QOS).
DEFAULT_QOS = "normal"
T = TypeVar("T")


class BasicPriority(FCFS):
    """priority/basic: a priority that falls with each submission, kept by a job that is requeued (its place in
    the queue is its first submission's, where FCFS would put it last)."""

    name = "fcfs"

    def add(self, job: WaitingJob) -> None:
        jobs = self._jobs
        if jobs and job.index < next(reversed(jobs)):  # trace order is submission order
            self._jobs = dict(sorted([*jobs.items(), (job.index, job)]))
        else:
            jobs[job.index] = job


@dataclass(frozen=True)
class SiteAccounting:
    """A site's associations (None: the trace's accounts and users, equal shares) and QOS, by name."""

    accounts: Accounts | None = None
    qos: Mapping[str, Qos] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose job it is and how it runs, as accounting reads it."""

    user: str
    account: str
    qos: str


class SlurmGate:
    """The scheduler's questions to accounting: whether a limit holds a job; starts and ends to count.

    `version` changes when priorities were recalculated (the order may have
    changed, so a backfill cycle is due, as slurmctld's `last_job_update`
    makes one); `wake_time` is the next recalculation while jobs wait.
    """

    def __init__(self, priority: Multifactor | None, limits: Limits | None) -> None:
        self.priority = priority
        self.limits = limits

    @property
    def version(self) -> int:
        return 0 if self.priority is None else self.priority.version

    def holds(self, job: WaitingJob) -> bool:
        return self.limits is not None and self.limits.holds(job)

    def started(self, job: WaitingJob, cpus: int, now: int) -> None:
        if self.priority is not None:
            self.priority.started(job, cpus, now)
        if self.limits is not None:
            self.limits.started(job.index)

    def ended(self, indices: Iterable[int], now: int) -> None:
        for index in indices:
            if self.priority is not None:
                self.priority.ended(index, now)
            if self.limits is not None:
                self.limits.ended(index)

    def wake_time(self) -> int | None:
        return None if self.priority is None else self.priority.next_calculation()


@dataclass
class SitePolicy:
    """The queue policy and gate of a replay, its jobs (those no limit holds for ever), the jobs left out (job
    id -> Slurm's pending reason) and what a reader should know."""

    policy: QueuePolicy
    gate: SlurmGate | None
    jobs: pd.DataFrame
    left_out: dict[int, str]
    notes: list[str]


def owners(
    jobs: pd.DataFrame, requests: Mapping[int, ResourceRequest], names: Mapping[str, Mapping[int, str]]
) -> list[Owner]:
    """Per job (in `jobs`' order): user and account names (the trace's, else `u<id>` and `g<id>`) and QOS."""
    users, groups = names.get("user", {}), names.get("group", {})
    found = []
    for job_id, user, group in zip(*(jobs[c].tolist() for c in ("job_id", "user", "group")), strict=True):
        request = requests.get(job_id)
        account = groups.get(group) or (f"g{group}" if group >= 0 else "default")
        found.append(Owner(users.get(user) or f"u{user}", account, (request.qos if request else None) or DEFAULT_QOS))
    return found


def site_policy(
    cluster: Cluster, jobs: pd.DataFrame, demands: Sequence[Demand], owned: Sequence[Owner], accounting: SiteAccounting
) -> SitePolicy:
    """The policy and gate for `jobs` (each with its first partition's `Demand` and its `Owner`)."""
    base = accounting.accounts or equal_shares(())
    accounts, added = base.with_users((owner.user, owner.account) for owner in owned)
    notes = list(accounts.notes)
    if added and accounting.accounts is not None:
        notes.append(f"{added} accounts or users of the trace are not in {base.source}: added with one share")
    positions = [accounts.find(o.user, o.account, d.partition) or 0 for o, d in zip(owned, demands, strict=True)]
    limited = [_limited(owner, position, demand, t_req) for owner, position, demand, t_req in zip(
        owned, positions, demands, jobs["t_req"].tolist(), strict=True
    )]  # fmt: skip
    left_out: dict[int, str] = {}
    if cluster.priority.limits_enforced:
        probe = Limits(accounts, accounting.qos, limited)
        job_ids = jobs["job_id"].tolist()
        left_out = {job_ids[i]: reason for i in range(len(job_ids)) if (reason := probe.never_runs(i))}
    if left_out:
        keep = [job_id not in left_out for job_id in jobs["job_id"].tolist()]
        jobs = jobs.loc[keep].reset_index(drop=True)
        demands, owned, positions, limited = (
            _kept(demands, keep),
            _kept(owned, keep),
            _kept(positions, keep),
            _kept(limited, keep),
        )
    limits = Limits(accounts, accounting.qos, limited) if cluster.priority.limits_enforced else None
    if cluster.scheduler.priority_type != MULTIFACTOR:
        return SitePolicy(BasicPriority(), SlurmGate(None, limits) if limits else None, jobs, left_out, notes)
    priority = _multifactor(cluster, accounts, accounting.qos, jobs, demands, owned, positions)
    return SitePolicy(priority, SlurmGate(priority, limits), jobs, left_out, notes)


def _multifactor(
    cluster: Cluster,
    accounts: Accounts,
    qos: Mapping[str, Qos],
    jobs: pd.DataFrame,
    demands: Sequence[Demand],
    owned: Sequence[Owner],
    positions: Sequence[int],
) -> Multifactor:
    factors = {p.name: p.priority_job_factor for p in cluster.partitions}
    entries = [
        PriorityJob(
            position,
            demand.min_cpus,
            demand.min_nodes,
            int(t_req),
            factors[demand.partition],
            qos[owner.qos].priority if owner.qos in qos else 0,
            qos[owner.qos].usage_factor if owner.qos in qos else 1.0,
        )
        for position, demand, owner, t_req in zip(positions, demands, owned, jobs["t_req"].tolist(), strict=True)
    ]
    start = int(jobs["submit"].min()) if len(jobs) else 0
    return Multifactor(cluster, accounts, entries, start, max((q.priority for q in qos.values()), default=0))


def _kept(items: Sequence[T], keep: list[bool]) -> list[T]:
    return [item for item, kept in zip(items, keep, strict=True) if kept]


def _limited(owner: Owner, position: int, demand: Demand, t_req: int) -> LimitedJob:
    gpus = demand.gpus_per_job or demand.gpus_per_node * demand.min_nodes or demand.gpus_per_task * demand.tasks
    return LimitedJob(owner.user, owner.account, position, owner.qos, demand.min_cpus, demand.min_nodes, gpus, t_req)
