"""The event loop: replays a trace on a simulated machine.

Time is integer seconds. Events are arrivals (the trace, in submit order) and
completions (a heap). At one instant: completions first, then arrivals, then
one scheduling pass. The predictor is told about completions and asked about
arrivals in a single `sync` call per instant, so it never learns a runtime
before the simulated job has finished.

Actual runtimes live only in this module (`_runtime`); the queue policy and
backfilling see `WaitingJob` / `RunningJob`, which have no runtime field. A
dynP policy (`simulator.dynp`) decides which order the queue is listed in at
each pass that follows a submission or a completion, just before the pass.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel.jobs import FinishedJob
from predictor.frames import REQUEST_COLUMNS, finished_from_frame, jobs_to_requests
from predictor.session import PredictionSession
from simulator.backfill import DEFAULT_MAX_RESERVATION_DELAY, make_backfill
from simulator.dynp import DynamicPolicy, make_queue_policy
from simulator.jobs import WaitingJob
from simulator.machine import Machine


@dataclass(frozen=True)
class SimulationConfig:
    """How the simulated scheduler works."""

    procs: int
    policy: str = "fcfs"  # fcfs | wfp | sjf | ljf | dynp[:key=value,...] (simulator.dynp)
    backfill: str = "easy"  # none | easy | conservative
    mode: str = "none"  # none | regular | selective
    correction: str = "request"  # request | tsafrir | cobalt | double (regular mode only)
    backfill_order: str = "queue"  # queue | sjf (shortest estimate first: EASY-SJBF)
    max_reservation_delay: int | None = DEFAULT_MAX_RESERVATION_DELAY  # EASY: seconds, None unbounded


@dataclass
class SimulationResult:
    """Per-job outcome of a simulation, plus what was left out and why."""

    config: SimulationConfig
    jobs: pd.DataFrame  # job_id, user, group, size, submit, start, end, wait, run, t_req, t_sched
    skipped: dict[str, int] = field(default_factory=dict)
    predictor_fallbacks: int = 0
    dynp: dict[str, Any] | None = None  # what a dynP policy did (DynPStats.summary); None for the others


_NEVER = 2**62
#: The trace columns a simulation reads: a job as submitted, and its actual runtime.
JOB_COLUMNS = (*REQUEST_COLUMNS, "t_act")


def simulate(
    jobs: pd.DataFrame, config: SimulationConfig, session: PredictionSession, history: pd.DataFrame | None = None
) -> SimulationResult:
    """Replay `jobs` (replayable trace jobs sorted by submit) under `config`.

    `session` answers t_sched at submission and learns each simulated
    completion. `history` (jobs that finished before the replayed period) is
    sent to the predictor first, as a warm-up. In mode `none` the predictions
    are still made and reported, but the scheduler plans with t_req.
    """
    missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
    if missing:
        raise ValueError(f"jobs table lacks column(s) {', '.join(missing)}")
    too_big = jobs["procs"].to_numpy() > config.procs
    skipped = {"larger than machine": int(too_big.sum())} if too_big.any() else {}
    jobs = jobs.loc[~too_big].sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)

    requests = jobs_to_requests(jobs)
    # Jobs are killed at their request, whatever the trace says they ran.
    _runtime = np.minimum(jobs["t_act"].to_numpy(dtype=np.int64), jobs["t_req"].to_numpy(dtype=np.int64)).tolist()
    count = len(requests)
    start_at = [0] * count
    end_at = [0] * count
    t_sched = [0] * count

    machine = Machine(config.procs, config.mode, config.correction)
    queue = make_queue_policy(config.policy)
    backfill = make_backfill(config.backfill, config.backfill_order, config.max_reservation_delay)
    use_prediction = config.mode != "none"
    completions: list[tuple[int, int]] = []
    if history is not None:
        session.sync(finished_from_frame(history), [])

    next_arrival = 0
    wake: int | None = None
    while next_arrival < count or completions or wake is not None:
        now = min(
            completions[0][0] if completions else _NEVER,
            requests[next_arrival].submit if next_arrival < count else _NEVER,
            _NEVER if wake is None else wake,
        )

        finished: list[FinishedJob] = []
        while completions and completions[0][0] == now:
            _, index = heapq.heappop(completions)
            machine.finish(index)
            finished.append(FinishedJob(requests[index], now, now - start_at[index]))

        first = next_arrival
        while next_arrival < count and requests[next_arrival].submit == now:
            next_arrival += 1
        arrivals = requests[first:next_arrival]

        if finished or arrivals:
            predictions = session.sync(finished, arrivals)
            for offset, (request, prediction) in enumerate(zip(arrivals, predictions, strict=True)):
                index = first + offset
                t_sched[index] = prediction.t_sched
                t_est = prediction.t_sched if use_prediction else request.t_req
                job = WaitingJob(index, request.job_id, request.submit, request.procs, request.t_req, t_est)
                queue.add(job)
                backfill.admit(job)

        if not len(queue):
            wake = None
            continue
        if machine.free == 0 and backfill.idle_when_full:
            continue
        if use_prediction:
            machine.correct_overruns(now)
        if isinstance(queue, DynamicPolicy):
            queue.decide(now, machine, backfill, submitted=bool(arrivals), completed=bool(finished))
        for job in backfill.select(now, queue.ordered(now), machine):
            queue.remove(job)
            backfill.forget(job)
            machine.start(job, now)
            start_at[job.index] = now
            end = now + _runtime[job.index]
            end_at[job.index] = end
            heapq.heappush(completions, (end, job.index))
        wake = backfill.wake_time()
        if wake is not None and wake <= now:
            raise AssertionError(f"{config.backfill} backfilling left a job reserved at {wake} unstarted at {now}")

    result = pd.DataFrame(
        {
            "job_id": jobs["job_id"].to_numpy(),
            "user": jobs["user"].to_numpy(),
            "group": jobs["group"].to_numpy(),
            "size": jobs["procs"].to_numpy(),
            "submit": jobs["submit"].to_numpy(),
            "start": np.asarray(start_at, dtype=np.int64),
            "end": np.asarray(end_at, dtype=np.int64),
        }
    )
    result["wait"] = result["start"] - result["submit"]
    result["run"] = result["end"] - result["start"]
    result["t_req"] = jobs["t_req"].to_numpy()
    result["t_sched"] = np.asarray(t_sched, dtype=np.int64)
    dynp = queue.stats.summary() if isinstance(queue, DynamicPolicy) else None
    return SimulationResult(config, result, skipped, session.fallbacks, dynp)
