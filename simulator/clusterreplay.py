"""A trace replayed on a cluster of nodes under the `slurm` scheduler (`simulator.slurmsched`).

The driver's side of Slurm: what the scheduler must not see. A job ends when
its trace says, unless that is at or past its limit (plus OverTimeLimit):
then slurmctld's limit sweep kills it, which runs every 30 s
(`PERIODIC_TIMEOUT`), so the job ends at the first sweep after its limit.
The sweep's phase is the controller's clock: a replay of a Slurm log takes
it from the ends of the jobs Slurm killed (the commonest end modulo 30 s);
jobs that ran to their end tell nothing of it.

Each job's request (`kernel.resources.ResourceRequest`, by job id; a job
without one asks its processors anywhere) is resolved against its
partitions once; a job that names a partition the cluster lacks, or that
does not fit its partition even when the cluster is empty, is left out and
counted, as the other replays leave out jobs larger than the machine.

A calendar (`simulator.calendar`) adds the site's reservations, which the
scheduler plans around, and its node events, which the driver applies when
they happen: a drained node lets its jobs finish; a node that goes down ends
the jobs on it then. With slurm.conf's `JobRequeue=1` (the default) such a job
is queued again, as slurmctld does with a batch job (`kill_running_job_by_node_name`,
`batch_requeue_fini`): it may start `cred_expire` + 1 s later (AuthInfo's, 1200 s
by default), at the first pass after that (no job_allocate tries it at once), and
runs its whole runtime again; the predictor learns only the run that finishes
(the one jobcomp reports as its end) and is not asked again (job_submit runs at
submission only). With `JobRequeue=0` it stays ended (`state` NODE_FAIL). Neither
node takes new jobs until its event ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

from kernel.resources import ResourceRequest
from predictor.session import PredictionSession
from simulator.calendar import Calendar, NodeEvent, Reservation, ReservedNodes
from simulator.cluster import Cluster, Node, Partition, SelectSettings
from simulator.engine import SimulationConfig, SimulationResult, TraceReplay
from simulator.jobs import WaitingJob
from simulator.loop import EventKind, Observer
from simulator.machine import make_correction, planning_mode
from simulator.nodes import Demand, NodeState, NodeTable, demand, from_bits
from simulator.policies import QueuePolicy
from simulator.scheduler import QueueScheduler
from simulator.slurmpolicy import BasicPriority, SiteAccounting, SitePolicy, SlurmGate, owners, site_policy
from simulator.slurmsched import LIMIT_SWEEP, NodeMachine, QueuedJob, SlurmBackfill

#: The backfill name a `slurm` scheduler's SimulationConfig carries.
SLURM = "slurm"


def single_cpu_nodes(procs: int, name: str = "pool") -> Cluster:
    """`procs` nodes of one CPU in one partition: an SWF trace's machine for the `slurm` scheduler, which
    reserves whole nodes (a pool of one node would reserve all of it)."""
    width = len(str(procs))
    nodes = tuple(Node(f"n{number:0{width}d}", cpus=1) for number in range(1, procs + 1))
    partition = Partition(name, nodes=tuple(range(procs)), default=True)
    return Cluster(name, nodes, (partition,), select=SelectSettings(unit="cpu", memory=False), source=f"{procs} CPUs")


def sweep_phase(jobs: pd.DataFrame) -> int:
    """Where in its 30 s period the limit sweep runs, in trace seconds: the commonest end of a killed job."""
    killed = jobs["t_act"].to_numpy() >= jobs["t_req"].to_numpy()
    ran = jobs["run"] if "run" in jobs else jobs["t_act"]  # t_act stops at the limit; a log's run does not
    ends = ((jobs["submit"] + jobs["wait"] + ran).to_numpy()[killed] % LIMIT_SWEEP).tolist() if "wait" in jobs else []
    if not ends:
        return 0
    counts = Counter(int(end) for end in ends)
    return min(counts, key=lambda phase: (-counts[phase], phase))


def queued_jobs(
    jobs: pd.DataFrame, cluster: Cluster, requests: Mapping[int, ResourceRequest]
) -> tuple[dict[int, QueuedJob], dict[str, int]]:
    """Each job's request resolved in its partitions (by job id), and the jobs left out, counted by reason.

    Jobs asking the same thing are resolved once: a queue holds many alike, and a forecast's queue is a client's.
    """
    empty = NodeState(NodeTable(cluster))
    resolved: dict[ResourceRequest, tuple[tuple[Demand, ...], int] | str] = {}
    queued: dict[int, QueuedJob] = {}
    skipped: Counter[str] = Counter()
    for job_id, user, procs in zip(*(jobs[c].tolist() for c in ("job_id", "user", "procs")), strict=True):
        request = requests.get(job_id) or ResourceRequest.processors(procs)
        fitting = resolved.get(request)
        if fitting is None:
            fitting = resolved[request] = _fitting_demands(request, cluster, empty)
        if isinstance(fitting, str):
            skipped[fitting] += 1
            continue
        demands, only = fitting
        queued[job_id] = QueuedJob(user, demands, request.reservation, only)
    return queued, dict(skipped)


def attracted(
    queued: dict[int, QueuedJob],
    jobs: pd.DataFrame,
    requests: Mapping[int, ResourceRequest],
    reservations: Sequence[Reservation],
    names: Mapping[str, Mapping[int, str]],
) -> dict[int, QueuedJob]:
    """`queued` with each job that names no reservation given the MAGNETIC ones that let its user and account in
    (`job_resv_append_magnetic`: nothing else is checked, not even whether it could fit in them).

    sacct gives a job a MAGNETIC reservation drew in that reservation, as if
    it had named it; a job that names one that lets it in is read as drawn in:
    it is tried there first either way, and only a job drawn in may then run
    elsewhere, where one read as named could be held for ever once it ended."""
    magnetic = {resv.name: resv for resv in reservations if resv.magnetic}
    drawn = dict(queued)
    for job_id, owner in zip(jobs["job_id"].tolist(), owners(jobs, requests, names), strict=True):
        job = queued[job_id]
        named = magnetic.get(job.reservation) if job.reservation is not None else None
        if job.reservation is None or (named is not None and named.admits(owner.user, owner.account)):
            into = tuple(name for name, resv in magnetic.items() if resv.admits(owner.user, owner.account))
            if into:
                drawn[job_id] = replace(job, reservation=None, magnetic=into)
    return drawn


def _fitting_demands(
    request: ResourceRequest, cluster: Cluster, empty: NodeState
) -> tuple[tuple[Demand, ...], int] | str:
    """The request resolved in each of its partitions that could ever hold it and the nodes it may use (-1: any),
    or why none can."""
    default = cluster.default_partition
    names = request.partitions or ((default.name,) if default else ())
    unknown = [name for name in names if name not in cluster.partition_names]
    if unknown or not names:
        return f"partition {unknown[0]} not in the cluster" if unknown else "no partition and no default"
    only = _listed_nodes(request.nodelist, cluster)
    if isinstance(only, str):
        return only
    try:
        demands = tuple(demand(request, cluster, cluster.partition(name)) for name in names)
    except ValueError:
        return "request Slurm would refuse"
    masks = empty.table.partition_masks
    if only != -1:
        listed = from_bits(only, empty.table.size)
        masks = {name: mask & listed for name, mask in masks.items()}
    fitting = tuple(d for d in demands if empty.pick(d, masks[d.partition]) is not None)
    return (fitting, only) if fitting else "does not fit its partition"


def _listed_nodes(nodelist: tuple[str, ...], cluster: Cluster) -> int | str:
    """The nodes a node list names, as bits of the cluster's node order (-1: no list, any node), or why not."""
    if not nodelist:
        return -1
    index = {node.name: position for position, node in enumerate(cluster.nodes)}
    unknown = [name for name in nodelist if name not in index]
    if unknown:
        return f"node {unknown[0]} not in the cluster"
    return sum(1 << index[name] for name in nodelist)


