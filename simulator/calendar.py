"""A cluster's calendar: advance reservations that hold nodes, and nodes that go down or drain.

What a site's Slurm knows ahead of its jobs (`scontrol show reservation`) and
what happened to its nodes (`sacctmgr show event`); read by
`simulator.clusterconf.calendarfiles`, applied by the `slurm` scheduler
(`simulator.slurmsched`) and its replay (`simulator.clusterreplay`).

As Slurm 22.05 applies them (`job_test_resv` in slurmctld/reservation.c):
a job that names no reservation may not use a reservation's nodes if its
time limit would overlap the reservation (`resv.start < job end` and
`resv.end > job start`: a job ending exactly as the reservation begins fits);
the backfill scheduler then tries the job again after the first reservation
to end (`find_resv_end`, rounded up to `bf_resolution`). A job that names a
reservation may use only its nodes, less those of other reservations it
overlaps unless its own is a maintenance, and only from its start
(`ReservedNodes.usable`). A MAGNETIC reservation also draws in the jobs
that name none but that its users and accounts let in (`Reservation.admits`;
the `slurm` scheduler tries them there first). A drained node takes no new job and keeps its
running ones; a node that goes down kills the jobs on it (NODE_FAIL). Times
are Unix seconds, as the sacct reader keeps them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace

import pandas as pd

#: What a node event does: `down` kills the jobs on the node, `drain` lets them finish; both keep new jobs off.
EVENT_STATES = ("down", "drain")
#: slurmctld purges an ended reservation at its periodic check (`job_resv_check`, every PERIODIC_TIMEOUT, 30 s);
#: the check's phase is not modelled: the purge is taken at the latest, 30 s after the end.
PURGE_DELAY = 30
#: Seconds a PURGE_COMP reservation may stay idle when the flag gives no time (`create_resv`: 5 minutes).
PURGE_COMP_DEFAULT = 300


@dataclass(frozen=True, slots=True)
class Reservation:
    """Whole nodes held from `start` to `end` for the jobs that name the reservation (`--reservation`)."""

    name: str
    start: int
    end: int
    nodes: tuple[int, ...]  # indices into the cluster's nodes, ascending
    flags: frozenset[str] = frozenset()
    # who may run in it (Users=, Accounts=; names, each "-name" to deny instead; None: not given)
    users: frozenset[str] | None = None
    accounts: frozenset[str] | None = None
    # PURGE_COMP: deleted once idle this many seconds from its start on (None: kept to its end)
    purge_after: int | None = None
    deleted: bool = False  # deleted by PURGE_COMP at its `end`: gone at once, its jobs' names no longer valid

    def __post_init__(self) -> None:
        if self.end < self.start or (self.end == self.start and not self.deleted):
            raise ValueError(f"reservation {self.name}: it ends ({self.end}) before it starts ({self.start})")
        if not self.nodes:
            raise ValueError(f"reservation {self.name}: no nodes")

    @property
    def flexible(self) -> bool:
        """FLEX: its jobs may start before it, run past it and use nodes outside it (its own nodes first)."""
        return "FLEX" in self.flags

    @property
    def releases_its_jobs(self) -> bool:
        """NO_HOLD_JOBS_AFTER_END: a job of it still waiting when it has ended runs as any other job."""
        return "NO_HOLD_JOBS_AFTER_END" in self.flags

    @property
    def magnetic(self) -> bool:
        """MAGNETIC: jobs that name no reservation but may use it are tried in it first (`_queue_magnetic_resv`)."""
        return "MAGNETIC" in self.flags

    def admits(self, user: str, account: str) -> bool:
        """Whether a job of `user` charging `account` may run in it (`_valid_job_access_resv`): both lists that
        are given must let it in; a list of "-name"s lets in everyone else."""
        if self.users is None and self.accounts is None:
            return False
        return _listed(self.users, user) and _listed(self.accounts, account)

    def purged(self, now: int) -> bool:
        """Whether slurmctld has purged it by `now` (PURGE_DELAY after its end, or at once if PURGE_COMP deleted
        it then)."""
        return now >= self.end + (0 if self.deleted else PURGE_DELAY)

    def released(self, now: int) -> bool:
        """Whether its jobs are, by `now`, jobs in no reservation: a FLEX one with NO_HOLD_JOBS_AFTER_END, purged
        (slurmctld clears their reservation; a FLEX one's jobs are never tested against its end before that). Not
        one PURGE_COMP deleted: no job of it waited then, and a later one naming it is refused."""
        return self.flexible and self.releases_its_jobs and self.purged(now) and not self.deleted

    @property
    def bits(self) -> int:
        """Its nodes as a bit set (bit i is node i)."""
        bits = 0
        for index in self.nodes:
            bits |= 1 << index
        return bits


def _listed(names: frozenset[str] | None, name: str) -> bool:
    """Whether an access list (None: not given) lets `name` in."""
    if names is None:
        return True
    if any(entry.startswith("-") for entry in names):
        return f"-{name}" not in names
    return name in names


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A node out of service from `start` to `end` (None: still at the end of the record)."""

    node: int  # index into the cluster's nodes
    start: int
    end: int | None
    state: str  # one of EVENT_STATES
    reason: str = ""

    def __post_init__(self) -> None:
        if self.state not in EVENT_STATES:
            raise ValueError(f"node event: unknown state {self.state!r}; choose one of {', '.join(EVENT_STATES)}")
        if self.end is not None and self.end < self.start:
            raise ValueError(f"node event: it ends ({self.end}) before it starts ({self.start})")


@dataclass(frozen=True)
class Calendar:
    """The reservations and node events of one replay."""

    reservations: tuple[Reservation, ...] = ()
    events: tuple[NodeEvent, ...] = ()

    def drains_as_requested(self, runs: Iterable[tuple[int, int, int]]) -> Calendar:
        """The calendar with each busy node's drain moved back to the earliest time it can have been asked for.

        slurmctld records a drain (`sacctmgr show event`) when the node is
        drained: a node busy at the request records it at its last job's end,
        though it took no new job from the request on. When a job of `runs`
        (node, start, end: the trace's jobs where they ran) ended on the node
        within a second of the event's start and none still ran there, the
        drain begins a second after the last job to start there before it: the
        request came after that start, and the replay keeps the node from new
        jobs as Slurm did. A live run here asked at 15:21:10 and recorded
        15:22:04; this reads 15:20:33. An idle node drained within a second of
        a job's end is moved back too: the dump cannot tell the two apart.
        """
        by_node: dict[int, list[tuple[int, int]]] = {}
        for node, start, end in runs:
            by_node.setdefault(node, []).append((start, end))
        moved = (_drain_as_requested(event, by_node.get(event.node, [])) for event in self.events)
        return replace(self, events=tuple(sorted(moved, key=lambda event: (event.start, event.node))))


def _drain_as_requested(event: NodeEvent, runs: list[tuple[int, int]]) -> NodeEvent:
    """`event` moved back as `Calendar.drains_as_requested` says, given the node's (start, end) runs."""
    recorded = event.start
    if event.state != "drain" or not any(abs(end - recorded) <= 1 for _, end in runs):
        return event
    if any(start < recorded < end - 1 for start, end in runs):
        return event  # a job still ran: the record is not the drain's completion
    last_start = max((start for start, _ in runs if start < recorded), default=recorded - 1)
    return replace(event, start=min(last_start + 1, recorded))


def node_runs(jobs: pd.DataFrame, nodes: Mapping[int, tuple[int, ...]]) -> list[tuple[int, int, int]]:
    """(node, start, end) for each of the trace's `jobs` (submit, wait, run) on each of the `nodes` it ran on (by
    job id), end as the job ran (a TIMEOUT past its limit too): what `Calendar.drains_as_requested` reads."""
    columns = jobs[["job_id", "submit", "wait", "run"]].itertuples(index=False)
    return [
        (node, int(submit + max(wait, 0)), int(submit + max(wait, 0) + run))
        for job, submit, wait, run in columns
        for node in nodes.get(job, ())
    ]


class ReservedNodes:
    """The reservations as the scheduler tests a job against them (`job_test_resv`, `find_resv_end`), and as
    slurmctld's periodic check deletes the PURGE_COMP ones that stay idle (`job_resv_check`)."""

    def __init__(self, reservations: tuple[Reservation, ...], resolution: int) -> None:
        self.resolution = resolution
        self._idle_since: dict[str, int] = {}  # PURGE_COMP reservations idle at every check since then
        self._deleted = 0  # PURGE_COMP reservations deleted so far
        self._index(reservations)

    def _index(self, reservations: tuple[Reservation, ...]) -> None:
        self.reservations = reservations
        self._held = [(resv.start, resv.end, resv.bits, resv.name) for resv in reservations]
        self._deleted_names = {resv.name for resv in reservations if resv.deleted}
        self._named = {resv.name: resv for resv in reservations}
        self.magnetic = tuple(resv for resv in reservations if resv.magnetic)
        self._purging = tuple(resv for resv in reservations if resv.purge_after is not None and not resv.deleted)
        # a FLEX reservation's purge changes its jobs too (held, or released into the queue)
        purges = {resv.end + PURGE_DELAY for resv in reservations if resv.flexible and not resv.deleted}
        self.boundaries = sorted({time for resv in reservations for time in (resv.start, resv.end)} | purges)

    def next_idle_check(self, after: int, phase: int) -> int | None:
        """The first of slurmctld's checks (every PURGE_DELAY seconds, at `phase` in the period) after `after` that
        may delete a PURGE_COMP reservation: one at or after its start and before its end; None: no such one."""
        due = None
        for resv in self._purging:
            begin = max(after + 1, resv.start)
            check = begin + (phase - begin) % PURGE_DELAY
            if check < resv.end and (due is None or check < due):
                due = check
        return due

    def validated(self, name: str) -> None:
        """A job naming reservation `name` was submitted: its idle clock starts again (`validate_job_resv`)."""
        self._idle_since.pop(name, None)

    def check_idle(self, now: int, busy: Collection[str]) -> list[str]:
        """slurmctld's check at `now` (`job_resv_check`): each begun PURGE_COMP reservation that is not `busy`
        (no job naming it waits, none runs in it) is idle from the first check that found it so; one idle for its
        `purge_after` seconds before its end is deleted now, its nodes free for any job. The ones deleted."""
        deleted = []
        for resv in self._purging:
            if resv.start > now:
                continue
            if resv.name in busy:
                self._idle_since.pop(resv.name, None)
                continue
            since = self._idle_since.setdefault(resv.name, now)
            if resv.end > now and resv.purge_after is not None and now - since >= resv.purge_after:
                deleted.append(resv.name)
        if deleted:
            self._deleted += len(deleted)
            self._index(tuple(replace(resv, end=now, deleted=True) if resv.name in deleted else resv
                              for resv in self.reservations))  # fmt: skip
        return deleted

    def __bool__(self) -> bool:
        return bool(self._held)

    def blocked(self, start: int, end: int, besides: str | None = None) -> int:
        """The nodes of the reservations (all, or all but the one named `besides`) that overlap `start`-`end`:
        what a job that names no reservation, running then, may not use."""
        nodes = 0
        for begins, ends, bits, name in self._held:
            if begins < end and ends > start and name != besides:
                nodes |= bits
        return nodes

    def named(self, name: str | None) -> Reservation | None:
        """The reservation a job names, if the calendar holds it."""
        return self._named.get(name) if name else None

    def usable(self, reservation: Reservation, start: int, end: int) -> int | None:
        """The nodes a job in `reservation` may use from `start` to `end`: none (None) before the reservation
        begins or after it ends; else its nodes but those of other reservations overlapping the job, unless it is
        a maintenance (MAINT) reservation, which overlapping ones do not take from (`job_test_resv`). The job's
        end is not held to the reservation's: slurmctld kills it then (`ResvOverRun`).

        A FLEX reservation's job may use any node but those of other reservations overlapping it (all, if its
        own is MAINT), whenever it starts, until the ended reservation is purged; then it is held (None), or, with
        NO_HOLD_JOBS_AFTER_END, runs as a job in no reservation (the purge clears its jobs' names;
        `_clear_job_resv`)."""
        if reservation.flexible:
            if reservation.purged(start):
                return ~self.blocked(start, end) if reservation.releases_its_jobs else None
            return -1 if "MAINT" in reservation.flags else ~self.blocked(start, end, besides=reservation.name)
        if start < reservation.start or start > reservation.end or reservation.purged(start):
            return None
        if "MAINT" in reservation.flags:
            return reservation.bits
        return reservation.bits & ~self.blocked(start, end, besides=reservation.name)

    def retry_after(self, start: int) -> int:
        """When the backfill scheduler tries a job again that a reservation kept off nodes at `start`: a second
        after the first reservation to end at or after `start`, that end rounded up to the resolution."""
        deleted = self._deleted_names  # one deleted now holds nothing from now on
        end = min((ends for _, ends, _, name in self._held if ends > start or (ends == start and name not in deleted)),
                  default=0)  # fmt: skip
        resolution = self.resolution
        return -(-end // resolution) * resolution + 1 if end else 0

    def changes_by(self, now: int) -> int:
        """How many times reservations have begun or ended by `now`, and how many were deleted: each makes the
        scheduler look again."""
        return bisect_right(self.boundaries, now) + self._deleted

    def next_boundary(self, now: int) -> int | None:
        """The first reservation start or end after `now`."""
        position = bisect_right(self.boundaries, now)
        return self.boundaries[position] if position < len(self.boundaries) else None
