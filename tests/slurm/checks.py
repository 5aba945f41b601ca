"""Checks of a captured Slurm run against the cluster model, shared by the live test and the offline one.

A run folder (cluster_workloads.py writes one per workload) holds the
slurm.conf and gres.conf Slurm ran with, Slurm's own view of them
(`scontrol --oneliner show nodes|partitions`), the `sacct --parsable2`
output and the backfill log. The checks read the cluster from the
slurm.conf, each job's request from its sacct line, and compare with what
Slurm reported and did.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from itertools import combinations
from pathlib import Path

import numpy as np

from kernel.hostlist import expand_hostlist
from kernel.resources import ResourceRequest
from simulator.calendar import Reservation, ReservedNodes
from simulator.cluster import Cluster
from simulator.clusterconf import read_slurm_conf
from simulator.clusterconf.calendarfiles import read_reservations, time_zone
from simulator.clusterconf.sacctmgr import parsable_rows
from simulator.nodes import Allocation, Demand, NodeState, NodeTable, demand
from simulator.workloads.tres import parse_tres, sacct_request, submit_options

_LOGGED = re.compile(r"^\[(\S+)\] .*?(Allocate|Started|_job_complete):? JobId=(\d+)")
_BACKFILLED = re.compile(
    r"^\[(\S+)\] sched/backfill: (?:_start_job: Started JobId=(\d+)"
    r"|_dump_job_sched: JobId=(\d+) to start at (\S+), end at (\S+) on nodes (\S+))"
)
_NODE_STATE = re.compile(r"^\[(\S+)\] update_node: node (\S+) state set to (\S+)")
#: Backfill lines this far apart (s) belong to two cycles (bf_interval=1: a cycle a second, each a few ms long).
CYCLE_GAP = 0.5


def _utc(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())


def _logged_at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class Plan:
    """A backfill cycle's reservation for a job it could not start: whole nodes over [begin, end]."""

    begin: int
    end: int
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class Job:
    """One job allocation of the sacct output, with what the checks need."""

    row: dict[str, str]
    cluster: Cluster

    @property
    def id(self) -> int:
        return int(self.row["JobIDRaw"])

    @property
    def submit(self) -> int:
        return _utc(self.row["Submit"])

    @property
    def start(self) -> int:
        return _utc(self.row["Start"])

    @property
    def end(self) -> int:
        return _utc(self.row["End"])

    @property
    def wait(self) -> int:
        return self.start - _utc(self.row["Eligible"])

    @property
    def limit(self) -> int:
        """The time limit in seconds (sacct gives minutes)."""
        return int(self.row["TimelimitRaw"]) * 60

    @cached_property
    def nodes(self) -> list[int]:
        return sorted(self.cluster.node_index(name) for name in expand_hostlist(self.row["NodeList"]))

    @cached_property
    def asked(self) -> dict[str, int]:
        return parse_tres(self.row["ReqTRES"])

    @cached_property
    def given(self) -> dict[str, int]:
        return parse_tres(self.row["AllocTRES"])

    @cached_property
    def options(self) -> dict[str, str]:
        return submit_options(self.row["SubmitLine"])

    @cached_property
    def request(self) -> ResourceRequest:
        """What the job asked, from sacct with its submit line."""
        return self._request(self.row["SubmitLine"])

    @cached_property
    def guessed(self) -> ResourceRequest:
        """What the job asked, from sacct's TRES fields alone (what a site's dump without SubmitLine gives)."""
        return self._request("")

    def _request(self, submit_line: str) -> ResourceRequest:
        node_cpus = sum(self.cluster.nodes[index].cpus for index in self.nodes)
        return sacct_request(
            self.row["ReqTRES"],
            alloc_tres=self.row["AllocTRES"],
            req_mem=self.row["ReqMem"],
            partition=self.row["Partition"],
            qos=self.row["QOS"],
            reservation=self.row.get("Reservation") or "",
            node_cpus=node_cpus,
            submit_line=submit_line,
        )


