"""The simulator's one event loop: a clock, a heap of events, and a scheduler's pass at each instant.

Modelled on SimPy's `Environment` (`now`, `step()`, `run(until)`, a heap of
(time, priority, id, event)), with the batch scheduler's rule built in. Time is
integer seconds. An event has a kind, and at one time the events are handled
in kind order (`EventKind`), then by rank, then in the order they were
scheduled: completions release their resources, external events change the
machine, the arrivals are admitted together (a driver predicts them in one
call, after learning the completions), and then the scheduler makes one pass.
That is a round; a job that starts and ends at the same time ends in a second
round at that time, which has its own pass. When the last round at a time is
over, the observers are told that the instant is settled.

The loop never knows how long a job runs: its driver (a subclass) says when a
started job ends (`completion_time`; the engine from the trace's actual
runtimes, a forecast from its assumptions) and what an arrival is as a waiting
job (`admit`). The scheduler sees neither. Wake-ups come from the scheduler
(`BatchScheduler.wake_time`: a reservation's start); a wake-up that a later
pass moves is cancelled, so that no pass runs where the scheduler did not ask
for one.

What a batch system adds fits these hooks: a scheduler with periodic cycles
(Slurm's backfill every `bf_interval`) answers `wake_time` with its next cycle;
limits enforced on a sweep are the driver's `completion_time` (the first sweep
after the limit); nodes going down or drained, and reservations, are external
events; a machine of nodes is a `simulator.machine.Machine`.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import IntEnum
from itertools import count
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from simulator.jobs import WaitingJob


class EventKind(IntEnum):
    """What an event is; events at one time are handled in this order."""

    COMPLETION = 0  # a running job ends (payload: its trace index)
    EXTERNAL = 1  # anything else that changes the machine or the scheduler (`Simulation.external`)
    ARRIVAL = 2  # a job is submitted (payload: whatever the driver admits)
    WAKE = 3  # the scheduler asked for a pass now (no payload)


class Event(NamedTuple):
    """A scheduled event; its fields order the heap (the id is unique, so the payload is never compared)."""

    time: int
    kind: EventKind
    rank: int
    id: int
    payload: Any


#: The kinds as module constants: the loop compares them at every event, and an enum's class attribute is slow to read.
_COMPLETION, _EXTERNAL, _ARRIVAL, _WAKE = EventKind.COMPLETION, EventKind.EXTERNAL, EventKind.ARRIVAL, EventKind.WAKE
#: What the heap holds: an `Event`, or for the loop's own completions the plain tuple of its fields (cheaper to make).
_Entry = tuple[int, EventKind, int, int, Any]


class BatchScheduler(Protocol):
    """What the loop asks of a scheduler (`simulator.scheduler.QueueScheduler` is one)."""

    def __len__(self) -> int:
        """How many jobs wait."""
        ...

    def submit(self, job: WaitingJob) -> None: ...

    def finish(self, index: int) -> None: ...

    def schedule(self, now: int, submitted: bool, completed: bool) -> list[WaitingJob]:
        """One pass: the jobs it started."""
        ...

    def wake_time(self) -> int | None:
        """When a pass must run even if nothing happens (None: only at events)."""
        ...


class Observer:
    """Something that watches a simulation as it runs (e.g. `wait-eval`'s questions); it changes nothing."""

    def admitted(self, now: int, completed: Sequence[int], submitted: Sequence[WaitingJob]) -> None:
        """A round's completions are applied and its arrivals queued; its pass has not run yet."""

    def settled(self, now: int) -> None:
        """Every round at `now` is over: the state the scheduler leaves until the next event."""


class Round(NamedTuple):
    """What one round did: the time, the jobs that ended, the jobs admitted, the jobs the pass started."""

    time: int
    completed: list[int]
    submitted: list[WaitingJob]
    started: list[WaitingJob]


Arrival = TypeVar("Arrival")
Scheduler = TypeVar("Scheduler", bound=BatchScheduler)


class Simulation(ABC, Generic[Arrival, Scheduler]):
    """A scheduler driven through time by events, from `start`; `Arrival` is what an arrival event carries."""

    def __init__(self, scheduler: Scheduler, start: int = 0) -> None:
        self.now = start
        self.scheduler = scheduler
        self.observers: list[Observer] = []
        self._heap: list[_Entry] = []
        self._ids = count()
        self._cancelled: set[int] = set()
        self._wake: Event | None = None
        self._ends: dict[int, tuple[int, int]] = {}  # a running job's completion: (time, event id), by job index

    @abstractmethod
    def admit(self, completed: list[int], arrived: list[Arrival]) -> list[WaitingJob]:
        """The waiting jobs that the round's arrivals become, once its completions are applied."""

    @abstractmethod
    def completion_time(self, job: WaitingJob) -> int:
        """When `job`, which starts now, will end."""

    def external(self, payload: Any) -> None:
        """Apply an external event (a node going down, a reservation); a driver that schedules them says how."""
        raise NotImplementedError(f"{type(self).__name__} has no external events, got {payload!r}")

    def schedule(self, time: int, kind: EventKind, payload: Any = None, rank: int = 0) -> Event:
        """Add an event at `time` (not before now); a lower `rank` goes first among events of its kind then."""
        if time < self.now:
            raise ValueError(f"cannot schedule an event at {time}, before now ({self.now})")
        event = Event(time, kind, rank, next(self._ids), payload)
        heapq.heappush(self._heap, event)
        if kind is _COMPLETION:
            self._ends[payload] = (time, event.id)
        return event

    def end_now(self, index: int) -> None:
        """End the running job `index` in this round instead of at its completion (a node under it failed)."""
        time, number = self._ends[index]
        if time == self.now:
            return
        self._cancelled.add(number)
        number = next(self._ids)
        heapq.heappush(self._heap, (self.now, _COMPLETION, index, number, index))
        self._ends[index] = (self.now, number)

    def cancel(self, event: Event) -> None:
        """Drop a scheduled event (it is skipped when its time comes)."""
        self._cancelled.add(event.id)

    def peek(self) -> int | None:
        """The time of the next event; None if there is none."""
        heap, cancelled = self._heap, self._cancelled
        while heap and cancelled and heap[0][3] in cancelled:
            cancelled.discard(heapq.heappop(heap)[3])
        return heap[0][0] if heap else None

    def run(self, until: int | None = None) -> None:
        """Step until no event is left, or until the next one is at or after `until` (then the clock is there)."""
        while (time := self.peek()) is not None and (until is None or time < until):
            self._round(time)
        if until is not None and until > self.now:
            self.now = until

    def step(self) -> Round:
        """One round: every event due at the next time, then one scheduling pass."""
        now = self.peek()
        if now is None:
            raise IndexError("no event left to step to")
        return Round(*self._round(now))

    def _round(self, now: int) -> tuple[int, list[int], list[WaitingJob], list[WaitingJob]]:
        """The round at `now`, the time of the next event, as a plain tuple (`run` makes no `Round` it would drop)."""
        self.now = now
        completed, arrived = self._pop_round(now)
        scheduler = self.scheduler
        submitted = self.admit(completed, arrived)
        for job in submitted:
            scheduler.submit(job)
        for observer in self.observers:
            observer.admitted(now, completed, submitted)
        started = scheduler.schedule(now, bool(submitted), bool(completed))
        heap, ids, completion_time = self._heap, self._ids, self.completion_time
        ends = self._ends
        for job in started:  # `schedule`'s event, made as a plain tuple; an end is never before now
            end, number = completion_time(job), next(ids)
            heapq.heappush(heap, (end, _COMPLETION, job.index, number, job.index))
            ends[job.index] = (end, number)
        wake = scheduler.wake_time()
        if wake is not None or self._wake is not None:
            self._rearm(now, wake)
        if self.observers and self.peek() != now:
            for observer in self.observers:
                observer.settled(now)
        return now, completed, submitted, started

    def _pop_round(self, now: int) -> tuple[list[int], list[Arrival]]:
        """Take every event due at `now` off the heap and apply the completions and external events in order; the
        jobs that ended, and the arrivals."""
        heap, cancelled, finish = self._heap, self._cancelled, self.scheduler.finish
        completed: list[int] = []
        arrived: list[Arrival] = []
        while heap and heap[0][0] == now:
            _, kind, _, number, payload = heapq.heappop(heap)
            if number in cancelled:
                cancelled.discard(number)
            elif kind is _COMPLETION:
                del self._ends[payload]
                finish(payload)
                completed.append(payload)
            elif kind is _ARRIVAL:
                arrived.append(payload)
            elif kind is _EXTERNAL:
                self.external(payload)
        return completed, arrived

    def _rearm(self, now: int, wake: int | None) -> None:
        """Keep one wake-up, at `wake`: a pass must run then even if nothing else happens."""
        if wake is not None and wake <= now:
            raise AssertionError(f"the scheduler left a job reserved at {wake} unstarted at {now}")
        current = self._wake
        if current is not None and current.time == wake:
            return
        if current is not None and current.time > now:  # not yet due (a due one was taken off with its round)
            self.cancel(current)
        self._wake = None if wake is None else self.schedule(wake, _WAKE)
