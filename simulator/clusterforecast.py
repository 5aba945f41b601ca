"""Forecasts on a site's nodes: the `slurm` scheduler run forward from a scheduler's state on its cluster.

`simulator.forecast` runs a queue policy and backfilling forward on a pool of
processors. A site whose Slurm reserves whole nodes and schedules GPUs, memory
and partitions asks `ForecastStart` with `backfill` `slurm` instead: this runs
tsched's `slurm` scheduler (`simulator.clusterreplay.simulate_cluster`) forward
on the cluster read from the site's `slurm.conf` (`tsched serve --cluster`):

- the running jobs start again at `now` first, in the order given, each
  ending as the forecast assumes, on the nodes their node lists name (a
  request's `nodelist`: squeue's NodeList, `RunningJob.node_list`). Where a
  running job's nodes are not given, the scheduler places it as it would
  place it now, so the nodes may fragment otherwise than Slurm's: if one no
  longer fits beside those before it (or a job given its nodes does not fit
  there: a node list does not say how its CPUs split over them), they are
  placed again without node lists in the order given, then biggest first,
  and the placement that fits the most of them is kept; a job that still
  does not fit starts once room frees, and the forecasts behind it may be
  late;
- the waiting jobs follow in the order given, which is the site's priority
  order: the forward run's own priority is that order (priority/basic, no
  limits), as `tests/slurm/start_forecasts.py` measured it against
  `squeue --start`;
- each job asks what `QueueState.requests` says it asked (the service builds
  it from the job's totals, `ResourceRequest.from_totals`), planned with its
  request, as Slurm plans.

Any other backfilling is `simulator.forecast`'s, on a pool of the state's
processors. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from kernel.jobs import JobRequest
from kernel.resources import ResourceRequest
from predictor.forecasting import ON_NODES, QueueState, Scheduler
from predictor.registry import make_estimator
from predictor.session import LocalSession
from simulator.cluster import Cluster
from simulator.clusterreplay import SLURM, queued_jobs, simulate_cluster
from simulator.engine import SimulationConfig
from simulator.forecast import CHECK_EVERY_PASSES, FORWARD_SIMULATION
from simulator.loop import Observer


def forward_order_cluster(cluster: Cluster) -> Cluster:
    """`cluster` with priority/basic and no limits: a forward run's order is the one it is given."""
    settings = replace(cluster.scheduler, priority_type="priority/basic")
    return replace(cluster, scheduler=settings, priority=replace(cluster.priority, accounting_enforce=frozenset()))


class _Check(Observer):
    """Calls a forecast's `check` every `CHECK_EVERY_PASSES` rounds: it raises to stop a run nobody waits for."""

    def __init__(self, check: Callable[[], None]) -> None:
        self._check = check
        self._rounds = 0

    def settled(self, now: int) -> None:
        self._rounds += 1
        if self._rounds % CHECK_EVERY_PASSES == 0:
            self._check()