@dataclass
class Run:
    folder: Path

    @cached_property
    def cluster(self) -> Cluster:
        return read_slurm_conf(self.folder / "slurm.conf")

    @cached_property
    def jobs(self) -> list[Job]:
        text = (self.folder / "jobs.sacct").read_text()
        rows = csv.DictReader(io.StringIO(text), delimiter="|", quoting=csv.QUOTE_NONE)
        return [Job(row, self.cluster) for row in rows if row["AllocTRES"] and row["Start"] != "Unknown"]

    @cached_property
    def logged(self) -> dict[tuple[str, int], tuple[float, int]]:
        """("start" or "end", job) -> when slurmctld logged it, in seconds with milliseconds (if it did), and
        the line's place in the log: events in the same millisecond happened in the order they were logged (a
        backfill cycle starts jobs in priority order, which under priority/multifactor is not job order)."""
        times: dict[tuple[str, int], tuple[float, int]] = {}
        for number, line in enumerate(self._log("backfill.log.gz")):
            found = _LOGGED.search(line)
            if found:
                when = _logged_at(found.group(1))
                kind = "end" if found.group(2) == "_job_complete" else "start"
                times.setdefault((kind, int(found.group(3))), (when, number))
        return times

    @cached_property
    def held(self) -> dict[int, tuple[int, ...]] | None:
        """Job the backfill scheduler started -> the nodes its cycle held then for jobs ahead of it.

        A cycle walks the queue in priority order and reserves whole nodes for
        each job it cannot start (`_dump_job_sched` logs the reservation); a job
        it starts may not use the nodes of a reservation its limit reaches
        (`node_space[j].begin_time <= end_time`, so one beginning as it would
        end counts). None if the run kept no log of every cycle's plans
        (`plans.log.gz`: the committed captures keep only changes of plan).
        """
        if not (self.folder / "plans.log.gz").exists():
            return None
        limits = {job.id: job.limit for job in self.jobs}
        held: dict[int, tuple[int, ...]] = {}
        plans: list[Plan] = []
        last = 0.0
        for line in self._log("plans.log.gz"):
            found = _BACKFILLED.search(line)
            if not found:
                continue
            when = _logged_at(found.group(1))
            if when - last > CYCLE_GAP:
                plans = []
            last = when
            if found.group(2):
                now = int(when)
                end = now + limits[int(found.group(2))]
                held[int(found.group(2))] = tuple(
                    sorted({node for plan in plans if plan.begin <= end and plan.end > now for node in plan.nodes})
                )
            else:
                nodes = tuple(self.cluster.node_index(name) for name in expand_hostlist(found.group(6)))
                plans.append(Plan(_utc(found.group(4)), _utc(found.group(5)), nodes))
        return held

    @cached_property
    def node_states(self) -> list[tuple[float, int, bool]]:
        """(when, node, whether it takes jobs) for each state an administrator set (`scontrol update`), as logged."""
        changes = []
        for line in self._log("backfill.log.gz"):
            found = _NODE_STATE.search(line)
            if found:
                taking = not found.group(3).startswith(("DRAIN", "DOWN", "FAIL"))
                changes.append((_logged_at(found.group(1)), self.cluster.node_index(found.group(2)), taking))
        return changes

    @cached_property
    def reservations(self) -> tuple[Reservation, ...]:
        """The reservations Slurm printed when they were made (`reservations.txt`, times in UTC), if any, each ending
        where accounting says PURGE_COMP deleted it (`deleted`)."""
        path = self.folder / "reservations.txt"
        made = read_reservations(path, self.cluster, time_zone("UTC"), []) if path.exists() else ()
        ended = self._accounted_ends
        return tuple(
            replace(resv, end=ended[resv.name], deleted=True) if ended.get(resv.name, resv.end) < resv.end else resv
            for resv in made
        )

    @property
    def deleted(self) -> dict[str, int]:
        """When slurmctld deleted each PURGE_COMP reservation it deleted before its end, by name."""
        return {resv.name: resv.end for resv in self.reservations if resv.deleted}

    @cached_property
    def _accounted_ends(self) -> dict[str, int]:
        """Accounting's latest end of each PURGE_COMP reservation (`reservations-accounting.txt`, `sacctmgr show
        reservation --parsable2`; slurmdbd may keep a row per update of one): its deletion, if before its end."""
        path = self.folder / "reservations-accounting.txt"
        if not path.exists():
            return {}
        rows, _ = parsable_rows(path, ("Name", "TimeEnd", "Flags"), "sacctmgr show reservation --parsable2")
        ended: dict[str, int] = {}
        for _, row in rows:
            if "PURGE_COMP" in row["Flags"] and row["TimeEnd"].startswith("20"):
                ended[row["Name"]] = max(ended.get(row["Name"], 0), _utc(row["TimeEnd"]))
        return ended

    def reserved(self, job: Job) -> tuple[int, ...]:
        """The nodes the reservations keep `job` from over its limit (`job_test_resv`): those of the reservations
        it overlaps, or, if it names one, every node but the ones it may use there."""
        reserved, start, end = ReservedNodes(self.reservations, resolution=1), job.start, job.start + job.limit
        own = reserved.named(job.request.reservation) or self.drawn_into(job)
        blocked = reserved.blocked(start, end) if own is None else ~(reserved.usable(own, start, end) or 0)
        return tuple(node for node in range(len(self.cluster.nodes)) if blocked >> node & 1)

    def drawn_into(self, job: Job) -> Reservation | None:
        """The MAGNETIC reservation that drew `job` in, if it ran on its nodes while it lasted and it lets the
        job's user and account in (sacct names it as the job's reservation, or, for a job started as it began,
        none)."""
        for reservation in self.reservations:
            within = set(job.nodes) <= set(reservation.nodes) and reservation.start <= job.start <= reservation.end
            if reservation.magnetic and within and reservation.admits(job.row["User"], job.row["Account"]):
                return reservation
        return None

    def _log(self, name: str) -> list[str]:
        """The lines of one of the capture's gzipped logs; none if the run did not keep it."""
        path = self.folder / name
        return gzip.decompress(path.read_bytes()).decode().splitlines() if path.exists() else []

    def when(self, kind: str, job: Job) -> tuple[float, int]:
        """When a job started or ended, as a sort key: the log's time and line if it has one, else sacct's second
        (ends before starts)."""
        logged = self.logged.get((kind, job.id))
        if logged is not None:
            return logged
        return float(job.start if kind == "start" else job.end), 0 if kind == "end" else 1

    def scontrol(self, what: str) -> list[dict[str, str]]:
        """`scontrol --oneliner show nodes|partitions` as key/values (values without blanks)."""
        lines = (self.folder / f"scontrol-{what}.txt").read_text().splitlines()
        return [dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", line)) for line in lines if line.strip()]


def check_configuration(run: Run) -> None:
    """The cluster read from slurm.conf is the one Slurm itself reported."""
    cluster = run.cluster
    reported = {node["NodeName"]: node for node in run.scontrol("nodes")}
    assert sorted(reported) == sorted(node.name for node in cluster.nodes)
    for node in cluster.nodes:
        slurm = reported[node.name]
        assert node.cpus == int(slurm["CPUTot"]), node.name
        assert node.memory == int(slurm["RealMemory"]), node.name
        assert node.sockets == int(slurm["Sockets"]) and node.cores_per_socket == int(slurm["CoresPerSocket"])
        assert node.threads_per_core == int(slurm["ThreadsPerCore"]) and node.weight == int(slurm["Weight"])
        gres = slurm["Gres"]
        assert node.gpus == (int(gres.split(":")[-1].split("(")[0]) if gres.startswith("gpu") else 0), node.name
    partitions = {partition["PartitionName"]: partition for partition in run.scontrol("partitions")}
    assert sorted(partitions) == sorted(cluster.partition_names)
    for partition in cluster.partitions:
        slurm = partitions[partition.name]
        assert [cluster.nodes[i].name for i in partition.nodes] == expand_hostlist(slurm["Nodes"])
        assert partition.default == (slurm["Default"] == "YES")
        limit = slurm["MaxTime"]
        assert partition.max_time == (None if limit == "UNLIMITED" else _minutes(limit) * 60)
        assert partition.state == slurm["State"]


def _minutes(text: str) -> int:
    """scontrol's [D-]HH:MM:SS."""
    days, _, clock = text.rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) + (seconds + 59) // 60


