"""Queue policies: the order in which waiting jobs are considered.

Jobs arrive in (submit, job id) order, so FCFS is the arrival order and never
needs sorting. SJF's and LJF's keys are fixed at submission, so they are kept
in sorted containers. WFP's score grows with waiting time, so it is recomputed
once per scheduling pass, vectorised. Ties are broken by submit time, then job id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from sortedcontainers import SortedKeyList

from simulator.jobs import WaitingJob

POLICIES = ("fcfs", "wfp", "sjf", "ljf")


class Planner(Protocol):
    """What a policy may ask of the scheduler before a pass: plans made with estimates, never an actual runtime."""

    def plan(self, now: int, jobs: list[WaitingJob]) -> list[int]:
        """The start each of `jobs` is planned for if this pass takes them in that order; changes nothing."""
        ...

    def busy_until(self, now: int) -> int:
        """When the running jobs are expected to have ended (`now` if none runs)."""
        ...


class QueuePolicy(ABC):
    """A set of waiting jobs that can be listed in priority order.

    A policy that decides its order as the queue changes (dynP) does so in
    `decide`, which the scheduler calls before each pass; a static policy has
    nothing to decide.
    """

    name: str

    def decide(self, now: int, planner: Planner, submitted: bool, completed: bool) -> None:  # noqa: B027 - a hook
        """Before a pass at `now` that follows a submission and/or a completion (or neither: a wake-up)."""

    def decisions(self) -> dict[str, Any] | None:
        """What the policy decided over the run, for the summary; None for a static policy."""
        return None

    @abstractmethod
    def add(self, job: WaitingJob) -> None: ...

    @abstractmethod
    def remove(self, job: WaitingJob) -> None: ...

    @abstractmethod
    def ordered(self, now: int) -> list[WaitingJob]:
        """The waiting jobs, highest priority first, at time `now`."""

    @abstractmethod
    def __len__(self) -> int: ...


class FCFS(QueuePolicy):
    """First come, first served. Jobs are kept in arrival order (an insertion-ordered dict)."""

    name = "fcfs"

    def __init__(self) -> None:
        self._jobs: dict[int, WaitingJob] = {}

    def add(self, job: WaitingJob) -> None:
        self._jobs[job.index] = job

    def remove(self, job: WaitingJob) -> None:
        del self._jobs[job.index]

    def ordered(self, now: int) -> list[WaitingJob]:
        return list(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)


class WFP(QueuePolicy):
    """Intrepid's WFP: score (t_queue / t_est)^3 x size, highest first.

    Favours large jobs and jobs that have waited long relative to their
    length. A stable sort of the arrival order breaks ties by submit, job id.
    The jobs' submit, t_est and size are kept as arrays in arrival order (a
    left job is only masked, and the arrays compacted when half are gone), so
    that a pass costs one vectorised score and sort, not a walk over the jobs:
    a forecast's forward run makes a pass per job end over a long queue.
    """

    name = "wfp"

    def __init__(self) -> None:
        self._slot: dict[int, int] = {}  # trace index -> slot in the arrays
        self._jobs = np.empty(0, dtype=object)
        self._values = np.empty((3, 0))  # submit, t_est, size
        self._alive = np.empty(0, dtype=bool)
        self._used = 0
        self._pending: list[WaitingJob] = []  # added since the arrays were last extended

    def add(self, job: WaitingJob) -> None:
        self._slot[job.index] = self._used + len(self._pending)
        self._pending.append(job)

    def remove(self, job: WaitingJob) -> None:
        slot = self._slot.pop(job.index)
        if slot >= self._used:
            self._extend()
        self._alive[slot] = False

    def ordered(self, now: int) -> list[WaitingJob]:
        if self._pending:
            self._extend()
        if 2 * len(self._slot) < self._used:
            self._compact()
        slots = np.flatnonzero(self._alive[: self._used])
        if len(slots) < 2:
            return list(self._jobs[slots])
        submit, t_est, size = self._values[:, slots]
        order = slots[np.argsort(-wfp_score(now - submit, t_est, size), kind="stable")]
        jobs: list[WaitingJob] = self._jobs[order].tolist()
        return jobs

    def __len__(self) -> int:
        return len(self._slot)

    def _extend(self) -> None:
        added, count = self._pending, len(self._pending)
        need = self._used + count
        if need > len(self._alive):
            capacity = max(2 * len(self._alive), need, 64)
            self._jobs = np.concatenate([self._jobs[: self._used], np.empty(capacity - self._used, dtype=object)])
            self._values = np.concatenate([self._values[:, : self._used], np.empty((3, capacity - self._used))], 1)
            self._alive = np.concatenate([self._alive[: self._used], np.zeros(capacity - self._used, dtype=bool)])
        block = slice(self._used, need)
        self._jobs[block] = np.fromiter(added, dtype=object, count=count)
        self._values[:, block] = np.array([[job.submit, job.t_est, job.size] for job in added]).T
        self._alive[block] = True
        self._used = need
        self._pending = []

    def _compact(self) -> None:
        slots = np.flatnonzero(self._alive[: self._used])
        count = len(slots)
        self._jobs[:count] = self._jobs[slots]
        self._values[:, :count] = self._values[:, slots]
        self._alive[:count] = True
        self._alive[count : self._used] = False
        self._jobs[count : self._used] = None
        self._used = count
        self._slot = {job.index: slot for slot, job in enumerate(self._jobs[:count].tolist())}


def shortest_first(job: WaitingJob) -> tuple[int, int, int]:
    """SJF's sort key, fixed at submission: t_est, then submit time, then job id.

    Shared by the SJF policy and by backfilling's shortest-first candidate order.
    """
    return job.t_est, job.submit, job.job_id


def longest_first(job: WaitingJob) -> tuple[int, int, int]:
    """LJF's sort key, fixed at submission: t_est descending, then, as SJF, submit time and job id."""
    return -job.t_est, job.submit, job.job_id


class SJF(QueuePolicy):
    """Shortest (estimated) job first."""

    name = "sjf"

    def __init__(self, key: Callable[[WaitingJob], tuple[int, int, int]] = shortest_first) -> None:
        self._jobs: SortedKeyList = SortedKeyList(key=key)

    def add(self, job: WaitingJob) -> None:
        self._jobs.add(job)

    def remove(self, job: WaitingJob) -> None:
        self._jobs.remove(job)

    def ordered(self, now: int) -> list[WaitingJob]:
        return list(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)


class LJF(SJF):
    """Longest (estimated) job first: Streit's third policy, which leaves the most room for backfilling."""

    name = "ljf"

    def __init__(self) -> None:
        super().__init__(longest_first)


def make_policy(name: str) -> QueuePolicy:
    """The queue policy called `name` (fcfs, wfp, sjf, ljf)."""
    classes: dict[str, type[QueuePolicy]] = {"fcfs": FCFS, "wfp": WFP, "sjf": SJF, "ljf": LJF}
    if name not in classes:
        raise ValueError(f"unknown queue policy {name!r}; choose one of {', '.join(POLICIES)}")
    return classes[name]()


def wfp_score(wait: np.ndarray, t_est: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The WFP score, shared by the policy and the weighted-wait metric."""
    score: np.ndarray = (np.asarray(wait, dtype=np.float64) / np.asarray(t_est, dtype=np.float64)) ** 3 * size
    return score
