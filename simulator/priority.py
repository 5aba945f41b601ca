"""Slurm 22.05's priority/multifactor as a queue policy: the order in which the `slurm` scheduler takes jobs.

A job's priority (`_get_priority_internal` and `set_priority_factors` in
`src/plugins/priority/multifactor/priority_multifactor.c`) is the sum of
its factors, each from 0 to 1, times their PriorityWeight* from slurm.conf,
truncated to a whole number and at least 1:

- age: seconds since the job became eligible over PriorityMaxAge, 1 past it;
- fair-share: `simulator.fairshare`, from the usage of the jobs run so far;
- job size: (min nodes / nodes + CPUs / cluster CPUs) / 2, or with
  PriorityFavorSmall ((nodes - min nodes) / nodes + (cluster CPUs - CPUs) /
  cluster CPUs) / 2; with SMALL_RELATIVE_TO_TIME, max(CPUs, min nodes x
  CPUs per node) / time limit in minutes / cluster CPUs (1 - that, favouring small);
- partition: the PriorityJobFactor of its partition over the largest of the
  cluster's (`_reset_part_prio` in slurmctld/read_config.c);
- QOS: its QOS's priority over the largest QOS priority; association: its
  association's priority over the largest (unless PriorityFlags NO_NORMAL_*).

Priorities are computed when a job is submitted (`priority_p_set`) and every
PriorityCalcPeriod by the decay thread (`_decay_thread`: reset, decay, new
usage, fair-share, then every pending job's priority), and stay fixed in
between, as Slurm's do; the queue is in priority order, ties by submission and
job id (`sort_job_queue2` in slurmctld/job_scheduler.c). The decay thread's
clock starts with the simulation (the first job's submission). A job of
several partitions is ranked with its first partition's factor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.cluster import Cluster
from simulator.clusterconf.sacctmgr import Accounts
from simulator.fairshare import FairShare, RunningUsage, next_reset
from simulator.jobs import WaitingJob
from simulator.policies import Planner, QueuePolicy

#: Priorities are unsigned 32-bit numbers in Slurm.
MAX_PRIORITY = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class PriorityJob:
    """What priority/multifactor reads of a job: its user association, size, limit, partition and QOS."""

    assoc: int  # position in Accounts.associations
    cpus: int
    nodes: int
    time_limit: int  # seconds
    partition_factor: int  # its first partition's PriorityJobFactor
    qos_priority: int
    usage_factor: float = 1.0


class Multifactor(QueuePolicy):
    """The waiting jobs in priority/multifactor's order (module docstring); `jobs` by trace position.

    The scheduler tells it what it does not see as a queue: each start's
    CPUs (`started`) and each end (`ended`), so that fair-share counts the
    usage of the jobs run so far and nothing later.
    """

    name = "multifactor"

    def __init__(
        self, cluster: Cluster, accounts: Accounts, jobs: Sequence[PriorityJob], start: int, qos_max: int = 0
    ) -> None:
        settings = cluster.priority
        self.settings = settings
        self.jobs = jobs
        self.fairshare = FairShare(accounts, settings)
        self.version = 0  # bumps at each recalculation: the order may have changed
        self.priorities: dict[int, int] = {}  # trace position -> the priority last computed (running jobs: at start)
        self.submitted: dict[int, int] = {}  # trace position -> the priority at submission (sacct's Priority)
        self._waiting: dict[int, WaitingJob] = {}
        self._running: dict[int, RunningUsage] = {}
        self._qos_max = max([qos_max, *(job.qos_priority for job in jobs)])
        self._static = [self._static_part(job, cluster, accounts) for job in jobs]
        self._next_calc = start
        self._last_ran: int | None = None
        self._next_reset: int | None = None
        self._order: list[WaitingJob] | None = None

    def _static_part(self, job: PriorityJob, cluster: Cluster, accounts: Accounts) -> tuple[float, float, float, float]:
        """The weighted association, job size, partition and QOS factors, which do not change while a job waits."""
        settings = self.settings
        assoc_priority = accounts.associations[job.assoc].priority or 0
        assoc_max = max((assoc.priority or 0 for assoc in accounts.associations), default=0)
        part_max = max(partition.priority_job_factor for partition in cluster.partitions)
        qos_max = self._qos_max
        return (
            _normal(assoc_priority, assoc_max, settings.normalised("ASSOC")) * settings.weight_assoc,
            self._job_size(job, cluster) * settings.weight_job_size,
            _normal(job.partition_factor, part_max, settings.normalised("PART")) * settings.weight_partition,
            _normal(job.qos_priority, qos_max, settings.normalised("QOS")) * settings.weight_qos,
        )

    def _job_size(self, job: PriorityJob, cluster: Cluster) -> float:
        """set_priority_factors' job size factor."""
        nodes, cpus = len(cluster.nodes), sum(node.cpus for node in cluster.nodes)
        favor_small = self.settings.favor_small
        if "SMALL_RELATIVE_TO_TIME" in self.settings.flags:
            size = max(job.nodes * cpus / nodes, job.cpus) / max(job.time_limit // 60, 1) / cpus
            factor = 1.0 - size if favor_small else size
        elif favor_small:
            factor = ((nodes - job.nodes) / nodes + (cpus - job.cpus) / cpus) / 2
        else:
            factor = (job.nodes / nodes + job.cpus / cpus) / 2
        return min(max(factor, 0.0), 1.0)

    def priority(self, index: int, eligible: int, now: int) -> int:
        """The priority of the job at trace position `index`, eligible since `eligible`, computed at `now`."""
        settings = self.settings
        diff = now - eligible if now > eligible else 0
        age = diff / settings.max_age if diff < settings.max_age else 1.0
        assoc, size, partition, qos = self._static[index]
        fairshare = self.fairshare.factor(self.jobs[index].assoc) if settings.weight_fairshare else 0.0
        total = age * settings.weight_age + assoc + fairshare * settings.weight_fairshare + size + partition + qos
        return min(int(max(total, 1.0)), MAX_PRIORITY)

    def advance(self, now: int) -> None:
        """Run every calculation of the decay thread due by `now`."""
        while self._next_calc <= now:
            self._calculate(self._next_calc)
            self._next_calc += self.settings.calc_period

    def _calculate(self, now: int) -> None:
        """One pass of `_decay_thread` at `now`: reset, decay, new usage, factors, then every waiting job."""
        fairshare, period = self.fairshare, self.settings.usage_reset_period
        if period == "NOW" and self._last_ran is None:
            fairshare.reset()
        if self._next_reset is None and self._last_ran is None:
            self._next_reset = next_reset(period, now)
        if self._next_reset is not None and now >= self._next_reset:
            fairshare.reset()
            self._next_reset = next_reset(period, self._next_reset)
        elapsed = None if self._last_ran is None else now - self._last_ran
        if self._last_ran is not None:
            for running in self._running.values():  # _apply_new_usage starts at the later of start and last run
                running.since = max(running.since, self._last_ran)
        fairshare.calculate(elapsed, list(self._running.values()), now)
        self._last_ran = now
        if self._waiting:
            for index, job in self._waiting.items():
                self.priorities[index] = self.priority(index, job.submit, now)
            self.version += 1
            self._order = None

    def next_calculation(self) -> int:
        """When the decay thread next recalculates the priorities."""
        return self._next_calc

    def started(self, job: WaitingJob, cpus: int, now: int) -> None:
        """`job` started at `now` on `cpus` CPUs: its usage counts from now on."""
        self.advance(now)
        entry = self.jobs[job.index]
        self._running[job.index] = RunningUsage(now, cpus * entry.usage_factor, entry.assoc)

    def ended(self, index: int, now: int) -> None:
        """The job at trace position `index` ended at `now`: its last usage (priority_p_job_end)."""
        self.advance(now)
        running = self._running.pop(index, None)
        if running is not None:
            if self._last_ran is not None:  # _apply_new_usage starts at the later of start and last run
                running.since = max(running.since, self._last_ran)
            self.fairshare.add(running, now)

    def decide(self, now: int, planner: Planner, submitted: bool, completed: bool) -> None:
        self.advance(now)

    def add(self, job: WaitingJob) -> None:
        self.advance(job.submit)
        self._waiting[job.index] = job
        self.priorities[job.index] = self.submitted[job.index] = self.priority(job.index, job.submit, job.submit)
        self._order = None

    def remove(self, job: WaitingJob) -> None:
        del self._waiting[job.index]
        self._order = None

    def ordered(self, now: int) -> list[WaitingJob]:
        if self._order is None:
            priorities = self.priorities
            self._order = sorted(self._waiting.values(), key=lambda job: -priorities[job.index])
        return list(self._order)

    def __len__(self) -> int:
        return len(self._waiting)


def _normal(value: int, largest: int, normalised: bool) -> float:
    """A factor as Slurm normalises it: over the largest of its kind (0 when all are 0), or raw."""
    if not normalised:
        return float(value)
    return value / largest if largest else 0.0