def slurm_scheduler(
    cluster: Cluster,
    queued: Mapping[int, QueuedJob],
    config: SimulationConfig,
    policy: QueuePolicy | None = None,
    gate: SlurmGate | None = None,
    reserved: ReservedNodes | None = None,
) -> QueueScheduler:
    """Slurm's scheduler over `cluster`'s nodes for the `queued` jobs, planning as `config`'s mode says; in
    `policy`'s order (default `BasicPriority`: priority/basic), asking `gate` about limits (`simulator.slurmpolicy`),
    around the `reserved` nodes."""
    machine = NodeMachine(cluster, planning_mode(config.mode), make_correction(config.correction))
    backfill = SlurmBackfill(cluster, queued, gate, reserved)
    return QueueScheduler(BasicPriority() if policy is None else policy, backfill, machine)


#: Why a job left out of the result never started.
NEVER_STARTED = "never started: its reservation ended first (slurmctld holds such a job)"
#: Why a job left out of the result was not queued: slurmctld refuses a job naming a reservation PURGE_COMP deleted.
REFUSED = "refused at submission: its reservation was deleted once idle (PURGE_COMP)"
#: Why a job left out of the result never ran to its end: a node failure ended it, and it never started again.
NEVER_RESTARTED = "requeued after a node failure, never started again"
#: A job's end in the result's `state` column, as sacct names it.
COMPLETED, TIMEOUT, NODE_FAIL = "COMPLETED", "TIMEOUT", "NODE_FAIL"


