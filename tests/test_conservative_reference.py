"""Conservative backfilling against an independent, deliberately simple simulator written here.

`simulator.backfill.ConservativeBackfill` keeps a persistent profile and updates
it incrementally (compression, holds, rebuilds only when a reservation becomes
infeasible). The reference below shares no code with it: at every scheduling
pass it recomputes the whole machine occupancy from scratch (running jobs and
reservations as plain intervals) and searches start times by brute force. It
states the rules once, plainly:

- at each instant: completions, then arrivals, then one pass if a job waits;
  a pass also runs at the earliest reserved start (the scheduler wakes up);
- regular mode: running jobs past their expected end are corrected first;
- if the plan no longer fits (more processors promised than exist at some
  time), every reservation is dropped (replan in priority order); otherwise,
  if a job ended before its expected end since the last pass, each reserved job
  in the backfill order moves to its earliest feasible start (compression);
- unreserved jobs, in priority order, get their earliest feasible start;
- jobs whose reservation is now start.

Both must give every job the same start time: on random workloads (all
policies, modes, corrections and backfill orders) and on a month of a real
trace with Tang et al.'s percentile predictions.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_simulator import FixedEstimator, Spec, job_table, workloads

from predictor.session import LocalSession
from simulator.engine import SimulationConfig, simulate
from simulator.experiment import run_simulation
from simulator.workloads.swf import read_swf
from simulator.workloads.synthetic import generate_workload

_LADDER = (60, 300, 900, 1800, 3600, 7200, 18000, 36000, 72000, 180000, 360000)


@dataclass
class Job:
    job_id: int
    submit: int
    size: int
    t_req: int
    runtime: int  # min(t_act, t_req): what the machine runs
    t_sched: int  # the prediction


@dataclass
class Running:
    job: Job
    start: int
    expected_end: int
    corrections: int = 0


def estimate(job: Job, mode: str) -> int:
    """What a waiting job is planned with."""
    return job.t_req if mode == "none" else job.t_sched


def held_until(job: Job, start: int, mode: str) -> int:
    """When the scheduler expects a job started at `start` to end."""
    return start + (job.t_sched if mode == "regular" else job.t_req)


def corrected(run: Running, now: int, correction: str) -> int:
    """A new expected end for a job still running at `now`, past its expected end."""
    limit = run.start + run.job.t_req
    end = run.expected_end
    if correction == "request":
        return limit
    if correction == "cobalt":
        return min(limit, now + 300)
    while end <= now:
        if correction == "tsafrir":
            end = min(limit, end + _LADDER[min(run.corrections, len(_LADDER) - 1)])
        else:
            end = min(limit, run.start + max(1, 2 * (end - run.start)))
        run.corrections += 1
    return end


def in_use(intervals: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """The times where the processors in use change, and how many are in use from each such time on."""
    change: dict[int, int] = defaultdict(int)
    for start, end, size in intervals:
        if end > start:
            change[start] += size
            change[end] -= size
    times = sorted(change)
    return times, list(accumulate(change[t] for t in times))


def fits(at: int, size: int, duration: int, times: list[int], used: list[int], procs: int) -> bool:
    """Whether `size` processors are free over [at, at + duration) (at the instant `at`, if duration is 0)."""
    i = bisect_right(times, at) - 1
    if (used[i] if i >= 0 else 0) + size > procs:
        return False
    i += 1
    while i < len(times) and times[i] < at + duration:
        if used[i] + size > procs:
            return False
        i += 1
    return True


def earliest(now: int, size: int, duration: int, intervals: list[tuple[int, int, int]], procs: int) -> int:
    """The first time from `now` when `size` processors stay free for `duration`, by trying every candidate."""
    times, used = in_use(intervals)
    for at in [now, *(t for t in times if t > now)]:
        if fits(at, size, duration, times, used, procs):
            return at
    raise AssertionError("a job larger than the machine")


def planned(
    now: int,
    running: dict[int, Running],
    waiting: list[Job],
    reserved: dict[int, int],
    mode: str,
    leave_out: int | None = None,
) -> list[tuple[int, int, int]]:
    """(start, end, processors) of every running job from now on and of every reservation but `leave_out`'s."""
    intervals = [(now, run.expected_end, run.job.size) for run in running.values()]
    for job in waiting:
        if job.job_id in reserved and job.job_id != leave_out:
            start = reserved[job.job_id]
            intervals.append((start, start + estimate(job, mode), job.size))
    return intervals


def priority_order(waiting: list[Job], now: int, policy: str, mode: str) -> list[Job]:
    """The waiting jobs, highest priority first; ties by submit time, then job id."""
    if policy == "fcfs":
        return sorted(waiting, key=lambda j: (j.submit, j.job_id))
    if policy == "sjf":
        return sorted(waiting, key=lambda j: (estimate(j, mode), j.submit, j.job_id))
    return sorted(waiting, key=lambda j: (-(((now - j.submit) / estimate(j, mode)) ** 3) * j.size, j.submit, j.job_id))