def check_requests(run: Run) -> None:
    """Each job's request, read from sacct, says what its submit line asked and what Slurm recorded."""
    for job in run.jobs:
        request, options = job.request, job.options
        assert request.cpus == job.asked["cpu"], job.id
        assert request.min_nodes == job.asked["node"], job.id
        assert request.total_gpus == job.asked.get("gres/gpu", 0), job.id
        assert request.partitions == (job.row["Partition"],) and request.qos == job.row["QOS"], job.id
        assert request.exclusive == ("--exclusive" in options), job.id
        # sacct alone tells an exclusive job by the CPUs it was given beyond those it asked
        whole = sum(job.cluster.nodes[index].cpus for index in job.nodes)
        assert job.guessed.exclusive == (request.exclusive and job.asked["cpu"] < whole), job.id
        if "--mem" in options:
            assert request.mem_per_node * len(job.nodes) == job.asked["mem"], job.id
        guessed = job.guessed
        assert (guessed.cpus, guessed.total_gpus >= request.total_gpus) == (request.cpus, True), job.id


def check_allocations(run: Run) -> None:
    """What Slurm gave each job fits the model: its partition's nodes, their CPUs, memory and GPUs."""
    cluster = run.cluster
    for job in run.jobs:
        partition = cluster.partition(job.row["Partition"])
        assert set(job.nodes) <= set(partition.nodes), job.id
        assert job.given["node"] == len(job.nodes), job.id
        nodes = [cluster.nodes[index] for index in job.nodes]
        assert job.given["cpu"] <= sum(node.cpus for node in nodes), job.id
        if job.request.exclusive:
            assert job.given["cpu"] == sum(node.cpus for node in nodes), job.id
        if cluster.select.memory:
            assert job.given["mem"] <= sum(node.memory for node in nodes), job.id
        assert job.given.get("gres/gpu", 0) <= sum(node.gpus for node in nodes), job.id
    for index, node in enumerate(cluster.nodes):  # single-node jobs never overfill a node
        alone = [job for job in run.jobs if job.nodes == [index]]
        for job in alone:
            at_once = [other for other in alone if other.start <= job.start < other.end]
            assert sum(other.given["cpu"] for other in at_once) <= node.cpus, (node.name, job.id)