@dataclass(frozen=True, slots=True)
class Requeue:
    """An external event: the job at trace position `index`, requeued after a node failure, may start from now."""

    index: int


@dataclass(frozen=True, slots=True)
class ReservationCheck:
    """An external event: slurmctld's periodic reservation check (`job_resv_check`, after the limit sweep), while
    it may delete a PURGE_COMP reservation."""


class ClusterReplay(TraceReplay):
    """A trace replayed under the `slurm` scheduler (`slurm_scheduler`): jobs killed at their limit by the
    30 s sweep, and the `events` of the nodes applied as they happen."""

    #: A sweep, a reservation's end or a node's failure ends a job other than at its runtime.
    asks_ahead = False

    def __init__(
        self,
        jobs: pd.DataFrame,
        config: SimulationConfig,
        session: PredictionSession,
        history: pd.DataFrame | None,
        scheduler: QueueScheduler,
        events: tuple[NodeEvent, ...] = (),
    ) -> None:
        super().__init__(jobs, config, session, history, scheduler)
        self.states = [COMPLETED] * len(self.requests)
        self.nodes: list[tuple[int, ...]] = [()] * len(self.requests)  # where each job ran
        self.requeues = [0] * len(self.requests)  # runs a node failure ended, each followed by a requeue
        self._not_restarted: set[int] = set()  # requeued jobs not started again (yet): their ends are no finish
        self._eligible: list[int] = []  # requeued jobs that may start from now, to admit in this round
        self._refused: set[int] = set()  # jobs slurmctld refused at submission: never queued
        for event in events:
            if event.end is not None and event.end <= self.now:
                continue  # over before the first submission
            self.schedule(max(event.start, self.now), EventKind.EXTERNAL, (True, event), 1)
            if event.end is not None:
                self.schedule(event.end, EventKind.EXTERNAL, (False, event), 0)  # a return goes first
        self._check_reservations_after(self.now - 1)

    @property
    def machine(self) -> NodeMachine:
        machine = self.scheduler.machine
        if not isinstance(machine, NodeMachine):
            raise TypeError("a ClusterReplay runs on a NodeMachine")
        return machine

    def external(self, payload: tuple[bool, NodeEvent] | Requeue | ReservationCheck) -> None:
        """A node event begins (`out`) or ends: a node going down ends the jobs on it now, and requeues them
        (JobRequeue); or a requeued job may start; or slurmctld checks its PURGE_COMP reservations."""
        if isinstance(payload, Requeue):
            self._eligible.append(payload.index)
            return
        if isinstance(payload, ReservationCheck):
            self._slurm.check_reservations(self.now, self.machine, self._not_restarted)
            self._check_reservations_after(self.now)
            return
        out, event = payload
        machine = self.machine
        if not out:
            machine.put_back(event.node)
            return
        if event.state == "down":
            settings = machine.cluster.scheduler
            for index in machine.jobs_on(event.node):
                if self.end_at[index] == self.now:
                    continue  # it ends now anyway
                self.end_now(index)
                self.end_at[index] = self.now
                self.states[index] = NODE_FAIL
                if settings.job_requeue:
                    self.requeues[index] += 1
                    self._not_restarted.add(index)
                    self.schedule(self.now + settings.cred_expire + 1, EventKind.EXTERNAL, Requeue(index))
        machine.take_out(event.node)

    def admit(self, completed: list[int], arrived: list[range]) -> list[WaitingJob]:
        """Tell accounting (priority usage, limits' counts) the round's ends, at their time, then admit: the
        arrivals, and the requeued jobs that may start from now (not a requeued run's end: no job finished)."""
        backfill = self.scheduler.backfill
        if not isinstance(backfill, SlurmBackfill):
            raise TypeError("a ClusterReplay runs the slurm scheduler")
        if completed and backfill.gate is not None:
            backfill.gate.ended(completed, self.now)
        ended_now = bool(completed)
        if self._not_restarted:
            completed = [index for index in completed if index not in self._not_restarted]
        jobs = super().admit(completed, arrived)
        refused = [job.index for job in jobs if backfill.refuses(job)]
        if refused:
            self._refused.update(refused)
            jobs = [job for job in jobs if job.index not in self._refused]
        for index in self._eligible:
            backfill.queue_again(index, self.now, ended_now)
            request = self.requests[index]
            t_est = self._planning.estimate(request.t_req, self.t_sched[index])
            jobs.append(WaitingJob(index, request.job_id, self.now, request.procs, request.t_req, t_est))
        self._eligible.clear()
        return jobs

    def _check_reservations_after(self, after: int) -> None:
        """Schedule slurmctld's next reservation check after `after` that may delete one, on the limit sweep's
        phase (`job_resv_check` follows `job_time_limit`), if any may."""
        due = self._slurm.reserved.next_idle_check(after, self._kills[2])
        if due is not None:
            self.schedule(due, EventKind.EXTERNAL, ReservationCheck())

    @cached_property
    def _slurm(self) -> SlurmBackfill:
        backfill = self.scheduler.backfill
        if not isinstance(backfill, SlurmBackfill):
            raise TypeError("a ClusterReplay runs the slurm scheduler")
        return backfill

    @cached_property
    def _kills(self) -> tuple[list[int | None], list[int], int]:
        """Per job: when it is killed after its start (None: never) and how long it runs; and the sweep's phase."""
        over_time = [self._slurm.over_time(job_id) for job_id in self.jobs["job_id"].tolist()]
        limits = self.jobs["t_req"].tolist()
        killed = [None if over is None else limit + over * 60 for limit, over in zip(limits, over_time, strict=True)]
        runs = self.jobs["run" if "run" in self.jobs else "t_act"].tolist()  # t_act stops at the limit
        return killed, [int(run) for run in runs], sweep_phase(self.jobs)

    def replay(self) -> SimulationResult:
        """The run, each job with how it ended (`state`) and the nodes it ran on (`nodes`, comma-separated).
        A job that never started (its reservation ended first: slurmctld holds it), was refused (its reservation
        deleted), or never started again after a requeue, is left out and counted."""
        result = super().replay()
        result.jobs["state"] = self.states
        result.jobs["requeues"] = self.requeues
        names = [node.name for node in self.machine.cluster.nodes]
        result.jobs["nodes"] = [",".join(names[index] for index in held) for held in self.nodes]
        never = [index for index, held in enumerate(self.nodes) if not held and index not in self._refused]
        left_out = [*never, *self._refused, *self._not_restarted]
        if left_out:
            result.jobs = result.jobs.drop(index=left_out).reset_index(drop=True)
        counts = (
            (NEVER_STARTED, len(never)),
            (REFUSED, len(self._refused)),
            (NEVER_RESTARTED, len(self._not_restarted)),
        )
        for reason, count in counts:
            if count:
                result.skipped[reason] = result.skipped.get(reason, 0) + count
        return result

    def completion_time(self, job: WaitingJob) -> int:
        """The job's end: as the trace says, or the first limit sweep at or after its limit, or after its
        reservation's end (`job_time_limit`: `end_time + ResvOverRun < now`)."""
        index, now = job.index, self.now
        self.states[index] = COMPLETED  # until a limit or a failure ends this run
        self._not_restarted.discard(index)
        killed, runs, phase = self._kills
        end = now + runs[index]
        limit = killed[index]
        if limit is not None and end >= now + limit:
            due = now + limit
            end = due + (phase - due) % LIMIT_SWEEP
            self.states[index] = TIMEOUT
        # asked at the start: a MAGNETIC reservation makes the job it draws in its own only when it starts it
        reservation_end = self._slurm.reservation_end(job.job_id)
        if reservation_end is not None:
            due = reservation_end + 1
            if (swept := due + (phase - due) % LIMIT_SWEEP) < end:
                end = swept
                self.states[index] = TIMEOUT
        self.nodes[index] = tuple(self.machine.state.allocations[index].nodes.tolist())
        self.start_at[index] = now
        self.end_at[index] = end
        return end


