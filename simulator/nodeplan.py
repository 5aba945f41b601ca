"""When a queued job could start on nodes, and the whole nodes Slurm's backfill reserves for it.

Two pieces of Slurm 22.05's backfill scheduler, for the `slurm` scheduler to
plan with (scheduler side: expected ends only, never actual runtimes):

- `earliest_start` is `_will_run_test` (select/cons_common/job_test.c):
  if the job does not fit now, running jobs are taken off the nodes in
  order of their expected ends, in batches: the first batch ends at the
  30 s boundary after the first end, plus 30 s; each failed try doubles
  the window (or adds `bf_window_linear`) until it takes in the next end.
  The start is the end of the *last* job of the batch that made the job
  fit, so estimates are coarse and often later than the exact one; a job
  already past its expected end is guessed to end after KillWait and
  OverTimeLimit (`_guess_job_end`).
- `NodeSpace` is the backfill map (`node_space` in
  sched/backfill/backfill.c): from the cycle's start to `bf_window`, which
  nodes no queued job has reserved. A reservation takes *whole nodes* for
  the job's window (`_add_reservation`), so idle CPUs on a reserved node
  are lost to later jobs; a job may use a node only if no reservation on
  it begins at or before the job's end (the inclusive edge,
  `begin_time <= end_time`).

Node sets in the map are Python integers used as bit sets (bit i is node i
in Slurm's order): AND, OR and subset tests on them cost a few hundred
nanoseconds even for thousands of nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from simulator.nodes import (
    Allocation,
    Demand,
    Holding,
    NodeState,
    bits_of,
    cpus_in_runs,
    from_bits,
    pick,
    pick_unit_nodes,
    unit_allocation,
)

#: The first window of grouped ends, and its alignment (seconds).
END_WINDOW = 30
#: A year, Slurm's guess for a job without a limit that is past its end.
YEAR = 365 * 24 * 3600


class RunningEnd(NamedTuple):
    """A running job as the planner sees it: when it is expected to end, and how late it may run."""

    end: int
    key: int
    limit: int | None = None  # its time limit in seconds (None: UNLIMITED)
    over_time: int | None = 0  # OverTimeLimit in minutes that applies to it (None: UNLIMITED)


@dataclass(frozen=True, slots=True)
class Estimate:
    """Where and when a queued job would start: its nodes (a bit set), and what it would hold on them.

    `held` None stands for one CPU on each node (nodes of one CPU), built by
    `allocation()` only for a job that starts: most estimates only reserve.
    """

    start: int
    nodes: int
    held: Allocation | None = None

    def allocation(self) -> Allocation:
        return self.held if self.held is not None else unit_allocation(self.nodes)


def _estimate(start: int, allocation: Allocation) -> Estimate:
    return Estimate(start, bits_of(allocation.nodes), allocation)


def guess_end(job: RunningEnd, now: int, kill_wait: int) -> int:
    """When a job already past its expected end will really end (_guess_job_end)."""
    if job.over_time is None:
        end = now + (job.limit if job.limit is not None else YEAR)
    else:
        end = job.end + kill_wait + job.over_time * 60
    return end if end > now else now + 1


def _batches(
    ends: Iterable[RunningEnd], holdings: Mapping[int, Holding], usable: int, scale: int
) -> Iterator[list[RunningEnd]]:
    """The running jobs that hold a `usable` node, in the groups _will_run_test frees them in (its loop, as
    written)."""
    queue = iter(ends)
    upcoming = next(queue, None)
    window, boundary = END_WINDOW, -1  # -1: not set until the first job on usable nodes
    while upcoming is not None:
        batch: list[RunningEnd] = []
        while upcoming is not None:
            job, upcoming = upcoming, next(queue, None)
            if not holdings[job.key].nodes & usable:
                continue  # no usable node: skipped, and the next job is taken whatever its end
            if boundary < 0:
                boundary = job.end + (window - job.end % window)
            batch.append(job)
            if upcoming is None or upcoming.end > boundary + window:
                break
        if not batch:
            return
        while True:
            window = window + scale if scale else window * 2
            if upcoming is None or upcoming.end <= boundary + window:
                break
        yield batch


def _least_gpus(demand: Demand) -> int:
    """The fewest free GPUs on the usable nodes that let `pick` place the job (a necessary condition only)."""
    spread = demand.gpus_per_node * demand.min_nodes if demand.gpus_per_node else demand.gpus_per_task * demand.tasks
    return max(demand.gpus_per_job, spread)


def earliest_start(
    demand: Demand,
    state: NodeState,
    ends: Iterable[RunningEnd],
    available: int,
    now: int,
    *,
    kill_wait: int = 30,
    window_scale: int = 0,
) -> Estimate | None:
    """When and where `demand` could start on the `available` nodes (a bit set) as Slurm estimates it (None:
    never, there).

    `ends` are the running jobs by expected end, earliest first (keys of
    `state.allocations`); `window_scale` is SchedulerParameters'
    bf_window_linear (0: windows double).
    """
    if state.table.unit_nodes and cpus_in_runs(demand):
        return _earliest_on_unit_nodes(demand.min_cpus, state, ends, available, now, kill_wait, window_scale)
    mask = from_bits(available, state.table.size)
    allocation = state.pick(demand, mask)
    if allocation is not None:
        return _estimate(now, allocation)
    # No job fits before the usable nodes have its CPUs and GPUs free: until then the batches' ends are counted,
    # not given back node by node, and no placement is tried (the answers are the same, far sooner).
    least_gpus = _least_gpus(demand)
    free_cpus = int(state.free.cpus[mask].sum())
    free_gpus = int(state.free.gpus[mask].sum()) if least_gpus else 0
    free = state.free.copy()
    freed: list[Allocation] = []
    holdings, allocations = state.holdings, state.allocations
    elsewhere = ~available
    for batch in _batches(ends, holdings, available, window_scale):
        for job in batch:
            held = holdings[job.key]
            ending = allocations[job.key]
            freed.append(ending)
            if held.nodes & elsewhere:  # partly on nodes the job may not use
                on_usable = mask[ending.nodes]
                free_cpus += int(ending.cpus[on_usable].sum())
                free_gpus += int(ending.gpus[on_usable].sum())
            else:
                free_cpus += held.cpus
                free_gpus += held.gpus
        if free_cpus < demand.min_cpus or free_gpus < least_gpus:
            continue
        free.add_all(freed)
        freed.clear()
        allocation = pick(demand, state.table, free, mask)
        if allocation is not None:
            last = batch[-1]
            start = guess_end(last, now, kill_wait) if last.end <= now else last.end
            return _estimate(start, allocation)
    return None


def _earliest_on_unit_nodes(
    cpus: int,
    state: NodeState,
    ends: Iterable[RunningEnd],
    usable: int,
    now: int,
    kill_wait: int,
    window_scale: int,
) -> Estimate | None:
    """`earliest_start` on nodes of one CPU for a job of `cpus` CPUs alone (`nodes.cpus_in_runs`): a node is free
    or not, so the nodes are bit sets, and after a batch that leaves fewer than `cpus` usable nodes free no nodes
    are chosen."""
    free = state.nodes_with_free_cpus() & usable
    if (chosen := pick_unit_nodes(cpus, free)) is not None:
        return Estimate(now, chosen)
    holdings = state.holdings
    for batch in _batches(ends, holdings, usable, window_scale):
        for job in batch:
            free |= holdings[job.key].nodes & usable
        if (chosen := pick_unit_nodes(cpus, free)) is None:
            continue
        last = batch[-1]
        return Estimate(guess_end(last, now, kill_wait) if last.end <= now else last.end, chosen)
    return None


class NodeSpace:
    """Slurm's backfill map: records [begin, end) with the nodes no reservation holds then.

    Built at a backfill cycle's start `now`: one record from `now` rounded
    down to `resolution` to `now + window` rounded down, holding every
    `available` node (a bit set).
    """

    def __init__(self, now: int, window: int, resolution: int, available: int) -> None:
        self.resolution = resolution
        begin = now // resolution * resolution
        end = (now + window) // resolution * resolution
        self.begins = [begin]
        self.ends = [end]
        self.nodes = [available]

    @property
    def window_end(self) -> int:
        return self.ends[-1]

    def free_over(self, start: int, end: int, usable: int) -> tuple[int, int]:
        """(nodes of `usable` free of reservations from `start` through `end`, later start or 0).

        A record counts if it ends after `start` and begins at or before
        `end`: a reservation beginning exactly at the job's end blocks it.
        The later start is the end of the first record from `start` on after
        which more of `usable` nodes become free: where the backfill
        scheduler tries the job again when it does not fit here.
        """
        free = usable
        later = 0
        count = len(self.begins)
        for position in range(count):
            record_end = self.ends[position]
            if record_end <= start:
                continue
            if not later and position + 1 < count:
                following = usable & self.nodes[position + 1]
                if following & ~(free & self.nodes[position]):
                    later = record_end
            if self.begins[position] > end:
                break
            free &= self.nodes[position]
        return free, later

    def overlaps(self, chosen: int, start: int, end: int) -> bool:
        """Whether `chosen` nodes are reserved at some time in [start, end) (_test_resv_overlap)."""
        for begin, record_end, nodes in zip(self.begins, self.ends, self.nodes, strict=True):
            if begin >= end:
                break
            if record_end > start and chosen & ~nodes:
                return True
        return False

    def reserve(self, start: int, end: int, chosen: int) -> None:
        """Hold `chosen` nodes over [start, end) (_add_reservation), at least one resolution long.

        The caller rounds `start` and `end` down to the resolution, as the
        backfill scheduler does before reserving.
        """
        start = max(start, self.begins[0])
        end = max(end, start + self.resolution)
        first = self._split(start)
        if first is None:
            return
        last = self._split(end)
        stop = len(self.begins) if last is None else last
        keep = ~chosen
        for position in range(first, stop):
            self.nodes[position] &= keep
        self._merge_one(max(first - 1, 0), stop)

    def _split(self, time: int) -> int | None:
        """The index of the record beginning at `time`, splitting the record containing it (None: past the map)."""
        for position, (begin, end) in enumerate(zip(self.begins, self.ends, strict=True)):
            if begin == time:
                return position
            if begin < time < end:
                self.begins.insert(position + 1, time)
                self.ends.insert(position + 1, end)
                self.nodes.insert(position + 1, self.nodes[position])
                self.ends[position] = time
                return position + 1
        return None

    def _merge_one(self, first: int, stop: int) -> None:
        """Merge the first pair of neighbours with equal nodes in [first, stop] (Slurm drops up to one record)."""
        for position in range(first, min(stop, len(self.begins) - 1)):
            if self.nodes[position] == self.nodes[position + 1]:
                self.ends[position] = self.ends[position + 1]
                del self.begins[position + 1], self.ends[position + 1], self.nodes[position + 1]
                return

    def records(self) -> list[tuple[int, int, int]]:
        """(begin, end, free nodes) of every record, in time order."""
        return list(zip(self.begins, self.ends, self.nodes, strict=True))
