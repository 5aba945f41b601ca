"""The machine as the scheduler sees it: free processors and running jobs with expected ends.

In regular mode a running job can pass its predicted end; `correct_overruns`
pushes such expected ends back by one of the `CORRECTIONS` (docs/definitions.md).
A heap of expected ends (stale entries skipped) finds overruns in O(log n) per pass.
"""

from __future__ import annotations

import heapq

from simulator.jobs import RunningJob, WaitingJob

CORRECTIONS = ("request", "tsafrir", "cobalt", "double")
MODES = ("none", "regular", "selective")

#: Tsafrir et al.'s increments for an underpredicted running job, in seconds.
TSAFRIR_STEPS = (60, 300, 900, 1800, 3600, 7200, 18000, 36000, 72000, 180000, 360000)
#: Cobalt's Qsim (Tang et al.'s simulator) expects an overrunning job to end this many seconds from now.
COBALT_GRACE = 300


class Machine:
    """Free processors plus the running jobs and when the scheduler expects them to end."""

    def __init__(self, procs: int, mode: str = "none", correction: str = "request") -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if correction not in CORRECTIONS:
            raise ValueError(f"unknown correction {correction!r}; choose one of {', '.join(CORRECTIONS)}")
        self.procs = procs
        self.free = procs
        self.mode = mode
        self.correction = correction
        self.running: dict[int, RunningJob] = {}
        self._ends: list[tuple[int, int]] = []  # (expected_end, index), may hold stale entries

    def planned_runtime(self, job: WaitingJob) -> int:
        """How long a job is expected to run once started: its prediction only in regular mode."""
        return job.t_est if self.mode == "regular" else job.t_req

    def start(self, job: WaitingJob, now: int) -> RunningJob:
        """Allocate `job` now."""
        if job.size > self.free:
            raise AssertionError(f"job {job.job_id} needs {job.size} processors, {self.free} are free")
        running = RunningJob(job.index, job.size, now, job.t_req, now + self.planned_runtime(job))
        self.free -= job.size
        self.running[job.index] = running
        if self.mode == "regular":
            heapq.heappush(self._ends, (running.expected_end, job.index))
        return running

    def finish(self, index: int) -> RunningJob:
        """Release the processors of the job at trace position `index`."""
        running = self.running.pop(index)
        self.free += running.size
        return running

    def expected_releases(self) -> list[tuple[int, int]]:
        """(expected end, processors) of every running job, earliest first."""
        return sorted([(r.expected_end, r.size) for r in self.running.values()])

    def correct_overruns(self, now: int) -> None:
        """Push back the expected end of every running job that has passed it.

        Only predictions can be passed (a job is killed at t_req), so this is a
        no-op outside regular mode. Every correction stops at start + t_req,
        when the job is killed for sure.
        """
        ends = self._ends
        while ends and ends[0][0] <= now:
            expected_end, index = heapq.heappop(ends)
            job = self.running.get(index)
            if job is None or job.expected_end != expected_end:
                continue  # finished, or already corrected
            job.expected_end = self._corrected_end(job, now)
            heapq.heappush(ends, (job.expected_end, index))

    def _corrected_end(self, job: RunningJob, now: int) -> int:
        """The new expected end of `job`, which is still running at `now`, past its expected end.

        - `request`: start + t_req at once;
        - `tsafrir`: add the next of `TSAFRIR_STEPS` until the end lies in the future;
        - `cobalt`: now + `COBALT_GRACE` (Qsim's max(start + t_sched, now + 300): the first term is
          already in the past when a correction is due);
        - `double`: double the expected duration until the end lies in the future.
        """
        limit = job.start + job.t_req
        if limit <= now:  # the engine ends such a job before any pass; correcting it could never finish
            raise AssertionError(f"job at trace index {job.index} is still running at {now}, past its request")
        end = job.expected_end
        if self.correction == "request":
            return limit
        if self.correction == "cobalt":
            return min(limit, now + COBALT_GRACE)
        while end <= now:
            if self.correction == "tsafrir":
                end += TSAFRIR_STEPS[min(job.corrections, len(TSAFRIR_STEPS) - 1)]
            else:
                end = job.start + max(2 * (end - job.start), 1)
            end = min(limit, end)
            job.corrections += 1
        return end