def reference_conservative(
    jobs: list[Job], procs: int, policy: str, mode: str, correction: str, order: str
) -> dict[int, int]:
    """Start time of every job, the plan recomputed from scratch at every pass."""
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.job_id))
    waiting: list[Job] = []
    running: dict[int, Running] = {}
    reserved: dict[int, int] = {}
    left: list[int] = []  # expected ends of the jobs that ended since the last pass
    started: dict[int, int] = {}
    next_arrival = 0
    while next_arrival < len(arrivals) or running or waiting:
        candidates = [run.start + run.job.runtime for run in running.values()]
        if next_arrival < len(arrivals):
            candidates.append(arrivals[next_arrival].submit)
        if waiting:
            candidates.append(min(reserved.values()))
        now = min(candidates)
        ended = [job_id for job_id, run in running.items() if run.start + run.job.runtime == now]
        left.extend(running.pop(job_id).expected_end for job_id in ended)
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit == now:
            waiting.append(arrivals[next_arrival])
            next_arrival += 1
        if not waiting:
            continue

        if mode == "regular":
            for run in running.values():
                if run.expected_end <= now:
                    run.expected_end = corrected(run, now, correction)

        by_priority = priority_order(waiting, now, policy, mode)
        times, used = in_use(planned(now, running, waiting, reserved, mode))
        if any(count > procs for t, count in zip(times, used, strict=True) if t >= now):
            reserved.clear()
        elif any(end > now for end in left):
            by_backfill = by_priority
            if order == "sjf":
                by_backfill = sorted(waiting, key=lambda j: (estimate(j, mode), j.submit, j.job_id))
            for job in by_backfill:
                if job.job_id in reserved:
                    others = planned(now, running, waiting, reserved, mode, leave_out=job.job_id)
                    reserved[job.job_id] = earliest(now, job.size, estimate(job, mode), others, procs)
        left.clear()
        for job in by_priority:
            if job.job_id not in reserved:
                reserved[job.job_id] = earliest(
                    now, job.size, estimate(job, mode), planned(now, running, waiting, reserved, mode), procs
                )
        for job in by_priority:
            if reserved[job.job_id] == now:
                del reserved[job.job_id]
                waiting.remove(job)
                running[job.job_id] = Running(job, now, held_until(job, now, mode))
                started[job.job_id] = now
    return started


def reference_jobs(table: pd.DataFrame, predictions: dict[int, int]) -> list[Job]:
    """The reference's view of an engine input table, with the prediction of each job."""
    columns = (table[name].tolist() for name in ("job_id", "submit", "procs", "t_req", "t_act"))
    return [
        Job(job_id, submit, size, t_req, min(t_act, t_req), predictions[job_id])
        for job_id, submit, size, t_req, t_act in zip(*columns, strict=True)
    ]


def engine_starts(table: pd.DataFrame, predictions: dict[int, int], config: SimulationConfig) -> dict[int, int]:
    result = simulate(table, config, LocalSession(FixedEstimator(predictions))).jobs
    return dict(zip(result["job_id"].tolist(), result["start"].tolist(), strict=True))


@pytest.mark.parametrize("order", ["queue", "sjf"])
@pytest.mark.parametrize("policy", ["fcfs", "wfp", "sjf"])
@settings(max_examples=60, deadline=None)
@given(
    workload=workloads(),
    mode=st.sampled_from(["none", "regular", "selective"]),
    correction=st.sampled_from(["request", "tsafrir", "cobalt", "double"]),
)
def test_same_starts_as_the_reference_on_random_workloads(
    policy: str, order: str, workload: tuple[int, list[Spec], list[int]], mode: str, correction: str
) -> None:
    procs, specs, guesses = workload
    table = job_table(specs)
    # Each guess capped at t_req, as every estimator's are.
    predictions = dict(zip(table["job_id"].tolist(), table["t_req"].clip(upper=guesses).tolist(), strict=True))
    config = SimulationConfig(procs, policy, "conservative", mode, correction, order)
    expected = reference_conservative(reference_jobs(table, predictions), procs, policy, mode, correction, order)
    assert engine_starts(table, predictions, config) == expected


@pytest.mark.parametrize(("mode", "order"), [("selective", "queue"), ("regular", "queue"), ("regular", "sjf")])
def test_same_starts_as_the_reference_on_the_synthetic_workload(mode: str, order: str) -> None:
    trace = generate_workload(jobs=600, procs=64, load=0.9, seed=11)
    table = trace.jobs
    # Predictions above and below the runtime: half, and one and a half times, the actual runtime.
    predictions = {
        int(job_id): max(1, min(int(t_req), int(t_act * (0.5 if job_id % 2 else 1.5))))
        for job_id, t_req, t_act in zip(table["job_id"], table["t_req"], table["t_act"], strict=True)
    }
    config = SimulationConfig(64, "fcfs", "conservative", mode, "tsafrir", order)
    expected = reference_conservative(reference_jobs(table, predictions), 64, "fcfs", mode, "tsafrir", order)
    assert engine_starts(table, predictions, config) == expected


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "order"), [("regular", "queue"), ("selective", "queue"), ("regular", "sjf")])
def test_same_starts_as_the_reference_on_a_month_of_sdsc_sp2_with_predictions(
    traces_dir: Path, mode: str, order: str
) -> None:
    # March 1999: 2913 jobs, an average wait of about four hours, and dozens of replans.
    trace = read_swf(traces_dir / "SDSC-SP2-1998-4.2-cln.swf.gz")
    config = SimulationConfig(trace.machine_procs(), "fcfs", "conservative", mode, backfill_order=order)
    _, result = run_simulation(trace, config, "percentile:q=85", month="1999-03")
    jobs = result.jobs
    assert (jobs["t_sched"] < jobs["t_req"]).mean() > 0.3  # the predictions do change the plan
    table = jobs.rename(columns={"size": "procs", "run": "t_act"})
    predictions = dict(zip(jobs["job_id"].tolist(), jobs["t_sched"].tolist(), strict=True))
    expected = reference_conservative(reference_jobs(table, predictions), config.procs, "fcfs", mode, "request", order)
    assert dict(zip(jobs["job_id"].tolist(), jobs["start"].tolist(), strict=True)) == expected
