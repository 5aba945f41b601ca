"""The scheduler the event loop drives: a queue policy and a backfilling strategy over a machine.

A pass takes the queue in the policy's order and starts what the backfilling
chooses. Before it, the running jobs' expected ends are corrected and the policy
may decide its order (dynP; `QueuePolicy.decide`, a no-op for the static ones).
Like the rest of the scheduler it sees only estimates: the loop's driver says
when a started job ends, and tells it.
"""

from __future__ import annotations

from simulator.backfill import Backfill
from simulator.jobs import WaitingJob
from simulator.machine import Machine
from simulator.policies import QueuePolicy


class SizeCount:
    """How many waiting jobs have each size, and the smallest size: kept as jobs come and go, cheaper than a
    sorted list (the sizes are few; the smallest is looked for again only when its last job leaves)."""

    def __init__(self) -> None:
        self._count: dict[int, int] = {}
        self.smallest = 0  # no job waits

    def add(self, size: int) -> None:
        count = self._count
        count[size] = count.get(size, 0) + 1
        if size < self.smallest or len(count) == 1:
            self.smallest = size

    def remove(self, size: int) -> None:
        count = self._count
        left = count[size] - 1
        if left:
            count[size] = left
            return
        del count[size]
        if size == self.smallest:
            self.smallest = min(count, default=0)


class QueueScheduler:
    """A queue policy and a backfilling strategy over a machine, each an object chosen once."""

    def __init__(self, policy: QueuePolicy, backfill: Backfill, machine: Machine) -> None:
        self.policy = policy
        self.backfill = backfill
        self.machine = machine
        self._sizes = SizeCount()  # of the waiting jobs: a pass that cannot start the smallest starts nothing
        # Chosen once, as the policy and machine are: whether a pass has running ends to correct and an order to
        # decide (a pass skips calls that would do nothing; the loop makes one per event).
        self._corrects = machine.planning.overruns
        self._decides = type(policy).decide is not QueuePolicy.decide

    def __len__(self) -> int:
        """How many jobs wait."""
        return len(self.policy)

    def submit(self, job: WaitingJob) -> None:
        """`job` joins the queue."""
        self.policy.add(job)
        self.backfill.admit(job)
        self._sizes.add(job.size)

    def finish(self, index: int) -> None:
        """The running job at trace position `index` has ended."""
        self.machine.finish(index)

    def waiting(self, now: int) -> list[WaitingJob]:
        """The waiting jobs in the policy's order at `now`."""
        return self.policy.ordered(now)

    def schedule(self, now: int, submitted: bool, completed: bool) -> list[WaitingJob]:
        """One pass at `now`, after a submission and/or a completion (or a wake-up): the jobs it started.

        A full machine rests (no correction, no decision) unless the backfilling
        keeps reservations up to date. A pass that cannot start even the
        smallest waiting job, with no reservation to keep, stops after the
        decisions: the backfilling would choose nothing.
        """
        policy, backfill, machine = self.policy, self.backfill, self.machine
        if not len(policy) or (machine.free == 0 and backfill.idle_when_full):
            return []
        if self._corrects:
            machine.correct_overruns(now)
        if self._decides:
            policy.decide(now, self, submitted, completed)
        if machine.free < self._sizes.smallest and backfill.idle_when_full:
            return []
        started = backfill.select(now, policy.ordered(now), machine)
        for job in started:
            policy.remove(job)
            backfill.forget(job)
            self._sizes.remove(job.size)
            machine.start(job, now)
        return started

    def wake_time(self) -> int | None:
        """A future time at which a pass must run even if no job arrives or ends (a reservation's start)."""
        return self.backfill.wake_time()

    def plan(self, now: int, jobs: list[WaitingJob]) -> list[int]:
        """The starts this pass would plan for `jobs` in that order (dynP's virtual schedule)."""
        return self.backfill.plan(now, jobs, self.machine)

    def busy_until(self, now: int) -> int:
        """When the running jobs are expected to have ended (`now` if none runs)."""
        return max([now, *(end for end, _ in self.machine.expected_releases())])