def simulate_cluster(
    jobs: pd.DataFrame,
    config: SimulationConfig,
    session: PredictionSession,
    cluster: Cluster,
    requests: Mapping[int, ResourceRequest],
    history: pd.DataFrame | None = None,
    accounting: SiteAccounting | None = None,
    names: Mapping[str, Mapping[int, str]] | None = None,
    calendar: Calendar | None = None,
    observers: Sequence[Observer] = (),
) -> SimulationResult:
    """Replay `jobs` on `cluster` under the `slurm` scheduler; `config` says the planning mode.

    Under priority/multifactor, or with limits enforced (AccountingStorageEnforce),
    jobs belong to `accounting`'s associations by their user and account
    (`names`: the trace's names behind its ids); the result's jobs then carry
    `priority` (at submission, as sacct's Priority; a requeued job's when it may start again) and `pending_reason` (the
    last limit that held the job, empty if none). `calendar` holds the site's
    reservations and node events; every result has each job's `state`
    (COMPLETED, TIMEOUT or NODE_FAIL). `observers` watch the replay (a forecast's check that it is still wanted).
    """
    queued, skipped = queued_jobs(jobs, cluster, requests)
    kept = jobs.loc[np.isin(jobs["job_id"].to_numpy(), list(queued))]
    config = SimulationConfig(cluster.procs, "fcfs", SLURM, config.mode, config.correction)
    site = _site_policy(cluster, kept, queued, requests, accounting, names)
    if site is not None:
        kept = site.jobs
        for reason in site.left_out.values():
            skipped[f"held by {reason} (can never start)"] = skipped.get(f"held by {reason} (can never start)", 0) + 1
    calendar = calendar if calendar is not None else Calendar()
    if any(resv.magnetic for resv in calendar.reservations):
        queued = attracted(queued, kept, requests, calendar.reservations, names or {})
    reserved = ReservedNodes(calendar.reservations, cluster.scheduler.bf_resolution)
    policy, gate = (site.policy, site.gate) if site else (None, None)
    scheduler = slurm_scheduler(cluster, queued, config, policy, gate, reserved)
    replay = ClusterReplay(kept, config, session, history, scheduler, calendar.events)
    replay.observers.extend(observers)
    result = replay.replay()
    for reason, count in skipped.items():
        result.skipped[reason] = result.skipped.get(reason, 0) + count
    if site is not None:
        _add_accounting_columns(result.jobs, site)
    return result


def _site_policy(
    cluster: Cluster,
    jobs: pd.DataFrame,
    queued: Mapping[int, QueuedJob],
    requests: Mapping[int, ResourceRequest],
    accounting: SiteAccounting | None,
    names: Mapping[str, Mapping[int, str]] | None,
) -> SitePolicy | None:
    """Accounting's policy and gate, when slurm.conf asks for multifactor priority or enforces limits."""
    if cluster.scheduler.priority_type != "priority/multifactor" and not cluster.priority.limits_enforced:
        return None
    demands = [queued[job_id].demands[0] for job_id in jobs["job_id"].tolist()]
    owned = owners(jobs, requests, names or {})
    return site_policy(cluster, jobs, demands, owned, accounting or SiteAccounting())


def _add_accounting_columns(result: pd.DataFrame, site: SitePolicy) -> None:
    """Each job's priority at submission and the last limit that held it (by trace position)."""
    gate = site.gate
    priorities = gate.priority.submitted if gate is not None and gate.priority is not None else {}
    reasons = gate.limits.reasons if gate is not None and gate.limits is not None else {}
    positions = range(len(result))
    result["priority"] = [priorities.get(index, 0) for index in positions]
    result["pending_reason"] = [reasons.get(index, "") for index in positions]