#: How long after a job's end its nodes may still be completing it (seconds).
COMPLETING = 3.0


@dataclass
class NodeReplay:
    """Slurm's starts replayed on the model's nodes: where the model disagrees with what Slurm did."""

    checked: int = 0  # starts by Slurm's main scheduler whose nodes the model chose afresh
    backfilled: int = 0  # starts by its backfill scheduler whose nodes the model chose afresh, off the nodes held
    differing: list[tuple[int, list[str], list[str]]] = field(default_factory=list)  # job, Slurm's, the model's
    completing: list[tuple[int, list[str]]] = field(default_factory=list)  # job, nodes still completing then
    unplaceable: list[int] = field(default_factory=list)  # jobs the model cannot fit where Slurm put them
    tied: list[int] = field(default_factory=list)  # jobs that fit once a job on their nodes ending that second ends
    resplit: list[int] = field(default_factory=list)  # jobs that fit once a job on their nodes splits its CPUs anew


def _chosen(state: NodeState, wanted: Demand, partition: str, left_out: tuple[int, ...]) -> list[int]:
    available = state.table.partition_masks[partition].copy()
    available[list(left_out)] = False
    fresh = state.pick(wanted, available)
    return [] if fresh is None else fresh.nodes.tolist()


def _compare(
    replay: NodeReplay, job: Job, state: NodeState, wanted: Demand, recent: list[int], held: tuple[int, ...] = ()
) -> None:
    """Whether the model chooses Slurm's nodes off the `held` ones, with none, or some, of the `recent`ly freed
    nodes left out too."""
    partition = job.row["Partition"]
    plain = _chosen(state, wanted, partition, held)
    if plain == job.nodes:
        return
    names = [node.name for node in job.cluster.nodes]
    for size in range(1, len(recent) + 1):
        for left_out in combinations(recent, size):
            if _chosen(state, wanted, partition, held + left_out) == job.nodes:
                replay.completing.append((job.id, [names[i] for i in left_out]))
                return
    replay.differing.append((job.id, [names[i] for i in job.nodes], [names[i] for i in plain]))


