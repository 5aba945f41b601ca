"""QOS and association limits that hold jobs pending, as Slurm 22.05's accounting policy enforces them.

Read in `src/slurmctld/acct_policy.c` (`acct_policy_job_runnable_pre_select`,
`_qos_job_runnable_pre_select`, `acct_policy_job_runnable_post_select`):
with AccountingStorageEnforce=limits (or safe, all), a job may start only if

- its QOS's GrpJobs, MaxJobsPerAccount and MaxJobsPerUser are not reached by
  the running jobs of the QOS (of its account, of its user), nor GrpTRES,
  MaxTRESPerAccount and MaxTRESPerUser by their CPUs, nodes and GPUs with
  the job's added;
- its association's MaxJobs (its own or inherited), and the GrpJobs and
  GrpTRES of its association and of every account above it, are not reached
  by the running jobs below each;
- a limit the QOS sets takes the place of the association's of the same kind
  (`qos_rec.grp_jobs == INFINITE` checks and the like: QOS limits come first).

Otherwise it is held with Slurm's pending reason (`job_reason_string`:
QOSGrpJobsLimit, AssocMaxJobsLimit, QOSMaxCpuPerUserLimit, ...), skipped by
the main and backfill passes without blocking its partition or reserving
nodes (`schedule()` and `_attempt_backfill` `continue` past it). A job over a
per-job limit (MaxWall, MaxTRES) or larger than any limit can never start:
`never_runs` names it, and the replay leaves it out and counts it.

Counts are of requested nodes and CPUs (Slurm counts what was allocated, and
GrpTRES=node distinct nodes). Submit limits (MaxSubmit*), TRES-minute limits
and GrpWall are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simulator.clusterconf.sacctmgr import Accounts, Qos, TresLimits
from simulator.jobs import WaitingJob

#: The TRES a limit counts, in TresLimits' order, as the pending reasons name them.
_TRES = ("Cpu", "Node", "GRES")


@dataclass(frozen=True, slots=True)
class LimitedJob:
    """What the limits read of a job: who runs it, in which QOS, asking how much."""

    user: str
    account: str
    assoc: int  # its user association's position in Accounts.associations
    qos: str
    cpus: int
    nodes: int
    gpus: int
    time_limit: int  # seconds

    @property
    def tres(self) -> tuple[int, int, int]:
        return (self.cpus, self.nodes, self.gpus)


class Counts:
    """Running jobs and their CPUs, nodes and GPUs."""

    __slots__ = ("jobs", "tres")

    def __init__(self) -> None:
        self.jobs = 0
        self.tres = [0, 0, 0]

    def change(self, job: LimitedJob, sign: int) -> None:
        self.jobs += sign
        for kind, count in enumerate(job.tres):
            self.tres[kind] += sign * count


class Limits:
    """Which waiting jobs the limits hold (module docstring); `jobs` by trace position.

    `holds` is asked for each job a pass considers, `started` and `ended` keep
    the counts (a job started earlier in the same pass counts at once, as in
    slurmctld); `reasons` keeps, per trace position, the last reason a job was
    held for.
    """

    def __init__(self, accounts: Accounts, qos: Mapping[str, Qos], jobs: Sequence[LimitedJob]) -> None:
        self.assocs = accounts.associations
        self.qos = qos
        self.jobs = jobs
        position = {assoc.key: index for index, assoc in enumerate(self.assocs)}
        self.parent = [
            -1 if assoc.user is None and assoc.parent is None
            else position[(assoc.account if assoc.user else assoc.parent or "", None, None)]
            for assoc in self.assocs
        ]  # fmt: skip
        self.reasons: dict[int, str] = {}
        self._assoc_counts = [Counts() for _ in self.assocs]
        self._qos_counts: dict[str, Counts] = {}
        self._qos_user: dict[tuple[str, str], Counts] = {}
        self._qos_account: dict[tuple[str, str], Counts] = {}

    def _chain(self, assoc: int) -> list[int]:
        chain = []
        while assoc >= 0:
            chain.append(assoc)
            assoc = self.parent[assoc]
        return chain

    def holds(self, job: WaitingJob) -> bool:
        """Whether a limit holds `job` now (its reason recorded)."""
        entry = self.jobs[job.index]
        reason = self._jobs_reason(entry) or self._tres_reason(entry)
        if reason is None:
            return False
        self.reasons[job.index] = reason
        return True

    def started(self, index: int) -> None:
        self._count(self.jobs[index], 1)

    def ended(self, index: int) -> None:
        self._count(self.jobs[index], -1)

    def _count(self, job: LimitedJob, sign: int) -> None:
        for assoc in self._chain(job.assoc):
            self._assoc_counts[assoc].change(job, sign)
        self._qos_counts.setdefault(job.qos, Counts()).change(job, sign)
        self._qos_user.setdefault((job.qos, job.user), Counts()).change(job, sign)
        self._qos_account.setdefault((job.qos, job.account), Counts()).change(job, sign)

    def _jobs_reason(self, job: LimitedJob) -> str | None:
        """The pre-select checks: job counts of the QOS, then of the associations up to root."""
        qos = self.qos.get(job.qos)
        if qos is not None:
            for limit, counts, reason in (
                (qos.grp_jobs, self._qos_counts.get(job.qos), "QOSGrpJobsLimit"),
                (qos.max_jobs_per_account, self._qos_account.get((job.qos, job.account)), "MaxJobsPerAccount"),
                (qos.max_jobs_per_user, self._qos_user.get((job.qos, job.user)), "QOSMaxJobsPerUserLimit"),
            ):
                if limit is not None and counts is not None and counts.jobs >= limit:
                    return reason
        qos_grp = qos is not None and qos.grp_jobs is not None
        qos_max = qos is not None and (qos.max_jobs_per_account is not None or qos.max_jobs_per_user is not None)
        for level, assoc in enumerate(self._chain(job.assoc)):
            limits, used = self.assocs[assoc], self._assoc_counts[assoc].jobs
            if not qos_grp and limits.grp_jobs is not None and used >= limits.grp_jobs:
                return "AssocGrpJobsLimit"
            if level == 0 and not qos_max and limits.max_jobs is not None and used >= limits.max_jobs:
                return "AssocMaxJobsLimit"
        return None

    def _tres_reason(self, job: LimitedJob) -> str | None:
        """The post-select checks: CPUs, nodes and GPUs of the QOS, then of the associations up to root."""
        qos = self.qos.get(job.qos)
        zero = Counts()
        if qos is not None:
            for limits, counts, name in (
                (qos.grp_tres, self._qos_counts.get(job.qos, zero), "QOSGrp{}"),
                (qos.max_tres_per_user, self._qos_user.get((job.qos, job.user), zero), "QOSMax{}PerUser"),
                (qos.max_tres_per_account, self._qos_account.get((job.qos, job.account), zero), "Max{}PerAccount"),
            ):
                kind = _over(limits, counts, job)
                if kind is not None:
                    return _reason(name, kind)
        for assoc in self._chain(job.assoc):
            grp = self.assocs[assoc].grp_tres
            if qos is not None:  # a TRES the QOS limits is the QOS's
                grp = _unless(qos.grp_tres, grp)
            kind = _over(grp, self._assoc_counts[assoc], job)
            if kind is not None:
                return _reason("AssocGrp{}", kind)
        return None

    def never_runs(self, index: int) -> str | None:
        """The reason a job can never start (a per-job limit, or more than a limit allows at all), or None."""
        job = self.jobs[index]
        qos = self.qos.get(job.qos)
        assoc = self.assocs[job.assoc]
        wall, wall_reason = (
            (qos.max_wall, "QOSMaxWallDurationPerJobLimit")
            if qos is not None and qos.max_wall is not None
            else (assoc.max_wall, "AssocMaxWallDurationPerJobLimit")
        )
        if wall is not None and job.time_limit > wall:
            return wall_reason
        per_job = [("QOSMax{}PerJob", qos.max_tres)] if qos is not None else []
        per_job.append(("AssocMax{}PerJob", assoc.max_tres))
        for name, limits in per_job:
            kind = _over(limits, Counts(), job)
            if kind is not None:
                return _reason(name, kind)
        empty = Counts()
        for name, limits in self._aggregate_limits(job, qos):
            kind = _over(limits, empty, job)
            if kind is not None:
                return _reason(name, kind)
        return None

    def _aggregate_limits(self, job: LimitedJob, qos: Qos | None) -> list[tuple[str, TresLimits]]:
        found = [("AssocGrp{}", self.assocs[assoc].grp_tres) for assoc in self._chain(job.assoc)]
        if qos is not None:
            found += [("QOSGrp{}", qos.grp_tres), ("QOSMax{}PerUser", qos.max_tres_per_user)]
            found.append(("Max{}PerAccount", qos.max_tres_per_account))
        return found


def _unless(first: TresLimits, second: TresLimits) -> TresLimits:
    """`second`'s limits on the TRES `first` leaves unlimited."""
    return TresLimits(*(None if mine is not None else theirs for mine, theirs in zip(first, second, strict=True)))


def _over(limits: TresLimits, counts: Counts, job: LimitedJob) -> int | None:
    """The first TRES (0 CPUs, 1 nodes, 2 GPUs) whose limit the job's request would pass, or None."""
    for kind, (limit, used, asked) in enumerate(zip(limits, counts.tres, job.tres, strict=True)):
        if limit is not None and asked and used + asked > limit:
            return kind
    return None


def _reason(pattern: str, kind: int) -> str:
    """Slurm's pending reason for a TRES limit: QOSGrpCpuLimit, AssocGrpGRES, QOSMaxNodePerUserLimit, ..."""
    name = pattern.format(_TRES[kind])
    return name if kind == 2 or name.endswith("PerAccount") else name + "Limit"
