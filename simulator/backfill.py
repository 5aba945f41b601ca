"""Backfilling: which waiting jobs start at a scheduling pass.

Each strategy takes the queue in the policy's order and the machine, and
returns the jobs to start now. They follow the Mu'alem & Feitelson digest:
- none: start jobs in order while the next one fits;
- EASY: a later job may start if it does not delay the head job's reservation
  (shadow time and extra processors);
- conservative: every waiting job holds a reservation; a job may start early
  only if it delays no reservation; reservations are compressed (moved earlier,
  never later) whenever the profile frees up.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right

from simulator.jobs import WaitingJob
from simulator.machine import Machine

BACKFILLS = ("none", "easy", "conservative")


class Backfill(ABC):
    """A way of choosing, at time `now`, the waiting jobs to start."""

    name: str

    @abstractmethod
    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        """Jobs to start now, in start order. Does not change `machine`."""

    def forget(self, job: WaitingJob) -> None:
        """`job` has left the queue (started)."""


class NoBackfill(Backfill):
    """Strict priority order: stop at the first job that does not fit."""

    name = "none"

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        free = machine.free
        started = []
        for job in queue:
            if job.size > free:
                break
            started.append(job)
            free -= job.size
        return started


class EasyBackfill(Backfill):
    """EASY (aggressive) backfilling: only the head job is protected."""

    name = "easy"

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        free = machine.free
        started: list[WaitingJob] = []
        position = 0
        while position < len(queue) and queue[position].size <= free:
            started.append(queue[position])
            free -= queue[position].size
            position += 1
        if position >= len(queue) or free == 0:
            return started
        head = queue[position]
        shadow, extra = self._shadow(now, head.size, free, machine, started)
        for job in queue[position + 1:]:
            size = job.size
            if size > free:
                continue
            if now + job.t_est <= shadow:
                started.append(job)
                free -= size
            elif size <= extra:
                started.append(job)
                free -= size
                extra -= size
            if free == 0:
                break
        return started

    @staticmethod
    def _shadow(now: int, need: int, free: int, machine: Machine,
                just_started: list[WaitingJob]) -> tuple[int, int]:
        """When enough processors free up for the head job, and how many spare ones then.

        Every job expected to end at the shadow time counts towards the extra
        processors, whatever order the ties come in.
        """
        ends = sorted((now + machine.planned_runtime(job), job.size) for job in just_started)
        available = free
        shadow = None
        for end, size in _merge_sorted(machine.expected_releases(), ends):
            if shadow is not None and end > shadow:
                break
            available += size
            if shadow is None and available >= need:
                shadow = end
        if shadow is None:
            raise AssertionError("head job larger than the machine")  # jobs are checked against procs
        return shadow, available - need


def _merge_sorted(first, second):
    """Merge two iterables of (time, size) already sorted by time."""
    second = iter(second)
    pending = next(second, None)
    for item in first:
        while pending is not None and pending[0] < item[0]:
            yield pending
            pending = next(second, None)
        yield item
    while pending is not None:
        yield pending
        pending = next(second, None)


class Profile:
    """Free processors over future time, as a step function.

    `times[i]` starts a step with `free[i]` processors free until `times[i+1]`;
    the last step lasts forever.
    """

    __slots__ = ("times", "free")

    def __init__(self, now: int, free_now: int, releases: list[tuple[int, int]]) -> None:
        """Start from `free_now` at `now`; each (time, size) in `releases` frees processors then."""
        times = [now]
        free = [free_now]
        for time, size in sorted(releases):
            if time <= times[-1]:
                free[-1] += size
            else:
                times.append(time)
                free.append(free[-1] + size)
        self.times = times
        self.free = free

    def earliest(self, start_from: int, size: int, duration: int) -> int:
        """The first time >= start_from when `size` processors stay free for `duration`."""
        times, free = self.times, self.free
        count = len(times)
        i = max(0, bisect_right(times, start_from) - 1)
        while True:
            while free[i] < size:
                i += 1  # the last step has every processor free, so this stops
            anchor = max(times[i], start_from)
            end = anchor + duration
            j = i + 1
            while j < count and times[j] < end and free[j] >= size:
                j += 1
            if j == count or times[j] >= end:
                return anchor
            i = j

    def _split(self, time: int) -> int:
        """Make `time` a step boundary; return its index."""
        times = self.times
        i = bisect_left(times, time)
        if i < len(times) and times[i] == time:
            return i
        self.times.insert(i, time)
        self.free.insert(i, self.free[i - 1])
        return i

    def reserve(self, start: int, duration: int, size: int) -> None:
        """Take `size` processors over [start, start + duration)."""
        first = self._split(start)
        last = self._split(start + duration)
        free = self.free
        for k in range(first, last):
            free[k] -= size

    def release(self, start: int, duration: int, size: int) -> None:
        """Give back a reservation made with `reserve`."""
        self.reserve(start, duration, -size)


class ConservativeBackfill(Backfill):
    """Conservative backfilling: every waiting job has a reservation no later job may delay."""

    name = "conservative"

    def __init__(self) -> None:
        self._reserved: dict[int, int] = {}  # trace index -> reserved start

    def forget(self, job: WaitingJob) -> None:
        self._reserved.pop(job.index, None)

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        profile = Profile(now, machine.free, machine.expected_releases())
        reserved = self._reserved
        held: list[WaitingJob] = []
        unplaced: list[WaitingJob] = []
        # Keep every reservation that is still feasible; an underestimated job
        # that overran can make one infeasible, and that job is placed anew.
        for job in sorted((j for j in queue if j.index in reserved), key=lambda j: reserved[j.index]):
            start = max(reserved[job.index], now)
            if profile.earliest(start, job.size, job.t_est) == start:
                profile.reserve(start, job.t_est, job.size)
                reserved[job.index] = start
                held.append(job)
            else:
                unplaced.append(job)
        # Compression: in priority order, move each reservation to its earliest
        # feasible start; its own old slot is feasible, so it never moves later.
        held_set = {j.index for j in held}
        for job in queue:
            if job.index not in held_set:
                continue
            old = reserved[job.index]
            if old == now:
                continue
            profile.release(old, job.t_est, job.size)
            start = profile.earliest(now, job.size, job.t_est)
            profile.reserve(start, job.t_est, job.size)
            reserved[job.index] = start
        # New arrivals (and displaced jobs) get the earliest slot left, in priority order.
        unplaced_set = {j.index for j in unplaced}
        for job in queue:
            if job.index in reserved and job.index not in unplaced_set:
                continue
            start = profile.earliest(now, job.size, job.t_est)
            profile.reserve(start, job.t_est, job.size)
            reserved[job.index] = start
        return [job for job in queue if reserved[job.index] == now]


def make_backfill(name: str) -> Backfill:
    """The backfilling strategy called `name` (none, easy, conservative)."""
    classes = {"none": NoBackfill, "easy": EasyBackfill, "conservative": ConservativeBackfill}
    if name not in classes:
        raise ValueError(f"unknown backfilling {name!r}; choose one of {', '.join(BACKFILLS)}")
    return classes[name]()
