"""The engine: replays a trace through the simulator's event loop (`simulator.loop`).

Arrivals are the trace's jobs, in submit order; a job ends min(t_act, t_req)
after it starts (it is killed at its request). The predictor is told about the
completions and asked about the arrivals in a single `sync` call per round (a
remote session, about later arrivals too when no job can end before them), so
it never learns a runtime before the simulated job has finished.

Actual runtimes live only in this module (`TraceReplay._runtime`); the
scheduler (`simulator.scheduler`: queue policy, backfilling, machine) sees
`WaitingJob` / `RunningJob`, which have no runtime field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kernel.jobs import FinishedJob, Prediction
from predictor.frames import REQUEST_COLUMNS, finished_from_frame, jobs_to_requests
from predictor.session import PredictionSession
from simulator.backfill import DEFAULT_MAX_RESERVATION_DELAY, make_backfill
from simulator.dynp import make_queue_policy
from simulator.jobs import WaitingJob
from simulator.lookahead import Lookahead
from simulator.loop import EventKind, Simulation
from simulator.machine import ProcessorPool, make_correction, planning_mode
from simulator.scheduler import QueueScheduler


@dataclass(frozen=True)
class SimulationConfig:
    """How the simulated scheduler works."""

    procs: int
    policy: str = "fcfs"  # fcfs | wfp | sjf | ljf | dynp[:key=value,...] (simulator.dynp)
    backfill: str = "easy"  # none | easy | conservative | replan
    #: none | regular | selective; None: chosen by the estimator (`simulator.experiment.run_simulation`: selective
    #: for an estimator, none for the users' requests, as the CLI); `simulate`, which is not told the estimator,
    #: plans with t_req.
    mode: str | None = None
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


#: The trace columns a simulation reads: a job as submitted, and its actual runtime.
JOB_COLUMNS = (*REQUEST_COLUMNS, "t_act")


def make_scheduler(config: SimulationConfig) -> QueueScheduler:
    """The scheduler `config` names: its policy, backfilling, planning mode and correction, each chosen once."""
    policy = make_queue_policy(config.policy)
    backfill = make_backfill(config.backfill, config.backfill_order, config.max_reservation_delay)
    machine = ProcessorPool(config.procs, planning_mode(config.mode), make_correction(config.correction))
    return QueueScheduler(policy, backfill, machine)


class TraceReplay(Simulation[range, QueueScheduler]):
    """A trace replayed on a simulated machine; an arrival carries the trace positions submitted at its time.

    The arrivals enter the heap one instant at a time, the next when one is
    admitted, so that the heap holds the running jobs rather than the whole trace.

    Observers (`simulator.loop.Observer`) watch the one run; `finished_job`
    is how they learn a completion as the predictor does.

    A session that `asks_ahead` (a remote one) is asked, with an instant's
    arrivals, about the later arrivals that come before any job can end
    (`simulator.lookahead`): fewer round trips, the same answers. A driver whose
    jobs may end other than at their runtime (`asks_ahead = False`) asks each
    instant at its time.
    """

    #: Whether a job ends only at its start plus its runtime, as the horizon of asking ahead assumes.
    asks_ahead = True

    def __init__(
        self,
        jobs: pd.DataFrame,
        config: SimulationConfig,
        session: PredictionSession,
        history: pd.DataFrame | None = None,
        scheduler: QueueScheduler | None = None,
    ) -> None:
        missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
        if missing:
            raise ValueError(f"jobs table lacks column(s) {', '.join(missing)}")
        too_big = jobs["procs"].to_numpy() > config.procs
        self.skipped = {"larger than machine": int(too_big.sum())} if too_big.any() else {}
        self.jobs = jobs.loc[~too_big].sort_values(["submit", "job_id"], kind="stable").reset_index(drop=True)
        self.config = config
        self.requests = jobs_to_requests(self.jobs)
        super().__init__(
            make_scheduler(config) if scheduler is None else scheduler, self.requests[0].submit if self.requests else 0
        )
        self.session = session
        # Jobs are killed at their request, whatever the trace says they ran.
        t_req = self.jobs["t_req"].to_numpy(dtype=np.int64)
        self._runtime = np.minimum(self.jobs["t_act"].to_numpy(dtype=np.int64), t_req).tolist()
        count = len(self.requests)
        self.start_at = [0] * count
        self.end_at = [0] * count
        self.t_sched = [0] * count
        self._planning = self.scheduler.machine.planning
        submits = self.jobs["submit"].to_numpy(dtype=np.int64)
        changes = (np.flatnonzero(np.diff(submits)) + 1).tolist()
        self._instants = [0, *changes, count] if count else [0]  # where each submit time's jobs begin, and the end
        self._lookahead = (
            Lookahead(submits.tolist(), self._runtime, self.jobs["procs"].tolist(), self._instants)
            if self.asks_ahead and session.asks_ahead
            else None
        )
        self._next_instant = 0
        self._schedule_arrivals()
        if history is not None:
            session.sync(finished_from_frame(history), [])

    def finished_job(self, index: int) -> FinishedJob:
        """The job at trace position `index`, which has just ended, as the predictor learns it."""
        return FinishedJob(self.requests[index], self.now, self.now - self.start_at[index])

    def _schedule_arrivals(self) -> None:
        """Put the next submit time's jobs on the heap, if any is left."""
        instant, instants = self._next_instant, self._instants
        if instant + 1 < len(instants):
            first = instants[instant]
            self.schedule(self.requests[first].submit, EventKind.ARRIVAL, range(first, instants[instant + 1]), first)
            self._next_instant = instant + 1

    def admit(self, completed: list[int], arrived: list[range]) -> list[WaitingJob]:
        """Tell the predictor what ended, ask it about what arrived; the planning mode picks each job's estimate."""
        if not (completed or arrived):
            return []
        requests, now, start_at, t_sched = self.requests, self.now, self.start_at, self.t_sched
        estimate = self._planning.estimate
        finished = [FinishedJob(requests[index], now, now - start_at[index]) for index in completed]
        indexes = range(0)
        if arrived:  # one batch per submit time: consecutive trace positions
            indexes = range(arrived[0].start, arrived[-1].stop)
            self._schedule_arrivals()
        predictions = self._predictions(finished, indexes)
        jobs = []
        for index, prediction in zip(indexes, predictions, strict=True):
            request = requests[index]
            t_sched[index] = prediction.t_sched
            t_est = estimate(request.t_req, prediction.t_sched)
            jobs.append(WaitingJob(index, request.job_id, request.submit, request.procs, request.t_req, t_est))
        return jobs

    def _predictions(self, finished: list[FinishedJob], arrivals: range) -> list[Prediction]:
        """One `sync`: the completions learned, the arrivals predicted (with those asked ahead of their instant,
        whose answers wait for them); none for arrivals asked already."""
        lookahead = self._lookahead
        if lookahead is None:
            return self.session.sync(finished, self.requests[arrivals.start : arrivals.stop])
        if finished and lookahead.waiting_answers:
            raise RuntimeError(f"a job ended at {self.now}, before arrivals already asked: the horizon is wrong")
        lookahead.admitted(arrivals)
        answered = lookahead.answered(arrivals) if arrivals else None
        if answered is not None:
            return answered
        free = self.scheduler.machine.free
        ahead = lookahead.ahead(arrivals, self.now, free) if arrivals else range(arrivals.stop, arrivals.stop)
        answers = self.session.sync(finished, self.requests[arrivals.start : ahead.stop])
        lookahead.keep(ahead, answers[len(arrivals) :])
        return answers[: len(arrivals)]

    def completion_time(self, job: WaitingJob) -> int:
        """The job's actual end; recorded with its start."""
        index = job.index
        end: int = self.now + self._runtime[index]
        self.start_at[index] = self.now
        self.end_at[index] = end
        if self._lookahead is not None:
            self._lookahead.started(index, end)
        return end

    def replay(self) -> SimulationResult:
        """Run to the last event; the per-job outcome."""
        self.run()
        jobs = self.jobs
        result = pd.DataFrame(
            {
                "job_id": jobs["job_id"].to_numpy(),
                "user": jobs["user"].to_numpy(),
                "group": jobs["group"].to_numpy(),
                "size": jobs["procs"].to_numpy(),
                "submit": jobs["submit"].to_numpy(),
                "start": np.asarray(self.start_at, dtype=np.int64),
                "end": np.asarray(self.end_at, dtype=np.int64),
            }
        )
        result["wait"] = result["start"] - result["submit"]
        result["run"] = result["end"] - result["start"]
        result["t_req"] = jobs["t_req"].to_numpy()
        result["t_sched"] = np.asarray(self.t_sched, dtype=np.int64)
        decisions = self.scheduler.policy.decisions()
        return SimulationResult(self.config, result, self.skipped, self.session.fallbacks, decisions)


def simulate(
    jobs: pd.DataFrame, config: SimulationConfig, session: PredictionSession, history: pd.DataFrame | None = None
) -> SimulationResult:
    """Replay `jobs` (replayable trace jobs sorted by submit) under `config`.

    `session` answers t_sched at submission and learns each simulated
    completion. `history` (jobs that finished before the replayed period) is
    sent to the predictor first, as a warm-up. In mode `none` the predictions
    are still made and reported, but the scheduler plans with t_req.
    """
    return TraceReplay(jobs, config, session, history).replay()