def _after_a_tie(
    run: Run, job: Job, state: NodeState, wanted: Demand, own: np.ndarray, running: list[Job]
) -> Allocation | None:
    """`job` placed on its nodes once the jobs on them that end within the second of its start have ended.

    An end the log did not record is known from sacct to the second only, so a job that ended a fraction of
    a second before this start can sort after it (seen once in a live fcfs run: job 81 at 02:03:37).
    """
    started = run.when("start", job)[0]
    for other in [o for o in running if set(o.nodes) & set(job.nodes) and run.when("end", o)[0] - started < 1]:
        state.release(other.id)
        running.remove(other)
    return state.pick(wanted, own)


def _other_split(state: NodeState, wanted: Demand, own: np.ndarray, partition: np.ndarray) -> Allocation | None:
    """The model's choice among all the partition's nodes, when it is the nodes `own` gives the job but splits
    the CPUs differently from the choice among `own` alone.

    How many CPUs a job on several nodes takes on each depends on the nodes not chosen too (runs of
    consecutive usable nodes, `_eval_nodes`), and the backfill scheduler leaves out nodes it holds for other
    jobs, which sacct does not record: a live mixed run gave `-N 2 -n 12` 4 and 8 CPUs on two empty nodes as
    the model does among all the nodes (a third, next to the second, had one CPU free), not 8 and 4 as among
    the two alone; another gave the split of the two alone.
    """
    afresh = state.pick(wanted, partition)
    if afresh is None or not np.array_equal(afresh.nodes, np.flatnonzero(own)):
        return None
    alone = state.pick(wanted, own)
    return None if alone is not None and np.array_equal(alone.cpus, afresh.cpus) else afresh


def _after_a_resplit(
    job: Job, state: NodeState, wanted: Demand, own: np.ndarray, running: list[Job], splits: dict[int, Allocation]
) -> Allocation | None:
    """`job` placed on its nodes once a running job on them takes its other split (`_other_split`)."""
    for other in [o for o in running if o.id in splits and set(o.nodes) & set(job.nodes)]:
        held = state.release(other.id)
        try:
            state.allocate(other.id, splits[other.id])
        except AssertionError:  # the other split no longer fits beside the jobs started since
            state.allocate(other.id, held)
            continue
        allocation = state.pick(wanted, own)
        if allocation is not None and allocation.nodes.tolist() == job.nodes:
            splits[other.id] = held
            return allocation
        state.release(other.id)
        state.allocate(other.id, held)
    return None


def _placed(
    run: Run,
    job: Job,
    state: NodeState,
    wanted: Demand,
    own: np.ndarray,
    running: list[Job],
    splits: dict[int, Allocation],
    replay: NodeReplay,
) -> Allocation | None:
    """`job` on the nodes Slurm gave it: as the model fits it there, else after a tie or a resplit (counted)."""
    allocation = state.pick(wanted, own)
    if allocation is not None and allocation.nodes.tolist() == job.nodes:
        return allocation
    allocation = _after_a_tie(run, job, state, wanted, own, running)
    if allocation is not None and allocation.nodes.tolist() == job.nodes:
        replay.tied.append(job.id)
        return allocation
    allocation = _after_a_resplit(job, state, wanted, own, running, splits)
    if allocation is not None:
        replay.resplit.append(job.id)
    return allocation


