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
to end (`find_resv_end`, rounded up to `bf_resolution`). A drained node takes
no new job and keeps its running ones; a node that goes down kills the jobs on
it (NODE_FAIL). Times are Unix seconds, as the sacct reader keeps them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

#: What a node event does: `down` kills the jobs on the node, `drain` lets them finish; both keep new jobs off.
EVENT_STATES = ("down", "drain")


@dataclass(frozen=True, slots=True)
class Reservation:
    """Whole nodes held from `start` to `end` for the jobs that name the reservation (none are modelled)."""

    name: str
    start: int
    end: int
    nodes: tuple[int, ...]  # indices into the cluster's nodes, ascending
    flags: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"reservation {self.name}: it ends ({self.end}) before it starts ({self.start})")
        if not self.nodes:
            raise ValueError(f"reservation {self.name}: no nodes")

    @property
    def bits(self) -> int:
        """Its nodes as a bit set (bit i is node i)."""
        bits = 0
        for index in self.nodes:
            bits |= 1 << index
        return bits


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


class ReservedNodes:
    """The reservations as the scheduler tests a job against them (`job_test_resv`, `find_resv_end`)."""

    def __init__(self, reservations: tuple[Reservation, ...], resolution: int) -> None:
        self.resolution = resolution
        self._held = [(resv.start, resv.end, resv.bits) for resv in reservations]
        self.boundaries = sorted({time for resv in reservations for time in (resv.start, resv.end)})

    def __bool__(self) -> bool:
        return bool(self._held)

    def blocked(self, start: int, end: int) -> int:
        """The nodes a job running from `start` to `end` may not use."""
        nodes = 0
        for begins, ends, bits in self._held:
            if begins < end and ends > start:
                nodes |= bits
        return nodes

    def retry_after(self, start: int) -> int:
        """When the backfill scheduler tries a job again that a reservation kept off nodes at `start`: a second
        after the first reservation to end at or after `start`, that end rounded up to the resolution."""
        end = min((ends for _, ends, _ in self._held if ends >= start), default=0)
        resolution = self.resolution
        return -(-end // resolution) * resolution + 1 if end else 0

    def changes_by(self, now: int) -> int:
        """How many reservations have begun or ended by `now`: each makes the scheduler look again."""
        return bisect_right(self.boundaries, now)

    def next_boundary(self, now: int) -> int | None:
        """The first reservation start or end after `now`."""
        position = bisect_right(self.boundaries, now)
        return self.boundaries[position] if position < len(self.boundaries) else None
