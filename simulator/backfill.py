"""Backfilling: which waiting jobs start at a scheduling pass.

Each strategy takes the queue in the policy's order and the machine, and
returns the jobs to start now. They follow the Mu'alem & Feitelson digest:
- none: start jobs in order while the next one fits;
- EASY: a later job may start if it does not delay the head job's reservation
  (shadow time and extra processors);
- conservative: every waiting job holds a reservation; a job may start early
  only if it delays no reservation; reservations are compressed (moved earlier,
  never later) whenever the profile frees up;
- replan: Streit's planning-based CCS: reservations as in conservative
  backfilling, but the whole plan is rebuilt in the queue's order at every
  job end, so a reservation can move later.

The backfill order says which waiting jobs are tried first for room that the
queue order leaves: `queue` (the policy's order) or `sjf` (shortest estimate
first, EASY-SJBF).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedKeyList

from simulator.jobs import WaitingJob
from simulator.machine import Machine
from simulator.policies import shortest_first

BACKFILLS = ("none", "easy", "conservative", "replan")
BACKFILL_ORDERS = ("queue", "sjf")
#: Strategies a backfill order cannot act on: without backfilling no job is tried out of order, and a plan
#: rebuilt at every job end is never compressed.
ORDERLESS = ("none", "replan")
#: EASY's default bound, in seconds, on how far past its first reservation a head job's start may be pushed
#: by backfilled jobs that outlive their estimates before candidates are judged with their requests. None (no
#: bound: EASY++ as Tsafrir et al. and Gaussier et al. published it) until the figures in the docs, all made
#: without a bound, are made again (docs/scheduling-value.md measures the bound: "Starvation").
DEFAULT_MAX_RESERVATION_DELAY: int | None = None


class Backfill(ABC):
    """A way of choosing, at time `now`, the waiting jobs to start."""

    name: str
    #: Whether a pass with no free processor can be skipped: true unless the
    #: strategy plans reservations that must be kept up to date.
    idle_when_full: bool = True

    def __init__(self, order: str = "queue") -> None:
        if order not in BACKFILL_ORDERS:
            raise ValueError(f"unknown backfill order {order!r}; choose one of {', '.join(BACKFILL_ORDERS)}")
        # Under `sjf`, the waiting jobs shortest estimate first, kept sorted as jobs come and go
        # (the key is fixed at submission), so that a pass never sorts the queue.
        self._shortest: SortedKeyList | None = SortedKeyList(key=shortest_first) if order == "sjf" else None

    @abstractmethod
    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        """Jobs to start now, in start order. Does not change `machine`."""

    def plan(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[int]:
        """The start each job of `queue` is planned for if this pass takes the queue in that order; changes nothing.

        dynP's virtual schedule. Without reservations of its own (none, EASY)
        it is Streit's: every job in turn at its earliest slot after the
        running jobs' expected ends.
        """
        return virtual_starts(Profile(now, machine.free, machine.expected_releases()), queue)

    def admit(self, job: WaitingJob) -> None:
        """`job` has joined the queue."""
        if self._shortest is not None:
            self._shortest.add(job)

    def forget(self, job: WaitingJob) -> None:
        """`job` has left the queue (started)."""
        if self._shortest is not None:
            self._shortest.remove(job)

    def wake_time(self) -> int | None:
        """A future time at which a pass must run even if no job arrives or ends.

        Conservative backfilling promises start times; a reservation can fall
        between events (compression moved it there), and the scheduler must
        wake up to honour it.
        """
        return None


class NoBackfill(Backfill):
    """Strict priority order: stop at the first job that does not fit."""

    name = "none"

    def __init__(self, order: str = "queue") -> None:
        if order != "queue":
            raise ValueError(f"backfill order {order!r} needs backfilling (easy or conservative), not 'none'")
        super().__init__(order)

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
    """EASY (aggressive) backfilling: only the head job is protected.

    The head is the first job of the queue order that does not fit; the jobs
    behind it are tried in the backfill order (under `sjf`, whatever the
    queue policy: EASY-SJBF).

    With predictions, a backfilled job that outlives its estimate (or, in
    selective mode, is planned with its request once it runs) holds
    processors past the head's shadow, and the shadow moves
    later; a head can be pushed back again and again, and wide jobs starve.
    `max_reservation_delay` bounds that: once the head's shadow lies more than
    that many seconds after its first reservation (the shadow when it first
    became the head), every later candidate is judged with its request
    instead of its estimate until the head starts, so no job backfilled from
    then on can delay it. Jobs are killed at their request, so the head then
    waits at most for the jobs already running. None keeps the estimates
    whatever the delay (Tsafrir et al.'s EASY++ as published).
    """

    name = "easy"

    def __init__(self, order: str = "queue", max_reservation_delay: int | None = DEFAULT_MAX_RESERVATION_DELAY) -> None:
        super().__init__(order)
        if max_reservation_delay is not None and max_reservation_delay < 0:
            raise ValueError(f"the longest reservation delay must be >= 0 seconds; got {max_reservation_delay}")
        self.max_reservation_delay = max_reservation_delay
        self._first_shadow: dict[int, int] = {}  # trace index of a head -> its shadow when it first became head
        self._at_request: set[int] = set()  # heads delayed past the bound: candidates are judged with t_req

    def forget(self, job: WaitingJob) -> None:
        super().forget(job)
        if self._first_shadow:  # only with a bound
            self._first_shadow.pop(job.index, None)
            self._at_request.discard(job.index)

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
        shadow: int | None = None  # computed when the first job small enough to backfill comes up
        extra = 0
        if self.max_reservation_delay is not None and head.index not in self._first_shadow:
            shadow, extra = self._shadow(now, head.size, free, machine, started)
            self._first_shadow[head.index] = shadow  # the head's first reservation, whether or not a job fits
        at_request = False
        for job in self._behind(queue, position):
            size = job.size
            if size > free:
                continue
            if shadow is None:
                shadow, extra = self._shadow(now, head.size, free, machine, started)
            if not at_request:
                at_request = self._delayed_too_long(head.index, shadow)
            if now + (job.t_req if at_request else job.t_est) <= shadow:
                started.append(job)
                free -= size
            elif size <= extra:
                started.append(job)
                free -= size
                extra -= size
            if free == 0:
                break
        return started

    def _delayed_too_long(self, head: int, shadow: int) -> bool:
        """Whether the head's shadow has moved past its first one by more than the bound (and stays so marked)."""
        bound = self.max_reservation_delay
        if bound is None:
            return False
        if head not in self._at_request and shadow - self._first_shadow[head] > bound:
            self._at_request.add(head)
        return head in self._at_request

    def _behind(self, queue: list[WaitingJob], head: int) -> Iterable[WaitingJob]:
        """The jobs queued behind position `head`, in backfill order."""
        if self._shortest is None:
            return queue[head + 1 :]
        ahead = {job.index for job in queue[: head + 1]}
        return (job for job in self._shortest if job.index not in ahead)

    @staticmethod
    def _shadow(now: int, need: int, free: int, machine: Machine, just_started: list[WaitingJob]) -> tuple[int, int]:
        """When enough processors free up for the head job, and how many spare ones then.

        Every job expected to end at the shadow time counts towards the extra
        processors, whatever order the ties come in.
        """
        releases: Iterable[tuple[int, int]] = machine.expected_releases()
        if just_started:
            ends = sorted((now + machine.planned_runtime(job), job.size) for job in just_started)
            releases = _merge_sorted(releases, ends)
        available = free
        shadow = None
        for end, size in releases:
            if shadow is not None and end > shadow:
                break
            available += size
            if shadow is None and available >= need:
                shadow = end
        if shadow is None:
            raise AssertionError("head job larger than the machine")  # jobs are checked against procs
        return shadow, available - need


def _merge_sorted(first: Iterable[tuple[int, int]], second: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Merge two iterables of (time, size) already sorted by time."""
    rest = iter(second)
    pending = next(rest, None)
    for item in first:
        while pending is not None and pending[0] < item[0]:
            yield pending
            pending = next(rest, None)
        yield item
    while pending is not None:
        yield pending
        pending = next(rest, None)


class Profile:
    """Free processors over future time, as a step function.

    `times[i]` starts a step with `free[i]` processors free until `times[i+1]`;
    the last step lasts forever.
    """

    __slots__ = ("free", "times")

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

    def place(self, size: int, duration: int) -> int:
        """Reserve `size` processors for `duration` (>= 1) at the earliest time they are free; return that time.

        The same slot as `earliest` from the profile's first step followed by
        `reserve`, found and taken in one scan: every reservation is made from
        "now", and a virtual schedule makes one per waiting job.
        """
        times, free = self.times, self.free
        count = len(times)
        i = 0
        while True:
            while free[i] < size:
                i += 1  # the last step has every processor free, so this stops
            start = times[i]
            end = start + duration
            j = i + 1
            while j < count and times[j] < end and free[j] >= size:
                j += 1
            if j == count or times[j] >= end:
                break
            i = j
        # The slot is steps i..j-1, `end` falls in step j-1: make it a boundary, take the processors, and merge
        # the two ends if they became redundant (as `reserve` does).
        if j == count or times[j] != end:
            times.insert(j, end)
            free.insert(j, free[j - 1])
        for k in range(i, j):
            free[k] -= size
        if free[j] == free[j - 1]:
            del times[j], free[j]
        if i > 0 and free[i] == free[i - 1]:
            del times[i], free[i]
        return start

    def earlier_slot(self, size: int, duration: int, held_step: int, first: int) -> int | None:
        """The step of the earliest start before step `held_step` at which `size` processors are free for
        `duration`, for a job that holds them from that step on (its own hold counts as free); None if none.

        `place` after releasing the job's hold finds the same start, or the
        hold's; this finds it without the release, so that a job that cannot
        move costs a scan and no change. `first` is the first step with `size`
        processors free.

        A profile being compressed is never overbooked, so a start in the run
        of steps with room that reaches `held_step` continues into the job's own
        hold: the run's first step is a start. An earlier one must fit wholly
        before the step without room that precedes that run, and is looked
        for only if a job started at `first` would end by then. Compression
        mostly moves a job by a step or two, so the scan is mostly that short.
        """
        times, free = self.times, self.free
        if first >= held_step:
            return None
        run = held_step
        while run > first and free[run - 1] >= size:
            run -= 1
        if run == first:
            return first
        latest_end = times[run - 1]  # step run - 1 lacks room
        i = first
        while i < run:
            if free[i] < size:
                i += 1
                continue
            end = times[i] + duration
            if end > latest_end:
                break  # and so would every later start
            j = i + 1
            while times[j] < end and free[j] >= size:  # stops at run - 1 at the latest
                j += 1
            if times[j] >= end:
                return i
            i = j
        return run if run < held_step else None

    def copy(self) -> Profile:
        """An independent profile with the same steps (a virtual schedule is planned on a copy)."""
        twin = Profile.__new__(Profile)
        twin.times = list(self.times)
        twin.free = list(self.free)
        return twin

    def reserve(self, start: int, duration: int, size: int) -> None:
        """Take `size` processors over [start, start + duration)."""
        self._take(start, start + duration, size)

    def release(self, start: int, duration: int, size: int) -> None:
        """Give back a reservation made with `reserve`."""
        self._take(start, start + duration, -size)

    def move(self, old: int, start: int, duration: int, size: int) -> None:
        """Move a reservation of `size` for `duration` from `old` to the earlier `start`.

        The same profile as `release` at `old` then `reserve` at `start`, but
        only the steps where the two slots differ change: compression mostly
        moves a job by a little, and the long overlap stays as it is.
        """
        new_end = start + duration
        if new_end > old:  # the slots overlap from `old` to `new_end`
            self._take(start, old, size)
            self._take(new_end, old + duration, -size)
        else:
            self._take(start, new_end, size)
            self._take(old, old + duration, -size)

    def _take(self, begin: int, end: int, size: int) -> None:
        """Take `size` processors (give back if negative) over [begin, end), `begin` not before the first step.

        Compression calls this twice per move, so the two new step
        boundaries are made here rather than by a helper called for each.
        """
        times, free = self.times, self.free
        first = bisect_left(times, begin)
        if first == len(times) or times[first] != begin:
            times.insert(first, begin)
            free.insert(first, free[first - 1])
        last = bisect_left(times, end, first)
        if last == len(times) or times[last] != end:
            times.insert(last, end)
            free.insert(last, free[last - 1])
        for k in range(first, last):
            free[k] -= size
        # Only the two ends can have become redundant; merging them keeps the
        # profile at most two steps per job however many changes it sees.
        if last < len(free) and free[last] == free[last - 1]:
            del times[last], free[last]
        if first > 0 and free[first] == free[first - 1]:
            del times[first], free[first]

    def advance(self, now: int) -> None:
        """Drop the steps that lie wholly in the past."""
        i = bisect_right(self.times, now) - 1
        if i > 0:
            del self.times[:i]
            del self.free[:i]
        self.times[0] = max(self.times[0], now)

    def extend_room(self, room: list[int], through: int) -> None:
        """Extend `room`, the most processors free at each step or any earlier one for the first steps, through
        step `through`."""
        free = self.free
        peak = room[-1] if room else free[0]
        # mostly a step or two: a loop costs less than `accumulate`, and a comparison less than calling `max`
        for step in range(len(room), through + 1):
            if free[step] > peak:  # noqa: PLR1730
                peak = free[step]
            room.append(peak)

    def overbooked(self) -> bool:
        """Whether more processors are promised than exist at some time."""
        return min(self.free) < 0


def virtual_starts(base: Profile, jobs: Iterable[WaitingJob]) -> list[int]:
    """Start times of `jobs` planned in this order on a copy of `base`, each at its earliest slot for t_est."""
    plan = base.copy()
    return [plan.place(job.size, job.t_est) for job in jobs]


#: A conservative plan: the profile, the reservations, the running jobs' holds, whether a hold grew.
_PlanState = tuple[Profile | None, dict[int, int], dict[int, tuple[int, int]], bool]


def _pass_key(now: int, queue: list[WaitingJob], machine: Machine) -> tuple[int, int, tuple[int, ...]]:
    """What a pass's outcome depends on beyond the plan itself: the time, the machine, the order."""
    return now, machine.free, tuple(job.index for job in queue)


class ConservativeBackfill(Backfill):
    """Conservative backfilling: every waiting job has a reservation no later job may delay.

    The profile of expected free processors persists between passes and is
    updated incrementally: a job that ends before its expected end gives its
    remaining time back and triggers compression; a new job is inserted at
    its earliest feasible slot. Only when the scheduler learns that a running
    job will use more time than its slot held (an overrun in regular mode, or
    a job seen with t_req once it runs in selective mode) and that makes some
    reservation infeasible is the plan rebuilt from the machine's state, in
    priority order.

    The backfill order is the order of compression, the moment room freed by
    an early end is handed out: `sjf` offers it to the shortest jobs first.
    Either way a job only moves to a slot that delays no other reservation.
    New jobs are placed, and a plan is rebuilt, in the queue policy's order.
    """

    name = "conservative"
    idle_when_full = False

    def __init__(self, order: str = "queue") -> None:
        super().__init__(order)
        self._profile: Profile | None = None  # made at the first pass, from the machine and its running jobs then
        self._reserved: dict[int, int] = {}  # trace index -> reserved start
        self._running: dict[int, tuple[int, int]] = {}  # trace index -> (expected end, size) in the profile
        self._held_longer = False  # a running job's hold grew since the plan was last checked
        # Dry runs of the coming pass (`plan`): (now, free processors, order) -> the state after it, and the jobs
        # it started. The pass that follows in one of those orders takes its outcome instead of computing it again.
        self._dry_runs: dict[tuple[int, int, tuple[int, ...]], tuple[_PlanState, list[WaitingJob]]] = {}

    def forget(self, job: WaitingJob) -> None:
        super().forget(job)
        self._reserved.pop(job.index, None)

    def wake_time(self) -> int | None:
        return min(self._reserved.values(), default=None)

    def select(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        dry_run = None
        if self._dry_runs:  # only a dynP policy plans before a pass
            dry_run = self._dry_runs.pop(_pass_key(now, queue, machine), None)
            self._dry_runs.clear()
        if dry_run is not None:
            state, started = dry_run
            self._profile, self._reserved, self._running, self._held_longer = state
            return started
        return self._pass(now, queue, machine)

    def _pass(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        """Bring the plan up to date, place the new jobs, and start the jobs reserved for now."""
        profile = self._profile
        if profile is None:  # the first pass, maybe on a machine already running jobs (a forecast's)
            profile = self._rebuild(now, machine)
        compress = self._learn_from_machine(profile, now, machine)
        profile.advance(now)
        # A grown hold may have made a reservation infeasible; if the job has ended since, it did not.
        replan = self._held_longer and profile.overbooked()
        self._held_longer = False
        if replan:
            profile = self._rebuild(now, machine)
        elif compress:
            self._compress(profile, queue if self._shortest is None else self._shortest)
        reserved = self._reserved
        for job in [job for job in queue if job.index not in reserved]:  # new since the last pass, in queue order
            reserved[job.index] = profile.place(job.size, job.t_est)
        started = [job for job in queue if reserved[job.index] == now]
        for job in started:
            planned_end = now + machine.planned_runtime(job)
            self._hold(profile, now + job.t_est, planned_end, job.size)
            self._running[job.index] = (planned_end, job.size)
        return started

    def plan(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[int]:
        """The reservations this pass would hold in the order of `queue`: a dry run of `select` on the plan kept.

        Reservations made earlier stay where they are unless compression moves
        them, so an order shows only in what this pass would compress and place.
        """
        profile = self._profile
        saved = (profile and profile.copy(), dict(self._reserved), dict(self._running), self._held_longer)
        started = self._pass(now, queue, machine)
        starts = [self._reserved[job.index] for job in queue]
        after = (self._profile, self._reserved, self._running, self._held_longer)
        self._dry_runs[_pass_key(now, queue, machine)] = (after, started)
        self._profile, self._reserved, self._running, self._held_longer = saved
        return starts

    def _hold(self, profile: Profile, old_end: int, new_end: int, size: int) -> None:
        """A running job will hold its processors until `new_end`, not `old_end`."""
        if new_end > old_end:
            profile.reserve(old_end, new_end - old_end, size)
            self._held_longer = True

    def _learn_from_machine(self, profile: Profile, now: int, machine: Machine) -> bool:
        """Apply completions and expected-end corrections; true if time was given back."""
        gave_back = False
        # every job the machine runs was started by a pass of this plan (or was there at its rebuild): the same
        # count means that none has ended
        ended = self._running.keys() - machine.running.keys() if len(self._running) != len(machine.running) else ()
        for index in ended:
            expected_end, size = self._running.pop(index)
            if expected_end > now:
                profile.release(now, expected_end - now, size)
                gave_back = True
        if machine.planning.overruns:
            for index, (expected_end, size) in self._running.items():
                corrected = machine.running[index].expected_end
                if corrected != expected_end:
                    self._hold(profile, expected_end, corrected, size)
                    self._running[index] = (corrected, size)
        return gave_back

    def _compress(self, profile: Profile, jobs: Iterable[WaitingJob]) -> None:
        """In the order of `jobs`, move each reservation to its earliest feasible start.

        A job's own old slot stays feasible, so no job moves later. A job is
        looked at only when some step before its reservation has room for it:
        a prefix maximum of free processors answers that in O(log n) (kept for
        the steps before the last move, extended as later jobs need it). Then
        a scan from the first such step finds whether it can start earlier
        (`Profile.earlier_slot`); only a job that moves changes the profile.
        """
        reserved, times = self._reserved, profile.times
        room: list[int] = []  # prefix maxima of the free processors, for the steps before the last move
        for job in jobs:
            old = reserved.get(job.index)
            if old is None:  # placed after compression
                continue
            held_step = bisect_left(times, old)
            if held_step == 0:  # reserved for now
                continue
            size = job.size
            if len(room) < held_step:
                profile.extend_room(room, held_step - 1)
            if room[held_step - 1] < size:
                continue
            start_step = profile.earlier_slot(size, job.t_est, held_step, bisect_left(room, size, 0, held_step))
            if start_step is None:
                continue
            start = reserved[job.index] = times[start_step]
            profile.move(old, start, job.t_est, size)
            del room[start_step:]  # the steps before the new start are as they were

    def _rebuild(self, now: int, machine: Machine) -> Profile:
        """Plan again from the running jobs alone; `select` then places every waiting job anew.

        Placed in the policy's order, each job takes the earliest slot that
        delays no job before it. Keeping the reservations that still fit would
        leave later jobs ahead of a displaced earlier one, and a wide job could
        be displaced at every replan and starve.
        """
        profile = self._profile = Profile(now, machine.free, machine.expected_releases())
        self._running = {index: (r.expected_end, r.size) for index, r in machine.running.items()}
        self._reserved.clear()
        return profile


class ReplanBackfill(ConservativeBackfill):
    """Conservative backfilling as Streit's planning-based CCS does it: the plan is made again at every job end.

    Every waiting job holds a reservation and a new job takes its earliest
    slot, as under conservative backfilling; but whenever a job ends (early or
    not), the plan is rebuilt from the running jobs with every waiting job
    placed in the queue policy's order ("A rescheduling process is done every
    time a job ends", Streit 2003). So the policy orders the whole plan, and a
    reservation is no guarantee: a job can move later, and under SJF or LJF a
    job can be passed over again and again. dynP's virtual schedules are this
    plan, one per order.
    """

    name = "replan"

    def __init__(self, order: str = "queue") -> None:
        if order != "queue":
            raise ValueError(
                f"backfill order {order!r} has nothing to act on under 'replan': the plan is rebuilt in the queue's "
                "order at every job end, never compressed"
            )
        super().__init__(order)

    def _pass(self, now: int, queue: list[WaitingJob], machine: Machine) -> list[WaitingJob]:
        if self._running.keys() - machine.running.keys():  # a job has ended since the last pass
            self._rebuild(now, machine)
        return super()._pass(now, queue, machine)


def make_backfill(
    name: str, order: str = "queue", max_reservation_delay: int | None = DEFAULT_MAX_RESERVATION_DELAY
) -> Backfill:
    """The backfilling strategy called `name` (none, easy, conservative, replan), trying candidates in `order`.

    `max_reservation_delay` is EASY's (`EasyBackfill`); the others keep a reservation for every waiting job.
    """
    classes: dict[str, type[Backfill]] = {
        "none": NoBackfill,
        "easy": EasyBackfill,
        "conservative": ConservativeBackfill,
        "replan": ReplanBackfill,
    }
    if name not in classes:
        raise ValueError(f"unknown backfilling {name!r}; choose one of {', '.join(BACKFILLS)}")
    if name == "easy":
        return EasyBackfill(order, max_reservation_delay)
    return classes[name](order)