def _end_before(
    run: Run,
    started: tuple[float, int],
    state: NodeState,
    running: list[Job],
    splits: dict[int, Allocation],
    freed: dict[int, float],
) -> None:
    """End the running jobs that ended by `started` (their nodes freed then, for `COMPLETING`)."""
    for ended in [other for other in running if run.when("end", other) <= started]:
        state.release(ended.id)
        running.remove(ended)
        splits.pop(ended.id, None)
        freed.update(dict.fromkeys(ended.nodes, run.when("end", ended)[0]))


def _drain_until(when: float, states: list[tuple[float, int, bool]], drained: set[int]) -> None:
    """Apply the node state changes (time, node, taking jobs again) logged by `when` to the drained nodes."""
    while states and states[0][0] <= when:
        _, node, taking = states.pop(0)
        (drained.discard if taking else drained.add)(node)


def replay_node_choices(run: Run) -> NodeReplay:
    """Every start in time order on a model of the nodes, each job on the nodes Slurm gave it.

    Placing a job on its own nodes (the model choosing among those only) checks
    that they had room for it in the model too and gives the CPUs, memory and
    GPUs it holds on each. A job Slurm's main scheduler started is also placed
    afresh among its partition's nodes that were neither drained (the log's
    `update_node` lines) nor in a reservation its limit reaches: the main
    scheduler ignores the backfill scheduler's reservations (which sacct does
    not record), so select/cons_tres's choice, which `pick` reproduces,
    decides alone. With a log of every backfill cycle's plans (`Run.held`), a
    job the backfill scheduler started is placed afresh too, off the nodes its
    cycle held for the jobs ahead of it as well. Events go in the order
    slurmctld logged them (to the millisecond); without a log, ends at a second
    come before starts at it, and starts go in job order.

    A node is not given to a job while it is still completing the last one
    (its epilog, a second or so after the job's end; sacct does not say when it
    was done): a choice that differs only that way, nodes freed in the last
    `COMPLETING` seconds left out, is counted in `completing`, not `differing`.
    A job that fits its nodes only once a job on them ending within the second
    has ended (`tied`), or once a job on them takes the other split of its
    CPUs the model makes (`resplit`, `_other_split`), is placed and counted.
    """
    cluster = run.cluster
    table = NodeTable(cluster)
    state = NodeState(table)
    replay = NodeReplay()
    running: list[Job] = []
    freed: dict[int, float] = {}  # node -> when a job on it last ended
    splits: dict[int, Allocation] = {}  # running job -> the split of its CPUs it did not take (`_other_split`)
    held = run.held
    states = list(run.node_states)
    drained: set[int] = set()
    for job in sorted(run.jobs, key=lambda job: (run.when("start", job), job.id)):
        started = run.when("start", job)
        _end_before(run, started, state, running, splits, freed)
        partition = cluster.partition(job.row["Partition"])
        wanted = demand(job.request, cluster, partition)
        _drain_until(started[0], states, drained)
        recent = [node for node, when in freed.items() if started[0] - when < COMPLETING]
        kept = (*drained, *run.reserved(job))
        if "SchedMain" in job.row["Flags"]:
            replay.checked += 1
            _compare(replay, job, state, wanted, recent, kept)
        elif held is not None and job.id in held:
            replay.backfilled += 1
            _compare(replay, job, state, wanted, recent, (*kept, *held[job.id]))
        own = np.zeros(table.size, dtype=bool)
        own[job.nodes] = True
        split = _other_split(state, wanted, own, table.partition_masks[partition.name])
        allocation = _placed(run, job, state, wanted, own, running, splits, replay)
        if allocation is None:
            replay.unplaceable.append(job.id)
            continue
        if split is not None:
            splits[job.id] = split
        state.allocate(job.id, allocation)
        running.append(job)
    return replay
