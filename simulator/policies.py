"""Queue policies: the order in which waiting jobs are considered.

Jobs arrive in (submit, job id) order, so FCFS is the arrival order and never
needs sorting. SJF's and LJF's keys are fixed at submission, so they are kept
in sorted containers. WFP's score grows with waiting time, so it is recomputed
once per scheduling pass, vectorised. Ties are broken by submit time, then job id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
from sortedcontainers import SortedKeyList

from simulator.jobs import WaitingJob

POLICIES = ("fcfs", "wfp", "sjf", "ljf")


class QueuePolicy(ABC):
    """A set of waiting jobs that can be listed in priority order."""

    name: str

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


class WFP(FCFS):
    """Intrepid's WFP: score (t_queue / t_est)^3 x size, highest first.

    Favours large jobs and jobs that have waited long relative to their
    length. A stable sort of the arrival order breaks ties by submit, job id.
    """

    name = "wfp"

    def ordered(self, now: int) -> list[WaitingJob]:
        jobs = list(self._jobs.values())
        if len(jobs) < 2:
            return jobs
        submit = np.fromiter((j.submit for j in jobs), dtype=np.float64, count=len(jobs))
        t_est = np.fromiter((j.t_est for j in jobs), dtype=np.float64, count=len(jobs))
        size = np.fromiter((j.size for j in jobs), dtype=np.float64, count=len(jobs))
        order = np.argsort(-wfp_score(now - submit, t_est, size), kind="stable")
        return [jobs[i] for i in order.tolist()]


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