class ClusterForwardSimulation:
    """The `predictor.forecasting.StartForecaster` of a server started with a cluster: `slurm` on its nodes, the
    other backfillings on a pool (`simulator.forecast.FORWARD_SIMULATION`)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = forward_order_cluster(cluster)

    def check(self, scheduler: Scheduler, state: QueueState) -> None:
        if scheduler.backfill != ON_NODES:
            FORWARD_SIMULATION.check(scheduler, state)
            return
        if scheduler.policy != "fcfs" or scheduler.backfill_order != "queue":
            raise ValueError(
                "policy and backfill_order: with backfill 'slurm' the waiting jobs are taken in the order given "
                f"(the site's priority order); got policy {scheduler.policy!r}, order {scheduler.backfill_order!r}"
            )
        if state.procs != self.cluster.procs:
            raise ValueError(f"machine_procs ({state.procs}) is not the cluster's CPU count ({self.cluster.procs})")
        jobs = [*(started.job for started in state.running), *state.waiting]
        if state.requests and len(state.requests) != len(jobs):
            raise ValueError(f"one request per job is needed: {len(state.requests)} for {len(jobs)} jobs")
        requests = dict(enumerate(_requests_of(state), start=1))
        queued, _ = queued_jobs(_frame(jobs), self.cluster, requests)
        for number in range(1, len(jobs) + 1):
            if number not in queued:  # why, from the job alone
                _, reasons = queued_jobs(_frame(jobs).iloc[number - 1 : number], self.cluster, requests)
                raise ValueError(f"{_place(state, number - 1)} cannot run on this cluster: {', '.join(reasons)}")

    def starts(
        self,
        state: QueueState,
        scheduler: Scheduler,
        running_ends: Sequence[int],
        waiting_runtimes: Sequence[int],
        check: Callable[[], None] | None = None,
    ) -> list[int]:
        """Every waiting job's start, in `state.waiting` order (see the module docstring)."""
        if scheduler.backfill != ON_NODES:
            return FORWARD_SIMULATION.starts(state, scheduler, running_ends, waiting_runtimes, check)
        given = list(range(len(state.running)))
        biggest = sorted(given, key=lambda i: _size(state.running[i].job), reverse=True)
        tries = [(given, True)] if any(r.nodelist for r in _requests_of(state)) else []
        tries += [(given, False), (biggest, False)]  # the nodes fragment otherwise: the biggest first, as a packer
        best = self._forward(state, *tries[0], running_ends, waiting_runtimes, check)
        for order, pinned in tries[1:]:
            if not best[1]:
                break
            attempt = self._forward(state, order, pinned, running_ends, waiting_runtimes, check)
            if attempt[1] < best[1]:
                best = attempt
        return best[0]

    def _forward(
        self,
        state: QueueState,
        order: Sequence[int],
        pinned: bool,
        running_ends: Sequence[int],
        waiting_runtimes: Sequence[int],
        check: Callable[[], None] | None,
    ) -> tuple[list[int], int]:
        """The waiting jobs' starts with the running jobs placed again in `order` (positions in `state.running`),
        on their listed nodes if `pinned`, and how many of those did not fit at `now` (they start once room frees,
        and hold their nodes after)."""
        now = state.now
        requests = _requests_of(state)
        if not pinned:
            requests = [replace(request, nodelist=()) for request in requests]
        running = [state.running[i] for i in order]
        jobs = [*(started.job for started in running), *state.waiting]
        left = [max(started.start + started.job.t_req - now, 1) for started in running]
        runs = [min(running_ends[i] - now, limit) for i, limit in zip(order, left, strict=True)]
        runs += [min(runtime, job.t_req) for runtime, job in zip(waiting_runtimes, state.waiting, strict=True)]
        table = _frame(jobs).assign(
            submit=now,
            t_req=left + [job.t_req for job in state.waiting],
            t_act=np.maximum(np.asarray(runs, dtype=np.int64), 1),
        )
        asked = [requests[i] for i in order] + list(requests[len(state.running) :])
        config = SimulationConfig(self.cluster.procs, "fcfs", SLURM, "none", "request")
        observers = [] if check is None else [_Check(check)]
        result = simulate_cluster(
            table,
            config,
            LocalSession(make_estimator("request")),
            self.cluster,
            dict(enumerate(asked, start=1)),
            observers=observers,
        )
        found = dict(zip(result.jobs["job_id"].tolist(), result.jobs["start"].tolist(), strict=True))
        late = sum(found[n] != now for n in range(1, len(order) + 1))
        return [int(found[n]) for n in range(len(order) + 1, len(jobs) + 1)], late


def _size(job: JobRequest) -> tuple[int, int, int]:
    """What a running job takes of its nodes, biggest first: memory, GPUs, CPUs."""
    return job.memory_mb, job.gpus, job.procs


def _frame(jobs: Sequence[JobRequest]) -> pd.DataFrame:
    """The jobs as a replay's table, numbered from 1 in the order given."""
    return pd.DataFrame(
        {
            "job_id": np.arange(1, len(jobs) + 1),
            "user": [job.user for job in jobs],
            "group": [job.group for job in jobs],
            "procs": [job.procs for job in jobs],
            "queue": [job.queue for job in jobs],
            "executable": [job.executable for job in jobs],
        }
    )


def _requests_of(state: QueueState) -> Sequence[ResourceRequest]:
    """Each job's request (running, then waiting): the state's, or its processors."""
    if state.requests:
        return state.requests
    return [ResourceRequest.processors(job.procs) for job in (*(s.job for s in state.running), *state.waiting)]


def _place(state: QueueState, position: int) -> str:
    """The request field of the job at `position` among the running, then the waiting jobs."""
    running = len(state.running)
    return f"running[{position}].job" if position < running else f"waiting[{position - running}]"
