"""Slurm 22.05's scheduler on a cluster of nodes: the main scheduling pass and sched/backfill's cycle.

The `slurm` scheduler is a `QueueScheduler` like the others, built from
objects the event loop already knows: the FCFS queue (`priority/basic`
gives each job a priority that falls with its submission, so the queue is
the submission order; partitions' `PriorityTier` goes first), a
`NodeMachine` (CPUs, memory and GPUs per node, `simulator.nodes`) and
`SlurmBackfill`, which chooses what starts at a pass as slurmctld does:

- the main pass (`schedule()` in slurmctld/job_scheduler.c) runs when a job
  was submitted or a job started or ended: the queue in priority order, each
  job placed by cons_tres's node selection; a job that does not fit stops
  its partition, and its partition's nodes are taken out of the pass (a later
  job of another partition sharing them cannot jump it);
- the backfill cycle (`_attempt_backfill` in plugins/sched/backfill) runs
  every `bf_interval` seconds when something changed since the last one: every
  queued job (up to `bf_max_job_test`, `bf_max_job_user` per user) in
  priority order either starts now on nodes no earlier job has reserved over
  its window, or reserves the whole nodes of its grouped start estimate
  (`simulator.nodeplan`) within `bf_window`, at `bf_resolution`.

Advance reservations (`simulator.calendar`) keep their nodes from every job
whose limit would overlap them, in both passes. A job that names one
(`--reservation`) runs only on its nodes, from its start on; such jobs go
first in the queue (`sort_job_queue2`), one that does not fit stops the
other jobs of its reservation but not its partition, and the backfill
cycle plans none before its reservation begins ("reservation defer").
Nodes that are down or drained (`NodeMachine.take_out`) take no job.

It sees estimates only: a job's limit (or t_sched, as the planning mode
says) and the running jobs' expected ends; the driver decides when jobs end
(`simulator.clusterreplay`, with slurmctld's limit sweep).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from simulator.backfill import Backfill
from simulator.calendar import Reservation, ReservedNodes
from simulator.cluster import Cluster, Partition, SchedulerSettings
from simulator.jobs import RunningJob, WaitingJob
from simulator.machine import PLANNINGS, Correction, Machine, Planning
from simulator.nodeplan import Estimate, NodeSpace, RunningEnd, earliest_start
from simulator.nodes import Allocation, Demand, NodeState, NodeTable, from_bits, to_bits
from simulator.scheduler import SizeCount
from simulator.slurmpolicy import SlurmGate

#: Seconds between two of slurmctld's time-limit checks (PERIODIC_TIMEOUT, slurmctld/slurmctld.h).
LIMIT_SWEEP = 30


def over_time_minutes(cluster: Cluster, partition: Partition) -> int | None:
    """OverTimeLimit in minutes for jobs of `partition` (its own, else the cluster's; None: UNLIMITED)."""
    if partition.over_time_limit is None:
        return cluster.scheduler.over_time_limit
    return None if partition.over_time_limit < 0 else partition.over_time_limit


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """What the scheduler knows of a job beyond `WaitingJob`: its user, its request in each partition it
    may run in, in the order it asked for them, the advance reservation it runs in (None: none), the nodes
    it may run on (bits in the cluster's node order; -1: any; a forecast's running job keeps its own), and the
    MAGNETIC reservations it is tried in first, naming none (`magnetic`, in the calendar's order)."""

    user: int
    demands: tuple[Demand, ...]
    reservation: str | None = None
    only: int = -1
    magnetic: tuple[str, ...] = ()


#: A job as slurmctld queues it (`job_queue_rec_t`): in a reservation (its own, or a MAGNETIC one), or in none.
QueueRecord = tuple[WaitingJob, Reservation | None]


class NodeMachine(Machine):
    """The cluster's nodes as the Slurm scheduler holds them: what each node has free (`NodeState`).

    A pass places a job on nodes when it chooses it (`place`), so that the
    next job of the pass sees them taken; `start` confirms the placement.
    `free` is the free CPUs over all nodes; `changes` counts starts, ends and
    nodes leaving or returning to service; `in_service` is the nodes that take
    jobs now (a bit set).
    """

    outlives_limit = True  # killed by the limit sweep, after OverTimeLimit (clusterreplay.ClusterReplay)

    def __init__(self, cluster: Cluster, planning: Planning = PLANNINGS["none"], correction: Correction | None = None):
        super().__init__(planning, correction)
        self.cluster = cluster
        self.table = NodeTable(cluster)
        self.state = NodeState(self.table)
        self.free = int(self.table.cpus[self.table.usable].sum())
        self.changes = 0
        self.ended = 0
        self.in_service = to_bits(self.table.usable)
        self._out_of_service = np.zeros(self.table.size, dtype=np.int64)  # events holding each node out now
        self._placed: set[int] = set()
        self._over_time: dict[int, int | None] = {}
        self._ends_by: dict[int, int] = {}  # a job in a reservation: when its end kills it
        self._end_of: dict[int, RunningEnd] = {}  # each running job's, by trace position
        self._ends_in_order: list[RunningEnd] = []  # the same, by expected end (`running_ends`)

    def take_out(self, node: int) -> None:
        """A node goes down or drains: no job starts on it until every event that took it out has ended."""
        self._out_of_service[node] += 1
        self.in_service &= ~(1 << node)
        self.changes += 1
        self.ended += 1  # slurmctld runs its main pass after a node update, as after a job's end

    def put_back(self, node: int) -> None:
        """An event that took `node` out has ended."""
        self._out_of_service[node] -= 1
        if not self._out_of_service[node] and self.table.usable[node]:
            self.in_service |= 1 << node
        self.changes += 1
        self.ended += 1

    def jobs_on(self, node: int) -> list[int]:
        """The running jobs (trace positions) that hold CPUs on `node`."""
        allocations = self.state.allocations
        return [index for index in self.running if node in allocations[index].nodes.tolist()]

    def place(self, index: int, allocation: Allocation, over_time: int | None, ends_by: int | None = None) -> None:
        """Give `allocation` to the job at trace position `index`, which this pass starts; `ends_by`: when its
        reservation's end kills it (the planner expects it to end by then, as Slurm's plans show)."""
        self.state.allocate(index, allocation)
        self._placed.add(index)
        self._over_time[index] = over_time
        if ends_by is not None:
            self._ends_by[index] = ends_by

    def _allocate(self, job: WaitingJob) -> None:
        if job.index not in self._placed:
            raise AssertionError(f"job {job.job_id} starts without a placement")
        self._placed.remove(job.index)
        self.free -= int(self.state.allocations[job.index].cpus.sum())
        self.changes += 1

    def start(self, job: WaitingJob, now: int) -> RunningJob:
        running = super().start(job, now)
        self._keep_end(running)
        return running

    def _release(self, job: RunningJob) -> None:
        self.free += int(self.state.release(job.index).cpus.sum())
        self._drop_end(job.index)
        del self._over_time[job.index]
        self._ends_by.pop(job.index, None)
        self.changes += 1
        self.ended += 1

    def correct_overruns(self, now: int) -> list[RunningJob]:
        moved = super().correct_overruns(now)
        for job in moved:
            self._drop_end(job.index)
            self._keep_end(job)
        return moved

    def running_end(self, index: int, expected_end: int, t_req: int) -> RunningEnd:
        ends_by = self._ends_by.get(index)
        end = expected_end if ends_by is None or ends_by > expected_end else ends_by
        return RunningEnd(end, index, t_req, self._over_time[index])

    def running_ends(self) -> list[RunningEnd]:
        """The running jobs by expected end, earliest first, as Slurm's start estimates free them (a copy: a pass
        adds the jobs it starts)."""
        return list(self._ends_in_order)

    def _keep_end(self, job: RunningJob) -> None:
        end = self._end_of[job.index] = self.running_end(job.index, job.expected_end, job.t_req)
        insort(self._ends_in_order, end)

    def _drop_end(self, index: int) -> None:
        end = self._end_of.pop(index)
        del self._ends_in_order[bisect_left(self._ends_in_order, end)]


class SlurmBackfill(Backfill):
    """What starts at a pass, as Slurm 22.05's main scheduler and backfill cycle decide it (module docstring).

    `jobs` maps each job id to its `QueuedJob`. Unlike the other strategies
    it places the jobs it chooses on the machine (`NodeMachine.place`): the
    node a job gets decides what the next one can have.
    """

    name = "slurm"
    idle_when_full = False  # a job may need no CPU that is not free, but a reservation still counts

    def __init__(
        self,
        cluster: Cluster,
        jobs: Mapping[int, QueuedJob],
        gate: SlurmGate | None = None,
        reserved: ReservedNodes | None = None,
    ) -> None:
        super().__init__()
        self.cluster = cluster
        self.gate = gate  # accounting: limits that hold jobs, priorities recalculated (simulator.slurmpolicy)
        self.settings = cluster.scheduler
        self.reserved = reserved if reserved is not None else ReservedNodes((), cluster.scheduler.bf_resolution)
        self.jobs = jobs
        table = NodeTable(cluster)
        self._size = table.size
        self._partition_bits = {name: to_bits(mask) for name, mask in table.partition_masks.items()}
        self._over_time = {p.name: over_time_minutes(cluster, p) for p in cluster.partitions}
        self._tiers = {p.name: p.priority_tier for p in cluster.partitions}
        # the queue is re-sorted at each pass only where partition tiers or reservations reorder it
        self._reordered = len(set(self._tiers.values())) > 1 or any(
            job.reservation or job.magnetic for job in jobs.values()
        )
        self._attracted: dict[int, Reservation] = {}  # job id -> the MAGNETIC reservation it started in
        self._waiting_in: Counter[str] = Counter()  # waiting jobs by the reservation they name
        self._running_in: dict[int, str] = {}  # jobs started in a reservation (trace positions), by its name
        self._waiting = 0
        self._fewest_cpus: dict[int, int] = {}  # trace index -> the fewest CPUs the waiting job can start with
        self._fewest = SizeCount()  # of those: a pass with fewer CPUs free starts nothing
        self._admitted = 0
        self._submitted: set[int] = set()
        self._queued_again: set[int] = set()  # requeued jobs not yet admitted again
        self._again_due = False  # a requeued job was admitted since the last main pass
        self._ended_seen = 0
        self._machine: NodeMachine | None = None
        self._now = 0
        self._main_seen: tuple[int, int, int] | None = None
        self._cycle_seen: tuple[int, int, int] | None = None

    def over_time(self, job_id: int) -> int | None:
        """OverTimeLimit in minutes for the job (of its first partition; None: UNLIMITED)."""
        return self._over_time[self.jobs[job_id].demands[0].partition]

    def queue_again(self, index: int, now: int, ended_now: bool) -> None:
        """The job at trace position `index` is admitted next as requeued, when its begin time comes
        (`batch_requeue_fini`): no job_allocate tries it then, as at a submission, and nothing changes for
        backfill (`_more_work`); slurmctld's periodic main pass, which runs whatever changed, starts it.

        Passes over an empty queue are not run here (`QueueScheduler.schedule`), but slurmctld's saw every change:
        if none waits, all before this round (`ended_now`: a job ended in it) count as seen."""
        self._queued_again.add(index)
        if not self._waiting and not ended_now and self._machine is not None:
            self._now = now
            self._ended_seen = self._machine.ended
            self._main_seen = self._cycle_seen = self._changes()

    def admit(self, job: WaitingJob) -> None:
        self._waiting += 1
        name = self.jobs[job.job_id].reservation
        if name is not None:
            self._waiting_in[name] += 1
        if job.index in self._queued_again:
            self._queued_again.discard(job.index)
            self._again_due = True
        else:
            self._submitted.add(job.index)
            if name is not None:
                self.reserved.validated(name)
        fewest = self._fewest_cpus[job.index] = min(wanted.min_cpus for wanted in self.jobs[job.job_id].demands)
        self._fewest.add(fewest)

    def forget(self, job: WaitingJob) -> None:
        self._waiting -= 1
        name = self.jobs[job.job_id].reservation
        if name is not None:
            self._waiting_in[name] -= 1
        self._fewest.remove(self._fewest_cpus.pop(job.index))

    def check_reservations(self, now: int, machine: NodeMachine, requeued: Collection[int] = ()) -> list[str]:
        """slurmctld's periodic reservation check at `now` (`job_resv_check`): a PURGE_COMP reservation no job waits
        for by name and none runs in (named, or drawn in by MAGNETIC) is deleted once idle long enough; the ones
        deleted. A `requeued` job (trace positions) waits in the reservation it ran in until it may start again."""
        running = machine.running
        self._running_in = {
            index: name for index, name in self._running_in.items() if index in running or index in requeued
        }
        busy = {name for name, count in self._waiting_in.items() if count} | set(self._running_in.values())
        return self.reserved.check_idle(now, busy)

    def refuses(self, job: WaitingJob) -> bool:
        """Whether slurmctld refuses the job at submission: it names a reservation PURGE_COMP has deleted."""
        reservation = self.reserved.named(self.jobs[job.job_id].reservation)
        return reservation is not None and reservation.deleted

    def _changes(self) -> tuple[int, int, int]:
        """What the passes compare to know whether anything changed: starts and ends, submissions, priorities."""
        gate, reserved = self.gate, self.reserved
        machine = 0 if self._machine is None else self._machine.changes
        return (machine + reserved.changes_by(self._now), self._admitted, gate.version if gate else 0)

    def wake_time(self) -> int | None:
        """The next backfill cycle or periodic main pass, if a job waits and something changed since the last."""
        if not self._waiting:
            return None
        changes, times = self._changes(), []
        if self._cycle_seen != changes:
            times.append(_next(self._now, self.settings.bf_interval))
        if self._main_seen != changes or self._again_due:
            times.append(_next(self._now, self.settings.sched_interval))
        # Priorities recalculated while nothing runs reorder the queue but free nothing: no pass is needed for them
        # (the next event's pass catches the calculations up), and a job that can never start would keep the
        # replay going for ever.
        running = self._machine is not None and self._machine.running
        if running and self.gate is not None and (recalculation := self.gate.wake_time()) is not None:
            times.append(recalculation)
        if self.reserved and (boundary := self.reserved.next_boundary(self._now)) is not None:
            times.append(boundary)
        return min(times, default=None)

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        if not isinstance(machine, NodeMachine):
            raise TypeError("the slurm scheduler runs on a NodeMachine")
        self._machine, self._now = machine, now
        submitted, self._submitted = self._submitted, set()
        self._admitted += len(submitted)
        changes = self._changes()
        settings = self.settings
        periodic = now % settings.sched_interval == 0 and (self._main_seen != changes or self._again_due)
        main = machine.ended != self._ended_seen or periodic
        cycle = now % settings.bf_interval == 0 and self._cycle_seen != changes
        if main:
            self._ended_seen, self._main_seen, self._again_due = machine.ended, changes, False
        if cycle:
            self._cycle_seen = changes
        # No pass can start a job while fewer CPUs are free than any waiting job needs: skip their work.
        if not (main or submitted or cycle) or machine.free < self._fewest.smallest:
            return []
        ends = machine.running_ends()
        started: list[WaitingJob] = []
        records = self._records(queue)
        if main or (submitted and self._attracting()):  # job_allocate starts no job while a MAGNETIC one exists
            started = self._main_pass(records, machine, ends)
        elif submitted:
            started = self._at_submission([job for job, _ in records], submitted, machine, ends)
        if cycle:
            chosen = {job.index for job in started}
            rest = [(job, resv) for job, resv in records if job.index not in chosen]
            started += self._cycle(now, rest, machine, ends)
        return started

    def _records(self, queue: list[WaitingJob]) -> list[QueueRecord]:
        """The queue as slurmctld builds it (`build_job_queue`): a record per job, in the reservation it is in, and
        one more per MAGNETIC reservation that attracts it; records in a reservation first (those of one job by the
        reservation's start), then by their partition's PriorityTier (a stable sort keeps priority)."""
        if not self._reordered:  # no job names a reservation or is drawn into one, and one tier
            return [(job, None) for job in queue]
        records: list[QueueRecord] = []
        for job in queue:
            queued = self.jobs[job.job_id]
            records.append((job, self._reservation(queued) if queued.reservation else None))
            for name in queued.magnetic:
                reservation = self.reserved.named(name)
                if reservation is not None and not reservation.purged(self._now):
                    records.append((job, reservation))
        records.sort(key=self._record_key)
        return records

    def _record_key(self, record: QueueRecord) -> tuple[bool, int]:
        """Records in a reservation (named, one the calendar lacks, or a MAGNETIC one) first, then by tier."""
        job, reservation = record
        queued = self.jobs[job.job_id]
        named = queued.reservation is not None and self._reservation_name(queued) is not None
        in_one = reservation is not None or named
        return not in_one, -self._tiers[queued.demands[0].partition]

    def _attracting(self) -> bool:
        """Whether a MAGNETIC reservation exists now (until its purge)."""
        return any(not resv.purged(self._now) for resv in self.reserved.magnetic)

    def _drawn(self, job: WaitingJob, reservation: Reservation | None) -> bool:
        """Whether the record is a MAGNETIC reservation's for a job that names none."""
        return reservation is not None and self.jobs[job.job_id].reservation is None

    def _reservation_name(self, queued: QueuedJob) -> str | None:
        """The reservation `queued` names now (one the calendar lacks too): the one it was submitted to, until a
        FLEX one with NO_HOLD_JOBS_AFTER_END is purged (slurmctld then clears the name: a job in no reservation)."""
        reservation = self.reserved.named(queued.reservation)
        return None if reservation is not None and reservation.released(self._now) else queued.reservation

    def _reservation(self, queued: QueuedJob) -> Reservation | None:
        """The reservation `queued` is in now, if the calendar holds it (see `_reservation_name`)."""
        reservation = self.reserved.named(queued.reservation)
        return None if reservation is None or reservation.released(self._now) else reservation

    def reservation_end(self, job_id: int) -> int | None:
        """When slurmctld kills the job for its reservation's end (past it by ResvOverRun); None: never (no
        reservation, a FLEX one, or ResvOverRun=UNLIMITED). A job a MAGNETIC reservation drew in is its job."""
        reservation = self._attracted.get(job_id) or self.reserved.named(self.jobs[job_id].reservation)
        over_run = self.settings.resv_over_run
        if reservation is None or reservation.flexible or over_run is None:
            return None
        return reservation.end + over_run * 60

    def _usable(self, queued: QueuedJob, reservation: Reservation | None, start: int, end: int) -> int | None:
        """The nodes the reservations and its node list let `queued`, in `reservation`, use from `start` to `end`
        (-1: all); None: none yet or any more (its reservation has not begun or has ended)."""
        if reservation is not None:
            usable = self.reserved.usable(reservation, start, end)
            return None if usable is None else usable & queued.only
        return ~self.reserved.blocked(start, end) & queued.only if self.reserved else queued.only

    def _at_submission(
        self, queue: list[WaitingJob], submitted: set[int], machine: NodeMachine, ends: list[RunningEnd]
    ) -> list[WaitingJob]:
        """job_allocate() at submission: a new job starts at once if no job ahead of it waits for any of its
        partitions' nodes (_top_priority; a job in a reservation only waits for jobs in the same one, and other
        jobs not for it) and it fits; the others wait for a pass."""
        ahead: dict[str | None, int] = {}
        started: list[WaitingJob] = []
        for job in queue:
            if self.gate is not None and self.gate.holds(job):
                continue
            queued = self.jobs[job.job_id]
            nodes = 0
            for wanted in queued.demands:
                nodes |= self._partition_bits[wanted.partition]
            name = None if queued.reservation is None else self._reservation_name(queued)  # most jobs name none
            if job.index in submitted and not nodes & ahead.get(name, 0):
                placed = self._first_fit(job, queued.demands, machine, ends, 0, self._reservation(queued))
                if placed:
                    started.append(job)
                    continue
            ahead[name] = ahead.get(name, 0) | nodes
        return started

    def _first_fit(
        self,
        job: WaitingJob,
        demands: tuple[Demand, ...],
        machine: NodeMachine,
        ends: list[RunningEnd],
        blocked: int,
        reservation: Reservation | None,
    ) -> bool:
        """Start `job` now, in `reservation` (None: in none), in the first of its partitions it fits in, off the
        `blocked` nodes and on the nodes the reservations let it use; whether it did."""
        queued = self.jobs[job.job_id]
        usable = self._usable(queued, reservation, self._now, self._now + job.t_est)
        if usable is None:
            return False
        preferred = reservation.bits if reservation is not None and reservation.flexible else 0
        for wanted in demands:
            nodes = self._partition_bits[wanted.partition] & machine.in_service & ~blocked & usable
            allocation = None
            if preferred:  # a FLEX reservation's nodes weigh less than the others (NODE_SET_OUTSIDE_FLEX)
                allocation = machine.state.pick(wanted, from_bits(nodes & preferred, self._size))
            if allocation is None:
                allocation = machine.state.pick(wanted, from_bits(nodes, self._size))
            if allocation is not None:
                insort(ends, self._start(job, wanted, allocation, machine, reservation))
                return True
        return False

    def _start(
        self, job: WaitingJob, wanted: Demand, allocation: Allocation, machine: NodeMachine, in_: Reservation | None
    ) -> RunningEnd:
        """Place `job` now, in reservation `in_`; how the rest of the pass sees it end."""
        if in_ is not None and self._drawn(job, in_):
            self._attracted[job.job_id] = in_
        else:  # a requeued job runs as itself again
            self._attracted.pop(job.job_id, None)
        if in_ is not None:
            self._running_in[job.index] = in_.name
        else:
            self._running_in.pop(job.index, None)
        machine.place(job.index, allocation, self._over_time[wanted.partition], self.reservation_end(job.job_id))
        if self.gate is not None:
            self.gate.started(job, int(allocation.cpus.sum()), self._now)
        return machine.running_end(job.index, self._now + machine.planned_runtime(job), job.t_req)

    def _main_pass(self, records: list[QueueRecord], machine: NodeMachine, ends: list[RunningEnd]) -> list[WaitingJob]:
        """slurmctld's schedule(): priority order; a job that does not fit stops its partition and its nodes, or,
        in a reservation, the reservation's other jobs (and, before the reservation begins, its nodes). A job a
        MAGNETIC reservation attracts is tried in it first as one of its jobs, then, if it did not start, as
        itself at its place in the queue."""
        settings = self.settings
        blocked, failed, failed_reservations = 0, set(), set()
        started: list[WaitingJob] = []
        for job, reservation in records[: settings.default_queue_depth]:
            if settings.sched_max_job_start and len(started) >= settings.sched_max_job_start:
                break
            queued = self.jobs[job.job_id]
            if reservation is None:
                demands = tuple(d for d in queued.demands if d.partition not in failed)
            elif reservation.name in failed_reservations:
                demands = ()
            else:
                demands = self._could_fit(queued, reservation) if self._drawn(job, reservation) else queued.demands
            if not demands or (self.gate is not None and self.gate.holds(job)):
                continue
            if queued.magnetic and job in started:  # drawn into a MAGNETIC reservation by its first record
                continue
            if self._first_fit(job, demands, machine, ends, blocked, reservation):
                started.append(job)
            elif reservation is not None:
                failed_reservations.add(reservation.name)
                if self._now < reservation.start and not reservation.flexible:  # RESERVATION_NOT_USABLE: its nodes
                    # leave the pass (a FLEX one is usable before it begins)
                    blocked |= reservation.bits
            else:
                for wanted in demands:
                    failed.add(wanted.partition)
                    blocked |= self._partition_bits[wanted.partition]
        return started

    def _could_fit(self, queued: QueuedJob, reservation: Reservation) -> tuple[Demand, ...]:
        """The partitions in which a MAGNETIC reservation drawing `queued` in has nodes enough for it: a record it
        could never fit is passed over without stopping the reservation's others (`_job_runnable_test3`)."""
        held, bits = reservation.bits & queued.only, self._partition_bits
        return tuple(d for d in queued.demands if (held & bits[d.partition]).bit_count() >= d.min_nodes)

    def _cycle(
        self, now: int, records: list[QueueRecord], machine: NodeMachine, ends: list[RunningEnd]
    ) -> list[WaitingJob]:
        """One backfill cycle: each job in priority order starts now or reserves whole nodes for later; a job a
        MAGNETIC reservation attracts is first tried in it, to start now only (slurmctld holds no nodes for that
        record, nor counts it in bf_max_job_test or bf_max_job_user)."""
        settings = self.settings
        space = NodeSpace(now, settings.bf_window, settings.bf_resolution, machine.in_service)
        per_user: dict[int, int] = {}
        started: list[WaitingJob] = []
        estimates = _CycleEstimates(now, ends, machine.state, settings)
        for job, reservation in self._tested(records, machine.free):
            if settings.bf_max_job_start and len(started) >= settings.bf_max_job_start:
                break
            queued = self.jobs[job.job_id]
            if self.gate is not None and self.gate.holds(job):
                continue
            if queued.magnetic and job in started:  # drawn into a MAGNETIC reservation by its first record
                continue
            drawn = self._drawn(job, reservation)
            if settings.bf_max_job_user:
                tried = per_user.get(queued.user, 0)
                if tried >= settings.bf_max_job_user:
                    continue
                if not drawn:
                    per_user[queued.user] = tried + 1
            for wanted in queued.demands:
                estimate = self._plan(now, wanted, job.t_est, space, estimates, reservation, queued.only, not drawn)
                if estimate is None:
                    continue
                if estimate.start <= now:
                    insort(ends, self._start(job, wanted, estimate.allocation(), machine, reservation))
                    estimates.forget()
                    started.append(job)
                break
        return started

    def _tested(self, records: list[QueueRecord], free: int) -> list[QueueRecord]:
        """The records a cycle tests: the first bf_max_job_test (a MAGNETIC reservation's records do not count),
        up to the last that could start now on the CPUs `free`: a reservation only matters to the jobs after it,
        and none of those can start."""
        limit = self.settings.bf_max_job_test
        if self.reserved.magnetic:  # every record stops the cycle once `limit` counted ones were tested
            counted = list(accumulate(not self._drawn(job, resv) for job, resv in records))
            tested = records[: bisect_left(counted, limit) + 1]
        else:
            tested = records[:limit]
        fewest = self._fewest_cpus
        last = max((position for position, (job, _) in enumerate(tested) if fewest[job.index] <= free), default=-1)
        return tested[: last + 1]

    def _plan(
        self,
        now: int,
        wanted: Demand,
        limit: int,
        space: NodeSpace,
        estimates: _CycleEstimates,
        reservation: Reservation | None = None,
        only: int = -1,
        holds: bool = True,
    ) -> Estimate | None:
        """_attempt_backfill for one job in one partition: a start now, or a reservation made (None: neither; with
        `holds` false, a start now or None).

        The job is tried from `now` on the nodes free of reservations over its
        window, among the `only` nodes it may use; when its estimate lies past the next change of those nodes, or
        its nodes overlap a reservation, it is tried again from that later time.
        """
        settings = self.settings
        resolution = settings.bf_resolution
        partition = self._partition_bits[wanted.partition] & only
        start_from: int | None = now
        while start_from is not None:
            free, later = space.free_over(start_from, start_from + limit, partition)
            nodes = self._window_nodes(reservation, partition, start_from, start_from + limit)
            if nodes is None:
                return None  # "reservation defer": its reservation has not begun, or has ended
            allowed, held = nodes
            free &= allowed
            if held:
                free &= ~held
                after = self.reserved.retry_after(start_from)
                if after and after < space.window_end and (not later or after < later):
                    later = after
            retry = later if later > start_from else None
            estimate = None
            if free.bit_count() >= wanted.min_nodes:
                estimate = estimates.earliest(wanted, free)
            if estimate is None:
                start_from = retry if holds else None  # a record that may only start now has no later try
                continue
            start = max(estimate.start, start_from)
            if start <= now:
                return self._own_nodes_first(now, wanted, free, estimates, reservation) or estimate
            if not holds:
                return None
            if retry is not None and start > retry:
                start_from = retry
                continue
            if start > now + settings.bf_window:
                return None
            begin, end = start // resolution * resolution, (start + limit) // resolution * resolution
            chosen = estimate.nodes
            if space.overlaps(chosen, begin, end):
                start_from = start if start > start_from else None
                continue
            space.reserve(begin, end, chosen)
            return Estimate(start, chosen, estimate.held)
        return None

    @staticmethod
    def _own_nodes_first(
        now: int, wanted: Demand, free: int, estimates: _CycleEstimates, reservation: Reservation | None
    ) -> Estimate | None:
        """A FLEX reservation's job starting now goes on its own nodes if it fits there (they weigh less)."""
        if reservation is None or not reservation.flexible:
            return None
        own = estimates.earliest(wanted, free & reservation.bits)
        return own if own is not None and own.start <= now else None

    def _window_nodes(
        self, reservation: Reservation | None, partition: int, start: int, end: int
    ) -> tuple[int, int] | None:
        """(the partition's nodes a job in `reservation` (None: in none) may use, the ones reservations hold from
        it) from `start` to `end`; None if its reservation has not begun or has ended then."""
        if reservation is None:
            return partition, (self.reserved.blocked(start, end) & partition if self.reserved else 0)
        usable = self.reserved.usable(reservation, start, end)
        if usable is None:
            return None
        if reservation.flexible:  # any of the partition's nodes that no other reservation holds
            return partition, partition & ~usable
        return partition & reservation.bits, reservation.bits & ~usable


class _CycleEstimates:
    """The start estimates of one backfill cycle, by request and usable nodes: the same until a job starts (in a
    replay of SDSC-SP2 about half are asked again, by a job's retries and by jobs alike in size and partition)."""

    def __init__(self, now: int, ends: list[RunningEnd], state: NodeState, settings: SchedulerSettings) -> None:
        self.now = now
        self.ends = ends
        self.state = state
        self.settings = settings
        self._made: dict[tuple[Demand, int], Estimate | None] = {}

    def earliest(self, wanted: Demand, usable: int) -> Estimate | None:
        key = (wanted, usable)
        if key not in self._made:
            self._made[key] = earliest_start(
                wanted,
                self.state,
                self.ends,
                usable,
                self.now,
                kill_wait=self.settings.kill_wait,
                window_scale=self.settings.bf_window_linear,
            )
        return self._made[key]

    def forget(self) -> None:
        """A job started: the running jobs and the free nodes have changed."""
        self._made.clear()


def _next(now: int, interval: int) -> int:
    """The first multiple of `interval` after `now`."""
    return (now // interval + 1) * interval
