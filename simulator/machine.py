"""The machine as the scheduler sees it: what is free, which jobs run, and when it expects them to end.

`Machine` is the interface backfilling uses (free processors, expected
releases, start and finish); it keeps the running jobs and their expected ends,
which any machine has. `ProcessorPool` is the machine of the Parallel Workloads
Archive's traces, a pool of interchangeable processors; a machine of nodes
(CPUs, memory, GPUs per node) is another subclass, with no change to the loop.

Two behaviours are chosen once per run, not compared as strings at each pass
(docs/definitions.md): the planning mode (`PLANNINGS`: which runtime the
scheduler plans a waiting and a running job with) and, for a mode where a
running job can pass its expected end, the correction that pushes that end back
(`CORRECTIONS`). A heap of expected ends (stale entries skipped) finds overruns
in O(log n) per pass.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from dataclasses import dataclass

from simulator.jobs import RunningJob, WaitingJob

#: Tsafrir et al.'s increments for an underpredicted running job, in seconds.
TSAFRIR_STEPS = (60, 300, 900, 1800, 3600, 7200, 18000, 36000, 72000, 180000, 360000)
#: Cobalt's Qsim (Tang et al.'s simulator) expects an overrunning job to end this many seconds from now.
COBALT_GRACE = 300


@dataclass(frozen=True)
class Planning:
    """A planning mode: whether the scheduler plans a waiting job, and a running one, with its prediction.

    Otherwise it plans with the request (t_req), which a job never passes: it
    is killed there. A running job planned with its prediction can pass it.
    """

    name: str
    waiting_predicted: bool
    running_predicted: bool

    def estimate(self, t_req: int, t_sched: int) -> int:
        """The runtime a waiting job is planned with (`WaitingJob.t_est`)."""
        return t_sched if self.waiting_predicted else t_req

    def planned_runtime(self, job: WaitingJob) -> int:
        """How long a job is expected to run once started."""
        return job.t_est if self.running_predicted else job.t_req

    @property
    def overruns(self) -> bool:
        """Whether a running job can pass its expected end, so that the correction applies."""
        return self.running_predicted


#: The planning modes by name: `none` plans with requests (predictions are made and reported only), `regular`
#: with predictions everywhere, `selective` with predictions for waiting jobs and requests for running ones.
PLANNINGS = {
    "none": Planning("none", waiting_predicted=False, running_predicted=False),
    "regular": Planning("regular", waiting_predicted=True, running_predicted=True),
    "selective": Planning("selective", waiting_predicted=True, running_predicted=False),
}
MODES = tuple(PLANNINGS)


def planning_mode(name: str | None) -> Planning:
    """The planning mode called `name`; None (a configuration no estimator chose a mode for) plans with t_req."""
    name = name or "none"
    if name not in PLANNINGS:
        raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(MODES)}")
    return PLANNINGS[name]


class Correction(ABC):
    """What a running job past its expected end is expected to run: the new end, never past start + t_req."""

    name: str

    def corrected_end(self, job: RunningJob, now: int) -> int:
        """The new expected end of `job`, which is still running at `now`, past its expected end."""
        limit = job.start + job.t_req
        if limit <= now:  # the engine ends such a job before any pass; correcting it could never finish
            raise AssertionError(f"job at trace index {job.index} is still running at {now}, past its request")
        return self._end(job, now, limit)

    @abstractmethod
    def _end(self, job: RunningJob, now: int, limit: int) -> int:
        """The new expected end, after `now` and at most `limit`."""


class RequestCorrection(Correction):
    """Start + t_req at once: the job is now expected to run until it is killed."""

    name = "request"

    def _end(self, job: RunningJob, now: int, limit: int) -> int:
        return limit


class CobaltCorrection(Correction):
    """Now + `COBALT_GRACE`: Qsim's max(start + t_sched, now + 300), whose first term is past when a correction
    is due."""

    name = "cobalt"

    def _end(self, job: RunningJob, now: int, limit: int) -> int:
        return min(limit, now + COBALT_GRACE)


class SteppedCorrection(Correction):
    """Push the end back one step at a time until it lies in the future; `RunningJob.corrections` counts steps."""

    def _end(self, job: RunningJob, now: int, limit: int) -> int:
        end = job.expected_end
        while end <= now:
            end = min(limit, self._step(job, end))
            job.corrections += 1
        return end

    @abstractmethod
    def _step(self, job: RunningJob, end: int) -> int:
        """The expected end one step after `end`."""


class TsafrirCorrection(SteppedCorrection):
    """Tsafrir et al.: add the next of `TSAFRIR_STEPS`."""

    name = "tsafrir"

    def _step(self, job: RunningJob, end: int) -> int:
        return end + TSAFRIR_STEPS[min(job.corrections, len(TSAFRIR_STEPS) - 1)]


class DoubleCorrection(SteppedCorrection):
    """Double the expected duration."""

    name = "double"

    def _step(self, job: RunningJob, end: int) -> int:
        return job.start + max(2 * (end - job.start), 1)


_CORRECTION_CLASSES: dict[str, type[Correction]] = {
    "request": RequestCorrection,
    "tsafrir": TsafrirCorrection,
    "cobalt": CobaltCorrection,
    "double": DoubleCorrection,
}
CORRECTIONS = tuple(_CORRECTION_CLASSES)


def make_correction(name: str) -> Correction:
    """The overrun correction called `name`."""
    if name not in _CORRECTION_CLASSES:
        raise ValueError(f"unknown correction {name!r}; choose one of {', '.join(CORRECTIONS)}")
    return _CORRECTION_CLASSES[name]()


class Machine(ABC):
    """The running jobs and when the scheduler expects them to end; a subclass says what a job takes.

    `free` is how many processors are free now: for a machine of nodes, the
    sum over its nodes, so that a job asking more can never start.
    """

    free: int
    #: Whether a job may still run at its limit (start + t_req): Slurm kills at the next 30 s limit sweep, after
    #: OverTimeLimit; the pool's engine ends a job at its limit, before any pass.
    outlives_limit = False

    def __init__(self, planning: Planning = PLANNINGS["none"], correction: Correction | None = None) -> None:
        self.planning = planning
        self.correction = correction or RequestCorrection()
        self.running: dict[int, RunningJob] = {}
        self._ends: list[tuple[int, int]] = []  # (expected_end, index), may hold stale entries

    @abstractmethod
    def _allocate(self, job: WaitingJob) -> None:
        """Take what `job` needs; AssertionError if it is not free."""

    @abstractmethod
    def _release(self, job: RunningJob) -> None:
        """Give back what `job` took."""

    def planned_runtime(self, job: WaitingJob) -> int:
        """How long a job is expected to run once started, in this planning mode."""
        return self.planning.planned_runtime(job)

    def start(self, job: WaitingJob, now: int) -> RunningJob:
        """Allocate `job` now."""
        self._allocate(job)
        running = RunningJob(job.index, job.size, now, job.t_req, now + self.planning.planned_runtime(job))
        self.running[job.index] = running
        if self.planning.overruns:
            heapq.heappush(self._ends, (running.expected_end, job.index))
        return running

    def finish(self, index: int) -> RunningJob:
        """Release the job at trace position `index`."""
        running = self.running.pop(index)
        self._release(running)
        return running

    def expected_releases(self) -> list[tuple[int, int]]:
        """(expected end, processors) of every running job, earliest first."""
        return sorted([(r.expected_end, r.size) for r in self.running.values()])

    def correct_overruns(self, now: int) -> list[RunningJob]:
        """Push back the expected end of every running job that has passed it; the jobs whose end moved.

        Only predictions can be passed (a job is killed at t_req), so this is a
        no-op unless the planning mode plans running jobs with predictions.
        """
        ends = self._ends
        moved = []
        while ends and ends[0][0] <= now:
            expected_end, index = heapq.heappop(ends)
            job = self.running.get(index)
            if job is None or job.expected_end != expected_end:
                continue  # finished, or already corrected
            moved.append(job)
            if self.outlives_limit and job.start + job.t_req <= now:
                job.expected_end = job.start + job.t_req  # past its limit, ending at the sweep: planned as with t_req
                continue
            job.expected_end = self.correction.corrected_end(job, now)
            heapq.heappush(ends, (job.expected_end, index))
        return moved


class ProcessorPool(Machine):
    """`procs` interchangeable processors: a job takes `size` of them, wherever they are."""

    def __init__(
        self, procs: int, planning: Planning = PLANNINGS["none"], correction: Correction | None = None
    ) -> None:
        super().__init__(planning, correction)
        self.free = procs

    def _allocate(self, job: WaitingJob) -> None:
        if job.size > self.free:
            raise AssertionError(f"job {job.job_id} needs {job.size} processors, {self.free} are free")
        self.free -= job.size

    def _release(self, job: RunningJob) -> None:
        self.free += job.size
